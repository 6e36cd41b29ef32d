"""The cost model against what torch counts and what the cache really holds.

FLOPs are checked per part against FlopCounterMode's per-module counts, so dropping or doubling
any one term (LM head, MLP, projections, attention scores) fails even when it is a small share.
"""

from __future__ import annotations

import json
import math
import os
import re

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Imported plainly: a missing torch must fail these tests, not skip them.
import torch  # noqa: E402
import transformers  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from core.cost import (  # noqa: E402
    ForwardCost,
    estimate,
    forward_cost,
    kv_bytes_per_token,
    kv_cache_bytes,
)
from core.spec import load_model_preset, spec_from_config  # noqa: E402
from tests.tiny_configs import (  # noqa: E402
    deepseek_small,
    falcon_small,
    gpt_small,
    moe_small,
    neox_small,
    opt_small,
    small,
)

# vocab 1024 keeps the LM head a visible share of the FLOPs, so a wrong head term cannot hide in 2%.
SMALL = small(vocab=1024, positions=256)
GPT_SMALL = gpt_small(vocab=1024, positions=256)
ARCHS = {
    "llama_gqa": ("llama", SMALL),
    "qwen2": ("qwen2", SMALL),
    "mistral_window6": ("mistral", {**SMALL, "sliding_window": 6}),  # the cache outgrows the window
    "gpt2": ("gpt2", GPT_SMALL),
    "gpt_bigcode_mqa": ("gpt_bigcode", {**GPT_SMALL, "n_inner": 96}),
    "gpt_neox": ("gpt_neox", neox_small(vocab=1024, positions=256)),
    "opt": ("opt", opt_small(vocab=1024, positions=256)),
    "falcon_mqa": ("falcon", falcon_small(vocab=1024, positions=256)),
    "falcon_new_arch": ("falcon", {**falcon_small(vocab=1024, positions=256), "new_decoder_architecture": True,
                                   "num_kv_heads": 2, "bias": True}),
    "mixtral": ("mixtral", moe_small(vocab=1024, positions=256)),
    "qwen2_moe": ("qwen2_moe", {**moe_small(vocab=1024, positions=256), "num_hidden_layers": 3,
                                "shared_expert_intermediate_size": 40, "mlp_only_layers": [1]}),
    "qwen3_moe": ("qwen3_moe", {**moe_small(vocab=1024, positions=256), "head_dim": 16}),
    # latent attention with low-rank queries; then full queries with every bias on
    "deepseek_v3": ("deepseek_v3", deepseek_small(vocab=1024, positions=256)),
    "deepseek_v3_full_q_bias": ("deepseek_v3", {**deepseek_small(vocab=1024, positions=256), "q_lora_rank": None,
                                                "attention_bias": True}),
    # layer 0 slides (window 6), layer 1 is global: the two kinds of layer in one cache
    "gemma2_window6": ("gemma2", {**SMALL, "head_dim": 16, "sliding_window": 6}),
    "gemma3_window6": ("gemma3_text", {**SMALL, "head_dim": 16, "sliding_window": 6, "sliding_window_pattern": 2}),
}
_MODELS: dict[str, tuple] = {}
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3")


def tiny(key: str):
    """(model, spec), built once per architecture with eager attention (FlopCounterMode has no
    formula for the CPU SDPA kernel, so under sdpa attention would count as zero)."""
    if key not in _MODELS:
        model_type, kwargs = ARCHS[key]
        cfg = transformers.AutoConfig.for_model(model_type, **kwargs)
        torch.manual_seed(0)
        # eager experts too: the default grouped kernel is invisible to FlopCounterMode
        extra = {"experts_implementation": "eager"} if model_type in MOE_TYPES else {}
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", **extra).eval()
        _MODELS[key] = (model, spec_from_config(cfg))
    return _MODELS[key]


_LAYER = r"\.(?:layers|h)\.\d+\."


