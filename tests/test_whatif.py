"""The what-if engine (core.whatif), its figures, its link and its config upload, without a browser."""

from __future__ import annotations

import json
import math

import plotly.graph_objects as go
import pytest

from app.views.whatif import figures as figs
from app.views.whatif import link
from app.views.whatif import settings as whatif_settings
from core import perf, whatif
from core.cost import forward_cost
from core.estimate import estimate_run
from core.hardware import list_presets, load_hardware
from core.spec import list_model_presets, load_model_preset

GPUS = [h for h in list_presets() if h != "host"]


def test_closed_form_decode_equals_pricing_every_step():
    """One timer for a whole generation (deployment.decode_time_s, in closed form), used by the page
    and by `estimate` alike; the reference here prices every decode step one by one."""
    gpu = load_hardware("a100-80gb")
    for model, batch, dtype in (("llama-3.1-70b", 8, "bf16"), ("mistral-7b-v0.1", 3, "int8"), ("gpt2", 1, "fp32")):
        spec = load_model_preset(model)
        s = whatif.Scenario(batch=batch, prompt_len=700, gen_len=300, weight_dtype=dtype)
        ans = whatif.answer(spec, gpu, s)
        est = estimate_run(model, "a100-80gb", 700, 300, batch, dtype)
        assert (ans.decode_s, ans.ttft_s, ans.tpot_s) == (
            est["decode"]["time_s"], est["ttft_s"], est["decode"]["tpot_s"])
        pred, kw = whatif.predictor(spec, gpu, s.resolved()), whatif.cost_kwargs(s.resolved())
        step_by_step = sum(pred.predict_s(forward_cost(spec, 1, 700 + i - 1, batch, **kw), "decode")
                           for i in range(1, 300))
        assert ans.decode_s == pytest.approx(step_by_step, rel=1e-9)


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.1-70b", "qwen2.5-0.5b"])
def test_predictions_never_beat_the_roofline_floor(gpu, model):
    s = whatif.Scenario(batch=4, prompt_len=2048, gen_len=128)
    ans = whatif.answer(load_model_preset(model), load_hardware(gpu), s)
    assert ans.prefill.time_s >= ans.floors.prefill_s
    assert ans.decode_step.time_s >= ans.floors.decode_step_s
    if model != "qwen2.5-0.5b":  # a 0.5B model's step is mostly the fixed launch overhead
        assert ans.decode_step.time_s <= 2.0 * ans.floors.decode_step_s
        assert ans.prefill.time_s <= 2.5 * ans.floors.prefill_s


def test_memory_verdict_and_the_largest_batch_that_fits():
    spec, gpu = load_model_preset("llama-3.1-8b"), load_hardware("h100-sxm")
    ans = whatif.answer(spec, gpu, whatif.Scenario(batch=1, prompt_len=1024, gen_len=256))
    m = ans.memory
    assert m.fits and m.shortfall == 0 and m.devices_needed == 1
    assert m.weights == pytest.approx(2 * spec.params_total, rel=1e-3)  # bf16
    assert m.kv == 1279 * 131_072  # prompt + output - 1 positions, 128 KiB per token
    at_max = whatif.answer(spec, gpu, whatif.Scenario(batch=m.max_batch, prompt_len=1024, gen_len=256))
    over = whatif.answer(spec, gpu, whatif.Scenario(batch=m.max_batch + 1, prompt_len=1024, gen_len=256))
    assert at_max.memory.fits and not over.memory.fits
    big = whatif.answer(load_model_preset("llama-3.1-70b"), gpu, whatif.Scenario(batch=8, prompt_len=2048, gen_len=256))
    assert not big.memory.fits and big.memory.shortfall == big.memory.total - 80e9
    assert big.memory.devices_needed == math.ceil(big.memory.total / 80e9)
    assert big.ttft_s > 0  # never refused: every figure is still there


