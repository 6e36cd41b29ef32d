"""Figures of the what-if page: plain functions from core.whatif's answers to Plotly figures.

Every trace name says "predicted" or "counted", because nothing on that page is measured: the model
is never run, only priced (core.whatif). Testable without a browser. They return plain figure dicts,
not go.Figure: Plotly's validation took ~80 ms for the five, and the page rebuilds all of them on
every change (the budget is 50 ms, `python -m app.bench` reports whatif_recompute_ms).
"""

from __future__ import annotations

import math
from typing import Any

from app.shared import palette as pal
from core import whatif

GIGA = 1e9
PART_NAMES = {"attn_proj": "attention projections", "attn_scores": "attention scores",
              "mlp": "MLP", "lm_head": "LM head"}
TERM_NAMES = {"overhead": "fixed cost per forward", "memory": "streaming the weights",
              "kv": "reading and writing the KV cache", "compute": "arithmetic",
              "prefill_extra": "prefill extra", "allreduce": "all-reduce between devices"}


Figure = dict[str, Any]
LEFT, RIGHT = [0.0, 0.42], [0.58, 1.0]  # x domains of a two-panel figure


def _two_panels(layout: dict[str, Any], titles: tuple[str, str]) -> None:
    layout["xaxis"] = {"domain": LEFT, "anchor": "y"}
    layout["xaxis2"] = {"domain": RIGHT, "anchor": "y2"}
    layout["yaxis"] = {"anchor": "x"}
    layout["yaxis2"] = {"anchor": "x2"}
    layout["annotations"] = [{"text": t, "x": (d[0] + d[1]) / 2, "y": 1.0, "xref": "paper", "yref": "paper",
                              "xanchor": "center", "yanchor": "bottom", "showarrow": False, "font": {"size": 14}}
                             for t, d in zip(titles, (LEFT, RIGHT), strict=True)]


def roofline(ans: whatif.Answer) -> Figure:
    """The machine's datasheet roof, the roof after the efficiency assumptions, and where the
    prefill and a typical decode step land (predicted time)."""
    pre, dec = ans.prefill, ans.decode_step
    a = ans.assumptions
    peak = ans.peak_flops_datasheet / GIGA
    bandwidth = ans.bandwidth_datasheet / GIGA  # GB/s: GFLOP/s per FLOP/byte
    lo, hi = 0.05, max(1e4, pre.intensity * 3)
    data = []
    roofs = ((("datasheet roof", peak, bandwidth, "solid"),
              ("roof after the assumed efficiencies", peak * a["compute_efficiency"],
               bandwidth * a["bandwidth_efficiency"], "dash"))
             if not ans.host_measured else (("this server's measured roof (its calibration)", peak, bandwidth,
                                                    "solid"),))
    for label, p, bw, dash in roofs:
        ridge = p / bw
        data.append({"type": "scatter", "x": [lo, ridge, hi], "y": [bw * lo, p, p], "mode": "lines", "name": label,
                     "line": {"color": pal.GREY, "width": 3 if dash == "solid" else 2, "dash": dash},
                     "hoverinfo": "skip"})
    for point, name, colour, symbol in ((pre, "prefill (predicted)", pal.PREFILL, "diamond"),
                                        (dec, "a decode step (predicted)", pal.DECODE, "circle")):
        data.append({"type": "scatter", "x": [point.intensity], "y": [point.flops_per_s / GIGA],
                     "mode": "markers", "name": name, "marker": {"color": colour, "size": 14, "symbol": symbol},
                     "hovertemplate": "%{x:.3g} FLOP/byte · %{y:.3g} GFLOP/s<extra>" + name + "</extra>"})
    y_lo = min(bandwidth * lo, dec.flops_per_s / GIGA) / 2
    layout = pal.base_layout("Roofline: where each phase runs (predicted)", height=400)
    layout["xaxis"] = {"type": "log", "title": {"text": "arithmetic intensity (FLOPs per byte moved)"},
                       "range": [math.log10(lo), math.log10(hi)], **pal.decade_ticks(lo, hi)}
    layout["yaxis"] = {"type": "log", "title": {"text": "GFLOP/s"},
                       "range": [math.log10(y_lo), math.log10(peak * 2)], **pal.decade_ticks(y_lo, peak * 2)}
    return pal.fit_legend({"data": data, "layout": layout})


