"""The words of the on-demand panels' details (cache comparison, batching, a recording beside a run).

Each summary is built in two steps: `*_parts` decides which fragments of assets/lesson/panels/ the
result reads as (named decisions with named thresholds, tested as values) and the numbers each one
is filled with, as the page prints them; `render` fills the fragments. A summary is a list of
paragraphs, a paragraph a list of parts, a part a fragment's name and its slot values.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from app.views.live import lesson
from app.views.live.panel_figures import (
    mean,
    shown_estimate,
    step_ms,
    three_figures,
    throughput_gain,
    tokens_per_s,
    usable_modes,
)
from app.views.live.shown import gbs_text, sig3

Part = tuple[str, dict[str, str]]
Paragraphs = list[list[Part]]

# The latency model's no-cache line is flagged when its median ratio to the measured forwards is off
# by more than this (beyond the typical error of its other predictions).
NO_CACHE_OFF = 0.10
# Static and dynamic cache totals this close read as the same time: the machine's noise.
STATIC_NOISE = 0.10
# A recording's time and the reader's this close read as the same.
SAME_TIME = 0.10
# A batch step that grew this many times more than the latency model expected gets its own sentence.
UNFORESEEN = 1.2


def words(name: str, values: dict[str, str] | None = None) -> str:
    """assets/lesson/panels/<name>.md filled (a fragment's leading space, if any, kept)."""
    return lesson.text(f"panels/{name}", values).rstrip("\n")


def render(paragraphs: Paragraphs) -> str:
    """The paragraphs as Markdown: parts run on in one paragraph, a part that is a list item on its own line."""
    out = []
    for paragraph in paragraphs:
        text = ""
        for name, values in paragraph:
            part = words(name, values).strip()
            text = part if not text else text + ("\n" if part.startswith("- ") else " ") + part
        if text:
            out.append(text)
    return "\n\n".join(out)


def _pct(fraction: float) -> str:
    return f"{fraction:.0%}"


def lead(recorded: bool) -> str:
    """The bold opening that says whose measurement follows: this server's or the recording machine's."""
    return words("lead_recorded" if recorded else "lead_here")


# ---- the cache comparison ----------------------------------------------------------------------

def no_cache_gap(off: list[float], predicted: list[float | None]) -> tuple[str, float] | None:
    """("below" | "above", how far) when the latency model's no-cache line runs off the measured
    forwards by more than NO_CACHE_OFF (median of predicted ÷ measured), else None."""
    pairs = [(m, p) for m, p in zip(off, predicted, strict=False) if p]
    if not pairs:
        return None
    gap = statistics.median(p / m for m, p in pairs) - 1  # < 0: the prediction is too fast
    if abs(gap) <= NO_CACHE_OFF:
        return None
    return ("below" if gap < 0 else "above"), abs(gap)


def static_verdict(ratio: float) -> str:
    """"noise" when the static and dynamic totals are within STATIC_NOISE of each other, else "ratio"."""
    return "noise" if abs(ratio - 1) < STATIC_NOISE else "ratio"


def compare_parts(result: dict[str, Any], recorded: bool = False) -> Paragraphs:
    """The cache comparison's details: the totals with and without the cache, the no-cache line's
    miss when there is one, static against dynamic. Nothing before the cache-on mode has two forwards.
    `recorded`: the result is a recording bundled with the app, made on another machine."""
    modes = usable_modes(result)
    if "dynamic" not in modes or len(modes["dynamic"]) < 2:
        return []
    dyn = modes["dynamic"]
    out: Paragraphs = []
    if "none" in modes:
        off = modes["none"]
        paragraph: list[Part] = [("cache_off", {
            "lead": lead(recorded), "n": str(len(dyn)), "off_s": f"{sum(off) / 1000:.1f}",
            "off_ratio": f"{sum(off) / sum(dyn):.1f}", "on_s": f"{sum(dyn) / 1000:.1f}",
            "prompt": str(result.get("prompt_len", 0)), "off_step": f"{mean(off[1:]):.0f}",
            "on_step": f"{mean(dyn[1:]):.0f}"})]
        gap = no_cache_gap(off, (result.get("predicted") or {}).get("none") or [])
        if gap is not None:
            side, size = gap
            whose = words("no_cache_whose_recorded" if recorded else "no_cache_whose_here")
            paragraph.append((f"no_cache_{side}", {"whose": whose, "gap_pct": _pct(size)}))
        out.append(paragraph)
    if "static" in modes:
        ratio = sum(modes["static"]) / sum(dyn)
        verdict = static_verdict(ratio)
        verdict_words = words(f"static_{verdict}", {"noise_pct": _pct(STATIC_NOISE), "ratio": f"{ratio:.2f}"})
        out.append([("static_cache", {"static_s": f"{sum(modes['static']) / 1000:.1f}",
                                      "dyn_s": f"{sum(dyn) / 1000:.1f}", "verdict": verdict_words})])
    return out


def compare_summary(result: dict[str, Any], recorded: bool = False) -> str:
    """compare_parts as Markdown ('' before any data)."""
    return render(compare_parts(result, recorded))


# ---- a recording beside the reader's run -------------------------------------------------------

def how_far(recorded: float, here: float) -> tuple[str, float]:
    """("close", ratio) within SAME_TIME of each other, else which side took longer ("here" or
    "there") and by how many times."""
    ratio = here / recorded
    if 1 / (1 + SAME_TIME) < ratio < 1 + SAME_TIME:
        return "close", ratio
    return ("here", ratio) if ratio > 1 else ("there", 1 / ratio)


def beside_run_parts(pairs: list[tuple[str, float, float]], recorded_roof: dict[str, float] | None = None,
                     here_roof: dict[str, float] | None = None) -> Paragraphs:
    """A recording's number beside this server's for the same quantity, both given (nothing without
    pairs). A reader who sees one prefill time in the recording and another in their own run must be
    told the two are different machines, not left to wonder. `pairs`: (what, ms on the
    recording machine, ms in the reader's last run here). With both machines' roofline estimates
    (which carry their calibrated ceilings), how the two machines' ceilings differ: a prefill can be
    faster there while a decode step is faster here."""
    if not pairs:
        return []
    paragraph: list[Part] = []
    for what, there, here in pairs:
        side, ratio = how_far(there, here)
        paragraph.append(("beside_run", {"what": what, "there_ms": three_figures(there), "here_ms": three_figures(here),
                                         "how_far": words(f"how_far_{side}", {"close_pct": _pct(SAME_TIME),
                                                                              "ratio": f"{ratio:.1f}"})}))
    keys = ("peak_flops_per_s", "bandwidth_bytes_per_s")
    there_roof, mine = recorded_roof or {}, here_roof or {}
    if all(there_roof.get(k) and mine.get(k) for k in keys):
        paragraph.append(("ceilings", {"flops_there": sig3(there_roof[keys[0]] / 1e9),
                                       "flops_here": sig3(mine[keys[0]] / 1e9),
                                       "bw_there": gbs_text(there_roof[keys[1]]), "bw_here": gbs_text(mine[keys[1]])}))
    paragraph.append(("recording_moment", {}))
    return [paragraph]


def recording_beside_run(pairs: list[tuple[str, float, float]], recorded_roof: dict[str, float] | None = None,
                         here_roof: dict[str, float] | None = None) -> str:
    """beside_run_parts as Markdown ('' without pairs)."""
    return render(beside_run_parts(pairs, recorded_roof, here_roof))


def two_recordings_parts(compare: dict[str, Any], batching: dict[str, Any], dates: tuple[str, str],
                         bandwidths: tuple[float | None, float | None]) -> Paragraphs:
    """Why the cache recording's decode step and the batching recording's batch-1 step differ, when
    both panels show their recordings: two sessions, named by date and by the weight stream each
    latency model fitted (`dates` and `bandwidths` in bytes/s: cache recording first; nothing
    without the figures)."""
    dyn = (usable_modes(compare).get("dynamic") or [])[1:]
    first = next((r for r in batching.get("rows", []) if r.get("batch") == 1), None)
    if not dyn or first is None or not all(bandwidths):
        return []
    return [[("two_recordings", {"date_cache": dates[0], "date_batching": dates[1],
                                 "cache_step": f"{mean(dyn):.0f}", "batch1_step": three_figures(step_ms(first)),
                                 "bw_cache": gbs_text(bandwidths[0]), "bw_batching": gbs_text(bandwidths[1])})]]


def two_recordings(compare: dict[str, Any], batching: dict[str, Any], dates: tuple[str, str],
                   bandwidths: tuple[float | None, float | None]) -> str:
    """two_recordings_parts as Markdown ('' without the figures)."""
    return render(two_recordings_parts(compare, batching, dates, bandwidths))


# ---- batching ----------------------------------------------------------------------------------

def unforeseen_jump(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], float, float] | None:
    """(row a, row b, predicted a, predicted b): the measured step up the latency model least
    expected, when it grew more than UNFORESEEN times what was predicted; None otherwise."""
    worst, worst_excess = None, UNFORESEEN
    for a, b in itertools.pairwise(rows):
        pa, pb = a.get("decode step ms (predicted)"), b.get("decode step ms (predicted)")
        if not pa or not pb:
            continue
        excess = (step_ms(b) / step_ms(a)) / (pb / pa)
        if excess > worst_excess:
            worst, worst_excess = (a, b, pa, pb), excess
    return worst


