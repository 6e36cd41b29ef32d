"""What a measured engine run holds: every request's send, first-token and token times, and the
engine's metrics sampled during the run. The same record serves a live run, a saved one, and the
bundled recording the lab plays where no engine is configured.

Times are seconds from the run's start (the moment the player began sending); a request's TTFT is
its first token's time minus its send time, and its TPOT is (E2E - TTFT) / (n - 1), as in
core.sim.metrics and the live page.
"""

from __future__ import annotations

import copy
import json
import math
import threading
from dataclasses import asdict, dataclass, field, fields
from typing import Any

RECORD_FORMAT = 1
MAX_RECORD_BYTES = 20_000_000


@dataclass
class RequestRecord:
    """One request as the client saw it. `arrival_s` is when the workload scheduled it, `sent_s` when
    it actually left (later only if the concurrency bound held it back)."""

    id: int
    prompt_tokens: int
    output_tokens: int  # asked for
    arrival_s: float
    sent_s: float | None = None
    token_s: list[float] = field(default_factory=list)  # every output token's arrival
    engine_figures: dict[str, Any] = field(default_factory=dict)  # the engine's own usage / timings
    error: str | None = None
    done: bool = False
    role: str = ""  # "short" / "long" in the stall workload; free text otherwise

    @property
    def left_s(self) -> float:
        """When the request left: its send time, or its scheduled arrival if it never got sent."""
        return self.sent_s if self.sent_s is not None else self.arrival_s

    @property
    def ttft_s(self) -> float | None:
        return self.token_s[0] - self.sent_s if self.token_s and self.sent_s is not None else None

    @property
    def e2e_s(self) -> float | None:
        return self.token_s[-1] - self.sent_s if self.token_s and self.sent_s is not None else None

    @property
    def tpot_s(self) -> float | None:
        n = len(self.token_s)
        return (self.token_s[-1] - self.token_s[0]) / (n - 1) if n > 1 else None

    def gaps_s(self) -> list[float]:
        return [b - a for a, b in zip(self.token_s, self.token_s[1:], strict=False)]


@dataclass
class EngineRun:
    """A whole measured run: which engine and setting, its requests, its metrics samples."""

    engine: str
    setting: str
    model: str
    started_at: str  # ISO date-time (UTC) the run began
    engine_version: str = ""
    settings: dict[str, Any] = field(default_factory=dict)  # the engine's knobs (budget, slots, ...)
    requests: list[RequestRecord] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # {"t_s": float, "values": {name: value}}
    kind: str = "measured"
    note: str = ""
    finished: bool = False
    clock_unix_s: float | None = None  # the wall clock at the run's zero (to place an engine's own time stamps)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def snapshot(self) -> EngineRun:
        """A copy safe to draw while the player is still writing into this one."""
        with self._lock:
            copy = EngineRun.from_dict(self.to_dict())
        return copy

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if not f.name.startswith("_")}
        out["requests"] = [asdict(r) for r in self.requests]
        out["format"] = RECORD_FORMAT
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any) -> EngineRun:
        """A run from its dict (a saved or uploaded recording: untrusted, so every field is checked)."""
        if not isinstance(data, dict):
            raise ValueError("an engine recording is a JSON object")
        if data.get("format") != RECORD_FORMAT:
            raise ValueError(f"unknown engine recording format {data.get('format')!r} (expected {RECORD_FORMAT})")
        try:
            requests = [_request(r) for r in data.get("requests", [])]
            metrics = [{"t_s": float(m["t_s"]), "values": {str(k): float(v) for k, v in m["values"].items()}}
                       for m in data.get("metrics", [])]
            return cls(engine=str(data["engine"]), setting=str(data["setting"]), model=str(data["model"]),
                       started_at=str(data["started_at"]), engine_version=str(data.get("engine_version", "")),
                       settings=dict(data.get("settings", {})), requests=requests, metrics=metrics,
                       kind=str(data.get("kind", "measured")), note=str(data.get("note", "")),
                       finished=bool(data.get("finished", False)), clock_unix_s=_unix(data.get("clock_unix_s")))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"the engine recording is malformed: {exc!r}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> EngineRun:
        if len(text) > MAX_RECORD_BYTES:
            raise ValueError(f"the recording is {len(text):,} bytes; the limit is {MAX_RECORD_BYTES:,}")
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"the recording is not JSON: {exc}") from None
        return cls.from_dict(data)


def _time(value: Any, where: str) -> float:
    t = float(value)
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"{where} must be a finite time >= 0, got {value!r}")
    return t


def _unix(value: Any) -> float | None:
    if value is None:
        return None
    t = float(value)
    if not math.isfinite(t):
        raise ValueError(f"clock_unix_s must be a finite time, got {value!r}")
    return t


def _request(r: dict[str, Any]) -> RequestRecord:
    token_s = [_time(t, "a token time") for t in r.get("token_s", [])]
    if any(b < a for a, b in zip(token_s, token_s[1:], strict=False)):
        raise ValueError(f"request {r.get('id')}: token times go backwards")
    sent = r.get("sent_s")
    return RequestRecord(id=int(r["id"]), prompt_tokens=int(r["prompt_tokens"]), output_tokens=int(r["output_tokens"]),
                         arrival_s=_time(r["arrival_s"], "arrival_s"),
                         sent_s=None if sent is None else _time(sent, "sent_s"), token_s=token_s,
                         engine_figures=dict(r.get("engine_figures", {})),
                         error=None if r.get("error") is None else str(r["error"]), done=bool(r.get("done", False)),
                         role=str(r.get("role", "")))
