"""Does the host predictor hold on models it was never fitted on? (`python -m core bench --transfer`)

The predictor's coefficients are fitted on the embedded SmolLM2-135M. The what-if page prices
other models with the same method, so this measures that method away from home: models of
published shapes from several families, random weights (the speed of a forward does not depend on
the values), timed exactly as the runner runs (fp32, this process's threads, dynamic cache,
last-position logits), against the host predictor built for each shape with the embedded model's
coefficients. Never a fit on the shape itself: that would measure the fit, not the method.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from typing import Any

# Phi-3-mini-4k-instruct's published config (no preset of its own: the what-if page lists
# published models whose parameter counts the tests check).
PHI3_MINI: dict[str, Any] = {
    "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu"}

# The published configs of one model each for the families without a preset of that family here.
QWEN3_0_6B: dict[str, Any] = {
    "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
    "max_position_embeddings": 40960, "tie_word_embeddings": True, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0}
GEMMA_2B: dict[str, Any] = {
    "model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18,
    "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 256000,
    "max_position_embeddings": 8192}
GEMMA3_1B: dict[str, Any] = {
    "model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
    "max_position_embeddings": 32768, "sliding_window": 512, "query_pre_attn_scalar": 256}
SMOLLM3_3B: dict[str, Any] = {
    "model_type": "smollm3", "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
    "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 128256, "max_position_embeddings": 65536,
    "tie_word_embeddings": True}
QWEN15_MOE: dict[str, Any] = {
    "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
    "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 151936, "max_position_embeddings": 8192,
    "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1, "tie_word_embeddings": False}
SANTACODER: dict[str, Any] = {
    "model_type": "gpt_bigcode", "n_embd": 2048, "n_layer": 24, "n_head": 16, "n_inner": 8192, "vocab_size": 49280,
    "n_positions": 2048, "multi_query": True}

# One shape per family the cost model reads that transformers builds here: the published shape
# where it fits this machine's memory and time, else the same shape with fewer layers (and, for the
# mixture-of-experts and latent-attention ones, fewer or narrower experts, or a narrower width),
# said in its note. name: (model preset, config fields replaced, note).
TRANSFER_SHAPES: dict[str, tuple[str, dict[str, Any], str]] = {
    "gpt2": ("gpt2", {}, "published shape"),
    "smollm2-360m": ("smollm2-360m", {}, "published shape (llama)"),
    "qwen2.5-0.5b": ("qwen2.5-0.5b", {}, "published shape (qwen2)"),
    "tinyllama-1.1b": ("tinyllama-1.1b", {}, "published shape (llama)"),
    "pythia-1.4b/8L": ("pythia-1.4b", {"num_hidden_layers": 8}, "gpt_neox: 8 of 24 layers"),
    "opt-1.3b/8L": ("opt-1.3b", {"num_hidden_layers": 8}, "opt: 8 of 24 layers"),
    "falcon-7b/4L": ("falcon-7b", {"num_hidden_layers": 4}, "falcon: 4 of 32 layers"),
    "mistral-7b/4L": ("mistral-7b-v0.1", {"num_hidden_layers": 4}, "mistral: 4 of 32 layers"),
    "gemma-2-9b/4L": ("gemma-2-9b", {"num_hidden_layers": 4}, "gemma2: 4 of 42 layers"),
    "phi-3-mini/6L": ("", {**PHI3_MINI, "num_hidden_layers": 6}, "phi3 (Phi-3-mini-4k's shape): 6 of 32 layers"),
    "qwen3-0.6b": ("", QWEN3_0_6B, "published shape (qwen3)"),
    "gemma-2b/6L": ("", {**GEMMA_2B, "num_hidden_layers": 6}, "gemma: 6 of 18 layers"),
    "gemma-3-1b": ("", GEMMA3_1B, "published shape (gemma3_text)"),
    "smollm3-3b/8L": ("", {**SMOLLM3_3B, "num_hidden_layers": 8}, "smollm3: 8 of 36 layers"),
    "santacoder/8L": ("", {**SANTACODER, "n_layer": 8}, "gpt_bigcode (multi-query): 8 of 24 layers"),
    "qwen1.5-moe/2L": ("", {**QWEN15_MOE, "num_hidden_layers": 2, "num_experts": 16},
                       "qwen2_moe: 2 of 24 layers, 16 of 60 experts (4 per token and the shared expert kept)"),
    "mixtral-8x7b/2L": ("mixtral-8x7b", {"num_hidden_layers": 2, "intermediate_size": 3584},
                        "mixtral: 2 of 32 layers, experts a quarter as wide (8 experts, 2 per token kept)"),
    "qwen3-30b-a3b/2L": ("qwen3-30b-a3b", {"num_hidden_layers": 2, "num_experts": 32},
                         "qwen3_moe: 2 of 48 layers, 32 of 128 experts (8 per token kept)"),
    "deepseek-v3/scaled": ("deepseek-v3", {"num_hidden_layers": 2, "first_k_dense_replace": 1, "hidden_size": 2048,
                                           "intermediate_size": 5120, "n_routed_experts": 16, "n_group": 1,
                                           "topk_group": 1, "moe_intermediate_size": 512, "vocab_size": 32000},
                           "deepseek_v3 (latent attention, routed and shared experts): 2 of 61 layers, width "
                           "2,048 of 7,168, 16 of 256 experts 512 wide, vocabulary 32,000"),
}
TRANSFER_MODELS = tuple(TRANSFER_SHAPES)
PROMPT_LENGTHS = (16, 64, 256)
NEW_TOKENS = 6  # one prefill and five decode steps per prompt length
REPEATS = 3


class _IdTokenizer:
    """Enough of a tokenizer for the runner on a random-weight model: ids shown as their numbers."""

    eos_token_id = None

    def decode(self, ids: list[int], **_: Any) -> str:
        return " ".join(f"<{i}>" for i in ids)


def _log(message: str) -> None:
    print(f"[transfer] {message}", file=sys.stderr, flush=True)


def transfer_config(name: str) -> dict[str, Any]:
    """The Hugging Face config of a transfer shape: its preset's, with the fields its entry replaces."""
    import json

    from core.spec import ASSETS_DIR

    preset, replaced, _ = TRANSFER_SHAPES[name]
    base = json.loads((ASSETS_DIR / f"{preset}.json").read_text(encoding="utf-8")) if preset else {}
    return {**base, **replaced, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}


