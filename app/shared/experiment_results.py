"""What the cache and batching panels show before a reader presses their button.

Two sources, in this order:

- the last complete measurement any reader made on this server: when a comparison or a batching
  job ends with every forward measured, its result is offered to `STORE`, one per process. The
  store keeps only the newest result of each kind (a new one replaces the old), so its memory
  stays the same run after run;
- a recording bundled with the app (assets/experiments/<kind>.json), made by
  scripts/record_experiments.py with the page's own job code on the embedded model and labelled
  with the machine and date it was measured on. A missing or malformed file reads as no recording:
  the panel then waits for its button as it did before.

Privacy: a stored comparison holds timings and a token count, never a prompt's text or tokens (the
page promises that prompts are not stored). Only a bundled recording names its prompt, which the
recording script chose.

No session state here (tests/test_layers.py): the panels decide which result a reader sees.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXPERIMENTS_DIR = Path(__file__).resolve().parents[2] / "assets" / "experiments"
FORMAT = 1
KINDS = ("compare", "batching")
COMPARE_MODES = ("dynamic", "static", "none")
MAX_FILE_BYTES = 200_000
BATCH_ROW_NUMBERS = ("decode step ms (measured, median)", "tokens/s (measured)", "prefill ms (measured)")
SOURCES = ("yours", "server", "bundled")


@dataclass(frozen=True)
class Measurement:
    """One panel result with where it came from.

    source: "yours" (this reader's own run), "server" (the last run of any reader on this server) or
    "bundled" (a recording shipped with the app). `prompt` is the recording's prompt text (bundled
    comparisons only); `provenance` is the recording's whole description of itself.
    """

    kind: str
    result: dict[str, Any]
    source: str
    measured_at: dt.datetime
    machine: str
    prompt: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)


# --- what a complete result is ----------------------------------------------------------------------

def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: Any) -> bool:
    return _number(value) and value > 0


def problem(kind: str, result: Any) -> str | None:
    """Why `result` is not a complete result of this kind, in words; None when it is one.

    Complete means every forward the job set out to measure was measured: all three cache modes to
    `n_tokens` forwards each, or every batch size of `batches`. A stopped or half-finished job's
    result is not complete, and neither is anything of the wrong shape.
    """
    if kind not in KINDS:
        return f"unknown experiment {kind!r}"
    if not isinstance(result, dict):
        return "the result is not an object"
    return _compare_problem(result) if kind == "compare" else _batching_problem(result)


def _compare_problem(result: dict[str, Any]) -> str | None:
    n = result.get("n_tokens")
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        return "n_tokens must be a whole number of at least 2"
    if not isinstance(result.get("prompt_len"), int) or result["prompt_len"] < 1:
        return "prompt_len must be a positive whole number"
    modes, predicted = result.get("modes"), result.get("predicted", {})
    if not isinstance(modes, dict) or set(modes) != set(COMPARE_MODES):
        return f"modes must be exactly {', '.join(COMPARE_MODES)}"
    if not isinstance(predicted, dict):
        return "predicted must be an object"
    for mode in COMPARE_MODES:
        times = modes[mode]
        if not isinstance(times, list) or len(times) != n or not all(_positive(v) for v in times):
            return f"mode {mode!r} must have {n} positive measured times"
        pred = predicted.get(mode, [])
        if not isinstance(pred, list) or len(pred) > n or not all(p is None or _positive(p) for p in pred):
            return f"predicted times of mode {mode!r} must be positive numbers or null"
    return None


def _batching_problem(result: dict[str, Any]) -> str | None:
    rows, batches = result.get("rows"), result.get("batches")
    if not isinstance(batches, list) or len(batches) < 2 or not all(isinstance(b, int) and b >= 1 for b in batches):
        return "batches must list at least two batch sizes"
    if not isinstance(rows, list) or [r.get("batch") if isinstance(r, dict) else None for r in rows] != batches:
        return "rows must hold one row for every batch size, in order"
    for row in rows:
        if not all(_positive(row.get(k)) for k in BATCH_ROW_NUMBERS):
            return f"batch {row['batch']}: {', '.join(BATCH_ROW_NUMBERS)} must be positive numbers"
    predicted = result.get("predicted", [])
    if not isinstance(predicted, list) or not all(
            isinstance(p, dict) and isinstance(p.get("batch"), int) and _positive(p.get("step ms (predicted)"))
            and _positive(p.get("tokens/s (predicted)")) for p in predicted):
        return "predicted rows must each have a batch, a step time and a throughput"
    crossover = result.get("compute_bound_from")
    if crossover is not None and not _positive(crossover):
        return "compute_bound_from must be a positive number or null"
    roofline = result.get("roofline")
    if roofline is not None and not (isinstance(roofline, dict) and all(
            _positive(roofline.get(k)) for k in ("ridge_flop_per_byte", "decode_intensity", "batch"))):
        return "roofline must hold a positive ridge, intensity and batch"
    return None


def complete(kind: str, result: Any) -> bool:
    return problem(kind, result) is None


# --- the server's last measurement ------------------------------------------------------------------

class ResultStore:
    """The newest complete result of each kind, shared by every session of this server (thread-safe).

    Holds at most one result per kind: memory does not grow however many runs are made.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, Measurement] = {}

    def offer(self, kind: str, result: Any, machine: str, measured_at: dt.datetime | None = None) -> bool:
        """Keep `result` as the server's last measurement of `kind` if it is complete and not older than the
        one held; True when it was kept. The result is copied: the job's own dict stays the job's."""
        if not complete(kind, result):
            return False
        when = measured_at or dt.datetime.now(dt.UTC)
        entry = Measurement(kind, copy.deepcopy(result), "server", when, machine)
        with self._lock:
            held = self._latest.get(kind)
            if held is not None and held.measured_at > when:
                return False
            self._latest[kind] = entry
        return True

    def latest(self, kind: str) -> Measurement | None:
        with self._lock:
            return self._latest.get(kind)

    def clear(self) -> None:
        with self._lock:
            self._latest.clear()


