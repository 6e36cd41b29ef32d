"""Recorded production traffic as workloads: the bundled traces (assets/sim/traffic/) played as
recorded, with a time scale, a window and a request count.

A trace keeps its arrival times and its prompt and output lengths. Playing it takes the requests
that arrive in a window of the recording (from `window_start_s`, for `window_s` seconds or to the
end), moves the window's start to time 0, divides every time by `time_scale` (2 = twice the
requests per second) and keeps the first `requests` of them. A request longer than the model's
context window cannot be served there: it is left out and counted, never fatal.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from core.sim.workload import MAX_REQUESTS, Request, read_arrivals

TRAFFIC_DIR = Path(__file__).resolve().parents[2] / "assets" / "sim" / "traffic"
CATALOGUE = TRAFFIC_DIR / "traffic.json"
MAX_TIME_SCALE = 1000.0


@dataclass(frozen=True)
class Recording:
    """One bundled trace: where it came from and under what licence (shown wherever it is played)."""

    name: str
    label: str
    short: str
    file: str
    source: str
    url: str
    licence: str
    licence_file: str
    attribution: str

    def credit(self) -> str:
        """One line naming the source, its licence and the attribution it asks for."""
        return f"{self.short}: {self.source} ({self.licence}); {self.attribution}"


@dataclass(frozen=True)
class Played:
    """The requests a trace contributed, and what was left out of them."""

    recording: Recording
    requests: list[Request]
    left_out: int  # requests met before the last one kept (or the window's end) too long for the context window
    window_start_s: float
    window_s: float | None
    time_scale: float
    span_s: float  # the whole recording's span, first to last arrival

    def summary(self) -> dict:
        return {"trace": self.recording.name, "source": self.recording.source, "licence": self.recording.licence,
                "attribution": self.recording.attribution, "window_start_s": self.window_start_s,
                "window_s": self.window_s, "time_scale": self.time_scale, "recording_span_s": self.span_s,
                "left_out": self.left_out}


@functools.cache
def recordings() -> dict[str, Recording]:
    """Every bundled trace, by name (assets/sim/traffic/traffic.json)."""
    raw = json.loads(CATALOGUE.read_text(encoding="utf-8"))
    return {name: Recording(name=name, **entry) for name, entry in raw.items() if not name.startswith("_")}


def is_recorded(name: str) -> bool:
    return name in recordings()


@functools.cache
def recorded(name: str) -> tuple[Request, ...]:
    """A bundled trace's every request, the first arriving at 0 (read once per process: about 1 s)."""
    if name not in recordings():
        raise ValueError(f"unknown trace {name!r}; bundled: {', '.join(recordings())}")
    rec = recordings()[name]
    path = TRAFFIC_DIR / rec.file
    requests = read_arrivals(path.read_bytes(), path.name, max_bytes=None)
    start = requests[0].arrival_s
    return tuple(replace(r, arrival_s=r.arrival_s - start) for r in requests)


def _number(name: str, value: object, low: float, high: float, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value > high or value < low or (low_open and value == low):
        bound = f"above {low:g}" if low_open else f"from {low:g}"
        raise ValueError(f"{name} must be a number {bound} up to {high:g}, got {value!r}")
    return float(value)


def play(name: str, requests: int, time_scale: float = 1.0, window_start_s: float = 0.0,
         window_s: float | None = None, max_context: int | None = None) -> Played:
    """The first `requests` of trace `name` that fit `max_context` tokens, from its window, at
    `time_scale` times its recorded rate. ValueError, in words, for settings that select nothing."""
    trace = recorded(name)
    span = trace[-1].arrival_s
    if isinstance(requests, bool) or not isinstance(requests, int) or not 1 <= requests <= MAX_REQUESTS:
        raise ValueError(f"number of requests must be a whole number from 1 to {MAX_REQUESTS:,}, got {requests!r}")
    scale = _number("the time scale", time_scale, 0.0, MAX_TIME_SCALE, low_open=True)
    start = _number("the window's start", window_start_s, 0.0, span)
    length = None if window_s is None else _number("the window's length", window_s, 0.0, 1e7, low_open=True)
    end = math.inf if length is None else start + length
    kept: list[Request] = []
    left_out = 0
    for r in trace:
        if r.arrival_s < start:
            continue
        if r.arrival_s >= end or len(kept) == requests:
            break
        if max_context is not None and r.prompt_tokens + r.output_tokens - 1 > max_context:
            left_out += 1
            continue
        kept.append(replace(r, id=len(kept), arrival_s=(r.arrival_s - start) / scale))
    if not kept:
        why = (f"all {left_out:,} of its requests there are longer than the model's context window of "
               f"{max_context:,} tokens" if left_out else "no request arrives in it")
        raise ValueError(f"{recordings()[name].short}: the window from {start:,.0f} s "
                         f"{'to the end' if length is None else f'for {length:,.0f} s'} gives nothing to play: {why}")
    return Played(recordings()[name], kept, left_out, start, length, scale, span)
