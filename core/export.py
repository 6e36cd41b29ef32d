"""Exports of a trace for people: the per-step table as CSV, and safe download file names.

The CSV is opened in spreadsheets, so text that a spreadsheet would run as a formula is defused,
and every column name says where its number comes from: `_measured` on this run, `_predicted` by
the latency predictor, `_computed` by the analytic cost model.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
import unicodedata
from typing import Any

from core.perf import prediction_error_pct
from core.trace import Event, Trace

COLUMNS = (
    "step", "phase", "first_position", "last_position_exclusive", "n_new", "token_id", "token_text",
    "latency_ms_measured", "latency_ms_predicted", "prediction_error_pct",
    "kv_seq_len_measured", "kv_bytes_measured",
    "flops_total_computed", "bytes_weights_computed", "bytes_kv_read_computed", "bytes_kv_write_computed",
    "bytes_activations_computed", "intensity_flops_per_byte_computed",
)
# OWASP's list: a cell starting with one of these may be evaluated as a formula by a spreadsheet.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
EXTENSIONS = ("json", "csv")


def neutralise(text: str) -> str:
    """Text a spreadsheet shows as text: a leading apostrophe before a formula trigger."""
    return "'" + text if text.startswith(FORMULA_TRIGGERS) else text


def restore(text: str) -> str:
    """Undo `neutralise` (for reading an exported CSV back)."""
    return text[1:] if text.startswith("'") and text[1:].startswith(FORMULA_TRIGGERS) else text


def _number(value: Any) -> str:
    # An empty cell, never "None" or "nan": a missing figure stays visibly missing.
    if value is None or isinstance(value, bool):
        return ""
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else ""
    return str(value)


def _row(event: Event) -> list[str]:
    cost = event.cost or {}
    flops, byte_parts = cost.get("flops") or {}, cost.get("bytes") or {}
    error = prediction_error_pct(event.predicted_ms, event.latency_ms)
    values: list[Any] = [
        event.step, event.phase, event.positions[0], event.positions[1], event.n_new, event.token_id,
        None, event.latency_ms, event.predicted_ms, error, event.kv_seq_len, event.kv_bytes,
        flops.get("total"), byte_parts.get("weights"), byte_parts.get("kv_read"), byte_parts.get("kv_write"),
        byte_parts.get("activations"), cost.get("intensity"),
    ]
    cells = [_number(v) for v in values]
    cells[1] = neutralise(event.phase)
    cells[6] = neutralise(event.token_text)
    return cells


def trace_to_csv(trace: Trace) -> str:
    """One header row, then one row per forward pass (the prefill first). Empty cells: not recorded."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, quoting=csv.QUOTE_MINIMAL)
    writer.writerow(COLUMNS)
    for event in trace.events:
        writer.writerow(_row(event))
    return buffer.getvalue()


def _slug(text: str, limit: int) -> str:
    """Lower-case ASCII letters, digits and single hyphens: safe on every file system and in a header."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text).strip("-")
    return slug[:limit].rstrip("-")


def trace_filename(trace: Trace, ext: str) -> str:
    """A download name such as `pdlab-smollm2-135m-instruct-why-is-the-sky-blue-48tok-1a2b3c4d.csv`.

    Only slugs of the model id and the prompt's first words, plus a short hash of the run's
    tokens (so two runs of one prompt get different names, and the same run the same name).
    """
    if ext not in EXTENSIONS:
        raise ValueError(f"extension must be one of {', '.join(EXTENSIONS)}")
    model = _slug(str(trace.model.get("id", "")).rsplit("/", 1)[-1], 40) or "model"
    prompt = _slug(trace.prompt_text, 32) or "run"
    digest = hashlib.sha256(repr((trace.prompt_token_ids, trace.generated_ids)).encode()).hexdigest()[:8]
    return f"pdlab-{model}-{prompt}-{len(trace.events)}tok-{digest}.{ext}"
