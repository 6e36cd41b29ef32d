"""The transfer benchmark's plumbing (core.transfer): a random-weight model of a published shape is
timed as the runner runs, and priced with the coefficients it is given, never fitted on itself."""

from __future__ import annotations

import pytest

from core import calibrate, transfer
from core.predictor import host_predictor
from core.spec import load_model_preset

pytestmark = pytest.mark.slow


def test_measure_model_prices_every_forward_with_the_given_coefficients(monkeypatch):
    monkeypatch.setattr(transfer, "PROMPT_LENGTHS", (8, 24))
    monkeypatch.setattr(transfer, "REPEATS", 2)
    cal = calibrate.calibrate(quick=True)
    coef = {"overhead": 1.0, "memory": 1.3, "kv": 2.0, "compute": 1.1, "prefill_extra": 0.01}
    rows = transfer.measure_model("gpt2", coef, cal)
    assert [r["phase"] for r in rows] == (["prefill"] + ["decode"] * (transfer.NEW_TOKENS - 1)) * 2
    assert [r["n_cached"] for r in rows[:transfer.NEW_TOKENS]] == [0, 8, 9, 10, 11, 12]
    assert all(r["measured_ms"] > 0 and r["error"] >= 0 for r in rows)
    # the prediction is the host predictor for gpt2's shapes with exactly these coefficients
    from dataclasses import replace

    from core.predictor import cost_for_event

    spec = load_model_preset("gpt2")
    pred = replace(host_predictor(spec, "fp32", calibration=cal, use_fit=False), coef=coef)
    expected = pred.predict_s(cost_for_event(spec, 1, 8, 1, "fp32"), "decode") * 1000
    assert rows[1]["predicted_ms"] == pytest.approx(expected, rel=1e-3)


def test_one_shape_per_family_each_read_by_the_cost_model_and_said_when_scaled():
    from core.spec import FAMILIES, spec_from_config

    families = {spec_from_config(transfer.transfer_config(n), name=n).model_type for n in transfer.TRANSFER_SHAPES}
    assert families == set(FAMILIES)
    for name, (_, replaced, note) in transfer.TRANSFER_SHAPES.items():
        config = transfer.transfer_config(name)
        layers = config.get("num_hidden_layers", config.get("n_layer"))
        if "published shape" in note:  # as published: nothing cut
            assert replaced == {} or any(replaced is d for d in (transfer.QWEN3_0_6B, transfer.GEMMA3_1B)), name
        else:  # a scaled shape names the layers it kept
            assert f"{layers} of " in note, (name, note)


def test_a_scaled_latent_attention_shape_builds_with_the_parameters_the_spec_counts():
    loaded, spec = transfer._random_model("deepseek-v3/scaled")
    assert sum(p.numel() for p in loaded.model.parameters()) == spec.params_total
