"""The lesson text: Markdown in assets/lesson/, with [[name]] slots filled from the run and from core.

Numbers in the prose are never typed by hand: each slot is filled from the current run (measured)
or from core's cost model and calibration (computed), and the sentences say which. A slot with
no value yet (before the first run) reads as an em dash.
"""

from __future__ import annotations

import math
import re
import statistics
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from app.shared.context import RunContext
from app.views.live import shown
from app.views.live.readings import beats_paper, paper_step_ms, past_ceiling
from app.views.live.shown import fmt_bytes, gbs_text, mb_text, ridge_text, sig3, signed_pct, term_ms, whole_ms
from core import perf
from core.trace import Event

LESSON_DIR = Path(__file__).resolve().parents[3] / "assets" / "lesson"
_SLOT = re.compile(r"\[\[([a-z0-9_]+)\]\]")


@cache
def raw(name: str) -> str:
    """assets/lesson/<name>.md as written, slots unfilled."""
    return (LESSON_DIR / f"{name}.md").read_text(encoding="utf-8")


def slots(template: str) -> list[str]:
    """The [[name]] slots a template uses, in order."""
    return _SLOT.findall(template)


def fill(template: str, values: dict[str, str] | None = None) -> str:
    """A template's [[name]] slots filled from `values`; a slot with no value reads as an em dash."""
    values = values or {}
    return _SLOT.sub(lambda m: values.get(m.group(1), "—"), template)


def text(name: str, values: dict[str, str] | None = None) -> str:
    """assets/lesson/<name>.md with its slots filled."""
    return fill(raw(name), values)


def reading(name: str, which: str, values: dict[str, str]) -> str:
    """The wording of one reading of a run (assets/lesson/readings/<name>.<which>.md), filled: the
    decision is made in code (a named function, tested as a value), the words live in the file."""
    return fill(raw(f"readings/{name}.{which}"), values).strip()


# A prefill this much slower than predicted was held up by something the model's work cannot explain
# (the latency section calls the same gap noise); below it, the prediction accounts for the time.
HELD_UP = 1.25
# A prefill right of the ridge that reaches this share of the compute roof (percent) is called
# compute-bound outright; below it, only in principle: it ran far below the roof.
NEAR_ROOF_PCT = 50


_MEMO: OrderedDict[tuple[int, int, int], dict[str, str]] = OrderedDict()
_MEMO_SIZE = 64
_memo_lock = threading.Lock()


def run_values(run_id: int | None, events: list[Event], ctx: RunContext | None) -> dict[str, str]:
    """values_for, computed once per state of a run (its id and how many events it has): the live
    sections, the after-run sections and the presenter's tour of one pass, and every later pass of
    a finished run, share one computation. Run ids are unique in the server, so one session never
    reads another's values; the memo keeps the last few dozen states only."""
    if run_id is None or ctx is None:
        return values_for(events, ctx)
    key = (run_id, len(events), id(ctx))
    with _memo_lock:
        hit = _MEMO.get(key)
        if hit is not None:
            _MEMO.move_to_end(key)
            return dict(hit)
    values = values_for(events, ctx)
    with _memo_lock:
        _MEMO[key] = values
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return dict(values)


# A prefill this far under its prediction (in % of its measured time) gets a reading of why; when the
# decode steps' median is under theirs by WHOLE_RUN_SLOW or more, the whole run was slower than the fit
# (the latency chart's numbers), not one moment of other work landing in the prefill.
PREFILL_MISS = -20.0
WHOLE_RUN_SLOW = -10.0


def prefill_miss(prefill_error: float, decode_error: float | None) -> str:
    """'' (no reading), 'burst' or 'whole_run': why a prefill ran slower than predicted."""
    if prefill_error >= PREFILL_MISS:
        return ""
    return "whole_run" if decode_error is not None and decode_error <= WHOLE_RUN_SLOW else "burst"


def cache_lead(ctx: RunContext) -> str:
    """Which answer the cache question gets from this run: 'off' (the run recomputed every step, so
    its own steps show the price of no cache), 'kept' (a follow-up: its prefill ran only the new
    tokens, so it is no measure of a step without the cache) or 'on' (its prefill is one: a step
    without the cache re-feeds at least the whole prompt)."""
    if ctx.cache == "none":
        return "off"
    return "kept" if ctx.kept else "on"


