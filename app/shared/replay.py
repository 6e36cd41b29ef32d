"""Replay a recorded trace without the model: a finished "run" the live view draws like any other.

A ReplayRun has the fields the live fragment and the after-run sections read from a
GenerationRun (id, status, events, ctx, settings, trace()...), so a loaded or bundled trace goes
through the SAME charts, patches and player as a live run: same tokens, same cache growth. The
figure context comes from the trace alone (cache tensor shapes, recorded prompt tokens, the
recording machine's calibrated ceilings), so nothing here needs torch or the tokenizer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from app.shared.context import Ceilings, RunContext, token_label
from app.shared.jobs import next_id
from core import perf
from core.trace import Trace, bundled_traces, load_trace_file

MODELS_DIR = Path(__file__).resolve().parents[2] / "assets" / "models"
DEFAULT_BUNDLED = "sky-blue"  # the page's default prompt and settings
DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}


def _special(text: str) -> bool:
    return text.startswith("<|") and text.endswith("|>")


def model_config(trace: Trace) -> dict[str, Any] | None:
    """The bundled config.json of the model a trace recorded (None for a model the app does not bundle)."""
    return _model_configs().get(str(trace.model.get("id", ""))) or None


@cache
def _model_configs() -> dict[str, dict[str, Any]]:
    """Bundled model configs by their hub id, for what a trace does not record (query heads, window)."""
    out = {}
    for path in MODELS_DIR.glob("*.json"):
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if isinstance(cfg, dict) and cfg.get("_name_or_path"):
            out[str(cfg["_name_or_path"])] = cfg
    return out


def recorded_on(trace: Trace) -> str:
    """Where and when a trace was recorded, in words, from its hardware block (or its environment)."""
    hw = trace.hardware or {}
    machine = hw.get("machine") or {}
    parts = []
    if machine.get("cpu_model"):
        cpus = f", {machine['cpu_count']} vCPUs" if machine.get("cpu_count") else ""
        parts.append(f"{machine['cpu_model']}{cpus}")
    if machine.get("torch"):
        parts.append(f"torch {machine['torch']}")
    elif (trace.environment or {}).get("torch"):
        parts.append(f"torch {trace.environment['torch']}")
    date = (hw.get("recorded") or {}).get("date")
    if date:
        parts.append(f"recorded {date}")
    return " · ".join(str(p) for p in parts) or "an unrecorded machine"


def context_from_trace(trace: Trace, tokenizer: Any = None) -> RunContext:
    """The figure context of a recorded run, from the trace alone (a tokenizer only fills gaps)."""
    first = trace.events[0] if trace.events else None
    cfg = _model_configs().get(str(trace.model.get("id", "")), {})
    shapes = first.kv_shapes if first is not None and first.kv_shapes else []
    if shapes and isinstance(shapes[0].get("key"), list) and len(shapes[0]["key"]) == 4:
        n_layers, n_kv, head_dim = len(shapes), int(shapes[0]["key"][1]), int(shapes[0]["key"][3])
    elif first is not None and first.kv_norms:
        keys = first.kv_norms.get("key") or []
        n_layers, n_kv = len(keys), len(keys[0]) if keys else 1
        head_dim = perf.head_dim_from_config(cfg, default=64)
    else:
        n_layers = int(cfg.get("num_hidden_layers") or 1)
        n_kv = int(cfg.get("num_key_value_heads") or cfg.get("num_attention_heads") or 1)
        head_dim = perf.head_dim_from_config(cfg, default=64)
    n_heads = int(cfg.get("num_attention_heads") or n_kv)
    if n_heads % max(n_kv, 1):
        n_heads = n_kv
    ids = trace.prompt_token_ids
    if trace.prompt_tokens is not None:
        texts = list(trace.prompt_tokens)
    elif tokenizer is not None:
        texts = [token_label(tokenizer, i) for i in ids]
    else:
        texts = [f"#{i}" for i in ids]  # an old trace and no tokenizer: label by id
    settings = trace.settings
    weight_bytes = None
    for e in trace.events:
        if e.phase == "decode" and e.cost and isinstance(e.cost.get("bytes"), dict):
            weight_bytes = e.cost["bytes"].get("weights")
            break
    hw = trace.hardware or {}
    machine = hw.get("machine") or {}
    label = "recorded on " + (f"{machine.get('cpu_model')}" if machine.get("cpu_model") else "another machine")
    ceilings = Ceilings(bandwidth=_num(hw.get("bandwidth_bytes_per_s")), peak_flops=_num(hw.get("peak_flops_per_s")),
                        label=label)
    max_new = _int(settings.get("max_new_tokens"), len(trace.events)) or 1
    return RunContext(
        n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
        dtype_bytes=DTYPE_BYTES.get(str(trace.model.get("dtype")), 4), prompt_tokens=texts,
        prompt_special=[_special(t) for t in texts], max_new_tokens=max(max_new, len(trace.events)),
        batch=_int(settings.get("batch"), 1) or 1, cache=str(settings.get("cache", "dynamic")),
        context_window=int(cfg.get("max_position_embeddings") or 8192),
        weight_bytes=int(weight_bytes) if isinstance(weight_bytes, (int, float)) else None, ceilings=ceilings,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        kept=int((trace.turn or {}).get("reused_tokens", 0)))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _int(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass
class ReplayRun:
    """A finished run read from a trace. `source` says where it came from, for the banner."""

    trace_data: Trace
    ctx: RunContext
    source: str
    bundled_name: str | None = None  # set when it replays a bundled recording (by name, for links)

    replay = True
    active = False
    status = "done"
    error = None
    progress = ""
    queue_position = -1

    def __post_init__(self) -> None:
        self.id = next_id()
        self.events = list(self.trace_data.events)
        self.prompt = self.trace_data.prompt_text
        self.prompt_ids = list(self.trace_data.prompt_token_ids)
        self.stop_reason = self.trace_data.stop_reason or "done"
        self.turn = self.trace_data.turn  # a follow-up's record (what was kept), None for one question
        self.kept = None  # a recording holds no cache: a follow-up from it runs cold
        s = self.trace_data.settings
        self.settings = SimpleNamespace(**{**s, "cache": str(s.get("cache", "dynamic"))})
        m = self.trace_data.model
        self.loaded = SimpleNamespace(info=SimpleNamespace(weights_source=m.get("weights_source", "?"),
                                                           id=m.get("id", "?"), dtype=m.get("dtype")))

    @property
    def generated_text(self) -> str:
        return "".join(e.token_text for e in self.events)

    def touch(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def trace(self) -> Trace:
        return self.trace_data


def replay_run(trace: Trace, source: str, tokenizer: Any = None, bundled_name: str | None = None) -> ReplayRun:
    return ReplayRun(trace, context_from_trace(trace, tokenizer), source, bundled_name)


@cache
def _bundled_trace(name: str) -> Trace:
    return load_trace_file(bundled_traces()[name].read_bytes())


def bundled(name: str) -> ReplayRun:
    """A fresh replay of a bundled trace (parsed once per process)."""
    trace = _bundled_trace(name)
    return replay_run(trace, f"bundled recording '{name}'", bundled_name=name)


def bundled_names() -> list[str]:
    names = list(bundled_traces())
    if DEFAULT_BUNDLED in names:  # the default prompt's recording first
        names.remove(DEFAULT_BUNDLED)
        names.insert(0, DEFAULT_BUNDLED)
    return names


def bundled_label(name: str) -> str:
    s = _bundled_trace(name).summary()
    prompt = _bundled_trace(name).prompt_text
    short = prompt if len(prompt) <= 60 else prompt[:57] + "…"
    return f"{short} ({s['prompt_tokens']} prompt + {s['generated_tokens']} generated tokens)"