def counted(model, **inputs) -> tuple[int, dict[str, int]]:
    """Run one forward under FlopCounterMode; return the total and the same parts the model uses."""
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(**inputs)
    per_module = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    attn = sum(v for k, v in per_module.items() if re.search(_LAYER + r"(?:self_attn|attn|attention|self_attention)$", k))
    proj = sum(v for k, v in per_module.items()
               if re.search(_LAYER + r"(?:self_attn|attn|attention|self_attention)\.\w+$", k))
    parts = {
        "attn_proj": proj,
        "attn_scores": attn - proj,  # matmuls inside the attention module but outside its linears
        # OPT keeps its two MLP linears (fc1, fc2) directly in the layer, with no mlp module
        "mlp": sum(v for k, v in per_module.items() if re.search(_LAYER + r"(?:mlp|fc1|fc2)$", k)),
        "lm_head": sum(v for k, v in per_module.items() if k.endswith(".lm_head")),
    }
    return counter.get_total_flops(), parts


def assert_flops_match(cost: ForwardCost, total: int, parts: dict[str, int]) -> None:
    assert cost.flops["total"] == pytest.approx(total, rel=0.02)
    for part, value in parts.items():
        assert cost.flops[part] == pytest.approx(value, rel=0.02), part
    assert cost.flops["total"] == sum(cost.flops[p] for p in parts)