def test_compute_bound_batch_bisection_matches_a_linear_search():
    spec, gpu = load_model_preset("llama-3.1-8b"), load_hardware("h100-sxm")
    for prompt in (16, 128, 512, 4096):
        s = whatif.Scenario(batch=1, prompt_len=prompt, gen_len=2).resolved()
        pred = whatif.predictor(spec, gpu, s)
        found = perf.compute_bound_batch(spec, pred, prompt, s.weight_dtype, whatif.MAX_BATCH,
                                         kv_dtype=s.kv_dtype, mla_form=s.mla_form)
        assert found == whatif.answer(spec, gpu, s).compute_bound_batch
        c = pred.coef
        linear = None
        for b in range(1, whatif.MAX_BATCH + 1):
            t = pred.terms_s(forward_cost(spec, 1, prompt, b, **whatif.cost_kwargs(s)), "decode")
            if c["compute"] * t["compute"] >= c["memory"] * t["memory"] + c["kv"] * t["kv"]:
                linear = b
                break
        assert found == linear, prompt
    # at a short context a GQA model turns compute-bound; at a long one the cache reads win for ever
    assert whatif.answer(spec, gpu, whatif.Scenario(prompt_len=16, gen_len=2)).compute_bound_batch is not None
    long = whatif.answer(spec, gpu, whatif.Scenario(prompt_len=4096, gen_len=2))
    assert long.compute_bound_batch is None
    assert long.per_extra_sequence_s.kv > long.per_extra_sequence_s.compute > 0


def test_settings_that_cannot_run_are_refused_in_words():
    spec, gpu = load_model_preset("gpt2"), load_hardware("l4")
    with pytest.raises(ValueError, match="context window of 1,024"):
        whatif.answer(spec, gpu, whatif.Scenario(prompt_len=1000, gen_len=100))
    with pytest.raises(ValueError, match="batch must be"):
        whatif.answer(spec, gpu, whatif.Scenario(batch=0))
    with pytest.raises(ValueError, match="at most 1"):
        whatif.answer(spec, gpu, whatif.Scenario(prompt_len=100, gen_len=10,
                                                 assumptions={"bandwidth_efficiency": 1.5}))


def test_efficiency_assumptions_move_the_prediction():
    spec, gpu = load_model_preset("llama-3.1-8b"), load_hardware("h100-sxm")
    base = whatif.answer(spec, gpu, whatif.Scenario())
    slow = whatif.answer(spec, gpu, whatif.Scenario(assumptions={"bandwidth_efficiency": 0.4}))
    assert slow.tpot_s > 1.5 * base.tpot_s
    # the prefill is compute-bound: half the bandwidth costs it far less than it costs decode
    assert slow.ttft_s / base.ttft_s - 1 < 0.5 * (slow.tpot_s / base.tpot_s - 1)


def test_an_answer_is_quick():
    """Every chart's numbers for one setting; the budget lives in the page benchmark, this only
    guards against an accidental step-by-step loop (thousands of cost evaluations)."""
    import time

    spec, gpu = load_model_preset("llama-3.1-70b"), load_hardware("h100-sxm")
    s = whatif.Scenario(batch=64, prompt_len=8192, gen_len=8192)
    start = time.process_time()
    whatif.answer(spec, gpu, s)
    whatif.batch_sweep(spec, gpu, s)
    whatif.bytes_per_step_by_context(spec, s)
    assert time.process_time() - start < 1.0