def values_for(events: list[Event], ctx: RunContext | None) -> dict[str, str]:
    """Slot values from a run's events and context; a slot with no value reads as a dash."""
    v: dict[str, str] = {"pause_note": pause_note(events)}
    if ctx is None:
        return v
    v["tied_note"] = ("; in this model the two are one shared matrix, stored once, so that share is one "
                      "matrix's bytes" if ctx.tied_embeddings else "")
    v.update(n_layers=str(ctx.n_layers), n_kv_heads=str(ctx.n_kv_heads), head_dim=str(ctx.head_dim),
             window=f"{ctx.context_window:,}", kv_per_token=fmt_bytes(ctx.kv_bytes_per_token),
             dtype_bytes=str(ctx.dtype_bytes), decode_ideal=f"{2 / ctx.dtype_bytes:g}",
             four_bit_share={4: "about a sixth", 2: "about a third"}.get(ctx.dtype_bytes, "a fraction"))
    if events:
        # the tokens the prefill ran: the whole prompt, or a follow-up's part the cache did not hold
        v["prompt_tokens"] = str(events[0].n_new if events[0].phase == "prefill" else ctx.prompt_len)
        v["prefill_what"] = (f"the {v['prompt_tokens']} new tokens ({ctx.kept} were cached)" if ctx.kept
                             else f"all {v['prompt_tokens']} prompt tokens")
    if ctx.weight_bytes:
        v["weights_mb"] = f"{ctx.weight_bytes / 1e6:.0f}"
        v["crossover_b1"] = f"{perf.crossover_tokens(ctx.weight_bytes, ctx.kv_bytes_per_token, 1):,.0f}"
    c = ctx.ceilings
    if c.bandwidth and c.peak_flops:
        v["ridge"] = ridge_text(c.peak_flops, c.bandwidth)  # the precision of the intensities it is compared with
        v["ceiling_gbs"] = f"{gbs_text(c.bandwidth)} GB/s"
    if events:
        v["ttft_ms"] = f"{perf.ttft_ms(events):.0f}"
        v["prefill_error_note"] = ""
        prefill_error = perf.prediction_error_pct(events[0].predicted_ms, events[0].latency_ms)
        if prefill_error is not None:  # the latency chart's prefill error, and the prediction it comes from
            v["prefill_error"] = signed_pct(prefill_error)
            v["prefill_predicted_ms"] = f"{events[0].predicted_ms:.0f}"
            decode_errors = [x for x in (perf.prediction_error_pct(e.predicted_ms, e.latency_ms)
                                         for e in events[1:]) if x is not None]
            decode_error = statistics.median(decode_errors) if decode_errors else None
            miss = prefill_miss(prefill_error, decode_error)
            if miss:
                v["prefill_error_note"] = reading("prefill_miss", miss, {
                    "decode_error": signed_pct(decode_error) if decode_error is not None else ""})
        v["kv_columns"] = str(events[-1].kv_seq_len)
        v["kv_read_positions"] = str(max(0, events[-1].kv_seq_len - 1))
        if events[0].cost:
            cost = events[0].cost
            v["prefill_intensity"] = f"{cost['flops']['total'] / cost['bytes']['total']:.1f}"
    if len(events) > 1:
        v["tpot_ms"] = sig3(perf.tpot_ms(events))  # as the tile prints it: one value per quantity
        if "weights_mb" in v:
            v["cache_lead"] = reading("cache_lead", cache_lead(ctx), v)
        if events[-1].cost:
            cost = events[-1].cost
            v["decode_intensity"] = f"{cost['flops']['total'] / cost['bytes']['total']:.2f}"
        achieved = perf.achieved_bandwidth(events)
        if achieved is not None:
            v["achieved_gbs"] = f"{gbs_text(achieved)} GB/s"  # as the tile above prints it
        v.update(_decode_budget(events, ctx))
    else:
        achieved = None
    if achieved and ctx.ceilings.bandwidth:
        side = "past" if past_ceiling(achieved, ctx.ceilings.bandwidth) else "short"
        v["ceiling_reading"] = reading("ceiling", side, v)
        v["slope_reading"] = reading("slope", side, v)
    if events:
        v.update(_prefill_figures(events[0], ctx))
    return v


