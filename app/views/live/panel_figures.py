"""Figures, tables and answer values for the on-demand panels (cache comparison, batching): plain
functions of the job results, so tests can check them without a browser. Their details' words are
app.views.live.panel_text's."""

from __future__ import annotations

import itertools
import math
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.shared import palette as pal
from app.views.live.shown import ridge_text

MODE_STYLE = {"dynamic": (pal.BLUE, "solid", "cache on, dynamic (grows as it goes)"),
              "static": (pal.GREEN, "dot", "cache on, static (allocated up front)"),
              "none": (pal.VERMILLION, "dash", "cache off (recomputes everything)")}
MODE_SHORT = {"dynamic": "dynamic cache", "static": "static cache", "none": "no cache"}
# The two cache-on modes often measure the same to the millisecond: the static one is drawn first, as
# rings around the dynamic one's dots, so neither hides the other.
MODE_MARKER = {"static": {"symbol": "circle-open", "size": 10, "line": {"width": 1.5}}}


def usable_modes(result: dict[str, Any]) -> dict[str, list[float]]:
    """Only the modes with data, trimmed to the length every mode has reached (they run in lockstep)."""
    modes = {m: v for m, v in result.get("modes", {}).items() if v}
    if not modes:
        return {}
    n = min(len(v) for v in modes.values())
    return {m: v[:n] for m, v in modes.items()}


def compare_figure(result: dict[str, Any], whose: str = "Your prompt", where: str = "this machine") -> go.Figure:
    """Cumulative and per-step time for each cache mode, same prompt and token count: measured, with
    the predictor's per-step time as a thin line beside it. `whose` names the prompt in the title;
    `where`, the machine whose latency model drew the thin lines (a recording's are not this server's,
    and the legend says so)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("Total time so far (measured)", "Each forward: ● measured, thin lines predicted"))
    predicted = result.get("predicted", {})
    modes = usable_modes(result)
    shifts = _label_shifts({m: sum(v) / 1000 for m, v in modes.items()})
    for mode in sorted(modes, key=lambda m: m != "static"):
        latencies = modes[mode]
        color, dash, label = MODE_STYLE.get(mode, (pal.GREY, "solid", mode))
        steps = list(range(len(latencies)))
        total = [round(v / 1000, 3) for v in itertools.accumulate(latencies)]
        rank = list(MODE_STYLE).index(mode) if mode in MODE_STYLE else len(MODE_STYLE)
        fig.add_scatter(x=steps, y=total, mode="lines+markers", name=label, line={"color": color, "dash": dash},
                        marker=MODE_MARKER.get(mode, {"size": 5}), row=1, col=1, legendgroup=mode, legendrank=rank,
                        hovertemplate="after forward %{x}: %{y:.2f} s measured<extra>" + label + "</extra>")
        fig.add_annotation(x=steps[-1], y=total[-1], text=f"{total[-1]:.1f} s", showarrow=False, xanchor="left",
                           xshift=6, yshift=shifts.get(mode, 0), font={"color": color, "size": 13},
                           row=1, col=1)
        fig.add_scatter(x=steps, y=latencies, mode="markers", showlegend=False, legendgroup=mode,
                        marker={**MODE_MARKER.get(mode, {"size": 6}), "color": color}, row=1, col=2,
                        hovertemplate="forward %{x}: %{y:.1f} ms measured<extra>" + label + "</extra>")
        pred = predicted.get(mode) or []
        if any(p is not None for p in pred[:len(steps)]):
            fig.add_scatter(x=steps, y=pred[:len(steps)], mode="lines", showlegend=False, legendgroup=mode,
                            line={"color": color, "width": 1.5, "dash": dash}, row=1, col=2,
                            hovertemplate="forward %{x}: %{y:.1f} ms " + predicted_for(where)
                            + "<extra>" + label + "</extra>")
    if where != "this machine" and any(any(p is not None for p in v) for v in predicted.values()):
        fig.add_scatter(x=[None], y=[None], mode="lines", name=f"thin lines: {predicted_for(where)}",
                        line={"color": pal.GREY, "width": 1.5}, hoverinfo="skip", legendrank=len(MODE_STYLE) + 1,
                        row=1, col=2)
    n = len(next(iter(modes.values()))) if modes else result.get("n_tokens", "?")
    fig.update_layout(**pal.base_layout(f"{whose} ({result.get('prompt_len', '?')} tokens), then {n} tokens "
                                        "generated three ways", height=400))
    fig.update_xaxes(title_text="forward (0 = prefill)", rangemode="tozero")
    fig.update_xaxes(range=[-0.5, max(n if isinstance(n, int) else 1, 1) * 1.12], row=1, col=1)
    fig.update_yaxes(title_text="seconds", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="ms", row=1, col=2, rangemode="tozero")
    return pal.fit_legend(fig)


def _label_shifts(totals: dict[str, float]) -> dict[str, int]:
    """Vertical pixel shifts so end labels of near-equal totals do not print on top of each other."""
    shifts, prev, top = {}, None, max(totals.values(), default=0) or 1
    for mode, value in sorted(totals.items(), key=lambda kv: -kv[1]):
        if prev is not None and abs(prev[1] - value) < 0.08 * top:
            shifts[mode] = shifts.get(prev[0], 0) - 14
        prev = (mode, value)
    return shifts


def compare_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    predicted = result.get("predicted", {})
    for mode, latencies in usable_modes(result).items():
        decode = latencies[1:] or [float("nan")]
        pred = [p for p in (predicted.get(mode) or [])[:len(latencies)] if p is not None]
        rows.append({"cache": MODE_SHORT.get(mode, mode), "forwards": len(latencies),
                     "total s (measured)": round(sum(latencies) / 1000, 3),
                     "total s (predicted)": round(sum(pred) / 1000, 3) if len(pred) == len(latencies) else None,
                     "prefill ms (measured)": round(latencies[0], 1),
                     "mean decode step ms (measured)": round(sum(decode) / len(decode), 1),
                     "last step ms (measured)": round(latencies[-1], 1)})
    return rows


def mean(values: list[float]) -> float:
    """The arithmetic mean, NaN for no values (a mode with no decode step yet)."""
    return sum(values) / len(values) if values else float("nan")


PREDICTED_NAME = "predicted (latency model)"


def predicted_for(where: str) -> str:
    """"predicted", or "predicted for the recording machine": a recording's latency-model lines were
    drawn by the model fitted on the machine it was recorded on, not this server's."""
    return "predicted" if where == "this machine" else f"predicted for {where}"


