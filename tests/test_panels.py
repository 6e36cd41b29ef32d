"""The on-demand panels through AppTest with the real model (cache on/off, batching, about this run),
and their figure and summary functions on hand-made results."""

from __future__ import annotations

import time

import pytest

from app.views.live import panel_figures
from tests.apptest import open_app


def _compare_result(n: int = 6) -> dict:
    return {"prompt_len": 30, "n_tokens": n,
            "modes": {"dynamic": [200.0] + [80.0] * (n - 1), "static": [210.0] + [82.0] * (n - 1),
                      "none": [200.0 + 5 * k for k in range(n)]},
            "predicted": {"dynamic": [220.0] + [110.0] * (n - 1), "static": [None] * n,
                          "none": [220.0 + 4 * k for k in range(n)]}}


def test_compare_figure_and_rows_label_every_number():
    res = _compare_result()
    fig = panel_figures.compare_figure(res)
    names = [t.name for t in fig.data if t.showlegend is not False]
    assert len(names) == 3 and any("off" in n for n in names)
    titles = [a.text for a in fig.layout.annotations]
    assert any("measured" in t for t in titles) and any("predicted" in t for t in titles)
    rows = panel_figures.compare_rows(res)
    assert [r["cache"] for r in rows] == ["dynamic cache", "static cache", "no cache"]
    assert rows[1]["total s (predicted)"] is None  # not every forward priced: no made-up total
    assert all(k == "cache" or k == "forwards" or "measured" in k or "predicted" in k for k in rows[0])
    summary = panel_figures.compare_summary(res)
    assert "Measured" in summary and "×" in summary
    assert panel_figures.compare_summary(res, recorded=True).startswith("**Measured on the recording machine")


def test_compare_rows_trim_modes_to_lockstep_length():
    res = _compare_result()
    res["modes"]["none"] = res["modes"]["none"][:3]  # mid-run: the cache-off mode is one forward behind
    assert {r["forwards"] for r in panel_figures.compare_rows(res)} == {3}


def test_batching_figure_marks_the_predicted_crossover():
    rows = [{"batch": b, "decode step ms (measured, median)": 90 + 5 * b, "decode step ms (predicted)": 100 + 5 * b,
             "tokens/s (measured)": b * 1000 / (90 + 5 * b), "tokens/s (predicted)": b * 1000 / (100 + 5 * b),
             "prefill ms (measured)": 200.0 * b} for b in (1, 2, 4)]
    predicted = [{"batch": b, "step ms (predicted)": 100 + 5 * b, "tokens/s (predicted)": b * 1000 / (100 + 5 * b)}
                 for b in (1, 2, 4, 8, 16, 32)]
    roofline = {"ridge_flop_per_byte": 11.1, "decode_intensity": 0.5, "batch": 22.2}
    fig = panel_figures.batching_figure({"rows": rows, "predicted": predicted, "compute_bound_from": 20.0,
                                         "roofline": roofline})
    assert {t.name for t in fig.data} == {"measured here", "predicted (latency model)",
                                          "compute-bound from batch ≈ 20 (predicted)"}  # in the legend too
    assert sum(1 for s in fig.layout.shapes if s.type == "line") == 2  # the crossover, in both panels
    # one batching threshold on the chart: the roofline estimate is given in words, one click down
    assert not any("roofline estimate" in (a.text or "") for a in fig.layout.annotations)
    assert any(a.text == "predicted only" for a in fig.layout.annotations)
    summary = panel_figures.batching_summary({"rows": rows, "compute_bound_from": 20.0})
    assert "Measured" in summary and "*Latency model:* its predicted" in summary and "20" in summary
    assert "Roofline estimate" not in summary  # nothing said about a figure the result lacks
    recorded = panel_figures.batching_figure({"rows": rows, "predicted": predicted}, "the recording machine",
                                             "measured (recording)")
    assert recorded.layout.title.text.startswith("Decode on the recording machine")
    assert "measured (recording)" in {t.name for t in recorded.data}


