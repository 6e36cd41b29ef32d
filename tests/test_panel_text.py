"""The panels' details (app.views.live.panel_text): which fragments a result reads as and the numbers
filled into them, checked as values; the words themselves live in assets/lesson/panels/."""

from __future__ import annotations

import re

import pytest

from app.views.live import lesson, panel_text
from app.views.live.lesson import LESSON_DIR
from tests.test_panels import _compare_result


@pytest.fixture(scope="module")
def run_data(tiny_model):
    """A short run of the tiny model with its context: what the redraw notes are counted on."""
    from app.shared.context import Ceilings, build_context
    from core.runner import GenerationSettings, generate_trace
    from tests.test_figures import MAX_NEW, _annotator

    trace = generate_trace(tiny_model, "hi <b>&", GenerationSettings(max_new_tokens=MAX_NEW, stop_on_eos=False),
                           annotate=_annotator(tiny_model))
    ctx = build_context(tiny_model, trace.prompt_token_ids, MAX_NEW, 1, "dynamic", Ceilings(7e9, 7e10, None, "test"))
    return trace.events, ctx


def _names(paragraphs) -> list[list[str]]:
    return [[name for name, _ in paragraph] for paragraph in paragraphs]


def _part(paragraphs, name: str) -> dict[str, str]:
    found = [values for paragraph in paragraphs for n, values in paragraph if n == name]
    assert len(found) == 1, (name, _names(paragraphs))
    return found[0]


STEPS = ((1, 57.25), (2, 60.0), (4, 66.0), (8, 75.5), (16, 92.4))


def _batching(**extra) -> dict:
    rows = [{"batch": b, "decode step ms (measured, median)": ms, "tokens/s (measured)": round(b * 1000 / ms, 1),
             "prefill ms (measured)": 100.0 * b} for b, ms in STEPS]
    return {"rows": rows, "prompt_len": 39, "compute_bound_from": 38.0,
            "roofline": {"ridge_flop_per_byte": 11.12, "decode_intensity": 0.502, "batch": 22.2}, **extra}


RECORDING_ROOF = {"ridge_flop_per_byte": 14.7, "decode_intensity": 0.5, "batch": 29.4,
                  "peak_flops_per_s": 147e9, "bandwidth_bytes_per_s": 10e9}
HERE_ROOF = {"ridge_flop_per_byte": 6.5, "decode_intensity": 0.51, "batch": 12.7, "peak_flops_per_s": 102e9,
             "bandwidth_bytes_per_s": 15.8e9}


def test_the_cache_comparison_reads_its_totals_and_flags_the_no_cache_line_only_when_it_runs_off():
    res = _compare_result()
    parts = panel_text.compare_parts(res)
    assert _names(parts) == [["cache_off"], ["static_cache"]]  # the no-cache line within 10%: nothing to flag
    off = _part(parts, "cache_off")
    assert (off["n"], off["off_s"], off["on_s"], off["prompt"]) == ("6", "1.3", "0.6", "30")
    assert off["off_ratio"] == f"{sum(res['modes']['none']) / sum(res['modes']['dynamic']):.1f}"
    assert (off["off_step"], off["on_step"]) == ("215", "80")  # the mean decode step, prefill left out
    assert off["lead"] == panel_text.words("lead_here")
    assert panel_text.static_verdict(1.05) == "noise" and panel_text.static_verdict(1.2) == "ratio"
    measured = res["modes"]["none"]
    assert panel_text.no_cache_gap(measured, [m / 1.05 for m in measured]) is None
    assert panel_text.no_cache_gap(measured, [m / 1.3 for m in measured]) == ("below", pytest.approx(1 - 1 / 1.3))
    assert panel_text.no_cache_gap(measured, [m / 0.7 for m in measured]) == ("above", pytest.approx(1 / 0.7 - 1))
    low = {**res, "predicted": {"none": [m / 1.3 for m in measured]}}
    for recorded in (False, True):
        parts = panel_text.compare_parts(low, recorded)
        gap = _part(parts, "no_cache_below")
        assert gap["gap_pct"] == "23%"
        assert gap["whose"] == panel_text.words("no_cache_whose_recorded" if recorded else "no_cache_whose_here")
        assert _part(parts, "cache_off")["lead"] == panel_text.words("lead_recorded" if recorded else "lead_here")
    assert panel_text.compare_parts({"modes": {"dynamic": [200.0]}}) == []


