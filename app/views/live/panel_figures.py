"""Figures and summaries for the on-demand panels (cache comparison, batching): plain functions of the
job results, so tests can check them without a browser."""

from __future__ import annotations

import itertools
import math
import statistics
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.shared import palette as pal
from app.views.live.shown import gbs_text, ridge_text, sig3

MODE_STYLE = {"dynamic": (pal.BLUE, "solid", "cache on, dynamic (grows as it goes)"),
              "static": (pal.GREEN, "dot", "cache on, static (allocated up front)"),
              "none": (pal.VERMILLION, "dash", "cache off (recomputes everything)")}
MODE_SHORT = {"dynamic": "dynamic cache", "static": "static cache", "none": "no cache"}
# The two cache-on modes often measure the same to the millisecond: the static one is drawn first, as
# rings around the dynamic one's dots, so neither hides the other.
MODE_MARKER = {"static": {"symbol": "circle-open", "size": 10, "line": {"width": 1.5}}}


def _usable(result: dict[str, Any]) -> dict[str, list[float]]:
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
    modes = _usable(result)
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
    for mode, latencies in _usable(result).items():
        decode = latencies[1:] or [float("nan")]
        pred = [p for p in (predicted.get(mode) or [])[:len(latencies)] if p is not None]
        rows.append({"cache": MODE_SHORT.get(mode, mode), "forwards": len(latencies),
                     "total s (measured)": round(sum(latencies) / 1000, 3),
                     "total s (predicted)": round(sum(pred) / 1000, 3) if len(pred) == len(latencies) else None,
                     "prefill ms (measured)": round(latencies[0], 1),
                     "mean decode step ms (measured)": round(sum(decode) / len(decode), 1),
                     "last step ms (measured)": round(latencies[-1], 1)})
    return rows


def compare_answer_values(result: dict[str, Any], recorded: bool) -> dict[str, str]:
    """The cache answer's slots, the totals compare_summary prints ({} before both modes have two forwards)."""
    modes = _usable(result)
    dyn, off = modes.get("dynamic") or [], modes.get("none") or []
    if len(dyn) < 2 or len(off) < 2:
        return {}
    return {"cache_n": str(len(dyn)), "cache_off_s": f"{sum(off) / 1000:.1f}", "cache_on_s": f"{sum(dyn) / 1000:.1f}",
            "cache_badge": ":violet-badge[recorded]" if recorded else ":blue-badge[measured]"}


def compare_summary(result: dict[str, Any], recorded: bool = False) -> str:
    """Two or three sentences with the measured ratios, for beside the chart ('' before any data).
    `recorded`: the result is a recording bundled with the app, made on another machine."""
    modes = _usable(result)
    if "dynamic" not in modes or len(modes["dynamic"]) < 2:
        return ""
    dyn = modes["dynamic"]
    n, prompt = len(dyn), result.get("prompt_len", 0)
    out = []
    if "none" in modes:
        off = modes["none"]
        lead = "**Measured on the recording machine, not this server:**" if recorded else "**Measured:**"
        out.append(f"{lead} without the cache these {n} forwards took **{sum(off) / 1000:.1f} s**, "
                   f"**{sum(off) / sum(dyn):.1f}×** the {sum(dyn) / 1000:.1f} s with it. With the cache a decode "
                   f"step feeds the model **1 new token**; without it, forward *k* feeds all {prompt} + *k* tokens "
                   f"again, so every step is a prefill of the whole sequence so far "
                   f"(here a mean of {_mean(off[1:]):.0f} ms per step, against {_mean(dyn[1:]):.0f} ms with the cache) and "
                   f"the gap keeps "
                   f"widening with every token.")
        predicted = [(m, p) for m, p in zip(off, (result.get("predicted") or {}).get("none") or [], strict=False)
                     if p]
        if predicted:
            gap = statistics.median(p / m for m, p in predicted) - 1  # < 0: the prediction is too fast
            if abs(gap) > 0.10:  # beyond the typical error of its other predictions
                whose = "The recording machine's latency model draws a no-cache line that" if recorded else \
                    "The latency model's no-cache line"
                out[-1] += (f" {whose} runs about {abs(gap):.0%} "
                            f"{'below' if gap < 0 else 'above'} these measured forwards (median over them): it was "
                            "fitted on cached decode steps and single prefills, and forwards that re-read the "
                            "whole sequence at every step came out "
                            f"{'slower' if gap < 0 else 'faster'} than it expects.")
    if "static" in modes:
        ratio = sum(modes["static"]) / sum(dyn)
        verdict = ("within 10% of each other: at this length the difference is lost in the noise of the machine"
                   if abs(ratio - 1) < 0.10 else
                   f"the static cache took {ratio:.2f}× as long; run it again to see how much of that is noise")
        out.append(f"**Static vs dynamic, as timed:** {sum(modes['static']) / 1000:.1f} s against "
                   f"{sum(dyn) / 1000:.1f} s, {verdict}. The static cache allocates room for every position up "
                   "front, so nothing is copied as it grows, but each step attends over the whole allocation; "
                   "the dynamic cache attends over only what is filled but grows by copying.")
    return "\n\n".join(out)


