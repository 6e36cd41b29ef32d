"""Figure builders: plain functions from a run's events (and its context) to Plotly figures.

Each live chart is a base figure plus one patch per event (app.views.live.patches), so the browser
can draw a run step by step with Plotly.react while the same code builds the whole figure for
tests, tables and replays; app.views.live.charts registers them. Nothing here touches Streamlit or
the model.
"""

from __future__ import annotations

import html
import math
import statistics
from typing import Any

import plotly.graph_objects as go

from app.shared import palette as pal
from app.shared.context import RunContext
from app.views.live import readings
from app.views.live.patches import Patch
from app.views.live.shown import fmt_bytes, gbs_text, sig3, signed_pct
from core import perf
from core.trace import Event

MB = 1e6


def esc(text: str) -> str:
    """Escape a token for Plotly's pseudo-HTML labels, with whitespace made visible."""
    return html.escape(text).replace("\n", "↵").replace("\t", "⇥") or "∅"


def position_tokens(events: list[Event], ctx: RunContext) -> list[str]:
    """The token held at each cache position: the prompt, then each generated token fed back."""
    return list(ctx.prompt_tokens) + [e.token_text for e in events[:-1]]


def _token_at(events: list[Event], ctx: RunContext, pos: int) -> str:
    if pos < ctx.prompt_len:
        return ctx.prompt_tokens[pos]
    i = pos - ctx.prompt_len
    return events[i].token_text if i < len(events) else ""


# --- KV cache grid --------------------------------------------------------------------------

def _mean_heads(per_head: list[list[float]], i: int) -> float:
    return round(sum(h[i] for h in per_head) / len(per_head), 3)


def kv_base(ctx: RunContext) -> dict[str, Any]:
    rows = ctx.n_layers
    cell = ctx.kv_bytes_per_cell
    hover = ("position %{x} · layer %{y}<br>token: %{customdata[0]}<br>written by: %{customdata[1]}"
             "<br>key norm (mean of " + str(ctx.n_kv_heads) + " KV heads): %{z:.2f}"
             f"<br>bytes in this cell: {cell:,} (K+V, {ctx.n_kv_heads} heads × {ctx.head_dim} × "
             f"{ctx.dtype_bytes} B{' × batch ' + str(ctx.batch) if ctx.batch > 1 else ''})<extra></extra>")
    # zsmooth "fast": one pixel per cell, scaled up crisp by the browser, instead of painting every
    # cell into a full-size image on each redraw (the grid is redrawn several times a second).
    trace = {"type": "heatmap", "x": [], "z": [[] for _ in range(rows)], "customdata": [[] for _ in range(rows)],
             "y": list(range(rows)), "colorscale": pal.HEATMAP_SCALE, "hovertemplate": hover, "zsmooth": "fast",
             "colorbar": {"title": {"text": "key length ‖k‖", "side": "right"}, "thickness": 12},
             "name": "key norms (measured)"}
    layout = pal.base_layout(_kv_title(0, 0, ctx), height=max(320, 60 + 11 * rows + 60),
                             margin={"l": 60, "r": 20, "t": 95, "b": 60},
                             meta={"notes_row": True})  # the live view keeps room for the notes
    layout["xaxis"] = {"title": {"text": "cache position (token)"},
                       "range": [-0.5, max(ctx.max_positions, 1) - 0.5], "showgrid": False, "zeroline": False}
    layout["yaxis"] = {"title": {"text": "layer"}, "autorange": "reversed", "showgrid": False,
                       "zeroline": False, "dtick": 5 if rows > 10 else 1}
    if ctx.cache == "none":
        layout["annotations"] = [_note("No cache in this run: nothing is stored, so every step recomputes "
                                       "keys and values for the whole sequence.", 0.5, 0.5)]
    return {"data": [trace], "layout": layout}