def test_batching_reads_every_figure_from_the_result():
    """Step times and throughput at both ends, each doubling's gain, the roofline estimate (ridge ÷
    intensity, a division a reader can redo) and the latency model's crossover."""
    parts = panel_text.batching_parts(_batching())
    assert _names(parts) == [["batching_growth"], ["batching_where", "batching_roofline", "batching_latency"],
                             ["close_both"]]
    growth = _part(parts, "batching_growth")
    assert {k: growth[k] for k in ("b0", "b1", "step_growth", "t0", "t1", "rows_ratio", "gain", "r0", "r1", "ideal")} \
        == {"b0": "1", "b1": "16", "step_growth": "1.6", "t0": "57.25", "t1": "92.4", "rows_ratio": "16",
            "gain": "9.9", "r0": "17.5", "r1": "173", "ideal": "2"}
    assert growth["doublings"].startswith("×1.91 (1 → 2), ×1.82 (2 → 4)") and growth["doublings"].endswith("×1.63 (8 → 16)")
    roof = _part(parts, "batching_roofline")
    assert (roof["intensity"], roof["ridge"], roof["batch"]) == ("0.50", "11.1", "22")
    assert round(float(roof["ridge"]) / float(roof["intensity"])) == int(roof["batch"])
    assert "39" in roof["at"] and roof["speeds"] == ""  # no ceilings carried: none printed
    assert _part(parts, "batching_latency")["crossover"] == "38"
    assert _part(parts, "batching_latency")["side"] == panel_text.words("crossover_past")
    assert panel_text.unforeseen_jump(_batching()["rows"]) is None  # nothing predicted per step
    # the step prints as the table holds it, so 1000 ÷ 65.56 gives the printed 15.3 (1000 ÷ 65.6 would be 15.2)
    rounded = [{"batch": b, "decode step ms (measured, median)": ms, "tokens/s (measured)": round(b * 1000 / ms, 1)}
               for b, ms in ((1, 65.56), (2, 70.0))]
    growth = _part(panel_text.batching_parts({"rows": rounded}), "batching_growth")
    assert (growth["t0"], growth["t1"], growth["r0"], growth["r1"]) == ("65.56", "70", "15.3", "28.6")
    assert panel_text.batching_parts({"rows": rounded[:1]}) == []


def test_a_crossover_inside_the_measured_range_says_what_the_measurement_did_past_it():
    rows = _batching()["rows"]
    assert panel_text.crossover_side(rows, 38.0) == ("past", None)
    side, at = panel_text.crossover_side(rows, 12.0)  # between the measured 8 and 16
    assert side == "inside" and at["batch"] == 8
    parts = panel_text.batching_parts(_batching(compute_bound_from=12.0))
    assert _part(parts, "batching_latency")["side"] == panel_text.words(
        "crossover_inside", {"gain": f"{2 * 75.5 / 92.4:.2f}", "at": "8", "b1": "16"})


def test_the_step_the_latency_model_least_expected_gets_its_own_sentence():
    predicted = {1: 55.0, 2: 56.0, 4: 58.0, 8: 62.0, 16: 70.0}
    jumpy = _batching()
    jumpy["rows"] = [{**r, "decode step ms (predicted)": predicted[r["batch"]]} for r in jumpy["rows"]]
    jumpy["rows"][2]["decode step ms (measured, median)"] = 95.0  # batch 4 far slower than predicted
    a, b, pa, pb = panel_text.unforeseen_jump(jumpy["rows"])
    assert (a["batch"], b["batch"], pa, pb) == (2, 4, 56.0, 58.0)
    jump = _part(panel_text.batching_parts(jumpy), "batching_jump")
    assert jump == {"a": "2", "b": "4", "measured_pct": "58", "ta": "60", "tb": "95", "predicted_pct": "4",
                    "pa": "56", "pb": "58"}


def test_a_recordings_batching_gives_this_servers_estimate_first_and_names_why_there_are_others():
    """A recording's figures are the recording machine's: with `here`, the details open with this
    server's roofline estimate, then the recording machine's by the same rule, then its latency model,
    each named as another machine or another rule, and add this server's own estimate as a bullet."""
    rows = [{"batch": b, "decode step ms (measured, median)": ms, "tokens/s (measured)": round(b * 1000 / ms, 1)}
            for b, ms in ((1, 65.6), (64, 277.0))]
    result = {"rows": rows, "prompt_len": 39, "compute_bound_from": 54.0, "roofline": RECORDING_ROOF}
    where = "the recording machine"
    parts = panel_text.batching_parts(result, where, HERE_ROOF)
    assert _names(parts)[1] == ["batching_where", "batching_roofline", "batching_latency", "batching_here"]
    assert _part(parts, "batching_growth")["lead"] == panel_text.words("lead_recorded")
    assert _part(parts, "batching_roofline")["speeds"] == panel_text.words("speeds", {"gflops": "147", "gbs": "10.00"})
    here = _part(parts, "batching_here")
    assert (here["ridge"], here["batch"], here["where"]) == ("6.5", "13", where)
    assert here["speeds"] == panel_text.words("speeds", {"gflops": "102", "gbs": "15.80"})
    assert _part(parts, "batching_where")["in_short"] == "; ".join([
        panel_text.words("in_short_here", {"batch": "13"}),
        panel_text.words("in_short_there", {"where": where, "batch": "29"}),
        panel_text.words("in_short_model", {"whose": f"{where}'s", "batch": "54"})])
    mine = panel_text.batching_parts(result)  # measured here: no second machine to name
    assert "batching_here" not in _names(mine)[1]
    assert _part(mine, "batching_where")["in_short"].startswith(panel_text.words("in_short_rule", {"batch": "29"}))
    assert _names(panel_text.batching_parts({"rows": rows, "roofline": RECORDING_ROOF}))[-1] == ["close_gpu"]


