"""The serving simulator's engine: the mixed-row cost, its fast coefficients, and hand-worked timelines."""

from __future__ import annotations

import random

import pytest

from core import predictor as P
from core.cost import forward_cost, held_positions, step_cost
from core.hardware import load_hardware
from core.predictor import Predictor
from core.sim.simulate import SimConfig, simulate
from core.sim.steptime import StepTime
from core.sim.workload import Request
from core.spec import load_model_preset
from core.whatif import Scenario, predictor, step_time_s

MATRIX = [("gpt2", 5, 3, 2), ("smollm2-135m", 40, 0, 1), ("smollm2-135m", 1, 700, 8),
          ("mistral-7b-v0.1", 1, 5000, 3), ("mistral-7b-v0.1", 300, 4000, 2), ("llama-3.1-8b", 512, 0, 4),
          ("gpt2", 1, 1023, 5)]


@pytest.mark.parametrize("preset,n_new,n_cached,batch", MATRIX)
def test_uniform_forward_is_the_one_shape_case_of_a_mixed_step(preset, n_new, n_cached, batch):
    spec = load_model_preset(preset)
    uniform = forward_cost(spec, n_new, n_cached, batch, weight_dtype="bf16")
    listed = step_cost(spec, [(n_new, n_cached)] * batch, weight_dtype="bf16")
    counted = step_cost(spec, [(n_new, n_cached, batch)], weight_dtype="bf16")
    assert listed.to_dict() == uniform.to_dict() == counted.to_dict()


@pytest.mark.parametrize("preset", ["smollm2-135m", "mistral-7b-v0.1", "gpt2"])
def test_a_mixed_step_reads_the_weights_once_and_adds_each_rows_own_work(preset):
    spec = load_model_preset(preset)
    rows = [(512, 0), (1, 900), (1, 47), (64, 5000)]
    mixed = step_cost(spec, rows, weight_dtype="bf16")
    alone = [forward_cost(spec, n, c, weight_dtype="bf16") for n, c in rows]
    for part in ("attn_proj", "attn_scores", "mlp", "lm_head", "total"):
        assert mixed.flops[part] == sum(a.flops[part] for a in alone)
    for part in ("kv_read", "kv_write", "activations"):
        assert mixed.bytes[part] == sum(a.bytes[part] for a in alone)
    # one weight stream: far less than four separate forwards, at least the largest single one
    assert max(a.bytes["weights"] for a in alone) <= mixed.bytes["weights"] < 1.1 * alone[0].bytes["weights"]
    assert mixed.batch == 4 and (mixed.n_new, mixed.n_cached) == (512, 0)
    assert mixed.bytes["kv_read"] == 2 * spec.kv_dim * 2 * sum(held_positions(spec, c) for _, c in rows)


def test_step_cost_refuses_bad_rows():
    spec = load_model_preset("gpt2")
    for rows in ([], [(0, 3)], [(2, -1)], [(1, 2, 0)], [(1.5, 2)]):
        with pytest.raises(ValueError):
            step_cost(spec, rows)


def test_the_predictors_mixed_step_rule():
    """Overhead once, weights once, each row's own FLOPs and cache, the multi-token extra once."""
    spec, hw = load_model_preset("llama-3.1-8b"), load_hardware("h100-sxm")
    s = Scenario()
    base = predictor(spec, hw, s)
    pred = Predictor(hardware=base.hardware, n_layers=base.n_layers, dtype=base.dtype, overhead_s=base.overhead_s,
                     bandwidth=base.bandwidth, peak=base.peak, coef={**base.coef, "prefill_extra": 0.004})
    a, b = [(300, 0)], [(1, 800), (1, 20)]
    t_a, t_b, t_ab = (step_time_s(spec, hw, s, r, pred) for r in (a, b, a + b))
    weights = step_cost(spec, [(1, 0)], weight_dtype="bf16").bytes["weights"] / pred.bandwidth
    assert t_ab == pytest.approx(t_a + t_b - pred.overhead_s - pred.coef["memory"] * weights, rel=1e-6)
    two_prefills = step_time_s(spec, hw, s, a + a, pred)
    # the extra is paid once for the step, not once per multi-token row
    one_more = step_time_s(spec, hw, s, a, pred) - pred.overhead_s - 0.004 - pred.coef["memory"] * weights
    assert two_prefills == pytest.approx(t_a + one_more, rel=1e-6)


@pytest.mark.parametrize("preset", ["llama-3.1-8b", "mistral-7b-v0.1", "gpt2", "llama-3.1-70b", "pythia-1.4b", "opt-1.3b",
                                    "gemma-2-9b", "falcon-7b", "mixtral-8x7b", "qwen3-30b-a3b",
                                    "deepseek-v3"])