def _kv_title(columns: int, nbytes: int, ctx: RunContext) -> str:
    if ctx.cache == "none":
        return "KV cache: none (cache off)"
    return (f"Prefill fills the cache in one pass; decode adds one position per step"
            f"<br><sub>KV cache read from the model's tensors: {columns} positions × {ctx.n_layers} layers"
            f" · {fmt_bytes(nbytes)}</sub>")


def _note(text: str, x: float, y: float, **extra: Any) -> dict[str, Any]:
    note = {"text": text, "x": x, "y": y, "xref": "paper", "yref": "paper", "showarrow": False,
            "font": {"size": 12}}
    note.update(extra)
    return note


KEPT_WHO = "kept from the last turn (not recomputed)"


def kv_patch(events: list[Event], k: int, ctx: RunContext) -> Patch:
    e = events[k]
    if not e.kv_norms or ctx.cache == "none":
        return {}
    first = e.positions[0]
    keys = e.kv_norms["key"]
    cols = list(e.norm_positions)
    who = "prefill (one pass)" if e.phase == "prefill" else f"decode step {e.step}"
    z = [[_mean_heads(keys[layer], i) for i in range(len(cols))] for layer in range(len(keys))]
    custom = [[[esc(_token_at(events, ctx, p)), who if p >= first else KEPT_WHO] for p in cols] for _ in keys]
    patch: Patch = {"cols": {"0": {"x": cols, "z": z, "customdata": custom}},
                    "layout": {"title.text": _kv_title(e.kv_seq_len, e.kv_bytes, ctx)}}
    p, kept = ctx.prompt_len, ctx.kept
    notes, shapes = [], []
    if kept:  # a follow-up: the last turn's positions, kept, drawn apart from the ones it prefilled
        notes.append(_note(f"■ kept from the last turn: {kept} positions", 0, 1.04,
                           yanchor="bottom", xanchor="left", font={"size": 12, "color": pal.KEPT}))
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": -0.5, "x1": kept - 0.5, "y0": 1.0,
                       "y1": 1.03, "fillcolor": pal.KEPT, "line": {"width": 0}})
    notes.append(_note(f"■ prefill: {p - kept} {'new ' if kept else ''}positions in ONE parallel forward pass",
                       0, 1.04, yanchor="bottom", xanchor="left", font={"size": 12, "color": pal.PREFILL}))
    shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": kept - 0.5, "x1": p - 0.5, "y0": 1.0,
                   "y1": 1.03, "fillcolor": pal.PREFILL, "line": {"width": 0}})
    decoded = e.kv_seq_len - p
    if decoded > 0:
        notes.append(_note(f"■ decode: +1 column per step ({decoded} added)", 1, 1.04, yanchor="bottom",
                           xanchor="right", font={"size": 12, "color": pal.DECODE}))
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": p - 0.5, "x1": e.kv_seq_len - 0.5,
                       "y0": 1.0, "y1": 1.03, "fillcolor": pal.DECODE, "line": {"width": 0}})
    patch["layout"]["annotations"] = notes
    patch["layout"]["shapes"] = shapes
    return patch


# --- latency per token ----------------------------------------------------------------------

# The sign of a prediction error, as core.perf.prediction_error_pct defines it; the latency chart
# states it above the grey bars.


# The legend's name for the boxed forwards (trace 5); the latency text quotes their count.
ERROR_SIGN = "(predicted − measured) ÷ measured; below 0 = predicted too fast"
WAITED_NAME = "boxed: right after a page-redraw wait, not in its measured time"


