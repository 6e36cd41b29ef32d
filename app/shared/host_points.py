"""Measured points for the what-if page's "this server" view: the live page's runs, set beside the
prediction for the same model on the same machine.

Two sources, each point labelled with where it came from:

- the live page's runs on this server: when a generation ends, its time to first token and its
  median decode step are offered to `STORE` (one process-wide list, newest last, capped at
  MAX_POINTS so memory stays the same run after run). A point holds timings and token counts,
  never the prompt's text or tokens;
- the traces bundled with the app (assets/traces), real runs recorded on this machine kind, so
  the view has points before anyone has pressed Generate, labelled as recordings with their date.

No session state here (tests/test_layers.py).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import statistics
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRACES_DIR = Path(__file__).resolve().parents[2] / "assets" / "traces"
MAX_POINTS = 12
MAX_TRACE_BYTES = 2_000_000


@dataclass(frozen=True)
class RunPoint:
    """One run's measured figures. `label` says where it came from (a run at a time, or a recording)."""

    label: str
    source: str  # "server" (a live run on this server) or "bundled" (a recording shipped with the app)
    model_id: str
    dtype: str
    batch: int
    cache: str
    prompt_tokens: int
    ttft_ms: float
    decode_step_ms: float | None  # median over the run's decode steps
    decode_context: float | None  # median cached positions those steps attended over
    decode_steps: int
    short: str = ""  # a few characters drawn beside the point


def point_from_events(events: list[Any], model: dict[str, Any], settings: dict[str, Any], label: str,
                      source: str, short: str = "") -> RunPoint | None:
    """A RunPoint from a run's events (core.trace.Event or their dicts); None without a prefill."""
    rows = [e if isinstance(e, dict) else {"phase": e.phase, "positions": e.positions, "latency_ms": e.latency_ms}
            for e in events]
    if not rows or rows[0].get("phase") != "prefill":
        return None
    decodes = [r for r in rows[1:] if r.get("phase") == "decode"]
    start, end = rows[0]["positions"]
    return RunPoint(
        label=label, source=source, model_id=str(model.get("id", "")), dtype=str(model.get("dtype", "")),
        batch=int(settings.get("batch", 1)), cache=str(settings.get("cache", "dynamic")),
        prompt_tokens=int(end - start), ttft_ms=float(rows[0]["latency_ms"]),
        decode_step_ms=statistics.median(r["latency_ms"] for r in decodes) if decodes else None,
        decode_context=statistics.median(r["positions"][0] for r in decodes) if decodes else None,
        decode_steps=len(decodes), short=short or label)


class PointStore:
    """The last MAX_POINTS runs on this server, shared by every session (guarded by a lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._points: list[RunPoint] = []

    def offer(self, point: RunPoint | None) -> None:
        if point is None:
            return
        with self._lock:
            self._points = [*self._points, point][-MAX_POINTS:]

    def points(self) -> list[RunPoint]:
        with self._lock:
            return list(self._points)

    def clear(self) -> None:
        with self._lock:
            self._points = []


STORE = PointStore()


def record_run(events: list[Any], model: dict[str, Any], settings: dict[str, Any],
               finished_at: dt.datetime | None = None) -> None:
    """Offer a finished live run to the store (runs with the cache off are kept, and labelled)."""
    when = (finished_at or dt.datetime.now()).strftime("%H:%M:%S")
    try:
        point = point_from_events(events, model, settings, f"live run at {when}", "server", f"run {when[:5]}")
    except (KeyError, TypeError, ValueError, IndexError):  # a run's own result never fails for its point
        return
    STORE.offer(point)


def bundled_points(directory: Path | None = None) -> list[RunPoint]:
    """The bundled traces as points; a missing, huge or malformed file is skipped. Read once per
    process (the files ship with the app; parsing them took ~80 ms, over the page's redraw budget)."""
    return list(_bundled(directory or TRACES_DIR))


@functools.lru_cache(maxsize=4)
def _bundled(directory: Path) -> tuple[RunPoint, ...]:
    out = []
    for path in sorted(directory.glob("*.json")):
        try:
            if path.stat().st_size > MAX_TRACE_BYTES:
                continue
            data = json.loads(path.read_text(encoding="utf-8"))
            hw = data.get("hardware") or {}
            date = str((hw.get("recorded") or {}).get("date", "")) or "date not recorded"
            machine = hw.get("machine") or {}
            where = f"{str(machine.get('cpu_model', 'a CPU'))[:40]}, {machine.get('cpu_count', '?')} vCPUs"
            point = point_from_events(data["events"], data.get("model") or {}, data.get("settings") or {},
                                      f"recording {path.stem} ({date}, {where})", "bundled", path.stem)
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            continue
        if point is not None:
            out.append(point)
    return tuple(out)


def all_points() -> list[RunPoint]:
    """Recordings first, then this server's runs, oldest to newest."""
    return [*bundled_points(), *STORE.points()]


EMBEDDED_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def same_setup(model_name: str, weight_dtype: str, kv_dtype: str | None) -> bool:
    """Whether the what-if settings are the live page's own model and dtype, so its points apply."""
    return model_name == "smollm2-135m" and weight_dtype == "fp32" and (kv_dtype or "fp32") == "fp32"


def comparable(points: list[RunPoint]) -> list[RunPoint]:
    """The points one batch-1 prediction with a cache speaks for: the embedded model in fp32."""
    return [p for p in points if p.model_id == EMBEDDED_MODEL_ID and p.dtype == "float32" and p.batch == 1
            and p.cache == "dynamic"]