def crossover_side(rows: list[dict[str, Any]], crossover: float) -> tuple[str, dict[str, Any] | None]:
    """("past", None) when the latency model's crossover lies beyond the measured batches, else
    ("inside", the last measured row at or below it)."""
    if crossover > rows[-1]["batch"]:
        return "past", None
    below = [r for r in rows if r["batch"] <= crossover] or rows[:1]
    return "inside", below[-1]


def _speeds(roofline: dict[str, float]) -> str:
    """": 102 GFLOP/s ÷ 15.80 GB/s" when a roofline estimate carries the ceilings it divided."""
    peak, bw = roofline.get("peak_flops_per_s"), roofline.get("bandwidth_bytes_per_s")
    if not peak or not bw:
        return ""
    return words("speeds", {"gflops": sig3(peak / 1e9), "gbs": gbs_text(bw)})


def _in_short(roofline: dict[str, Any], crossover: float | None, here: dict[str, float] | None,
              where: str) -> str:
    """One answer first, then why the page gives several: each is a different machine or a different rule."""
    est = shown_estimate(roofline)[2] if roofline.get("batch") else None
    parts = []
    if here and here.get("batch"):
        parts.append(words("in_short_here", {"batch": f"{shown_estimate(here)[2]:.0f}"}))
        if est:
            parts.append(words("in_short_there", {"where": where, "batch": f"{est:.0f}"}))
    elif est:
        parts.append(words("in_short_rule", {"batch": f"{est:.0f}"}))
    if crossover:
        whose = f"{where}'s" if here and here.get("batch") and where != "this machine" else "the"
        parts.append(words("in_short_model", {"whose": whose, "batch": f"{crossover:.0f}"}))
    return "; ".join(parts)