# A mean decode step this many times the median is said to be pulled up by a few slow steps.
MEAN_PULLED = 1.05
# Below this many ms per step, the latency model's fitted cache term is too small to read a cost from.
KV_TERM_VISIBLE_MS = 0.05


def kv_share_reading(kv_term_ms: float | None, memory_term_ms: float | None, kv_bytes: float) -> str:
    """"copying" when the latency model fitted a cache term big enough to read beside its weights term
    (a byte of cache then has its own cost against a byte of weights), else "small": the cache is too
    small to show yet."""
    if not (memory_term_ms and kv_term_ms and kv_bytes):
        return "small"
    return "copying" if kv_term_ms >= KV_TERM_VISIBLE_MS else "small"


# A decode step this many times the run's median step reads as slow in the latency text.
SLOW_STEP = 1.5
# The redraw's work can run on past the wait (the browser drawing the update the redraw sent, when it
# runs on this computer): a slow step up to this many forwards after a boxed one counts as near it.
NEAR_WAIT = 2


def waited_steps(events: list[Event]) -> list[int]:
    """The forwards that waited for a page redraw just before they started: the latency chart's
    squares, so the text and the chart count the same steps."""
    return [k for k, e in enumerate(events) if e.waited_ms]


def pause_note(events: list[Event]) -> str:
    """How often the model waited for its own page's redraws (app.shared.turns), and where this
    run's slow steps fell against those waits: at or just after one, or away from every wait (other
    work on the cores). '' for a run that never waited (a replay, the command line). The words are
    assets/lesson/redraws/; `redraw_parts` decides which."""
    return "".join(" " + text(f"redraws/{name}", values).strip() for name, values in redraw_parts(events))


@dataclass(frozen=True)
class SlowSteps:
    """A run's decode steps slower than SLOW_STEP × its median step, by where they fell against the
    page's redraw waits: at a wait (boxed), up to NEAR_WAIT forwards after one, or away from all."""
    median_ms: float
    boxed: int
    after: int
    away: int

    @property
    def slow(self) -> int:
        return self.boxed + self.after + self.away


def slow_steps(events: list[Event], waited: set[int]) -> SlowSteps | None:
    """The run's slow decode steps counted against the waits; None with fewer than three decode steps."""
    decode = [(k, e.latency_ms) for k, e in enumerate(events) if e.phase == "decode"]
    if len(decode) < 3:
        return None
    median = statistics.median(ms for _, ms in decode)
    slow = [k for k, ms in decode if ms > SLOW_STEP * median]
    boxed = [k for k in slow if k in waited]
    after = [k for k in slow if k not in waited and any(0 < k - w <= NEAR_WAIT for w in waited)]
    return SlowSteps(median, len(boxed), len(after), len(slow) - len(boxed) - len(after))


