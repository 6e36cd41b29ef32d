"""The predictor's train/test split: disjoint prompts, one row per forward, priced as executed."""

from __future__ import annotations

import pytest

from core import fitdata
from core.bench import decode_bandwidth_fraction
from tests.conftest import make_tiny_model


@pytest.fixture(scope="module")
def tiny_model():
    """The tiny model with room for the split's longest cache runs (2,048 tokens and more)."""
    return make_tiny_model(context=4096)


def test_split_parts_share_no_prompt_lengths_or_text():
    split = fitdata.load_split()
    train, test = split["train"], split["test"]
    assert train["passage"] != test["passage"]
    for key in ("prompt_tokens", "cached_tokens"):
        assert not {r.get(key) for r in train["runs"]} & {r[key] for r in test["runs"] if key in r}


def test_measure_splits_gives_one_row_per_forward(tiny_model):
    rows = fitdata.measure_splits(tiny_model, repeats=2)
    split = fitdata.load_split()
    for part in ("train", "test"):
        expected = sum(r["new_tokens"] for r in split[part]["runs"])
        assert len(rows[part]) == expected
        prefills = [r for r in rows[part] if r["phase"] == "prefill"]
        assert sorted(r["n_new"] for r in prefills) == sorted(r["prompt_tokens"] for r in split[part]["runs"]
                                                              if "prompt_tokens" in r)
        for r in rows[part]:
            assert r["measured_s"] > 0 and r["measured_spread_s"] >= 0
            assert r["cost"]["batch"] == r["batch"]
            assert r["cost"]["n_cached"] == r["n_cached"]
            assert r["cost"]["flops"]["lm_head"] == 2 * r["batch"] * tiny_model.config.hidden_size * tiny_model.config.vocab_size


def test_decode_bandwidth_fraction_is_bytes_over_time_over_ceiling():
    row = {"phase": "decode", "measured_s": 0.5,
           "cost": {"bytes": {"weights": 4e9, "kv_read": 5e8, "kv_write": 5e8, "activations": 1}}}
    assert decode_bandwidth_fraction([row, {**row, "phase": "prefill"}], 20e9) == 0.5


def test_ensure_fitted_fits_once_then_reuses(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("PDLAB_CACHE_DIR", str(tmp_path))
    from core import calibrate

    calibrate.calibrate(quick=True)  # the fit sits on top of this machine's ceilings
    first = fitdata.ensure_fitted(tiny_model)
    live = [r for r in fitdata.load_split()["train"]["runs"] if r["fold"] == fitdata.LIVE_FOLD]
    assert first.fitted and first.fit_info["samples"] == sum(r["new_tokens"] for r in live)
    calls = []
    monkeypatch.setattr(fitdata, "measure_splits", lambda *a, **k: calls.append(1))
    again = fitdata.ensure_fitted(tiny_model)
    assert again.coef == first.coef and not calls


def test_measure_splits_keeps_only_the_asked_folds_and_prices_each_run_at_its_batch(tiny_model):
    rows = fitdata.measure_splits(tiny_model, ("train",), repeats=1, folds=(1,))["train"]
    runs = [r for r in fitdata.load_split()["train"]["runs"] if r["fold"] == 1]
    assert {r["fold"] for r in rows} == {1}
    assert len(rows) == sum(r["new_tokens"] for r in runs)
    # A decode step reads batch x context cached positions, the same bytes per position at any batch.
    per_position = {r["cost"]["bytes"]["kv_read"] / (r["batch"] * r["n_cached"])
                    for r in rows if r["phase"] == "decode"}
    assert len(per_position) == 1 and {r["batch"] for r in rows} == {1, 4, 16}
