"""The live page's reading path as values: six questions, each answered in at most 50 words with a run's
numbers, every live chart under one of them. The browser test (test_reading_path_browser) holds the
page to it; these check the answers themselves on the tiny model, no browser."""

from __future__ import annotations

import re

import pytest

from app.shared import experiment_results as results
from app.shared.context import Ceilings, build_context
from app.views.live import charts, lesson, panel_figures, sections, serving_sketch
from core.runner import GenerationSettings, generate_trace

QUESTIONS = (  # in the words
    "What is the difference between prefill and decode?",
    "Why is LLM decode memory bandwidth bound?",
    "How does the KV cache affect generation latency?",
    "Why is decode often slower than it looks on paper?",
    "Why should serving systems schedule prefill and decode separately?",
    "What does batching do to decode?",
)


@pytest.fixture(scope="module")
def run(tiny_model):
    from app.shared.model import make_annotator

    settings = GenerationSettings(max_new_tokens=12, stop_on_eos=False)
    trace = generate_trace(tiny_model, "hello there", settings, annotate=make_annotator(tiny_model))
    ctx = build_context(tiny_model, trace.prompt_token_ids, 12, 1, "dynamic", Ceilings(7e9, 7e10, None, "test"))
    return trace, ctx


@pytest.fixture(scope="module")
def values(tiny_model, run):
    trace, ctx = run
    v = lesson.values_for(trace.events, ctx)
    v.update(serving_sketch.slot_values(trace.events, ctx, serving_sketch.step_time_for(tiny_model.config, "fp32")))
    bundled = results.load_bundled("batching")  # not shown_before_press: an earlier test may have measured
    assert bundled is not None and bundled.source == "bundled"
    v.update(panel_figures.batching_answer_values(bundled.result, recorded=True))
    compared = results.load_bundled("compare")
    assert compared is not None and compared.source == "bundled"
    v.update(panel_figures.compare_answer_values(compared.result, recorded=True))
    return v


def test_the_six_questions_in_the_lessons_words():
    assert {s.question for s in sections.SECTIONS} == set(QUESTIONS)
    assert len(sections.SECTIONS) == 6


def test_every_live_chart_sits_under_a_question():
    keys = {s.key for s in sections.SECTIONS}
    assert {c.section for c in charts.LIVE_CHARTS} <= keys
    # the live charts' questions come first: they are drawn in one fragment above the others
    order = [s.key for s in sections.SECTIONS]
    live = {c.section for c in charts.LIVE_CHARTS}
    assert order[:len(live)] == [k for k in order if k in live]


@pytest.mark.parametrize("key", [s.key for s in sections.SECTIONS])
def test_each_answer_is_short_and_carries_the_runs_numbers(values, key):
    text = sections.answer(key, values)
    assert text, f"{key}: an answer slot had no value"
    assert "[[" not in text and "—" not in text
    words = len(text.split())
    assert words <= sections.ANSWER_MAX_WORDS, f"{key}: {words} words"
    assert any(ch.isdigit() for ch in text), f"{key}: no number from the run"
    prose = text.split("\n\n")[0]  # the marks follow on their own line
    assert len(re.findall(r"[.!?](?:\s|$)", prose)) <= 2, f"{key}: more than two sentences"
    assert "(measured" not in text and "(computed" not in text  # marks, not parenthetical tags


def test_an_answer_waits_for_every_number_it_needs(values):
    partial = {k: v for k, v in values.items() if k != "ttft_ms"}
    assert sections.answer("phases", partial) == ""
    assert sections.answer("phases", values).count(f": {values['ttft_ms']} ms") == 1


def test_the_answers_print_the_same_figures_as_the_details(values):
    """One value per quantity: a number an answer prints is the one its section's details print."""
    assert values["weights_mb"] in sections.answer("bandwidth", values)
    assert f"{values['weights_mb']} MB" in lesson.text("q2_bandwidth", values)
    assert values["paper_ms"] in sections.answer("paper", values)
    assert f"**{values['paper_ms']} ms**" in lesson.text("q_paper", values)
    assert f"**{values['stall_whole_s']} s**" in lesson.text("serving", values)
    assert f"{values['stall_whole_s']} s" in sections.answer("serving", values)


@pytest.mark.parametrize("reasons", [(), ("fixed",), ("stream",), ("unexplained",), ("fixed", "stream"),
                                     ("fixed", "stream", "unexplained")])
def test_the_paper_answer_blames_only_what_the_numbers_support(values, reasons):
    """Its second sentence is a reading of this run's medians (lesson.paper_reasons), short in every case."""
    text = sections.answer("paper", {**values, "paper_rest": lesson.paper_rest(reasons)})
    assert len(text.split()) <= sections.ANSWER_MAX_WORDS, text
    assert ("fixed cost" in text) == ("fixed" in reasons) and ("slower than the benchmark" in text) == ("stream" in reasons)
    assert ("GPU" in text) == (bool(reasons) and "unexplained" not in reasons)


def test_paper_reasons_follow_the_numbers():
    terms = {"overhead": 11.0, "memory": 61.5, "kv": 1.6, "compute": 3.0}
    # the weights' predicted time under bytes ÷ bandwidth, the step far over its prediction: no stream blamed
    assert lesson.paper_reasons(terms, 131.9, 100.0, 77.0) == ("fixed", "unexplained")
    assert lesson.paper_reasons(terms, 131.9, 176.0, 77.0) == ("unexplained",)  # 11 ms: under a tenth of 176
    assert lesson.paper_reasons({**terms, "memory": 150.0, "overhead": 20.0}, 131.9, 170.0, 166.0) == ("fixed", "stream")
    assert lesson.paper_reasons({**terms, "overhead": 1.0}, 131.9, 140.0, 135.0) == ()


def test_a_run_faster_than_paper_is_not_explained_by_extra_costs(values):
    """A run whose steps beat bytes ÷ the calibrated bandwidth (a calibration made at a busier moment)
    gets an answer that says so, not one that blames fixed costs for a gap that is not there."""
    text = sections.answer("paper", {**values, "paper_rest": lesson.FASTER_THAN_PAPER})
    assert len(text.split()) <= sections.ANSWER_MAX_WORDS and "fixed cost" not in text


def test_the_paper_answer_reads_which_side_of_paper_the_run_fell(values):
    assert lesson.paper_rest(("fixed", "stream"), faster=True) == lesson.FASTER_THAN_PAPER
    assert lesson.paper_rest(("fixed",), faster=False).startswith("The rest is per-layer fixed cost")
    # the run's own values: its TPOT against its paper time decides, as printed
    faster = float(values["tpot_ms"]) <= float(values["paper_ms"])
    assert (values["paper_rest"] == lesson.FASTER_THAN_PAPER) == faster