def latency_base(ctx: RunContext) -> dict[str, Any]:
    data = [
        {"type": "bar", "x": [], "y": [], "name": "prefill = time to first token (measured)",
         "marker": {"color": pal.PREFILL}, "width": 0.8, "yaxis": "y",
         "hovertemplate": "prefill of %{customdata} tokens: %{y:.1f} ms measured<extra></extra>", "customdata": []},
        {"type": "scatter", "mode": "lines+markers", "x": [], "y": [], "name": "decode step (measured)",
         "marker": {"color": pal.MEASURED, "size": 6}, "line": {"color": pal.MEASURED, "width": 1.5},
         "hovertemplate": "step %{x}: %{y:.1f} ms measured<br>token: %{customdata}<extra></extra>",
         "customdata": []},
        {"type": "scatter", "mode": "lines+markers", "x": [], "y": [], "name": "predicted (latency model)",
         "marker": {"color": pal.PREDICTED, "size": 7, "symbol": "circle-open"},
         "line": {"color": pal.PREDICTED, "width": 1.5, "dash": "dash"},
         "hovertemplate": "step %{x}: %{y:.1f} ms predicted<extra></extra>"},
        {"type": "bar", "x": [], "y": [], "name": "prediction error, % of measured (computed)",
         "marker": {"color": pal.GREY}, "yaxis": "y2",
         "hovertemplate": "step %{x}: predicted %{y:+.0f}% vs measured (computed)<extra></extra>"},
        # The prefill's prediction as a wide tick across its bar, labelled: a small open circle on
        # a tall bar was lost beside it.
        {"type": "scatter", "mode": "markers+text", "x": [], "y": [], "text": [], "showlegend": False,
         "name": "prefill predicted (latency model)", "textposition": "middle right",
         "textfont": {"color": pal.PREDICTED, "size": 12}, "cliponaxis": False,
         "marker": {"symbol": "line-ew-open", "size": 30, "color": pal.PREDICTED,
                    "line": {"width": 3, "color": pal.PREDICTED}},
         "hovertemplate": "prefill: %{y:.1f} ms predicted<extra></extra>"},
        # A square (not a ring: the roofline's rings are predictions) round each forward that waited
        # for the page's redraw just before it started, so the count of waits in the text beside the
        # chart can be checked against the chart.
        {"type": "scatter", "mode": "markers", "x": [], "y": [], "customdata": [], "name": WAITED_NAME,
         "marker": {"symbol": "square-open", "size": 16, "color": pal.PURPLE, "line": {"width": 2.5}},
         "hovertemplate": "forward %{x} waited %{customdata:.0f} ms for the page's redraw before it started "
                          "(measured; not in its %{y:.1f} ms)<extra></extra>"},
    ]
    layout = pal.base_layout(_latency_title(None, [], started=False), height=420)
    layout["margin"] = {**layout["margin"], "t": 90}  # a second title line (the errors) and the note
    layout["annotations"] = [_note(f"Grey bars: {ERROR_SIGN}", 0, 1.02, yanchor="bottom", xanchor="left")]
    layout["xaxis"] = {"title": {"text": "forward pass (0 = prefill, then decode steps)"}, "anchor": "y2",
                       "range": [-0.7, max(ctx.max_new_tokens, 2) - 0.3]}
    # Two panels with a clear gap, short titles and few ticks on the small one: the ticks and titles
    # of "ms" and "error" must not run into each other.
    layout["yaxis"] = {"title": {"text": "ms", "standoff": 6}, "domain": [0.42, 1.0], "rangemode": "tozero",
                       "nticks": 5}
    layout["yaxis2"] = {"title": {"text": "error", "standoff": 6}, "domain": [0.0, 0.25], "zeroline": True,
                        "ticksuffix": "%", "nticks": 5}
    return {"data": data, "layout": layout}


def latency_patch(events: list[Event], k: int, ctx: RunContext) -> Patch:
    e = events[k]
    append: dict[str, Any] = {}
    if e.phase == "prefill":
        append["0"] = {"x": [k], "y": [e.latency_ms], "customdata": [e.n_new]}
    else:
        append["1"] = {"x": [k], "y": [e.latency_ms], "customdata": [esc(e.token_text)]}
    if e.predicted_ms is not None:
        append["2"] = {"x": [k], "y": [e.predicted_ms]}
        append["3"] = {"x": [k], "y": [perf.prediction_error_pct(e.predicted_ms, e.latency_ms)]}
        if e.phase == "prefill":
            append["4"] = {"x": [k], "y": [e.predicted_ms], "text": [f"  predicted {e.predicted_ms:.0f} ms"]}
    if e.waited_ms:
        append["5"] = {"x": [k], "y": [e.latency_ms], "customdata": [e.waited_ms]}
    prefill = perf.prediction_error_pct(events[0].predicted_ms, events[0].latency_ms)
    pcts = (perf.prediction_error_pct(ev.predicted_ms, ev.latency_ms) for ev in events[1:k + 1])
    errors = [x for x in pcts if x is not None]
    return {"append": append, "layout": {"title.text": _latency_title(prefill, errors, started=True)}}


