"""Figures for the on-demand panels (cache comparison, batching): plain functions of the job results."""

from __future__ import annotations

import itertools
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import palette as pal

MODE_STYLE = {"dynamic": (pal.BLUE, "solid", "cache on (dynamic: grows by copying)"),
              "static": (pal.GREEN, "dot", "cache on (static: preallocated)"),
              "none": (pal.VERMILLION, "dash", "cache off (recompute everything)")}


def compare_figure(result: dict[str, Any]) -> go.Figure:
    """Cumulative and per-step measured time for each cache mode, same prompt and token count."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("cumulative time (measured)", "time per step (measured)"),
                        horizontal_spacing=0.1)
    for mode, latencies in result.get("modes", {}).items():
        color, dash, label = MODE_STYLE.get(mode, (pal.GREY, "solid", mode))
        steps = list(range(len(latencies)))
        fig.add_scatter(x=steps, y=[round(v / 1000, 3) for v in itertools.accumulate(latencies)], mode="lines+markers",
                        name=label, line={"color": color, "dash": dash}, marker={"size": 5}, row=1, col=1,
                        legendgroup=mode, hovertemplate="after token %{x}: %{y:.2f} s<extra>" + mode + "</extra>")
        fig.add_scatter(x=steps, y=latencies, mode="lines+markers", showlegend=False, legendgroup=mode,
                        line={"color": color, "dash": dash}, marker={"size": 5}, row=1, col=2,
                        hovertemplate="token %{x}: %{y:.1f} ms<extra>" + mode + "</extra>")
    fig.update_layout(**pal.base_layout(f"Same prompt ({result.get('prompt_len', '?')} tokens), "
                                        f"{result.get('n_tokens', '?')} tokens, cache on vs off", height=380))
    fig.update_xaxes(title_text="token (0 = prefill)")
    fig.update_yaxes(title_text="seconds", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="ms", row=1, col=2, rangemode="tozero")
    return fig


def compare_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for mode, latencies in result.get("modes", {}).items():
        if not latencies:
            continue
        decode = latencies[1:] or [float("nan")]
        rows.append({"cache": mode, "tokens": len(latencies), "total s (measured)": round(sum(latencies) / 1000, 3),
                     "first step ms (measured)": round(latencies[0], 1),
                     "last step ms (measured)": round(latencies[-1], 1),
                     "mean decode step ms (measured)": round(sum(decode) / len(decode), 1)})
    return rows


def batching_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """Decode step time (bars) and throughput (line) against batch size, measured beside predicted."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    batches = [str(r["batch"]) for r in rows]
    fig.add_bar(x=batches, y=[r["decode step ms (measured, median)"] for r in rows], name="step time (measured)",
                marker={"color": pal.MEASURED}, hovertemplate="batch %{x}: %{y:.1f} ms per step<extra></extra>")
    if any(r.get("decode step ms (predicted)") for r in rows):
        fig.add_scatter(x=batches, y=[r.get("decode step ms (predicted)") for r in rows], mode="markers",
                        name="step time (predicted)", marker={"color": pal.PREDICTED, "size": 12, "symbol": "diamond-open",
                                                              "line": {"width": 2}})
    fig.add_scatter(x=batches, y=[r["tokens/s (measured)"] for r in rows], mode="lines+markers",
                    name="tokens/s (measured)", line={"color": pal.GREEN, "width": 3}, secondary_y=True,
                    hovertemplate="batch %{x}: %{y:.0f} tokens/s<extra></extra>")
    if any(r.get("tokens/s (predicted)") for r in rows):
        fig.add_scatter(x=batches, y=[r.get("tokens/s (predicted)") for r in rows], mode="lines",
                        name="tokens/s (predicted)", line={"color": pal.PREDICTED, "dash": "dash"}, secondary_y=True)
    fig.update_layout(**pal.base_layout("Decode at batch 1 to 16 on this machine: one step serves every row",
                                        height=380))
    fig.update_xaxes(title_text="batch size (sequences decoded together)", type="category")
    fig.update_yaxes(title_text="ms per decode step", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title_text="tokens/s, all rows", secondary_y=True, rangemode="tozero", showgrid=False)
    return fig
