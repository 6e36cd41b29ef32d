"""The what-if page's machines beyond the presets: the reader's own GPU figures, the compute dtype as
its own setting, and this server (the calibrated host) with the live page's runs beside its lines."""

from __future__ import annotations

import dataclasses
import json

import pytest
from streamlit.testing.v1 import AppTest

from app.shared import host_points
from app.views.whatif import link
from app.views.whatif import text as whatif_text
from core import calibrate, predictor, whatif
from core.hardware import custom_spec, load_hardware
from core.spec import load_model_preset
from tests.apptest import open_view

LLAMA = load_model_preset("llama-3.1-8b")
SMOL = load_model_preset("smollm2-135m")


@pytest.fixture(scope="module")
def quick_cal() -> calibrate.Calibration:
    return calibrate.measure(quick=True)  # a few seconds: one real measurement for the module


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PDLAB_CACHE_DIR", str(tmp_path))
    return tmp_path


# --- your own figures ----------------------------------------------------------------------------

def test_custom_figures_equal_to_a_preset_price_exactly_as_the_preset():
    h100 = load_hardware("h100-sxm")
    mine = link.custom_hardware({**link.DEFAULTS, "hw": "custom"})  # the defaults are H100 SXM's figures
    assert mine.label.startswith("Custom") and "not a datasheet" in mine.source
    for s in (whatif.Scenario(batch=8), whatif.Scenario(batch=4, tp=4, weight_dtype="fp8", compute_dtype="fp8")):
        ours, theirs = whatif.answer(LLAMA, mine, s), whatif.answer(LLAMA, h100, s)
        for key in ("ttft_s", "tpot_s", "total_s", "compute_bound_batch"):
            want = getattr(theirs, key)
            assert getattr(ours, key) == (None if want is None else pytest.approx(want, rel=1e-12)), key
        assert ours.memory == theirs.memory


def test_custom_figures_move_the_answer_and_bad_ones_are_refused_in_words():
    base = whatif.answer(LLAMA, link.custom_hardware(link.DEFAULTS), whatif.Scenario())
    faster = whatif.answer(LLAMA, link.custom_hardware({**link.DEFAULTS, "cbw": 6700.0}), whatif.Scenario())
    assert faster.tpot_s < base.tpot_s * 0.6  # decode follows the bandwidth
    assert faster.ttft_s == pytest.approx(base.ttft_s, rel=0.2)  # a 1k prefill mostly does not
    small = whatif.answer(LLAMA, link.custom_hardware({**link.DEFAULTS, "cmem": 8.0}), whatif.Scenario())
    assert not small.memory.fits and small.memory.devices_needed >= 3
    with pytest.raises(ValueError, match="no published fp8 peak"):
        whatif.answer(LLAMA, link.custom_hardware({**link.DEFAULTS, "cfp8": 0.0}),
                      whatif.Scenario(compute_dtype="fp8"))
    with pytest.raises(ValueError, match="no device-to-device link"):
        whatif.answer(LLAMA, link.custom_hardware({**link.DEFAULTS, "clink": 0.0}), whatif.Scenario(tp=2))
    with pytest.raises(ValueError, match="at least one positive peak"):
        custom_spec(80e9, 3.35e12, dict.fromkeys(("fp32", "bf16"), 0.0))
    with pytest.raises(ValueError, match="positive"):
        custom_spec(0, 3.35e12, {"bf16": 1e15})


def test_the_compute_dtype_is_its_own_setting():
    h100, a100 = load_hardware("h100-sxm"), load_hardware("a100-80gb")
    prompt = whatif.Scenario(prompt_len=8192, batch=4, weight_dtype="int4")
    bf16 = whatif.answer(LLAMA, h100, prompt)
    fp8 = whatif.answer(LLAMA, h100, dataclasses.replace(prompt, compute_dtype="fp8"))
    assert bf16.settings.compute_dtype == "bf16"  # int4 weights: bf16 by default (no int4 peak)
    assert fp8.ttft_s < 0.7 * bf16.ttft_s  # a long prefill is compute-bound: twice the peak
    assert fp8.peak_flops_datasheet == pytest.approx(2 * bf16.peak_flops_datasheet, rel=1e-3)
    assert fp8.bandwidth_datasheet == bf16.bandwidth_datasheet
    with pytest.raises(ValueError, match="no published fp8 peak"):
        whatif.answer(LLAMA, a100, dataclasses.replace(prompt, compute_dtype="fp8"))
    with pytest.raises(ValueError, match="no matmul peak"):
        whatif.answer(LLAMA, h100, dataclasses.replace(prompt, compute_dtype="int4"))