def _latency_title(prefill: float | None, decode_errors: list[float], started: bool) -> str:
    """The title, and a second line with the prediction errors (signed, as the grey bars): the
    prefill's, and the decode steps' median with how many steps were predicted too fast. The line
    is there from the start, so the live chart's title block keeps its height."""
    if not started:
        errors = "shown from the first step"
    elif prefill is None:
        errors = "no prediction for this run"
    else:
        fast = sum(1 for x in decode_errors if x < 0)
        rest = (f"decode {signed_pct(statistics.median(decode_errors))} (the steps' median; {fast} of "
                f"{len(decode_errors)} predicted too fast)" if decode_errors else "decode from the first decode step")
        errors = f"prefill {signed_pct(prefill)}, {rest}"
    return ("The first token waits for the whole prefill; each later token, one short decode step"
            f"<br><sub>prediction error: {errors}</sub>")


# --- memory traffic per step ----------------------------------------------------------------

TRAFFIC_PARTS = (("weights", "weights read", pal.WEIGHTS), ("kv_read", "KV cache read", pal.KV_READ),
                 ("kv_write", "KV cache written", pal.KV_WRITE))
# Drawn after the cumulative line (trace 4, so trace 3 stays the line) and stacked on top: the
# layers' intermediate vectors are part of every byte count the page quotes (542 MB, 581 MB).
ACTIVATIONS = ("activations", "activations read and written", pal.GREY)


def traffic_base(ctx: RunContext) -> dict[str, Any]:
    data = [{"type": "bar", "x": [], "y": [], "name": label + " (computed)", "marker": {"color": color},
             "hovertemplate": "step %{x}: %{y:.2f} MB " + label + " (computed)<extra></extra>"}
            for _, label, color in TRAFFIC_PARTS]
    data.append({"type": "scatter", "mode": "lines", "x": [], "y": [], "yaxis": "y2",
                 "name": "cumulative bytes, right axis (computed)", "line": {"color": pal.PURPLE, "width": 2},
                 "hovertemplate": "after step %{x}: %{y:,.0f} MB moved in total (computed)<extra></extra>"})
    _, label, color = ACTIVATIONS
    data.append({"type": "bar", "x": [], "y": [], "name": label + " (computed)", "marker": {"color": color},
                 "legendrank": 1001, "hovertemplate": "step %{x}: %{y:.2f} MB " + label + " (computed)<extra></extra>"})
    weights = f": {ctx.weight_bytes / MB:,.0f} MB" if ctx.weight_bytes else ""
    layout = pal.base_layout(f"Every decode step moves the weights once to make one token{weights}",
                             height=360, barmode="stack",
                             meta={"notes_row": True})  # the KV note arrives with the first step
    layout["margin"] = {**layout["margin"], "r": 70, "t": 80}  # right: the cumulative axis; top: the KV note
    layout["xaxis"] = {"title": {"text": "forward pass (0 = prefill)"},
                       "range": [-0.7, max(ctx.max_new_tokens, 2) - 0.3]}
    layout["yaxis"] = {"title": {"text": "MB per step"}, "rangemode": "tozero"}
    # Its own round ticks (an overlaying axis would otherwise take the left axis' tick positions:
    # 8.02k, 16.04k), short ("20k") so they leave room for the axis title.
    layout["yaxis2"] = {"title": {"text": "MB total", "standoff": 10}, "overlaying": "y", "side": "right",
                        "showgrid": False, "rangemode": "tozero", "automargin": True, "tickmode": "auto",
                        "nticks": 5, "tickformat": "~s"}
    return {"data": data, "layout": layout}


