"""The latency model (the page calls it the latency model): fitting, robustness, persistence, the runner's annotator, `estimate`."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from core import predictor as P
from core.cost import forward_cost
from core.hardware import load_hardware
from core.runner import GenerationSettings, generate_trace
from core.spec import load_model_preset, spec_from_config

SMOL = load_model_preset("smollm2-135m")


def _cpu_like() -> P.Predictor:
    hw = replace(load_hardware("l4"), name="fake-cpu", measured=True)
    return P.Predictor(hardware=hw, n_layers=SMOL.n_layers, dtype="fp32", overhead_s=0.005, bandwidth=8e9,
                       peak=80e9)


def _samples(pred: P.Predictor, coef: dict[str, float], noise: list[float] | None = None):
    truth = replace(pred, coef=coef)
    out = []
    for i, (n, c) in enumerate([(n, 0) for n in (4, 16, 48, 128, 256)] + [(1, c) for c in range(10, 400, 25)]):
        cost = forward_cost(SMOL, n, c).to_dict()
        phase = "prefill" if c == 0 else "decode"
        factor = noise[i] if noise and i < len(noise) else 1.0
        out.append((cost, phase, truth.predict_s(cost, phase) * factor))
    return out


TRUE_COEF = {"overhead": 1.0, "memory": 0.9, "kv": 2.5, "compute": 1.4, "prefill_extra": 0.0}


def test_fit_leaves_the_prefill_extra_unfitted():
    # Measured prefills cannot pin a fixed extra of a few ms down (core.stability): it stays 0.
    fitted = P.fit(_cpu_like(), _samples(_cpu_like(), {**TRUE_COEF, "prefill_extra": 0.01}))
    assert fitted.coef["prefill_extra"] == 0.0 and set(fitted.coef) == set(P.TERMS)


def test_the_attention_extra_prices_attention_flops_on_top_and_the_host_fit_keeps_it_at_0():
    pred = _cpu_like()
    long_cache, short_cache = forward_cost(SMOL, 64, 1000).to_dict(), forward_cost(SMOL, 64, 0).to_dict()
    for cost in (long_cache, short_cache):
        assert pred.terms_s(cost, "prefill")["attention"] == cost["flops"]["attn_scores"] / pred.peak
    assert pred.coef["attention"] == 0.0  # unfitted: attention costs what any other FLOP costs
    slow = replace(pred, coef={**pred.coef, "attention": 1.5})
    extra = (long_cache["flops"]["attn_scores"] - short_cache["flops"]["attn_scores"]) / pred.peak
    grows = (slow.predict_s(long_cache, "prefill") - slow.predict_s(short_cache, "prefill")
             - (pred.predict_s(long_cache, "prefill") - pred.predict_s(short_cache, "prefill")))
    assert grows == pytest.approx(1.5 * extra)
    fitted = P.fit(pred, _samples(pred, {**TRUE_COEF, "attention": 0.5}))
    assert fitted.coef["attention"] == 0.0  # not one of the host's fitted terms
    old = replace(pred, coef={k: v for k, v in TRUE_COEF.items()})  # a coefficient set from before the term
    assert old.coef["attention"] == 0.0 and old.predict_s(long_cache, "prefill") > 0


def test_fit_recovers_known_coefficients():
    pred = _cpu_like()
    fitted = P.fit(pred, _samples(pred, TRUE_COEF))
    assert fitted.fitted
    for sample in _samples(pred, TRUE_COEF):
        assert fitted.predict_s(sample[0], sample[1]) == pytest.approx(sample[2], rel=1e-3)


def test_fit_shrugs_off_a_few_slow_outliers():
    pred = _cpu_like()
    noisy = _samples(pred, TRUE_COEF, noise=[1.0, 3.0, 1.0, 1.0, 1.0, 2.5, 1.0, 1.0, 1.0, 4.0])
    fitted = P.fit(pred, noisy)
    clean = _samples(pred, TRUE_COEF)
    errors = sorted(abs(fitted.predict_s(c, ph) - t) / t for c, ph, t in clean)
    assert errors[len(errors) // 2] < 0.02  # the median forward is still predicted closely


def test_fit_never_keeps_a_negative_coefficient():
    pred = _cpu_like()
    # Times that fall as the cache grows would need a negative KV term: it must be dropped.
    samples = [(forward_cost(SMOL, 1, c).to_dict(), "decode", 0.08 - c * 1e-6) for c in range(10, 2000, 50)]
    samples += [(forward_cost(SMOL, n, 0).to_dict(), "prefill", 0.05 + n * 0.003) for n in (8, 32, 64, 128, 256)]
    fitted = P.fit(pred, samples)
    assert all(v >= 0 for v in fitted.coef.values())
    assert fitted.coef["kv"] == 0.0


def test_fit_needs_enough_samples():
    with pytest.raises(ValueError, match="at least"):
        P.fit(_cpu_like(), _samples(_cpu_like(), TRUE_COEF)[:3])


def test_naive_roofline_is_the_max_of_two_times():
    pred = _cpu_like()
    cost = forward_cost(SMOL, 1, 100)
    assert pred.naive_s(cost) == pytest.approx(max(cost.flops["total"] / 80e9, cost.bytes["total"] / 8e9))


def test_weight_stream_bandwidth_weighs_each_matrix_by_its_row_width():
    assert P.weight_stream_bandwidth(SMOL, lambda k: 10e9) == pytest.approx(10e9)
    slow_narrow = P.weight_stream_bandwidth(SMOL, lambda k: 5e9 if k < 1000 else 20e9)
    assert 5e9 < slow_narrow < 20e9
    # Only the down projection (1536-wide rows) streams fast, so the blend sits near the slow figure.
    assert slow_narrow < 7e9


def test_fit_round_trips_through_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PDLAB_CACHE_DIR", str(tmp_path))
    pred = _cpu_like()
    fitted = P.fit(pred, _samples(pred, TRUE_COEF))
    P.save_fit(fitted, SMOL)
    loaded = P.load_fit(pred, SMOL)
    assert loaded is not None and loaded.coef == fitted.coef
    (tmp_path / "predictor-fit.json").write_text("{not json")
    assert P.load_fit(pred, SMOL) is None


def test_annotator_adds_cost_and_prediction_to_every_event(tiny_model):
    spec = spec_from_config(tiny_model.config)
    annotate = P.make_annotator(spec, _cpu_like(), "fp32")
    settings = GenerationSettings(max_new_tokens=5, chat=False, stop_on_eos=False)
    trace = generate_trace(tiny_model, "annotate", settings, annotate=annotate)
    n_prompt = len(trace.prompt_token_ids)
    assert trace.events[0].cost == forward_cost(spec, n_prompt, 0, lm_head_tokens=1).to_dict()
    assert trace.events[2].cost["n_cached"] == n_prompt + 1
    assert all(e.predicted_ms > 0 for e in trace.events)
    # KV bytes the cost model says were written equal what landed in the real cache.
    assert sum(e.cost["bytes"]["kv_write"] for e in trace.events) == trace.events[-1].kv_bytes
    assert trace.events[-1].cost["bytes"]["kv_read"] == trace.events[-2].kv_bytes
    # The prediction is recorded split into its terms, and the terms add up to it.
    for e in trace.events:
        assert set(e.predicted_terms_ms) == set(P.TERMS)
        assert sum(e.predicted_terms_ms.values()) == pytest.approx(e.predicted_ms, abs=1e-3)
    assert trace.events[0].predicted_terms_ms["compute"] > trace.events[1].predicted_terms_ms["compute"]


def test_contributions_are_the_terms_times_their_coefficients():
    predictor = replace(_cpu_like(), coef={"overhead": 1.0, "memory": 1.5, "kv": 3.0, "compute": 0.5,
                                           "prefill_extra": 0.02})
    cost = forward_cost(load_model_preset("smollm2-135m"), 1, 100)
    terms, parts = predictor.terms_s(cost, "decode"), predictor.contributions_s(cost, "decode")
    assert parts == {k: predictor.coef[k] * terms[k] for k in P.TERMS}
    assert sum(parts.values()) == pytest.approx(predictor.predict_s(cost, "decode"))


def test_a_no_cache_step_pays_the_multi_token_extra_like_the_prefill(tiny_model):
    """Without a cache every forward re-reads the whole sequence: none may be predicted cheaper
    than the shorter forward before it (it was, by the prefill-only extra, before this was keyed
    on the forward's shape)."""
    spec = spec_from_config(tiny_model.config)
    predictor = replace(_cpu_like(), coef={**TRUE_COEF, "prefill_extra": 0.05})
    annotate = P.make_annotator(spec, predictor, "fp32")
    settings = GenerationSettings(max_new_tokens=4, chat=False, stop_on_eos=False, cache="none")
    events = generate_trace(tiny_model, "no cache", settings, annotate=annotate).events
    assert [e.phase for e in events] == ["prefill", "decode", "decode", "decode"]
    assert all(e.predicted_terms_ms["prefill_extra"] == pytest.approx(50.0) for e in events)
    predicted = [e.predicted_ms for e in events]
    assert predicted == sorted(predicted)
    one_token = forward_cost(SMOL, 1, 100)
    assert predictor.terms_s(one_token, "decode")["prefill_extra"] == 0.0  # a cached decode pays none


def test_static_cache_is_priced_over_its_allocated_length(tiny_model):
    spec = spec_from_config(tiny_model.config)
    annotate = P.make_annotator(spec, _cpu_like(), "fp32")
    settings = GenerationSettings(max_new_tokens=4, chat=False, stop_on_eos=False, cache="static")
    trace = generate_trace(tiny_model, "static", settings, annotate=annotate)
    last = trace.events[-1]
    assert last.cost["bytes"]["kv_read"] == last.kv_bytes_allocated - last.cost["bytes"]["kv_write"]


def _estimate(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "core", "estimate", *args, "--json"], capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_estimate_cli_integrates_decode_step_by_step():
    result = _estimate("--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--prompt-len", "512",
                       "--gen-len", "128", "--batch", "4", "--dtype", "bf16")
    assert result["params"] == 8_030_261_248
    assert result["kv_bytes_per_token"] == 131_072
    assert result["kv_bytes_final"] == 131_072 * (512 + 128 - 1) * 4
    decode = result["decode"]
    assert decode["steps"] == 127
    assert decode["tpot_s"] == pytest.approx(decode["time_s"] / 127)
    for phase in ("prefill", "decode"):
        assert set(result[phase]["bytes"]) >= {"weights", "kv_read", "kv_write", "activations"}
        assert result[phase]["time_s"] > 0 and result[phase]["flops"] > 0
    # No step can beat streaming the weights once at the datasheet bandwidth.
    weights = result["decode"]["bytes"]["weights"] / 127
    assert decode["tpot_s"] > weights / 3.35e12


def test_estimate_with_one_generated_token_has_no_decode():
    result = _estimate("--model", "gpt2", "--hardware", "a100-80gb", "--prompt-len", "100", "--gen-len", "1")
    assert result["decode"]["steps"] == 0 and result["decode"]["tpot_s"] is None
    assert result["decode"]["time_s"] == 0


def test_estimate_rejects_bad_input_without_a_traceback():
    out = subprocess.run([sys.executable, "-m", "core", "estimate", "--model", "../../etc/passwd", "--hardware",
                          "h100-sxm", "--prompt-len", "1", "--gen-len", "1"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    out = subprocess.run([sys.executable, "-m", "core", "estimate", "--model", "gpt2", "--hardware", "tpu",
                          "--prompt-len", "1", "--gen-len", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "valid names" in out.stderr


def test_estimate_reports_fit_shortfall_active_params_and_tensor_parallel_times():
    alone = _estimate("--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--prompt-len", "2048",
                      "--gen-len", "256", "--batch", "8")
    split = _estimate("--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--prompt-len", "2048",
                      "--gen-len", "256", "--batch", "8", "--tp", "4")
    assert alone["active_params"] == alone["params"] and alone["tp"] == 1
    assert alone["fits"] is False and alone["shortfall_bytes"] == alone["memory_bytes"] - 80_000_000_000
    assert alone["ttft_s"] > 0 and alone["decode"]["tpot_s"] > 0  # never refused for not fitting
    assert split["fits"] is True and split["shortfall_bytes"] == 0
    assert split["decode"]["tpot_s"] < alone["decode"]["tpot_s"] / 2
    assert split["allreduce_s_per_decode_step"] > 0
    out = subprocess.run([sys.executable, "-m", "core", "estimate", "--model", "gpt2", "--hardware", "host",
                          "--prompt-len", "10", "--gen-len", "5", "--tp", "2"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "datasheet preset" in out.stderr and "Traceback" not in out.stderr


def test_estimate_of_a_mixture_of_experts_reads_more_experts_as_the_batch_grows():
    """estimate --json for Mixtral: active_params (12.9B of 46.7B), experts read per layer at the
    chosen batch (k = 2 alone, nearly all 8 at batch 16), and a decode step that costs far more
    than twice as much bytes at batch 16 only because of the experts."""
    args = ("--model", "mixtral-8x7b", "--hardware", "h100-sxm", "--prompt-len", "512", "--gen-len", "16",
            "--tp", "2")
    one, crowd = _estimate(*args, "--batch", "1"), _estimate(*args, "--batch", "16")
    assert one["active_params"] < one["params"] / 3
    assert (one["n_experts"], one["experts_per_token"]) == (8, 2)
    assert one["experts_read_per_layer"] == pytest.approx(2.0)
    assert crowd["experts_read_per_layer"] == pytest.approx(8 * (1 - 0.75 ** 16))
    assert one["prefill"]["experts_read_per_layer"] == pytest.approx(8.0)  # 512 prompt tokens: all of them
    assert crowd["decode"]["tpot_s"] > 1.5 * one["decode"]["tpot_s"]  # the batch-1 step read 2 of 8 experts
    for key in ("params", "kv_bytes_per_token", "kv_bytes_final", "ttft_s"):
        assert one[key] > 0


def test_estimate_of_latent_attention_names_the_form_it_prices():
    """DeepSeek-V3: the latent cache's 70,272 bf16 bytes per token, 671B parameters that no single
    H100 holds (priced anyway, with the shortfall), and the attention form each machine runs:
    a serving engine's absorbed decode on a datasheet GPU, transformers' re-expansion on "host"."""
    args = ("--model", "deepseek-v3", "--prompt-len", "2048", "--gen-len", "8", "--dtype", "fp8")
    gpu, host = _estimate(*args, "--hardware", "h100-sxm", "--tp", "8"), _estimate(*args, "--hardware", "host")
    assert gpu["kv_bytes_per_token"] == 70_272  # fp8 weights keep a bf16 cache by default
    assert gpu["mla_form"] == "serving" and host["mla_form"] == "transformers"
    assert gpu["fits"] is False and gpu["shortfall_bytes"] > 0  # 671 GB of fp8 weights over 8 x 80 GB
    assert gpu["n_experts"] == 256 and gpu["active_params"] < gpu["params"] / 15
    # same prefill arithmetic in both forms; a decode step's arithmetic far smaller absorbed
    assert gpu["prefill"]["flops"] == host["prefill"]["flops"]
    assert gpu["decode"]["flops"] < host["decode"]["flops"] / 2


def _with_curves(pred: P.Predictor) -> P.Predictor:
    """A predictor with row curves from a made-up table: 16 rows run a matrix at a third of the
    per-FLOP speed 256 rows do, as measured on this kind of CPU."""
    per_elem = {1: 0.0, 4: 1e-10, 16: 2e-10, 64: 5e-10, 256: 15e-10}

    def excess(rows: int, k: int) -> float:
        return per_elem[rows]

    grid = sorted(per_elem)
    return replace(pred, layer_curve=P.matmul_curve(P.layer_matrices(SMOL), excess, grid),
                   head_curve=P.matmul_curve([(SMOL.hidden, SMOL.vocab * SMOL.hidden)], excess, grid))


def test_the_compute_term_prices_each_row_count_at_its_own_calibrated_rate():
    """With calibrated row curves a prefill's arithmetic is the matrices' time beyond their stream at
    its count of rows: per FLOP, 16 rows cost more than 256 (the transfer benchmark's short prompts ran
    slower and its long ones faster than one peak rate said); one row (decode) adds none beyond the
    attention scores; without curves the term is FLOPs / peak as before."""
    plain = _cpu_like()
    pred = _with_curves(plain)
    short, long_ = forward_cost(SMOL, 16, 0), forward_cost(SMOL, 256, 0)
    per_flop = [pred.terms_s(c, "prefill")["compute"] / (c.flops["attn_proj"] + c.flops["mlp"]) for c in (short, long_)]
    assert per_flop[0] > 1.5 * per_flop[1]  # the table's 2.1 times, less the attention scores priced at peak
    decode = forward_cost(SMOL, 1, 100)
    assert pred.terms_s(decode, "decode")["compute"] == pytest.approx(decode.flops["attn_scores"] / 80e9)
    assert plain.terms_s(long_, "prefill")["compute"] == pytest.approx(long_.flops["total"] / 80e9)
    # a matmul's time is linear in its rows between the calibrated counts: 160 rows sit halfway
    layer = (pred.terms_s(forward_cost(SMOL, 160, 0), "prefill")["compute"]
             - forward_cost(SMOL, 160, 0).flops["attn_scores"] / 80e9)
    per_row = 2.0 * sum(n for _, n in P.layer_matrices(SMOL))
    assert layer == pytest.approx(per_row / 2 * (5e-10 + 15e-10) / 2, rel=1e-6)


def test_a_batch_of_decodes_is_priced_by_its_rows_and_an_old_cost_dict_by_its_shape():
    """A batch of 64 decodes sends 64 rows through every matrix: the same arithmetic per row as a
    64-token prefill. A cost dict saved before rows were kept is read as n_new x batch rows."""
    pred = _with_curves(_cpu_like())
    batched = forward_cost(SMOL, 1, 100, batch=64)
    prefill = forward_cost(SMOL, 64, 0)
    beyond_scores = [pred.terms_s(c, "decode")["compute"] - c.flops["attn_scores"] / 80e9 for c in (batched, prefill)]
    assert batched.tokens == prefill.tokens == 64 and batched.lm_rows == 64 and prefill.lm_rows == 1
    head = P.curve_at(pred.head_curve, 64) / 64 * batched.flops["lm_head"]  # 64 rows through the head, not one
    assert head > 0 and beyond_scores[0] == pytest.approx(beyond_scores[1] + head)
    old = {k: v for k, v in batched.to_dict().items() if k not in ("tokens", "lm_rows")}
    assert pred.terms_s(old, "decode")["compute"] == pytest.approx(pred.terms_s(batched, "decode")["compute"])


def test_curve_at_is_linear_between_points_and_along_the_last_segment_past_them():
    curve = ((1, 0.0), (4, 3.0), (16, 6.0))
    assert P.curve_at(curve, 1) == 0.0 and P.curve_at(curve, 0) == 0.0
    assert P.curve_at(curve, 2) == pytest.approx(1.0) and P.curve_at(curve, 10) == pytest.approx(4.5)
    assert P.curve_at(curve, 28) == pytest.approx(9.0)


def test_a_whole_decodes_summed_cost_keeps_what_latent_attention_reexpands_every_step():
    """core.cost.estimate sums the decode steps; the sum carries row_flops, so the FLOPs a latent
    attention spends re-expanding its cache every step stay at peak in decode_time_s, as each step
    alone prices them (a review found them priced at the one-row curve: free)."""
    from core.cost import estimate
    from core.deployment import decode_time_s

    spec = load_model_preset("deepseek-v3")
    pred = _with_curves(replace(_cpu_like(), n_layers=spec.n_layers))
    pred = replace(pred, layer_curve=P.matmul_curve(P.layer_matrices(spec), lambda m, k: 1e-12 * (m > 1), [1, 4, 16]))
    est = estimate(spec, 200, 4, 1, "bf16", mla_form="transformers")
    assert est["decode"]["row_flops"] < est["decode"]["flops_by_part"]["attn_proj"] + est["decode"]["flops_by_part"]["mlp"]
    steps = [forward_cost(spec, 1, c, 1, weight_dtype="bf16", lm_head_tokens=1, mla_form="transformers")
             for c in range(200, 203)]
    assert decode_time_s(pred, est["decode"]) == pytest.approx(
        sum(pred.predict_s(c, "decode") for c in steps), rel=1e-6)
