"""Metric tiles and chart tables: the numbers behind every figure, each labelled measured or computed.

Tables are what a screen reader (or a sceptical reader) gets instead of the chart; tiles are the
headline figures. Both are pure functions of the events, so tests can check them directly.
"""

from __future__ import annotations

import statistics
from typing import Any

import pandas as pd

from app.shared.context import RunContext
from app.views.live.figures import BUDGET_PARTS, position_tokens
from app.views.live.shown import fmt_bytes, gbs_text, sig3
from core import perf
from core.trace import Event


def tiles(events: list[Event], ctx: RunContext) -> list[dict[str, str]]:
    """Headline numbers after these events: label, value, its mark (where the number comes from:
    measured, computed; the page draws it as a small badge, defined once at the top) and a note on
    what it covers."""
    out: list[dict[str, str]] = []
    if not events:
        return out
    first = events[0]
    out.append({"label": "Time to first token", "value": f"{first.latency_ms:.0f} ms",
                "mark": "measured", "note": f"prefill of {first.n_new} tokens"})
    tpot = perf.tpot_ms(events)
    if tpot is not None:
        steps = len(perf.decode_latencies_ms(events))
        shown = sig3(tpot)  # the speed is divided from it, so 1000 ÷ the printed ms gives the printed tok/s
        out.append({"label": "Time per output token", "value": f"{shown} ms",
                    "mark": "measured", "note": f"mean of {steps} decode steps"})
        out.append({"label": "Decode speed", "value": f"{1000.0 / float(shown) * ctx.batch:.1f} tok/s",
                    "mark": "computed", "note": "1000 / mean step time" + (f", × {ctx.batch} rows" if ctx.batch > 1 else "")})
    else:
        out.append({"label": "Time per output token", "value": "–", "mark": "", "note": "after the first decode step"})
    positions = events[-1].kv_seq_len
    # the traffic chart's last bar reads one position fewer than this: "How we know: the bytes" says so
    note = f"read from the tensors: {positions} positions"
    out.append({"label": "KV cache size", "value": fmt_bytes(events[-1].kv_bytes), "mark": "measured",
                "note": note if ctx.cache != "none" else "no cache in this run"})
    gbs = perf.achieved_bandwidth(events)
    if gbs is not None:
        ceiling = ctx.ceilings.bandwidth
        note = "bytes ÷ measured time"
        # both printed to two decimals and the share divided from the printed figures, so a reader's
        # own division gives the printed percentage
        shown, shown_ceiling = gbs_text(gbs), gbs_text(ceiling) if ceiling else ""
        if float(shown_ceiling or 0):
            note += (f"; calibrated ceiling {shown_ceiling} GB/s "
                     f"({100 * float(shown) / float(shown_ceiling):.0f}% of it)")
        out.append({"label": "Achieved bandwidth (decode)", "value": f"{shown} GB/s", "mark": "computed",
                    "note": note})
    return out


def latency_table(events: list[Event], ctx: RunContext | None = None) -> pd.DataFrame:
    return pd.DataFrame([{
        "forward": k, "phase": e.phase, "new tokens": e.n_new, "token produced": e.token_text,
        "measured ms": e.latency_ms, "predicted ms": e.predicted_ms,
        "error %": perf.prediction_error_pct(e.predicted_ms, e.latency_ms),
        # the chart's squares: the wait for the page's redraw came before the step and is not in its time
        "waited for page redraw ms (measured, before the step)": e.waited_ms,
    } for k, e in enumerate(events)])


def traffic_table(events: list[Event], ctx: RunContext | None = None) -> pd.DataFrame:
    rows, total = [], 0
    for k, e in enumerate(events):
        b = (e.cost or {}).get("bytes")
        if not b:
            continue
        total += b["total"]
        rows.append({"forward": k, "phase": e.phase, "weights MB (computed)": b["weights"] / 1e6,
                     "KV read MB (computed)": b["kv_read"] / 1e6, "KV written MB (computed)": b["kv_write"] / 1e6,
                     "cumulative MB (computed)": total / 1e6})
    return pd.DataFrame(rows)


def roofline_table(events: list[Event], ctx: RunContext | None = None) -> pd.DataFrame:
    rows = []
    for k, e in enumerate(events):
        if not e.cost or e.latency_ms <= 0:
            continue
        flops, nbytes = e.cost["flops"]["total"], e.cost["bytes"]["total"]
        rows.append({"forward": k, "phase": e.phase, "FLOPs (computed)": flops, "bytes (computed)": nbytes,
                     "intensity FLOP/B": flops / nbytes, "GFLOP/s (measured time)": flops / e.latency_ms / 1e6,
                     "GFLOP/s (predicted time)": flops / e.predicted_ms / 1e6 if e.predicted_ms else None})
    return pd.DataFrame(rows)


def kv_table(events: list[Event], ctx: RunContext) -> pd.DataFrame:
    """One row per cache position: the token, which forward wrote it, and its mean key/value norms."""
    tokens = position_tokens(events, ctx)
    rows = []
    for e in events:
        if not e.kv_norms:
            continue
        who = "prefill" if e.phase == "prefill" else f"decode step {e.step}"
        for i, pos in enumerate(e.norm_positions):
            by = who if pos >= e.positions[0] else "kept from the last turn"
            keys = [v for layer in e.kv_norms["key"] for v in (head[i] for head in layer)]
            values = [v for layer in e.kv_norms["value"] for v in (head[i] for head in layer)]
            rows.append({"position": pos, "token": tokens[pos] if pos < len(tokens) else "", "written by": by,
                         "mean key norm (measured)": statistics.fmean(keys),
                         "mean value norm (measured)": statistics.fmean(values),
                         "bytes, all layers": ctx.kv_bytes_per_token * ctx.batch})
    return pd.DataFrame(rows)


def budget_table(events: list[Event], ctx: RunContext) -> pd.DataFrame:
    """Per decode step: measured time, the bytes-over-bandwidth estimate, and the prediction's parts."""
    rows = []
    for k, e in enumerate(events):
        if e.phase != "decode":
            continue
        row: dict[str, Any] = {"forward": k, "measured ms": e.latency_ms,
                               "on paper ms (computed: bytes ÷ bandwidth)": perf.paper_ms(e, ctx.ceilings.bandwidth),
                               "predicted ms": e.predicted_ms}
        for key, label, _ in BUDGET_PARTS:
            row[f"{label} ms (predicted)"] = (e.predicted_terms_ms or {}).get(key)
        rows.append(row)
    return pd.DataFrame(rows)

