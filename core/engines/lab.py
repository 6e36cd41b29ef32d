"""The lab's experiments on a real engine and the simulator's account of the same requests.

The stall experiment is the serving lesson in one picture: a few short streams decode steadily,
then one long prompt arrives. Prefilled in one iteration (a token budget of 2,048), it stalls every
stream's next token for as long as the prefill takes; chunked (a budget of 256), the streams keep
ticking with smaller gaps while the long prompt waits longer for its first token.

Errors are per request, |simulated - measured| / measured, medians over requests: TTFT (from the
moment the request was sent), ITL (the request's mean gap between tokens, its TPOT) and the stall
(each short stream's longest gap across the long prompt's arrival, median over the short streams).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from core.engines.record import EngineRun
from core.sim.workload import Request

LONG, SHORT = "long", "short"


@dataclass(frozen=True)
class StallWorkload:
    """`streams` short requests arriving `stagger_s` apart, then one long prompt at `long_at_s`."""

    streams: int = 4
    short_prompt: int = 32
    short_output: int = 96
    stagger_s: float = 0.05
    long_prompt: int = 1536
    long_output: int = 8
    long_at_s: float = 0.8

    def requests(self, inject_long: bool = True) -> tuple[list[Request], dict[int, str]]:
        reqs = [Request(i, round(i * self.stagger_s, 6), self.short_prompt, self.short_output)
                for i in range(self.streams)]
        roles = dict.fromkeys(range(self.streams), SHORT)
        if inject_long:
            reqs.append(Request(self.streams, self.long_at_s, self.long_prompt, self.long_output))
            roles[self.streams] = LONG
        return reqs, roles

    def long_request(self, request_id: int, at_s: float) -> Request:
        return Request(request_id, at_s, self.long_prompt, self.long_output)


@dataclass(frozen=True)
class QueueWorkload:
    """Traffic that saturates the engine, so its waiting queue is not empty for a while: a steady
    phase (Poisson at `steady_rate` for `steady_s`), then a burst past saturation (`burst_rate` for
    `burst_s`), mixed lengths (log-normal prompts and outputs), and `long_prompts` long prompts in the
    burst. Reproducible from its seed."""

    steady_rate: float = 2.0
    steady_s: float = 10.0
    burst_rate: float = 7.0
    burst_s: float = 4.0
    prompt_median: float = 120.0
    output_median: float = 48.0
    long_prompts: int = 2
    long_prompt: int = 1100
    long_output: int = 32

    def requests(self, seed: int = 0) -> tuple[list[Request], dict[int, str]]:
        import numpy as np

        rng = np.random.default_rng(seed)
        times: list[float] = []
        for start, rate, span in ((0.0, self.steady_rate, self.steady_s),
                                  (self.steady_s, self.burst_rate, self.burst_s)):
            t = start + float(rng.exponential(1 / rate))
            while t < start + span:
                times.append(t)
                t += float(rng.exponential(1 / rate))
        prompts = np.clip(np.rint(self.prompt_median * np.exp(0.8 * rng.standard_normal(len(times)))), 8, 800)
        outputs = np.clip(np.rint(self.output_median * np.exp(0.5 * rng.standard_normal(len(times)))), 4, 160)
        in_burst = [i for i, t in enumerate(times) if t >= self.steady_s]
        longs = set(in_burst[len(in_burst) // 3::max(1, len(in_burst) // (self.long_prompts + 1))][:self.long_prompts])
        reqs, roles = [], {}
        for i, t in enumerate(times):
            long = i in longs
            reqs.append(Request(i, round(t, 6), self.long_prompt if long else int(prompts[i]),
                                self.long_output if long else int(outputs[i])))
            roles[i] = LONG if long else SHORT
        return reqs, roles


def per_request_errors(run: EngineRun, sim_token_s: dict[int, list[float]]) -> dict[str, dict[str, float | None]]:
    """Each request's relative error of TTFT (from its sending), TPOT (mean gap after the first
    token) and E2E (sending to last token), simulated against measured: median and p90 of each."""
    import numpy as np

    _, sent = measured_timelines(run)
    errs: dict[str, list[float]] = {"ttft": [], "tpot": [], "e2e": []}
    for r in run.requests:
        sim = sim_token_s.get(r.id) or []
        if r.error or not r.token_s or not sim:
            continue
        t0 = sent[r.id]
        errs["ttft"].append(_rel(sim[0] - t0, r.token_s[0] - t0))
        errs["e2e"].append(_rel(sim[-1] - t0, r.token_s[-1] - t0))
        if len(r.token_s) > 1 and len(sim) > 1:
            errs["tpot"].append(_rel((sim[-1] - sim[0]) / (len(sim) - 1), r.tpot_s))
    out: dict[str, dict[str, float | None]] = {}
    for key, values in errs.items():
        kept = [v for v in values if v is not None]
        out[key] = {"median": float(np.median(kept)) if kept else None,
                    "p90": float(np.percentile(kept, 90)) if kept else None, "requests": len(kept)}
    return out


def against_itself(first: EngineRun, second: EngineRun) -> dict[str, dict[str, float | None]]:
    """per_request_errors with a second measured run of the same requests in the simulator's place
    (each of its token times moved by the gap between the two sendings): how far the engine is from
    itself, the floor under any simulator's errors on the machine it ran on."""
    _, sent_first = measured_timelines(first)
    _, sent_second = measured_timelines(second)
    shifted = {r.id: [t - sent_second[r.id] + sent_first[r.id] for t in r.token_s]
               for r in second.requests if not r.error and r.id in sent_first}
    return per_request_errors(first, shifted)


