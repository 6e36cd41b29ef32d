"""The on-demand panels through AppTest with the real model (cache on/off, batching, about this run),
and their figure and summary functions on hand-made results."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.components import panel_figures

APP = str(Path(__file__).resolve().parent.parent / "app" / "streamlit_app.py")


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
    fig = panel_figures.batching_figure({"rows": rows, "predicted": predicted, "compute_bound_from": 20.0})
    assert {t.name for t in fig.data} == {"measured here", "predicted (core)"}
    assert any("compute-bound" in (a.text or "") and "predicted" in a.text for a in fig.layout.annotations)
    assert any(a.text == "predicted only" for a in fig.layout.annotations)
    summary = panel_figures.batching_summary({"rows": rows, "compute_bound_from": 20.0})
    assert "Measured" in summary and "Predicted" in summary and "20" in summary


def _wait(job, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while job.active and time.time() < deadline:
        job.touch()
        time.sleep(0.2)
    assert not job.active, job.status


def _specs(at) -> list[dict]:
    import json

    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


@pytest.mark.model
def test_panels_run_the_real_model():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=240)
    at.run()
    assert not at.exception, at.exception
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
    assert any("generated three ways" in s["layout"]["title"]["text"] for s in _specs(at))

    # batching: two small batches, few steps (the page's job with a shorter list)
    from app.services import experiments as panel_jobs
    from app.services.model import get_model, get_queue

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

    # about this run: model, source, dtype, threads, versions, ceilings
    from app.sections.panels import about_rows
    from app.services.model import cached_ceilings

    rows = {r[0]: r for r in about_rows(get_model(), None, cached_ceilings())}
    assert "SmolLM2" in rows["model"][1] and rows["dtype of the weights"][1]
    assert {"torch threads", "torch / transformers", "cache mode of your last run"} <= set(rows)
    assert rows["weight-stream bandwidth"][2].startswith("measured")
    about = [t.value for t in at.table if list(t.value.columns) == ["what", "value", "source"]]
    assert about and "weights source" in set(about[0]["what"]), "the about table is drawn"