def test_a_recordings_number_beside_the_run_gives_both_figures_and_how_far_apart():
    assert panel_text.how_far(100.0, 105.0)[0] == "close"
    assert panel_text.how_far(131.4, 279.2) == ("here", pytest.approx(279.2 / 131.4))
    assert panel_text.how_far(150.0, 100.0) == ("there", pytest.approx(1.5))
    what = "the prefill of this same prompt (40 tokens, dynamic cache)"
    parts = panel_text.beside_run_parts([(what, 131.4, 279.2)])
    assert _names(parts) == [["beside_run", "recording_moment"]]  # no ceilings given: nothing said of them
    assert _part(parts, "beside_run") == {"what": what, "there_ms": "131", "here_ms": "279",
                                          "how_far": panel_text.words("how_far_here", {"ratio": "2.1"})}
    assert panel_text.beside_run_parts([]) == []
    there = {"peak_flops_per_s": 154.2e9, "bandwidth_bytes_per_s": 10.5e9}
    here = {"peak_flops_per_s": 106.9e9, "bandwidth_bytes_per_s": 21.57e9}
    both = panel_text.beside_run_parts([("x", 142.0, 220.0), ("y", 65.6, 42.5)], there, here)
    assert _names(both) == [["beside_run", "beside_run", "ceilings", "recording_moment"]]
    assert _part(both, "ceilings") == {"flops_there": "154", "flops_here": "107", "bw_there": "10.50",
                                       "bw_here": "21.57"}


def test_the_two_recordings_step_times_are_reconciled_with_their_own_figures():
    """The cache recording's mean step and the batching recording's batch-1 median differ (a reviewer
    found 58 and 65.6 ms unexplained): one sentence names both, each recording's date and the memory
    bandwidth each session calibrated, all read from the recordings."""
    from app.shared import experiment_results as results

    c, b = results.load_bundled("compare"), results.load_bundled("batching")
    bw = [m.provenance["predictor"]["bandwidth_bytes_per_s"] for m in (c, b)]
    parts = panel_text.two_recordings_parts(c.result, b.result, ("3 December", "4 December"), tuple(bw))
    dyn = c.result["modes"]["dynamic"][1:]
    batch1 = next(r for r in b.result["rows"] if r["batch"] == 1)["decode step ms (measured, median)"]
    assert _part(parts, "two_recordings") == {
        "date_cache": "3 December", "date_batching": "4 December", "cache_step": f"{sum(dyn) / len(dyn):.0f}",
        "batch1_step": f"{batch1:.3g}", "bw_cache": f"{bw[0] / 1e9:.2f}", "bw_batching": f"{bw[1] / 1e9:.2f}"}
    assert panel_text.two_recordings(c.result, b.result, ("a", "b"), (None, bw[1])) == ""
    assert panel_text.two_recordings({"modes": {}}, b.result, ("a", "b"), tuple(bw)) == ""


def _every_case():
    res = _compare_result()
    low = {**res, "predicted": {"none": [m / 1.3 for m in res["modes"]["none"]]}}
    high = {**res, "predicted": {"none": [m / 0.7 for m in res["modes"]["none"]]}}
    slow_static = {**res, "modes": {**res["modes"], "static": [400.0] * 6}}
    for r in (res, low, high, slow_static):
        yield panel_text.compare_parts(r), panel_text.compare_parts(r, True)
    predicted = {1: 55.0, 2: 56.0, 4: 58.0, 8: 62.0, 16: 70.0}
    jumpy = _batching(compute_bound_from=12.0)
    jumpy["rows"] = [{**r, "decode step ms (predicted)": predicted[r["batch"]]} for r in jumpy["rows"]]
    jumpy["rows"][2]["decode step ms (measured, median)"] = 95.0
    # a ridge that prints as 0.0 gives no estimate to lead with: the heading stands bare
    no_lead = _batching(roofline={"ridge_flop_per_byte": 0.01, "decode_intensity": 0.5, "batch": 0.02},
                        compute_bound_from=None)
    for r in (_batching(), jumpy, _batching(roofline=RECORDING_ROOF, compute_bound_from=None), no_lead):
        yield panel_text.batching_parts(r), panel_text.batching_parts(r, "the recording machine", HERE_ROOF)
    yield (panel_text.beside_run_parts([("x", 100.0, 105.0), ("y", 150.0, 100.0), ("z", 100.0, 150.0)],
                                       RECORDING_ROOF, HERE_ROOF),)
    yield (panel_text.two_recordings_parts(res, _batching(), ("a", "b"), (1e10, 2e10)),)