@pytest.mark.parametrize("key", sorted(ARCHS))
def test_flops_match_flop_counter_prefill_and_decode(key):
    model, spec = tiny(key)
    batch, prompt = 2, 11
    ids = torch.randint(0, spec.vocab, (batch, prompt))
    cache = transformers.DynamicCache(config=model.config)
    total, parts = counted(model, input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
    assert_flops_match(forward_cost(spec, prompt, 0, batch, lm_head_tokens=1), total, parts)
    for _ in range(2):  # two decode steps: the context grows between them
        context = cache.get_seq_length()
        total, parts = counted(model, input_ids=ids[:, :1], cache=cache, use_cache=True, logits_to_keep=1)
        assert_flops_match(forward_cost(spec, 1, context, batch), total, parts)


@pytest.mark.parametrize("key", ["llama_gqa", "gpt2"])
def test_plain_forward_runs_the_head_on_every_position(key):
    model, spec = tiny(key)
    n = 9
    total, parts = counted(model, input_ids=torch.randint(0, spec.vocab, (1, n)))
    assert_flops_match(forward_cost(spec, n, 0, lm_head_tokens=n), total, parts)
    assert forward_cost(spec, n, 0).flops["lm_head"] * n == parts["lm_head"]  # default is one position


@pytest.mark.parametrize("key", ["llama_gqa", "mistral_window6", "gpt2"])
def test_static_cache_attends_over_its_allocated_length(key):
    model, spec = tiny(key)
    allocated, prompt = 24, 8
    cache = transformers.StaticCache(config=model.config, max_cache_len=allocated)
    ids = torch.randint(0, spec.vocab, (1, prompt))
    total, parts = counted(model, input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
    assert_flops_match(forward_cost(spec, prompt, 0, attn_len=allocated), total, parts)
    total, parts = counted(model, input_ids=ids[:, :1], cache=cache, use_cache=True, logits_to_keep=1)
    assert_flops_match(forward_cost(spec, 1, prompt, attn_len=allocated), total, parts)


def test_eager_scores_cover_the_full_square_causal_half_reported_apart():
    _, spec = tiny("llama_gqa")
    n = 16
    cost = forward_cost(spec, n, 0)
    per_pair = 4 * spec.n_heads * spec.head_dim * spec.n_layers
    assert cost.flops["attn_scores"] == per_pair * n * n
    assert cost.flops_attn_causal == per_pair * n * (n + 1) // 2
    step = forward_cost(spec, 1, 40)  # one new token sees all 40 cached positions and itself
    assert step.flops["attn_scores"] == step.flops_attn_causal == per_pair * 41


def test_causal_flops_respect_the_sliding_window():
    _, spec = tiny("mistral_window6")  # every layer slides, window 6
    per_pair = 4 * spec.n_heads * spec.head_dim * spec.n_layers
    for n_new, n_cached in [(10, 3), (1, 2), (1, 20), (4, 0), (30, 0)]:
        seen = sum(min(n_cached + i, spec.sliding_window) for i in range(1, n_new + 1))
        assert forward_cost(spec, n_new, n_cached).flops_attn_causal == per_pair * seen


@pytest.mark.parametrize(("key", "batch", "dtype"), [("llama_gqa", 1, torch.float32),
                                                     ("llama_gqa", 2, torch.bfloat16),
                                                     ("gpt_bigcode_mqa", 2, torch.float32),
                                                     ("gpt2", 2, torch.float32), ("gpt_neox", 2, torch.float32),
                                                     ("opt", 2, torch.float32),
                                                     ("mistral_window6", 2, torch.float32),
                                                     ("gemma2_window6", 2, torch.float32),
                                                     ("falcon_mqa", 2, torch.float32),
                                                     ("deepseek_v3", 2, torch.bfloat16),
                                                     ("gemma3_window6", 1, torch.bfloat16)])
def test_kv_bytes_equal_the_real_cache(key, batch, dtype):
    model, spec = tiny(key)
    model = model.to(dtype)
    kv_dtype = "bf16" if dtype == torch.bfloat16 else "fp32"
    try:
        cache = transformers.DynamicCache(config=model.config)
        prompt = 9
        ids = torch.randint(0, spec.vocab, (batch, prompt))

        def held() -> int:
            return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)

        with torch.no_grad():
            model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
            for step in range(3):
                seq = prompt + step
                assert held() == kv_cache_bytes(spec, seq, batch, kv_dtype)
                # what the next step reads is exactly what the cache holds
                assert forward_cost(spec, 1, seq, batch, kv_dtype=kv_dtype).bytes["kv_read"] == held()
                if spec.sliding_window is None:
                    assert held() == kv_bytes_per_token(spec, kv_dtype) * seq * batch
                before = held()
                model(input_ids=ids[:, :1], cache=cache, use_cache=True, logits_to_keep=1)
                if spec.sliding_window is None:
                    write = forward_cost(spec, 1, seq, batch, kv_dtype=kv_dtype).bytes["kv_write"]
                    assert held() - before == write
    finally:
        model.to(torch.float32)


def test_kv_uses_kv_heads_not_query_heads():
    _, spec = tiny("llama_gqa")
    assert kv_bytes_per_token(spec) == 2 * spec.n_layers * spec.n_kv_heads * spec.head_dim * 4
    assert spec.n_kv_heads < spec.n_heads


def test_published_kv_figures():
    assert kv_bytes_per_token(load_model_preset("smollm2-135m"), "fp32") == 46_080
    assert kv_bytes_per_token(load_model_preset("llama-3.1-70b"), "bf16") == 327_680
    llama2_13b = load_model_preset("llama-2-13b")
    assert llama2_13b.n_kv_heads == llama2_13b.n_heads == 40
    assert kv_cache_bytes(llama2_13b, 8192, 1, "fp16") == pytest.approx(6_710_886_400, rel=0.01)
    assert kv_bytes_per_token(llama2_13b, "fp16") * 8192 == 6_710_886_400


def test_decode_weight_bytes_are_the_whole_model_once():
    spec = load_model_preset("smollm2-135m")  # tied: the LM head reads the embedding, counted once
    step = forward_cost(spec, 1, 100, batch=8)
    assert step.bytes["weights"] == 4 * spec.params_total == 538_060_032
    big = load_model_preset("llama-3.1-8b")  # untied: the embedding contributes only looked-up rows
    step = forward_cost(big, 1, 100, batch=4, weight_dtype="bf16")
    assert step.bytes["weights"] == 2 * (big.params_total - big.params_embed + 4 * big.hidden)
    assert forward_cost(big, 1, 100, batch=4, weight_dtype="int4").bytes["weights"] == pytest.approx(
        step.bytes["weights"] / 4, rel=0.001)


def test_dtype_defaults_and_aliases():
    spec = load_model_preset("smollm2-135m")
    int4 = forward_cost(spec, 1, 10, weight_dtype="int4")
    bf16 = forward_cost(spec, 1, 10, weight_dtype="bf16")
    assert int4.bytes["kv_read"] == bf16.bytes["kv_read"] == 10 * kv_bytes_per_token(spec, "bf16")
    assert int4.bytes["activations"] == bf16.bytes["activations"]
    assert forward_cost(spec, 1, 10, weight_dtype="float32").to_dict() == forward_cost(spec, 1, 10).to_dict()
    fp8_kv = forward_cost(spec, 1, 10, weight_dtype="bf16", kv_dtype="fp8")
    assert fp8_kv.bytes["kv_read"] * 2 == bf16.bytes["kv_read"]
    with pytest.raises(ValueError, match="dtype"):
        forward_cost(spec, 1, 10, weight_dtype="fp7")


def test_prefill_is_compute_heavy_decode_is_memory_heavy():
    spec = load_model_preset("llama-3.1-8b")
    prefill = forward_cost(spec, 512, 0, weight_dtype="bf16")
    decode = forward_cost(spec, 1, 512, weight_dtype="bf16")
    assert prefill.intensity > 100 > 2 > decode.intensity
    # batching decode reuses each weight read: intensity grows with batch
    assert forward_cost(spec, 1, 512, 32, weight_dtype="bf16").intensity > 10 * decode.intensity


def test_to_dict_format():
    d = forward_cost(load_model_preset("gpt2"), 5, 3, 2).to_dict()
    assert list(d) == ["n_new", "n_cached", "batch", "flops", "flops_attn_causal", "bytes", "intensity",
                       "experts_read", "tokens", "lm_rows", "row_flops"]
    assert set(d["flops"]) == {"attn_proj", "attn_scores", "mlp", "lm_head", "total"}
    assert set(d["bytes"]) == {"weights", "kv_read", "kv_write", "activations", "total"}
    assert (d["n_new"], d["n_cached"], d["batch"]) == (5, 3, 2)
    assert json.loads(json.dumps(d)) == d
    assert d["intensity"] == d["flops"]["total"] / d["bytes"]["total"]


@pytest.mark.parametrize("kwargs", [{"n_new": 0, "n_cached": 0}, {"n_new": 1, "n_cached": -1},
                                    {"n_new": 2, "n_cached": 0, "batch": 0},
                                    {"n_new": 2, "n_cached": 0, "lm_head_tokens": 3},
                                    {"n_new": 2, "n_cached": 5, "attn_len": 6},
                                    {"n_new": 1.5, "n_cached": 0}])
def test_invalid_arguments(kwargs):
    with pytest.raises(ValueError):
        forward_cost(load_model_preset("gpt2"), **kwargs)


def _brute_force(spec, prompt, gen, batch, **kw):
    """What estimate() must equal: every decode step priced at its own context."""
    steps = [forward_cost(spec, 1, prompt + i - 1, batch, **kw) for i in range(1, gen)]
    flops = sum(c.flops["total"] for c in steps)
    nbytes = {k: sum(c.bytes[k] for c in steps) for k in ("weights", "kv_read", "kv_write", "activations")}
    return flops, nbytes


@pytest.mark.parametrize(("preset", "prompt", "gen", "batch", "extra"), [
    ("smollm2-135m", 20, 50, 1, {}),
    ("gpt2", 5, 2, 3, {}),
    ("mistral-7b-v0.1", 4000, 300, 2, {}),  # the cache crosses the 4096 window mid-generation
    ("llama-3.1-8b", 100, 40, 2, {"static_cache_len": 160}),
])
def test_estimate_sums_every_decode_step(preset, prompt, gen, batch, extra):
    spec = load_model_preset(preset)
    est = estimate(spec, prompt, gen, batch, "bf16", **extra)
    kw = {"weight_dtype": "bf16", "attn_len": extra.get("static_cache_len")}
    flops, nbytes = _brute_force(spec, prompt, gen, batch, **kw)
    assert est["decode"]["flops"] == flops
    assert {k: est["decode"]["bytes"][k] for k in nbytes} == nbytes
    assert est["decode"]["bytes"]["total"] == sum(nbytes.values())
    assert est["decode"]["steps"] == gen - 1
    pre = forward_cost(spec, prompt, 0, batch, **kw)
    assert est["prefill"]["flops"] == pre.flops["total"] and est["prefill"]["n_tokens"] == prompt


def test_estimate_decode_kv_read_is_the_growing_sum_not_the_final_length():
    spec = load_model_preset("smollm2-135m")
    prompt, gen, batch = 30, 64, 4
    est = estimate(spec, prompt, gen, batch, "fp32")
    per_token = kv_bytes_per_token(spec, "fp32")
    closed_form = per_token * batch * sum(prompt + i - 1 for i in range(1, gen))
    assert est["decode"]["bytes"]["kv_read"] == closed_form
    assert closed_form < per_token * batch * (prompt + gen - 1) * (gen - 1)  # the shortcut overprices
    assert est["kv_bytes_per_token"] == 46_080
    assert est["kv_bytes_final"] == per_token * (prompt + gen - 1) * batch
    assert est["params"] == 134_515_008
    assert est["prefill"]["bytes"]["kv_write"] == per_token * prompt * batch
    assert est["decode"]["bytes"]["kv_write"] == per_token * (gen - 1) * batch


def test_estimate_single_token_has_no_decode():
    est = estimate(load_model_preset("gpt2"), 12, 1, 1, "fp32")
    assert est["decode"]["steps"] == 0 and est["decode"]["flops"] == 0
    assert all(v == 0 for v in est["decode"]["bytes"].values())
    assert est["prefill"]["flops"] > 0
    json.dumps(est)
    assert "time_s" not in json.dumps(est)


def test_estimate_window_caps_final_cache():
    spec = load_model_preset("mistral-7b-v0.1")
    est = estimate(spec, 5000, 10, 1, "bf16")
    assert est["kv_bytes_final"] == kv_bytes_per_token(spec, "bf16") * 4095
    assert math.isclose(est["kv_bytes_per_token"], 131_072)


def test_falcon_new_architecture_cache_is_broadcast_in_transformers():
    """Falcon's new decoder architecture has num_kv_heads groups, and that is what the cost model
    (like a serving engine) stores; transformers broadcasts each group's K and V to every query
    head before caching, so its cache holds n_heads / n_kv_heads times as much."""
    model, spec = tiny("falcon_new_arch")
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.randint(0, spec.vocab, (1, 7)), cache=cache, use_cache=True, logits_to_keep=1)
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert spec.n_kv_heads == 2 < spec.n_heads
    assert held == kv_cache_bytes(spec, 7, 1, "fp32") * spec.n_heads // spec.n_kv_heads



