"""The engine lab's prefix-cache run, as a queued CPU job: conversations whose follow-ups re-send the
engine's own answers, played into an engine with its prefix cache on, while a subscriber reads the
engine's KV events into a block table; then the simulator on the same turns.

Why a job: the engine computes on this server's cores, so the run waits its turn in the queue every
engine run and live generation share (app.shared.jobs). The page only reads snapshots: the run's,
and the block table's (the subscriber thread writes it under its own lock).

Faults end in words, never in the page: an engine that publishes no events is still measured (its
counters and TTFTs) and the page says why no blocks are drawn; lost and malformed messages are
counted; a slow engine is bounded by the read timeout per token and the run's own limit.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass

from app.shared.jobs import Job, RunQueue
from app.views.engines.jobs import live_engine, play_with_client
from core.engines import experiments
from core.engines.base import EngineError
from core.engines.block_map import PlacedBlock, agreement, engine_blocks, simulated_blocks
from core.engines.endpoints import Endpoint
from core.engines.fit import saved_entry
from core.engines.kv_events import BlockTable, Subscriber
from core.engines.metrics import scrape, wait_idle
from core.engines.player import play
from core.engines.prefix_lab import ConversationWorkload, compare_turns, counters, play_conversations
from core.engines.record import EngineRun
from core.sim.workload import Request

RUN_TIMEOUT_S = 120.0
CONNECT_WAIT_S = 5.0
IDLE_WAIT_S = 10.0


def fit_name(endpoint: Endpoint) -> str:
    """The fit that prices this engine: its setting's (a prefix-cache setting borrows the fit of the
    same engine and budget without the cache: a probe would measure the cache, not the forwards)."""
    return endpoint.engine_setting().fit or endpoint.name


def has_fit(endpoint: Endpoint) -> bool:
    return saved_entry(fit_name(endpoint), bundled=False) is not None


@dataclass(frozen=True)
class PrefixOutcome:
    """What the finished run adds to the measurement: the comparison (None without a fit) and both
    block maps placed the same way."""

    comparison: dict | None
    simulated_blocks: list[PlacedBlock] | None
    agreement: dict[str, int] | None


class ConversationJob(Job):
    kind = "engine-prefix"

    def __init__(self, queue: RunQueue, endpoint: Endpoint, workload: ConversationWorkload | None = None) -> None:
        super().__init__(queue)
        self.endpoint = endpoint
        self.workload = workload or ConversationWorkload()
        self.seed = secrets.randbelow(2**31)  # new prompts every run: an earlier run's blocks never hit
        self.run: EngineRun | None = None
        self.prompts: dict[int, tuple[int, ...]] = {}
        self.failure: str | None = None
        self.notes: list[str] = []
        self.events_missing: str | None = None  # why no blocks are drawn, when the engine sent none
        self.outcome: PrefixOutcome | None = None
        self.counters: tuple[tuple[float, float] | None, tuple[float, float] | None] = (None, None)
        self._subscriber: Subscriber | None = None
        self._final_table: BlockTable | None = None
        self._lock = threading.Lock()

    # --- page side -----------------------------------------------------------------------------
    def snapshot(self) -> tuple[EngineRun | None, BlockTable | None, dict[int, tuple[int, ...]]]:
        """The run so far, the block table so far, and the prompts sent so far (copies)."""
        with self._lock:
            run, sub, table = self.run, self._subscriber, self._final_table
            prompts = dict(self.prompts)
        if table is None and sub is not None:
            table = sub.snapshot()
        return (run.snapshot() if run is not None else None), table, prompts

    # --- worker side ---------------------------------------------------------------------------
    def work(self) -> None:
        try:
            play_with_client(self)
        finally:
            with self._lock:
                sub, self._subscriber = self._subscriber, None
                if sub is not None:
                    self._final_table = sub.snapshot()
            if sub is not None:
                sub.stop()
        if self.run is not None and self.failure is None and not self._abandoned:
            self._analyse()

    def _play(self, client) -> None:
        self.progress = "checking the engine"
        live = live_engine(self.endpoint, client)
        if not wait_idle(self.endpoint.base_url, IDLE_WAIT_S):
            self.notes.append("The engine did not report itself idle before the run (another client may have "
                              "been using it): its counters may include that work.")
        self._warm_up(client)  # before listening: its blocks are no turn's
        wait_idle(self.endpoint.base_url, IDLE_WAIT_S)
        if self.endpoint.kv_events:
            self.progress = "connecting to the engine's KV events"
            sub = Subscriber(self.endpoint.kv_events)
            if sub.wait_connected(CONNECT_WAIT_S):
                with self._lock:
                    self._subscriber = sub
            else:
                sub.stop()
                self.events_missing = (f"the engine published no KV events within {CONNECT_WAIT_S:.0f} s (was it "
                                       "started with --kv-events-config?), so its blocks cannot be drawn; its "
                                       "counters and times are still measured")
        before = counters(scrape(self.endpoint.base_url))
        run = experiments.new_run(live, "conversation workload")
        run.settings["label"] = self.endpoint.label
        with self._lock:
            self.run = run
        self.progress = "playing the conversations"
        play_conversations(client, self.workload, run, seed=self.seed, timeout_s=RUN_TIMEOUT_S, prompts=self.prompts)
        wait_idle(self.endpoint.base_url, IDLE_WAIT_S)
        self.counters = (before, counters(scrape(self.endpoint.base_url)))
        if self.counters[1] is None:
            self.notes.append("The engine publishes no prefix-cache counters, so its hit tokens are not measured.")

    def _warm_up(self, client) -> None:
        """Untimed requests of the run's shapes first, on prompts of their own (they store blocks no turn
        can reuse): a cold engine's first prefills were seen to take several times their usual time."""
        self.progress = "warming the engine up (untimed)"
        w = self.workload
        requests = [Request(k, 0.0, w.first_prompt if k == 0 else w.message, 4) for k in range(3)]
        warm = play(client, requests, EngineRun("warm-up", "warm-up", "", ""), seed=self.seed + 1, timeout_s=60)
        if not any(r.token_s for r in warm.requests):
            first = next((r.error for r in warm.requests if r.error), "no token came back")
            raise EngineError(f"{self.endpoint.label} did not answer the warm-up requests: {first}")

    def _analyse(self) -> None:
        if not has_fit(self.endpoint):
            return
        self.progress = "simulating the same turns"
        s = self.endpoint.engine_setting()
        run, table, prompts = self.snapshot()
        assert run is not None
        try:
            comparison = compare_turns(run, self.workload, fit_name(self.endpoint), s.budget, s.max_seqs,
                                       *self.counters)
        except ValueError as exc:
            self.notes.append(f"The simulator could not replay this run: {exc}")
            return
        sim = simulated_blocks(comparison["blocks_held_simulated"], self.workload)
        placed = None
        if table is not None:
            placed = agreement(engine_blocks(table, run, prompts, self.workload), sim)
        self.outcome = PrefixOutcome(comparison, sim, placed)