def _random_model(name: str):
    import torch
    import transformers

    from core.model import LoadedModel, ModelInfo
    from core.spec import spec_from_config

    raw = transfer_config(name)
    spec = spec_from_config(raw, name=name)
    config = transformers.AutoConfig.for_model(**raw)
    torch.manual_seed(0)
    with torch.no_grad():
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    info = ModelInfo(id=name, weights_source="random", dtype="float32", params=spec.params_total)
    return LoadedModel(model=model, tokenizer=_IdTokenizer(), info=info), spec


def measure_model(name: str, coef: dict[str, float], calibration: Any) -> list[dict[str, Any]]:
    """Every forward of a few short runs on one random-weight model: measured (median of repeats)
    against the host predictor with the embedded model's coefficients."""
    import gc

    from core import predictor as P
    from core.runner import GenerationSettings, run

    loaded, spec = _random_model(name)
    built = sum(p.numel() for p in loaded.model.parameters())  # the shape priced is the shape timed
    pred = replace(P.host_predictor(spec, "fp32", calibration=calibration, use_fit=False), coef=dict(coef))
    annotate = P.make_annotator(spec, pred, "fp32")
    settings = GenerationSettings(max_new_tokens=NEW_TOKENS, chat=False, stop_on_eos=False,
                                  record_kv_norms=False)
    rows = []
    list(run(loaded, list(range(8)), GenerationSettings(max_new_tokens=2, chat=False, stop_on_eos=False)))  # warm
    for n in PROMPT_LENGTHS:
        ids = [(7 * i + 3) % spec.vocab for i in range(n)]
        runs = [list(run(loaded, ids, settings, annotate=annotate)) for _ in range(REPEATS)]
        for events in zip(*runs, strict=True):
            measured = statistics.median(e.latency_ms for e in events)
            e = events[0]
            rows.append({"model": name, "phase": e.phase, "prompt_tokens": n, "n_cached": e.cost["n_cached"],
                         "measured_ms": measured, "predicted_ms": e.predicted_ms,
                         "error": abs(e.predicted_ms - measured) / measured,
                         "params_match": built == spec.params_total})
    del loaded
    gc.collect()
    return rows


def run_transfer(models: tuple[str, ...] = TRANSFER_MODELS) -> dict[str, Any]:
    """The transfer errors over every model and forward, and per model, as one JSON-ready dict."""
    from core import calibrate, fitdata
    from core.model import configure_torch, load_embedded

    configure_torch()
    cal = calibrate.host_calibration(measure=True)
    _log("the embedded model's coefficients (fitting them if this server has none yet)")
    fitted = fitdata.ensure_fitted(load_embedded(allow_download=False), repeats=3)
    rows: list[dict[str, Any]] = []
    for name in models:
        _log(f"timing {name} (random weights)")
        rows.extend(measure_model(name, fitted.coef, cal))
    prefill = [r["error"] for r in rows if r["phase"] == "prefill"]
    decode = [r["error"] for r in rows if r["phase"] == "decode"]
    per_model = {}
    for name in models:
        mine = [r for r in rows if r["model"] == name]
        per_model[name] = {
            "prefill_error_median": round(statistics.median(r["error"] for r in mine if r["phase"] == "prefill"), 4),
            "decode_error_median": round(statistics.median(r["error"] for r in mine if r["phase"] == "decode"), 4),
            "decode_measured_ms_median": round(statistics.median(r["measured_ms"] for r in mine
                                                                 if r["phase"] == "decode"), 2),
            "decode_predicted_ms_median": round(statistics.median(r["predicted_ms"] for r in mine
                                                                  if r["phase"] == "decode"), 2),
            "shape": TRANSFER_SHAPES[name][2], "params_match": all(r["params_match"] for r in mine)}
    return {"transfer_prefill_error_median": round(statistics.median(prefill), 4),
            "transfer_decode_error_median": round(statistics.median(decode), 4),
            "transfer_decode_error_max": round(max(decode), 4),
            "transfer_prefill_error_max": round(max(prefill), 4),
            "transfer_models": per_model, "transfer_forwards": len(rows), "transfer_coef": fitted.coef}