def batch_tradeoff(sweep: list[dict[str, Any]], chosen: int) -> Figure:
    """TPOT and total throughput against batch: the latency/throughput trade-off (predicted).
    Batches whose memory does not fit the device are drawn hollow."""
    layout = pal.base_layout("Batching: latency against throughput (predicted)", height=400)
    _two_panels(layout, ("Time per output token", "Tokens per second, all sequences"))
    xs = [r["batch"] for r in sweep]
    data = []
    for i, (key, scale, unit) in enumerate((("tpot_s", 1000.0, "ms"), ("tokens_per_s_total", 1.0, "tokens/s"))):
        n = "" if i == 0 else "2"
        data.append({"type": "scatter", "x": xs, "y": [None if r[key] is None else r[key] * scale for r in sweep],
                     "xaxis": "x" + n, "yaxis": "y" + n, "mode": "lines+markers", "showlegend": i == 0,
                     "name": "predicted (filled: fits in memory, hollow: does not)",
                     "line": {"color": pal.PREDICTED, "dash": "dash"},
                     "marker": {"size": 9, "color": pal.PREDICTED,
                                "symbol": ["circle" if r["fits"] else "circle-open" for r in sweep]},
                     "hovertemplate": "batch %{x}: %{y:.4g} " + unit + "<extra></extra>"})
        layout["yaxis" + n].update({"title": {"text": unit}, "rangemode": "tozero"})
        layout["xaxis" + n].update({"type": "log", "title": {"text": "batch (sequences decoded together)"},
                                    "tickvals": xs, "ticktext": [str(x) for x in xs]})
    layout["shapes"] = [{"type": "line", "x0": chosen, "x1": chosen, "xref": "x" + n, "y0": 0, "y1": 1,
                         "yref": f"y{n} domain", "line": {"color": pal.GREY, "dash": "dot"}} for n in ("", "2")]
    return pal.fit_legend({"data": data, "layout": layout})


def bytes_by_context(curve: dict[str, list[float]], crossover: float, batch: int) -> Figure:
    """A decode step's weight bytes and KV bytes against context (counted from the shapes)."""
    data = [{"type": "scatter", "x": curve["context"], "y": [w / GIGA for w in curve["weights"]], "mode": "lines",
             "name": "weights read per step (counted)", "line": {"color": pal.WEIGHTS, "width": 3}},
            {"type": "scatter", "x": curve["context"], "y": [k / GIGA for k in curve["kv"]], "mode": "lines",
             "name": f"KV cache read per step, batch {batch} (counted)", "line": {"color": pal.KV_READ, "width": 3}}]
    layout = pal.base_layout("Bytes one decode step reads, against context (counted)", height=380)
    layout["xaxis"] = {"title": {"text": "context (tokens in the cache)"}, "rangemode": "tozero"}
    layout["yaxis"] = {"title": {"text": "GB per step"}, "rangemode": "tozero"}
    if crossover <= curve["context"][-1]:
        layout["shapes"] = [{"type": "line", "x0": crossover, "x1": crossover, "xref": "x", "y0": 0, "y1": 1,
                             "yref": "paper", "line": {"color": pal.GREY, "dash": "dot"}}]
        layout["annotations"] = [{"text": f"KV overtakes weights at {crossover:,.0f} tokens", "x": crossover,
                                  "y": 1, "xref": "x", "yref": "paper", "xanchor": "right", "yanchor": "bottom",
                                  "showarrow": False}]
    return pal.fit_legend({"data": data, "layout": layout})


def experts_read(curve: dict[str, list[float]], n_experts: int, per_token: int, chosen: int) -> Figure:
    """A mixture of experts' decode step: the experts each layer must read against the batch, from
    the k one token runs to all of them (counted, under uniform routing)."""
    batches, read = curve["batch"], curve["experts_read"]
    at = read[batches.index(chosen)] if chosen in batches else None
    data = [{"type": "scatter", "x": batches, "y": read, "mode": "lines+markers", "name": "experts read per layer "
             "(counted, uniform routing)", "line": {"color": pal.DECODE, "width": 2},
             "hovertemplate": "batch %{x}: %{y:.2f} experts per layer<extra></extra>"}]
    for y, label in ((per_token, f"{per_token} routed per token"), (n_experts, f"all {n_experts} experts")):
        data.append({"type": "scatter", "x": [batches[0], batches[-1]], "y": [y, y], "mode": "lines",
                     "name": label + " (counted)", "line": {"color": pal.GREY, "dash": "dot", "width": 1.5},
                     "hoverinfo": "skip"})
    layout = pal.base_layout("Mixture of experts: experts one decode step reads per layer (counted)", height=360)
    layout["xaxis"] = {"title": {"text": "batch (sequences decoded together)"}, "type": "log"}
    layout["yaxis"] = {"title": {"text": "experts read per layer"}, "rangemode": "tozero"}
    if at is not None:
        layout["annotations"] = [{"x": math.log10(chosen), "y": at, "text": f"batch {chosen}: {at:.1f}",
                                  "showarrow": True, "arrowhead": 2, "ax": 30, "ay": 30}]
    return {"data": data, "layout": layout}