def predicted_name(where: str) -> str:
    """The legend name of the latency model's line on a chart of `where`'s numbers."""
    return PREDICTED_NAME if where == "this machine" else predicted_for(where)


def batching_figure(result: dict[str, Any], where: str = "this machine",
                    measured_name: str = "measured here") -> go.Figure:
    """Step time and throughput against batch size: measured (1..16) beside the predictor (to 128),
    with the predicted compute-bound batch marked: the page's one batching threshold (the plain
    roofline estimates, this machine's and the recording's, are given in words, one click down).

    `where` names the machine in the title and `measured_name` the measured line: a recording made
    elsewhere must not call its numbers "here". Everything drawn is of that one machine: this
    server's own estimate beside a recording's read as two machines on one chart, so it is given in
    words only (batching_summary). Throughput is on a log axis like the batch: batching that cost
    nothing would be a straight line of slope one, not an upward curve."""
    rows, predicted = result.get("rows", []), result.get("predicted", [])
    crossover = result.get("compute_bound_from")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("Time of one decode step", "Tokens per second, all rows together"))
    measured_max = max((r["batch"] for r in rows), default=1)
    if predicted:
        xs = [p["batch"] for p in predicted]
        fig.add_scatter(x=xs, y=[p["step ms (predicted)"] for p in predicted], mode="lines+markers",
                        name=predicted_name(where), legendgroup="pred",
                        line={"color": pal.PREDICTED, "dash": "dash"}, marker={"symbol": "diamond-open", "size": 9},
                        row=1, col=1,
                        hovertemplate=f"batch %{{x}}: %{{y:.0f}} ms per step, {predicted_for(where)}<extra></extra>")
        fig.add_scatter(x=xs, y=[p["tokens/s (predicted)"] for p in predicted], mode="lines+markers",
                        name=predicted_name(where), legendgroup="pred", showlegend=False,
                        line={"color": pal.PREDICTED, "dash": "dash"}, marker={"symbol": "diamond-open", "size": 9},
                        row=1, col=2,
                        hovertemplate=f"batch %{{x}}: %{{y:.0f}} tokens/s, {predicted_for(where)}<extra></extra>")
    if rows:
        xs = [r["batch"] for r in rows]
        fig.add_scatter(x=xs, y=[r["decode step ms (measured, median)"] for r in rows], mode="lines+markers",
                        name=measured_name, legendgroup="meas", line={"color": pal.MEASURED, "width": 3},
                        marker={"size": 10}, row=1, col=1,
                        hovertemplate="batch %{x}: %{y:.0f} ms per step, measured (median)<extra></extra>")
        fig.add_scatter(x=xs, y=[r["tokens/s (measured)"] for r in rows], mode="lines+markers",
                        name=measured_name, legendgroup="meas", showlegend=False,
                        line={"color": pal.MEASURED, "width": 3}, marker={"size": 10}, row=1, col=2,
                        hovertemplate="batch %{x}: %{y:.0f} tokens/s, measured<extra></extra>")
    top = max([p["batch"] for p in predicted] + [measured_max])
    if top > measured_max:
        for col in (1, 2):
            fig.add_vrect(x0=measured_max * 1.25, x1=top * 1.3, fillcolor=pal.GREY, opacity=0.12, line_width=0,
                          row=1, col=col)
        # upright at the foot of the shaded band, inside it: lying flat it ran across the crossover's
        # dotted line left of the band, and the top holds the crossover labels
        fig.add_annotation(x=math.log10(math.sqrt(measured_max * 1.25 * top * 1.3)), y=0.02, yref="y domain",
                           text="predicted only", showarrow=False, yanchor="bottom", textangle=-90,
                           font={"size": 12}, row=1, col=1)
    if crossover:
        line = {"color": pal.VERMILLION, "dash": "dot", "width": 2}
        for col in (1, 2):
            fig.add_vline(x=crossover, line=line, row=1, col=col)
        # the lines themselves carry no text: the legend says what they mark, in both panels
        fig.add_scatter(x=[None], y=[None], mode="lines", line=line, hoverinfo="skip", row=1, col=1,
                        name=crossover_name(crossover))
    ticks = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    fig.update_layout(**pal.base_layout(f"Decode on {where}: one step serves the whole batch", height=400))
    fig.update_xaxes(type="log", tickvals=[t for t in ticks if t <= top], ticktext=[str(t) for t in ticks if t <= top],
                     title_text="batch size", range=[-0.15, math.log10(top * 1.3)])
    fig.update_yaxes(title_text="ms per step", rangemode="tozero", row=1, col=1)
    rates = [r["tokens/s (measured)"] for r in rows] + [p["tokens/s (predicted)"] for p in predicted]
    lo, hi = (min(rates), max(rates)) if rates else (1.0, 10.0)
    marks = [m * 10 ** e for e in range(-1, 6) for m in (1, 2, 5) if lo / 2 <= m * 10 ** e <= hi * 2]
    fig.update_yaxes(title_text="tokens/s (log scale)", type="log", tickvals=marks,
                     ticktext=[f"{m:g}" for m in marks], row=1, col=2)
    return pal.fit_legend(fig)