def test_figures_say_predicted_or_counted_and_follow_the_settings():
    spec, gpu = load_model_preset("llama-3.1-8b"), load_hardware("h100-sxm")
    s1, s2 = whatif.Scenario(batch=1), whatif.Scenario(batch=32, weight_dtype="int4")
    built = []
    for s in (s1, s2):
        ans = whatif.answer(spec, gpu, s)
        built.append([figs.roofline(ans), figs.batch_tradeoff(whatif.batch_sweep(spec, gpu, s), s.batch),
                      figs.bytes_by_context(whatif.bytes_per_step_by_context(spec, s), ans.crossover_tokens, s.batch),
                      figs.time_split(ans), figs.memory_stack(ans)])
    for fig_a, fig_b in zip(*built, strict=True):
        go.Figure(fig_a)  # a valid Plotly figure (the page sends plain dicts, unvalidated)
        names = [t["name"] for t in fig_a["data"] if t.get("name")]
        assert names and all(("predicted" in n or "counted" in n or "estimated" in n or "roof" in n) for n in names)
        assert json.dumps(fig_a) != json.dumps(fig_b)  # every chart moves when the settings move
    # the roofline's decode point is exactly the answer's operating point
    ans = whatif.answer(spec, gpu, s1)
    dec = next(t for t in figs.roofline(ans)["data"] if t["name"].startswith("a decode step"))
    assert dec["x"][0] == pytest.approx(ans.decode_step.intensity)
    assert dec["y"][0] == pytest.approx(ans.decode_step.flops_per_s / 1e9)


def test_link_round_trip_and_bad_values_fall_back_with_a_notice():
    settings = {**link.DEFAULTS, "model": "llama-3.1-70b", "batch": 64, "kv": "fp8", "c_eff": 0.5}
    params = link.to_params(settings)
    assert params == {"model": "llama-3.1-70b", "batch": "64", "kv": "fp8", "c_eff": "0.5"}
    parsed, notices = link.parse({k: [v] for k, v in params.items()})
    assert parsed == settings and notices == []
    parsed, notices = link.parse({"model": ["/etc/passwd"], "hw": ["../assets/hardware/h200"], "batch": ["-3"],
                                  "prompt": ["1e9"], "bw_eff": ["2"], "unknown": ["x"], "c": ["int4"],
                                  "cbw": ["-5"], "cmem": ["nan"]})
    assert parsed == link.DEFAULTS
    assert len(notices) == 8 and all("could not be used" in n for n in notices)
    assert link.hardware_choices()[-2:] == ["custom", "host"]  # your figures, then this server
    assert set(link.model_choices()) == set(list_model_presets())
    custom = {**link.DEFAULTS, "hw": "custom", "cbw": 8000.0, "cmem": 192.0, "cfp8": 0.0, "c": "bf16"}
    parsed, notices = link.parse({k: [v] for k, v in link.to_params(custom).items()})
    assert parsed == custom and notices == []


def test_uploaded_configs_are_read_as_data_with_clear_messages():
    good = json.dumps({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024,
                       "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000,
                       "max_position_embeddings": 2048}).encode()
    name, config = whatif_settings.read_upload(good, "my-model.json")
    assert name == "my-model" and config["hidden_size"] == 512
    for data, message in ((b"\xff\xfe", "not a JSON file"), (b"{", "not a JSON file"), (b"[1, 2]", "not an object"),
                          (json.dumps({"model_type": "bloom"}).encode(), "cannot be priced"),
                          (json.dumps({"model_type": "llama"}).encode(), "cannot be priced"),
                          (b" " * (whatif_settings.MAX_CONFIG_BYTES + 1), "limit")):
        with pytest.raises(ValueError, match=message):
            whatif_settings.read_upload(data, "bad.json")


def test_speculative_decoding_reads_the_weights_once_per_check():
    assert whatif.expected_tokens_per_round(4, 0.0) == 1.0  # nothing accepted: the target's own token
    assert whatif.expected_tokens_per_round(4, 1.0) == 5.0
    assert whatif.expected_tokens_per_round(3, 0.5) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    target, draft, gpu = load_model_preset("llama-3.1-70b"), load_model_preset("llama-3.1-8b"), load_hardware("h100-sxm")
    small = whatif.answer(target, gpu, whatif.Scenario(batch=1, prompt_len=1024, gen_len=256), draft=draft)
    sp = small.speculative
    assert sp.verify_bytes_over_step_bytes == pytest.approx(1.0, abs=0.01)  # the weights, read once
    assert sp.verify_flops_over_step_flops == pytest.approx(5.0, rel=0.05)  # but 5 positions of arithmetic
    assert sp.tpot_s == pytest.approx((4 * sp.draft_step_s + sp.verify_s) / sp.expected_tokens_per_round)
    assert sp.speedup > 1.5
    # at a large batch decode is no longer so memory-bound: the check's extra FLOPs cost real time
    big = whatif.answer(target, gpu, whatif.Scenario(batch=256, prompt_len=1024, gen_len=256), draft=draft)
    assert big.speculative.speedup < sp.speedup
    assert whatif.answer(target, gpu, whatif.Scenario()).speculative is None
    with pytest.raises(ValueError, match="acceptance rate"):
        whatif.answer(target, gpu, whatif.Scenario(spec_alpha=1.5), draft=draft)


