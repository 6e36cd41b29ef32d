"""The engine lab's runs on a live engine, as queued CPU jobs: the stall workload played into it,
then the simulator on the same requests; and the short probe that fits the simulator to it.

Why queued: the engine computes on this server's cores, so a run beside a reader's live
generation (or another reader's engine run) would measure both; every job waits its turn in the
same queue (app.shared.jobs). Why a job per session: each reader sees their own run, and the
page only reads the job's fields (a snapshot of its EngineRun) while the player writes.

An engine that is down, dies mid-run or is too slow never raises into the page: the job's
`failure` says what happened in words, and every request recorded until then stays in its run.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from app.shared.jobs import Job, RunQueue
from core.engines import experiments
from core.engines.base import EngineError
from core.engines.endpoints import Endpoint, version_of
from core.engines.fit import saved_entry
from core.engines.lab import LONG, Comparison, StallWorkload
from core.engines.metrics import wait_idle
from core.engines.openai import OpenAICompatible
from core.engines.player import Player, build_prompts, play
from core.engines.record import EngineRun
from core.engines.session import LiveEngine, client_for
from core.sim.workload import Request

RUN_TIMEOUT_S = 180.0  # the whole run; a request's own silence is bounded by READ_TIMEOUT_S
READ_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 3.0
IDLE_WAIT_S = 10.0  # a run starts from an idle engine, or after this long says it did not
BY_HAND_OUTPUT = 384  # short streams four times longer, so a reader has time to press the button
SEED = 0


@dataclass(frozen=True)
class Analysis:
    """The simulator's account of one measured run: token times by request id, and the errors."""

    simulated: dict[int, list[float]]
    comparison: Comparison
    fit_name: str
    fitted_at: str


def fit_entry(name: str) -> dict | None:
    """This machine's fit of the simulator to the engine named `name` (None when there is none; a
    bundled fit was made on another machine and is not used on a live engine here). Reads a small
    file; no measurement, so the script thread may call it."""
    return saved_entry(name, bundled=False)


def analyse(run: EngineRun, endpoint: Endpoint) -> Analysis | None:
    """Simulate the run's requests with the engine's fit (None without a fit or a measured token).
    CPU work: call it from a queued job."""
    entry = fit_entry(endpoint.name)
    if entry is None or not any(r.token_s for r in run.requests):
        return None
    sim, comparison = experiments.simulated(run, endpoint.name)
    return Analysis(sim, comparison, endpoint.name, str(entry.get("fitted_at", "")))


def lab_client(endpoint: Endpoint) -> OpenAICompatible:
    """The endpoint's client (core.engines.session.client_for), with the lab's shorter timeouts."""
    return client_for(endpoint.engine, endpoint.base_url, endpoint.model, connect_timeout_s=CONNECT_TIMEOUT_S,
                      read_timeout_s=READ_TIMEOUT_S)


def play_with_client(job: Any) -> None:
    """Run `job._play` with a client of its endpoint, closed afterwards; an engine's failure in words
    becomes the job's `failure` (the stall and prefix experiments share this)."""
    client = lab_client(job.endpoint)
    try:
        job._play(client)
    except EngineError as exc:
        job.failure = str(exc)
    finally:
        client.close()


def live_engine(endpoint: Endpoint, client: OpenAICompatible) -> LiveEngine:
    """The engine as core.engines.experiments takes it; EngineError in words when it does not answer."""
    health = client.health()
    if not health.ok:
        raise EngineError(f"{endpoint.label} is not answering ({health.detail or 'no reason given'})")
    return LiveEngine(endpoint.engine_setting(), endpoint.base_url, client, version_of(endpoint))


