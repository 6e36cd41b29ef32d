"""The serving question answered with this run's own numbers: what a long prompt does to other streams.

Three readers are decoding together, one token per step; a long prompt arrives. The serving
simulator (core.sim) plays it twice with its own policies: prefill-first (the prompt's prefill is
one long iteration and every stream waits for it) and chunked (a token budget per iteration: the
decodes first, then a chunk of the prompt, so the streams keep ticking, a little slower). Every
iteration is priced by the simulator's step time for this model on this server (core.sim.StepTime,
fitted to the latency model), scaled so that one decode step takes this run's measured time per
token: the live page and the serving page tell one story, in one vocabulary. A simulation, labelled
as one: it plays four requests, not a server's traffic.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.shared import palette as pal
from app.shared.context import RunContext
from core import perf
from core.sim.simulate import SimConfig, SimResult, simulate
from core.sim.steptime import FEATURES, StepTime
from core.sim.workload import Request
from core.trace import Event

LONG_PROMPT = 1000  # tokens in the prompt that arrives
CHUNK = 128  # prompt tokens per iteration when chunked (the budget is this plus one token per stream)
STREAMS = ("reader A", "reader B", "reader C")
STREAM_PROMPT = 8  # the streams' own short prompts, prefilled together before the window shown
STEPS_BEFORE = 4  # decode steps before the long prompt arrives
STEPS_AFTER = 6  # decode steps shown after the long prompt's first token
POLICIES = (("prefill-first", "the prompt served whole"), ("chunked", f"in chunks of {CHUNK}"))
KV_BLOCKS = 4096  # ample: memory is not what this sketch is about


@dataclass
class Timeline:
    """One schedule: each stream's token times, the long prompt's prefill spans and first token,
    in seconds from the streams' first decode step, and when the long prompt arrived."""

    label: str
    ticks_s: dict[str, list[float]] = field(default_factory=dict)
    prefill_spans_s: list[tuple[float, float]] = field(default_factory=list)
    first_token_s: float = 0.0
    arrival_s: float = 0.0
    long_prompt: int = LONG_PROMPT

    def longest_gap_s(self) -> float:
        """The longest wait between two tokens of any already-running stream."""
        gaps = [b - a for ticks in self.ticks_s.values() for a, b in zip(ticks, ticks[1:], strict=False)]
        return max(gaps, default=0.0)

    def wait_s(self) -> float:
        """The long prompt's own wait for its first token."""
        return self.first_token_s - self.arrival_s


_FITTED: dict[tuple[Any, str], tuple[StepTime, tuple]] = {}


def _fitted(spec: Any, dtype: str) -> tuple[StepTime, tuple] | None:
    """The simulator's step time for this model on this server (its cached calibration; never
    measures), with the deployment it was fitted for; None before the server is calibrated (not
    remembered: the next page pass tries again)."""
    from core import calibrate
    from core.deployment import Scenario, predictor

    if (spec, dtype) not in _FITTED:
        try:
            hardware = calibrate.host_spec(calibrate.host_calibration(False))
            scenario = Scenario(batch=1, prompt_len=1, gen_len=1, weight_dtype=dtype).resolved()
            step = StepTime.fit(spec, hardware, scenario, predictor(spec, hardware, scenario))
        except Exception:  # not calibrated yet, or a model the cost model cannot price: no sketch
            return None
        _FITTED[(spec, dtype)] = (step, (spec, hardware, scenario))
    return _FITTED[(spec, dtype)]


def step_time_for(model_config: Any, dtype: str = "fp32") -> tuple[StepTime, tuple] | None:
    """(StepTime, deployment) for a model's config (a transformers config or a config.json dict)."""
    from core.dtypes import normalize_dtype
    from core.spec import spec_from_config

    if model_config is None:
        return None
    try:
        spec = spec_from_config(model_config)
        return _fitted(spec, normalize_dtype(dtype))
    except Exception:
        return None


def _scaled(step: StepTime, factor: float) -> StepTime:
    return dataclasses.replace(step, **{name: getattr(step, name) * factor for name in FEATURES})