@pytest.mark.parametrize("tp", [1, 4])
def test_fast_step_time_agrees_with_the_cost_function(preset, tp):
    spec, hw = load_model_preset(preset), load_hardware("h100-sxm")
    s = Scenario(tp=tp, weight_dtype="fp8" if preset in ("llama-3.1-70b", "mixtral-8x7b") else "bf16")
    fast = StepTime.fit(spec, hw, s)
    rng = random.Random(7)
    top = spec.max_positions
    for _ in range(40):
        rows = [(rng.choice([1, 1, 1, rng.randint(2, top // 4)]), rng.randint(0, top // 2))
                for _ in range(rng.randint(1, 64))]
        assert fast.of_rows(rows) == pytest.approx(step_time_s(spec, hw, s, rows), rel=1e-9)


@pytest.mark.parametrize("preset", ["smollm2-135m", "gemma-2-9b", "deepseek-v3"])
def test_fast_step_time_carries_an_attention_extra(preset):
    """A real engine's fit prices attention FLOPs on top of the matrix rate (core.engines.fit):
    the fast path must charge that too, windowed and latent attention included."""
    from dataclasses import replace

    spec, hw, s = load_model_preset(preset), load_hardware("h100-sxm"), Scenario()
    base = predictor(spec, hw, s)
    slow = replace(base, coef={**base.coef, "attention": 0.8, "prefill_extra": 0.01})
    fast, plain = StepTime.fit(spec, hw, s, slow), StepTime.fit(spec, hw, s, base)
    rng = random.Random(3)
    for _ in range(20):
        rows = [(rng.choice([1, rng.randint(2, 2048)]), rng.randint(0, 8000)) for _ in range(rng.randint(1, 16))]
        assert fast.of_rows(rows) == pytest.approx(step_time_s(spec, hw, s, rows, slow), rel=1e-9)
    long_rows = [(256, 6000), (1, 6000)]
    assert fast.of_rows(long_rows) > plain.of_rows(long_rows)


TOY = StepTime(base=1.0, per_token=0.01, n_layers=1)  # an iteration takes 1 s + 10 ms per token fed


def _three() -> list[Request]:
    return [Request(0, 0.0, 100, 3), Request(1, 0.5, 200, 2), Request(2, 0.5, 10, 3)]


HAND = {  # token times worked out by hand in the docstring of each case below
    # prefill-first: A 0-2.0; B+C prefill 2.0-5.1 (210 tokens); A,B,C decode -6.13; A,C -7.15
    "prefill-first": [[2.0, 6.13, 7.15], [5.1, 6.13], [5.1, 6.13, 7.15]],
    # decode-first: A 0-2.0, decodes A -3.01 -4.02; only then B+C prefill -7.12; B,C -8.14; C -9.15
    "decode-first": [[2.0, 3.01, 4.02], [7.12, 8.14], [7.12, 8.14, 9.15]],
    # static: batch [A] -2.0 -3.01 -4.02; batch [B, C] prefill padded to 2 x 200 = 400 tokens -9.02;
    # B,C -10.04; C plus finished B still in its slot (2 tokens) -11.06
    "static": [[2.0, 3.01, 4.02], [9.02, 10.04], [9.02, 10.04, 11.06]],
    # chunked, budget 64: A 64 -1.64; A 36 + B 28 -3.28 (A's first); A + B 63 -4.92; A + B 63 -6.56 (A done);
    # B 46 + C 10 -8.12; B,C -9.14; C -10.15
    "chunked": [[3.28, 4.92, 6.56], [8.12, 9.14], [8.12, 9.14, 10.15]],
}


@pytest.mark.parametrize("policy", sorted(HAND))
def test_hand_worked_timelines(policy):
    result = simulate(SimConfig(policy=policy, instances=1, budget=64), _three(), step=TOY)
    for got, want in zip(result.token_s, HAND[policy], strict=True):
        assert got == pytest.approx(want, abs=1e-9)


def test_hand_worked_disaggregated_timeline():
    """Prefill server: A 0-2.0, B+C 2.0-5.1 (first tokens there). Each cache then crosses NVLink
    (3 us + its bytes at 450 GB/s, one at a time), and the decode server decodes: A 2.0+dA -3.01+dA
    -4.02+dA; B alone (C's cache lands just after B's) -tB+1.01; C -tB+2.02 -tB+3.03."""
    spec, hw = load_model_preset("llama-3.1-8b"), load_hardware("h100-sxm")
    per_token = 2 * spec.n_layers * spec.kv_dim * 2  # bf16 K and V
    link = hw.interconnect
    d_a = link.latency_s + 100 * per_token / link.bandwidth_bytes_per_s
    t_b = 5.1 + link.latency_s + 200 * per_token / link.bandwidth_bytes_per_s
    t_c = t_b + link.latency_s + 10 * per_token / link.bandwidth_bytes_per_s
    assert t_c < t_b + 1.01
    result = simulate(SimConfig(policy="disaggregated", instances=2), _three(), step=TOY)
    want = [[2.0, 3.01 + d_a, 4.02 + d_a], [5.1, t_b + 1.01], [5.1, t_b + 2.02, t_b + 3.03]]
    for got, w in zip(result.token_s, want, strict=True):
        assert got == pytest.approx(w, abs=1e-9)
    assert [role for role, _ in result.servers] == ["prefill", "decode"]
    assert [(rid, round(end - begin, 9)) for rid, begin, end in result.transfers][0] == (0, round(d_a, 9))


def test_preemption_recomputes_and_still_delivers_every_token():
    # 4 blocks of 16 positions: two requests of 20-token prompts and 20 outputs cannot both finish at once
    reqs = [Request(0, 0.0, 20, 20), Request(1, 0.0, 20, 20)]
    result = simulate(SimConfig(policy="prefill-first", instances=1, kv_blocks=4), reqs, step=TOY)
    assert result.to_dict()["preemptions"] >= 1
    assert [len(t) for t in result.token_s] == [20, 20]
    for t in result.token_s:
        assert all(b > a for a, b in zip(t, t[1:], strict=False))


@pytest.mark.parametrize("policy", ["static", "prefill-first", "decode-first", "chunked", "disaggregated"])
def test_kv_use_never_exceeds_the_blocks_and_every_request_completes(policy):
    config = SimConfig(policy=policy, requests=150, workload="mix", kv_blocks=900, rate_per_s=40.0)
    result = simulate(config)
    out = result.to_dict()
    served = [r for r, t in zip(result.requests, result.token_s, strict=True) if t]
    assert out["served"] + out["rejected"] == 150
    for r in served:
        assert len(result.token_s[r.id]) == r.output_tokens
        assert result.token_s[r.id][0] > r.arrival_s
    for _, log in result.servers:
        assert max(used for _, used in log.kv_used) <= 900


def test_deterministic_with_a_seed():
    a = simulate(SimConfig(policy="chunked", requests=200, seed=3)).to_dict(per_request=True)
    b = simulate(SimConfig(policy="chunked", requests=200, seed=3)).to_dict(per_request=True)
    c = simulate(SimConfig(policy="chunked", requests=200, seed=4)).to_dict(per_request=True)
    a.pop("sim_wall_s"), b.pop("sim_wall_s"), c.pop("sim_wall_s")
    assert a == b
    assert a["per_request"] != c["per_request"]


@pytest.mark.parametrize("bad", [dict(instances=0), dict(budget=3), dict(kv_blocks=0), dict(policy="fifo"),
                                 dict(policy="disaggregated", instances=1), dict(tpot_target_s=-1.0),
                                 dict(tp=0), dict(model="no-such-model")])
def test_bad_settings_are_refused_in_words(bad):
    with pytest.raises(ValueError):
        simulate(SimConfig(requests=10, **bad))


@pytest.mark.parametrize("preset", ["smollm2-135m", "mixtral-8x7b", "deepseek-v3"])
@pytest.mark.parametrize("tp", [1, 2])
def test_fast_step_time_carries_a_calibrated_cpus_row_curves(preset, tp):
    """A calibrated CPU prices a matmul's arithmetic by its rows (core.predictor.matmul_curve), which
    is piecewise linear in the tokens, not linear: the fast path carries the curves and still agrees
    with the cost function on row sets it was not fitted at, in every segment and past the last."""
    from dataclasses import replace

    spec, hw, s = load_model_preset(preset), load_hardware("h100-sxm"), Scenario(tp=tp)
    base = predictor(spec, hw, s)
    per_elem = {1: 0.0, 4: 1e-13, 16: 2e-13, 64: 5e-13, 256: 15e-13}
    grid = sorted(per_elem)
    curved = replace(base, layer_curve=P.matmul_curve(P.layer_matrices(spec), lambda m, k: per_elem[m], grid),
                     head_curve=P.matmul_curve([(spec.hidden, spec.vocab * spec.hidden)],
                                               lambda m, k: per_elem[m], grid))
    fast = StepTime.fit(spec, hw, s, curved)
    rng = random.Random(11)
    for _ in range(30):
        rows = [(rng.choice([1, 1, rng.randint(2, 700)]), rng.randint(0, 4000)) for _ in range(rng.randint(1, 90))]
        assert fast.of_rows(rows) == pytest.approx(step_time_s(spec, hw, s, rows, curved), rel=1e-9)
    assert fast.of_rows([(200, 0)]) > StepTime.fit(spec, hw, s, base).of_rows([(200, 0)])