def test_moe_decode_reads_k_experts_alone_and_all_of_them_in_a_crowd():
    """Uniform routing: a forward of b tokens reads E(1 - (1 - k/E)^b) distinct experts per MoE
    layer, k for one token and nearly E for many; weight bytes follow, FLOPs stay k per token."""
    spec = load_model_preset("mixtral-8x7b")
    e, k = spec.n_experts, spec.experts_per_token
    assert spec.experts_read(1) == pytest.approx(k)
    assert spec.experts_read(2) == pytest.approx(e * (1 - (1 - k / e) ** 2))  # 3.75 of 8
    assert spec.experts_read(64) == pytest.approx(e, rel=1e-6)
    reads = [forward_cost(spec, 1, 100, b, weight_dtype="bf16") for b in (1, 2, 4, 8, 16)]
    assert [c.experts_read for c in reads] == sorted(c.experts_read for c in reads)
    one_expert = 2 * spec.n_moe_layers * spec.expert_params  # bf16 bytes of one expert in every layer
    for a, b in zip(reads, reads[1:], strict=False):
        rows = 2 * spec.hidden * (b.batch - a.batch)  # each extra token looks up its embedding row (untied)
        assert b.bytes["weights"] - a.bytes["weights"] - rows == pytest.approx(
            (b.experts_read - a.experts_read) * one_expert, abs=4)
        assert b.flops["mlp"] == pytest.approx(2 * a.flops["mlp"])  # arithmetic: k experts per token
    assert forward_cost(load_model_preset("llama-3.1-8b"), 1, 100, 4).experts_read is None