# --- this server ---------------------------------------------------------------------------------

def test_this_server_uses_its_calibration_and_the_embedded_models_fit(quick_cal, cache_dir):
    host = calibrate.host_spec(quick_cal)
    s = whatif.Scenario(batch=1, prompt_len=40, gen_len=48, weight_dtype="fp32")
    unfitted = whatif.predictor(SMOL, host, s)
    assert not unfitted.fitted  # nothing saved in this empty cache yet
    coef = {"overhead": 1.0, "memory": 1.2, "kv": 2.5, "compute": 1.1, "prefill_extra": 0.02}
    predictor.save_fit(dataclasses.replace(unfitted, coef=coef, fitted=True, fit_info={"label": "test"}), SMOL)
    own = whatif.predictor(SMOL, host, s)
    assert own.fitted and own.coef == {**predictor.UNFITTED, **coef}  # a term missing is priced unfitted
    qwen = load_model_preset("qwen2.5-0.5b")
    carried = whatif.predictor(qwen, host, s)
    assert carried.coef == own.coef and carried.fit_info["transferred_from"] == "smollm2-135m"
    assert carried.overhead_s != own.overhead_s  # the ceilings are the shape's own: 24 layers, not 30
    ans = whatif.answer(SMOL, host, dataclasses.replace(s, compute_dtype="bf16", assumptions={
        "bandwidth_efficiency": 0.1}))
    assert ans.settings.compute_dtype == "fp32"  # the runner multiplies in the weights' dtype
    plain = whatif.answer(SMOL, host, s)
    assert ans.tpot_s == plain.tpot_s  # the sliders are datasheet assumptions, not this server's
    assert ans.host_fit is not None and ans.host_fit.transferred_from is None  # fitted on its own forwards
    carried = whatif.answer(qwen, host, s).host_fit
    assert carried is not None and carried.transferred_from
    assert "fitted on this model's own forwards" in whatif_text.host_fit(ans.host_fit)
    assert "carried over" in whatif_text.host_fit(carried)
    with pytest.raises(ValueError, match="one machine"):
        whatif.answer(SMOL, host, dataclasses.replace(s, tp=2))
    with pytest.raises(ValueError, match="fp32 or bf16 only"):
        whatif.answer(SMOL, host, dataclasses.replace(s, weight_dtype="int4"))


def test_this_servers_lines_follow_its_predictor(quick_cal, cache_dir):
    host = calibrate.host_spec(quick_cal)
    s = whatif.Scenario(weight_dtype="fp32", prompt_len=40)
    curves = whatif.host_curves(SMOL, host, s, batch_context=43)
    pred = whatif.predictor(SMOL, host, whatif.on_hardware(s, host))
    cost = predictor.cost_for_event(SMOL, 64, 0, 1, "fp32")
    assert curves["ttft_s"][curves["prompt"].index(64)] == pytest.approx(pred.predict_s(cost, "prefill"))
    assert curves["batch_context"] == 43
    for key in ("ttft_s", "decode_s", "batch_decode_s"):
        assert all(b > a for a, b in zip(curves[key], curves[key][1:], strict=False)), key  # longer costs more


