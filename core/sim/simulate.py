"""One simulation from its settings: workload, deployment, policy in; per-request times and metrics out.

The deployment is `instances` copies of the model, each on `tp` devices, arranged by the layout
the policy names (core.sim.layouts): colocated copies each serve their share of the requests;
disaggregated ones split into prefill and decode copies with the KV cache sent between them. Both
use the same number of devices, so their numbers compare.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from core.cost import kv_bytes_per_token
from core.deployment import Scenario, check, kv_blocks_available, kv_share
from core.hardware import HardwareSpec, load_hardware
from core.sim import metrics, sharing
from core.sim.engine import ServerLog, SimulationStopped  # noqa: F401 (SimulationStopped: re-exported)
from core.sim.layouts import Setting, get_layout
from core.sim.policies import get_policy
from core.sim.policy import State
from core.sim.routers import get_router
from core.sim.steptime import StepTime
from core.sim.traffic import MAX_TIME_SCALE, Played, is_recorded, play, recordings
from core.sim.workload import MAX_REQUESTS, Request, custom, generate, get_workload, load_workloads
from core.spec import ModelSpec, load_model_preset

DEFAULT_MODEL, DEFAULT_HARDWARE = "llama-3.1-8b", "h100-sxm"
BLOCK_TOKENS = 16
MAX_INSTANCES = 16
MAX_KV_BLOCKS = 10_000_000


@dataclass(frozen=True)
class SimConfig:
    """Every setting of one simulation, with the command line's defaults.

    rate_per_s None takes the workload's own (near saturation for the default deployment);
    kv_blocks None takes what each copy's memory holds after its weights (vLLM's 0.9 of it);
    prefill_instances None gives half the copies to prefill under `disaggregated`.
    """

    policy: str = "chunked"
    workload: str = "mix"  # a preset (assets/sim/workloads.json) or a recorded trace (core.sim.traffic)
    requests: int = 1000
    rate_per_s: float | None = None
    arrival: str = "poisson"
    seed: int = 0
    model: str = DEFAULT_MODEL
    hardware: str = DEFAULT_HARDWARE
    dtype: str = "bf16"
    tp: int = 1
    instances: int = 2
    prefill_instances: int | None = None
    budget: int = 512
    kv_blocks: int | None = None
    max_batch: int = 256
    max_prefill_tokens: int = 8192
    prompt_scale: float = 1.0
    output_scale: float = 1.0
    prompt_median: float | None = None  # custom lengths: replace the workload's mix by one log-normal
    output_median: float | None = None
    length_sigma: float | None = None
    ttft_target_s: float = 1.0
    tpot_target_s: float = 0.05
    block_tokens: int = BLOCK_TOKENS  # KV block size (vLLM's CPU build: 128)
    request_overhead_s: float = 0.0  # a request's cost outside the forward passes (HTTP, tokenizing), before it queues
    time_scale: float = 1.0  # a recorded trace: 2 plays it at twice its requests per second
    window_start_s: float = 0.0  # a recorded trace: where in the recording to start
    window_s: float | None = None  # a recorded trace: how long a slice (None: to the end)
    prefix_cache: bool = False  # keep full KV blocks by content and reuse them (core.sim.prefix), as vLLM v1
    router: str = "round-robin"  # which copy an arriving request goes to (core.sim.routers)
    router_queue_bound: int = 4  # prefix-aware: a copy whose queue is this much longer than the shortest is passed over
    # what a synthetic workload's prompts share (core.sim.sharing): shared system prompts, conversations
    system_prompts: int = 0  # how many distinct system prompts (0: none)
    system_prompt_tokens: int = 1000  # how long each is
    system_prompt_skew: float = 1.0  # popularity: the k-th drawn with weight 1 / k**skew
    turns: int = 1  # turns per conversation (1: single requests)
    think_s: float = 5.0  # a conversation's next turn is sent this long after the previous answer ends

    def checked(self) -> SimConfig:
        """ValueError, in words, for settings no server could run."""
        for name, value, low, high in (("instances", self.instances, 1, MAX_INSTANCES),
                                       ("token budget", self.budget, 16, 1 << 20),
                                       ("batch limit", self.max_batch, 1, 4096),
                                       ("prefill token limit", self.max_prefill_tokens, 16, 1 << 22),
                                       ("KV block size", self.block_tokens, 1, 4096),
                                       ("seed", self.seed, 0, 2**32 - 1)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be a whole number from {low:,} to {high:,}, got {value!r}")
        if self.kv_blocks is not None and (isinstance(self.kv_blocks, bool) or not isinstance(self.kv_blocks, int)
                                           or not 1 <= self.kv_blocks <= MAX_KV_BLOCKS):
            raise ValueError(f"KV blocks must be a whole number from 1 to {MAX_KV_BLOCKS:,}, got {self.kv_blocks!r}")
        if isinstance(self.request_overhead_s, bool) or not isinstance(self.request_overhead_s, (int, float)) \
                or not 0 <= self.request_overhead_s <= 60:
            raise ValueError(f"the per-request cost must be 0 to 60 s, got {self.request_overhead_s!r}")
        for name, value in (("TTFT target", self.ttft_target_s), ("TPOT target", self.tpot_target_s),
                            ("prompt scale", self.prompt_scale), ("output scale", self.output_scale)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1e6:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        for name, value, high in (("prompt median", self.prompt_median, 131_072),
                                  ("output median", self.output_median, 131_072), ("length spread", self.length_sigma, 3)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not (0 if name == "length spread" else 1) <= value <= high):
                raise ValueError(f"{name} must be a number up to {high:,}, got {value!r}")
        if not (is_recorded(self.workload) or self.workload in load_workloads()):
            raise ValueError(f"unknown workload {self.workload!r}; known: "
                             f"{', '.join([*load_workloads(), *recordings()])}")
        if not isinstance(self.time_scale, (int, float)) or isinstance(self.time_scale, bool) \
                or not 0 < self.time_scale <= MAX_TIME_SCALE:
            raise ValueError(f"time scale must be a number above 0 up to {MAX_TIME_SCALE:g}, got {self.time_scale!r}")
        for name, value in (("window start", self.window_start_s), ("window length", self.window_s)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value < 0 or value > 1e7):
                raise ValueError(f"{name} must be a number of seconds from 0 up to 10,000,000, got {value!r}")
        if not isinstance(self.prefix_cache, bool):
            raise ValueError(f"prefix caching is on or off (true or false), got {self.prefix_cache!r}")
        if not isinstance(self.router, str):
            raise ValueError(f"a router is named by a string, got {self.router!r}")
        router = get_router(self.router)
        if router.needs_prefix_cache and not self.prefix_cache:
            raise ValueError(f"the {self.router} router routes by what each copy's prefix cache holds: "
                             "turn the prefix cache on")
        sharing.check(self.system_prompts, self.system_prompt_tokens, self.system_prompt_skew, self.turns,
                      self.think_s)
        if is_recorded(self.workload) and (self.system_prompts or self.turns > 1):
            raise ValueError("system prompts and conversations are drawn for a synthetic workload; a recording "
                             "brings what its prompts share (Mooncake's block ids)")
        if isinstance(self.router_queue_bound, bool) or not isinstance(self.router_queue_bound, int) \
                or not 0 <= self.router_queue_bound <= MAX_REQUESTS:
            raise ValueError(f"the router's queue bound must be a whole number from 0 to {MAX_REQUESTS:,}, "
                             f"got {self.router_queue_bound!r}")
        get_layout(get_policy(self.policy).layout)().check(self)
        return self

    def prefill_count(self) -> int:
        return self.prefill_instances if self.prefill_instances is not None else max(1, self.instances // 2)


@dataclass
class SimResult:
    """A finished simulation: its settings, every request's times, every server's log, the metrics."""

    config: SimConfig
    requests: list[Request]
    token_s: list[list[float]]  # per request id: when each output token came out
    server_of: list[int]  # per request id: the server that produced its tokens (the decode one if split)
    preemptions_of: list[int]
    servers: list[tuple[str, ServerLog]]  # (role, log): "both", "prefill" or "decode"
    transfers: list[tuple[int, float, float]] = field(default_factory=list)  # (request id, start, end) of KV moves
    kv_blocks_per_server: int = 0
    sim_wall_s: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    played: Played | None = None  # a recorded trace's window and scale
    left_out: int = 0  # requests longer than the model's context window, not served

    def per_request(self) -> list[dict[str, Any]]:
        """One record per request: arrival, lengths, first-token time, token times, TTFT/TPOT/E2E."""
        out = []
        hits = self.prefix_hits_of()
        for r, t, srv, pre in zip(self.requests, self.token_s, self.server_of, self.preemptions_of, strict=True):
            out.append({"id": r.id, "arrival_s": r.arrival_s, "prompt_tokens": r.prompt_tokens,
                        "output_tokens": r.output_tokens, "server": srv, "preemptions": pre,
                        "prefix_hit_tokens": hits.get(r.id, 0),
                        "first_token_s": t[0] if t else None, **metrics.per_request(r.arrival_s, t),
                        "token_s": list(t)})
        return out

    def prefix_hits_of(self) -> dict[int, int]:
        """Prompt tokens each request reused from a prefix cache (its first admission), by request id."""
        return {rid: hit for _, log in self.servers for rid, hit in log.hits_of.items()}

    def prefix_hit_tokens(self) -> int:
        return sum(log.prefix_hits for _, log in self.servers)

    def prefix_hit_rate(self) -> float:
        """Prompt tokens reused over prompt tokens looked up (vLLM's hits over queries); 0.0 when off."""
        queries = sum(log.prefix_queries for _, log in self.servers)
        return self.prefix_hit_tokens() / queries if queries else 0.0

    def to_dict(self, per_request: bool = False) -> dict[str, Any]:
        out = {"kind": "simulated", "settings": asdict(self.config), **self.metrics,
               "prefix_hit_rate": self.prefix_hit_rate(), "prefix_hit_tokens": self.prefix_hit_tokens(),
               "preemptions": sum(log.preemptions for _, log in self.servers),
               "rejected": sum(len(log.rejected) for _, log in self.servers),
               "kv_blocks_per_server": self.kv_blocks_per_server,
               "servers": [role for role, _ in self.servers], "sim_wall_s": self.sim_wall_s,
               "left_out": self.left_out}
        if self.played:
            out["trace"] = self.played.summary()
        out["kv_peak_fraction"] = max((used / log.kv_blocks for _, log in self.servers for _, used in log.kv_used
                                       if log.kv_blocks), default=0.0)
        if per_request:
            out["per_request"] = self.per_request()
            out["kv_usage"] = [{"server": k, "role": role, "kv_blocks": log.kv_blocks,
                                "used_blocks": _thinned(log.kv_used, 1000)}
                               for k, (role, log) in enumerate(self.servers)]
        return out


def _thinned(points: list[tuple[float, int]], most: int) -> list[list[float]]:
    """At most `most` evenly spaced (time, blocks used) points, the last one kept."""
    if len(points) <= most:
        return [list(p) for p in points]
    step = len(points) / most
    return [list(points[int(i * step)]) for i in range(most)] + [list(points[-1])]


def deployment(config: SimConfig, engine=None) -> tuple[ModelSpec, HardwareSpec, Scenario]:
    """The model, machine and setting of `config`; `engine`: its engine_fit, when already read."""
    spec = load_model_preset(config.model)
    engine = engine if engine is not None else engine_fit(config)
    hardware = engine[0].hardware if engine else load_hardware(config.hardware)
    scenario = Scenario(batch=1, prompt_len=1, gen_len=1, weight_dtype=config.dtype, tp=config.tp).resolved()
    check(spec, scenario)
    return spec, hardware, scenario


def engine_fit(config: SimConfig):
    """(predictor, saved entry) when `config.hardware` names a real engine's fit (core.engines.fit),
    else None. Such a fit prices the embedded model on this server in the dtype the engine served
    (saved with the fit), one copy, tp 1."""
    from core.dtypes import normalize_dtype
    from core.engines.fit import engine_predictor
    from core.hardware import list_presets

    if config.hardware in list_presets():
        return None
    found = engine_predictor(config.hardware)
    if found is None:
        return None
    served = found[0].dtype
    if config.model != "smollm2-135m" or normalize_dtype(config.dtype) != served or config.tp != 1:
        raise ValueError(f"{config.hardware!r} is a real engine's fit for smollm2-135m in {served} on one "
                         f"device: simulate that model and dtype with tp 1 (got {config.model}, {config.dtype}, "
                         f"tp {config.tp})")
    return found


def engine_limits(hardware: str, block_tokens: int | None = None) -> dict[str, Any] | None:
    """The settings a real engine's fit carries (None when `hardware` names none): its model and dtype,
    one copy on one device, its token budget, its maximum of running sequences (vLLM's --max-num-seqs),
    its KV capacity and block size (read from the engine where it publishes them) and its per-request
    cost outside the forward passes. `simulate --hardware <fit>` starts from these; flags win. The KV
    capacity is counted in blocks of `block_tokens` when given (a --block-size flag), else the engine's.
    ValueError, in words, for a saved fit that cannot be read."""
    from core.engines.fit import DEFAULT_DTYPE, saved_entry
    from core.hardware import list_presets

    if hardware in list_presets():
        return None
    entry = saved_entry(hardware)
    if entry is None:
        return None
    try:
        block = int(block_tokens or entry.get("block_size", BLOCK_TOKENS))
        limits = {"model": "smollm2-135m", "dtype": str(entry.get("dtype", DEFAULT_DTYPE)), "tp": 1, "instances": 1,
                  "budget": int(entry["budget"]), "max_batch": int(entry["max_seqs"]), "block_tokens": block,
                  "kv_blocks": int(entry["kv_tokens"]) // block,
                  "request_overhead_s": float(entry.get("request_overhead_s", 0.0))}
    except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError):
        raise ValueError(f"the saved fit {hardware!r} cannot be read: run `python -m core engine calibrate` "
                         "again") from None
    return limits


