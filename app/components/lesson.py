"""The lesson text: Markdown in assets/lesson/, with [[name]] slots filled from the run and from core.

Numbers in the prose are never typed by hand: each slot is filled from the current run (measured)
or from core's cost model and calibration (computed), and the sentences say which. A slot with
no value yet (before the first run) reads as an em dash.
"""

from __future__ import annotations

import re
import statistics
from functools import cache
from pathlib import Path

from app.components.figures import fmt_bytes, signed_pct
from app.services.context import RunContext
from core import perf
from core.trace import Event

LESSON_DIR = Path(__file__).resolve().parents[2] / "assets" / "lesson"
_SLOT = re.compile(r"\[\[([a-z0-9_]+)\]\]")


@cache
def _raw(name: str) -> str:
    return (LESSON_DIR / f"{name}.md").read_text(encoding="utf-8")


def fill(template: str, values: dict[str, str] | None = None) -> str:
    """A template's [[name]] slots filled from `values`; a slot with no value reads as an em dash."""
    values = values or {}
    return _SLOT.sub(lambda m: values.get(m.group(1), "—"), template)


def text(name: str, values: dict[str, str] | None = None) -> str:
    """assets/lesson/<name>.md with its slots filled."""
    return fill(_raw(name), values)


# A prefill this much slower than predicted was held up by something the model's work cannot explain
# (the latency section calls the same gap noise); below it, the prediction accounts for the time.
HELD_UP = 1.25


def values_for(events: list[Event], ctx: RunContext | None) -> dict[str, str]:
    """Slot values from a run's events and context; a slot with no value reads as a dash."""
    v: dict[str, str] = {"pause_note": pause_note(events)}
    if ctx is None:
        return v
    v.update(n_layers=str(ctx.n_layers), n_kv_heads=str(ctx.n_kv_heads), head_dim=str(ctx.head_dim),
             window=f"{ctx.context_window:,}", kv_per_token=fmt_bytes(ctx.kv_bytes_per_token),
             dtype_bytes=str(ctx.dtype_bytes), decode_ideal=f"{2 / ctx.dtype_bytes:g}",
             four_bit_share={4: "about a sixth", 2: "about a third"}.get(ctx.dtype_bytes, "a fraction"))
    if events:
        v["prompt_tokens"] = str(ctx.prompt_len)
    if ctx.weight_bytes:
        v["weights_mb"] = f"{ctx.weight_bytes / 1e6:.0f}"
        v["crossover_b1"] = f"{perf.crossover_tokens(ctx.weight_bytes, ctx.kv_bytes_per_token, 1):,.0f}"
    c = ctx.ceilings
    if c.bandwidth and c.peak_flops:
        v["ridge"] = f"{c.peak_flops / c.bandwidth:.1f}"  # the precision of the intensities it is compared with
        v["ceiling_gbs"] = f"{c.bandwidth / 1e9:.1f} GB/s"
    if events:
        v["ttft_ms"] = f"{perf.ttft_ms(events):.0f}"
        v["prefill_error_note"] = ""
        prefill_error = perf.prediction_error_pct(events[0].predicted_ms, events[0].latency_ms)
        if prefill_error is not None:  # the latency chart's prefill error, and the prediction it comes from
            v["prefill_error"] = signed_pct(prefill_error)
            v["prefill_predicted_ms"] = f"{events[0].predicted_ms:.0f}"
            v["prefill_error_note"] = (
                ". A prefill is one short burst timed once, so whatever else this computer does at that "
                "moment lands in it (a browser drawing this page on the same machine, another reader's page); "
                "the decode steps are many, and their median shrugs such moments off" if prefill_error < -20 else "")
        v["kv_columns"] = str(events[-1].kv_seq_len)
        if events[0].cost:
            cost = events[0].cost
            v["prefill_intensity"] = f"{cost['flops']['total'] / cost['bytes']['total']:.1f}"
    if len(events) > 1:
        v["tpot_ms"] = f"{perf.tpot_ms(events):.0f}"
        if events[-1].cost:
            cost = events[-1].cost
            v["decode_intensity"] = f"{cost['flops']['total'] / cost['bytes']['total']:.2f}"
        gbs = perf.achieved_bandwidth(events)
        if gbs is not None:
            v["achieved_gbs"] = f"{gbs / 1e9:.1f} GB/s"
        v.update(_decode_budget(events, ctx))
    if events:
        v.update(_prefill_figures(events[0], ctx))
    return v


