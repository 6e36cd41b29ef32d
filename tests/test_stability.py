"""Three disjoint fits of the latency model must agree (core.stability): the split is designed so
that every fold can see each coefficient, and the report computes what it says it does."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from core import fitdata, stability
from core import predictor as P
from core.hardware import load_hardware
from core.predictor import cost_for_event
from core.spec import load_model_preset

SMOL = load_model_preset("smollm2-135m")
# Close to what this machine kind fits (memory 1.14, kv 2.8, compute 1.25), so the synthetic
# forwards have the real mix of weight, cache and compute time.
TRUTH = {"overhead": 1.0, "memory": 1.14, "kv": 2.8, "compute": 1.25, "prefill_extra": 0.0}


def _base() -> P.Predictor:
    hw = replace(load_hardware("l4"), name="fake-cpu", measured=True)
    return P.Predictor(hardware=hw, n_layers=SMOL.n_layers, dtype="fp32", overhead_s=0.008,
                       bandwidth=11.7e9, peak=95e9)


def _rows(part: str, runs: list[dict], noise: float, seed: int) -> list[dict]:
    """The forwards the runner would execute for `runs`, timed by TRUTH with multiplicative noise."""
    truth = replace(_base(), coef=TRUTH)
    rng = np.random.default_rng(seed)
    rows = []
    for index, r in enumerate(runs):
        batch = r.get("batch", 1)
        if "cached_tokens" in r:  # decode steps over a filled cache
            shapes = [(1, r["cached_tokens"] + i) for i in range(r["new_tokens"])]
        else:
            n = r["prompt_tokens"]
            shapes = [(n, 0)] + [(1, n + i) for i in range(r["new_tokens"] - 1)]
        for n_new, n_cached in shapes:
            cost = cost_for_event(SMOL, n_new, n_cached, batch, "fp32").to_dict()
            phase = "prefill" if n_cached == 0 else "decode"
            measured = truth.predict_s(cost, phase) * float(np.exp(rng.normal(0.0, noise)))
            rows.append({"run": f"{part}/{index}", "fold": r.get("fold"), "phase": phase, "batch": batch,
                         "n_cached": n_cached, "measured_s": measured, "cost": cost})
    return rows


def test_relative_spread_is_range_over_median():
    assert stability.relative_spread([1.0, 1.1, 0.95]) == pytest.approx(0.15 / 1.0)
    assert stability.relative_spread([2.0, 2.0, 2.0]) == 0.0


def test_every_fold_holds_batched_steps_over_a_small_and_a_large_cache():
    runs = fitdata.load_split()["train"]["runs"]
    folds = sorted({r["fold"] for r in runs})
    assert folds == [0, 1, 2] and fitdata.LIVE_FOLD in folds
    for fold in folds:
        mine = [r for r in runs if r["fold"] == fold]
        caches = sorted(r["cached_tokens"] * r["batch"] for r in mine if "cached_tokens" in r)
        # Cached positions across the batch: a step over 8,000 of them spends about half its time on
        # the cache, one over a few hundred almost none; the difference is what the KV term weighs.
        assert caches and caches[0] <= 512 and caches[-1] >= 7000, f"fold {fold} cannot see the cache's cost"
        prompts = sorted(r["prompt_tokens"] for r in mine if "prompt_tokens" in r)
        assert prompts[0] <= 24 and prompts[-1] >= 200, f"fold {fold} lacks a short or a long prefill"
    for key in ("prompt_tokens", "cached_tokens"):
        lengths = [r[key] for r in runs if key in r]
        assert len(lengths) == len(set(lengths)), f"the folds must not share a {key}"


def test_the_splits_folds_agree_under_measurement_noise_and_batch1_alone_would_not():
    split = fitdata.load_split()
    train = _rows("train", split["train"]["runs"], noise=0.04, seed=1)
    test = _rows("test", split["test"]["runs"], noise=0.0, seed=2)
    result = stability.report(_base(), train, test)
    assert result["stability_folds"] == [0, 1, 2]
    assert result["stability_coef_spread_max"] < 0.10, result["stability_coef_spread"]
    for coef in result["stability_coef_by_fold"]:
        assert coef["kv"] == pytest.approx(TRUTH["kv"], rel=0.1)
    steps = result["stability_batch16_steps"]
    assert len(steps) == 2 and result["stability_batch16_error_max"] < 0.05
    # The same design without its batched cache runs: the cache is ~2% of a step and the KV
    # coefficient is left to the noise, as it was before those runs existed.
    batch1 = [r for r in train if r["batch"] == 1]
    alone = stability.report(_base(), batch1, test)
    assert alone["stability_coef_spread"]["kv"] > 0.2


def test_report_needs_two_folds():
    split = fitdata.load_split()
    train = [r for r in _rows("train", split["train"]["runs"], 0.0, 0) if r["fold"] == 0]
    with pytest.raises(ValueError, match="two folds"):
        stability.report(_base(), train, [])
