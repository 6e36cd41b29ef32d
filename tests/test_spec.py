"""ModelSpec must count exactly the parameters transformers builds from the same config.

Tiny random-weight models stand in for real ones (same code paths, kilobytes of weights); the
bundled presets are built on the meta device, which allocates no memory, so even 70B is instant.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Imported plainly: a missing torch must fail these tests, not skip them.
import torch  # noqa: E402
import transformers  # noqa: E402

from core.spec import (  # noqa: E402
    ASSETS_DIR,
    ModelSpec,
    list_model_presets,
    load_model_preset,
    spec_from_config,
    spec_from_json,
)
from tests.tiny_configs import (  # noqa: E402
    deepseek_small,
    falcon_small,
    gpt_small,
    moe_small,
    neox_small,
    opt_small,
    small,
)

SMALL = small(vocab=256, positions=128)
GPT_SMALL = gpt_small(vocab=256, positions=128)

TINY_CONFIGS: dict[str, tuple[str, dict]] = {
    "llama_gqa_untied": ("llama", SMALL),
    "llama_gqa_tied_biases": ("llama", {**SMALL, "tie_word_embeddings": True, "attention_bias": True,
                                        "mlp_bias": True}),
    "llama_head_dim_key": ("llama", {**SMALL, "head_dim": 24}),
    "mistral_sliding": ("mistral", {**SMALL, "sliding_window": 8}),
    "qwen2_qkv_bias": ("qwen2", SMALL),
    "qwen2_tied_mha": ("qwen2", {**SMALL, "num_key_value_heads": 4, "tie_word_embeddings": True}),
    "qwen3_qk_norm": ("qwen3", {**SMALL, "head_dim": 32}),
    "gemma": ("gemma", {**SMALL, "head_dim": 24}),
    "smollm3": ("smollm3", SMALL),
    "phi3_fused": ("phi3", SMALL),
    "gpt2": ("gpt2", GPT_SMALL),
    "gpt2_n_inner_untied": ("gpt2", {**GPT_SMALL, "n_inner": 100, "tie_word_embeddings": False}),
    "gpt_bigcode_mqa": ("gpt_bigcode", {**GPT_SMALL, "n_inner": 100}),
    "gpt_bigcode_mha": ("gpt_bigcode", {**GPT_SMALL, "multi_query": False}),
    "gpt_neox_untied": ("gpt_neox", neox_small(vocab=256, positions=128)),
    "gpt_neox_tied_no_attn_bias": ("gpt_neox", {**neox_small(vocab=256, positions=128), "tie_word_embeddings": True,
                                                "attention_bias": False, "use_parallel_residual": False}),
    "opt": ("opt", opt_small(vocab=256, positions=128)),
    "falcon_mqa_parallel": ("falcon", falcon_small(vocab=256, positions=128)),
    "falcon_new_arch_groups": ("falcon", {**falcon_small(vocab=256, positions=128), "new_decoder_architecture": True,
                                          "num_kv_heads": 2, "bias": True, "ffn_hidden_size": 96}),
    "falcon_sequential_mha_untied": ("falcon", {**falcon_small(vocab=256, positions=128), "parallel_attn": False,
                                                "multi_query": False, "bias": True, "tie_word_embeddings": False}),
    "mixtral": ("mixtral", moe_small(vocab=256, positions=128)),
    "qwen2_moe_shared_one_dense": ("qwen2_moe", {**moe_small(vocab=256, positions=128), "num_hidden_layers": 3,
                                                 "shared_expert_intermediate_size": 40, "mlp_only_layers": [1]}),
    "qwen3_moe_sparse_step2": ("qwen3_moe", {**moe_small(vocab=256, positions=128), "num_hidden_layers": 4,
                                             "head_dim": 24, "decoder_sparse_step": 2}),
    "deepseek_v3_latent": ("deepseek_v3", deepseek_small(vocab=256, positions=128)),
    "deepseek_v3_full_q_bias_no_shared": ("deepseek_v3", {**deepseek_small(vocab=256, positions=128), "q_lora_rank": None,
                                                          "attention_bias": True, "n_shared_experts": 0,
                                                          "first_k_dense_replace": 0}),
    "gemma2_interleaved": ("gemma2", {**SMALL, "head_dim": 24, "sliding_window": 8}),
    "gemma3_text_qk_norm": ("gemma3_text", {**SMALL, "num_hidden_layers": 6, "head_dim": 24, "sliding_window": 8}),
    "opt_no_bias_untied": ("opt", {**opt_small(vocab=256, positions=128), "enable_bias": False,
                                   "tie_word_embeddings": False}),
}


def tiny_config(key: str):
    model_type, kwargs = TINY_CONFIGS[key]
    return transformers.AutoConfig.for_model(model_type, **kwargs)


def real_param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())  # tied tensors are yielded once


@pytest.mark.parametrize("key", sorted(TINY_CONFIGS))
def test_params_total_equals_built_model(key):
    cfg = tiny_config(key)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    spec = spec_from_config(cfg)
    assert spec.params_total == real_param_count(model)
    # The config.json route (a plain dict) must read the same shapes as the config object.
    assert spec_from_config(cfg.to_dict()) == spec


def test_parts_add_up_and_match_module_groups():
    cfg = tiny_config("llama_gqa_untied")
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    spec = spec_from_config(cfg)
    by_part = {"embed": 0, "attn": 0, "mlp": 0, "norm": 0, "lm_head": 0}
    for name, p in model.named_parameters():
        part = ("embed" if "embed_tokens" in name else "attn" if "self_attn" in name else
                "mlp" if ".mlp." in name else "lm_head" if name.startswith("lm_head") else "norm")
        by_part[part] += p.numel()
    assert by_part == {"embed": spec.params_embed, "attn": spec.params_attn, "mlp": spec.params_mlp,
                       "norm": spec.params_norm, "lm_head": spec.params_lm_head}
    assert spec.params_pos == 0


def test_gpt2_reads_its_own_field_names_and_defaults():
    spec = load_model_preset("gpt2")
    assert (spec.n_layers, spec.hidden, spec.n_heads, spec.n_kv_heads, spec.head_dim) == (12, 768, 12, 12, 64)
    assert spec.mlp_width == 4 * 768  # n_inner absent from config.json means 4 * n_embd
    assert spec.tied_embeddings and spec.learned_pos_emb and not spec.gated_mlp
    assert spec.attn_bias and spec.mlp_bias and spec.norm == "layernorm"
    assert spec.params_pos == 1024 * 768 and spec.params_lm_head == 0
    assert spec.params_total == 124_439_808


def test_multi_query_has_one_kv_head():
    spec = spec_from_config(tiny_config("gpt_bigcode_mqa"))
    assert spec.n_kv_heads == 1 and spec.n_heads == 4 and spec.mlp_width == 100


def test_smollm2_preset_matches_meta_model_exactly():
    spec = load_model_preset("smollm2-135m")
    assert (spec.n_layers, spec.hidden, spec.n_heads, spec.n_kv_heads, spec.head_dim) == (30, 576, 9, 3, 64)
    assert (spec.mlp_width, spec.vocab, spec.max_positions) == (1536, 49152, 8192)
    assert spec.gated_mlp and spec.tied_embeddings and spec.params_lm_head == 0
    cfg = transformers.AutoConfig.for_model(**json.loads((ASSETS_DIR / "smollm2-135m.json").read_text()))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    assert real_param_count(model) == spec.params_total == 134_515_008
    assert spec.params_embed == 28_311_552


@pytest.mark.parametrize("name", list_model_presets())
def test_every_preset_matches_its_meta_model(name):
    data = json.loads((ASSETS_DIR / f"{name}.json").read_text())
    cfg = transformers.AutoConfig.for_model(**data)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    spec = load_model_preset(name)
    assert spec.params_total == real_param_count(model)
    # Reading the json dict (class defaults filled by our table) and the config object agree.
    assert dataclasses.replace(spec_from_config(cfg), name=name) == spec


def test_presets_listed():
    names = list_model_presets()
    for expected in ("smollm2-135m", "gpt2", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-0.5b",
                     "mistral-7b-v0.1"):
        assert expected in names


@pytest.mark.parametrize(("name", "published"), [("llama-3.1-8b", 8.03e9), ("llama-3.1-70b", 70.55e9),
                                                 ("qwen2.5-0.5b", 0.494e9), ("mistral-7b-v0.1", 7.24e9)])
def test_published_parameter_counts(name, published):
    assert load_model_preset(name).params_total == pytest.approx(published, rel=0.005)


def test_llama_70b_shapes():
    spec = load_model_preset("llama-3.1-70b")
    assert (spec.n_layers, spec.hidden, spec.n_kv_heads, spec.mlp_width, spec.vocab) == (80, 8192, 8, 28672, 128256)


def test_sliding_window_layers_follow_transformers():
    mistral = load_model_preset("mistral-7b-v0.1")
    assert (mistral.sliding_window, mistral.n_sliding_layers) == (4096, 32)
    qwen = load_model_preset("qwen2.5-0.5b")  # use_sliding_window false: full attention everywhere
    assert (qwen.sliding_window, qwen.n_sliding_layers) == (None, 0)
    raw = {**SMALL, "model_type": "qwen2", "num_hidden_layers": 6, "use_sliding_window": True,
           "sliding_window": 16, "max_window_layers": 4}
    cfg = transformers.AutoConfig.for_model(**raw)
    expected = sum(t == "sliding_attention" for t in cfg.layer_types)
    assert spec_from_config(raw).n_sliding_layers == spec_from_config(cfg).n_sliding_layers == expected == 2


def test_load_from_path_and_folder(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text((ASSETS_DIR / "gpt2.json").read_text())
    by_file = load_model_preset(str(folder / "config.json"))
    assert by_file.params_total == 124_439_808
    assert load_model_preset(folder).params_total == by_file.params_total
    assert spec_from_json(folder / "config.json").model_type == "gpt2"


@pytest.mark.parametrize("bad", ["no-such-model", "../assets/models/gpt2", "", 42, None])
def test_load_rejects_unknown_input(bad):
    with pytest.raises(ValueError):
        load_model_preset(bad)


@pytest.mark.parametrize(("drop", "field"), [("hidden_size", "hidden_size"), ("num_hidden_layers",
                                              "num_hidden_layers"), ("intermediate_size", "intermediate_size"),
                                             ("vocab_size", "vocab_size"), ("model_type", "model_type")])
def test_missing_field_is_named(drop, field):
    data = {**SMALL, "model_type": "llama"}
    del data[drop]
    with pytest.raises(ValueError, match=field):
        spec_from_config(data)


def test_unsupported_model_type_and_bad_values():
    with pytest.raises(ValueError, match="not supported"):
        spec_from_config({**SMALL, "model_type": "mamba"})
    with pytest.raises(ValueError, match="num_key_value_heads"):
        spec_from_config({**SMALL, "model_type": "llama", "num_key_value_heads": "two"})
    with pytest.raises(ValueError, match="multiple"):
        spec_from_config({**SMALL, "model_type": "llama", "num_key_value_heads": 3})
    with pytest.raises(ValueError):
        spec_from_config(["not", "a", "config"])


def test_model_type_inferred_from_architectures():
    data = {**SMALL, "architectures": ["LlamaForCausalLM"]}
    assert spec_from_config(data).model_type == "llama"


def test_spec_is_frozen_and_serialisable():
    spec = load_model_preset("smollm2-135m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.hidden = 1  # type: ignore[misc]
    d = spec.to_dict()
    json.dumps(d)
    assert d["params_total"] == 134_515_008
    assert isinstance(spec, ModelSpec)


@pytest.mark.parametrize(("change", "message"), [({"word_embed_proj_dim": 32}, "word_embed_proj_dim"),
                                                  ({"do_layer_norm_before": False}, "layer norm after each block")])
def test_opt_variants_the_spec_cannot_hold_are_refused_in_words(change, message):
    with pytest.raises(ValueError, match=message):
        spec_from_config({"model_type": "opt", **opt_small(vocab=256, positions=128), **change})


def test_gemma_interleaves_window_layers_like_transformers_does():
    """Without layer_types (older config.json files), Gemma 2 alternates sliding and global layers
    and Gemma 3 keeps one global layer in sliding_window_pattern (default 6), as transformers does;
    a Gemma 3 multimodal config is priced by its text decoder."""
    for key in ("gemma2_interleaved", "gemma3_text_qk_norm"):
        cfg = tiny_config(key)
        spec = spec_from_config(cfg)
        assert spec.n_sliding_layers == sum(t == "sliding_attention" for t in cfg.layer_types)
        plain = {k: v for k, v in cfg.to_dict().items() if k != "layer_types"}
        assert spec_from_config(plain) == spec
    assert spec_from_config(tiny_config("gemma2_interleaved")).n_sliding_layers == 1  # of 2
    gemma3 = spec_from_config(tiny_config("gemma3_text_qk_norm"))
    assert gemma3.n_sliding_layers == 5 and gemma3.qk_norm and gemma3.norms_per_layer == 4  # of 6
    text = {k: v for k, v in tiny_config("gemma3_text_qk_norm").to_dict().items() if k != "model_type"}
    wrapped = spec_from_config({"model_type": "gemma3", "text_config": text, "vision_config": {}})
    assert wrapped.params_total == gemma3.params_total and wrapped.model_type == "gemma3_text"
    with pytest.raises(ValueError, match="sliding_window_pattern"):
        spec_from_config({**plain, "model_type": "gemma3_text", "sliding_window_pattern": 0})