class StallRunJob(Job):
    """The stall workload on one engine: `streams` short streams, and the long prompt either at the
    workload's time (automatic) or when the reader calls `inject` (by hand)."""

    kind = "engine-run"

    def __init__(self, queue: RunQueue, endpoint: Endpoint, streams: int = 4, by_hand: bool = False) -> None:
        super().__init__(queue)
        if not 1 <= streams <= 8:
            raise ValueError(f"streams must be from 1 to 8, got {streams}")
        self.endpoint, self.streams, self.by_hand = endpoint, streams, by_hand
        base = StallWorkload(streams=streams)
        self.workload = replace(base, short_output=BY_HAND_OUTPUT) if by_hand else base
        self.run: EngineRun | None = None  # set once the player is ready; drawn through snapshot()
        self.failure: str | None = None  # why the run could not start or ended early, in words
        self.notes: list[str] = []
        self.analysis: Analysis | None = None
        self.injected_at: float | None = None
        self._player: Player | None = None
        self._long_prompt: tuple[int, ...] = ()
        self._closing = False
        self._lock = threading.Lock()

    # --- page side -----------------------------------------------------------------------------
    def snapshot(self) -> EngineRun | None:
        return self.run.snapshot() if self.run is not None else None

    @property
    def can_inject(self) -> bool:
        with self._lock:
            return self.by_hand and self._player is not None and not self._closing and self.injected_at is None

    def inject(self) -> bool:
        """Send the long prompt now (by-hand runs, once); False when the run cannot take it."""
        with self._lock:
            if not (self.by_hand and self._player is not None and not self._closing and self.injected_at is None):
                return False
            player = self._player
            now = player.clock()
            player.submit(self.workload.long_request(self.streams, now), self._long_prompt, role=LONG, at_s=now)
            self.injected_at = now
            return True

    def clock(self) -> float:
        with self._lock:
            return self._player.clock() if self._player is not None else 0.0

    # --- worker side ---------------------------------------------------------------------------
    def work(self) -> None:
        play_with_client(self)
        if self.run is not None and not self._abandoned:
            self.progress = "simulating the same requests"
            try:
                self.analysis = analyse(self.run, self.endpoint)
            except ValueError as exc:  # a fit the simulator refuses: the measurement still stands
                self.notes.append(f"The simulator could not replay this run: {exc}")

    def _play(self, client: OpenAICompatible) -> None:
        self.progress = "checking the engine"
        live = live_engine(self.endpoint, client)
        if not wait_idle(self.endpoint.base_url, IDLE_WAIT_S):
            self.notes.append("The engine did not report itself idle before the run (another client may have "
                              "been using it, or it has no metrics): its numbers may include that work.")
        self._warm_up(client)
        self.progress = "building the prompts"
        requests, roles = self.workload.requests(inject_long=not self.by_hand)
        long = self.workload.long_request(self.streams, 0.0)
        prompts = build_prompts([*requests, long], SEED)
        run = experiments.new_run(live, "stall workload, long prompt " + ("by hand" if self.by_hand else "at 0.8 s"))
        run.settings["label"] = self.endpoint.label
        run.settings["streams"] = self.streams
        player = Player(client, run, concurrency=16, metrics_url=self.endpoint.base_url)
        for r in requests:
            player.submit(r, prompts[r.id], roles[r.id])
        self._long_prompt = prompts[long.id]
        with self._lock:
            self.run, self._player = run, player
        self.progress = "playing"
        player.start()
        try:
            self._wait(player)
        finally:
            player.finish()

    def _warm_up(self, client: OpenAICompatible) -> None:
        """Untimed requests of the run's shapes first (a long prefill beside a few decodes), with other
        prompts than the measured ones: a cold engine's first long prefill was seen to take several
        times its usual time, which the run would measure as a stall the engine does not have."""
        self.progress = "warming the engine up (untimed)"
        w = self.workload
        requests = [Request(k, 0.0, w.short_prompt, 4) for k in range(self.streams)]
        requests.append(Request(self.streams, 0.0, w.long_prompt, 1))
        warm = play(client, requests, EngineRun("warm-up", "warm-up", "", ""), seed=SEED + 1, timeout_s=120)
        if not any(r.token_s for r in warm.requests):
            first = next((r.error for r in warm.requests if r.error), "no token came back")
            raise EngineError(f"{self.endpoint.label} did not answer the warm-up requests: {first}")

    def _wait(self, player: Player) -> None:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            if player.wait(0.25):
                with self._lock:  # an inject racing the end either lands before this or is refused
                    if player.outstanding == 0:
                        self._closing = True
                        return
                continue
            if self.should_stop():
                with self._lock:
                    self._closing = True
                player.cancel()
                return
            if time.monotonic() > deadline:
                with self._lock:
                    self._closing = True
                player.cancel()
                self.failure = (f"The run took longer than {RUN_TIMEOUT_S:.0f} s and was stopped; the engine may be "
                                "overloaded. Every token received until then is drawn.")
                return


class CalibrateJob(Job):
    """The probe that fits the simulator to one engine (about a minute of requests), saved under the
    endpoint's name; then, when given a finished run, the simulation of that run with the new fit.
    Never abandoned: the fit serves every reader of this engine."""

    kind = "engine-calibrate"

    def __init__(self, queue: RunQueue, endpoint: Endpoint, run_job: StallRunJob | None = None) -> None:
        super().__init__(queue)
        self.endpoint = endpoint
        self.run_job = run_job
        self.failure: str | None = None
        self.entry: dict | None = None
        self.analysis: Analysis | None = None

    def should_stop(self) -> bool:
        return False

    def work(self) -> None:
        client = lab_client(self.endpoint)
        try:
            live = live_engine(self.endpoint, client)
            self.progress = ("probing the engine: prefills alone, then decode steps at 1, 4, 8 and 16 streams, "
                             "then 8 over a long cache")
            self.entry = experiments.calibrate(live)
        except EngineError as exc:
            self.failure = str(exc)
            return
        except ValueError as exc:  # the probe measured too little to fit
            self.failure = f"The probe could not fit the simulator: {exc}"
            return
        finally:
            client.close()
        run = self.run_job.run if self.run_job is not None else None
        if run is not None and run.finished:
            self.progress = "simulating your run with the new fit"
            try:
                self.analysis = analyse(run, self.endpoint)
            except ValueError as exc:
                self.failure = f"The simulator could not replay the run: {exc}"