def time_split(ans: whatif.Answer) -> Figure:
    """Each phase's predicted time split into the predictor's terms, and its FLOPs by part."""
    layout = pal.base_layout("Where each phase's time and arithmetic go", height=430, barmode="stack")
    _two_panels(layout, ("Predicted time by term", "FLOPs by part (counted)"))
    phases = [("prefill", ans.prefill), ("one decode step", ans.decode_step)]
    names = [n for n, _ in phases]
    colours = {"overhead": pal.GREY, "memory": pal.WEIGHTS, "kv": pal.KV_READ, "compute": pal.GREEN,
               "prefill_extra": pal.YELLOW, "allreduce": pal.PURPLE}
    data = []
    for term, name in TERM_NAMES.items():
        ys = [100 * p.terms_s.get(term, 0.0) / p.time_s if p.time_s else 0 for _, p in phases]
        if any(ys):
            data.append({"type": "bar", "x": names, "y": ys, "name": name + " (predicted)",
                         "marker": {"color": colours[term]},
                         "hovertemplate": "%{x}: %{y:.1f}% of its time<extra>" + name + "</extra>"})
    # distinct from the term colours beside them: a part is not a term
    part_colours = {"attn_proj": pal.BLUE, "attn_scores": "#000000", "mlp": pal.ORANGE, "lm_head": pal.YELLOW}
    parts = ans.flops_by_part
    totals = [sum(parts["prefill"].values()), sum(parts["decode_step"].values())]
    for part, name in PART_NAMES.items():
        vals = [parts["prefill"][part], parts["decode_step"][part]]
        data.append({"type": "bar", "x": names, "xaxis": "x2", "yaxis": "y2",
                     "y": [100 * v / t if t else 0 for v, t in zip(vals, totals, strict=True)],
                     "name": name + " (counted)", "marker": {"color": part_colours[part]},
                     "hovertemplate": "%{x}: %{y:.1f}% of its FLOPs<extra>" + name + "</extra>"})
    for axis in ("yaxis", "yaxis2"):
        layout[axis].update({"title": {"text": "% of the phase"}, "range": [0, 100]})
    return pal.fit_legend({"data": data, "layout": layout})


def memory_stack(ans: whatif.Answer) -> Figure:
    """Weights, KV cache and activations against the device's memory (counted; activations estimated)."""
    m = ans.memory
    data = [{"type": "bar", "x": ["needed"], "y": [getattr(m, key) / GIGA], "name": name, "marker": {"color": colour},
             "hovertemplate": "%{y:.3g} GB<extra>" + name + "</extra>"}
            for key, name, colour in (("weights", "weights (counted)", pal.WEIGHTS),
                                      ("kv", "KV cache at the end (counted)", pal.KV_READ),
                                      ("activations", "activations at the prefill (estimated)", pal.GREEN))]
    layout = pal.base_layout("Memory against one device", height=380, barmode="stack")
    cap = m.capacity / GIGA
    layout["yaxis"] = {"title": {"text": "GB"}, "range": [0, max(m.total / GIGA, cap) * 1.15]}
    layout["shapes"] = [{"type": "line", "x0": 0, "x1": 1, "xref": "paper", "y0": cap, "y1": cap, "yref": "y",
                         "line": {"color": pal.GREY, "dash": "dash", "width": 2}}]
    layout["annotations"] = [{"text": f"one device: {cap:,.0f} GB", "x": 0, "y": cap, "xref": "paper", "yref": "y",
                              "xanchor": "left", "yanchor": "bottom", "showarrow": False}]
    return pal.fit_legend({"data": data, "layout": layout})


THIRDS = ([0.0, 0.27], [0.365, 0.635], [0.73, 1.0])