def test_tensor_parallelism_splits_the_work_and_pays_for_its_all_reduces():
    from dataclasses import replace

    spec, gpu = load_model_preset("llama-3.1-70b"), load_hardware("h100-sxm")  # 8 KV heads
    one = whatif.answer(spec, gpu, whatif.Scenario(batch=8, prompt_len=2048, gen_len=256))
    four = whatif.answer(spec, gpu, whatif.Scenario(batch=8, prompt_len=2048, gen_len=256, tp=4))
    sixteen = whatif.answer(spec, gpu, whatif.Scenario(batch=8, prompt_len=2048, gen_len=256, tp=16))
    assert not one.memory.fits and four.memory.fits
    assert four.memory.weights == pytest.approx(one.memory.weights / 4)
    assert four.memory.kv == pytest.approx(one.memory.kv / 4)
    assert sixteen.memory.kv == pytest.approx(one.memory.kv / 8)  # one whole head per device, copied
    # two ring all-reduces of batch x hidden bf16 values per layer per decode step
    link = gpu.interconnect
    message = 8 * spec.hidden * 2
    ring = 2 * 3 * link.latency_s + 2 * 3 / 4 * message / link.bandwidth_bytes_per_s
    assert four.decode_step.terms_s["allreduce"] == pytest.approx(2 * spec.n_layers * ring)
    assert one.decode_step.terms_s["allreduce"] == 0.0
    assert four.tpot_s < one.tpot_s / 2 and four.ttft_s < one.ttft_s / 3
    assert sixteen.decode_step.terms_s["allreduce"] > four.decode_step.terms_s["allreduce"]
    no_link = replace(gpu, interconnect=None)
    with pytest.raises(ValueError, match="no device-to-device link"):
        whatif.answer(spec, no_link, whatif.Scenario(tp=2))
    with pytest.raises(ValueError, match="tensor parallelism must be"):
        whatif.answer(load_model_preset("gpt2"), gpu, whatif.Scenario(prompt_len=100, gen_len=10, tp=13))


def test_speculative_plain_step_is_the_same_step_the_page_prices_with_tensor_parallelism():
    target, draft, gpu = load_model_preset("llama-3.1-70b"), load_model_preset("llama-3.1-8b"), load_hardware("h100-sxm")
    ans = whatif.answer(target, gpu, whatif.Scenario(batch=8, prompt_len=2048, gen_len=256, tp=4), draft=draft)
    assert ans.speculative.plain_step_s == pytest.approx(ans.decode_step.time_s)


def test_the_batch_sweep_and_the_answer_agree_on_memory():
    spec, gpu = load_model_preset("llama-3.1-70b"), load_hardware("h100-sxm")
    for tp in (1, 4, 16):
        s = whatif.Scenario(batch=8, prompt_len=2048, gen_len=256, tp=tp)
        row = next(r for r in whatif.batch_sweep(spec, gpu, s) if r["batch"] == 8)
        m = whatif.answer(spec, gpu, s).memory
        assert row["memory_bytes"] == m.total and row["fits"] == m.fits


LLAMA = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 4,
         "num_attention_heads": 8, "vocab_size": 1000, "max_position_embeddings": 2048}