def timelines(events: list[Event], ctx: RunContext, fitted: tuple[StepTime, tuple] | None,
              long_prompt: int = LONG_PROMPT, chunk: int = CHUNK) -> tuple[Timeline, Timeline] | None:
    """(served whole, served in chunks), or None before the run has a decode step or without the
    simulator's step time for this model (an uncalibrated server, a model core cannot price)."""
    tpot = perf.tpot_ms(events)
    if tpot is None or fitted is None:
        return None
    # the run's median cache length; the result is cached by what it is played from (the model, its
    # dtype, the run's step time and cache length), so a page pass replays nothing
    spec, _, scenario = fitted[1]
    played = (round(tpot, 3), ctx.prompt_len + len(events) // 2, long_prompt, chunk)
    key = (spec, scenario.weight_dtype, *played)
    if key not in _PLAYED:
        if len(_PLAYED) >= 64:
            _PLAYED.pop(next(iter(_PLAYED)))
        _PLAYED[key] = _play(fitted, *played)
    return _PLAYED[key]


_PLAYED: dict[tuple, tuple[Timeline, Timeline] | None] = {}


def _play(fitted: tuple[StepTime, tuple], tpot: float, context: int, long_prompt: int,
          chunk: int) -> tuple[Timeline, Timeline] | None:
    step, deployed = fitted
    long_prompt = min(long_prompt, deployed[0].max_positions - 2)  # a small model's window caps the prompt
    one = step.of_rows([(1, context)])
    if one <= 0:
        return None
    step = _scaled(step, tpot / 1e3 / one)  # one decode step takes this run's measured TPOT
    n = len(STREAMS)
    decode_s = step.of_rows([(1, STREAM_PROMPT)] * n)
    arrival = step.of_rows([(STREAM_PROMPT, 0)] * n) + (STEPS_BEFORE - 0.5) * decode_s
    # the streams run on through the window shown (a token per iteration, chunked or not)
    outputs = STEPS_BEFORE + -(-long_prompt // chunk) + STEPS_AFTER + 4
    requests = [Request(i, 0.0, STREAM_PROMPT, outputs) for i in range(n)]
    requests.append(Request(n, arrival, long_prompt, 2))
    out = []
    for policy, label in POLICIES:
        config = SimConfig(policy=policy, workload="mix", requests=len(requests), model="this model",
                           hardware="host", instances=1, budget=chunk + n, kv_blocks=KV_BLOCKS)
        result = simulate(config, requests, step, deployed=deployed)
        out.append(_timeline(result, label, n))
    return out[0], out[1]


def _timeline(result: SimResult, label: str, n: int) -> Timeline:
    """The window a reader needs: from the streams' first decode step to a few steps past the long
    prompt's first token, with time counted from that first decode step."""
    t0 = result.token_s[0][0]
    first = result.token_s[n][0]
    _, log = result.servers[0]
    spans = [(start - t0, start + seconds - t0) for start, seconds, prefill, *_ in log.iterations
             if prefill and start >= result.requests[n].arrival_s - 1e-12]
    stream = result.token_s[0]
    end = first + STEPS_AFTER * (stream[1] - stream[0])  # a few decode steps past the long prompt's first token
    ticks = {s: [t - t0 for t in result.token_s[i] if t <= end] for i, s in enumerate(STREAMS)}
    return Timeline(label, ticks, spans, first - t0, result.requests[n].arrival_s - t0,
                    result.requests[n].prompt_tokens)


def figure(events: list[Event], ctx: RunContext, fitted: tuple[StepTime, tuple] | None) -> go.Figure:
    pair = timelines(events, ctx, fitted)
    tokens = pair[0].long_prompt if pair is not None else LONG_PROMPT
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.16,
                        subplot_titles=[f"A {tokens:,}-token prompt served whole (prefill-first)",
                                        f"The same prompt in {CHUNK}-token chunks beside the decodes (chunked)"])
    if pair is None:
        fig.update_layout(**pal.base_layout("What a long prompt does to other readers (after the first decode step)"))
        return fig
    rows = [*STREAMS, "long prompt"]
    for r, tl in enumerate(pair, start=1):
        for s in STREAMS:
            fig.add_scatter(x=tl.ticks_s[s], y=[s] * len(tl.ticks_s[s]), mode="markers", row=r, col=1,
                            marker={"symbol": "line-ns-open", "size": 14, "color": pal.DECODE,
                                    "line": {"width": 2}},
                            name="a token of a running stream (simulated)", legendgroup="tok", showlegend=r == 1 and s == STREAMS[0],
                            hovertemplate=s + ": a token at %{x:.2f} s<extra></extra>")
        for a, b in tl.prefill_spans_s:
            fig.add_scatter(x=[a, b], y=["long prompt"] * 2, mode="lines", row=r, col=1,
                            line={"color": pal.PREFILL, "width": 12}, name="prefill of the long prompt (simulated)",
                            legendgroup="pre", showlegend=r == 1 and (a, b) == tl.prefill_spans_s[0],
                            hovertemplate=f"prefill {a:.2f}-{b:.2f} s<extra></extra>")
        fig.add_scatter(x=[tl.first_token_s], y=["long prompt"], mode="markers", row=r, col=1,
                        marker={"symbol": "star", "size": 13, "color": pal.PREFILL}, showlegend=False,
                        hovertemplate="its first token at %{x:.2f} s<extra></extra>")
        fig.update_yaxes(categoryorder="array", categoryarray=rows[::-1], row=r, col=1)
    fig.update_xaxes(title_text="seconds (simulated)",
                     row=2, col=1)
    fig.update_layout(**pal.base_layout("A long prefill served whole stalls every stream; served in chunks it "
                                        "only slows them", height=460))
    return pal.fit_legend(fig)


def slot_values(events: list[Event], ctx: RunContext, fitted: tuple[StepTime, tuple] | None) -> dict[str, Any]:
    """The serving text's numbers, from the same timelines as the figure."""
    pair = timelines(events, ctx, fitted)
    if pair is None:
        return {}
    whole, chunked = pair
    ticks = whole.ticks_s[STREAMS[0]]
    first_whole, first_chunk = f"{whole.wait_s():.1f}", f"{chunked.wait_s():.1f}"
    return {"chunk_delay": chunk_delay(first_whole, first_chunk), "three_step_ms": f"{1000 * (ticks[1] - ticks[0]):.0f}", "long_prompt": f"{whole.long_prompt:,}",
            "chunk": str(CHUNK), "budget": str(CHUNK + len(STREAMS)),
            "stall_whole_s": f"{whole.longest_gap_s():.1f}", "stall_chunk_s": f"{chunked.longest_gap_s():.2f}",
            "first_whole_s": first_whole, "first_chunk_s": first_chunk,
            "chunk_iterations": f"{len(chunked.prefill_spans_s)} iterations"}


def chunk_delay(first_whole_s: str, first_chunk_s: str) -> str:
    """How much later the long prompt's first token comes when chunked, from the two printed waits
    (so a reader subtracting them gets the same figure); 'a moment' when they print alike."""
    delay = round(float(first_chunk_s) - float(first_whole_s), 1)
    return f"{delay:.1f} s" if delay >= 0.1 else "a moment"