def test_every_fragment_is_reached_and_every_slot_filled(monkeypatch, run_data):
    """Every fill of a fragment, across the panel cases, the redraw notes and the heads sentence, has
    a value for each of its slots (a missing one would print as a dash), and every fragment in
    assets/lesson/panels/ and assets/lesson/redraws/ is reached by some case (none is dead text)."""
    from tests.test_figures import _with

    filled: list[str] = []
    plain_fill = lesson.fill

    def strict_fill(template, values=None):
        missing = set(lesson.slots(template)) - set(values or {})
        assert not missing, (template[:80], missing)
        filled.append(template)
        return plain_fill(template, values)

    monkeypatch.setattr(lesson, "fill", strict_fill)
    for group in _every_case():
        for paragraphs in group:
            text = panel_text.render(paragraphs)
            assert not re.search(r"\bNone\b|\bnan\b", text)
    events, ctx = run_data
    for steps, waits in (({3: 30.0, 4: 25.0, 9: 40.0}, {3: 500.0, 6: 400.0}), ({}, {3: 40.0}), ({}, {3: 500.0}),
                         ({3: 30.0}, {3: 500.0}), ({4: 30.0}, {3: 500.0}), ({9: 30.0}, {3: 500.0}),
                         ({8: 30.0, 9: 40.0}, {3: 500.0}), ({3: 30.0, 6: 25.0, 9: 40.0}, {3: 500.0, 6: 400.0}),
                         ({3: 30.0, 6: 25.0}, {3: 500.0, 6: 400.0})):
        lesson.pause_note(_with(events, steps, waits))
    reached = set(filled)
    for folder in ("panels", "redraws"):
        for path in (LESSON_DIR / folder).glob("*.md"):
            assert lesson.raw(f"{folder}/{path.stem}") in reached, f"{folder}/{path.stem} is never used"


def test_the_readings_the_lesson_fills_have_every_slot(run_data):
    """The decode answer's cache sentence, mean note and the heads sentence: each reading's fragment
    filled with the values its caller gives leaves no dash."""
    from core.trace import Event
    from tests.test_figures import _norms

    values = {"kv_bytes": "1 kB", "weight_bytes": "2 MB", "kv_cost_ratio": "4.3"}
    for which in ("small", "copying"):
        assert "—" not in lesson.reading("kv_share", which, values)
    assert "—" not in lesson.reading("mean_note", "pulled", {"mean_ms": "70"})
    assert lesson.kv_share_reading(0.2, 40.0, 1e5) == "copying"
    assert lesson.kv_share_reading(0.01, 40.0, 1e5) == "small"  # under KV_TERM_VISIBLE_MS: nothing to read
    assert lesson.kv_share_reading(0.2, None, 1e5) == "small"  # no weights term to set it against
    for per_head in ([2.0, 6.0, 2.0], [2.0, 2.2, 2.0]):
        events = [Event(phase="decode", positions=[k, k + 1], token_id=1, token_text="a", latency_ms=1.0,
                        kv_seq_len=k + 1, kv_shapes=[], kv_norms=_norms(per_head)) for k in range(4)]
        for batch in (1, 2):
            assert "—" not in lesson.layer_heads_sentence(events, 3, 1, "key", batch)


def test_the_details_render_as_paragraphs_with_their_bullets_on_their_own_lines():
    text = panel_text.batching_summary(_batching())
    paragraphs = text.split("\n\n")
    assert len(paragraphs) == 3 and paragraphs[0].startswith(panel_text.lead(False))
    head, *bullets = paragraphs[1].split("\n")
    assert head.startswith(panel_text.words("batching_where_bare")) and head.endswith("In detail:")
    assert len(bullets) == 2 and all(b.startswith("- ") for b in bullets)
    assert "—" not in text and not re.search(r"core|predictor\.|compute_bound", text)  # plain words, no code names
    # nothing said about a figure the result lacks: no roofline estimate, no bullet for it
    bare = panel_text.batching_parts({"rows": _batching()["rows"], "compute_bound_from": 20.0})
    assert _names(bare)[1] == ["batching_where", "batching_latency"]

