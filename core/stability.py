"""Do three disjoint fits agree? (`python -m core bench --stability`)

A coefficient is worth showing only if the data pin it down. The train split holds three folds of
the same design with different prompts (assets/calibration/split.json); each is measured and
fitted on its own, and the coefficients' spread across the three is reported with what they
predict for the held-out batch-16 decode steps, where the KV term carries most weight. Before the
batched runs were added, the KV coefficient came out 0.95, 3.10 and 19.4 on three fits of batch-1
data alone: at batch 1 the cache is about 2% of a step's bytes, too little to weigh.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from core.predictor import FITTED_TERMS, Predictor, fit

BATCH_CHECKED = 16
# Passes over the whole schedule: more than a live fit's 3, because the spread between folds, not
# one fit's error, is what this measures, and a shared machine's speed drifts within a pass.
PASSES = 5


def _log(message: str) -> None:
    print(f"[stability] {message}", file=sys.stderr, flush=True)


def relative_spread(values: list[float]) -> float:
    """(largest - smallest) / median: 0.1 means the fits differ by 10% of their typical value."""
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle > 0 else float("inf")


def report(base: Predictor, train: list[dict], test: list[dict]) -> dict[str, Any]:
    """Fit each fold of `train` alone and compare: coefficients, held-out errors, batch-16 steps.

    `train` and `test` are rows as core.fitdata.measure_splits makes them; pure, so it is tested on
    synthetic rows with known coefficients.
    """
    from core.fitdata import errors, samples

    folds = sorted({r["fold"] for r in train})
    if len(folds) < 2:
        raise ValueError(f"need at least two folds to compare, got {folds}")
    fits = [fit(base, samples([r for r in train if r["fold"] == f]), label=f"fold {f}") for f in folds]
    spread = {k: round(relative_spread([p.coef[k] for p in fits]), 4) for k in FITTED_TERMS}
    held_out = [errors(p, test) for p in fits]
    checked = [r for r in test if r["phase"] == "decode" and r["batch"] == BATCH_CHECKED]
    by_run: dict[str, list[dict]] = {}
    for r in checked:
        by_run.setdefault(r["run"], []).append(r)
    steps = []
    for run, rows in sorted(by_run.items()):
        measured = statistics.median(r["measured_s"] for r in rows)
        predicted = [statistics.median(p.predict_s(r["cost"], "decode") for r in rows) for p in fits]
        steps.append({"run": run, "context": int(statistics.median(r["n_cached"] for r in rows)),
                      "measured_ms": round(measured * 1e3, 2),
                      "predicted_ms": [round(v * 1e3, 2) for v in predicted],
                      "swing": round(relative_spread(predicted), 4),
                      "error": [round(abs(v - measured) / measured, 4) for v in predicted]})
    return {
        "stability_folds": folds,
        "stability_coef_by_fold": [{k: round(p.coef[k], 4) for k in FITTED_TERMS} for p in fits],
        "stability_coef_spread": spread,
        "stability_coef_spread_max": max(spread.values()),
        "stability_forwards_by_fold": [p.fit_info["samples"] for p in fits],
        "stability_heldout_decode_error_median": [round(statistics.median(e["decode"]), 4) for e in held_out],
        "stability_heldout_prefill_error_median": [round(statistics.median(e["prefill"]), 4) for e in held_out],
        f"stability_batch{BATCH_CHECKED}_steps": steps,
        f"stability_batch{BATCH_CHECKED}_swing_max": max((s["swing"] for s in steps), default=None),
        f"stability_batch{BATCH_CHECKED}_error_max": max((max(s["error"]) for s in steps), default=None),
    }


def run_stability(repeats: int = PASSES) -> dict[str, Any]:
    """Measure every fold and the held-out split on this machine, then report (a few minutes)."""
    from core import calibrate, fitdata
    from core import predictor as P
    from core.model import configure_torch, load_embedded
    from core.spec import spec_from_config

    configure_torch()
    started = time.perf_counter()
    loaded = load_embedded(allow_download=False)
    cal = calibrate.host_calibration(measure=True)
    base = P.host_predictor(spec_from_config(loaded.config), loaded.info.dtype, calibration=cal, use_fit=False)
    _log(f"measuring the three train folds and the held-out split, {repeats} repeats (interleaved)")
    rows = fitdata.measure_splits(loaded, ("train", "test"), repeats=repeats)
    result = report(base, rows["train"], rows["test"])
    result["stability_passes"] = repeats
    result["stability_s"] = round(time.perf_counter() - started, 1)
    return result