def traffic_patch(events: list[Event], k: int, ctx: RunContext) -> Patch:
    e = events[k]
    if not e.cost:
        return {}
    b = e.cost["bytes"]
    append = {str(i): {"x": [k], "y": [round(b[key] / MB, 4)]} for i, (key, _, _) in enumerate(TRAFFIC_PARTS)}
    total = sum((ev.cost or {}).get("bytes", {}).get("total", 0) for ev in events[:k + 1])
    append["3"] = {"x": [k], "y": [round(total / MB, 3)]}
    append["4"] = {"x": [k], "y": [round(b[ACTIVATIONS[0]] / MB, 4)]}
    return {"append": append, "layout": {"annotations": [_kv_traffic_note(e, k)]}}


def _kv_traffic_note(e: Event, k: int) -> dict[str, Any]:
    """The cache's share of this step's bytes in words above the chart: at a short context its
    two series are slivers no reader can see, and the numbers say so."""
    b = e.cost["bytes"]
    kv = b["kv_read"] + b["kv_write"]
    share = 100.0 * kv / b["total"] if b["total"] else 0.0
    where = "prefill" if e.phase == "prefill" else f"step {k}"
    text = f"■ KV cache at {where}: {share:.1f}% of its bytes"  # its MB read and written: hover, table
    if share < 3:
        text += ", a thin sliver"
    return _note(text, 0, 1.02, yanchor="bottom", xanchor="left", font={"size": 12, "color": pal.KV_READ})


def crossover_figure(ctx: RunContext, batches: tuple[int, ...] = (1, 4, 16)) -> go.Figure:
    """Per decode step, weight bytes (flat) against KV bytes read (growing with context and batch)."""
    fig = go.Figure()
    if not ctx.weight_bytes:
        fig.update_layout(**pal.base_layout("Weights vs KV traffic: not priced for this model"))
        return fig
    x_max = max(2 * ctx.context_window, 16384)
    xs = [0, x_max]
    fig.add_scatter(x=xs, y=[ctx.weight_bytes / MB] * 2, mode="lines", name="weights read per step (computed)",
                    line={"color": pal.WEIGHTS, "width": 3})
    colors = (pal.KV_READ, pal.PURPLE, pal.GREEN, pal.ORANGE)
    for b, color in zip(batches, colors, strict=False):
        cross = perf.crossover_tokens(ctx.weight_bytes, ctx.kv_bytes_per_token, b)
        # The crossing in the legend, not beside its dot: the batch-4 and batch-16 dots sit a few
        # hundred pixels' worth of tokens apart, under the steep lines, and their labels collided.
        fig.add_scatter(x=xs, y=[0, x_max * ctx.kv_bytes_per_token * b / MB], mode="lines",
                        name=f"KV read per step, batch {b}: overtakes weights at {cross:,.0f} tokens (computed)",
                        line={"color": color, "dash": "dash"}, legendgroup=f"b{b}")
        fig.add_scatter(x=[cross], y=[ctx.weight_bytes / MB], mode="markers", showlegend=False,
                        legendgroup=f"b{b}", marker={"color": color, "size": 10},
                        hovertemplate=f"batch {b}: KV traffic overtakes weights at %{{x:,.0f}} tokens<extra></extra>")
    fig.add_vline(x=ctx.context_window, line={"color": pal.GREY, "dash": "dot"},
                  annotation_text=f"context window {ctx.context_window:,}", annotation_position="top")
    fig.update_layout(**pal.base_layout("The cache's reads overtake the weights' only at long contexts or big batches",
                                        height=360))
    fig.update_xaxes(title_text="context length (tokens in the cache)", range=[0, x_max])
    fig.update_yaxes(title_text="MB read per decode step", range=[0, 3 * ctx.weight_bytes / MB])
    return pal.fit_legend(fig)


