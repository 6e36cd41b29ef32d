"""The runner-against-engine TPOT table and its story say what the recording's numbers say."""

from __future__ import annotations

import json
from pathlib import Path

from app.views.engines import tpot as engine_tpot

SAMPLE = json.loads((Path(__file__).parent / "data" / "engine-tpot-sample.json").read_text())  # engine-bench, 2026-12-04


def test_one_row_per_measured_setting_engine_last_with_its_labels():
    rows = engine_tpot.rows(SAMPLE)
    assert [r["who"].split(",")[0] for r in rows] == ["this project's runner"] * 3 + ["the engine (vLLM CPU)"]
    assert rows[0]["who"] == "this project's runner, fp32, 1 thread (the live page's setting)"
    assert [r["TPOT, ms (measured)"] for r in rows] == [59.0, 55.4, 38.6, 25.4]
    assert rows[-1]["MB per decode step (computed)"] == 271 and rows[0]["MB per decode step (computed)"] == 543
    assert all(k.endswith(("(measured)", "(computed)")) for r in rows for k in r if k != "who")


def test_the_story_quotes_the_numbers_and_says_nothing_without_them():
    text = engine_tpot.story(SAMPLE)
    for figure in ("543 MB", "271 MB", "55 ms", "39 ms", "25 ms", "10.7 GB/s", "0.85 ms per layer", "1.29"):
        assert figure in text, figure
    assert "not half" in text  # bf16 streamed more slowly than fp32 in this sample
    faster = json.loads(json.dumps(SAMPLE))
    faster["runner"]["bfloat16-2t"]["achieved_bandwidth_gb_s"] = 12.0
    assert "not half" not in engine_tpot.story(faster)
    assert engine_tpot.story({}) == "" and engine_tpot.rows({}) == []
    assert engine_tpot.rows({"runner": {}, "engine": {"tpot_ms": None}}) == []


def test_an_engine_serving_fp32_is_set_beside_the_fp32_runner_and_a_slower_engine_is_not_called_faster():
    fp32_engine = json.loads(json.dumps(SAMPLE))
    fp32_engine["engine"].update(dtype="fp32", tpot_ms=40.0, bytes_per_step=543e6, ms_per_layer=40.0 / 30)
    assert engine_tpot.rows(fp32_engine)[-1]["who"].startswith("the engine (vLLM CPU), fp32")
    text = engine_tpot.story(fp32_engine)
    assert "serving in fp32" in text and "against the runner's 1.85" in text  # the fp32 runner's ms per layer
    slower = json.loads(json.dumps(fp32_engine))
    slower["engine"].update(tpot_ms=120.0, ms_per_layer=4.0)
    text = engine_tpot.story(slower)
    assert "not faster" in text and "120 ms" in text and "55 ms" in text and "wastes less time" not in text