STORE = ResultStore()  # one per server process: every session's panels read the same one


def this_machine() -> str:
    """This server's CPU in words, as a recording names its machine ("<CPU model>, <n> vCPUs")."""
    from core.calibrate import fingerprint

    fp = fingerprint()
    return machine_words(fp.get("cpu_model"), fp.get("cpu_count"))


def machine_words(cpu_model: Any, cpu_count: Any) -> str:
    name = str(cpu_model).strip() if cpu_model else "an unnamed CPU"
    return f"{name} with {cpu_count} vCPUs" if isinstance(cpu_count, int) and cpu_count > 0 else name


def record_finished(kind: str, status: str, result: Any) -> bool:
    """A job's end: a finished (status done), complete result becomes the server's last measurement."""
    if status != "done" or not complete(kind, result):
        return False
    try:
        machine = this_machine()
    except Exception:  # the label is a courtesy: never lose the measurement over it
        machine = "this server"
    return STORE.offer(kind, result, machine)


# --- recordings bundled with the app ----------------------------------------------------------------

class RecordingError(ValueError):
    """A bundled recording could not be used; the message says why."""


def parse_recording(kind: str, text: str | bytes) -> Measurement:
    """A bundled recording's JSON, checked through and through; RecordingError says what is wrong."""
    if len(text) > MAX_FILE_BYTES:
        raise RecordingError(f"over {MAX_FILE_BYTES:,} bytes")
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordingError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RecordingError("not a JSON object")
    if data.get("format") != FORMAT:
        raise RecordingError(f"format {data.get('format')!r}, expected {FORMAT}")
    if data.get("kind") != kind:
        raise RecordingError(f"a recording of {data.get('kind')!r}, expected {kind!r}")
    machine, recorded = data.get("machine"), data.get("recorded")
    if not isinstance(machine, dict) or not isinstance(machine.get("cpu_model"), str) or not machine["cpu_model"]:
        raise RecordingError("machine.cpu_model is missing")
    if not isinstance(recorded, dict) or not isinstance(recorded.get("at"), str):
        raise RecordingError("recorded.at is missing")
    try:
        when = dt.datetime.fromisoformat(recorded["at"])
    except ValueError:
        raise RecordingError(f"recorded.at {recorded['at']!r} is not a date and time") from None
    if when.tzinfo is None:
        raise RecordingError("recorded.at has no time zone")
    prompt = data.get("prompt")
    if not isinstance(prompt, dict) or not isinstance(prompt.get("text"), str) or not prompt["text"].strip():
        raise RecordingError("prompt.text is missing")
    why = problem(kind, data.get("result"))
    if why is not None:
        raise RecordingError(f"result: {why}")
    return Measurement(kind, data["result"], "bundled", when.astimezone(dt.UTC),
                       machine_words(machine["cpu_model"], machine.get("cpu_count")), prompt["text"], data)