def _hostile_configs() -> list[tuple[str, bytes, str]]:
    deep = b"[" * 100_000 + b"]" * 100_000  # under the size cap, far past the parser's recursion limit
    return [
        ("deep nesting", deep, "nested too deeply"),
        ("deep nesting inside an object", b'{"model_type": "llama", "x": ' + deep + b"}", "nested too deeply"),
        ("a 10^400 vocabulary", json.dumps({**LLAMA, "vocab_size": 10**400}).encode(), "beyond any real model"),
        ("a 5,000-digit number", b'{"vocab_size": 1' + b"0" * 5000 + b"}", "far too long"),
        ("10^12 layers", json.dumps({**LLAMA, "num_hidden_layers": 10**12}).encode(), "beyond any published model"),
        ("10^12 layers, priced by a sliding pattern",
         json.dumps({**LLAMA, "model_type": "gemma2", "head_dim": 64, "num_hidden_layers": 10**12,
                     "sliding_window": 4096}).encode(), "beyond any published model"),
        ("10^12 layers of experts",
         json.dumps({**LLAMA, "model_type": "qwen2_moe", "num_hidden_layers": 10**12, "num_experts": 8,
                     "num_experts_per_tok": 2, "moe_intermediate_size": 256, "decoder_sparse_step": 1,
                     "mlp_only_layers": list(range(1000)), "shared_expert_intermediate_size": 256}).encode(),
         "beyond any published model"),
        ("a layer list that is not a list",
         json.dumps({**LLAMA, "model_type": "qwen2_moe", "num_experts": 8, "num_experts_per_tok": 2,
                     "moe_intermediate_size": 256, "mlp_only_layers": "all",
                     "shared_expert_intermediate_size": 256}).encode(), "mlp_only_layers"),
    ]


@pytest.mark.timeout(60)  # a guard, not a measurement: walking 10^12 layers would take hours
@pytest.mark.parametrize("what,data,message", _hostile_configs(), ids=[c[0] for c in _hostile_configs()])
def test_hostile_configs_are_a_message_in_bounded_time(what, data, message):
    """Issue 29: each of these once raised past the page (RecursionError, OverflowError) or priced
    layer by layer without end; each is now refused with a message."""
    with pytest.raises(ValueError, match=message):
        whatif_settings.read_upload(data, "hostile.json")