# --- roofline -------------------------------------------------------------------------------

# The roofline's finding, read from the run so far (readings.past_ceiling: the decode steps' bandwidth
# against the calibrated slope, as printed).
ROOFLINE_TITLES = {
    "short": "Decode sits on the bandwidth slope, far from the compute roof: bandwidth sets its pace",
    "past": "Decode sits by the bandwidth slope, far from the compute roof (this run beat the calibrated slope)",
    "under": "Decode sits below the bandwidth slope, far from the compute roof: memory traffic and fixed costs set "
             "its pace, not arithmetic",
}


def roofline_base(ctx: RunContext) -> dict[str, Any]:
    c = ctx.ceilings
    roof: dict[str, Any] = {"type": "scatter", "mode": "lines", "x": [], "y": [], "name": "this machine's roof (calibrated)",
                            "line": {"color": pal.GREY, "width": 3}, "hoverinfo": "skip"}
    notes = []
    if c.bandwidth and c.peak_flops:
        ridge = c.peak_flops / c.bandwidth
        lo, hi = 0.05, 5000.0
        roof["x"] = [lo, ridge, hi]
        roof["y"] = [c.bandwidth * lo / GIGA, c.peak_flops / GIGA, c.peak_flops / GIGA]
        notes = [
            {"text": f"compute roof {sig3(c.peak_flops / GIGA)} GFLOP/s", "x": math.log10(hi),
             "y": math.log10(c.peak_flops / GIGA), "xanchor": "right", "yanchor": "bottom", "showarrow": False,
             "font": {"size": 12}},
            {"text": f"bandwidth slope {gbs_text(c.bandwidth)} GB/s", "x": math.log10(lo * 4),
             "y": math.log10(c.bandwidth * lo * 4 / GIGA), "xanchor": "left", "yanchor": "bottom",
             "showarrow": False, "textangle": -28, "font": {"size": 12}},
        ]
    point = "intensity %{x:.2f} FLOP/B · %{y:.3g} GFLOP/s<br>%{customdata}<extra></extra>"
    data = [
        roof,
        {"type": "scatter", "mode": "markers", "x": [], "y": [], "name": "prefill (measured time)",
         "marker": {"color": pal.PREFILL, "size": 14, "symbol": "diamond"}, "hovertemplate": point, "customdata": []},
        {"type": "scatter", "mode": "markers", "x": [], "y": [], "name": "decode steps (measured time)",
         "marker": {"color": pal.DECODE, "size": 7, "opacity": 0.7}, "hovertemplate": point, "customdata": []},
        # A wide ring, drawn over the measured points: where prediction and measurement agree the ring
        # circles the dot (or diamond) instead of hiding under it.
        {"type": "scatter", "mode": "markers", "x": [], "y": [], "name": "same forwards, predicted time (rings)",
         "marker": {"color": pal.PREDICTED, "size": 19, "symbol": "circle-open", "line": {"width": 2}},
         "hovertemplate": point, "customdata": []},
    ]
    title = ROOFLINE_TITLES["short"]
    if not c.bandwidth:
        title += " (machine not calibrated: no roof)"
    # the title changes with the run's reading (roofline_patch): the chart keeps room for the longest
    layout = pal.base_layout(title, height=400, annotations=notes,
                             meta={"titles": list(ROOFLINE_TITLES.values()) if c.bandwidth else [title]})
    y_top = math.log10((c.peak_flops or 1e11) * 3 / GIGA)
    layout["xaxis"] = {"type": "log", "title": {"text": "arithmetic intensity (FLOPs per byte moved)"},
                       "range": [math.log10(0.05), math.log10(5000)], **pal.decade_ticks(0.1, 1000)}
    layout["yaxis"] = {"type": "log", "title": {"text": "GFLOP/s achieved"},
                       "range": [-1, y_top], **pal.decade_ticks(0.1, 10 ** math.floor(y_top))}
    return {"data": data, "layout": layout}


