"""Every page held to WCAG 2 A and AA in Chromium (axe-core: no serious or critical violation after a
run; the live page's check runs in tests/test_reading_path_browser.py, on the run that test makes
anyway), and the live page used with the keyboard alone. What assistive technology reads is checked
with Playwright's aria_snapshot (Streamlit marks its Material icons aria-hidden), not inner_text.
Screenshots go to artifacts/."""

from __future__ import annotations

import pytest

from tests.a11y import assert_clean
from tests.conftest import ARTIFACTS, browser_page, live_state

pytestmark = [pytest.mark.browser]


def _idle(page) -> None:
    """No script run in flight: Streamlit shows its status widget for as long as one lasts."""
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=120_000)


def test_whatif_page_has_no_serious_violation(app_server, browser):
    with browser_page(browser, 1440, 1000) as page:
        page.goto(f"{app_server}/whatif")
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 5", timeout=120_000)
        _idle(page)
        assert_clean(page, "whatif")


def test_serving_page_after_a_simulation_has_no_serious_violation(app_server, browser):
    with browser_page(browser, 1440, 1000) as page:
        page.goto(f"{app_server}/serving")
        page.wait_for_function("""() => document.body.innerText.split('requests met both targets').length - 1 >= 2
            && document.querySelectorAll('.js-plotly-plot').length >= 8""", timeout=120_000)
        _idle(page)
        assert_clean(page, "serving")


def test_engine_lab_page_has_no_serious_violation(app_server, browser):
    with browser_page(browser, 1440, 1000) as page:
        page.goto(f"{app_server}/engines")
        page.wait_for_function("""() => {
            const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
            return plots.length >= 3 && plots.every(gd => gd._fullLayout && (gd.data || []).length > 0); }""",
            timeout=120_000)
        _idle(page)
        assert_clean(page, "engines")


def _tab_to(page, role: str, name: str, limit: int = 80, key: str = "Tab", within=None) -> None:
    """Press Tab (or Shift+Tab) until the focused element is the one assistive technology calls
    `role` `name` (looked for `within` a part of the page, when given); fails if that takes more than
    `limit` presses (not reachable by the keyboard)."""
    target = (within or page).get_by_role(role, name=name, exact=True)
    for _ in range(limit):
        page.keyboard.press(key)
        if target.evaluate("el => el === document.activeElement || el.contains(document.activeElement)"):
            return
    raise AssertionError(f"{role} {name!r} never took the focus in {limit} Tab presses")


@pytest.mark.model
def test_the_live_page_with_the_keyboard_alone(app_server, browser):
    with browser_page(browser, 1440, 1000) as page:
        page.goto(app_server + "/?max_new_tokens=256")  # a run long enough to be stopped
        page.get_by_role("button", name="Generate").wait_for(timeout=180_000)
        _idle(page)
        # what a screen reader announces for the controls: names, not icon ligatures
        snapshot = page.get_by_test_id("stMainBlockContainer").aria_snapshot()
        (ARTIFACTS / "a11y-live-aria.txt").write_text(snapshot)
        assert 'button "Generate"' in snapshot and 'textbox "Prompt"' in snapshot, "see artifacts/a11y-live-aria.txt"
        assert "keyboard_arrow" not in snapshot and "arrow_drop_down" not in snapshot
        _tab_to(page, "textbox", "Prompt")
        page.keyboard.press("Control+A")
        page.keyboard.type("Tell me a long story about a lighthouse.")
        _tab_to(page, "button", "Generate")
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('.pd-controls')?.dataset.status === 'running'"
                               " && Number(document.querySelector('.pd-controls').dataset.available) > 2",
                               timeout=180_000)
        assert "lighthouse" in live_state(page)["promptText"].replace(" ", "").replace("\n", "")
        # the pace keys, with the focus on the page rather than a text box
        page.evaluate("document.activeElement && document.activeElement.blur()")
        page.keyboard.press("Space")
        page.wait_for_function("document.querySelector('.pd-controls').dataset.mode === 'paused'", timeout=10_000)
        shown = live_state(page)["shown"]
        # a step forward shows the next step received; paused at the newest one it has nothing to show
        # until the model (still running) sends another, so wait for one, as the page reports it
        page.wait_for_function(f"Number(document.querySelector('.pd-controls').dataset.available) > {shown}",
                               timeout=60_000)
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"Number(document.querySelector('.pd-controls').dataset.shown) === {shown + 1}",
                               timeout=10_000)
        page.keyboard.press("ArrowLeft")
        page.wait_for_function(f"Number(document.querySelector('.pd-controls').dataset.shown) === {shown}",
                               timeout=10_000)
        page.keyboard.press("s")
        page.wait_for_function("document.querySelector('.pd-controls').dataset.mode === 'slow'", timeout=10_000)
        page.keyboard.press("l")
        page.wait_for_function("document.querySelector('.pd-controls').dataset.mode === 'live'", timeout=10_000)
        # Stop, reached with Tab from the top of the page, while the model is still running
        page.evaluate("window.scrollTo(0, 0); document.activeElement && document.activeElement.blur()")
        # the page's own Stop: while a script pass runs, Streamlit's toolbar shows a "Stop" button too
        main = page.get_by_test_id("stMainBlockContainer")
        _tab_to(page, "button", "Stop", within=main)
        assert main.get_by_role("button", name="Stop", exact=True).is_enabled()  # the run is still going
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('.pd-controls').dataset.status === 'stopped'", timeout=60_000)
        _idle(page)
        # presenter mode and its tour: back up from Stop to the toggle, Space, then the tour with N and P
        _tab_to(page, "switch", "Presenter mode", key="Shift+Tab")
        page.keyboard.press("Space")
        tour = page.locator(".st-key-pd_tour h3")
        tour.wait_for(timeout=30_000)
        first = tour.inner_text()
        # the tour's keys listen once their small component has mounted (presenter.py sets this flag)
        page.wait_for_function("window.pdLab && window.pdLab.tourKeys === true", timeout=30_000)
        page.evaluate("document.activeElement && document.activeElement.blur()")
        _idle(page)
        page.wait_for_function("!document.querySelector('.st-key-pd_tour_next button').disabled", timeout=30_000)
        page.keyboard.press("n")
        page.wait_for_function("(t) => document.querySelector('.st-key-pd_tour h3').innerText !== t", arg=first,
                               timeout=30_000)
        # the key clicks the Previous button, which the pass that showed step 2 enables: wait for that
        # pass to be over and the button enabled, or the key finds it still disabled and does nothing
        _idle(page)
        page.wait_for_function("!document.querySelector('.st-key-pd_tour_prev button').disabled", timeout=30_000)
        page.keyboard.press("p")
        page.wait_for_function("(t) => document.querySelector('.st-key-pd_tour h3').innerText === t", arg=first,
                               timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "a11y-keyboard-presenter.png"))
