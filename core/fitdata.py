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
from core.runner import GenerationSettings, decode_over_filled_cache, run
from core.spec import spec_from_config

SPLIT_PATH = Path(__file__).resolve().parent.parent / "assets" / "calibration" / "split.json"
# The fold a server fits on; `bench --stability` measures how far one fold's coefficients lie from
# the others'.
LIVE_FOLD = 0


def load_split() -> dict:
    return json.loads(SPLIT_PATH.read_text())


def measure_splits(loaded, parts: tuple[str, ...] = ("train", "test"), warmup: bool = True,
                   repeats: int = 3, folds: tuple[int, ...] | None = None) -> dict[str, list[dict]]:
    """Run every prompt of the given parts; one row per forward with its cost.

    A prompt run generates from a prefix of the part's passage; a cache run (`cached_tokens`) times
    decode steps over a filled cache (see the split's `about`); both run at their `batch` and are
    priced at it. `folds` keeps only the train runs of those folds (the live page fits on fold 0;
    the stability benchmark on each fold alone). Every row names its run ("train/3") and fold, so a
    caller can split the data by whole runs. The parts' runs are spread evenly through the
    measurement (and the split lists the folds' runs in turn), so a shared machine's drifting speed
    touches the fit, the folds and the error measurement alike. Each run is repeated and every
    forward keeps the median of its repeats (whole passes over the schedule): one forward can be
    slowed several-fold by another process, which no predictor knows.
    """
    split = load_split()
    spec = spec_from_config(loaded.config)
    dtype = normalize_dtype(loaded.info.dtype)
    quiet = {"chat": False, "stop_on_eos": False, "record_kv_norms": False}
    passages = {p: loaded.tokenizer(split[p]["passage"], add_special_tokens=False)["input_ids"] for p in parts}
    chosen = {p: [(i, r) for i, r in enumerate(split[p]["runs"])
                  if folds is None or p != "train" or int(r.get("fold", 0)) in folds] for p in parts}
    if warmup:  # first forwards pay one-time allocation costs that no later run sees, at each batch size
        for batch in sorted({int(r.get("batch", 1)) for p in parts for _, r in chosen[p]}):
            list(run(loaded, passages[parts[0]][:8], GenerationSettings(max_new_tokens=4, batch=batch, **quiet)))
    # Each part's runs spread evenly over the whole measurement, whatever the parts' lengths.
    timed = [((k + 0.5) / len(c), parts.index(p), p, i, r) for p, c in chosen.items() for k, (i, r) in enumerate(c)]
    schedule = [(p, i, r) for *_, p, i, r in sorted(timed, key=lambda t: t[:2])]
    # Repeats are whole passes over the schedule, not back-to-back runs: a slow spell of the shared
    # machine then lands in one pass of a run, which the median over passes drops.
    passes = [[_measure_run(loaded, passages[part], spec_run, quiet) for part, _, spec_run in schedule]
              for _ in range(repeats)]
    rows: dict[str, list[dict]] = {p: [] for p in parts}
    for k, (part, index, spec_run) in enumerate(schedule):
        base = {"run": f"{part}/{index}", "fold": spec_run.get("fold"), "batch": int(spec_run.get("batch", 1))}
        for forwards in zip(*(measured[k] for measured in passes), strict=True):
            phase, n_new, n_cached = forwards[0][:3]
            rows[part].append(_row(base, spec, dtype, phase, spec_run.get("prompt_tokens"), n_new, n_cached,
                                   [f[3] for f in forwards]))
    return rows


def _measure_run(loaded, ids: list[int], spec_run: dict, quiet: dict) -> list[tuple[str, int, int, float]]:
    """(phase, new tokens, cached tokens, seconds) of every forward of one run of the split."""
    batch, steps = int(spec_run.get("batch", 1)), int(spec_run["new_tokens"])
    if "cached_tokens" in spec_run:  # decode steps over a filled cache: no prefill to pay for
        cached = int(spec_run["cached_tokens"])
        return [("decode", 1, cached + i, t) for i, t in enumerate(decode_over_filled_cache(loaded, batch, cached, steps))]
    n = int(spec_run["prompt_tokens"])
    if n > len(ids):
        raise ValueError(f"split passage has {len(ids)} tokens, a run asks for {n}")
    settings = GenerationSettings(max_new_tokens=steps, batch=batch, **quiet)
    return [(e.phase, e.positions[1] - e.positions[0], e.positions[0], e.latency_ms / 1000.0)
            for e in run(loaded, ids[:n], settings)]


def _row(base: dict, spec, dtype: str, phase: str, prompt_tokens: int | None, n_new: int, n_cached: int,
         times: list[float]) -> dict:
    cost = cost_for_event(spec, n_new, n_cached, base["batch"], dtype)
    return {**base, "phase": phase, "prompt_tokens": prompt_tokens, "n_new": n_new, "n_cached": n_cached,
            "measured_s": statistics.median(times), "measured_spread_s": max(times) - min(times),
            "cost": cost.to_dict()}


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


def ensure_fitted(loaded, repeats: int = 3, force: bool = False) -> Predictor:
    """This machine's fitted predictor for `loaded`: the saved fit, or a new one from the train split.

    The unfitted roofline uses microbenchmark ceilings, which can miss a real model's forward by a
    third on a CPU; a fit on three passes over the train split's live fold (about 25 s here) brings
    it to ~10%. It runs the model, so it may as well calibrate the machine first when no
    calibration is cached.
    """
    from core import predictor as predictor_mod

    spec = spec_from_config(loaded.config)
    if not force:
        fitted = predictor_mod.host_predictor(spec, loaded.info.dtype, measure=True)
        if fitted.fitted:
            return fitted
    base = predictor_mod.host_predictor(spec, loaded.info.dtype, use_fit=False, measure=True)
    rows = measure_splits(loaded, ("train",), repeats=repeats, folds=(LIVE_FOLD,))["train"]
    fitted = predictor_mod.fit(base, samples(rows), label=f"train split fold {LIVE_FOLD}, {repeats} pass(es)")
    predictor_mod.save_fit(fitted, spec)
    return fitted