def redraw_parts(events: list[Event]) -> list[tuple[str, dict[str, str]]]:
    """The redraw note as (fragment of assets/lesson/redraws/, its values): the waits, then which slow
    steps sit at or just after one and which do not; only those away from every wait are blamed on
    other work on the cores. Nothing for a run that never waited."""
    waited = waited_steps(events)
    if not waited:
        return []
    total_ms = sum(events[k].waited_ms for k in waited)
    total = f"{total_ms / 1000.0:.1f} s" if total_ms >= 100 else f"{total_ms:.0f} ms"
    parts = [("waits_once" if len(waited) == 1 else "waits_many", {"n": str(len(waited)), "total": total})]
    s = slow_steps(events, set(waited))
    if s is None:
        return parts
    # the limit is multiplied from the printed median, so 1.5 × 42.7 reads as 64
    limit = text("redraws/slow_limit", {"factor": f"{SLOW_STEP:g}", "median_ms": sig3(s.median_ms),
                                        "limit_ms": f"{SLOW_STEP * shown.sig3_value(s.median_ms):.0f}"}).strip()
    if s.slow == 0:
        return [*parts, ("slow_none", {"limit": limit})]
    if s.slow == 1:
        which = "one_boxed" if s.boxed else "one_after" if s.after else "one_away"
        parts.append((which, {"limit": limit}))
    else:
        counts = []
        if s.boxed == s.slow:
            counts.append(("part_all_boxed", s.boxed))
        elif s.boxed:
            counts.append(("part_boxed_one" if s.boxed == 1 else "part_boxed_many", s.boxed))
        if s.after:
            counts.append(("part_after", s.after))
        if s.away:
            counts.append(("part_away_one" if s.away == 1 else "part_away_many", s.away))
        listed = ", ".join(text(f"redraws/{name}", {"n": str(n)}).strip() for name, n in counts)
        parts.append(("slow_many", {"slow": str(s.slow), "limit": limit, "parts": listed}))
    if s.boxed or s.after:
        parts.append(("after_redraw", {}))
    if s.away:
        parts.append(("away_one" if s.away == 1 else "away_many", {"n": str(s.away)}))
    return parts


def _decode_budget(events: list[Event], ctx: RunContext) -> dict[str, str]:
    """Slots of "why is decode slower than on paper": the bytes-over-bandwidth estimate, and the
    median of each predicted part over the decode steps (Event.predicted_terms_ms)."""
    v: dict[str, str] = {}
    decode = [e for e in events if e.phase == "decode" and e.cost]
    if not decode:
        return v
    bw = ctx.ceilings.bandwidth
    step_bytes = statistics.median(e.cost["bytes"]["total"] for e in decode)
    v["step_mb"] = mb_text(step_bytes)
    if bw:  # one decimal: the weights-only and cache parts below differ by less than a millisecond
        paper_ms = paper_step_ms(decode, bw)
        v["paper_ms"] = f"{paper_ms:.1f}"
    terms = perf.median_terms_ms(decode)
    predicted = [e.predicted_ms for e in decode if e.predicted_ms is not None]
    if not terms or not predicted:
        return v
    pred = statistics.median(predicted)
    v["pred_ms"] = f"{pred:.0f}"
    for key in ("overhead", "memory", "kv", "compute"):
        v[f"p_{key}_ms"] = term_ms(terms.get(key, 0.0))
    weight_bytes = statistics.median(e.cost["bytes"]["weights"] + e.cost["bytes"]["activations"] for e in decode)
    kv_bytes = statistics.median(e.cost["bytes"]["kv_read"] + e.cost["bytes"]["kv_write"] for e in decode)
    if bw:  # the two parts of the dashed line, printed so that they add up to its printed time
        weights_ms, kv_ms = 1000.0 * weight_bytes / bw, 1000.0 * kv_bytes / bw
        if kv_ms >= 0.05:
            weights_ms, kv_ms = split_rounded([weights_ms, kv_ms], paper_ms, 1)
        v["paper_weights_ms"] = f"{weights_ms:.1f}"
        v["paper_kv_ms"] = term_ms(kv_ms)  # below 0.05 ms: two significant figures, next to nothing in the sum
    if terms.get("memory"):
        weights_gbs = round(weight_bytes / (terms["memory"] / 1e3) / 1e9, 1)  # a fitted figure, one decimal
        v["weights_gbs"] = f"{weights_gbs:.1f} GB/s"
        if bw:
            side = "past" if weights_gbs > shown.gbs_value(bw) else "short"
            v["weights_reading"] = reading("weights_stream", side, {"ceiling_gbs": f"{gbs_text(bw)} GB/s"})
    share = {"kv_bytes": fmt_bytes(kv_bytes), "weight_bytes": fmt_bytes(weight_bytes)}
    if terms.get("memory") and terms.get("kv") and kv_bytes:
        share["kv_cost_ratio"] = f"{(terms['kv'] / kv_bytes) / (terms['memory'] / weight_bytes):.1f}"
    v["kv_sentence"] = reading("kv_share", kv_share_reading(terms.get("kv"), terms.get("memory"), kv_bytes), share)
    # median against median: a few slow outliers pull the mean up and would read as a missing term
    measured = statistics.median(e.latency_ms for e in decode)
    v["measured_median_ms"] = sig3(measured)  # as the batching panel's "your last run" prints it
    if bw:  # the closing paragraph sets the printed paper time against the printed median step
        side = "past" if shown.sig3_value(measured) <= paper_ms else "short"
        v["paper_share_reading"] = reading("paper_share", side, v)
    mean = statistics.fmean(e.latency_ms for e in decode)
    v["mean_note"] = " " + reading("mean_note", "pulled", {"mean_ms": f"{mean:.0f}"}) if mean > MEAN_PULLED * measured else ""
    fast = sum(1 for e in decode if e.predicted_ms is not None and e.predicted_ms < e.latency_ms)
    # from the printed figures, so the gap a reader subtracts is the gap the sentence gives
    v["rest_sentence"] = _rest_sentence(shown.sig3_value(measured), shown.whole_value(pred), fast / len(decode))
    if "paper_weights_ms" in v:
        # the answer sets the mean step (TPOT, as the tile prints it) against the printed paper time
        end = paper_end(pred, measured, shown.sig3_value(perf.tpot_ms(events)), beats_paper(events, ctx))
        v["paper_end"] = reading("paper_end", end, {})
        v["paper_adds"] = reading("paper_adds", paper_adds(terms.get("memory", 0.0), weights_ms,
                                                         terms.get("compute", 0.0), pred), {})
    return v


