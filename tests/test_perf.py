"""core.perf: each derived figure against values worked out by hand."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from core import perf
from core.cost import kv_bytes_per_token as spec_kv_bytes_per_token
from core.hardware import load_hardware
from core.predictor import Predictor, preset_predictor
from core.spec import load_model_preset
from core.trace import Event

SMOL = load_model_preset("smollm2-135m")


def _event(phase: str, latency_ms: float, total_bytes: int | None = None) -> Event:
    cost = None if total_bytes is None else {"bytes": {"total": total_bytes}, "flops": {"total": 0}}
    return Event(phase=phase, positions=[0, 1], token_id=0, token_text="x", latency_ms=latency_ms,
                 kv_seq_len=1, kv_shapes=[], cost=cost)


RUN = [_event("prefill", 120.0, 5 * 10**9), _event("decode", 30.0), _event("decode", 40.0),
       _event("decode", 50.0)]


def test_ttft_is_the_first_forward_and_tpot_the_mean_decode_step():
    assert perf.ttft_ms(RUN) == 120.0
    assert perf.decode_latencies_ms(RUN) == [30.0, 40.0, 50.0]
    assert perf.tpot_ms(RUN) == 40.0  # (30 + 40 + 50) / 3
    assert perf.ttft_ms([]) is None and perf.tpot_ms([]) is None
    assert perf.tpot_ms(RUN[:1]) is None  # the prefill alone has no decode step yet


def test_achieved_bandwidth_is_decode_bytes_over_decode_time():
    events = [_event("prefill", 100.0, 10**12),  # never counted: the prefill is not a decode step
              _event("decode", 100.0, 10**9),  # 1 GB in 0.1 s
              _event("decode", 300.0, 3 * 10**9),  # 3 GB in 0.3 s
              _event("decode", 100.0),  # unpriced: left out
              _event("decode", 0.0, 10**9)]  # no time: left out
    # 4 GB in 0.4 s: mean bytes per step (2 GB) over mean step time (0.2 s), as a reader divides
    assert perf.achieved_bandwidth(events) == pytest.approx(10e9)
    steps = [_event("decode", 100.0, 10**9), _event("decode", 50.0, 10**9)]
    assert perf.achieved_bandwidth(steps) == pytest.approx(2 * 10**9 / 0.15)  # not the mean of 10 and 20 GB/s
    assert perf.achieved_bandwidth(events[:1]) is None


def test_prediction_error_sign_and_rounding():
    assert perf.prediction_error_pct(110.0, 100.0) == 10.0  # over-prediction is positive
    assert perf.prediction_error_pct(90.0, 100.0) == -10.0
    assert perf.prediction_error_pct(1.0, 3.0) == -66.67  # two decimals, everywhere
    assert perf.prediction_error_pct(None, 100.0) is None
    assert perf.prediction_error_pct(5.0, 0.0) is None


def test_kv_bytes_per_token_by_hand_and_as_core_cost_prices_it():
    assert perf.kv_bytes_per_token(30, 3, 64, 4) == 46_080  # SmolLM2-135M fp32: 30 * 2 * 3 * 64 * 4
    assert perf.kv_bytes_per_token(80, 8, 128, 2) == 327_680  # Llama-3-70B bf16, the published figure
    for name, dtype, size in (("smollm2-135m", "fp32", 4), ("llama-3.1-70b", "bf16", 2),
                              ("gpt2", "fp16", 2)):
        spec = load_model_preset(name)
        assert perf.kv_bytes_per_token(spec.n_layers, spec.n_kv_heads, spec.head_dim, size) == \
            spec_kv_bytes_per_token(spec, dtype)


def test_head_dim_from_config_objects_and_dicts():
    assert perf.head_dim_from_config({"head_dim": 64, "hidden_size": 576, "num_attention_heads": 9}) == 64
    assert perf.head_dim_from_config({"hidden_size": 4096, "num_attention_heads": 32}) == 128
    assert perf.head_dim_from_config({"n_embd": 768, "n_head": 12}) == 64  # GPT-2's own names
    config_object = SimpleNamespace(head_dim=None, hidden_size=576, num_attention_heads=9)
    assert perf.head_dim_from_config(config_object) == 64
    assert perf.head_dim_from_config({}, default=64) == 64
    with pytest.raises(ValueError, match="head_dim"):
        perf.head_dim_from_config({})


def test_kv_weights_crossover():
    # SmolLM2-135M fp32: 538,060,032 weight bytes per decode step over 46,080 KV bytes per token.
    assert perf.crossover_tokens(538_060_032, 46_080) == pytest.approx(11_676.6, abs=0.1)
    assert perf.crossover_tokens(538_060_032, 46_080, 16) == pytest.approx(729.8, abs=0.1)
    assert perf.crossover_tokens(1000, 10, 4) == 25.0
    with pytest.raises(ValueError):
        perf.crossover_tokens(1000, 0, 1)


def test_decode_split_is_the_predictors_own_terms():
    pred = preset_predictor(SMOL, load_hardware("l4"), "fp32")
    from core.predictor import cost_for_event

    terms = pred.terms_s(cost_for_event(SMOL, 1, 100, 8, "fp32"), "decode")
    compute, memory = perf.decode_split_s(SMOL, pred, 100, 8, "fp32")
    assert compute == pytest.approx(terms["compute"])
    assert memory == pytest.approx(terms["memory"] + terms["kv"])


def _cpu_like() -> Predictor:
    # A CPU's ceilings: per row, arithmetic (about 3.4 ms) outweighs its KV reads (0.6 ms at 100 tokens),
    # so batching turns compute-bound once the rows' arithmetic matches the 67 ms weight read.
    hw = replace(load_hardware("l4"), name="fake-cpu", measured=True)
    return Predictor(hardware=hw, n_layers=SMOL.n_layers, dtype="fp32", overhead_s=0.005, bandwidth=8e9,
                     peak=80e9)


def test_compute_bound_batch_is_the_first_batch_where_compute_catches_up():
    pred = _cpu_like()
    b = perf.compute_bound_batch(SMOL, pred, 100, "fp32")
    assert b is not None and 10 < b < 40
    compute, memory = perf.decode_split_s(SMOL, pred, 100, b, "fp32")
    assert compute >= memory
    compute, memory = perf.decode_split_s(SMOL, pred, 100, b - 1, "fp32")
    assert compute < memory
    # Twice the arithmetic rate: twice as many rows before arithmetic catches up with the weight read.
    faster = replace(pred, peak=2 * pred.peak)
    assert perf.compute_bound_batch(SMOL, faster, 100, "fp32") > b
    no_compute = replace(pred, coef={**pred.coef, "compute": 0.0})
    assert perf.compute_bound_batch(SMOL, no_compute, 100, "fp32") is None
    assert perf.compute_bound_batch(SMOL, pred, 100, "fp32", max_batch=b - 1) is None
    # A datasheet GPU at short context: each row's KV reads outgrow its arithmetic, so never.
    gpu = preset_predictor(SMOL, load_hardware("l4"), "fp32")
    assert perf.compute_bound_batch(SMOL, gpu, 100, "fp32") is None


def test_paper_time_is_bytes_over_bandwidth_and_terms_take_medians():
    step = SimpleNamespace(phase="decode", latency_ms=80.0, cost={"bytes": {"total": 538e6}})
    assert perf.paper_ms(step, 16.1e9) == pytest.approx(33.42, abs=0.01)  # 538 MB / 16.1 GB/s
    assert perf.paper_ms(SimpleNamespace(phase="decode", latency_ms=1.0, cost=None), 16e9) is None
    assert perf.paper_ms(step, None) is None
    events = [SimpleNamespace(phase="prefill", predicted_terms_ms={"overhead": 9.0, "memory": 90.0}),
              SimpleNamespace(phase="decode", predicted_terms_ms={"overhead": 6.0, "memory": 40.0}),
              SimpleNamespace(phase="decode", predicted_terms_ms={"overhead": 6.0, "memory": 44.0}),
              SimpleNamespace(phase="decode", predicted_terms_ms={"overhead": 7.0, "memory": 41.0}),
              SimpleNamespace(phase="decode", predicted_terms_ms=None)]
    assert perf.median_terms_ms(events) == {"overhead": 6.0, "memory": 41.0}
    assert perf.median_terms_ms(events, "prefill") == {"overhead": 9.0, "memory": 90.0}
    assert perf.median_terms_ms(events[:1]) == {}


def test_a_prefill_scales_its_per_token_terms_and_keeps_its_fixed_ones():
    terms = {"overhead": 6.0, "memory": 40.0, "kv": 2.0, "compute": 50.0, "prefill_extra": 20.0}
    assert perf.scaled_prefill_ms(terms, 40, 40) == pytest.approx(118.0)
    assert perf.scaled_prefill_ms(terms, 40, 1000) == pytest.approx(66.0 + 52.0 * 25)
    assert perf.scaled_prefill_ms(terms, 40, 0) == pytest.approx(66.0)
