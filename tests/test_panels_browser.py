"""The on-demand panels in Chromium: cache on/off comparison, batching, and "about this run"; and the
page in the dark theme. A short real run first; before any press both panels must show the bundled
recordings with their labels, then each panel's button replaces its recording with the reader's own
result; the panels must draw their charts, say which numbers are measured or predicted, and leave no
exception. Screenshots go to artifacts/ (look at them)."""

from __future__ import annotations

import pytest

from tests.conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.model, pytest.mark.slow]


def _context_page(browser, scheme: str):
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, color_scheme=scheme)
    return context, context.new_page()


@pytest.fixture
def light_page(browser):
    context, pg = _context_page(browser, "light")
    yield pg
    context.close()


@pytest.fixture
def dark_page(browser):
    context, pg = _context_page(browser, "dark")
    yield pg
    context.close()


def _set_slider(page, label: str, steps_from_min: int) -> None:
    slider = page.get_by_role("slider", name=label)
    slider.focus()
    page.keyboard.press("Home")
    for _ in range(steps_from_min):
        page.keyboard.press("ArrowRight")


def _generate(page, url: str, prompt: str, tokens: int) -> None:
    page.goto(url)
    page.get_by_label("Prompt").wait_for(timeout=180_000)
    page.get_by_label("Prompt").fill(prompt)
    _set_slider(page, "Max new tokens", tokens - 1)
    page.get_by_role("button", name="Generate").click()
    page.get_by_test_id("pd-output").wait_for(timeout=180_000)


def _shot(locator, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(ARTIFACTS / name))


YOUR_RUN = "Measured just now on this server (your run"


def test_compare_batching_and_about_panels_render(app_server, light_page):
    page = light_page
    _generate(page, app_server, "What is the capital of France?", 6)
    compare = page.locator(".st-key-pd_panel_compare")
    batching = page.locator(".st-key-pd_panel_batching")
    # Before any press both panels show the bundled recordings, labelled, with their charts and numbers.
    for panel, title in ((compare, "The recording's prompt"), (batching, "Decode on the recording machine")):
        panel.get_by_text("Recorded on ").wait_for(timeout=60_000)
        panel.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
        assert title in panel.locator(".gtitle").text_content()
        assert "not your run, and speeds vary between sessions" in panel.locator(".st-key-pd_compare_source, "
                                                                   ".st-key-pd_batching_source").text_content()
    assert "Prompt of this recording" in compare.text_content()
    assert "step time grew" in batching.text_content() and "Roofline estimate:" in batching.text_content()
    _shot(compare, "panel-compare-recorded.png")
    _shot(batching, "panel-batching-recorded.png")
    _set_slider(page, "Tokens to generate in each mode", 6)  # 4 + 6 = 10 tokens: a few seconds
    compare.get_by_role("button", name="Compare cache modes").click()
    # The reader's own result replaces the recording when every forward is measured: the label, chart and
    # summary come in the same pass; Plotly then draws the chart in the browser, so wait for it to exist
    # rather than count it at once.
    compare.get_by_text(YOUR_RUN).wait_for(timeout=180_000)
    # the cache question's answer stays this run's (its steps and prefill), whichever comparison is shown
    assert "a whole-sequence prefill, each longer" in compare.locator(".st-key-pd_answer_cache").text_content()
    assert "without the cache these 10 forwards took" in compare.text_content()
    assert compare.get_by_text("Recorded on ").count() == 0
    compare.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
    assert compare.locator(".js-plotly-plot").count() == 1
    assert "generated three ways" in compare.locator(".gtitle").text_content()
    assert "Your prompt (" in compare.locator(".gtitle").text_content()
    batching.get_by_role("button", name="Measure batch sizes").click()
    batching.get_by_text(YOUR_RUN).wait_for(timeout=180_000)  # the recording's text said this too: wait for ours
    batching.get_by_text("from batch 1 to 64 each reader's token took").first.wait_for(timeout=180_000)  # the answer
    assert batching.get_by_text("Recorded on ").count() == 0
    batching.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
    assert "compute-bound from" in batching.locator(".js-plotly-plot").text_content()
    assert "Decode on this machine" in batching.locator(".gtitle").text_content()
    page.get_by_text("About this run").click()
    about = page.locator(".st-key-pd_about")
    about.get_by_text("weight-stream bandwidth").wait_for(timeout=30_000)
    assert page.get_by_test_id("stException").count() == 0
    _shot(compare, "panel-compare.png")
    _shot(batching, "panel-batching.png")
    _shot(about, "panel-about.png")


def test_dark_theme_page(app_server, dark_page):
    page = dark_page
    _generate(page, app_server, "List three facts about the Moon.", 12)
    page.wait_for_function("document.querySelector('.pd-controls').dataset.shown == "
                           "document.querySelector('.pd-controls').dataset.available", timeout=60_000)
    assert page.get_by_test_id("stException").count() == 0
    ARTIFACTS.mkdir(exist_ok=True)
    page.set_viewport_size({"width": 1440, "height": 5200})
    page.wait_for_timeout(800)
    page.screenshot(path=str(ARTIFACTS / "dark-page.png"))