# The short answer to "why is decode slower than on paper" walks from paper to the clock in two
# steps a reader need not add up: bytes ÷ bandwidth, then the latency model's prediction (what it adds
# to paper: fixed costs per layer and arithmetic, and the weights streaming slower than the benchmark
# when its fit says so), then the mean step as measured, with one reading of how it sits against the
# prediction (readers given a sum of three signed parts to check got lost in it). Each reading is a
# named decision on this run's figures; its words are assets/lesson/readings/paper_end.<reading>.md.
PAPER_ENDS = ("close", "outliers", "run_slow", "faster", "beat_paper")
# What the prediction adds to paper, named: the fixed costs always; slower streaming when the fitted
# weight stream is slower than the calibrated ceiling; the arithmetic when it is at least this share
# of the prediction (a CPU multiplies one row per matrix as fast as the weights arrive, so a decode
# step's arithmetic is a fraction of a millisecond where it is calibrated per row count).
PAPER_ADDS = ("plain", "stream", "plain_bare", "stream_bare")
ARITHMETIC_NAMED = 0.05


def paper_adds(memory_ms: float, weights_ms: float, compute_ms: float, predicted_ms: float) -> str:
    """Which of PAPER_ADDS the paper answer names (the parts in ms, medians over the steps)."""
    name = "stream" if memory_ms > weights_ms else "plain"
    return name if compute_ms >= ARITHMETIC_NAMED * predicted_ms else f"{name}_bare"
OFF_PREDICTION = 0.05  # the mean step this far from the median prediction is said to be off it


def paper_end(predicted_ms: float, median_ms: float, mean_ms: float, beat_paper: bool = False) -> str:
    """Which of PAPER_ENDS closes the answer: the mean step beat paper; it sits within OFF_PREDICTION
    of the prediction; above it mostly through a few slow steps (mean over median) or through the
    whole run (median over prediction); or below it."""
    if beat_paper:
        return "beat_paper"
    if abs(mean_ms - predicted_ms) <= OFF_PREDICTION * predicted_ms:
        return "close"
    if mean_ms < predicted_ms:
        return "faster"
    return "outliers" if mean_ms - median_ms >= median_ms - predicted_ms else "run_slow"


def split_rounded(parts: list[float], total: float, digits: int) -> list[float]:
    """`parts` rounded to `digits` decimals so that they add up to `total` (a printed, rounded sum):
    each part is rounded down, then the units still missing go to the parts that lost the most
    (largest remainder), so every part stays within one unit of its own value."""
    unit = 10.0 ** -digits
    scaled = [p / unit for p in parts]
    counts = [math.floor(x) for x in scaled]
    missing = round(total / unit) - sum(counts)
    by_remainder = sorted(range(len(parts)), key=lambda i: scaled[i] - counts[i], reverse=True)
    for k in range(abs(missing)):
        if missing > 0:
            counts[by_remainder[k % len(parts)]] += 1
        else:  # the printed total came out below the parts' floors: take from the smallest remainders
            counts[by_remainder[-1 - k % len(parts)]] -= 1
    return [round(c * unit, digits) for c in counts]