def _mean(values: list[float]) -> float:
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


def _step(row: dict[str, Any]) -> float:
    return row["decode step ms (measured, median)"]


def _rate(row: dict[str, Any]) -> float:
    return row["tokens/s (measured)"]


def _gain(a: dict[str, Any], b: dict[str, Any]) -> float:
    """How many times the throughput grew from row a to row b, from the step times the text prints
    (the table's rates are rounded to 0.1 tokens/s: 29.6 / 15.3 gives 1.93 where 2 × 65.56 / 67.5
    gives 1.94)."""
    return (b["batch"] / a["batch"]) * (_step(a) / _step(b))


def _num(value: float) -> str:
    """Three significant figures (whole numbers from 100 up), so a ratio beside it can be checked by hand."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _unforeseen_jump(rows: list[dict[str, Any]]) -> str:
    """A sentence on the measured step up the predictor least expected, when it grew well past the
    prediction ('' when every step grew about as predicted, or nothing was predicted)."""
    worst, worst_excess = None, 1.2
    for a, b in itertools.pairwise(rows):
        pa, pb = a.get("decode step ms (predicted)"), b.get("decode step ms (predicted)")
        if not pa or not pb:
            continue
        excess = (_step(b) / _step(a)) / (pb / pa)
        if excess > worst_excess:
            worst, worst_excess = (a, b, pa, pb), excess
    if worst is None:
        return ""
    a, b, pa, pb = worst
    return (f"The measured median step time rose most against the prediction from batch {a['batch']} to {b['batch']}: "
            f"+{100 * (_step(b) / _step(a) - 1):.0f}% ({_num(_step(a))} → {_num(_step(b))} ms), where the latency "
            f"model expected +{100 * (pb / pa - 1):.0f}% ({_num(pa)} → {_num(pb)} ms): its bytes and FLOPs do "
            "not capture everything the CPU's matrix routines do with a few rows at once.")


def batching_answer_values(result: dict[str, Any], recorded: bool) -> dict[str, str]:
    """The batching answer's slots, the same figures batching_summary prints ({} before two batch sizes)."""
    rows = result.get("rows", [])
    if len(rows) < 2:
        return {}
    first, last = rows[0], rows[-1]
    crossover = result.get("compute_bound_from")
    return {"batch_top": str(last["batch"]), "batch_step_growth": f"{_step(last) / _step(first):.1f}",
            "batch_rate_growth": f"{_gain(first, last):.1f}",
            "batch_last_gain": f"{_gain(rows[-2], last):.2f}",  # as the summary's step-by-step list prints it
            "batch_turn": f"{crossover:.0f}" if crossover else "",
            "batch_badge": (":violet-badge[recorded]" if recorded else ":blue-badge[measured]")
            + " :orange-badge[predicted]"}