GIGA = 1e9  # the roofline's y axis is in GFLOP/s, the unit the text quotes


def _sig(value: float, digits: int = 5) -> float:
    """`value` to `digits` significant figures: the roofline's axes are logarithmic, so a fixed number
    of decimals would flatten a slow machine's (or a tiny model's) 0.006 GFLOP/s to 0.006."""
    return float(f"{value:.{digits}g}")


def roofline_patch(events: list[Event], k: int, ctx: RunContext) -> Patch:
    e = events[k]
    if not e.cost or e.latency_ms <= 0:
        return {}
    flops, nbytes = e.cost["flops"]["total"], e.cost["bytes"]["total"]
    x = _sig(flops / nbytes)
    label = "prefill" if e.phase == "prefill" else f"decode step {k}"
    append = {"1" if e.phase == "prefill" else "2": {"x": [x], "y": [_sig(flops / (e.latency_ms / 1e3) / GIGA)],
                                                      "customdata": [f"{label}, measured {e.latency_ms:.1f} ms"]}}
    if e.predicted_ms:
        append["3"] = {"x": [x], "y": [_sig(flops / (e.predicted_ms / 1e3) / GIGA)],
                       "customdata": [f"{label}, predicted {e.predicted_ms:.1f} ms"]}
    patch: Patch = {"append": append}
    achieved = perf.achieved_bandwidth(events[:k + 1]) if e.phase == "decode" else None
    if achieved and ctx.ceilings.bandwidth:
        patch["layout"] = {"title.text": ROOFLINE_TITLES[readings.roofline_side(achieved, ctx.ceilings.bandwidth)]}
    return patch


# --- where a decode step's time goes ----------------------------------------------------------

# The predictor's terms (core.predictor.TERMS) as the reader sees them, bottom of the stack first.
BUDGET_PARTS = (("overhead", "fixed cost per forward and per layer", pal.GREY),
                ("memory", "streaming the weights and activations", pal.WEIGHTS),
                ("kv", "reading and writing the KV cache", pal.KV_READ),
                ("compute", "arithmetic", pal.GREEN))


# The step-budget chart's finding, read from the run so far (readings.beats_paper).
_BUDGET_SUB = "<br><sub>bars: the prediction's parts; diamonds: measured</sub>"
BUDGET_TITLES = {
    "slower": "A decode step takes longer than its bytes ÷ bandwidth (dashed): the bars show what the latency model adds"
              + _BUDGET_SUB,
    "faster": "These decode steps beat bytes ÷ the calibrated bandwidth: that benchmark understates this "
              "machine" + _BUDGET_SUB,
}


def budget_base(ctx: RunContext) -> dict[str, Any]:
    data: list[dict[str, Any]] = [
        {"type": "bar", "x": [], "y": [], "name": label + " (predicted)", "marker": {"color": color},
         "hovertemplate": "step %{x}: %{y:.1f} ms " + label + " (predicted)<extra></extra>"}
        for _, label, color in BUDGET_PARTS]
    data.append({"type": "scatter", "mode": "markers", "x": [], "y": [], "name": "decode step (measured)",
                 "marker": {"color": pal.MEASURED, "size": 7, "symbol": "diamond"},
                 "hovertemplate": "step %{x}: %{y:.1f} ms measured<extra></extra>"})
    data.append({"type": "scatter", "mode": "lines", "x": [], "y": [], "name": "on paper: bytes ÷ bandwidth (computed)",
                 "line": {"color": pal.PURPLE, "width": 3, "dash": "dash"},
                 "hovertemplate": "step %{x}: %{y:.1f} ms if the step only moved its bytes at the "
                                  "calibrated bandwidth<extra></extra>"})
    layout = pal.base_layout(BUDGET_TITLES["slower"], height=380, barmode="stack", bargap=0.15,
                             meta={"notes_row": True, "titles": list(BUDGET_TITLES.values())})
    layout["margin"] = {**layout["margin"], "t": 95}  # the two-line title, then the KV note
    layout["xaxis"] = {"title": {"text": "decode step"}, "range": [0.3, max(ctx.max_new_tokens, 2) - 0.3]}
    layout["yaxis"] = {"title": {"text": "ms per step"}, "rangemode": "tozero", "nticks": 8}
    return {"data": data, "layout": layout}


