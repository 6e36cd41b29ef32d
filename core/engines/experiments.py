"""The lab's runs on a started engine, each measured and then simulated on the same requests.

- calibrate: the probe and fit of core.engines.fit, saved under the setting's name;
- stall: the stall workload (core.engines.lab.StallWorkload) played, simulated, compared;
- poisson: a different workload (requests arriving at random), to hold the fit to requests it
  was not fitted on;
- bundle: what the lab page plays where no engine runs (a recording: measured, simulated and the
  errors between them, with when, where and on which engine it was made).
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.engines import fit as engine_fit
from core.engines.base import EngineError
from core.engines.kinds import kind_of
from core.engines.lab import (
    Comparison,
    QueueWorkload,
    StallWorkload,
    against_itself,
    compare,
    per_request_errors,
    simulate_run,
)
from core.engines.player import play
from core.engines.prefix_lab import ConversationWorkload, compare_turns, counters, play_conversations
from core.engines.record import EngineRun
from core.engines.request_cost import fit_with_request_cost
from core.engines.session import LiveEngine
from core.sim.workload import Component, Lengths, Workload, generate

BUNDLE_FORMAT = 1
POISSON = Workload("engine-poisson", "Short chats arriving at random", 3.0,
                   (Component(1.0, Lengths(96, 0.6, 16, 768), Lengths(32, 0.4, 8, 64)),))
POISSON_REQUESTS = 16


def calibrate(engine: LiveEngine, repeats: int = 2) -> dict[str, Any]:
    """Probe the engine, fit its latency model and save the fit under the engine's setting name."""
    return fit_samples(engine, probe(engine, repeats))


def probe(engine: LiveEngine, repeats: int = 2) -> tuple[list, list]:
    """The probe's forwards, and its concurrent prompts (core.engines.fit.probe_concurrent)."""
    samples = engine_fit.probe(engine.client, engine.setting.budget, repeats=repeats, dtype=engine.setting.dtype)
    return samples, engine_fit.probe_concurrent(engine.client, repeats=repeats)


def fit_samples(engine: LiveEngine, probed: tuple[list, list]) -> dict[str, Any]:
    """Fit and save from a probe already measured on this engine (the fit is cheap, the probe is not:
    one probe can serve every setting name the same engine is listed under). The fit carries the
    engine's KV capacity and block size as its /metrics publish them, and the per-request cost."""
    from core.engines.metrics import cache_config

    samples, concurrent = probed
    predictor, request_cost = fit_with_request_cost(samples, concurrent, engine.setting)
    return engine_fit.save(engine.setting, predictor, samples, engine.version,
                           capacity=cache_config(engine.base_url), request_overhead_s=request_cost)


def new_run(engine: LiveEngine, note: str = "") -> EngineRun:
    s = engine.setting
    model = kind_of(s.engine).model_label(s.dtype) or f"served as {engine.client.model}"
    return EngineRun(engine=s.engine, setting=s.name, model=model, started_at="",
                     engine_version=engine.version,
                     settings={"budget": s.budget, "max_seqs": s.max_seqs, "threads": s.threads, "label": s.label},
                     note=note)


def simulated(run: EngineRun, engine_name: str) -> tuple[dict[int, list[float]], Comparison]:
    """The simulator's token times for the run's requests (chunked, the engine's budget and
    sequence limit, its fit) and the errors against the measurement."""
    sim, _ = simulate_run(run, engine_name, int(run.settings["budget"]), int(run.settings["max_seqs"]))
    return sim, compare(run, sim)


def stall(engine: LiveEngine, workload: StallWorkload | None = None, seed: int = 0) -> dict[str, Any]:
    requests, roles = (workload or StallWorkload()).requests()
    run = play(engine.client, requests, new_run(engine, "stall workload"), roles, seed=seed,
               metrics_url=engine.base_url, timeout_s=300)
    sim, comparison = simulated(run, engine.setting.name)
    return {"setting": engine.setting.name, "label": engine.setting.label, "run": run.to_dict(),
            "simulated": {str(k): v for k, v in sim.items()}, "comparison": comparison.to_dict()}