# A decode step this many times the run's median step reads as slow in the latency text.
SLOW_STEP = 1.5
# The redraw's work can run on past the wait (the browser drawing the update the redraw sent, when it
# runs on this computer): a slow step up to this many forwards after a ringed one counts as near it.
NEAR_WAIT = 2


def waited_steps(events: list[Event]) -> list[int]:
    """The forwards that waited for a page redraw just before they started: the latency chart's
    rings, so the text and the chart count the same steps."""
    return [k for k, e in enumerate(events) if e.waited_ms]


def pause_note(events: list[Event]) -> str:
    """How often the model waited for its own page's redraws (app.services.turns), and where this
    run's slow steps fell against those waits: at or just after one, or away from every wait (other
    work on the cores). '' for a run that never waited (a replay, the command line)."""
    waited = waited_steps(events)
    if not waited:
        return ""
    total_s = sum(events[k].waited_ms for k in waited) / 1000.0
    text = (f" While a run goes, the server redraws this page about once a second, in Python on the same "
            f"cores; the model waits between steps for each redraw so it never lands in a timed step. This run "
            f"waited **{len(waited)} times** ({total_s:.1f} s in all, measured, not counted in any step): the "
            f"pink rings on the chart mark the {len(waited)} forwards that started right after a wait.")
    return text + _slow_steps_sentence(events, set(waited))


def _slow_steps_sentence(events: list[Event], waited: set[int]) -> str:
    """Which slow decode steps sit at or just after a wait and which do not, counted from the run:
    only the ones away from every wait are blamed on other work on the cores."""
    decode = [(k, e.latency_ms) for k, e in enumerate(events) if e.phase == "decode"]
    if len(decode) < 3:
        return ""
    median = statistics.median(ms for _, ms in decode)
    slow = [k for k, ms in decode if ms > SLOW_STEP * median]
    limit = f"{SLOW_STEP:g}× the median step ({SLOW_STEP * median:.0f} ms; median {median:.0f} ms, measured)"
    if not slow:
        return f" No decode step took longer than {limit}."
    ringed = [k for k in slow if k in waited]
    after = [k for k in slow if k not in waited and any(0 < k - w <= NEAR_WAIT for w in waited)]
    away = len(slow) - len(ringed) - len(after)
    parts = []
    if len(ringed) == len(slow) > 1:
        parts.append(f"all {len(ringed)} are ringed")
    elif ringed:
        parts.append(f"{len(ringed)} {'is' if len(ringed) == 1 else 'are'} ringed")
    if after:
        parts.append(f"{len(after)} came one or two steps after a ring")
    if away:
        parts.append(f"{away} {'is' if away == 1 else 'are'} away from every wait")
    text = f" Of the {len(slow)} decode steps slower than {limit}, " + ", ".join(parts) + "."
    if ringed or after:
        text += (" Near a wait, the redraw's work had not quite ended: most likely the browser drawing the update "
                 "that redraw sent, when the browser runs on this computer.")
    if away:
        text += (f" The {'one' if away == 1 else str(away)} away from every wait "
                 f"{'was' if away == 1 else 'were'} slowed by other work on these cores (another reader's run "
                 "or page, or other programs on this shared machine), not by this page.")
    return text


