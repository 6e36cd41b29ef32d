"""Two turns of one conversation through the page: the follow-up keeps the first turn's cache, the
KV grid draws the kept positions apart from the new ones, and both times to first token are shown."""

from __future__ import annotations

import re

import pytest

from app.devtools.words import scroll_through, visible_words
from tests.conftest import ARTIFACTS, live_state
from tests.test_reading_path_browser import READING_PATH_MAX_WORDS

pytestmark = [pytest.mark.browser, pytest.mark.model]

# The run in the live view is over and fully drawn: every step shown and the grid caught up.
SETTLED_JS = """(previous) => {
  const c = document.querySelector('.pd-controls');
  const kv = document.querySelector('.pd-chart[data-chart=kv]');
  if (!c || !kv || c.dataset.runId === previous || c.dataset.status !== 'done') return false;
  const available = Number(c.dataset.available || 0), shown = Number(c.dataset.shown || 0);
  const toks = document.querySelector('.pd-prompt-toks');
  const prompt = document.querySelectorAll('.pd-prompt-toks .pd-tok').length + Number((toks && toks.dataset.kept) || 0);
  return available > 0 && shown === available && Number(kv.dataset.kvColumns || 0) === prompt + available - 1;
}"""


def values_ms(ms: float) -> str:
    """A time as the page prints it (three significant figures, app.views.live.shown.sig3)."""
    from app.views.live.shown import sig3

    return sig3(ms)


def _settled(page, previous: str | None) -> dict:
    page.wait_for_function(SETTLED_JS, arg=previous, timeout=240_000)
    return live_state(page)


def test_a_follow_up_keeps_the_cache_and_shows_both_times(app_server, page):
    page.goto(app_server)
    page.get_by_label("Prompt").wait_for(timeout=240_000)
    page.get_by_label("Prompt").fill("Explain in two sentences why the sky is blue.")
    page.get_by_role("button", name="Generate").click()
    first = _settled(page, None)
    label = page.locator(".pd-prompt-box .pd-box-label")
    assert "nothing kept from before" in label.inner_text()  # a new conversation says it starts cold
    main = page.get_by_test_id("stMainBlockContainer")
    main.get_by_role("textbox", name="Ask a follow-up").fill("And why is the sunset red?")
    main.get_by_role("button", name="Ask", exact=True).click()
    second = _settled(page, first["runId"])
    assert second["exceptions"] == 0
    # the conversation is re-sent whole: the prompt strip holds more tokens than the first question
    assert second["prompt"] > first["prompt"] + first["available"] - 1
    # the kept positions, drawn apart from the new ones, in the grid's own notes
    notes = page.locator(".pd-chart[data-chart=kv] .pd-chart-note").all_inner_texts()
    kept = next(int(m.group(1)) for n in notes if (m := re.search(r"kept from the last turn: (\d+) positions", n)))
    new = next(int(m.group(1)) for n in notes if (m := re.search(r"prefill: (\d+) new positions", n)))
    assert kept >= first["prompt"] + first["available"] - 2 and kept + new == second["prompt"]
    strip = page.locator(".pd-prompt-toks")
    assert strip.get_attribute("data-kept") == str(kept)  # the token strip folds the same kept positions
    assert page.locator(".pd-prompt-toks .pd-tok").count() == new
    assert f"prefill reads only the {new} new ones" in label.inner_text()
    # the cache section: one sentence with this turn's figures, and the two measured times drawn
    said = main.get_by_text(re.compile(r"This follow-up paid for \d+ new tokens, not \d+")).inner_text()
    assert f"paid for {new} new tokens, not {second['prompt']}" in said
    ttft, scratch = (float(x) for x in re.search(r"after ([\d.]+) ms, against ([\d.]+) ms from scratch", said).groups())
    figure = page.locator(".stPlotlyChart").filter(has_text="time to first token")
    figure.first.wait_for(timeout=30_000)
    bars = figure.first.inner_text()
    figure.first.screenshot(path=str(ARTIFACTS / "follow-up-ttft.png"))
    assert f"{ttft:g} ms" in bars.replace(".0 ms", " ms") or f"{ttft} ms" in bars
    assert scratch > 0 and ttft > 0
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "follow-up.png"), full_page=True)
    # the reading path still fits after a follow-up: one sentence and one figure more, the kept tokens folded
    page.set_viewport_size({"width": 1440, "height": 900})
    page.locator(".st-key-pd_answer_serving").wait_for(timeout=60_000)  # the sections drawn after the run
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=120_000)
    scroll_through(page)
    words = visible_words(page)
    (ARTIFACTS / "follow-up-words.txt").write_text(f"{words}\n\n" + page.evaluate(
        "() => (document.querySelector('[data-testid=stMain]') || document.body).innerText"))
    assert words <= READING_PATH_MAX_WORDS, words
    # the presenter tour carries the follow-up: its own step, with this turn's figures
    page.get_by_text("Presenter mode").click()
    tour = page.locator(".st-key-pd_tour")
    tour.wait_for(timeout=30_000)
    for _ in range(8):
        before = tour.inner_text()
        if "A follow-up keeps the cache" in before:
            break
        tour.get_by_role("button", name="Next ▶").click()
        # the step's title read before the click: the page has moved on once it is gone
        page.wait_for_function("(n) => { const t = document.querySelector('.st-key-pd_tour');"
                               " return t && !t.innerText.includes(n); }", arg=before.split("\n")[0])
    text = tour.inner_text()
    assert "A follow-up keeps the cache" in text
    assert f"{kept} positions were not computed again" in text and f"only the {new} new tokens" in text
    assert f"after {values_ms(ttft)} ms, against {values_ms(scratch)} ms" in text
