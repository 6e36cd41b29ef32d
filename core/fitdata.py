"""Measured forwards of the default model on fixed prompt sets: the predictor's training and test data.

The split lives in assets/calibration/split.json: different text and different prompt lengths for
fitting and for measuring error, so a benchmark error is never measured on data the fit saw.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from core.dtypes import normalize_dtype
from core.predictor import Predictor, Sample, cost_for_event
from core.runner import GenerationSettings, run
from core.spec import spec_from_config

SPLIT_PATH = Path(__file__).resolve().parent.parent / "assets" / "calibration" / "split.json"


def load_split() -> dict:
    return json.loads(SPLIT_PATH.read_text())


def measure_splits(loaded, parts: tuple[str, ...] = ("train", "test"), warmup: bool = True,
                   repeats: int = 3) -> dict[str, list[dict]]:
    """Run every prompt of the given parts; one row per forward with its cost.

    Runs of the parts alternate in time, so a shared machine's drifting speed touches the fit and
    the error measurement alike. Each run is repeated and every forward keeps the median of its
    repeats: one forward can be slowed several-fold by another process, which no predictor knows.
    """
    split = load_split()
    spec = spec_from_config(loaded.config)
    dtype = normalize_dtype(loaded.info.dtype)
    quiet = {"chat": False, "stop_on_eos": False, "record_kv_norms": False}
    passages = {p: loaded.tokenizer(split[p]["passage"], add_special_tokens=False)["input_ids"] for p in parts}
    if warmup:  # first forwards pay one-time allocation costs that no later run sees
        list(run(loaded, passages[parts[0]][:8], GenerationSettings(max_new_tokens=4, **quiet)))
    schedule = [(p, r) for i in range(max(len(split[p]["runs"]) for p in parts))
                for p in parts for r in split[p]["runs"][i:i + 1]]
    rows: dict[str, list[dict]] = {p: [] for p in parts}
    for part, spec_run in schedule:
        n = int(spec_run["prompt_tokens"])
        ids = passages[part]
        if n > len(ids):
            raise ValueError(f"split passage '{part}' has {len(ids)} tokens, run asks for {n}")
        settings = GenerationSettings(max_new_tokens=int(spec_run["new_tokens"]), **quiet)
        runs = [list(run(loaded, ids[:n], settings)) for _ in range(repeats)]
        for events in zip(*runs, strict=True):
            event = events[0]
            n_new = event.positions[1] - event.positions[0]
            cost = cost_for_event(spec, n_new, event.positions[0], 1, dtype)
            times = [e.latency_ms / 1000.0 for e in events]
            rows[part].append({"phase": event.phase, "prompt_tokens": n, "n_new": n_new,
                               "n_cached": event.positions[0], "measured_s": statistics.median(times),
                               "measured_spread_s": max(times) - min(times), "cost": cost.to_dict()})
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


def ensure_fitted(loaded, repeats: int = 1, force: bool = False) -> Predictor:
    """This machine's fitted predictor for `loaded`: the saved fit, or a new one from the train split.

    The unfitted roofline uses microbenchmark ceilings, which can miss a real model's forward by a
    third on a CPU; a fit on one pass of the train split (about 10 s here) brings it to ~10%.
    It runs the model, so it may as well calibrate the machine first when no calibration is cached.
    """
    from core import predictor as predictor_mod

    spec = spec_from_config(loaded.config)
    if not force:
        fitted = predictor_mod.host_predictor(spec, loaded.info.dtype, measure=True)
        if fitted.fitted:
            return fitted
    base = predictor_mod.host_predictor(spec, loaded.info.dtype, use_fit=False, measure=True)
    rows = measure_splits(loaded, ("train",), repeats=repeats)["train"]
    fitted = predictor_mod.fit(base, samples(rows), label=f"train split, {repeats} pass(es)")
    predictor_mod.save_fit(fitted, spec)
    return fitted