def batching_parts(result: dict[str, Any], where: str = "this machine",
                   here: dict[str, float] | None = None) -> Paragraphs:
    """What the batching result says (nothing before two batch sizes are measured): the step time and
    throughput at both ends (measured), the gain of each doubling, the step the latency model least
    expected, and the batch where decode stops being bandwidth-bound, twice: the plain roofline
    estimate (computed) and the latency model's crossover (predicted). `here`: the same roofline
    estimate for this server (app.views.live.jobs.roofline_batch_with), when the result shown was
    measured on another machine. `where`: "this machine", or "the recording machine" for a recording."""
    rows = result.get("rows", [])
    if len(rows) < 2:
        return []
    first, last = rows[0], rows[-1]
    doublings = [(a["batch"], b["batch"], throughput_gain(a, b)) for a, b in itertools.pairwise(rows)]
    out: Paragraphs = [[("batching_growth", {
        "lead": lead(where != "this machine"), "b0": str(first["batch"]), "b1": str(last["batch"]),
        "step_growth": f"{step_ms(last) / step_ms(first):.1f}", "t0": f"{step_ms(first):g}", "t1": f"{step_ms(last):g}",
        "rows_ratio": f"{last['batch'] / first['batch']:g}", "gain": f"{throughput_gain(first, last):.1f}",
        "r0": three_figures(tokens_per_s(first)), "r1": three_figures(tokens_per_s(last)),
        "doublings": ", ".join(f"×{g:.2f} ({a} → {b})" for a, b, g in doublings),
        "ideal": f"{doublings[-1][1] / doublings[-1][0]:.0f}"})]]
    jump = unforeseen_jump(rows)
    if jump is not None:
        a, b, pa, pb = jump
        out.append([("batching_jump", {
            "a": str(a["batch"]), "b": str(b["batch"]), "measured_pct": f"{100 * (step_ms(b) / step_ms(a) - 1):.0f}",
            "ta": three_figures(step_ms(a)), "tb": three_figures(step_ms(b)), "predicted_pct": f"{100 * (pb / pa - 1):.0f}",
            "pa": three_figures(pa), "pb": three_figures(pb)})])
    roofline = result.get("roofline") or {}
    crossover = result.get("compute_bound_from")
    bullets: list[Part] = []
    if roofline.get("batch"):
        context = result.get("prompt_len")
        ridge, intensity, est = shown_estimate(roofline)
        bullets.append(("batching_roofline", {
            "intensity": intensity, "at": words("roofline_at", {"context": str(context)}) if context else "",
            "where": where, "ridge": ridge, "speeds": _speeds(roofline), "batch": f"{est:.0f}"}))
    if crossover:
        side, at = crossover_side(rows, crossover)
        side_words = words(f"crossover_{side}", {} if at is None else {
            "gain": f"{throughput_gain(at, last):.2f}", "at": str(at["batch"]), "b1": str(last["batch"])})
        bullets.append(("batching_latency", {"crossover": f"{crossover:.0f}", "side": side_words}))
    if here and here.get("batch"):
        ridge_here, intensity_here, est_here = shown_estimate(here)
        bullets.append(("batching_here", {"speeds": _speeds(here), "ridge": ridge_here,
                                          "intensity": intensity_here, "batch": f"{est_here:.0f}", "where": where}))
    if bullets:
        in_short = _in_short(roofline, crossover, here, where)
        head = ("batching_where", {"in_short": in_short}) if in_short else ("batching_where_bare", {})
        out.append([head, *bullets])
        out.append([("close_both" if crossover and roofline.get("batch") else "close_gpu", {})])
    return out


def batching_summary(result: dict[str, Any], where: str = "this machine",
                     here: dict[str, float] | None = None) -> str:
    """batching_parts as Markdown ('' before two batch sizes)."""
    return render(batching_parts(result, where, here))