def budget_patch(events: list[Event], k: int, ctx: RunContext) -> Patch:
    e = events[k]
    if e.phase != "decode":
        return {}
    append: dict[str, Any] = {"4": {"x": [k], "y": [round(e.latency_ms, 3)]}}
    if e.predicted_terms_ms:
        for i, (key, _, _) in enumerate(BUDGET_PARTS):
            append[str(i)] = {"x": [k], "y": [round(e.predicted_terms_ms.get(key, 0.0), 3)]}
    paper = perf.paper_ms(e, ctx.ceilings.bandwidth)
    if paper is not None:
        append["5"] = {"x": [k], "y": [round(paper, 3)]}
    patch: Patch = {"append": append}
    terms = e.predicted_terms_ms
    if terms and e.predicted_ms:
        kv = terms.get("kv", 0.0)
        # one line at every step count: a note that wraps mid-run would move the plot under it. It
        # names the KV part alone: the step's whole prediction is printed once, in the section's
        # answer (the median step's), and a second total here read as a second value for it.
        text = f"■ latest step ({k}): the KV cache's part, {kv:.1f} ms predicted"
        patch["layout"] = {"annotations": [_note(text, 0, 1.02, yanchor="bottom", xanchor="left",
                                                 font={"size": 12, "color": pal.KV_READ})]}
    finding = "faster" if readings.beats_paper(events[:k + 1], ctx) else "slower"
    patch.setdefault("layout", {})["title.text"] = BUDGET_TITLES[finding]
    return patch


def layer_detail_figure(events: list[Event], ctx: RunContext, layer: int, which: str = "key") -> go.Figure:
    """One layer's KV heads as rows (norm per position), labelled with the query heads that share each."""
    layer = max(0, min(layer, ctx.n_layers - 1))
    rows: list[list[float]] = [[] for _ in range(ctx.n_kv_heads)]
    xs: list[int] = []
    for e in events:
        if not e.kv_norms:
            continue
        per_head = e.kv_norms[which][layer]
        xs.extend(e.norm_positions)
        for h in range(ctx.n_kv_heads):
            rows[h].extend(per_head[h])
    g = ctx.group_size
    labels = [f"KV head {h} ← Q {', '.join(str(q) for q in range(h * g, h * g + g))}" for h in range(ctx.n_kv_heads)]
    tokens = position_tokens(events, ctx)
    custom = [[esc(tokens[p]) if p < len(tokens) else "" for p in xs] for _ in range(ctx.n_kv_heads)]
    bytes_per = ctx.head_dim * ctx.dtype_bytes
    fig = go.Figure(go.Heatmap(
        x=xs, y=labels, z=rows, customdata=custom, colorscale=pal.HEATMAP_SCALE, xgap=1, ygap=2,
        colorbar={"title": {"text": f"‖{which[0]}‖"}, "thickness": 12},
        hovertemplate=(f"layer {layer} · %{{y}}<br>position %{{x}} · token %{{customdata}}<br>{which} norm "
                       f"%{{z:.2f}}<br>{bytes_per} B per {which} vector ({ctx.head_dim} × {ctx.dtype_bytes} B)"
                       "<extra></extra>")))
    fig.update_layout(**pal.base_layout(
        f"Layer {layer}: {ctx.n_kv_heads} KV heads, each shared by {g} of the {ctx.n_heads} query heads "
        f"({which} norms, measured)", height=80 + 60 * ctx.n_kv_heads + 60))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_layout(margin={"l": 150})  # room for the "KV head h ← Q …" row labels
    fig.update_xaxes(title_text="cache position")
    return fig

