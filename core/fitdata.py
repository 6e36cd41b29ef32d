"""Measured forwards of the default model on fixed prompt sets: the predictor's training and test data.

The split lives in assets/calibration/split.json: different text and different prompt lengths for
fitting and for measuring error, so a benchmark error is never measured on data the fit saw.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.dtypes import normalize_dtype
from core.predictor import Predictor, Sample, cost_for_event
from core.runner import GenerationSettings, run
from core.spec import spec_from_config

SPLIT_PATH = Path(__file__).resolve().parent.parent / "assets" / "calibration" / "split.json"


def load_split() -> dict:
    return json.loads(SPLIT_PATH.read_text())


def measure_split(loaded, part: str, warmup: bool = True) -> list[dict]:
    """Run every prompt of one part of the split; return one row per forward with its cost."""
    split = load_split()[part]
    ids = loaded.tokenizer(split["passage"], add_special_tokens=False)["input_ids"]
    spec = spec_from_config(loaded.config)
    dtype = loaded.info.dtype
    if warmup:  # first forwards pay one-time allocation costs that no later run sees
        list(run(loaded, ids[:8], GenerationSettings(max_new_tokens=4, chat=False, stop_on_eos=False,
                                                      record_kv_norms=False)))
    rows = []
    for spec_run in split["runs"]:
        n = int(spec_run["prompt_tokens"])
        if n > len(ids):
            raise ValueError(f"split passage '{part}' has {len(ids)} tokens, run asks for {n}")
        settings = GenerationSettings(max_new_tokens=int(spec_run["new_tokens"]), chat=False,
                                      stop_on_eos=False, record_kv_norms=False)
        for event in run(loaded, ids[:n], settings):
            n_new = event.positions[1] - event.positions[0]
            cost = cost_for_event(spec, n_new, event.positions[0], 1, normalize_dtype(dtype))
            rows.append({"phase": event.phase, "prompt_tokens": n, "n_new": n_new,
                         "n_cached": event.positions[0], "measured_s": event.latency_ms / 1000.0,
                         "cost": cost.to_dict()})
    return rows


def samples(rows: list[dict]) -> list[Sample]:
    return [(r["cost"], r["phase"], r["measured_s"]) for r in rows]


def errors(predictor: Predictor, rows: list[dict]) -> dict[str, list[float]]:
    """Absolute relative errors per phase, for the calibrated and the naive prediction."""
    out: dict[str, list[float]] = {"decode": [], "prefill": [], "naive_decode": [], "naive_prefill": []}
    for r in rows:
        measured = r["measured_s"]
        out[r["phase"]].append(abs(predictor.predict_s(r["cost"], r["phase"]) - measured) / measured)
        out["naive_" + r["phase"]].append(abs(predictor.naive_s(r["cost"]) - measured) / measured)
    return out
