"""Figures of the what-if page: plain functions from core.whatif's answers to Plotly figures.

Every trace name says "predicted" or "counted", because nothing on that page is measured: the model
is never run, only priced (core.whatif). Testable without a browser.
"""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.components import palette as pal

GIGA = 1e9
PART_NAMES = {"attn_proj": "attention projections", "attn_scores": "attention scores",
              "mlp": "MLP", "lm_head": "LM head"}
TERM_NAMES = {"overhead": "fixed cost per forward", "memory": "streaming the weights",
              "kv": "reading and writing the KV cache", "compute": "arithmetic",
              "prefill_extra": "prefill extra"}


def _decades(lo: float, hi: float) -> dict[str, Any]:
    """Labels at powers of ten only, written out (Plotly's own would print 1e9 as "1B")."""
    vals = [10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    return {"tickvals": vals, "ticktext": [f"{v:,.10g}" for v in vals]}


def roofline(ans: dict[str, Any]) -> go.Figure:
    """The machine's datasheet roof, the roof after the efficiency assumptions, and where the
    prefill and a typical decode step land (predicted time)."""
    pre, dec = ans["prefill"], ans["decode_step"]
    a = ans["assumptions"]
    peak = ans["peak_flops_datasheet"] / GIGA
    bandwidth = ans["bandwidth_datasheet"] / GIGA  # GB/s: GFLOP/s per FLOP/byte
    lo, hi = 0.05, max(1e4, pre["intensity"] * 3)
    fig = go.Figure()
    for label, p, bw, dash in (("datasheet roof", peak, bandwidth, "solid"),
                               ("roof after the assumed efficiencies", peak * a["compute_efficiency"],
                                bandwidth * a["bandwidth_efficiency"], "dash")):
        ridge = p / bw
        fig.add_scatter(x=[lo, ridge, hi], y=[bw * lo, p, p], mode="lines", name=label,
                        line={"color": pal.GREY, "width": 3 if dash == "solid" else 2, "dash": dash},
                        hoverinfo="skip")
    for point, name, colour, symbol in ((pre, "prefill (predicted)", pal.PREFILL, "diamond"),
                                        (dec, "a decode step (predicted)", pal.DECODE, "circle")):
        fig.add_scatter(x=[point["intensity"]], y=[point["flops_per_s"] / GIGA], mode="markers", name=name,
                        marker={"color": colour, "size": 14, "symbol": symbol},
                        hovertemplate="%{x:.3g} FLOP/byte · %{y:.3g} GFLOP/s<extra>" + name + "</extra>")
    y_lo = min(bandwidth * lo, dec["flops_per_s"] / GIGA) / 2
    fig.update_layout(**pal.base_layout("Roofline: where each phase runs (predicted)", height=400))
    fig.update_xaxes(type="log", title_text="arithmetic intensity (FLOPs per byte moved)",
                     range=[math.log10(lo), math.log10(hi)], **_decades(lo, hi))
    fig.update_yaxes(type="log", title_text="GFLOP/s", range=[math.log10(y_lo), math.log10(peak * 2)],
                     **_decades(y_lo, peak * 2))
    return pal.fit_legend(fig)


def batch_tradeoff(sweep: list[dict[str, Any]], chosen: int) -> go.Figure:
    """TPOT and total throughput against batch: the latency/throughput trade-off (predicted).
    Batches whose memory does not fit the device are drawn hollow."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Time per output token", "Tokens per second, all sequences"),
                        horizontal_spacing=0.14)
    xs = [r["batch"] for r in sweep]
    for col, key, scale, unit in ((1, "tpot_s", 1000.0, "ms"), (2, "tokens_per_s_total", 1.0, "tokens/s")):
        ys = [None if r[key] is None else r[key] * scale for r in sweep]
        fig.add_scatter(x=xs, y=ys, mode="lines+markers", row=1, col=col, showlegend=col == 1,
                        name="predicted (filled: fits in memory, hollow: does not)",
                        line={"color": pal.PREDICTED, "dash": "dash"},
                        marker={"size": 9, "color": pal.PREDICTED,
                                "symbol": ["circle" if r["fits"] else "circle-open" for r in sweep]},
                        hovertemplate="batch %{x}: %{y:.4g} " + unit + "<extra></extra>")
        fig.update_yaxes(title_text=unit, rangemode="tozero", row=1, col=col)
        fig.update_xaxes(type="log", title_text="batch (sequences decoded together)", tickvals=xs,
                         ticktext=[str(x) for x in xs], row=1, col=col)
        fig.add_vline(x=chosen, line={"color": pal.GREY, "dash": "dot"}, row=1, col=col)
    fig.update_layout(**pal.base_layout("Batching: latency against throughput (predicted)", height=400))
    return pal.fit_legend(fig)


def bytes_by_context(curve: dict[str, list[float]], crossover: float, batch: int) -> go.Figure:
    """A decode step's weight bytes and KV bytes against context (counted from the shapes)."""
    fig = go.Figure()
    gb = [w / GIGA for w in curve["weights"]]
    fig.add_scatter(x=curve["context"], y=gb, mode="lines", name="weights read per step (counted)",
                    line={"color": pal.WEIGHTS, "width": 3})
    fig.add_scatter(x=curve["context"], y=[k / GIGA for k in curve["kv"]], mode="lines",
                    name=f"KV cache read per step, batch {batch} (counted)", line={"color": pal.KV_READ, "width": 3})
    if crossover <= curve["context"][-1]:
        fig.add_vline(x=crossover, line={"color": pal.GREY, "dash": "dot"},
                      annotation_text=f"KV overtakes weights at {crossover:,.0f} tokens", annotation_position="top left")
    fig.update_layout(**pal.base_layout("Bytes one decode step reads, against context (counted)", height=380))
    fig.update_xaxes(title_text="context (tokens in the cache)", rangemode="tozero")
    fig.update_yaxes(title_text="GB per step", rangemode="tozero")
    return pal.fit_legend(fig)


def time_split(ans: dict[str, Any]) -> go.Figure:
    """Each phase's predicted time split into the predictor's terms, and its FLOPs by part."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Predicted time by term", "FLOPs by part (counted)"),
                        horizontal_spacing=0.16)
    phases = [("prefill", ans["prefill"]), ("one decode step", ans["decode_step"])]
    colours = {"overhead": pal.GREY, "memory": pal.WEIGHTS, "kv": pal.KV_READ, "compute": pal.GREEN,
               "prefill_extra": pal.YELLOW}
    for term, name in TERM_NAMES.items():
        ys = [100 * p["terms_s"].get(term, 0.0) / p["time_s"] if p["time_s"] else 0 for _, p in phases]
        if not any(ys):
            continue
        fig.add_bar(x=[n for n, _ in phases], y=ys, name=name + " (predicted)", marker_color=colours[term],
                    row=1, col=1, hovertemplate="%{x}: %{y:.1f}% of its time<extra>" + name + "</extra>")
    # distinct from the term colours beside them: a part is not a term
    part_colours = {"attn_proj": pal.BLUE, "attn_scores": pal.PURPLE, "mlp": pal.ORANGE, "lm_head": pal.YELLOW}
    parts = ans["flops_by_part"]
    for part, name in PART_NAMES.items():
        vals = [parts["prefill"][part], parts["decode_step"][part]]
        totals = [sum(parts["prefill"].values()), sum(parts["decode_step"].values())]
        fig.add_bar(x=[n for n, _ in phases], y=[100 * v / t if t else 0 for v, t in zip(vals, totals, strict=True)],
                    name=name + " (counted)", marker_color=part_colours[part], row=1, col=2,
                    hovertemplate="%{x}: %{y:.1f}% of its FLOPs<extra>" + name + "</extra>")
    fig.update_layout(**pal.base_layout("Where each phase's time and arithmetic go", height=430, barmode="stack"))
    fig.update_yaxes(title_text="% of the phase", range=[0, 100])
    return pal.fit_legend(fig)


def memory_stack(ans: dict[str, Any]) -> go.Figure:
    """Weights, KV cache and activations against the device's memory (counted; activations estimated)."""
    m = ans["memory"]
    fig = go.Figure()
    for key, name, colour in (("weights", "weights (counted)", pal.WEIGHTS), ("kv", "KV cache at the end (counted)",
                                                                            pal.KV_READ),
                              ("activations", "activations at the prefill (estimated)", pal.GREEN)):
        fig.add_bar(x=["needed"], y=[m[key] / GIGA], name=name, marker_color=colour,
                    hovertemplate="%{y:.3g} GB<extra>" + name + "</extra>")
    fig.add_hline(y=m["capacity"] / GIGA, line={"color": pal.GREY, "dash": "dash", "width": 2},
                  annotation_text=f"one device: {m['capacity'] / GIGA:,.0f} GB", annotation_position="top left")
    fig.update_layout(**pal.base_layout("Memory against one device", height=380, barmode="stack"))
    fig.update_yaxes(title_text="GB", rangemode="tozero", range=[0, max(m["total"], m["capacity"]) / GIGA * 1.15])
    return pal.fit_legend(fig)
