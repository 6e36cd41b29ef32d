"""The serving simulator's runs, as one queued job: two policies on the same arrivals, then a rate sweep.

Simulations are CPU work, so they wait in the same queue as the live page's model runs
(app.shared.jobs) and never share the CPU with a reader's generation. One job holds everything
one set of page settings shows; the page keeps the finished job per settings key, so a rerun or
an unrelated click redraws without simulating again.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import Any

from app.shared.jobs import Job, RunQueue
from core.sim.simulate import PROMPT_TOKENS_PER_UNIT as PROMPT_UNIT
from core.sim.simulate import (
    SimConfig,
    SimResult,
    SimulationStopped,
    deployment,
    requests_for,
    simulate,
    work_units,
    workload_requests,
)
from core.sim.steptime import StepTime
from core.sim.traffic import Played, is_recorded
from core.sim.workload import Request, get_workload

SWEEP_POINTS = 6
SWEEP_REQUESTS = 400
# A recording's sweep plays fewer: the Mooncake trace's prompts run to thousands of tokens, and its
# default page (1,000 requests, two policies, the sweep at 400) would be 8.5 million work units.
SWEEP_RECORDED_REQUESTS = 150


def sweep_requests(workload: str) -> int:
    return SWEEP_RECORDED_REQUESTS if is_recorded(workload) else SWEEP_REQUESTS
# The most work (core.sim.simulate.work_units: output tokens plus prompt tokens in 16s) one page's
# job may do, its two policies and its rate sweep together. On this project's 2-core machines a job
# did 0.3 to 2.5 million units a second (the default page: 2.1 million units in about 2 s; 5,000
# mixed requests: 4.6 million in 4.5 s). A job still running after MAX_JOB_S (an estimate can miss,
# say an overloaded sweep preempting over and over) is stopped with a message, so no job holds the
# queue longer than that.
MAX_JOB_WORK = 5_000_000
MAX_JOB_S = 20.0


def sweep_factors(top: float) -> list[float]:
    """Arrival rates of the sweep, as multiples of the workload's own: evenly from top/6 up to top."""
    return [top * (k + 1) / SWEEP_POINTS for k in range(SWEEP_POINTS)]


def configs(settings: dict[str, Any]) -> tuple[SimConfig, SimConfig]:
    """The two policies' configs from the page's settings (app.views.serving.link keys)."""
    base = SimConfig(policy=settings["a"], workload=settings["work"], requests=int(settings["n"]),
                     rate_per_s=float(settings["rate"]) or None, arrival=settings["arrival"],
                     seed=int(settings["seed"]), model=settings["model"], hardware=settings["hw"],
                     dtype=settings["dtype"], tp=int(settings["tp"]), instances=int(settings["inst"]),
                     budget=int(settings["budget"]), kv_blocks=int(settings["kv"]) or None,
                     prompt_scale=float(settings["pscale"]), ttft_target_s=float(settings["ttft"]),
                     tpot_target_s=float(settings["tpot"]),
                     prompt_median=float(settings["pmed"]) or None, output_median=float(settings["omed"]) or None,
                     length_sigma=float(settings["sigma"]) or None, time_scale=float(settings["tscale"]),
                     window_start_s=60.0 * int(settings["wstart"]), prefix_cache=bool(settings["pcache"]),
                     # the router reads the copies' caches: without the cache, copies are dealt in turn
                     router=settings["router"] if settings["pcache"] else "round-robin",
                     **({} if is_recorded(settings["work"]) else  # a recording brings its own sharing
                        {"system_prompts": int(settings["sysn"]), "system_prompt_tokens": int(settings["syst"]),
                         "turns": int(settings["turns"]), "think_s": float(settings["think"])}))
    return base, replace(base, policy=settings["b"])


def job_work(settings: dict[str, Any], uploaded: list[Request] | None = None) -> int:
    """The work units a SimJob for these settings will do, estimated before it is queued: both
    policies on the requests, then (without an uploaded file) both across the rate sweep, whose
    requests have the workload's lengths (drawn here once at the sweep's size)."""
    a, _ = (c.checked() for c in configs(settings))
    spec = deployment(a)[0]
    if uploaded is not None:
        return 2 * work_units(uploaded)
    main = work_units(requests_for(a, spec))
    sweep = work_units(requests_for(replace(a, requests=sweep_requests(a.workload)), spec))
    return 2 * main + 2 * SWEEP_POINTS * sweep


