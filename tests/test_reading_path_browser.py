"""The live page read as a newcomer with five minutes reads it, in Chromium after the page's default run:
the six questions as headings in page order, each answered in at most 50 words, at most 1,500 words
on the page without opening anything (app.devtools.words, the measure the page bench reports), the
details one click down, and the prompt, Generate and the cache grid on the first screen. The same run holds the live
page to WCAG 2 A/AA (axe-core), as tests/test_accessibility.py holds the other pages."""

from __future__ import annotations

import re

import pytest

from app.devtools.words import count_words, lesson_words
from app.views.live import sections
from tests.a11y import assert_clean
from tests.conftest import ARTIFACTS, browser_page

pytestmark = [pytest.mark.browser, pytest.mark.model]

READING_PATH_MAX_WORDS = 1500


def _in_first_screen(locator, height: int = 900) -> bool:
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


def test_after_a_run_the_page_reads_as_six_short_answers(app_server, browser):
    with browser_page(browser, 1440, 900) as page:
        page.goto(app_server)
        prompt = page.get_by_label("Prompt")
        prompt.wait_for(timeout=180_000)
        generate = page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Generate")
        assert _in_first_screen(prompt) and _in_first_screen(generate)
        generate.click()
        page.wait_for_function("""() => { const c = document.querySelector('.pd-controls');
            return c && c.dataset.status === 'done' && Number(c.dataset.available) > 0
                && c.dataset.shown === c.dataset.available; }""", timeout=180_000)
        # the sections drawn after the run: their answers need the run's numbers
        page.locator(".st-key-pd_answer_serving").wait_for(timeout=60_000)
        page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=120_000)
        headings = [h.strip() for h in page.get_by_role("heading", level=2).all_inner_texts()]
        questions = [s.question for s in sections.SECTIONS]
        assert [h for h in headings if h in questions] == questions, headings
        for s in sections.SECTIONS:
            answer = page.locator(f".st-key-pd_answer_{s.key}")
            assert answer.count() == 1, f"{s.key}: no answer on the page"
            assert count_words(answer.inner_text()) <= sections.ANSWER_MAX_WORDS, s.key
        _one_value_per_quantity(page)
        ARTIFACTS.mkdir(exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(ARTIFACTS / "reading-path-first-screen.png"))
        # the first screen shows the model at work: the cache grid beside the tiles and token streams
        assert _in_first_screen(page.locator(".pd-chart[data-chart=kv] .pd-plot")), \
            page.locator(".pd-chart[data-chart=kv] .pd-plot").bounding_box()
        assert_clean(page, "live")  # WCAG 2 A/AA after a run, as every page (tests/test_accessibility.py)
        words = lesson_words(page)
        assert words["lesson_words_default"] <= READING_PATH_MAX_WORDS, words
        # nothing deleted, only moved one click down: the details are several times the reading path
        assert words["lesson_words_total"] >= 3 * words["lesson_words_default"], words
        assert page.locator("[data-testid=stException]").count() == 0


def _one_value_per_quantity(page) -> None:
    """Each quantity the answers print is the value shown for it elsewhere on the page: the tiles' time
    to first token and time per output token, the weights' size in the traffic chart's title."""
    tiles = {t["label"]: t["value"] for t in page.evaluate("""() => Array.from(document.querySelectorAll('.pd-tile'))
        .map(t => ({label: t.querySelector('.pd-tile-label').innerText, value: t.querySelector('.pd-tile-value').innerText}))""")}
    answer = {s.key: page.locator(f".st-key-pd_answer_{s.key}").inner_text() for s in sections.SECTIONS}
    ttft, tpot = tiles["Time to first token"], tiles["Time per output token"]
    assert ttft in answer["phases"] and tpot in answer["phases"], (tiles, answer["phases"])
    assert tpot in answer["paper"], (tpot, answer["paper"])
    title = page.locator(".pd-chart[data-chart=traffic] .pd-chart-title").inner_text()
    weights = re.search(r"([\d,]+ MB)$", title).group(1)
    assert weights in answer["bandwidth"] and weights in answer["cache"], (weights, answer)
    assert re.findall(r"[\d,.]+ MB", answer["paper"]) and weights not in answer["paper"]  # a step's bytes, named apart
