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

TRANSFER_MODELS = ("gpt2", "smollm2-360m", "qwen2.5-0.5b", "tinyllama-1.1b")
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


def _random_model(name: str):
    import torch
    import transformers

    from core.model import LoadedModel, ModelInfo
    from core.spec import ASSETS_DIR, spec_from_json

    spec = spec_from_json(ASSETS_DIR / f"{name}.json", name=name)
    config = transformers.AutoConfig.from_pretrained(ASSETS_DIR / f"{name}.json")
    config.bos_token_id = config.eos_token_id = config.pad_token_id = None
    torch.manual_seed(0)
    with torch.no_grad():
        model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
    info = ModelInfo(id=name, weights_source="random", dtype="float32", params=spec.params_total)
    return LoadedModel(model=model, tokenizer=_IdTokenizer(), info=info), spec


def measure_model(name: str, coef: dict[str, float], calibration: Any) -> list[dict[str, Any]]:
    """Every forward of a few short runs on one random-weight model: measured (median of repeats)
    against the host predictor with the embedded model's coefficients."""
    import gc

    from core import predictor as P
    from core.runner import GenerationSettings, run

    loaded, spec = _random_model(name)
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
                         "error": abs(e.predicted_ms - measured) / measured})
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
                                                                  if r["phase"] == "decode"), 2)}
    return {"transfer_prefill_error_median": round(statistics.median(prefill), 4),
            "transfer_decode_error_median": round(statistics.median(decode), 4),
            "transfer_decode_error_max": round(max(decode), 4),
            "transfer_prefill_error_max": round(max(prefill), 4),
            "transfer_models": per_model, "transfer_forwards": len(rows), "transfer_coef": fitted.coef}