# The median measured step against the median prediction: within this share (and at least 1 ms) the
# prediction "matches"; a gap on the slow side in at least SYSTEMATIC of the steps is the whole run.
MATCHES_WITHIN = 0.03
SYSTEMATIC = 0.9


def rest_reading(measured_ms: float, predicted_ms: float, share_too_fast: float = 0.5) -> str:
    """What the gap between the median measured and median predicted step says (a name of
    assets/lesson/readings/rest.<name>.md): "matches", "systematic" (slower in nearly every step),
    "scattered" (slower, not systematically) or "faster"."""
    gap = measured_ms - predicted_ms
    if abs(gap) < max(1.0, MATCHES_WITHIN * measured_ms):
        return "matches"
    if gap > 0:
        return "systematic" if share_too_fast >= SYSTEMATIC else "scattered"
    return "faster"


def _rest_sentence(measured_ms: float, predicted_ms: float, share_too_fast: float = 0.5) -> str:
    """rest_reading's words, with the gap as the reader subtracts it from the printed figures."""
    gap = measured_ms - predicted_ms
    gap_text = f"{abs(gap):.1f}" if abs(gap) < 10 else f"{abs(gap):.0f}"  # 41 − 37.5 reads 3.5, not 4
    return reading("rest", rest_reading(measured_ms, predicted_ms, share_too_fast),
                   {"gap_ms": gap_text, "within_ms": str(max(1, round(abs(gap)))), "share": f"{share_too_fast:.0%}"})


def _prefill_figures(prefill: Event, ctx: RunContext) -> dict[str, str]:
    """Slots of the prefill sentences: FLOPs per byte of weights, achieved FLOP/s against the peak."""
    v: dict[str, str] = {"width": str(ctx.n_heads * ctx.head_dim)}
    if not prefill.cost or prefill.latency_ms <= 0:
        return v
    flops = prefill.cost["flops"]["total"]
    weights = prefill.cost["bytes"]["weights"]
    rows = prefill.cost["n_new"] * prefill.cost.get("batch", 1)
    v["ideal_flop_per_byte"] = f"{2 * rows / ctx.dtype_bytes:.0f}"
    if weights:
        v["prefill_flop_per_weight_byte"] = f"{flops / weights:.0f}"
        # weights that multiply every prompt row: the projections and the MLP (2 FLOPs per weight per row)
        per_row = prefill.cost["flops"]["attn_proj"] + prefill.cost["flops"]["mlp"]
        busy_bytes = per_row / (2 * rows) * ctx.dtype_bytes
        v["idle_weight_pct"] = f"{max(0.0, 100 * (1 - busy_bytes / weights)):.0f}"
    achieved = flops / (prefill.latency_ms / 1e3)
    # three figures: whole GFLOP/s divided by the roof can miss the printed share (12 / 28 for 12.6 / 28)
    v["prefill_gflops"] = sig3(achieved / 1e9)
    peak = ctx.ceilings.peak_flops
    if peak:
        v["peak_gflops"] = sig3(peak / 1e9)
        v["prefill_pct_of_peak"] = f"{100 * achieved / peak:.0f}"
    bw = ctx.ceilings.bandwidth
    if peak and bw and prefill.cost["bytes"]["total"]:
        ridge = shown.ridge_value(peak, bw)
        intensity = flops / prefill.cost["bytes"]["total"]
        # the bytes' time divided from the printed MB and GB/s, so a reader's own division agrees
        bytes_ms = whole_ms(shown.mb_value(prefill.cost["bytes"]["total"]) / shown.gbs_divisor(bw))
        predicted = sum((prefill.predicted_terms_ms or {}).values())
        measured = prefill.latency_ms
        pct = v["prefill_pct_of_peak"]  # roof time ÷ measured time is achieved ÷ peak: one figure, printed once
        split = measured <= HELD_UP * predicted if predicted > 0 else False
        r = prefill_readings(intensity, ridge, int(pct), predicted > 0, split,
                             not split or _arithmetic_most(prefill.predicted_terms_ms))
        v["prefill_vs_ridge"] = reading("prefill_vs_ridge", r["side"], {"ridge": f"{ridge:.1f}"})
        if r["side"] == "left":
            v["prefill_verdict"] = _left_of_ridge_verdict(intensity, achieved, bw)
            return v
        words = {"answer": reading("prefill_answer", r["answer"], {}), "intensity": f"{intensity:.1f}",
                 "ridge": f"{ridge:.1f}", "mb": mb_text(prefill.cost["bytes"]["total"]), "bytes_ms": bytes_ms,
                 "gbs": gbs_text(bw), "roof_ms": sig3(1000.0 * flops / peak), "measured_ms": sig3(measured),
                 "pct": pct, "peak_gflops": v["peak_gflops"], "predicted_ms": f"{predicted:.0f}",
                 # the gap divided from the printed figures, so 220 − 134 reads as the printed 86
                 "gap_ms": f"{shown.sig3_value(measured) - shown.whole_value(predicted):.0f}"}
        tail = (_prefill_split(prefill.predicted_terms_ms, prefill.cost["n_new"]) if r["tail"] == "split"
                else reading("prefill_tail", r["tail"], words))
        v["prefill_verdict"] = " ".join((reading("prefill_head", r["side"], words),
                                         reading("prefill_timed", r["timed"], words), tail))
    return v