def batching_summary(result: dict[str, Any], where: str = "this machine",
                     here: dict[str, float] | None = None) -> str:
    """What the batching result says, every figure in the text taken from the result beside it ('' before
    two batch sizes are measured): the step time and throughput at both ends (measured), the gain of the
    last doubling, and the batch where decode stops being bandwidth-bound, twice: the plain roofline
    estimate (computed) and the latency model's crossover (predicted). `here`: the same roofline
    estimate for this server (app.views.live.jobs.roofline_batch_with), when the result shown
    was measured on another machine."""
    rows = result.get("rows", [])
    if len(rows) < 2:
        return ""
    first, last = rows[0], rows[-1]
    b0, b1 = first["batch"], last["batch"]
    t0, t1 = _step(first), _step(last)
    r0, r1 = _rate(first), _rate(last)
    lead = "**Measured:**" if where == "this machine" else f"**Measured on {where}, not this server:**"
    out = [f"{lead} from batch {b0} to {b1} the step time grew **×{t1 / t0:.1f}** "
           f"(median step {t0:g} → {t1:g} ms, as the table holds them) while {b1 / b0:g}× as many "
           f"sequences shared each step, so the tokens per second grew **×{_gain(first, last):.1f}** "
           f"({_num(r0)} → {_num(r1)} tokens/s)."]
    doublings = [(a["batch"], b["batch"], _gain(a, b)) for a, b in zip(rows, rows[1:], strict=False)]
    out[0] += (" Step by step up the batch sizes the throughput was multiplied by "
               + ", ".join(f"×{g:.2f} ({a} → {b})" for a, b, g in doublings)
               + f": ×{doublings[-1][1] / doublings[-1][0]:.0f} would mean the extra rows cost no time at all, "
               "×1 that they gained nothing.")
    jump = _unforeseen_jump(rows)
    if jump:
        out.append(jump)
    roofline = result.get("roofline") or {}
    crossover = result.get("compute_bound_from")
    bullets = []
    if roofline.get("batch"):
        context = result.get("prompt_len")
        at = f" at this panel's context ({context} prompt tokens plus a few generated)" if context else ""
        ridge, intensity, est = shown_estimate(roofline)
        bullets.append(f"- *Roofline estimate:* one decode step at batch 1 does **{intensity} FLOPs "
                       f"per byte** it moves{at}, by the cost model's count, and {where}'s ridge point is "
                       f"**{ridge} FLOP/byte** (its calibrated matmul speed over its memory "
                       f"bandwidth{_speeds(roofline)}). Each "
                       "extra row adds arithmetic but reads the same weights, so the FLOPs per byte grow about in "
                       f"step with the batch and reach the ridge near batch {ridge} ÷ {intensity} ≈ "
                       f"**{est:.0f}**.")
    if crossover:
        if crossover > b1:
            side = "past the measured range, where only the dashed predicted line goes"
        else:  # say what the measurement did past the predicted turn
            below = [r for r in rows if r["batch"] <= crossover] or rows[:1]
            at = below[-1]
            side = (f"inside the measured range: measured, the throughput still grew ×{_gain(at, last):.2f} from "
                    f"batch {at['batch']} to {b1}, so the measured curve bends gradually rather than at one batch")
        bullets.append(f"- *Latency model:* its predicted arithmetic time, with coefficients fitted to "
                       f"measured forwards, overtakes its time for reading weights, cache and activations from "
                       f"batch ≈ **{crossover:.0f}** ({side}). From there each further row adds its own time and "
                       "throughput grows ever more slowly.")
    if here and here.get("batch"):
        ridge_here, intensity_here, est_here = shown_estimate(here)
        bullets.append(f"- *On this server:* its ridge, from the speeds calibrated when it started{_speeds(here)}, is "
                       f"**{ridge_here} FLOP/byte**, and the same batch-1 step does "
                       f"{intensity_here} FLOPs per byte, so the same estimate gives batch ≈ "
                       f"**{est_here:.0f}** here (in words only: the chart holds {where}'s numbers alone). "
                       "Press the button to measure this server's own curve.")
    if bullets:
        out.append("**Where decode stops being bandwidth-bound:** " + _in_short(roofline, crossover, here, where)
                   + "\n" + "\n".join(bullets))
        if crossover and roofline.get("batch"):
            out.append("The two differ because the latency model also counts the cache and activation bytes that grow "
                       "with every row, and how fast the machine really ran each kind of "
                       "work; the estimate uses the bare ceilings and the batch-1 step alone. A GPU, with far more "
                       "FLOP/s per byte of bandwidth, keeps gaining to much larger batches.")
        else:
            out.append("A GPU, with far more FLOP/s per byte of bandwidth, keeps gaining to much larger batches.")
    return "\n\n".join(out)


def _in_short(roofline: dict[str, Any], crossover: float | None, here: dict[str, float] | None,
              where: str) -> str:
    """One answer first, then why the page gives several: each is a different machine or a different rule."""
    est = shown_estimate(roofline)[2] if roofline.get("batch") else None
    parts = []
    if here and here.get("batch"):
        parts.append(f"on this server at about batch **{shown_estimate(here)[2]:.0f}** by the roofline rule of "
                     "thumb")
        if est:
            parts.append(f"on {where}, with its own ridge, near **{est:.0f}** by the same rule")
    elif est:
        parts.append(f"at about batch **{est:.0f}** by the roofline rule of thumb")
    if crossover:
        whose = f"{where}'s" if here and here.get("batch") and where != "this machine" else "the"
        parts.append(f"{whose} latency model turns later, at ≈ **{crossover:.0f}**, because it counts "
                     "costs the rule of thumb leaves out")
    return ("; ".join(parts) + ". In detail:") if parts else ""


def _speeds(roofline: dict[str, float]) -> str:
    """": 102 GFLOP/s ÷ 15.80 GB/s" when a roofline estimate carries the ceilings it divided."""
    peak, bw = roofline.get("peak_flops_per_s"), roofline.get("bandwidth_bytes_per_s")
    if not peak or not bw:
        return ""
    return f": {sig3(peak / 1e9)} GFLOP/s ÷ {gbs_text(bw)} GB/s"


