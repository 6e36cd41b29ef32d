"""Exports: the per-step CSV reads back to the trace's events, survives any token text, and is spreadsheet-safe."""

from __future__ import annotations

import copy
import csv
import io
import re
from dataclasses import replace

import pytest

from core import predictor as P
from core.export import COLUMNS, neutralise, restore, trace_filename, trace_to_csv
from core.hardware import load_hardware
from core.runner import GenerationSettings, generate_trace
from core.spec import spec_from_config


def _fake_predictor(spec) -> P.Predictor:
    """A datasheet machine posing as a CPU: no calibration, milliseconds to build."""
    hw = replace(load_hardware("l4"), name="fake-cpu", measured=True)
    return P.Predictor(hardware=hw, n_layers=spec.n_layers, dtype="fp32", overhead_s=0.005, bandwidth=8e9,
                       peak=80e9)


@pytest.fixture(scope="module")
def trace(tiny_model):
    spec = spec_from_config(tiny_model.config)
    annotate = P.make_annotator(spec, _fake_predictor(spec), "fp32")
    return generate_trace(tiny_model, "export ✓ test", GenerationSettings(max_new_tokens=8, chat=False,
                                                                          stop_on_eos=False),
                          annotate=annotate)


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def test_one_row_per_event_with_measured_predicted_and_computed_columns(trace):
    text = trace_to_csv(trace)
    header = next(csv.reader(io.StringIO(text, newline="")))
    assert tuple(header) == COLUMNS
    assert "latency_ms_measured" in header and "latency_ms_predicted" in header
    assert all(c.endswith(("_measured", "_predicted", "_computed", "_pct")) for c in header[7:])
    rows = _rows(text)
    assert len(rows) == len(trace.events)
    for row, event in zip(rows, trace.events, strict=True):
        assert int(row["step"]) == event.step
        assert row["phase"] == event.phase
        assert [int(row["first_position"]), int(row["last_position_exclusive"])] == event.positions
        assert int(row["n_new"]) == event.n_new
        assert int(row["token_id"]) == event.token_id
        assert restore(row["token_text"]) == event.token_text
        assert float(row["latency_ms_measured"]) == event.latency_ms
        assert float(row["latency_ms_predicted"]) == event.predicted_ms
        expected_error = (event.predicted_ms - event.latency_ms) / event.latency_ms * 100
        assert float(row["prediction_error_pct"]) == pytest.approx(expected_error, abs=0.01)
        assert int(row["kv_seq_len_measured"]) == event.kv_seq_len
        assert int(row["kv_bytes_measured"]) == event.kv_bytes
        assert int(row["flops_total_computed"]) == event.cost["flops"]["total"]
        for part in ("weights", "kv_read", "kv_write", "activations"):
            assert int(row[f"bytes_{part}_computed"]) == event.cost["bytes"][part]
        assert float(row["intensity_flops_per_byte_computed"]) == event.cost["intensity"]
    assert rows[0]["phase"] == "prefill" and {r["phase"] for r in rows[1:]} == {"decode"}


def test_missing_figures_are_empty_cells(trace):
    bare = copy.deepcopy(trace)
    for event in bare.events:
        event.cost, event.predicted_ms = None, None
    for row in _rows(trace_to_csv(bare)):
        assert row["latency_ms_predicted"] == row["prediction_error_pct"] == row["flops_total_computed"] == ""
        assert row["intensity_flops_per_byte_computed"] == "" and row["latency_ms_measured"] != ""
        assert "None" not in row.values() and "nan" not in row.values()


TEXTS = ["=1+1", "+SUM(A1)", "-2", "@cmd", "\t=x", "\r=x", "=HYPERLINK(\"http://evil\",\"x\")",
         "line\nbreak", "crlf\r\nend", "emoji 🙂👩‍💻", "東京", "comma, \"quote\"", "", " =spaced", "'=already",
         "nul\x00byte", "\u202eRTL"]


def test_formula_injection_is_neutralised_and_every_text_reads_back(trace):
    evil = copy.deepcopy(trace)
    evil.events = [copy.deepcopy(evil.events[i % len(evil.events)]) for i in range(len(TEXTS))]
    for event, text in zip(evil.events, TEXTS, strict=True):
        event.token_text = text
    rows = _rows(trace_to_csv(evil))
    assert len(rows) == len(TEXTS)
    for row, text in zip(rows, TEXTS, strict=True):
        cell = row["token_text"]
        # No cell a spreadsheet would evaluate.
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r"))
        if text.startswith(("=", "+", "-", "@", "\t", "\r")):
            assert cell == "'" + text
        else:
            assert cell == text
        if not text.startswith("'"):
            assert restore(cell) == text


def test_neutralise_and_restore():
    assert neutralise("=cmd") == "'=cmd" and restore("'=cmd") == "=cmd"
    assert neutralise("hello") == "hello" == restore("hello")
    assert neutralise("'s") == "'s" and restore("'s") == "'s"  # common BPE tokens stay untouched


def test_filename_is_safe_and_stable(trace):
    name = trace_filename(trace, "csv")
    assert re.fullmatch(r"pdlab-[a-z0-9-]+-\d+tok-[0-9a-f]{8}\.csv", name)
    assert name == trace_filename(trace, "csv")
    assert trace_filename(trace, "json").removesuffix(".json") == name.removesuffix(".csv")


@pytest.mark.parametrize("prompt", ["../../etc/passwd", "<script>x</script>", "a/b\\c:d*e?f\"g<h>i|j", "\x00\n\r",
                                    "東京 🙂", "", "CON", "x" * 500, "   ...   "])
def test_filename_never_carries_raw_user_text(trace, prompt):
    odd = copy.deepcopy(trace)
    odd.prompt_text = prompt
    odd.model = {**odd.model, "id": "../evil/<id>"}
    name = trace_filename(odd, "json")
    assert re.fullmatch(r"pdlab-[a-z0-9-]+\.json", name)
    assert len(name) <= 120 and ".." not in name and "--" not in name


def test_filename_rejects_unknown_extensions(trace):
    with pytest.raises(ValueError):
        trace_filename(trace, "html")
    with pytest.raises(ValueError):
        trace_filename(trace, "../x")