def _decode_budget(events: list[Event], ctx: RunContext) -> dict[str, str]:
    """Slots of "why is decode slower than on paper": the bytes-over-bandwidth estimate, and the
    median of each predicted part over the decode steps (Event.predicted_terms_ms)."""
    v: dict[str, str] = {}
    decode = [e for e in events if e.phase == "decode" and e.cost]
    if not decode:
        return v
    bw = ctx.ceilings.bandwidth
    step_bytes = statistics.median(e.cost["bytes"]["total"] for e in decode)
    v["step_mb"] = f"{step_bytes / 1e6:.0f}"
    papers = [p for p in (perf.paper_ms(e, bw) for e in decode) if p is not None]
    if papers:  # one decimal: the weights-only and cache parts below differ by less than a millisecond
        v["paper_ms"] = f"{statistics.median(papers):.1f}"
    terms = perf.median_terms_ms(decode)
    predicted = [e.predicted_ms for e in decode if e.predicted_ms is not None]
    if not terms or not predicted:
        return v
    pred = statistics.median(predicted)
    v["pred_ms"] = f"{pred:.0f}"
    for key in ("overhead", "memory", "kv", "compute"):
        v[f"p_{key}_ms"] = _ms(terms.get(key, 0.0))
    weight_bytes = statistics.median(e.cost["bytes"]["weights"] + e.cost["bytes"]["activations"] for e in decode)
    kv_bytes = statistics.median(e.cost["bytes"]["kv_read"] + e.cost["bytes"]["kv_write"] for e in decode)
    if bw:
        v["paper_weights_ms"] = f"{1000.0 * weight_bytes / bw:.1f}"
        v["paper_kv_ms"] = _ms(1000.0 * kv_bytes / bw)
    if terms.get("memory"):
        v["weights_gbs"] = f"{weight_bytes / (terms['memory'] / 1e3) / 1e9:.1f} GB/s"
    kv_share = (f"this step moves {fmt_bytes(kv_bytes)} of cache against {fmt_bytes(weight_bytes)} of weights "
                "and activations, too little to show at this length; it grows with every token")
    if terms.get("memory") and terms.get("kv") and kv_bytes:
        ratio = (terms["kv"] / kv_bytes) / (terms["memory"] / weight_bytes)
        if terms["kv"] >= 0.05:
            kv_share = (f"this cache grows by copying itself at every step, so in the latency model's fitted "
                        f"coefficients a byte of cache costs about "
                        f"{ratio:.1f}× a byte of weights (fitted)")
    v["kv_sentence"] = kv_share
    # median against median: a few slow outliers pull the mean up and would read as a missing term
    measured = statistics.median(e.latency_ms for e in decode)
    v["measured_median_ms"] = f"{measured:.0f}"
    mean = statistics.fmean(e.latency_ms for e in decode)
    v["mean_note"] = (f" (a few slow steps, the diamonds far above the bars, pull the mean up to {mean:.0f} ms: "
                      "other work on this computer landed in them, such as a browser drawing this page on the same machine "
                      "or other readers' runs and pages)"
                      if mean > 1.05 * measured else "")
    fast = sum(1 for e in decode if e.predicted_ms is not None and e.predicted_ms < e.latency_ms)
    v["rest_sentence"] = _rest_sentence(measured, pred, fast / len(decode))
    return v


def _ms(value: float) -> str:
    """A term in ms with one decimal, or two significant digits when that would read 0.0."""
    return f"{value:.1f}" if value >= 0.05 or value == 0 else f"{value:.2g}"


