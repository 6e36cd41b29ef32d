"""The trace of one run: what went in, and one event per forward pass. Saved and replayed as JSON.

The key names are a public format (the CLI's `--json`, saved files, bundled traces): later
versions add keys but never rename them. `version` is bumped only for a breaking change.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core import perf

# Version 2 (a follow-up turn): the prompt's ids are the whole conversation and the prefill may start
# after positions kept from the last turn (its `turn` says how many); an app that read version 1
# would draw those as missing. Version 1 files are read as single-turn traces.
TRACE_VERSION = 2
READABLE_VERSIONS = (1, 2)
# A turn's messages: at most this many, each at most this many characters (a trace stays readable).
MAX_TURN_MESSAGES, MAX_MESSAGE_CHARS = 64, 20_000
MAX_TRACE_BYTES = 20 * 1024 * 1024
PHASES = ("prefill", "decode")
# Why a run ended, the same words from the CLI and the page: the end-of-text token, the token limit,
# or a stop asked for (the page's Stop button, a cancelled CLI run).
STOP_EOS, STOP_MAX_NEW_TOKENS, STOP_STOPPED = "eos", "max_new_tokens", "stopped"
STOP_REASONS = (STOP_EOS, STOP_MAX_NEW_TOKENS, STOP_STOPPED)
# Words older traces used for the same reasons: read as today's, so saved files keep loading alike.
_OLD_STOP_REASONS = {"cancelled": STOP_STOPPED}
# Traces recorded from the embedded model by scripts/record_traces.py, shown when the model is not ready.
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "assets" / "traces"


class TraceError(ValueError):
    """A trace file could not be read; the message says what is wrong with it."""


@dataclass
class Event:
    """One forward pass: the prefill (all prompt positions at once) or one decode step."""

    phase: str
    positions: list[int]
    token_id: int
    token_text: str
    latency_ms: float
    kv_seq_len: int
    kv_shapes: list[dict[str, list[int]]]
    step: int = 0
    kv_bytes: int = 0
    kv_bytes_allocated: int | None = None
    predicted_ms: float | None = None
    # The prediction split into the predictor's additive terms (core.predictor.TERMS), in ms; they
    # sum to predicted_ms. Traces recorded before it existed simply lack it.
    predicted_terms_ms: dict[str, float] | None = None
    cost: dict[str, Any] | None = None
    # L2 norms of the vectors this forward wrote, per layer and KV head: positions [positions[0],
    # positions[1]), or for a follow-up's prefill from 0 (the kept positions, read, not written).
    kv_norms: dict[str, list] | None = None
    # Milliseconds the model waited, just before this forward, for its page to finish a redraw (the
    # page's runs take turns with the model's forwards). Not part of latency_ms: the wait is over
    # before the forward is timed. Only page runs have it; the latency chart marks these steps.
    waited_ms: float | None = None

    @property
    def n_new(self) -> int:
        return self.positions[1] - self.positions[0]

    @property
    def norm_positions(self) -> range:
        """The cache positions `kv_norms` covers: the written ones, and for a follow-up's prefill
        the kept ones before them too (empty without norms)."""
        keys = self.kv_norms.get("key") if isinstance(self.kv_norms, dict) else None
        if not (isinstance(keys, list) and keys and isinstance(keys[0], list) and keys[0]
                and isinstance(keys[0][0], list)):
            return range(0)
        width = min(len(keys[0][0]), self.positions[1])
        return range(self.positions[1] - width, self.positions[1])


@dataclass
class Trace:
    model: dict[str, Any]
    settings: dict[str, Any]
    prompt_token_ids: list[int]
    events: list[Event] = field(default_factory=list)
    generated_text: str = ""
    prompt_text: str = ""
    stop_reason: str | None = None
    hardware: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    # The prompt's tokens as text (one per id), so a replay can show them without the tokenizer.
    # Optional and additive: older traces lack it and replays then label tokens by id.
    prompt_tokens: list[str] | None = None
    # A conversation's turn (None for a single question): {"index": 0 for the first question,
    # "messages": the conversation up to this turn's question as [{"role", "content"}],
    # "reused_tokens": positions kept from the last turn's cache, "new_tokens": positions prefilled,
    # "cold_reason": why nothing was kept (absent when something was), "cold_ttft_ms": the same
    # turn prefilled from scratch, measured after it (absent when not measured)}.
    turn: dict[str, Any] | None = None
    version: int = TRACE_VERSION

    @property
    def generated_ids(self) -> list[int]:
        return [e.token_id for e in self.events]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["events"] = [{k: v for k, v in asdict(e).items() if v is not None} for e in self.events]
        return {k: v for k, v in data.items() if v is not None}

    def to_json(self, indent: int | None = None) -> str:
        # allow_nan=False: NaN is not JSON, and a trace must load in any reader.
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent, allow_nan=False,
                          separators=None if indent else (",", ":"))

    @classmethod
    def from_dict(cls, data: Any) -> Trace:
        return _parse(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> Trace:
        if len(text) > MAX_TRACE_BYTES:
            raise TraceError(f"trace is {len(text) / 1e6:.1f} MB, over the {MAX_TRACE_BYTES / 1e6:.0f} MB limit")
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise TraceError(f"not valid JSON ({exc}); the file may be truncated") from exc
        return _parse(data)

    def summary(self) -> dict[str, Any]:
        """The headline figures of a run, for a trace picker or a caption (None where not recorded)."""
        return {
            "model": self.model.get("id"), "weights_source": self.model.get("weights_source"),
            "prompt_tokens": len(self.prompt_token_ids), "generated_tokens": len(self.events),
            "ttft_ms": perf.ttft_ms(self.events), "tpot_ms": perf.tpot_ms(self.events),
            "stop_reason": self.stop_reason,
            "hardware": (self.hardware or {}).get("hardware"),
        }


def load_trace_file(data: bytes | str) -> Trace:
    """A trace from a file's content (an upload or a bundled file); TraceError says what is wrong."""
    if not data:
        raise TraceError("the file is empty")
    if len(data) > MAX_TRACE_BYTES:
        raise TraceError(f"trace is {len(data) / 1e6:.1f} MB, over the {MAX_TRACE_BYTES / 1e6:.0f} MB limit")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")  # tolerate the byte-order mark some editors add
        except UnicodeDecodeError:
            raise TraceError("the file is not UTF-8 text; a trace is a .json file saved by this app") from None
    return Trace.from_json(data)


