"""The on-demand panels through AppTest with the real model (cache on/off, batching, about this run),
and their figure and answer-value functions on hand-made results (their details' words:
tests/test_panel_text.py)."""

from __future__ import annotations

import time

import pytest

from app.views.live import panel_figures, panel_text
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
    recorded = panel_figures.batching_figure({"rows": rows, "predicted": predicted}, "the recording machine",
                                             "measured (recording)")
    assert recorded.layout.title.text.startswith("Decode on the recording machine")
    assert "measured (recording)" in {t.name for t in recorded.data}


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


def test_the_batching_answer_gives_the_measured_last_doubling_and_names_whose_turn_it_is():
    """The answer said "the gain fades from about batch 54" while the measured gains shrank earlier:
    it now prints the last doubling's measured gain as the details list it, and gives the turn to the
    latency model."""
    from app.shared import experiment_results as results
    from app.views.live import sections

    b = results.load_bundled("batching")
    values = panel_figures.batching_answer_values(b.result, recorded=True)
    text = sections.answer("batching", values)
    growth = panel_text.batching_parts(b.result, "the recording machine")[0][0]
    rows = b.result["rows"]
    assert growth[0] == "batching_growth"  # the details list every doubling's gain, the answer the last one
    assert growth[1]["doublings"].endswith(f"×{values['batch_last_gain']} ({rows[-2]['batch']} → {rows[-1]['batch']})")
    assert f"gained ×{values['batch_last_gain']}" in text
    assert f"by the latency model, arithmetic takes over near batch {values['batch_turn']}" in text
    assert len(text.split()) <= sections.ANSWER_MAX_WORDS