def requests_for(config: SimConfig, spec: ModelSpec) -> list[Request]:
    """The workload's requests for this config: same seed, same arrivals, whatever the policy."""
    return workload_requests(config, spec)[0]


def workload_requests(config: SimConfig, spec: ModelSpec) -> tuple[list[Request], Played | None]:
    """The workload's requests, and for a recorded trace what playing it took and left out."""
    if is_recorded(config.workload):
        played = play(config.workload, config.requests, config.time_scale, config.window_start_s, config.window_s,
                      max_context=spec.max_positions)
        return played.requests, played
    work = get_workload(config.workload)
    if (config.prompt_median, config.output_median, config.length_sigma) != (None, None, None):
        work = custom(work, config.prompt_median, config.output_median, config.length_sigma)
    work = work.scaled(config.prompt_scale, config.output_scale)
    rate = config.rate_per_s if config.rate_per_s is not None else work.rate_per_s
    requests = generate(work, config.requests, rate, config.seed, config.arrival, max_context=spec.max_positions)
    requests = sharing.with_system_prompts(requests, config.system_prompts, config.system_prompt_tokens,
                                           config.system_prompt_skew, config.seed, spec.max_positions)
    return sharing.as_conversations(requests, config.turns, config.think_s, spec.max_positions), None


def fitting(requests: Sequence[Request], spec: ModelSpec) -> tuple[list[Request], int]:
    """The requests that fit the model's context window, renumbered from 0, and how many did not:
    a recording or an arrival file may hold prompts longer than a small model can read. ValueError
    when none fits."""
    fits = [r for r in requests if r.prompt_tokens + r.output_tokens - 1 <= spec.max_positions]
    if not fits:
        raise ValueError(f"all {len(requests):,} request(s) exceed {spec.name}'s context window of "
                         f"{spec.max_positions:,} tokens")
    if len(fits) == len(requests):
        return list(requests), 0
    renumbered = {r.id: i for i, r in enumerate(fits)}  # a later turn whose earlier one was left out starts afresh
    kept = [replace(r, id=i, follows=renumbered.get(r.follows) if r.follows is not None else None)
            for i, r in enumerate(fits)]
    return kept, len(requests) - len(fits)