def precheck(settings: dict[str, Any], uploaded: list[Request] | None = None) -> None:
    """ValueError, in words, for settings that cannot be simulated, before any job is queued: bad
    numbers, a model that does not fit its GPUs, a window of a recording with nothing to play, more
    work than one page's simulation may do (MAX_JOB_WORK)."""
    from core.deployment import kv_blocks_available

    a, b = (c.checked() for c in configs(settings))
    spec, hardware, scenario = deployment(a)
    if a.kv_blocks is None and kv_blocks_available(spec, hardware, scenario) < 1:
        raise ValueError(f"{spec.name} in {a.dtype} leaves no memory for the KV cache on {a.tp} × {hardware.label}: "
                         "use more GPUs per model copy or a smaller dtype")
    work = job_work(settings, uploaded)
    if work > MAX_JOB_WORK:
        raise ValueError(f"These settings would simulate about {work / 1e6:,.1f} million work units (one unit: one "
                         f"output token, or {PROMPT_UNIT} prompt tokens, summed over both policies and the rate "
                         f"sweep); a page simulation is capped at {MAX_JOB_WORK / 1e6:g} million, a few seconds on "
                         "this server. Use fewer requests or shorter outputs; `python -m core simulate` on your "
                         "own machine has no cap.")


def offered_rate(config: SimConfig) -> float:
    """Requests per second arriving: the setting, the workload's own, or a recording's as played
    (its requests over the time they took to arrive)."""
    if is_recorded(config.workload):
        reqs = requests_for(config, deployment(config)[0])
        return (len(reqs) - 1) / reqs[-1].arrival_s if len(reqs) > 1 and reqs[-1].arrival_s > 0 else 0.0
    return config.rate_per_s if config.rate_per_s is not None else get_workload(config.workload).rate_per_s


def at_rate(config: SimConfig, factor: float, requests: int) -> SimConfig:
    """`config` with `factor` times its arrival rate: a recording is played that much faster."""
    if is_recorded(config.workload):
        return replace(config, time_scale=config.time_scale * factor, requests=requests)
    return replace(config, rate_per_s=offered_rate(config) * factor, requests=requests)


class SimJob(Job):
    """Simulate policies A and B on the same requests, then both across arrival rates."""

    kind = "sim"
    priority = 1  # a reader's live run goes ahead of queued simulations

    def __init__(self, queue: RunQueue, settings: dict[str, Any], uploaded: list[Request] | None = None,
                 uploaded_name: str | None = None) -> None:
        super().__init__(queue)
        self.settings = dict(settings)
        self.uploaded = uploaded
        self.uploaded_name = uploaded_name
        self.key: Any = None  # the page's settings key this job answers
        self.results: list[SimResult] = []
        self.sweep: dict[str, list[dict[str, Any]]] = {}
        self.sweep_requests = sweep_requests(str(self.settings.get("work", "")))
        self.timed_out = False

    def should_stop(self) -> bool:
        if self.started is not None and time.monotonic() - self.started > MAX_JOB_S:
            self.timed_out = True
            return True
        return super().should_stop()

    def work(self) -> None:
        precheck(self.settings, self.uploaded)  # the cap holds however the job was made
        a, b = (c.checked() for c in configs(self.settings))
        spec, hardware, scenario = deployment(a)
        step = StepTime.fit(spec, hardware, scenario)
        requests, played = (self.uploaded, None) if self.uploaded is not None else workload_requests(a, spec)
        self.progress = f"simulating {a.policy} on {len(requests):,} requests"
        # SimulationStopped: the reader stopped it or left (the status says which), or the time cap below
        with contextlib.suppress(SimulationStopped):
            self._simulate_all(a, b, requests, step, played)
        if self.timed_out:
            raise ValueError(f"the simulation was stopped after {MAX_JOB_S:g} s, the most one page's simulation "
                             "may hold this server's CPU; use fewer requests or shorter outputs")

    def _simulate_all(self, a: SimConfig, b: SimConfig, requests: list[Request], step: StepTime,
                      played: Played | None) -> None:
        self.results = [simulate(a, requests, step, should_stop=self.should_stop, played=played)]
        if self.should_stop():
            return
        self.progress = f"simulating {b.policy} on the same requests"
        self.results.append(simulate(b, requests, step, should_stop=self.should_stop, played=played))
        if self.uploaded is not None:
            return  # a replayed file has its own arrival times: no rate to sweep
        rate = offered_rate(replace(a, requests=self.sweep_requests))
        for config in (a, b):
            points = []
            for factor in sweep_factors(float(self.settings.get("sweep", 1.5))):
                if self.should_stop():
                    return
                self.progress = f"sweeping the arrival rate: {config.policy} at {rate * factor:.3g}/s"
                run = simulate(at_rate(config, factor, self.sweep_requests), step=step, should_stop=self.should_stop)
                m = run.metrics
                points.append({"rate_per_s": rate * factor, "throughput_tok_s": m["throughput_tok_s"],
                               "tpot_p99_s": m["tpot_p99_s"], "ttft_p99_s": m["ttft_p99_s"],
                               "goodput_req_s": m["goodput_req_s"]})
            self.sweep[config.policy] = points