def queueing(engine: LiveEngine, workload: QueueWorkload | None = None, seed: int = 0,
             again: bool = False) -> dict[str, Any]:
    """Traffic past saturation (lab.QueueWorkload): the engine queues what its sequence cap and KV
    space cannot run; the simulator, with the engine's fit and limits, is held to every request's
    TTFT, TPOT and E2E (lab.per_request_errors). `again`: the same requests played once more right
    after, and the engine held to itself the same way (`engine_self`, lab.against_itself)."""
    requests, roles = (workload or QueueWorkload()).requests(seed)

    def played():
        return play(engine.client, requests, new_run(engine, "queueing workload"), roles, seed=seed + 500,
                    metrics_url=engine.base_url, timeout_s=600)

    run = played()
    sim, _ = simulate_run(run, engine.setting.name, int(run.settings["budget"]), int(run.settings["max_seqs"]))
    waiting = [m["values"].get("vllm:num_requests_waiting", 0.0) for m in run.metrics]
    out = {"setting": engine.setting.name, "requests": len(requests), "errors": per_request_errors(run, sim),
           "peak_waiting": max(waiting, default=None)}
    if again:
        out["engine_self"] = against_itself(run, played())
    return out


def conversations(engine: LiveEngine, workload: ConversationWorkload | None = None, seed: int = 0) -> dict[str, Any]:
    """Conversations re-sending the engine's own answers (core.engines.prefix_lab) on an engine with
    its prefix cache on: each turn's TTFT and the cache's hit tokens, measured against simulated."""
    from core.engines.metrics import scrape, wait_idle

    work = workload or ConversationWorkload()
    s = engine.setting
    wait_idle(engine.base_url)
    events = None
    if s.kv_events:  # the engine's own blocks, as its KV events tell them
        from urllib.parse import urlsplit

        from core.engines.kinds.vllm import kv_events_endpoint
        from core.engines.kv_events import Subscriber

        events = Subscriber(kv_events_endpoint(urlsplit(engine.base_url).port))
        if not events.wait_connected(10.0):
            events.stop()
            raise EngineError(f"{s.name} publishes no KV events at {events.endpoint} (started without them?)")
    try:
        before = counters(scrape(engine.base_url))
        prompts: dict[int, tuple[int, ...]] = {}
        run = play_conversations(engine.client, work, new_run(engine, "conversation workload"), seed=seed,
                                 prompts=prompts)
        wait_idle(engine.base_url)
        after = counters(scrape(engine.base_url))
        table = events.snapshot() if events is not None else None
    finally:
        if events is not None:
            events.stop()
    out = {"setting": s.name, "run": run.to_dict(),
           **compare_turns(run, work, s.fit or s.name, s.budget, s.max_seqs, before, after)}
    if table is not None:
        from core.engines.block_map import agreement, engine_blocks, simulated_blocks

        placed = agreement(engine_blocks(table, run, prompts, work),
                           simulated_blocks(out["blocks_held_simulated"], work))
        out["kv_events"] = {"placed": placed, "blocks_stored": table.stored, "blocks_removed": table.removed,
                            "messages": table.messages, "lost": table.lost, "bad": table.bad,
                            "problems": table.problems, "block_size": table.block_size,
                            "chains": [len(chain) for chain in table.chains()]}
    return out


def poisson(engine: LiveEngine, seed: int = 0) -> dict[str, Any]:
    requests = generate(POISSON, POISSON_REQUESTS, POISSON.rate_per_s, seed=seed)
    run = play(engine.client, requests, new_run(engine, "poisson workload"), seed=seed + 99,
               metrics_url=engine.base_url, timeout_s=300)
    sim, comparison = simulated(run, engine.setting.name)
    return {"setting": engine.setting.name, "run": run.to_dict(), "simulated": {str(k): v for k, v in sim.items()},
            "comparison": comparison.to_dict()}


def cpu_model() -> str:
    """The CPU's model name as Linux reports it (the architecture elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    return {"cpu": cpu_model(), "cores": os.cpu_count(),
            "system": platform.system(), "python": platform.python_version()}


def bundle(results: list[dict[str, Any]], fits: dict[str, dict[str, Any]],
           workload: StallWorkload | None = None) -> dict[str, Any]:
    """A recording for the page: every setting's stall run with its simulation, comparison and fit."""
    for r in results:
        r["fit"] = {k: v for k, v in fits.get(r["setting"], {}).items() if k != "samples"}
    return {"format": BUNDLE_FORMAT, "kind": "recording",
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
            "workload": asdict(workload or StallWorkload()), "settings": results}


def read_bundle(data: Any) -> dict[str, Any]:
    """A recording bundle checked field by field (the measured runs through EngineRun.from_dict)."""
    if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT or not isinstance(data.get("settings"), list):
        raise ValueError("not an engine-lab recording (expected format 1 with a list of settings)")
    out = {**data, "settings": []}
    for entry in data["settings"]:
        run = EngineRun.from_dict(entry["run"])
        sim = {int(k): [float(t) for t in v] for k, v in dict(entry.get("simulated", {})).items()}
        out["settings"].append({**entry, "run": run, "simulated": sim})
    return out