def bundled_traces() -> dict[str, Path]:
    """Bundled trace files by name (file stem), sorted; empty when none are installed."""
    return {p.stem: p for p in sorted(BUNDLED_DIR.glob("*.json"))}


_EVENT_REQUIRED = {"phase": str, "positions": list, "token_id": int, "token_text": str,
                   "latency_ms": (int, float), "kv_seq_len": int, "kv_shapes": list}
_EVENT_OPTIONAL = {"step": int, "kv_bytes": int, "kv_bytes_allocated": int,
                   "predicted_ms": (int, float), "predicted_terms_ms": dict, "cost": dict,
                   "kv_norms": dict, "waited_ms": (int, float)}


def _check_type(where: str, key: str, value: Any, kind) -> None:
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TraceError(f"{where}: '{key}' has the wrong type ({type(value).__name__})")
    if isinstance(value, float) and not math.isfinite(value):
        raise TraceError(f"{where}: '{key}' is not a finite number")


def _parse(data: Any) -> Trace:
    if not isinstance(data, dict):
        raise TraceError("a trace is a JSON object")
    version = data.get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise TraceError(f"trace version {version!r} is not supported (this app reads versions "
                         f"{' and '.join(map(str, READABLE_VERSIONS))})")
    for key, kind in (("model", dict), ("settings", dict), ("prompt_token_ids", list), ("events", list)):
        if key not in data:
            raise TraceError(f"trace has no '{key}'")
        _check_type("trace", key, data[key], kind)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in data["prompt_token_ids"]):
        raise TraceError("prompt_token_ids must be integers")
    events = []
    for i, raw in enumerate(data["events"]):
        where = f"event {i}"
        if not isinstance(raw, dict):
            raise TraceError(f"{where} is not an object")
        for key, kind in _EVENT_REQUIRED.items():
            if key not in raw:
                raise TraceError(f"{where} has no '{key}'")
            _check_type(where, key, raw[key], kind)
        for key, kind in _EVENT_OPTIONAL.items():
            if raw.get(key) is not None:
                _check_type(where, key, raw[key], kind)
        terms = raw.get("predicted_terms_ms")
        if terms is not None and (len(terms) > 16 or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for k, v in terms.items())):
            raise TraceError(f"{where}: 'predicted_terms_ms' must map term names to finite numbers")
        if raw["phase"] not in PHASES:
            raise TraceError(f"{where}: unknown phase {raw['phase']!r}")
        pos = raw["positions"]
        if len(pos) != 2 or not all(isinstance(p, int) for p in pos) or not 0 <= pos[0] <= pos[1]:
            raise TraceError(f"{where}: positions must be [first, last+1)")
        known = {k: raw[k] for k in (*_EVENT_REQUIRED, *_EVENT_OPTIONAL) if k in raw}
        events.append(Event(**known))
    turn = _turn(data.get("turn"), len(data["prompt_token_ids"])) if version >= 2 else None
    if turn and events and events[0].phase == "prefill" and events[0].positions[0] != turn["reused_tokens"]:
        raise TraceError("turn: the prefill must start after the reused tokens")
    return Trace(
        model=data["model"], settings=data["settings"], prompt_token_ids=data["prompt_token_ids"],
        events=events, generated_text=str(data.get("generated_text", "")),
        prompt_text=str(data.get("prompt_text", "")), stop_reason=_stop_reason(data.get("stop_reason")),
        hardware=data.get("hardware") if isinstance(data.get("hardware"), dict) else None,
        environment=data.get("environment") if isinstance(data.get("environment"), dict) else None,
        prompt_tokens=_prompt_tokens(data.get("prompt_tokens"), len(data["prompt_token_ids"])),
        turn=turn,
    )