# A prefill whose intensity is within this share of the ridge is "at the ridge": its bytes and its
# FLOPs would take about as long, and the verdict says neither limit dominates.
AT_RIDGE = 0.1


def at_the_ridge(intensity: float, ridge: float) -> bool:
    return ridge > 0 and abs(intensity / ridge - 1.0) <= AT_RIDGE


def prefill_readings(intensity: float, ridge: float, pct_of_roof: int, predicted: bool, split: bool,
                     mostly_arithmetic: bool) -> dict[str, str]:
    """The prefill verdict's readings, as names of assets/lesson/readings/<part>.<name>.md:
    - side: "ridge" within AT_RIDGE of it, "right" or "left" of it;
    - answer (right or at the ridge): "principle" / "principle_far" when most of its predicted time went
      to other work than arithmetic (far: below NEAR_ROOF_PCT of the roof), "held_up" when it took more
      than HELD_UP times its prediction, else "yes" (near the roof) or "yes_slow";
    - timed: "near" or "far" from the roof; tail: "unpredicted" (no prediction), "split" (the prediction's parts) or "held_up"."""
    side = "ridge" if at_the_ridge(intensity, ridge) else "right" if intensity >= ridge else "left"
    near = pct_of_roof >= NEAR_ROOF_PCT
    if not mostly_arithmetic:
        answer = "principle" if near else "principle_far"
    elif not split:
        answer = "held_up"
    else:
        answer = "yes" if near else "yes_slow"
    return {"side": side, "answer": answer, "timed": "near" if near else "far",
            "tail": "unpredicted" if not predicted else "split" if split else "held_up"}


# A forward left of the ridge that reaches less than this share of the bandwidth slope at its intensity
# is held back by more than its bytes (fixed costs, thin matrix products), and the verdict says so.
UNDER_SLOPE = 0.8


def _left_of_ridge_verdict(intensity: float, achieved_flops: float, bandwidth: float) -> str:
    """The prefill verdict when the prefill sits left of the ridge: the roofline caps it by its bytes;
    whether it reached that cap decides whether the bytes alone set its pace."""
    cap = intensity * bandwidth  # FLOP/s the bandwidth slope allows at this intensity
    share = achieved_flops / cap if cap else 1.0
    return reading("prefill_left", "under" if share < UNDER_SLOPE else "bytes",
                   {"intensity": f"{intensity:.1f}", "share": f"{100 * share:.0f}"})


