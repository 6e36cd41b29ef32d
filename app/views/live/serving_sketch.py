"""The serving question answered with this run's own numbers: what a long prompt does to other streams.

Three readers are decoding together, one token per step; a long prompt arrives. Served whole, its
prefill is one long iteration and every stream waits for it; served in chunks, each iteration
carries a slice of the prompt beside the decodes, so the streams keep ticking, a little slower.
A step of the three readers' decodes is this run's decode terms (median) scaled to its measured TPOT,
the fixed part (overhead, weights) once and the per-row part (arithmetic, cache) three times; a prefill of any length is this run's predicted
prefill terms scaled to that length (core.perf.scaled_prefill_ms), after scaling every term so the
run's own prompt gets exactly its measured TTFT (the prediction supplies the split between fixed and
per-token cost, the measurement its size): an estimate, labelled as one.
It is a sketch: it ignores batching's own cost and memory limits, which a full scheduling
simulation accounts for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.shared import palette as pal
from app.shared.context import RunContext
from app.views.live.lesson import HELD_UP
from core import perf
from core.trace import Event

LONG_PROMPT = 1000  # tokens in the prompt that arrives
CHUNK = 128  # prompt tokens per iteration when chunked
STREAMS = ("reader A", "reader B", "reader C")
STEPS_BEFORE = 4  # decode steps before the long prompt arrives
STEPS_SHOWN = 30  # iterations drawn in all
# A measured prefill over HELD_UP times its prediction (the roofline text then says the model does not
# account for the rest), or this many times under it, is not used to size the sketch.
OUTLIER = 2.0


def _sized_by_measurement(to_measured: float) -> bool:
    """Whether a prefill measured at `to_measured` × its prediction sizes the sketch (the figure and
    its caption ask the same question, so they must get the same answer)."""
    return 1 / OUTLIER <= to_measured <= HELD_UP


@dataclass
class Timeline:
    """One schedule: each stream's token times, the long prompt's prefill spans and first token."""

    label: str
    ticks_s: dict[str, list[float]] = field(default_factory=dict)
    prefill_spans_s: list[tuple[float, float]] = field(default_factory=list)
    first_token_s: float = 0.0

    def longest_gap_s(self) -> float:
        """The longest wait between two tokens of any already-running stream."""
        gaps = [b - a for ticks in self.ticks_s.values() for a, b in zip(ticks, ticks[1:], strict=False)]
        return max(gaps, default=0.0)


def timelines(events: list[Event], ctx: RunContext, long_prompt: int = LONG_PROMPT,
              chunk: int = CHUNK) -> tuple[Timeline, Timeline] | None:
    """(served whole, served in chunks), or None before the run has a decode step or without a
    predicted prefill (an unpriced model, or a recording made before predictions were split)."""
    tpot = perf.tpot_ms(events)
    terms = events[0].predicted_terms_ms if events and events[0].phase == "prefill" else None
    if tpot is None or not terms or sum(terms.values()) <= 0:
        return None
    priced = events[0].n_new
    to_measured = events[0].latency_ms / sum(terms.values())
    if not _sized_by_measurement(to_measured):  # a prefill held up by other work: size it as predicted
        to_measured = 1.0
    terms = {k: v * to_measured for k, v in terms.items()}
    decode_terms = perf.median_terms_ms(events)
    if sum(decode_terms.values()) > 0:
        decode_terms = {k: v * tpot / sum(decode_terms.values()) for k, v in decode_terms.items()}
    else:  # no split recorded: one decode row's measured time for the whole step
        decode_terms = {"overhead": tpot}

    def step_s(prompt_tokens: int) -> float:  # one iteration: some prompt tokens beside the decodes
        if not prompt_tokens:
            return perf.scaled_prefill_ms(decode_terms, 1, len(STREAMS)) / 1e3
        return perf.scaled_prefill_ms(terms, priced, prompt_tokens + len(STREAMS)) / 1e3

    out = []
    for label, per_iteration in (("the prompt served whole", long_prompt), (f"in chunks of {chunk}", chunk)):
        tl = Timeline(label, {s: [] for s in STREAMS})
        t, left = 0.0, long_prompt
        for i in range(STEPS_SHOWN):
            take = min(left, per_iteration) if i >= STEPS_BEFORE else 0
            dt = step_s(take)
            if take:
                tl.prefill_spans_s.append((t, t + dt))
                left -= take
                if left == 0:
                    tl.first_token_s = t + dt
            t += dt
            for s in STREAMS:
                tl.ticks_s[s].append(t)
        out.append(tl)
    return out[0], out[1]


def figure(events: list[Event], ctx: RunContext) -> go.Figure:
    pair = timelines(events, ctx)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.16,
                        subplot_titles=[f"A {LONG_PROMPT:,}-token prompt served whole", f"The same prompt in chunks of "
                                        f"{CHUNK} tokens, beside the decodes"])
    if pair is None:
        fig.update_layout(**pal.base_layout("What a long prompt does to other readers (after the first decode step)"))
        return fig
    rows = [*STREAMS, "long prompt"]
    for r, tl in enumerate(pair, start=1):
        for s in STREAMS:
            fig.add_scatter(x=tl.ticks_s[s], y=[s] * len(tl.ticks_s[s]), mode="markers", row=r, col=1,
                            marker={"symbol": "line-ns-open", "size": 14, "color": pal.DECODE,
                                    "line": {"width": 2}},
                            name="a token of a running stream (estimated)", legendgroup="tok", showlegend=r == 1 and s == STREAMS[0],
                            hovertemplate=s + ": a token at %{x:.2f} s<extra></extra>")
        for a, b in tl.prefill_spans_s:
            fig.add_scatter(x=[a, b], y=["long prompt"] * 2, mode="lines", row=r, col=1,
                            line={"color": pal.PREFILL, "width": 12}, name="prefill of the long prompt (estimated)",
                            legendgroup="pre", showlegend=r == 1 and (a, b) == tl.prefill_spans_s[0],
                            hovertemplate=f"prefill {a:.2f}-{b:.2f} s<extra></extra>")
        fig.add_scatter(x=[tl.first_token_s], y=["long prompt"], mode="markers", row=r, col=1,
                        marker={"symbol": "star", "size": 13, "color": pal.PREFILL}, showlegend=False,
                        hovertemplate="its first token at %{x:.2f} s<extra></extra>")
        fig.update_yaxes(categoryorder="array", categoryarray=rows[::-1], row=r, col=1)
    fig.update_xaxes(title_text="seconds (estimated from this run's times)",
                     row=2, col=1)
    fig.update_layout(**pal.base_layout("A long prefill served whole stalls every stream; served in chunks it "
                                        "only slows them", height=460))
    return pal.fit_legend(fig)


def slot_values(events: list[Event], ctx: RunContext) -> dict[str, Any]:
    """The serving text's numbers, from the same timelines as the figure."""
    pair = timelines(events, ctx)
    if pair is None:
        return {}
    whole, chunked = pair
    predicted = sum(events[0].predicted_terms_ms.values())
    ratio = events[0].latency_ms / predicted
    scale = (f"scaled so this run's own prompt costs exactly its measured {events[0].latency_ms:.0f} ms"
             if _sized_by_measurement(ratio) else
             f"sized as predicted: this run's prefill took {events[0].latency_ms:.0f} ms against "
             f"{predicted:.0f} ms predicted, {ratio:.1f}× off, so something else held it up and it would "
             "distort the sketch")
    return {"prefill_scale": scale, "three_step_ms": f"{1000 * (whole.ticks_s[STREAMS[0]][1] - whole.ticks_s[STREAMS[0]][0]):.0f}",
            "long_prompt": f"{LONG_PROMPT:,}", "chunk": str(CHUNK),
            "stall_whole_s": f"{whole.longest_gap_s():.1f}", "stall_chunk_s": f"{chunked.longest_gap_s():.2f}",
            "first_whole_s": f"{whole.first_token_s - whole.ticks_s[STREAMS[0]][STEPS_BEFORE - 1]:.1f}",
            "first_chunk_s": f"{chunked.first_token_s - chunked.ticks_s[STREAMS[0]][STEPS_BEFORE - 1]:.1f}",
            "chunk_iterations": f"{math.ceil(LONG_PROMPT / CHUNK)} iterations"
                                + (", the last one shorter" if LONG_PROMPT % CHUNK else "")}