_bundled_cache: dict[tuple[str, str], tuple[float, Measurement | None]] = {}
_bundled_lock = threading.Lock()


def load_bundled(kind: str, directory: Path | None = None) -> Measurement | None:
    """The bundled recording of `kind`, or None when its file is missing or malformed (never raises).

    Parsed once per file version (its modification time), so a page pass costs a stat, not a parse.
    """
    path = (directory or EXPERIMENTS_DIR) / f"{kind}.json"
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    key = (kind, str(path))
    with _bundled_lock:
        cached = _bundled_cache.get(key)
        if cached is not None and cached[0] == mtime:
            return cached[1]
    try:
        found: Measurement | None = parse_recording(kind, path.read_bytes())
    except (OSError, RecordingError):
        found = None
    with _bundled_lock:
        _bundled_cache[key] = (mtime, found)
    return found


def shown_before_press(kind: str, directory: Path | None = None) -> Measurement | None:
    """What a panel shows before its reader measures: the server's last measurement, else the recording."""
    return STORE.latest(kind) or load_bundled(kind, directory)


def yours(kind: str, result: dict[str, Any], finished_at: dt.datetime | None = None) -> Measurement:
    """This reader's own finished run, for the same label and figures as the others."""
    return Measurement(kind, result, "yours", finished_at or dt.datetime.now(dt.UTC), "this server")


# --- the label line ---------------------------------------------------------------------------------

def _clock(when: dt.datetime, now: dt.datetime) -> str:
    when, now = when.astimezone(dt.UTC), now.astimezone(dt.UTC)
    return (f"{when:%H:%M} UTC" if when.date() == now.date()
            else f"{when:%H:%M} UTC on {when.day} {when:%B %Y}")


# Said once, one click down, beside a recording's figures (the label above stays short).
RECORDING_CAVEAT = ("Each bundled recording is its own session, and a shared machine's speed varies between "
                    "sessions, so compare a recording's shapes with your run, not its milliseconds.")


def label(m: Measurement, now: dt.datetime | None = None, can_measure: bool = True) -> str:
    """One line saying where and when the shown result was measured, and what the button does."""
    now = now or dt.datetime.now(dt.UTC)
    if m.source == "bundled":
        then = "" if can_measure else " (the button measures this server once the model is ready)"
        # a reader set a recording's 60 ms steps beside their own 47 ms on "the same kind of machine":
        # the label says why they differ, in as many words as it used to say "bundled with the app"
        return (f"Recorded on {m.machine}, {m.measured_at.day} {m.measured_at:%B %Y}: not your run, and "
                f"speeds vary between sessions{then}")
    if m.source == "server":
        return (f"Measured on this server at {_clock(m.measured_at, now)} by a reader's earlier run; press the "
                "button to measure again")
    return f"Measured just now on this server (your run, finished at {_clock(m.measured_at, now)})"