def _turn(value: Any, n_prompt: int) -> dict[str, Any] | None:
    """A follow-up turn's record, checked (TraceError names what is wrong); None when absent."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TraceError("'turn' must be an object")
    for key in ("index", "reused_tokens", "new_tokens"):
        _check_type("turn", key, value.get(key), int)
        if value[key] < 0:
            raise TraceError(f"turn: '{key}' must not be negative")
    if value["reused_tokens"] + value["new_tokens"] != n_prompt:
        raise TraceError("turn: reused and new tokens must add up to the prompt's tokens")
    messages = value.get("messages", [])
    if (not isinstance(messages, list) or len(messages) > MAX_TURN_MESSAGES or not all(
            isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
            and isinstance(m.get("content"), str) and len(m["content"]) <= MAX_MESSAGE_CHARS for m in messages)):
        raise TraceError(f"turn: 'messages' must be at most {MAX_TURN_MESSAGES} messages with a role and text")
    out = {"index": value["index"], "reused_tokens": value["reused_tokens"], "new_tokens": value["new_tokens"],
           "messages": [{"role": m["role"], "content": m["content"]} for m in messages]}
    if value.get("cold_reason") is not None:
        _check_type("turn", "cold_reason", value["cold_reason"], str)
        out["cold_reason"] = value["cold_reason"][:500]
    if value.get("cold_ttft_ms") is not None:
        _check_type("turn", "cold_ttft_ms", value["cold_ttft_ms"], (int, float))
        out["cold_ttft_ms"] = float(value["cold_ttft_ms"])
    return out


def _stop_reason(value: Any) -> str | None:
    """The recorded stop reason in today's words (an old trace's "cancelled" is "stopped")."""
    if not isinstance(value, str):
        return None
    return _OLD_STOP_REASONS.get(value, value)


def _prompt_tokens(value: Any, n: int) -> list[str] | None:
    """The optional prompt token texts: kept only when they are n strings (else ignored, not fatal)."""
    if isinstance(value, list) and len(value) == n and all(isinstance(t, str) for t in value):
        return list(value)
    return None
