"""The serving simulator page in Chromium: it simulates on open, follows a policy change and its link,
replays an arrival file and refuses a bad one without losing a setting. Screenshots go to artifacts/."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ARTIFACTS, browser_page

pytestmark = [pytest.mark.browser]

DONE = "requests met both targets"  # the caption under each policy's tiles: written only once a run is done


def _wait_done(page, count: int = 2) -> None:
    page.wait_for_function(
        f"""() => document.body.innerText.split({DONE!r}).length - 1 >= {count}
            && document.querySelectorAll('.js-plotly-plot').length >= 8""", timeout=120_000)


def test_opens_simulated_and_follows_a_policy_change(app_server, browser):
    with browser_page(browser, 1440, 6000) as page:
        page.goto(f"{app_server}/serving")
        _wait_done(page)
        assert page.locator("[data-testid=stException]").count() == 0
        body = page.inner_text("body")
        assert "A: Prefill first" in body and "B: Chunked prefill" in body
        assert "a 6," in body or "-token prompt arrives" in body  # the timeline marks the long prompt
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "serving-default.png"), full_page=True)
        box = page.get_by_label("Policy B")
        box.click()
        page.get_by_role("option", name="Disaggregated").click()
        page.get_by_text("B: Disaggregated").first.wait_for(timeout=120_000)
        _wait_done(page)
        assert "b=disaggregated" in page.url
        lanes = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(
            gd => (gd.data || []).filter(t => t.orientation === 'h').map(t => (t.y || [])[0]))""")
        assert any(str(lane).startswith("prefill server") for lane in lanes)
        assert any(str(lane).startswith("decode server") for lane in lanes)
        assert page.locator("[data-testid=stException]").count() == 0
        page.screenshot(path=str(ARTIFACTS / "serving-disaggregated.png"), full_page=True)


def test_a_link_sets_the_page_and_a_bad_value_is_a_notice(app_server, page):
    page.goto(f"{app_server}/serving?a=static&n=200&work=chat&budget=2048&hw=nonsense")
    _wait_done(page)
    body = page.inner_text("body")
    assert "A: Static batching" in body
    assert "200 requests" in body
    assert "hw='nonsense' could not be used" in body
    assert "evenly up to 1.5 ×" in body
    assert page.locator("[data-testid=stException]").count() == 0
    page.get_by_role("button", name="512", exact=True).click()  # the budget preset
    page.wait_for_function("() => !location.search.includes('budget=')", timeout=60_000)
    _wait_done(page)
    assert page.locator("[data-testid=stException]").count() == 0


def test_arrival_file_bad_then_good(app_server, page, tmp_path):
    page.goto(f"{app_server}/serving?n=100")
    _wait_done(page)
    upload = page.locator("[data-testid=stFileUploaderDropzoneInput]")
    # the box states the cap read_arrivals enforces (2 MB), not the server's 20 MB default
    assert "2MB per file" in page.get_by_test_id("stFileUploaderDropzoneInstructions").inner_text()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"arrival_s": 0, "prompt_tokens": 12}\n')
    upload.set_input_files(str(bad))
    page.get_by_text("cannot be replayed").wait_for(timeout=60_000)
    assert page.get_by_text("missing 'output_tokens'", exact=False).count() >= 1
    assert "n=100" in page.url  # the settings are untouched
    good = tmp_path / "mine.csv"
    good.write_text("arrival_s,prompt_tokens,output_tokens\n0,4000,20\n0.01,50,40\n0.02,60,40\n0.05,3000,10\n")
    upload.set_input_files(str(good))
    page.get_by_text("Replay mine.csv (4 requests)").wait_for(timeout=60_000)
    page.get_by_text("4 requests").first.wait_for(timeout=120_000)
    page.get_by_text("no rate to sweep").wait_for(timeout=120_000)
    assert page.get_by_text("replayed from mine.csv").count() == 1
    assert page.get_by_text("cannot be replayed").count() == 0
    assert page.locator("[data-testid=stException]").count() == 0


def test_prefix_caching_from_a_link_and_the_switch(app_server, page):
    """A link turns prefix caching on with the prefix-aware router on the Mooncake trace: both policies
    say how much of the prompts they reused, the ticks chart marks those requests; the switch turns
    it off again, the link forgets it and the line goes."""
    page.goto(f"{app_server}/serving?work=mooncake-conv&n=200&inst=4&pcache=1&router=prefix-aware")
    _wait_done(page)
    main = page.get_by_test_id("stMainBlockContainer")
    lines = main.get_by_text(re.compile(r"Prefix cache: [\d.]+% of prompt tokens reused"))
    assert lines.count() == 2
    assert main.get_by_text("prefix-aware router", exact=False).count() >= 2
    assert page.locator("[data-testid=stException]").count() == 0
    page.screenshot(path=str(ARTIFACTS / "serving-prefix-cache.png"), full_page=True)
    main.get_by_text("Prefix caching", exact=True).click()
    page.wait_for_function("() => !location.search.includes('pcache=')", timeout=60_000)
    # the new results have no such line (the old ones, still drawn until the new pass ends, had it)
    page.wait_for_function("() => !document.body.innerText.includes('Prefix cache: ')", timeout=120_000)
    _wait_done(page)
    assert page.locator("[data-testid=stException]").count() == 0