def _rest_sentence(measured_ms: float, predicted_ms: float, share_too_fast: float = 0.5) -> str:
    """What the gap between the median measured and median predicted step says, by its sign and by
    whether it is systematic (nearly every step on one side) or scattered."""
    gap = measured_ms - predicted_ms
    if abs(gap) < max(1.0, 0.03 * measured_ms):
        return f"the prediction matches it to within {max(1, round(abs(gap)))} ms"
    if gap > 0 and share_too_fast >= 0.9:
        return (f"the other {gap:.0f} ms are what the prediction misses, and it misses them in "
                f"{share_too_fast:.0%} of the steps, so this is not random noise: the whole run went slower "
                "than the forwards the latency model was fitted on, timed when this server started (a shared "
                "computer's speed changes as other work on it comes and goes)")
    if gap > 0:
        return (f"the other {gap:.0f} ms are what the prediction misses (timing noise, other work on this "
                "shared machine)")
    return (f"{-gap:.0f} ms less than predicted: the latency model's coefficients were fitted to forwards "
            "timed when this server started, and this shared machine runs faster or slower as other work "
            "on it comes and goes")


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
    v["prefill_gflops"] = f"{achieved / 1e9:.0f}"
    peak = ctx.ceilings.peak_flops
    if peak:
        v["peak_gflops"] = f"{peak / 1e9:.0f}"
        v["prefill_pct_of_peak"] = f"{100 * achieved / peak:.0f}"
    bw = ctx.ceilings.bandwidth
    if peak and bw and prefill.cost["bytes"]["total"]:
        ridge = peak / bw
        intensity = flops / prefill.cost["bytes"]["total"]
        v["prefill_vs_ridge"] = (
            f"right of the ridge at {ridge:.1f}: by its intensity alone it could run at the compute roof"
            if intensity >= ridge else
            f"left of the ridge at {ridge:.1f}: at this prompt length even the prefill is limited by "
            "bandwidth")
        bytes_ms = 1000.0 * prefill.cost["bytes"]["total"] / bw
        roof_ms = 1000.0 * flops / peak
        predicted = sum((prefill.predicted_terms_ms or {}).values())
        measured = prefill.latency_ms
        share = 100.0 * roof_ms / measured if measured else 0.0
        head = (f"**So was this prefill compute-bound?** Yes, in the roofline's sense: its "
                f"{prefill.cost['bytes']['total'] / 1e6:,.0f} MB (computed) would take only {bytes_ms:.0f} ms at "
                f"{bw / 1e9:.1f} GB/s and its FLOPs {roof_ms:.0f} ms at the roof (computed), so it waits on "
                f"arithmetic, not on memory. It took {measured:.0f} ms (measured), about {share:.0f}% of the "
                "roof's speed. ")
        if predicted <= 0:
            tail = "The thin matrix products and the fixed cost per layer take the time above the roof."
        elif measured <= HELD_UP * predicted:
            tail = (f"The latency model predicts {predicted:.0f} ms for it: the roof time, plus arithmetic done "
                    "more slowly in matrix products this thin, plus the fixed cost of every layer. So arithmetic "
                    "is what sets its time, just not at the roof's speed.")
        else:
            tail = (f"The latency model, which counts the thin matrix products and the fixed cost per layer, "
                    f"predicts {predicted:.0f} ms; the other {measured - predicted:.0f} ms were not the model's "
                    "work: something else held it up (other work on this shared computer, or the first run after "
                    "the server started warming its memory). Press Generate again and it usually lands nearer "
                    "the prediction.")
        v["prefill_verdict"] = (
            head + tail
            if intensity >= ridge else
            f"**So was this prefill compute-bound?** No: at {intensity:.1f} FLOP/byte it sits left of the ridge, so "
            "moving its bytes, not arithmetic, set its pace.")
    return v


# A head whose vectors are this many times as long as the others' (mean over positions) stands out
# in the layer chart; the sentence under it then names the head and says why.
STANDS_OUT = 1.3


def layer_heads_sentence(events: list[Event], n_kv_heads: int, layer: int, which: str = "key") -> str:
    """What the brightness of the per-layer head chart is, and, when one head is brighter than the
    rest, by how much and where that comes from, counted from the run's vectors ('' without them).

    Every KV head of a layer projects the same input vector at a position, so a head that is the
    longest at nearly every position owes it to its own projection weights, not to the tokens."""
    rows: list[list[float]] = [[] for _ in range(n_kv_heads)]
    for e in events:
        if e.kv_norms:
            for h, norms in enumerate(e.kv_norms[which][layer][:n_kv_heads]):
                rows[h].extend(norms)
    if not rows or not rows[0]:
        return ""
    what = (f"Brightness is the length (L2 norm) of the {which} vector each KV head stored in the cache "
            f"at that position, in layer {layer} (measured, for the first sequence of the batch).")
    if n_kv_heads < 2:
        return what
    means = [statistics.fmean(r) for r in rows]
    top = max(range(n_kv_heads), key=means.__getitem__)
    others = statistics.fmean(m for h, m in enumerate(means) if h != top)
    if not others or means[top] < STANDS_OUT * others:
        return what + (f" No head stands out here: the longest, KV head {top}, averages {means[top]:.1f} against "
                       f"{others:.1f} for the others (measured).")
    n = len(rows[top])
    longest = sum(1 for i in range(n) if all(rows[top][i] >= rows[h][i] for h in range(n_kv_heads))) / n
    text = what + (f" KV head {top} is the bright one: its {which}s average {means[top]:.1f}, "
                   f"{means[top] / others:.1f}× the other heads' {others:.1f}, and it is the longest at "
                   f"{longest:.0%} of the {n} positions (measured).")
    if longest >= 0.8:
        text += (" Every head of a layer projects the same input vector at a position, so a head that is "
                 "longest nearly everywhere owes it to its own projection weights, learned in training, "
                 "not to particular tokens.")
    return text
