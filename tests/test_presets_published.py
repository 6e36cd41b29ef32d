"""Bundled model presets against figures their publishers (or well-known write-ups) state.

Each check names its source. A preset whose config.json was typed wrong fails here, not on a page.
"""

from __future__ import annotations

import pytest

from core.cost import kv_bytes_per_token, kv_cache_bytes
from core.spec import load_model_preset

PUBLISHED_PARAMS = [
    # (preset, parameters, relative tolerance, source)
    ("smollm2-360m", 361.82e6, 0.001, "HuggingFaceTB/SmolLM2-360M-Instruct model page: 362M params (safetensors)"),
    ("smollm2-1.7b", 1.71e9, 0.005, "HuggingFaceTB/SmolLM2-1.7B-Instruct model page: 1.71B params"),
    ("qwen2.5-7b", 7.61e9, 0.005, "Qwen/Qwen2.5-7B model card: Number of Parameters 7.61B"),
    ("llama-3.1-405b", 405.85e9, 0.002, "meta-llama/Llama-3.1-405B model page: 406B params (405.85B)"),
    ("tinyllama-1.1b", 1.1e9, 0.005, "TinyLlama/TinyLlama-1.1B model card: 1.1B parameters"),
    ("pythia-1.4b", 1_414_647_808, 0, "EleutherAI/pythia-1.4b: 1,414,647,808 parameters (Pythia paper, Table 1 "
     "and the model card)"),
    ("opt-1.3b", 1.32e9, 0.005, "facebook/opt-1.3b model page: 1.32B params; OPT paper (Zhang et al. 2022), "
     "Table 1: 1.3B"),
    ("falcon-7b", 6.92e9, 0.001, "tiiuae/falcon-7b model page: 6.92B params (safetensors); 7B in the Falcon paper"),
    ("mixtral-8x7b", 46.7e9, 0.001, "Mixtral of Experts (Jiang et al. 2024), section 2: 47B parameters; "
     "mistralai/Mixtral-8x7B-v0.1 model page: 46.7B params"),
    ("qwen3-30b-a3b", 30.5e9, 0.002, "Qwen/Qwen3-30B-A3B model card: 30.5B in total, 3.3B activated"),
    ("deepseek-v3", 671e9, 0.001, "DeepSeek-V3 technical report, abstract: 671B total parameters (the 14B "
     "multi-token-prediction module of the 685B checkpoint excluded; transformers does not build it)"),
    ("gemma-2-9b", 9_241_705_984, 0, "google/gemma-2-9b model page: 9.24B params (safetensors: 9,241,705,984)"),
]


@pytest.mark.parametrize(("name", "params", "rel", "source"), PUBLISHED_PARAMS)
def test_published_parameter_counts(name, params, rel, source):
    assert load_model_preset(name).params_total == pytest.approx(params, rel=rel), source


def test_published_kv_cache_figures():
    # Llama-3.1-405B, bf16: 2 x 126 layers x 8 KV heads x 128 x 2 bytes (GQA; Meta's model card shapes)
    assert kv_bytes_per_token(load_model_preset("llama-3.1-405b"), "bf16") == 516_096
    # Llama-3.1-70B, bf16: 2 x 80 x 8 x 128 x 2
    assert kv_bytes_per_token(load_model_preset("llama-3.1-70b"), "bf16") == 327_680
    # Llama-2-13B, fp16, one 8,192-token sequence: about 6.7 GB (the usual "0.8 MB per token" figure)
    assert kv_cache_bytes(load_model_preset("llama-2-13b"), 8192, 1, "fp16") == pytest.approx(6.7e9, rel=0.01)


def test_gemma_2_9b_window_layers_stop_growing():
    """Gemma 2 9B: 42 layers alternating a 4,096-token window with global attention (Gemma 2 report,
    Table 1), 8 KV heads of 256: 2 x 42 x 8 x 256 x 2 = 344,064 bf16 bytes per token while every
    layer still grows; past the window only the 21 global layers do."""
    spec = load_model_preset("gemma-2-9b")
    assert (spec.n_layers, spec.n_sliding_layers, spec.sliding_window) == (42, 21, 4096)
    assert kv_bytes_per_token(spec, "bf16") == 344_064
    per_layer = 2 * 8 * 256 * 2
    grown = kv_cache_bytes(spec, 32_768, 1, "bf16") - kv_cache_bytes(spec, 16_384, 1, "bf16")
    assert grown == 21 * per_layer * 16_384  # only the global layers keep growing


def test_falcon_7b_multi_query_cache():
    """Falcon-7B: multi-query attention, one K and one V head of 64 per layer for all 71 query heads
    (Falcon paper, section 4.1): 2 x 32 x 1 x 64 x 2 = 8,192 bf16 bytes per token, 71x less than
    multi-head attention would keep."""
    spec = load_model_preset("falcon-7b")
    assert (spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.norms_per_layer) == (71, 1, 64, 1)
    assert kv_bytes_per_token(spec, "bf16") == 8_192


def test_published_active_parameters_of_mixtures_of_experts():
    """Active parameters (what one token runs through): Mixtral-8x7B about 12.9B of 46.7B (Mixtral
    paper, section 2: "13B active"; the model page's 12.9B); Qwen3-30B-A3B 3.3B activated and 29.9B
    non-embedding (its model card). A dense model's active parameters are all of them."""
    mixtral, qwen = load_model_preset("mixtral-8x7b"), load_model_preset("qwen3-30b-a3b")
    assert mixtral.params_active == pytest.approx(12.9e9, rel=0.002)
    assert (mixtral.n_experts, mixtral.experts_per_token) == (8, 2)
    assert qwen.params_active == pytest.approx(3.3e9, rel=0.02)
    assert qwen.params_total - qwen.params_embed - qwen.params_lm_head == pytest.approx(29.9e9, rel=0.002)
    dense = load_model_preset("llama-3.1-8b")
    assert dense.params_active == dense.params_total and not dense.is_moe


def test_deepseek_v3_latent_cache_and_active_parameters():
    """DeepSeek-V3 (technical report, section 2.1): multi-head latent attention caches a 512-wide
    latent plus a 64-wide rotary key per layer, 61 x (512 + 64) x 2 = 70,272 bf16 bytes per token
    (a Llama-3.1-70B token takes 327,680); 37B of its 671B parameters are activated per token; 3
    dense layers, then 256 routed experts (8 per token) and one shared expert."""
    spec = load_model_preset("deepseek-v3")
    assert kv_bytes_per_token(spec, "bf16") == 70_272
    assert (spec.n_experts, spec.experts_per_token, spec.n_moe_layers) == (256, 8, 58)
    assert spec.params_active == pytest.approx(37e9, rel=0.02)