def test_latent_attention_caches_the_latent_and_serving_absorbs_decode_only():
    """DeepSeek-V3 (published: 61 x (512 + 64) x 2 = 70,272 bf16 bytes per token, DeepSeek-V3
    technical report section 2.1.1 and its config). transformers re-expands the latent of every
    attended position on every forward (checked against FlopCounterMode above); a serving engine
    absorbs kv_b_proj for decode, so its decode step's kv_b work is one token's, not the context's."""
    spec = load_model_preset("deepseek-v3")
    assert kv_bytes_per_token(spec, "bf16") == 61 * (512 + 64) * 2 == 70_272
    assert spec.n_kv_heads == 1 and spec.kv_width == 576
    context = 4096
    tf = forward_cost(spec, 1, context, weight_dtype="bf16")
    sv = forward_cost(spec, 1, context, weight_dtype="bf16", mla_form="serving")
    up = 2 * spec.kv_up_params * spec.n_layers  # kv_b_proj FLOPs of one position, all layers
    assert tf.flops["attn_proj"] - sv.flops["attn_proj"] == up * context  # expanded: context + 1 positions
    span = context + 1
    h = spec.n_heads
    assert tf.flops["attn_scores"] == 2 * h * (192 + 128) * span * spec.n_layers
    assert sv.flops["attn_scores"] == 2 * h * (576 + 512) * span * spec.n_layers
    assert sv.flops["total"] < tf.flops["total"] / 2  # at 4k context the re-expansion dominates
    for key in ("weights", "kv_read", "kv_write"):  # same weights read, same latent cache
        assert sv.bytes[key] == tf.bytes[key]
    # a prefill expands in both forms; a chunk over a long cache too; a short verification absorbs
    assert forward_cost(spec, 512, 0, mla_form="serving").flops == forward_cost(spec, 512, 0).flops
    assert forward_cost(spec, 256, 1000, mla_form="serving").flops == forward_cost(spec, 256, 1000).flops
    assert (forward_cost(spec, 5, 1000, mla_form="serving").flops["attn_proj"]
            < forward_cost(spec, 5, 1000).flops["attn_proj"])
    with pytest.raises(ValueError, match="mla_form"):
        forward_cost(spec, 1, 10, mla_form="absorbed")
    # a dense model ignores the form
    llama = load_model_preset("llama-3.1-8b")
    assert forward_cost(llama, 1, 100, mla_form="serving") == forward_cost(llama, 1, 100)


def test_serving_form_takes_the_cheaper_form_per_row():
    """core.cost.absorbs is the per-row choice: check it against both forms priced whole."""
    from core.cost import step_cost
    _, spec = tiny("deepseek_v3")
    for n_new, n_cached in [(1, 0), (1, 3), (1, 200), (4, 2), (4, 100), (60, 10), (11, 0)]:
        tf = forward_cost(spec, n_new, n_cached).flops["total"]
        sv = forward_cost(spec, n_new, n_cached, mla_form="serving").flops["total"]
        mixed = step_cost(spec, [(n_new, n_cached), (1, 50)], mla_form="serving").flops["total"]
        assert sv <= tf
        assert mixed == sv + forward_cost(spec, 1, 50, mla_form="serving").flops["total"]  # forms per row
    assert forward_cost(spec, 1, 200, mla_form="serving").flops["total"] < forward_cost(spec, 1, 200).flops["total"]
    assert forward_cost(spec, 11, 0, mla_form="serving").flops == forward_cost(spec, 11, 0).flops
