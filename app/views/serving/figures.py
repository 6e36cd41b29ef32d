"""Figures of the serving simulator page: plain functions from core.sim results to Plotly figure dicts.

Every number in them is simulated (core.sim), and every title says so. Testable without a browser.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from app.shared import palette as pal
from core.sim.simulate import SimResult

Figure = dict[str, Any]
POLICY_COLOURS = [pal.BLUE, pal.ORANGE]
MAX_LINE_POINTS = 1500
MAX_TICK_REQUESTS = 60


def long_request(result: SimResult) -> int | None:
    """The first request whose prompt is far longer than the typical one (a document among chats):
    at least 2,048 tokens and eight times the median."""
    prompts = [r.prompt_tokens for r in result.requests]
    if not prompts:
        return None
    median = float(np.median(prompts))
    for r in result.requests:
        if r.prompt_tokens >= max(2048, 8 * median):
            return r.id
    return None


def default_window(result: SimResult, length_s: float) -> float:
    """Where the timeline opens: just before the first long prompt arrives (where the policies differ
    most), else once the server is busy (a tenth of the way in)."""
    rid = long_request(result)
    span = max((t[-1] for t in result.token_s if t), default=0.0)
    start = result.requests[rid].arrival_s - 0.1 * length_s if rid is not None else 0.1 * span
    return max(0.0, min(start, max(0.0, span - length_s)))


def servers_to_show(result: SimResult, rid: int | None) -> list[int]:
    """Colocated: the server the long request went to. Disaggregated: its prefill and decode servers."""
    roles = [role for role, _ in result.servers]
    if "prefill" not in roles:
        return [result.server_of[rid] if rid is not None else 0]
    n_pre = roles.count("prefill")
    decode = result.server_of[rid] if rid is not None and result.server_of[rid] >= n_pre else n_pre
    prefill = rid % n_pre if rid is not None else 0
    return [prefill, decode]


def _server_name(result: SimResult, k: int) -> str:
    role = result.servers[k][0]
    return f"server {k + 1}" if role == "both" else f"{role} server {k + 1}"


def timeline(result: SimResult, start_s: float, length_s: float, title: str) -> Figure:
    """A Gantt of iterations: one lane for the prompt tokens being prefilled and one for the decode
    tokens, per server. Each iteration is a bar as long as its simulated duration in every lane it
    has work in, as thick as that work's share of its tokens; a long prefill with nothing in the
    decode lane beside it is every running request waiting."""
    rid = long_request(result)
    shown = servers_to_show(result, rid)
    end_s = start_s + length_s
    data: list[dict[str, Any]] = []
    lanes: list[str] = []
    legend_done: set[str] = set()
    for k in shown:
        log = result.servers[k][1]
        its = [it for it in log.iterations if it[0] + it[1] >= start_s and it[0] <= end_s]
        name = _server_name(result, k)
        for label, idx, colour in (("prefill", 2, pal.PREFILL), ("decode", 3, pal.DECODE),
                                   ("padding", 5, pal.GREY)):
            part = [it for it in its if it[idx] > 0]
            if not part and (label == "padding" or not any(it[idx] for it in log.iterations)):
                continue  # a lane this server never uses (a disaggregated server does one phase)
            lane = f"{name}: {label}"
            lanes.append(lane)
            total = [max(1, it[2] + it[3] + it[5]) for it in part]
            data.append({"type": "bar", "orientation": "h", "y": [lane] * len(part),
                         "base": [it[0] for it in part], "x": [it[1] for it in part],
                         "width": [0.25 + 0.6 * it[idx] / t for it, t in zip(part, total, strict=True)],
                         "name": {"prefill": "prompt tokens prefilled", "decode": "decode tokens",
                                  "padding": "padding (computed, thrown away)"}[label],
                         "legendgroup": label, "showlegend": label not in legend_done,
                         "marker": {"color": colour, "line": {"width": 0.6, "color": "white"}},
                         "customdata": [[it[idx], it[2] + it[3], it[1] * 1e3, it[4]] for it in part],
                         "hovertemplate": f"%{{customdata[0]:,}} {label} tokens of %{{customdata[1]:,}} · iteration "
                                          "of %{customdata[2]:.1f} ms, %{customdata[3]} rows (simulated)<extra></extra>"})
            legend_done.add(label)
    layout = pal.base_layout(title, height=200 + 45 * len(lanes), barmode="overlay",
                             xaxis={"range": [start_s, end_s], "title": {"text": "simulated time (s)"}},
                             yaxis={"categoryorder": "array", "categoryarray": lanes[::-1], "automargin": True})
    layout["margin"] = {**layout["margin"], "l": 30, "b": 120}  # automargin grows it to the lane names
    layout["legend"] = {**layout["legend"], "y": -0.55 if len(lanes) <= 2 else -0.35}
    if rid is not None:
        r = result.requests[rid]
        layout["shapes"] = [{"type": "line", "xref": "x", "yref": "paper", "x0": r.arrival_s, "x1": r.arrival_s,
                             "y0": 0, "y1": 1, "line": {"color": pal.PURPLE, "dash": "dot", "width": 2}}]
        layout["annotations"] = [{"x": r.arrival_s, "y": 1.0, "xref": "x", "yref": "paper", "showarrow": False,
                                  "xanchor": "left", "yanchor": "bottom",
                                  "text": f"a {r.prompt_tokens:,}-token prompt arrives"}]
    if not data:  # Plotly refuses a figure with no trace (and Streamlit then shows its traceback)
        data = [{"type": "bar", "orientation": "h", "x": [], "y": [], "showlegend": False, "hoverinfo": "skip"}]
        layout["annotations"] = [*layout.get("annotations", []), {
            "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper", "showarrow": False,
            "text": "no iteration ran in this window" if any(result.token_s) else "no request could be served"}]
    return {"data": data, "layout": layout}


def token_ticks(result: SimResult, start_s: float, length_s: float, title: str) -> Figure:
    """Every output token of the requests on the shown servers inside the window, one row per request:
    an even comb is a smooth stream; a gap is a stall."""
    rid = long_request(result)
    shown = set(servers_to_show(result, rid))
    end_s = start_s + length_s
    rows = [(r, t) for r, t in zip(result.requests, result.token_s, strict=True)
            if t and result.server_of[r.id] in shown and t[-1] >= start_s and r.arrival_s <= end_s]
    rows = rows[:MAX_TICK_REQUESTS]
    hits = result.prefix_hits_of()
    xs, ys, ax, ay, hx, hy, htext = [], [], [], [], [], [], []
    for r, t in rows:
        lo, hi = bisect.bisect_left(t, start_s), bisect.bisect_right(t, end_s)
        xs += t[lo:hi]
        ys += [r.id] * (hi - lo)
        if start_s <= r.arrival_s <= end_s:
            if hits.get(r.id):  # its prefill started from cached blocks: a shorter wait to its first token
                hx.append(r.arrival_s)
                hy.append(r.id)
                htext.append(f"{hits[r.id]:,} of {r.prompt_tokens:,}")
            else:
                ax.append(r.arrival_s)
                ay.append(r.id)
    data = [{"type": "scatter", "mode": "markers", "x": xs, "y": ys, "name": "an output token",
             "marker": {"symbol": "line-ns-open", "size": 7, "color": pal.DECODE},
             "hovertemplate": "request %{y}: token at %{x:.3f} s (simulated)<extra></extra>"},
            {"type": "scatter", "mode": "markers", "x": ax, "y": ay, "name": "request arrives",
             "marker": {"symbol": "circle-open", "size": 7, "color": pal.GREY},
             "hovertemplate": "request %{y} arrives at %{x:.3f} s<extra></extra>"}]
    if hx:
        data.append({"type": "scatter", "mode": "markers", "x": hx, "y": hy, "text": htext,
                     "name": "arrives, its prompt's start cached", "marker": {"symbol": "circle", "size": 7,
                                                                             "color": pal.GREEN},
                     "hovertemplate": "request %{y} arrives at %{x:.3f} s; %{text} prompt tokens reused from the "
                                      "prefix cache (simulated)<extra></extra>"})
    if rid is not None and rid in {r.id for r, _ in rows}:
        t = result.token_s[rid]
        data.append({"type": "scatter", "mode": "markers", "x": [result.requests[rid].arrival_s], "y": [rid],
                     "name": "the long prompt", "marker": {"symbol": "star", "size": 11, "color": pal.PURPLE},
                     "hovertemplate": f"request {rid}: {result.requests[rid].prompt_tokens:,}-token prompt, "
                                      f"first token at {t[0]:.3f} s<extra></extra>"})
    layout = pal.base_layout(title, height=420, xaxis={"range": [start_s, end_s],
                                                        "title": {"text": "simulated time (s)"}},
                             yaxis={"title": {"text": "request"}, "autorange": "reversed"})
    return {"data": data, "layout": layout}


def _ecdf(values: list[float]) -> tuple[list[float], list[float]]:
    v = np.sort(np.asarray(values, dtype=float))
    if v.size > MAX_LINE_POINTS:
        idx = np.linspace(0, v.size - 1, MAX_LINE_POINTS).astype(int)
        return v[idx].tolist(), ((idx + 1) / v.size * 100).tolist()
    return v.tolist(), (np.arange(1, v.size + 1) / v.size * 100).tolist()


def distributions(results: list[SimResult], names: list[str]) -> Figure:
    """TTFT and TPOT of every request as cumulative distributions, targets drawn: the higher a line
    at the target, the more requests met it."""
    data: list[dict[str, Any]] = []
    layout = pal.base_layout("TTFT and TPOT of every request (simulated)", height=400)
    layout.update({"xaxis": {"domain": [0, 0.45], "type": "log", "title": {"text": "time to first token (s)"}},
                   "xaxis2": {"domain": [0.55, 1], "type": "log", "anchor": "y2",
                              "title": {"text": "time per output token (s)"}},
                   "yaxis": {"title": {"text": "% of requests at or below"}, "range": [0, 101]},
                   "yaxis2": {"anchor": "x2", "range": [0, 101]}})
    shapes = []
    spans = {"": [], "2": []}
    for k, (res, name) in enumerate(zip(results, names, strict=True)):
        recs = res.per_request()
        colour = POLICY_COLOURS[k % 2]
        for axis, key in (("", "ttft_s"), ("2", "tpot_s")):
            x, y = _ecdf([r[key] for r in recs if r[key] is not None and r[key] > 0])
            spans[axis] += x[:1] + x[-1:]
            data.append({"type": "scatter", "mode": "lines", "x": x, "y": y, "name": name, "legendgroup": name,
                         "showlegend": axis == "", "line": {"color": colour, "width": 2.5},
                         "xaxis": f"x{axis}", "yaxis": f"y{axis}",
                         "hovertemplate": "%{y:.0f}% of requests within %{x:.3g} s<extra>" + name + "</extra>"})
    cfg = results[0].config
    for axis, target in (("", cfg.ttft_target_s), ("2", cfg.tpot_target_s)):
        values = spans[axis] + [target]
        layout[f"xaxis{axis}"].update(pal.decade_ticks(min(values), max(values)))
        shapes.append({"type": "line", "xref": f"x{axis}", "yref": f"y{axis}", "x0": target, "x1": target,
                       "y0": 0, "y1": 100, "line": {"color": pal.GREY, "dash": "dash"}})
    layout["shapes"] = shapes
    layout["annotations"] = [{"x": cfg.ttft_target_s, "y": 100, "xref": "x", "yref": "y", "text": "target",
                              "showarrow": False, "yanchor": "bottom"},
                             {"x": cfg.tpot_target_s, "y": 100, "xref": "x2", "yref": "y2", "text": "target",
                              "showarrow": False, "yanchor": "bottom"}]
    return {"data": data, "layout": layout}


def _thin(points: list[tuple[float, int]]) -> list[tuple[float, int]]:
    if len(points) <= MAX_LINE_POINTS:
        return points
    step = len(points) / MAX_LINE_POINTS
    return [points[int(i * step)] for i in range(MAX_LINE_POINTS)] + [points[-1]]


def kv_usage(results: list[SimResult], names: list[str]) -> Figure:
    """The KV cache's blocks in use over time on the busiest server of each policy, as a share of
    what the server holds: at 100% new requests wait, and decodes start preempting. (With several
    copies, the copy that came closest to full.)"""
    data = []
    for k, (res, name) in enumerate(zip(results, names, strict=True)):
        decode_servers = [i for i, (role, _) in enumerate(res.servers) if role != "prefill"]
        busiest = max(decode_servers, key=lambda i: max((u for _, u in res.servers[i][1].kv_used), default=0))
        log = res.servers[busiest][1]
        pts = _thin(log.kv_used)
        data.append({"type": "scatter", "mode": "lines", "x": [p[0] for p in pts],
                     "y": [100 * p[1] / log.kv_blocks for p in pts], "name": name,
                     "line": {"color": POLICY_COLOURS[k % 2], "width": 2},
                     "hovertemplate": "%{y:.1f}% of the KV blocks at %{x:.2f} s<extra></extra>"})
    layout = pal.base_layout("KV cache in use (simulated)", height=360,
                             xaxis={"title": {"text": "simulated time (s)"}},
                             yaxis={"title": {"text": "% of the server's KV blocks"}, "rangemode": "tozero"})
    return {"data": data, "layout": layout}


def goodput(results: list[SimResult], names: list[str]) -> Figure:
    """Requests per second served, and of those how many met both targets (goodput)."""
    served = [r.metrics["request_rate_served_per_s"] or 0.0 for r in results]
    good = [r.metrics["goodput_req_s"] or 0.0 for r in results]
    cfg = results[0].config
    data = [{"type": "bar", "x": names, "y": served, "name": "finished per second",
             "marker": {"color": pal.GREY}, "hovertemplate": "%{y:.2f} requests/s (simulated)<extra></extra>"},
            {"type": "bar", "x": names, "y": good, "name": "met both targets (goodput)",
             "marker": {"color": pal.GREEN}, "hovertemplate": "%{y:.2f} requests/s (simulated)<extra></extra>"}]
    layout = pal.base_layout(f"Goodput: TTFT ≤ {cfg.ttft_target_s:g} s and TPOT ≤ {cfg.tpot_target_s * 1e3:g} ms "
                             "(simulated)", height=360, barmode="group",
                             yaxis={"title": {"text": "requests per second"}, "rangemode": "tozero"})
    return {"data": data, "layout": layout}


def rate_sweep(sweep: dict[str, list[dict[str, Any]]], names: dict[str, str]) -> Figure:
    """Throughput against p99 TPOT as the arrival rate rises, one line per policy: the curve serving
    papers plot. Down and to the right is better."""
    data = []
    for k, (policy, points) in enumerate(sweep.items()):
        pts = [p for p in points if p["throughput_tok_s"] and p["tpot_p99_s"]]
        data.append({"type": "scatter", "mode": "lines+markers+text", "name": names.get(policy, policy),
                     "x": [p["throughput_tok_s"] for p in pts], "y": [p["tpot_p99_s"] * 1e3 for p in pts],
                     "text": [f"{p['rate_per_s']:.3g}/s" for p in pts],
                     "textposition": "top left" if k % 2 == 0 else "bottom right",
                     "line": {"color": POLICY_COLOURS[k % 2], "width": 2.5},
                     "hovertemplate": "%{text} arriving: %{x:,.0f} tokens/s, p99 TPOT %{y:.1f} ms (simulated)"
                                      "<extra></extra>"})
    layout = pal.base_layout("Throughput against p99 TPOT as the arrival rate rises (simulated)", height=420,
                             xaxis={"title": {"text": "throughput (output tokens per second)"},
                                    "rangemode": "tozero"},
                             yaxis={"title": {"text": "p99 time per output token (ms)"}, "rangemode": "tozero"})
    return {"data": data, "layout": layout}