def host_measured(curves: dict[str, Any], points: list[Any], batch_rows: list[dict[str, Any]],
                  batching_label: str = "") -> Figure:
    """This server: the predictor's lines (core.whatif.host_curves) with the live page's measured
    runs (app.shared.host_points.RunPoint) and batching rows as labelled markers."""
    layout = pal.base_layout("This server: predicted lines, measured points", height=430)
    titles = ("Time to first token", "One decode step (batch 1)",
              f"One decode step against batch ({curves['batch_context']} cached)")
    layout["annotations"] = []
    for i, (dom, title) in enumerate(zip(THIRDS, titles, strict=True)):
        n = "" if i == 0 else str(i + 1)
        layout["xaxis" + n] = {"domain": dom, "anchor": "y" + n}
        layout["yaxis" + n] = {"anchor": "x" + n, "title": {"text": "ms"}, "rangemode": "tozero"}
        layout["annotations"].append({"text": title, "x": (dom[0] + dom[1]) / 2, "y": 1.0, "xref": "paper",
                                      "yref": "paper", "xanchor": "center", "yanchor": "bottom",
                                      "showarrow": False, "font": {"size": 13}})
    layout["xaxis"]["title"] = {"text": "prompt tokens"}
    layout["xaxis2"]["title"] = {"text": "tokens already in the cache"}
    layout["xaxis3"].update({"title": {"text": "sequences decoded together"}, "type": "log",
                             "tickvals": curves["batch"]})
    fit = "fitted on the live page's model" if curves.get("fitted") else "unfitted roofline coefficients"
    line = {"color": pal.PREDICTED, "dash": "dash"}
    data = [
        {"type": "scatter", "x": curves["prompt"], "y": [t * 1e3 for t in curves["ttft_s"]], "mode": "lines",
         "name": f"predicted ({fit})", "line": line, "hovertemplate": "%{x} tokens: %{y:.1f} ms<extra>predicted</extra>"},
        {"type": "scatter", "x": curves["context"], "y": [t * 1e3 for t in curves["decode_s"]], "mode": "lines",
         "xaxis": "x2", "yaxis": "y2", "showlegend": False, "name": "predicted", "line": line,
         "hovertemplate": "%{x} cached: %{y:.1f} ms<extra>predicted</extra>"},
        {"type": "scatter", "x": curves["batch"], "y": [t * 1e3 for t in curves["batch_decode_s"]],
         "mode": "lines", "xaxis": "x3", "yaxis": "y3", "showlegend": False, "name": "predicted", "line": line,
         "hovertemplate": "batch %{x}: %{y:.1f} ms<extra>predicted</extra>"},
    ]
    for source, name, symbol in (("bundled", "measured: a recording bundled with the app", "diamond-open"),
                                 ("server", "measured: a live run on this server", "circle")):
        mine = [p for p in points if p.source == source]
        if not mine:
            continue
        marker = {"color": pal.MEASURED, "size": 11, "symbol": symbol, "line": {"width": 2, "color": pal.MEASURED}}
        # A dozen live runs' names piled on one cluster are unreadable: only the newest run (the
        # store keeps them oldest first) and the few recordings are named; every point hovers its name.
        named = {id(p) for p in (mine if source == "bundled" else mine[-1:])}
        data.append({"type": "scatter", "x": [p.prompt_tokens for p in mine], "y": [p.ttft_ms for p in mine],
                     "mode": "markers+text", "name": name, "marker": marker,
                     "text": [p.short if id(p) in named else "" for p in mine],
                     "textposition": [("bottom right", "top left")[i % 2] for i in range(len(mine))],
                     "textfont": {"size": 11, "color": pal.MEASURED},
                     "customdata": [p.label for p in mine],
                     "hovertemplate": "%{customdata}<br>%{x} prompt tokens: %{y:.1f} ms<extra>measured</extra>"})
        steps = [p for p in mine if p.decode_step_ms is not None]
        data.append({"type": "scatter", "x": [p.decode_context for p in steps],
                     "y": [p.decode_step_ms for p in steps], "xaxis": "x2", "yaxis": "y2", "mode": "markers+text",
                     "showlegend": False, "name": name, "marker": marker,
                     "text": [p.short if id(p) in named else "" for p in steps],
                     "textposition": [("top right", "bottom right")[i % 2] for i in range(len(steps))],
                     "textfont": {"size": 11, "color": pal.MEASURED},
                     "customdata": [f"{p.label}: median of {p.decode_steps} steps" for p in steps],
                     "hovertemplate": "%{customdata}<br>%{x} cached: %{y:.1f} ms<extra>measured</extra>"})
    if batch_rows:
        data.append({"type": "scatter", "x": [r["batch"] for r in batch_rows],
                     "y": [r["decode step ms (measured, median)"] for r in batch_rows], "xaxis": "x3",
                     "yaxis": "y3", "mode": "markers",
                     "name": f"measured: {batching_label or 'the live page batching panel'}",
                     "marker": {"color": pal.MEASURED, "size": 11, "symbol": "square"},
                     "text": [batching_label] * len(batch_rows),
                     "hovertemplate": "%{text}<br>batch %{x}: %{y:.1f} ms<extra>measured</extra>"})
    return pal.fit_legend({"data": data, "layout": layout})