# A simulation's work, estimated before it starts. The event loop's cost follows the tokens it
# emits (one entry per decode token of every request) and, far more weakly, the prompt tokens it
# schedules in chunks; one work unit is one output token, or 16 prompt tokens. Timed on this
# project's 2-core machines: 0.3 to 2.5 million units per second, by policy, lengths and load.
PROMPT_TOKENS_PER_UNIT = 16


def work_units(requests: Sequence[Request]) -> int:
    """The work units (see above) of simulating `requests` once."""
    return sum(r.output_tokens for r in requests) + sum(r.prompt_tokens for r in requests) // PROMPT_TOKENS_PER_UNIT


def simulate(config: SimConfig, requests: list[Request] | None = None, step: StepTime | None = None,
             should_stop: Callable[[], bool] | None = None,
             deployed: tuple[ModelSpec, HardwareSpec, Scenario] | None = None,
             played: Played | None = None, keep_blocks: bool = False) -> SimResult:
    """Run `config` on `requests` (default: its workload's). `step` may be passed to reuse the
    coefficients of an earlier run of the same deployment. `should_stop`, asked now and then by the
    event loop, ends the run early with core.sim.engine.SimulationStopped. `deployed`: the model,
    machine and setting already resolved (a model from its own config on the calibrated host, which
    config's preset names cannot name); config's model and hardware are then only labels. `played`:
    the recorded trace `requests` came from, when the caller played it (its left-out count is reported).
    `keep_blocks`: each server's log lists the prefix-cache blocks findable at the end (what the engine
    lab draws beside a real engine's); off by default, as it costs time per block."""
    config = config.checked()
    engine = None if deployed is not None else engine_fit(config)
    spec, hardware, scenario = deployed if deployed is not None else deployment(config, engine)
    if requests is None:
        requests, played = workload_requests(config, spec)
    requests, left_out = fitting(requests, spec)
    left_out += played.left_out if played else 0
    step = step or StepTime.fit(spec, hardware, scenario, engine[0] if engine else None)
    if config.kv_blocks is not None:
        blocks = config.kv_blocks
    elif engine:
        blocks = int(engine[1]["kv_tokens"]) // config.block_tokens  # the KV space the engine was started with
    else:
        blocks = kv_blocks_available(spec, hardware, scenario, config.block_tokens)
    if blocks < 1:
        raise ValueError(f"{spec.name} in {config.dtype} does not fit in {config.tp} x {hardware.label}: no memory "
                         "is left for the KV cache; add devices (tensor parallelism) or pick a smaller dtype")
    state = State(now_s=0.0, free_blocks=blocks, block_tokens=config.block_tokens, max_batch=config.max_batch,
                  max_prefill_tokens=config.max_prefill_tokens, budget=config.budget)
    cls = get_policy(config.policy)
    setting = Setting(config, cls, step, blocks, state,
                      kv_bytes_per_token(spec, scenario.kv_dtype) * kv_share(spec, config.tp), hardware.interconnect,
                      should_stop, keep_blocks)
    started = time.perf_counter()
    served = get_layout(cls.layout)().run(requests, setting)
    wall = time.perf_counter() - started
    if served.arrival_of:  # a conversation's later turns arrived when the simulation sent them
        requests = [replace(r, arrival_s=served.arrival_of.get(r.id, r.arrival_s)) for r in requests]
    result = SimResult(config, list(requests), served.token_s, served.server_of, served.preemptions_of,
                       served.servers, served.transfers, blocks, wall, played=played, left_out=left_out)
    result.metrics = metrics.summary([r.arrival_s for r in requests], served.token_s, config.ttft_target_s,
                                     config.tpot_target_s)
    return result