def crossover_name(crossover: float) -> str:
    """The legend name of the dotted line at the batch where the latency model's decode step turns
    compute-bound (its arithmetic overtakes its reading of weights, cache and activations)."""
    return f"compute-bound from batch ≈ {crossover:.0f} (predicted)"


def _owner(where: str) -> str:
    """"the recording machine's " before a label on a recording's chart: whose estimate it is."""
    return "" if where == "this machine" else f"{where.removeprefix('the ')}'s "


def step_ms(row: dict[str, Any]) -> float:
    """A batching row's measured median decode step, as the table holds it."""
    return row["decode step ms (measured, median)"]


def tokens_per_s(row: dict[str, Any]) -> float:
    """A batching row's measured throughput, as the table holds it."""
    return row["tokens/s (measured)"]


def throughput_gain(a: dict[str, Any], b: dict[str, Any]) -> float:
    """How many times the throughput grew from row a to row b, from the step times the text prints
    (the table's rates are rounded to 0.1 tokens/s: 29.6 / 15.3 gives 1.93 where 2 × 65.56 / 67.5
    gives 1.94)."""
    return (b["batch"] / a["batch"]) * (step_ms(a) / step_ms(b))


def three_figures(value: float) -> str:
    """Three significant figures (whole numbers from 100 up), so a ratio beside it can be checked by hand."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def batching_answer_values(result: dict[str, Any], recorded: bool) -> dict[str, str]:
    """The batching answer's slots, the same figures batching_summary prints ({} before two batch sizes)."""
    rows = result.get("rows", [])
    if len(rows) < 2:
        return {}
    first, last = rows[0], rows[-1]
    crossover = result.get("compute_bound_from")
    return {"batch_top": str(last["batch"]), "batch_step_growth": f"{step_ms(last) / step_ms(first):.1f}",
            "batch_rate_growth": f"{throughput_gain(first, last):.1f}",
            "batch_last_gain": f"{throughput_gain(rows[-2], last):.2f}",  # as the summary's step-by-step list prints it
            "batch_turn": f"{crossover:.0f}" if crossover else "",
            "batch_badge": (":violet-badge[recorded]" if recorded else ":blue-badge[measured]")
            + " :orange-badge[predicted]"}


def shown_estimate(roofline: dict[str, float]) -> tuple[str, str, float]:
    """(ridge, intensity, batch) as printed: the ridge divided from the printed ceilings where the
    estimate carries them (as the live page's roofline text prints it), the batch from the printed
    ridge over the printed intensity, so every division a reader redoes comes out as printed."""
    peak, bw = roofline.get("peak_flops_per_s"), roofline.get("bandwidth_bytes_per_s")
    ridge = ridge_text(peak, bw) if peak and bw else f"{roofline['ridge_flop_per_byte']:.1f}"
    intensity = f"{roofline['decode_intensity']:.2f}"
    return ridge, intensity, float(ridge) / float(intensity)