def as_requests(run: EngineRun) -> list[Request]:
    """The measured run's requests as the simulator takes them: arriving when they were really sent."""
    out = []
    for r in run.requests:
        out.append(Request(r.id, r.left_s, r.prompt_tokens, r.output_tokens))
    return out


def stall_gap(stream_tokens: list[float], long_sent_s: float,
              long_first_s: float | None) -> tuple[float, float] | None:
    """The two tokens around a short stream's longest gap among those spanning the long prompt's
    time in the engine (from its sending to its first token, or on to the end without one)."""
    end = long_first_s if long_first_s is not None else float("inf")
    gaps = [(a, b) for a, b in zip(stream_tokens, stream_tokens[1:], strict=False) if b > long_sent_s and a < end]
    return max(gaps, key=lambda g: g[1] - g[0]) if gaps else None


def stall_of(stream_tokens: list[float], long_sent_s: float, long_first_s: float | None) -> float | None:
    """A short stream's stall: the length of its stall_gap, the wait the long prefill put on it."""
    gap = stall_gap(stream_tokens, long_sent_s, long_first_s)
    return gap[1] - gap[0] if gap else None


def stalls(token_s: dict[int, list[float]], roles: dict[int, str], long_sent_s: float,
           long_first_s: float | None) -> list[float]:
    """Every short stream's stall (those with a gap across the long prompt's time); none while the
    long prompt has no first token: its time in the engine has not ended, so no stall is known."""
    if long_first_s is None:
        return []
    out = []
    for rid, role in roles.items():
        if role != SHORT:
            continue
        s = stall_of(token_s.get(rid, []), long_sent_s, long_first_s)
        if s is not None:
            out.append(s)
    return out


def measured_timelines(run: EngineRun) -> tuple[dict[int, list[float]], dict[int, float]]:
    """(token times, send times) of every request of a measured run, by id."""
    return ({r.id: list(r.token_s) for r in run.requests},
            {r.id: r.left_s for r in run.requests})


@dataclass(frozen=True)
class Comparison:
    """Per-request errors of a simulation against a measured run of the same requests."""

    ttft_error_median: float | None
    itl_error_median: float | None
    stall_measured_s: float | None
    stall_simulated_s: float | None
    stall_error: float | None
    requests: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _rel(sim: float | None, meas: float | None) -> float | None:
    if sim is None or meas is None or meas <= 0:
        return None
    return abs(sim - meas) / meas


def _med(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return median(kept) if kept else None


def compare(run: EngineRun, sim_token_s: dict[int, list[float]], roles: dict[int, str] | None = None) -> Comparison:
    """Errors of simulated token times against the measured run (same request ids; times from
    the same origin: the simulator's arrivals are the measured send times)."""
    roles = roles if roles is not None else {r.id: r.role for r in run.requests}
    meas_tokens, sent = measured_timelines(run)
    ttft, itl = [], []
    for r in run.requests:
        if r.error or not r.token_s:
            continue
        sim = sim_token_s.get(r.id) or []
        if not sim:
            continue
        ttft.append(_rel(sim[0] - sent[r.id], r.token_s[0] - sent[r.id]))
        if len(r.token_s) > 1 and len(sim) > 1:
            itl.append(_rel((sim[-1] - sim[0]) / (len(sim) - 1), r.tpot_s))
    long_ids = [rid for rid, role in roles.items() if role == LONG]
    stall_m = stall_s = None
    if long_ids:
        lid = long_ids[0]
        m_first = (meas_tokens.get(lid) or [None])[0]
        s_first = (sim_token_s.get(lid) or [None])[0]
        stall_m = _med(stalls(meas_tokens, roles, sent[lid], m_first))
        stall_s = _med(stalls(sim_token_s, roles, sent[lid], s_first))
    return Comparison(_med(ttft), _med(itl), stall_m, stall_s, _rel(stall_s, stall_m), len(ttft))


def simulate_run(run: EngineRun, hardware: str, budget: int, max_seqs: int, policy: str = "chunked"):
    """The simulator on exactly the requests the engine was sent (arrivals = measured send times),
    priced with the engine's fitted coefficients (`hardware`: the saved fit's name)."""
    from core.engines.fit import DEFAULT_DTYPE
    from core.sim.simulate import SimConfig, engine_limits, simulate

    requests = as_requests(run)
    limits = engine_limits(hardware) or {"model": "smollm2-135m", "dtype": DEFAULT_DTYPE, "instances": 1}
    config = SimConfig(policy=policy, requests=len(requests), hardware=hardware,
                       **{**limits, "budget": budget, "max_batch": max_seqs})
    result = simulate(config, requests)
    if result.left_out:  # the simulator renumbers what it keeps: the ids would no longer match the run's
        raise ValueError(f"{result.left_out} of the run's requests do not fit the model's context window")
    return {r.id: list(t) for r, t in zip(result.requests, result.token_s, strict=True)}, result


