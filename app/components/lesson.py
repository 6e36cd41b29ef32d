"""The lesson text: Markdown in assets/lesson/, with [[name]] slots filled from the run and from core.

Numbers in the prose are never typed by hand: each slot is filled from the current run (measured)
or from core's cost model and calibration (computed), and the sentences say which. A slot with
no value yet (before the first run) reads as an em dash.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from app.components.figures import fmt_bytes
from app.services.context import RunContext
from core import perf
from core.trace import Event

LESSON_DIR = Path(__file__).resolve().parents[2] / "assets" / "lesson"
_SLOT = re.compile(r"\[\[([a-z0-9_]+)\]\]")


@cache
def _raw(name: str) -> str:
    return (LESSON_DIR / f"{name}.md").read_text(encoding="utf-8")


def fill(template: str, values: dict[str, str] | None = None) -> str:
    """A template's [[name]] slots filled from `values`; a slot with no value reads as an em dash."""
    values = values or {}
    return _SLOT.sub(lambda m: values.get(m.group(1), "—"), template)


def text(name: str, values: dict[str, str] | None = None) -> str:
    """assets/lesson/<name>.md with its slots filled."""
    return fill(_raw(name), values)


def values_for(events: list[Event], ctx: RunContext | None) -> dict[str, str]:
    """Slot values from a run's events and context; a slot with no value reads as a dash."""
    v: dict[str, str] = {}
    if ctx is None:
        return v
    v.update(n_layers=str(ctx.n_layers), n_kv_heads=str(ctx.n_kv_heads), head_dim=str(ctx.head_dim),
             window=f"{ctx.context_window:,}", kv_per_token=fmt_bytes(ctx.kv_bytes_per_token))
    if events:
        v["prompt_tokens"] = str(ctx.prompt_len)
    if ctx.weight_bytes:
        v["weights_mb"] = f"{ctx.weight_bytes / 1e6:.0f}"
        v["crossover_b1"] = f"{perf.crossover_tokens(ctx.weight_bytes, ctx.kv_bytes_per_token, 1):,.0f}"
    c = ctx.ceilings
    if c.bandwidth and c.peak_flops:
        v["ridge"] = f"{c.peak_flops / c.bandwidth:.0f}"
        v["ceiling_gbs"] = f"{c.bandwidth / 1e9:.1f} GB/s"
    if events:
        v["ttft_ms"] = f"{perf.ttft_ms(events):.0f}"
        v["kv_columns"] = str(events[-1].kv_seq_len)
        if events[0].cost:
            cost = events[0].cost
            v["prefill_intensity"] = f"{cost['flops']['total'] / cost['bytes']['total']:.1f}"
    if len(events) > 1:
        v["tpot_ms"] = f"{perf.tpot_ms(events):.0f}"
        if events[-1].cost:
            cost = events[-1].cost
            v["decode_intensity"] = f"{cost['flops']['total'] / cost['bytes']['total']:.2f}"
        gbs = perf.achieved_bandwidth(events)
        if gbs is not None:
            v["achieved_gbs"] = f"{gbs / 1e9:.1f} GB/s"
    return v