def shown_estimate(roofline: dict[str, float]) -> tuple[str, str, float]:
    """(ridge, intensity, batch) as printed: the ridge divided from the printed ceilings where the
    estimate carries them (as the live page's roofline text prints it), the batch from the printed
    ridge over the printed intensity, so every division a reader redoes comes out as printed."""
    peak, bw = roofline.get("peak_flops_per_s"), roofline.get("bandwidth_bytes_per_s")
    ridge = ridge_text(peak, bw) if peak and bw else f"{roofline['ridge_flop_per_byte']:.1f}"
    intensity = f"{roofline['decode_intensity']:.2f}"
    return ridge, intensity, float(ridge) / float(intensity)


def two_recordings(compare: dict[str, Any], batching: dict[str, Any], dates: tuple[str, str],
                   bandwidths: tuple[float | None, float | None]) -> str:
    """Why the cache recording's decode step and the batching recording's batch-1 step differ, when
    both panels show their recordings: two sessions, named by date and by the weight stream each latency model
    fitted (`dates` and `bandwidths` in bytes/s: cache recording first; "" without the figures)."""
    dyn = (_usable(compare).get("dynamic") or [])[1:]
    first = next((r for r in batching.get("rows", []) if r.get("batch") == 1), None)
    if not dyn or first is None or not all(bandwidths):
        return ""
    return (f"**Two recordings, two sessions:** the cache panel's recording ({dates[0]}) has decode steps "
            f"of **{_mean(dyn):.0f} ms** on average with the cache; this one ({dates[1]}) a batch-1 "
            f"step of **{_num(_step(first))} ms** (median). They were made on different days on the same kind of "
            f"machine, which streamed this model's weights at {gbs_text(bandwidths[0])} GB/s and "
            f"{gbs_text(bandwidths[1])} GB/s (each latency model's weight stream, not the ceiling a roofline "
            "divides by): a shared machine's speed moves between sessions, and the prompts differ too.")


def recording_beside_run(pairs: list[tuple[str, float, float]], recorded_roof: dict[str, float] | None = None,
                         here_roof: dict[str, float] | None = None) -> str:
    """Sentences putting a recording's number beside this server's for the same quantity, both
    figures given ('' without pairs). A reader who sees a prefill of 130 ms in the recording and of
    279 ms in their own run above must be told the two are different machines, not left to wonder.
    `pairs`: (what, ms on the recording machine, ms in the reader's last run here). With both machines'
    roofline estimates (which carry their calibrated ceilings), a sentence on how the two machines'
    ceilings differ: a prefill can be faster there while a decode step is faster here."""
    if not pairs:
        return ""
    lines = [f"**The recording beside your run:** {what} took **{_num(recorded)} ms** on the recording machine "
             f"and **{_num(here)} ms** in your last run on this server, "
             f"{_how_far(recorded, here)}." for what, recorded, here in pairs]
    ceilings = _ceilings_sentence(recorded_roof or {}, here_roof or {})
    if ceilings:
        lines.append(ceilings)
    lines.append("The recording was made at another moment on the computer its caption names, which may differ "
                 "from this one; a shared machine's speed also comes and goes with the other work on it, so compare "
                 "the recording's shapes, and press the button for this server's own milliseconds.")
    return " ".join(lines)


def _ceilings_sentence(recorded: dict[str, float], here: dict[str, float]) -> str:
    """The two machines' calibrated ceilings side by side, and which phase each one speeds up."""
    keys = ("peak_flops_per_s", "bandwidth_bytes_per_s")
    if not all(recorded.get(k) and here.get(k) for k in keys):
        return ""
    flops_there, bw_there = recorded[keys[0]], recorded[keys[1]]
    flops_here, bw_here = here[keys[0]], here[keys[1]]
    return (f"The two computers' calibrated ceilings differ too: matrix arithmetic at {sig3(flops_there / 1e9)} "
            f"GFLOP/s on the recording machine against {sig3(flops_here / 1e9)} here, memory bandwidth "
            f"{gbs_text(bw_there)} GB/s against {gbs_text(bw_here)} here. A long prompt's prefill leans on "
            "arithmetic and a decode step on weight reads, so the two can differ by different factors; a short "
            "prompt's prefill, a few dozen tokens, also carries the fixed cost of every layer, which neither "
            "ceiling measures.")


def _how_far(recorded: float, here: float) -> str:
    """The two times as a ratio in words, the slower side named."""
    ratio = here / recorded
    if 1 / 1.1 < ratio < 1.1:
        return "within 10% of each other"
    if ratio > 1:
        return f"{ratio:.1f}× as long here"
    return f"{1 / ratio:.1f}× as long on the recording machine"
