"""Figures of the engine lab: plain functions from an engine run's rows (app.views.engines.numbers)
to Plotly figure dicts, the same drawing for a measured run and for the simulator's account of it.

Every title, axis and trace name says whether it is measured (by this client, or by the engine's
own metrics) or simulated. Testable without a browser.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from app.shared import palette as pal
from app.views.engines.numbers import Row, fmt_s, long_window, stall_gaps
from core.engines.record import EngineRun

Figure = dict[str, Any]
LONG_COLOUR = pal.PURPLE
STALL_COLOUR = pal.VERMILLION
ROW_PX = 34

# The engine's metrics the lab draws, under their vLLM and llama-server names.
METRICS = {
    "running": ("vllm:num_requests_running", "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "llamacpp:requests_deferred"),
    "kv": ("vllm:kv_cache_usage_perc", "llamacpp:kv_cache_usage_ratio"),  # both a fraction of 1
    "prompt": ("vllm:prompt_tokens_total", "llamacpp:prompt_tokens_total"),
}


def x_extent(*row_sets: list[Row], now_s: float | None = None) -> float:
    """A shared right edge for charts that must line up: the last token anywhere (or now), plus a margin."""
    last = max([t for rs in row_sets for r in rs for t in r.token_s[-1:]] + [now_s or 0.0, 0.5])
    return last * 1.04 + 0.05


def token_ticks(rs: list[Row], kind: str, title: str, x_max: float | None = None,
                now_s: float | None = None) -> Figure:
    """One row per request, one tick per output token at its arrival (seconds since the run started):
    an even comb is a stream decoding steadily, a gap is a stall. The long prompt's time in the
    engine (sent to first token) is shaded across every row; each short stream's stall is drawn as
    a bar between the two tokens around it. `kind` ("measured" / "simulated") names every trace."""
    n = len(rs)
    x_max = x_max or x_extent(rs, now_s=now_s)
    data: list[dict[str, Any]] = []
    window = long_window(rs)
    if window is not None:
        sent, first = window
        last = max([t for r in rs for t in r.token_s[-1:]] + [sent])  # a failed long prompt: the run's end
        end = first if first is not None else (now_s if now_s is not None else last)
        data.append({"type": "scatter", "mode": "lines", "x": [sent, end, end, sent, sent],
                     "y": [-0.5, -0.5, n - 0.5, n - 0.5, -0.5], "fill": "toself", "fillcolor": "rgba(204,121,167,0.16)",
                     "line": {"width": 0}, "hoverinfo": "skip",
                     "name": f"long prompt in the engine ({kind})"})
    gaps = stall_gaps(rs)
    if gaps:
        xs: list[float | None] = []
        ys: list[float | None] = []
        for r_index, r in enumerate(rs):
            if r.id in gaps:
                a, b = gaps[r.id]
                xs += [a, b, None]
                ys += [r_index, r_index, None]
        data.append({"type": "scatter", "mode": "lines", "x": xs, "y": ys, "connectgaps": False,
                     "line": {"color": STALL_COLOUR, "width": 9}, "opacity": 0.55,
                     "name": f"stall: longest gap ({kind})", "hoverinfo": "skip"})
    for r_index, r in enumerate(rs):
        colour = LONG_COLOUR if r.role == "long" else pal.DECODE
        data.append({"type": "scatter", "mode": "markers", "x": list(r.token_s), "y": [r_index] * len(r.token_s),
                     "name": f"an output token ({kind})", "legendgroup": "tokens", "showlegend": r_index == 0,
                     "meta": r.name, "marker": {"symbol": "line-ns-open", "size": 14, "color": colour,
                                                "line": {"width": 1.6, "color": colour}},
                     "hovertemplate": f"{r.name}: a token at %{{x:.3f}} s ({kind})<extra></extra>"})
    data.append({"type": "scatter", "mode": "markers", "x": [r.sent_s for r in rs], "y": list(range(n)),
                 "name": "request sent", "marker": {"symbol": "circle-open", "size": 8, "color": pal.GREY},
                 "hovertemplate": "sent at %{x:.3f} s (measured)<extra></extra>"})
    shapes, notes = [], []
    if gaps:
        stall = median(b - a for a, b in gaps.values())
        first = min(gaps.values())
        notes.append({"x": (first[0] + first[1]) / 2, "y": -0.5, "xref": "x", "yref": "y", "yanchor": "bottom",
                      "showarrow": False, "font": {"color": STALL_COLOUR, "size": 13},
                      "text": f"stall {fmt_s(stall)} (median, {kind})"})
    if now_s is not None:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": now_s, "x1": now_s, "y0": 0, "y1": 1,
                       "line": {"color": pal.GREY, "dash": "dot", "width": 1}})
    layout = pal.base_layout(title, height=130 + ROW_PX * max(n, 1), showlegend=False,
                             xaxis={"range": [0, x_max], "title": {"text": f"seconds since the run started ({kind})"},
                                    "zeroline": False},
                             yaxis={"tickvals": list(range(n)), "ticktext": [r.name for r in rs],
                                    "range": [n - 0.5, -0.5], "automargin": True, "zeroline": False,
                                    "showgrid": False},
                             shapes=shapes, annotations=notes)
    # no legend: TICKS_KEY (under the chart) names the marks; every trace keeps its name for hover
    layout["margin"] = {**layout["margin"], "l": 20, "t": 62, "b": 55}
    return {"data": data, "layout": layout}


TICKS_KEY = ("Each tick is one output token arriving, one row per request; a circle is when the request was sent. "
             "The pink band is the long prompt's time in the engine, from its sending to its first token; the orange "
             "bar in each stream's row is its stall, the longest gap between two of its tokens across that band.")


def _series(run: EngineRun, names: tuple[str, ...]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for m in run.metrics:
        value = next((m["values"][k] for k in names if k in m["values"]), None)
        if value is not None:
            xs.append(m["t_s"])
            ys.append(value)
    return xs, ys


def engine_metrics(run: EngineRun, title: str, x_max: float | None = None) -> Figure:
    """The engine's own view over the run, as its /metrics reported it every half second: requests
    running and waiting, the share of its KV cache in use, and the prompt tokens it has prefilled
    since the run started (a step of 1,536 is the long prompt done)."""
    x_max = x_max or max([m["t_s"] for m in run.metrics] + [1.0])
    series = {key: _series(run, names) for key, names in METRICS.items()}
    data: list[dict[str, Any]] = []
    for key, label, colour, axis in (("running", "requests running", pal.BLUE, "y"),
                                     ("waiting", "requests waiting", pal.ORANGE, "y"),
                                     ("kv", "KV cache in use (%)", pal.GREEN, "y2"),
                                     ("prompt", "prompt tokens prefilled since the start", pal.PURPLE, "y3")):
        xs, ys = series[key]
        if key == "kv":
            ys = [100 * v for v in ys]
        if key == "prompt" and ys:
            ys = [v - ys[0] for v in ys]
        data.append({"type": "scatter", "mode": "lines+markers", "x": xs, "y": ys, "yaxis": axis,
                     "name": f"{label} (engine's metrics)", "line": {"color": colour, "width": 2, "shape": "hv"},
                     "marker": {"size": 5, "color": colour},
                     "hovertemplate": f"{label}: %{{y:,.3g}} at %{{x:.2f}} s (engine's metrics)<extra></extra>"})
    layout = pal.base_layout(title, height=430,
                             xaxis={"range": [0, x_max], "anchor": "y3",
                                    "title": {"text": "seconds since the run started (measured)"}},
                             yaxis={"domain": [0.7, 1.0], "title": {"text": "requests"}, "rangemode": "tozero"},
                             yaxis2={"domain": [0.36, 0.64], "title": {"text": "KV %"}, "rangemode": "tozero",
                                     "anchor": "x"},
                             yaxis3={"domain": [0.0, 0.3], "title": {"text": "prompt tokens"}, "rangemode": "tozero",
                                     "anchor": "x"})
    layout["margin"] = {**layout["margin"], "b": 110}
    layout["legend"] = {**layout["legend"], "y": -0.25}
    if not any(series[k][0] for k in series):
        layout["annotations"] = [{"text": "this engine reported none of these metrics (yet)", "showarrow": False,
                                  "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]
    return pal.fit_legend({"data": data, "layout": layout})