@pytest.mark.timeout(60)  # a guard: counting layer by layer, 10^11 of them would take hours
def test_layers_of_one_kind_are_counted_not_walked():
    """A tiny model with 10^11 layers sits inside the parameter envelope, so it is priced; its sliding
    and expert layers are counted in closed form, the same answer a walk over 40 layers gives."""
    from core.spec import spec_from_config

    for layers in (40, 41, 10**11):
        spec = spec_from_config({"model_type": "gemma2", "head_dim": 8, "num_hidden_layers": layers,
                                 "sliding_window": 4096, "hidden_size": 8, "intermediate_size": 8,
                                 "vocab_size": 10, "num_attention_heads": 1, "num_key_value_heads": 1,
                                 "max_position_embeddings": 8192})
        walked = sum(1 for i in range(layers) if (i + 1) % 2) if layers < 10**3 else layers - layers // 2
        assert spec.n_sliding_layers == walked
        moe = spec_from_config({**LLAMA, "model_type": "qwen2_moe", "hidden_size": 8, "intermediate_size": 8,
                                "num_attention_heads": 1, "vocab_size": 10, "num_hidden_layers": layers,
                                "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 8,
                                "decoder_sparse_step": 3, "mlp_only_layers": [2, 5, 7, -1, "x"],
                                "shared_expert_intermediate_size": 8})
        walked = (sum(1 for i in range(layers) if i not in (2, 5, 7) and (i + 1) % 3 == 0) if layers < 10**3
                  else layers // 3 - 2)  # layers 3 and 6 (counting from 1) are sparse but listed dense
        assert moe.n_moe_layers == walked


def _string_fields(obj, path: tuple[str, ...]) -> list[str]:
    """The names of every string-valued field under obj; anything else must be a number or None."""
    import dataclasses

    if dataclasses.is_dataclass(obj):
        return [n for f in dataclasses.fields(obj) for n in _string_fields(getattr(obj, f.name), (*path, f.name))]
    if isinstance(obj, dict):
        return [n for v in obj.values() for n in _string_fields(v, path)]
    if isinstance(obj, str):
        return [path[-1]]
    assert obj is None or isinstance(obj, int | float | bool | tuple), (path, obj)
    return []


def test_the_answer_is_frozen_dataclasses_of_numbers_and_names_the_page_words():
    """The what-if answer carries numbers (and names: a model, a machine, a link, a form); its
    sentences are the page's (app/views/whatif/text.py), so core holds no wording."""
    import dataclasses

    target, draft = load_model_preset("llama-3.1-70b"), load_model_preset("llama-3.1-8b")
    names = {"model", "hardware", "hardware_label", "interconnect", "kv_split", "source", "draft", "priced_form",
             "weight_dtype", "kv_dtype", "compute_dtype", "mla_form", "transferred_from"}
    for spec, d, s in ((target, draft, whatif.Scenario(tp=8)), (load_model_preset("deepseek-v3"), None,
                                                               whatif.Scenario(tp=8, weight_dtype="fp8"))):
        ans = whatif.answer(spec, load_hardware("h200"), s, draft=d)
        with pytest.raises(dataclasses.FrozenInstanceError):
            ans.ttft_s = 0.0
        assert ans.kv_split in whatif.KV_SPLIT
        seen = _string_fields(ans, ())
        assert set(seen) <= names and "kv_split" in seen


def test_a_cached_prefix_prices_only_the_uncached_part_and_reads_the_rest_once():
    """A prompt with part of it cached (issue: a follow-up that reuses the cache): the prefill computes
    only the uncached tokens over the cached ones, which it reads once; decode and memory are those of
    the whole prompt; the answer carries the TTFT with nothing cached to set beside it."""
    spec, hw = load_model_preset("llama-3.1-8b"), load_hardware("h100-sxm")
    whole = whatif.answer(spec, hw, whatif.Scenario(prompt_len=4096))
    kept = whatif.answer(spec, hw, whatif.Scenario(prompt_len=4096, cached_prefix=3072))
    assert whole.ttft_uncached_s is None and kept.ttft_uncached_s == pytest.approx(whole.ttft_s)
    assert kept.ttft_s < whole.ttft_s / 2  # a quarter of the tokens to compute
    assert (kept.prefill.n_new, kept.prefill.n_cached) == (1024, 3072)
    cost = forward_cost(spec, 1024, 3072, 1, weight_dtype="bf16", kv_dtype="bf16")
    assert cost.bytes["kv_read"] == 3072 * kept.kv_bytes_per_token  # the cached part's keys and values, read once
    assert kept.prefill.bytes == cost.bytes["total"]  # and the answer prices exactly that forward
    assert kept.tpot_s == pytest.approx(whole.tpot_s) and kept.memory.total == whole.memory.total
    for bad in (4096, 5000, -1):
        with pytest.raises(ValueError, match="cached prefix tokens"):
            whatif.answer(spec, hw, whatif.Scenario(prompt_len=4096, cached_prefix=bad))
    from app.views.whatif import text

    said = text.summary(kept)
    assert "the last 1,024 of 4,096 prompt tokens (the first 3,072 are cached" in said
    assert f"with nothing cached the same prompt's prefill would take **{text.ms(whole.ttft_s)}**" in said
    settings, notices = link.parse({"cached": ["3072"], "prompt": ["4096"]})
    assert settings["cached"] == 3072 and not notices
    assert whatif_settings.scenario(settings).cached_prefix == 3072
    assert link.parse({"cached": ["-5"]})[0]["cached"] == 0 and link.parse({"cached": ["-5"]})[1]


def test_a_cached_prefix_as_long_as_the_prompt_is_a_message_on_the_page():
    from tests.apptest import open_view

    at = open_view("whatif", query={"prompt": "100", "cached": "100"})
    assert not at.exception
    assert any("cached prefix tokens must be a whole number from 0 to the prompt length less one (99)" in e.value
               for e in at.error)
    assert at.number_input(key="wi_cached_prefix").value == 100  # the reader's value is kept to edit