def test_batching_summary_quotes_the_numbers_beside_it():
    """Every figure in the text comes from the result: step times and throughput at both ends, the gain,
    the roofline estimate (ridge ÷ intensity) and the predictor's crossover, each labelled."""
    import re

    rows = [{"batch": b, "decode step ms (measured, median)": ms, "tokens/s (measured)": round(b * 1000 / ms, 1),
             "prefill ms (measured)": 100.0 * b} for b, ms in ((1, 57.25), (2, 60.0), (4, 66.0), (8, 75.5), (16, 92.4))]
    result = {"rows": rows, "prompt_len": 39, "compute_bound_from": 38.0,
              "roofline": {"ridge_flop_per_byte": 11.12, "decode_intensity": 0.502, "batch": 22.2}}
    text = panel_figures.batching_summary(result)
    assert "from batch 1 to 16 the step time grew **×1.6** (median step 57.25 → 92.4 ms, as the table holds them)" in text
    assert "16× as many sequences" in text
    assert "tokens per second grew **×9.9** (17.5 → 173 tokens/s)" in text
    assert "multiplied by ×1.91 (1 → 2), ×1.82 (2 → 4)" in text and "×1.63 (8 → 16):" in text
    assert "*Roofline estimate:*" in text and "**0.50 FLOPs per byte**" in text
    assert "**11.1 FLOP/byte**" in text and "11.1 ÷ 0.50 ≈ **22**" in text
    assert "*Latency model:* its predicted" in text and "batch ≈ **38**" in text and "past the measured range" in text
    assert "39 prompt tokens" in text
    for a, b, shown in re.findall(r"(\d+\.?\d*) ÷ (\d+\.?\d*) ≈ \*\*(\d+)\*\*", text):
        assert round(float(a) / float(b)) == int(shown)  # the division a reader can redo
    assert not re.search(r"core|predictor\.|compute_bound", text)  # plain words, no code names
    rounded = [{"batch": b, "decode step ms (measured, median)": ms, "tokens/s (measured)": round(b * 1000 / ms, 1)}
               for b, ms in ((1, 65.56), (2, 70.0))]
    # the step prints as the table holds it, so 1000 ÷ 65.56 gives the printed 15.3 (1000 ÷ 65.6 would be 15.2)
    assert "(median step 65.56 → 70 ms, as the table holds them)" in panel_figures.batching_summary({"rows": rounded})
    assert "(15.3 → 28.6 tokens/s)" in panel_figures.batching_summary({"rows": rounded})
    inside = panel_figures.batching_summary({**result, "compute_bound_from": 12.0})
    assert "inside the measured range" in inside
    assert f"throughput still grew ×{2 * 75.5 / 92.4:.2f} from batch 8 " \
           "to 16" in inside  # 12 falls between the measured 8 and 16
    assert "against the prediction" not in text  # no predicted step times: nothing to compare
    predicted = {1: 55.0, 2: 56.0, 4: 58.0, 8: 62.0, 16: 70.0}
    jumpy = {**result, "rows": [{**r, "decode step ms (predicted)": predicted[r["batch"]]} for r in rows]}
    jumpy["rows"][2]["decode step ms (measured, median)"] = 95.0  # batch 4 far slower than predicted
    assert ("rose most against the prediction from batch 2 to 4: +58% (60 → 95 ms), where the latency model "
            "expected +4% (56 → 58 ms)") in panel_figures.batching_summary(jumpy)