def test_the_server_chart_names_the_newest_run_and_the_recordings_and_hovers_every_point(quick_cal, cache_dir):
    from app.views.whatif import figures as whatif_figures

    host = calibrate.host_spec(quick_cal)
    curves = whatif.host_curves(SMOL, host, whatif.Scenario(weight_dtype="fp32", prompt_len=40), batch_context=43)
    bundled = host_points.bundled_points()
    runs = [dataclasses.replace(bundled[0], source="server", label=f"live run {i}", short=f"run {i}")
            for i in range(5)]
    fig = whatif_figures.host_measured(curves, bundled + runs, [])
    live = [t for t in fig["data"] if t["name"] == "measured: a live run on this server"]
    assert live and all(t["text"] == ["", "", "", "", "run 4"] for t in live)  # a dozen names would pile up
    assert all(len(t["customdata"]) == 5 and "live run 0" in t["customdata"][0] for t in live)  # still on hover
    recordings = [t for t in fig["data"] if t["name"] == "measured: a recording bundled with the app"]
    assert recordings and all(all(t["text"]) for t in recordings)


def test_run_points_from_the_bundled_recordings_and_a_capped_store():
    points = host_points.bundled_points()
    assert len(points) == 3 and all(p.source == "bundled" and "recording" in p.label for p in points)
    data = json.loads((host_points.TRACES_DIR / "sky-blue.json").read_text())
    sky = next(p for p in points if "sky-blue" in p.label)
    assert sky.prompt_tokens == data["events"][0]["positions"][1] and sky.ttft_ms == data["events"][0]["latency_ms"]
    assert sky.decode_steps == len(data["events"]) - 1 and "2026-12-03" in sky.label
    assert host_points.comparable(points) == points  # fp32, batch 1, cache on: the live page's default
    store = host_points.PointStore()
    for i in range(host_points.MAX_POINTS + 5):
        store.offer(dataclasses.replace(sky, label=f"run {i}"))
    store.offer(None)
    kept = store.points()
    assert len(kept) == host_points.MAX_POINTS and kept[-1].label == f"run {host_points.MAX_POINTS + 4}"
    batch4 = dataclasses.replace(sky, batch=4)
    off = dataclasses.replace(sky, cache="none")
    assert host_points.comparable([batch4, off, sky]) == [sky]
    assert host_points.point_from_events([], {}, {}, "x", "server") is None


def test_a_finished_live_run_becomes_a_labelled_point():
    data = json.loads((host_points.TRACES_DIR / "moon-facts.json").read_text())
    host_points.STORE.clear()
    try:
        host_points.record_run(data["events"], data["model"], data["settings"])
        (point,) = host_points.STORE.points()
        assert point.source == "server" and point.label.startswith("live run at ")
        assert point in host_points.all_points()
    finally:
        host_points.STORE.clear()


# --- the page ------------------------------------------------------------------------------------

def _app(**params: str) -> AppTest:
    return open_view("whatif", query=params)


def test_page_prices_custom_figures_from_the_link():
    at = _app(hw="custom", cbw="6700")
    assert at.number_input(key="wi_custom_hw_cbw").value == 6700.0
    text = "".join(md.value for md in at.markdown)
    assert "Custom GPU (your figures)" in text
    expected = whatif.answer(LLAMA, link.custom_hardware({**link.DEFAULTS, "cbw": 6700.0}), whatif.Scenario())
    assert {m.label: m.value for m in at.metric}["Time per output token"] == f"{expected.tpot_s * 1e3:.2f} ms"


def test_page_on_this_server_before_and_after_calibration(quick_cal, cache_dir):
    at = _app(hw="host", model="smollm2-135m", w="fp32", kv="fp32", prompt="40", gen="48")
    assert any("has not measured itself yet" in e.value for e in at.error)
    calibrate._store(quick_cal)
    at = _app(hw="host", model="smollm2-135m", w="fp32", kv="fp32", prompt="40", gen="48")
    assert not at.error
    assert any("This server" in h.value for h in at.subheader)
    assert len(at.get("plotly_chart")) == 6
    text = "".join(md.value for md in at.markdown)
    assert "this server's ridge" in text and "efficiency sliders do not apply" in text
    at = _app(hw="host", model="qwen2.5-0.5b", w="fp32", kv="fp32")
    assert any("Pick that model" in i.value for i in at.info)