def _split_ms(terms_ms: dict[str, float]) -> tuple[int, int, int]:
    """A prefill's predicted arithmetic, moved bytes and fixed costs in whole ms adding up to the total."""
    total = sum(terms_ms.values())
    arithmetic = terms_ms.get("compute", 0.0) + terms_ms.get("attention", 0.0)
    moving = terms_ms.get("memory", 0.0) + terms_ms.get("kv", 0.0)
    a, m, f = (int(x) for x in split_rounded([arithmetic, moving, total - arithmetic - moving], round(total), 0))
    return a, m, f


def _arithmetic_most(terms_ms: dict[str, float]) -> bool:
    a, m, f = _split_ms(terms_ms)
    return 2 * a >= a + m + f


def _prefill_split(terms_ms: dict[str, float], tokens: int) -> str:
    """The latency model's prediction of a prefill split into arithmetic, moved bytes and fixed costs,
    printed in whole ms that add up to the printed total, and which of them sets its time."""
    a, m, f = _split_ms(terms_ms)
    return reading("prefill_split", "arithmetic" if _arithmetic_most(terms_ms) else "other",
                   {"total_ms": str(a + m + f), "arithmetic_ms": str(a), "moving_ms": str(m), "fixed_ms": str(f),
                    "tokens": str(tokens)})


# A head whose vectors are this many times as long as the others' (mean over positions) stands out
# in the layer chart; the sentence under it then names the head and says why.
STANDS_OUT = 1.3
# A brightest head that is the longest at this share of positions owes it to its projection weights.
WEIGHTS_SHARE = 0.8


def layer_heads_sentence(events: list[Event], n_kv_heads: int, layer: int, which: str = "key",
                         batch: int = 1) -> str:
    """What the brightness of the per-layer head chart is, and, when one head is brighter than the
    rest, by how much and where that comes from ('' without the run's vectors): layer_heads in words."""
    found = layer_heads(events, n_kv_heads, layer, which)
    if found is None:
        return ""
    name, values = found
    what = reading("heads_what", "batch" if batch > 1 else "one", values)
    return what if name is None else what + " " + reading("heads", name, values)


def layer_heads(events: list[Event], n_kv_heads: int, layer: int,
                which: str = "key") -> tuple[str | None, dict[str, str]] | None:
    """(head_reading, its values) counted from the run's vectors: each KV head's mean length, the
    brightest head and how often it is the longest; (None, values) for a layer of one KV head, None
    without vectors.

    Every KV head of a layer projects the same input vector at a position, so a head that is the
    longest at nearly every position owes it to its own projection weights, not to the tokens."""
    rows: list[list[float]] = [[] for _ in range(n_kv_heads)]
    for e in events:
        if e.kv_norms:
            for h, norms in enumerate(e.kv_norms[which][layer][:n_kv_heads]):
                rows[h].extend(norms)
    if not rows or not rows[0]:
        return None
    values = {"which": which, "layer": str(layer)}
    if n_kv_heads < 2:
        return None, values
    means = [statistics.fmean(r) for r in rows]
    top = max(range(n_kv_heads), key=means.__getitem__)
    others = statistics.fmean(m for h, m in enumerate(means) if h != top)
    values.update(top=str(top), top_mean=f"{means[top]:.1f}", others_mean=f"{others:.1f}")
    if head_reading(means[top], others, 1.0) == "flat":
        return "flat", values
    n = len(rows[top])
    longest = sum(1 for i in range(n) if all(rows[top][i] >= rows[h][i] for h in range(n_kv_heads))) / n
    values.update(n=str(n), ratio=f"{means[top] / others:.1f}", longest_pct=f"{longest:.0%}")
    return head_reading(means[top], others, longest), values


def head_reading(top_mean: float, others_mean: float, longest: float) -> str:
    """"flat" when no KV head is STANDS_OUT times the others' mean length; else "bright", or "weights"
    when the brightest head is the longest at WEIGHTS_SHARE of the positions or more: then its own
    projection weights, not particular tokens, make it so."""
    if not others_mean or top_mean < STANDS_OUT * others_mean:
        return "flat"
    return "weights" if longest >= WEIGHTS_SHARE else "bright"