def _wait(job, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while job.active and time.time() < deadline:
        job.touch()
        time.sleep(0.2)
    assert not job.active, job.status


def _specs(at) -> list[dict]:
    import json

    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def _captions(at) -> str:
    """The captions, and the recordings' labels (full-size Markdown with their mark, not captions)."""
    labels = [m.value for m in at.markdown if m.value.startswith(":violet-badge[recording]")]
    return " ".join([c.value for c in at.caption] + labels)


@pytest.mark.model
def test_a_fresh_page_shows_recorded_results_before_any_press():
    """No measurement on this server yet: both panels show the bundled recordings, labelled with their
    machine and date, with their charts and the numbers in their text, before anyone presses a button."""
    from app.shared import experiment_results

    experiment_results.STORE.clear()
    at = open_app()
    assert "pd_compare_job" not in at.session_state and "pd_batch_job" not in at.session_state
    captions = _captions(at)
    for kind in ("compare", "batching"):
        m = experiment_results.load_bundled(kind)
        assert m is not None
        assert experiment_results.label(m) in captions
    assert captions.count("Recorded on ") == 2 and "not your run, and speeds vary between sessions" in captions
    assert "Prompt of this recording: “Explain in two sentences why the sky is blue.”" in captions
    assert "It is also the prompt in the box now." in captions  # the page's default prompt
    titles = [s["layout"]["title"]["text"] for s in _specs(at)]
    assert any(t.startswith("The recording's prompt (") and "generated three ways" in t for t in titles)
    assert any(t.startswith("Decode on the recording machine") for t in titles)
    text = "".join(m.value for m in at.markdown)
    assert "without the cache these 32 forwards took" in text
    last = experiment_results.load_bundled("batching").result["rows"][-1]["batch"]
    assert f"from batch 1 to {last} the step time grew" in text and "*Roofline estimate:*" in text
    assert "*Latency model:* its predicted" in text


@pytest.mark.model
def test_without_usable_recordings_the_panels_wait_for_their_buttons(monkeypatch, tmp_path):
    """A malformed recording and a missing one: both panels fall back to the button alone, no traceback."""
    from app.shared import experiment_results

    experiment_results.STORE.clear()
    (tmp_path / "compare.json").write_text('{"format": 1, "kind": "compare", "result": {}}', encoding="utf-8")
    monkeypatch.setattr(experiment_results, "EXPERIMENTS_DIR", tmp_path)
    at = open_app()
    captions = _captions(at)
    assert "Press **Compare cache modes**: the chart of measured times appears here." in captions
    assert "Press the button to measure: the chart appears here." in captions
    assert "Recorded on " not in captions and "Measured on this server" not in captions
    titles = [s["layout"]["title"]["text"] for s in _specs(at)]
    assert not any("generated three ways" in t or t.startswith("Decode on") for t in titles)


@pytest.mark.model
def test_panels_run_the_real_model():
    from app.shared import experiment_results

    experiment_results.STORE.clear()
    at = open_app()
    # the comparison works before any Generate: it runs the prompt in the box
    at.text_area(key="prompt").set_value("What is the capital of France?")
    at.slider(key="compare_tokens").set_value(4)
    at.button(key="compare_go").click().run()
    assert not at.exception, at.exception
    job = at.session_state["pd_compare_job"]
    _wait(job)
    at.run()
    assert not at.exception, at.exception
    assert job.status == "done", job.error
    assert {m: len(v) for m, v in job.result["modes"].items()} == {"dynamic": 4, "static": 4, "none": 4}
    assert all(v > 0 for vs in job.result["modes"].values() for v in vs)
    assert all(p is not None for p in job.result["predicted"]["dynamic"])
    text = "".join(m.value for m in at.markdown)
    assert "without the cache these 4 forwards took" in text
    assert any(s["layout"]["title"]["text"].startswith("Your prompt (") and "generated three ways"
               in s["layout"]["title"]["text"] for s in _specs(at))
    assert "Measured just now on this server (your run" in _captions(at)
    assert _captions(at).count("Recorded on ") == 1  # the batching panel still shows its recording
    job.join(10)  # its thread hands the result to the server's store as it ends
    assert experiment_results.STORE.latest("compare").result["n_tokens"] == 4

    # batching: two small batches, few steps (the page's job with a shorter list)
    from app.shared.model import get_model, get_queue
    from app.views.live import jobs as panel_jobs

    small = panel_jobs.BatchJob(get_queue(), get_model(), batches=(1, 2), steps=3).start()
    at.session_state["pd_batch_job"] = small
    _wait(small)
    at.run()
    assert not at.exception, at.exception
    assert small.status == "done", small.error
    assert [r["batch"] for r in small.result["rows"]] == [1, 2]
    assert small.result["compute_bound_from"] and small.result["predicted"][0]["batch"] == 1
    assert any(s["layout"]["title"]["text"].startswith("Decode on this machine") for s in _specs(at))
    assert "step time grew" in "".join(m.value for m in at.markdown)
    small.join(10)

    # another reader's fresh page now shows this server's last measurements, not the recordings
    other = open_app()
    captions = _captions(other)
    assert captions.count("Measured on this server at ") == 2 and "by a reader's earlier run" in captions
    assert "Recorded on " not in captions
    assert "A reader's prompt (" in captions and "What is the capital" not in captions  # prompts stay private
    assert "without the cache these 4 forwards took" in "".join(m.value for m in other.markdown)

    # about this run: model, source, dtype, threads, versions, ceilings
    from app.shared.model import cached_ceilings
    from app.views.live.panels import about_rows

    rows = {r[0]: r for r in about_rows(get_model(), None, cached_ceilings())}
    assert "SmolLM2" in rows["model"][1] and rows["dtype of the weights"][1]
    assert {"torch threads", "torch / transformers", "cache mode of your last run"} <= set(rows)
    assert rows["weight-stream bandwidth"][2].startswith("calibrated")  # the page's one word for these
    ceilings = cached_ceilings()
    if ceilings is not None and ceilings.peak_flops:  # printed as the roofline and the lesson print it
        from app.views.live.shown import sig3

        assert rows["matmul peak, fp32"][1] == f"{sig3(ceilings.peak_flops / 1e9)} GFLOP/s"
    about = [t.value for t in at.table if list(t.value.columns) == ["what", "value", "source"]]
    assert about and "weights source" in set(about[0]["what"]), "the about table is drawn"


def test_batching_summary_of_a_recording_gives_this_servers_estimate_too():
    """A recording's crossover is the recording machine's: with `here`, the summary adds this
    server's own roofline estimate (its ridge ÷ the same step's intensity), with the speeds divided."""
    rows = [{"batch": b, "decode step ms (measured, median)": ms, "tokens/s (measured)": round(b * 1000 / ms, 1)}
            for b, ms in ((1, 65.6), (64, 277.0))]
    result = {"rows": rows, "prompt_len": 39,
              "roofline": {"ridge_flop_per_byte": 14.7, "decode_intensity": 0.5, "batch": 29.4,
                           "peak_flops_per_s": 147e9, "bandwidth_bytes_per_s": 10e9}}
    here = {"ridge_flop_per_byte": 6.5, "decode_intensity": 0.51, "batch": 12.7, "peak_flops_per_s": 102e9,
            "bandwidth_bytes_per_s": 15.8e9}
    text = panel_figures.batching_summary(result, "the recording machine", here)
    assert "147 GFLOP/s ÷ 10.00 GB/s" in text  # two decimals, as every bandwidth on the page
    assert "*On this server:*" in text and "**6.5 FLOP/byte**" in text
    assert "102 GFLOP/s ÷ 15.80 GB/s" in text and "batch ≈ **13** here" in text
    assert "On this server" not in panel_figures.batching_summary(result, "the recording machine")
    assert text.startswith("**Measured on the recording machine, not this server:**")
    assert panel_figures.batching_summary(result).startswith("**Measured:**")


def test_batching_summary_gives_one_answer_first_and_names_why_there_are_others():
    """Three figures for one question read as a contradiction: the section opens with this
    server's figure, then says the recording machine's and the latency model's are other machines or
    other rules."""
    rows = [{"batch": b, "decode step ms (measured, median)": ms, "tokens/s (measured)": round(b * 1000 / ms, 1)}
            for b, ms in ((1, 65.6), (64, 277.0))]
    result = {"rows": rows, "prompt_len": 39, "compute_bound_from": 54.0,
              "roofline": {"ridge_flop_per_byte": 14.7, "decode_intensity": 0.5, "batch": 29.4}}
    here = {"ridge_flop_per_byte": 5.2, "decode_intensity": 0.51, "batch": 10.2}
    text = panel_figures.batching_summary(result, "the recording machine", here)
    head = text.split("**Where decode stops being bandwidth-bound:** ", 1)[1].split("In detail:")[0]
    assert head.startswith("on this server at about batch **10**")
    assert head.index("**10**") < head.index("**29**") < head.index("**54**")
    assert "rule of thumb" in head and "latency model" in head and "(predicted)" not in head  # named, not tagged
    mine = panel_figures.batching_summary(result)  # measured here: no second machine to name
    assert "at about batch **29** by the roofline rule of thumb" in mine and "this server at" not in mine


def test_compare_summary_says_when_the_no_cache_prediction_runs_off_the_measurement():
    res = _compare_result()
    off = res["modes"]["none"]
    near = {**res, "predicted": {**res["predicted"], "none": [m / 1.05 for m in off]}}
    assert "no-cache line" not in panel_figures.compare_summary(near)  # within 10%: nothing to flag
    low = {**res, "predicted": {**res["predicted"], "none": [m / 1.3 for m in off]}}
    assert "runs about 23% below these measured forwards" in panel_figures.compare_summary(low)
    high = {**res, "predicted": {**res["predicted"], "none": [m / 0.7 for m in off]}}
    assert "runs about 43% above" in panel_figures.compare_summary(high)


def test_a_recordings_batching_chart_draws_one_machine_only():
    """This server's roofline estimate used to be drawn on the recording machine's chart (two machines on
    one chart, unsaid); it is given in words only, and so is the recording's own (one threshold per chart)."""
    rows = [{"batch": b, "decode step ms (measured, median)": 60.0 + b, "tokens/s (measured)": b * 1000 / (60 + b),
             "prefill ms (measured)": 140.0} for b in (1, 2, 4)]
    result = {"rows": rows, "roofline": {"ridge_flop_per_byte": 14.7, "decode_intensity": 0.5, "batch": 29.4}}
    fig = panel_figures.batching_figure(result, "the recording machine", "measured (recording)")
    notes = [a.text or "" for a in fig.layout.annotations]
    assert not any("this server" in n for n in notes)
    assert not any("roofline estimate" in n for n in notes)  # the one threshold drawn is the predicted one
    assert not [s for s in fig.layout.shapes if s.type == "line"]  # no crossover in this result: no line
    here = {"ridge_flop_per_byte": 6.5, "decode_intensity": 0.51, "batch": 12.7}
    text = panel_figures.batching_summary(result, "the recording machine", here)
    assert "in words only: the chart holds the recording machine's numbers alone" in text


def test_a_recordings_number_beside_the_runs_gives_both_figures():
    """Where the recording and the reader's run show the same quantity, one sentence gives both, measured
    on each machine, and how far apart they are; the numbers come from the data, not the text."""
    text = panel_figures.recording_beside_run([("the prefill of this same prompt (40 tokens, dynamic cache)",
                                                131.4, 279.2)])
    assert "the prefill of this same prompt (40 tokens, dynamic cache) took **131 ms** on the recording machine" in text
    assert "**279 ms** in your last run on this server, 2.1× as long here." in text
    assert "within 10% of each other" in panel_figures.recording_beside_run([("x", 100.0, 105.0)])
    assert "1.5× as long on the recording machine" in panel_figures.recording_beside_run([("x", 150.0, 100.0)])
    assert panel_figures.recording_beside_run([]) == ""
    assert "calibrated ceilings" not in text  # no ceilings given: nothing said of them
    # a reader saw the recording's prefill faster and its decode step slower than their own run: the
    # machines' ceilings, when both are known, say why
    there = {"peak_flops_per_s": 154.2e9, "bandwidth_bytes_per_s": 10.5e9}
    here = {"peak_flops_per_s": 106.9e9, "bandwidth_bytes_per_s": 21.57e9}
    both = panel_figures.recording_beside_run([("x", 142.0, 220.0), ("y", 65.6, 42.5)], there, here)
    assert ("matrix arithmetic at 154 GFLOP/s on the recording machine against 107 here, memory bandwidth "
            "10.50 GB/s against 21.57 here") in both


def _fake_run(prompt: str, ids: int, latencies: list[float], **settings) -> object:
    from types import SimpleNamespace

    from core.runner import GenerationSettings
    from core.trace import Event

    events = [Event(phase="prefill" if k == 0 else "decode", positions=[0, 1], token_id=1, token_text="a",
                    latency_ms=ms, kv_seq_len=1, kv_shapes=[]) for k, ms in enumerate(latencies)]
    return SimpleNamespace(prompt=prompt, prompt_ids=list(range(ids)), events=events,
                           settings=GenerationSettings(**settings), active=False)


def test_panels_pair_the_recordings_numbers_with_the_runs_only_for_the_same_quantity():
    from app.shared import experiment_results
    from app.views.live import panels

    compare = experiment_results.load_bundled("compare")
    batching = experiment_results.load_bundled("batching")
    assert compare is not None and batching is not None
    n = compare.result["prompt_len"]
    same = _fake_run(compare.prompt, n, [279.0, 80.0, 90.0, 70.0])
    pairs = panels._compare_pairs(compare, same)
    assert pairs == [(f"the prefill of this same prompt ({n} tokens, dynamic cache)",
                      compare.result["modes"]["dynamic"][0], 279.0)]
    assert panels._compare_pairs(compare, _fake_run("Another prompt", n, [279.0, 80.0])) == []
    assert panels._compare_pairs(compare, None) == []
    static = _fake_run(compare.prompt, n, [300.0, 80.0], cache="static")
    assert panels._compare_pairs(compare, static)[0][1] == compare.result["modes"]["static"][0]
    first = batching.result["rows"][0]
    steps = panels._batching_pairs(batching, same)
    assert len(steps) == 1 and steps[0][1:] == (first["decode step ms (measured, median)"], 80.0)
    fixed = _fake_run(panels.BATCH_PROMPT, batching.result["prompt_len"], [250.0, 70.0, 72.0])
    assert [p[1:] for p in panels._batching_pairs(batching, fixed)] == [
        (first["prefill ms (measured)"], 250.0), (first["decode step ms (measured, median)"], 71.0)]
    assert panels._batching_pairs(batching, _fake_run("x", 5, [250.0, 70.0], batch=4)) == []


def test_a_recordings_prediction_lines_say_whose_latency_model_drew_them():
    """On a recording the predicted lines are the recording machine's latency model, not this server's:
    the legend says so, and the dotted line at the predicted crossover says in the legend what it marks."""
    rows = [{"batch": b, "decode step ms (measured, median)": 60.0 + b, "tokens/s (measured)": b * 1000 / (60 + b),
             "prefill ms (measured)": 140.0} for b in (1, 2, 4)]
    predicted = [{"batch": b, "step ms (predicted)": 62.0 + b, "tokens/s (predicted)": b * 1000 / (62 + b)}
                 for b in (1, 2, 4, 8, 16, 32, 64)]
    result = {"rows": rows, "predicted": predicted, "compute_bound_from": 54.0}
    fig = panel_figures.batching_figure(result, "the recording machine", "measured (recording)")
    names = {t.name for t in fig.data if t.showlegend is not False}
    assert names == {"measured (recording)", "predicted for the recording machine",
                     "compute-bound from batch ≈ 54 (predicted)"}
    crossover = next(t for t in fig.data if t.name.startswith("compute-bound"))
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert lines and all(s.x0 == 54.0 and s.line.dash == crossover.line.dash == "dot" for s in lines)
    assert all("predicted for the recording machine" in t.hovertemplate for t in fig.data
               if t.legendgroup == "pred")
    compare = panel_figures.compare_figure(_compare_result(), "The recording's prompt", "the recording machine")
    legend = [t.name for t in compare.data if t.showlegend is not False]
    assert "thin lines: predicted for the recording machine" in legend
    # the subtitle names the predicted lines as the legend does: thin, in each mode's own dash (a reader
    # saw "- -" above a solid thin line)
    assert any(a.text == "Each forward: ● measured, thin lines predicted" for a in compare.layout.annotations)
    assert {t.line.width for t in compare.data if t.mode == "lines" and t.xaxis == "x2"} == {1.5}
    assert all("predicted for the recording machine" in t.hovertemplate for t in compare.data
               if t.mode == "lines" and t.hovertemplate)
    assert not any("recording" in (t.name or "") for t in panel_figures.compare_figure(_compare_result()).data)
    low = {**_compare_result(), "predicted": {"none": [m / 1.3 for m in _compare_result()["modes"]["none"]]}}
    assert "The recording machine's latency model draws a no-cache line that runs about 23% below" in \
        panel_figures.compare_summary(low, recorded=True)


def test_the_two_recordings_step_times_are_reconciled_with_their_own_figures():
    """The cache recording's mean step and the batching recording's batch-1 median differ (a reviewer
    found 58 and 65.6 ms unexplained): one sentence names both, each recording's date and the memory
    bandwidth each session calibrated, all read from the recordings."""
    from app.shared import experiment_results as results

    c, b = results.load_bundled("compare"), results.load_bundled("batching")
    bw = [m.provenance["predictor"]["bandwidth_bytes_per_s"] for m in (c, b)]
    text = panel_figures.two_recordings(c.result, b.result, ("3 December", "4 December"), tuple(bw))
    dyn = c.result["modes"]["dynamic"][1:]
    batch1 = next(r for r in b.result["rows"] if r["batch"] == 1)["decode step ms (measured, median)"]
    assert f"**{sum(dyn) / len(dyn):.0f} ms**" in text and f"**{batch1:.3g} ms**" in text
    assert "(3 December)" in text and "(4 December)" in text
    assert f"{bw[0] / 1e9:.2f} GB/s" in text and f"{bw[1] / 1e9:.2f} GB/s" in text
    assert panel_figures.two_recordings(c.result, b.result, ("a", "b"), (None, bw[1])) == ""
    assert panel_figures.two_recordings({"modes": {}}, b.result, ("a", "b"), tuple(bw)) == ""


def test_the_batching_answer_gives_the_measured_last_doubling_and_names_whose_turn_it_is():
    """The answer said "the gain fades from about batch 54" while the measured gains shrank earlier:
    it now prints the last doubling's measured gain as the details list it, and gives the turn to the
    latency model."""
    from app.shared import experiment_results as results
    from app.views.live import sections

    b = results.load_bundled("batching")
    values = panel_figures.batching_answer_values(b.result, recorded=True)
    text = sections.answer("batching", values)
    summary = panel_figures.batching_summary(b.result, "the recording machine")
    rows = b.result["rows"]
    assert f"×{values['batch_last_gain']} ({rows[-2]['batch']} → {rows[-1]['batch']})" in summary
    assert f"gained ×{values['batch_last_gain']}" in text
    assert f"by the latency model, arithmetic takes over near batch {values['batch_turn']}" in text
    assert len(text.split()) <= sections.ANSWER_MAX_WORDS
