"""The workload player: sends requests to an engine on their arrival times and records every token.

Requests are the simulator's own (core.sim.workload.Request: arrival time, prompt and output
lengths), so a simulated and a measured run of the same requests exist. Prompts are token ids
built before the clock starts (building a 1.5k-token prompt inside the loop once faked a 1.8 s
stall), each one random and so unique: no engine can reuse a prefix the simulator would not.
Outputs have fixed lengths (`ignore_eos`), as the simulator assumes.

A dispatcher thread sends each request at its arrival time into a bounded pool of streams; a
request held back by the bound is sent late, and its record says when it really left. Every
token lands in the shared EngineRun under its lock, so a page can draw the run while it plays.
"""

from __future__ import annotations

import contextlib
import heapq
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import numpy as np

from core.engines.base import EngineClient, EngineError, EngineRequest, StreamEnd, TokenArrival
from core.engines.metrics import Scraper
from core.engines.record import EngineRun, RequestRecord
from core.sim.workload import Request

# token ids drawn for prompts: past the special tokens at the start of SmolLM2's vocabulary
PROMPT_ID_RANGE = (1000, 40000)


def build_prompts(requests: Sequence[Request], seed: int = 0,
                  id_range: tuple[int, int] = PROMPT_ID_RANGE) -> dict[int, tuple[int, ...]]:
    """A random token-id prompt of exactly `prompt_tokens` ids for every request, by request id."""
    rng = np.random.default_rng(seed)
    return {r.id: tuple(int(t) for t in rng.integers(*id_range, size=r.prompt_tokens)) for r in requests}


class Player:
    """Plays requests into one engine. `submit` may be called before or during the run (the lab's
    "inject a long prompt" button); `wait` returns when every submitted request has ended."""

    def __init__(self, client: EngineClient, run: EngineRun, concurrency: int = 64,
                 metrics_url: str | None = None, metrics_period_s: float = 0.5) -> None:
        if not 1 <= concurrency <= 256:
            raise ValueError(f"concurrency must be from 1 to 256, got {concurrency}")
        self.client, self.run = client, run
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="engine-stream")
        self._pending: list[tuple[float, int, RequestRecord, EngineRequest]] = []
        self._cond = threading.Condition()
        self._cancel = threading.Event()
        self._outstanding = 0
        self._open: set = set()  # responses being streamed: cancel() closes them to end blocked reads
        self._t0: float | None = None
        self._dispatcher = threading.Thread(target=self._dispatch, name="engine-dispatch", daemon=True)
        self._scraper = (Scraper(metrics_url, self._metric, self.clock, metrics_period_s)
                         if metrics_url else None)

    # --- the run's clock -----------------------------------------------------------------------
    def clock(self) -> float:
        """Seconds since the run started (0 before it has)."""
        return 0.0 if self._t0 is None else time.perf_counter() - self._t0

    def start(self) -> Player:
        self._t0 = time.perf_counter()
        self.run.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        if self._scraper:
            self._scraper.start()
        self._dispatcher.start()
        return self

    def submit(self, request: Request, prompt: tuple[int, ...] | str, role: str = "",
               at_s: float | None = None) -> RequestRecord:
        """Schedule `request` at its arrival time (or `at_s`, e.g. now for an injected prompt)."""
        arrival = request.arrival_s if at_s is None else at_s
        record = RequestRecord(id=request.id, prompt_tokens=request.prompt_tokens,
                               output_tokens=request.output_tokens, arrival_s=arrival, role=role)
        engine_request = EngineRequest(prompt=prompt, max_new_tokens=request.output_tokens, ignore_eos=True,
                                       request_id=str(request.id))
        with self.run._lock:
            self.run.requests.append(record)
        with self._cond:
            if self._cancel.is_set():  # a run that was stopped takes no more requests
                record.error = "cancelled before it was sent"
                return record
            heapq.heappush(self._pending, (arrival, request.id, record, engine_request))
            self._outstanding += 1
            self._cond.notify_all()
        return record

    def _dispatch(self) -> None:
        while not self._cancel.is_set():
            with self._cond:
                if not self._pending:
                    self._cond.wait(0.2)
                    continue
                due = self._pending[0][0] - self.clock()
                if due > 0:
                    self._cond.wait(min(due, 0.2))
                    continue
                _, _, record, engine_request = heapq.heappop(self._pending)
            self._pool.submit(self._stream_one, record, engine_request)

    def _stream_one(self, record: RequestRecord, engine_request: EngineRequest) -> None:
        sent: list[float] = []
        opened: list = []

        def on_open(response) -> None:
            opened.append(response)
            with self.run._lock:
                if record.sent_s is None and sent:
                    record.sent_s = sent[0] - self._t0  # a page shows the request as sent from now
            self._opened(response)

        try:
            if self._cancel.is_set():
                with self.run._lock:
                    record.error = "cancelled before it was sent"
                return
            stream = self.client.stream(engine_request, sent=sent, on_open=on_open)
            for item in stream:
                if self._cancel.is_set():
                    stream.close()
                    with self.run._lock:
                        record.error = f"cancelled after {len(record.token_s)} tokens"
                    return
                with self.run._lock:
                    if record.sent_s is None and sent:
                        record.sent_s = sent[0] - self._t0
                    if isinstance(item, TokenArrival):
                        record.token_s.append(record.sent_s + item.t_s)
                    elif isinstance(item, StreamEnd):
                        record.engine_figures = dict(item.engine_figures or {})
                        if item.finish_reason:
                            record.engine_figures["finish_reason"] = item.finish_reason
            with self.run._lock:
                if record.sent_s is None and sent:
                    record.sent_s = sent[0] - self._t0
                record.done = True
        except EngineError as exc:
            with self.run._lock:
                if record.sent_s is None and sent:
                    record.sent_s = sent[0] - self._t0
                record.error = (f"cancelled after {len(record.token_s)} tokens" if self._cancel.is_set()
                                else str(exc))
        except Exception as exc:  # a client bug, or a stream closed under its reader by cancel(): record it
            with self.run._lock:
                record.error = (f"cancelled after {len(record.token_s)} tokens" if self._cancel.is_set()
                                else f"{type(exc).__name__}: {exc}")
        finally:
            with self._cond:
                self._open.difference_update(opened)
                self._outstanding -= 1
                self._cond.notify_all()

    def _opened(self, response) -> None:
        with self._cond:
            self._open.add(response)
        if self._cancel.is_set():
            response.close()

    def _metric(self, t_s: float, values: dict[str, float]) -> None:
        with self.run._lock:
            self.run.metrics.append({"t_s": t_s, "values": values})

    def wait(self, timeout_s: float) -> bool:
        """Block until every submitted request has ended or `timeout_s` passed; True if all ended."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._outstanding > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
        return True

    @property
    def outstanding(self) -> int:
        with self._cond:
            return self._outstanding

    def cancel(self) -> None:
        """Stop sending and close every open stream, even one blocked waiting for a token; what was
        recorded stays recorded."""
        self._cancel.set()
        with self._cond:
            for _, _, record, _ in self._pending:
                record.error = "cancelled before it was sent"
            self._outstanding -= len(self._pending)
            self._pending.clear()
            responses = list(self._open)
            self._cond.notify_all()
        for response in responses:
            # closing from another thread may race the reader; either way its stream ends
            with contextlib.suppress(Exception):
                response.close()

    def finish(self) -> EngineRun:
        """Stop the dispatcher and the scraper; mark the run finished (call after wait or cancel)."""
        self._cancel.set()
        if self._dispatcher.is_alive():
            self._dispatcher.join()  # it hands nothing to the pool once cancelled
        # queued streams still run, see the cancel, and record it: none ends with neither error nor done
        self._pool.shutdown(wait=True)
        if self._scraper:
            self._scraper.stop()
        with self.run._lock:
            self.run.finished = True
        return self.run


def play(client: EngineClient, requests: Sequence[Request], run: EngineRun, roles: dict[int, str] | None = None,
         seed: int = 0, concurrency: int = 64, metrics_url: str | None = None, timeout_s: float = 600.0,
         metrics_period_s: float = 0.5) -> EngineRun:
    """Play `requests` on their arrival times and return the finished run (prompts built first)."""
    prompts = build_prompts(requests, seed)
    player = Player(client, run, concurrency, metrics_url, metrics_period_s)
    for r in sorted(requests, key=lambda r: (r.arrival_s, r.id)):
        player.submit(r, prompts[r.id], (roles or {}).get(r.id, ""))
    player.start()
    if not player.wait(timeout_s):
        player.cancel()
        run.note = (run.note + " " if run.note else "") + f"stopped after {timeout_s:.0f} s with requests unfinished"
    return player.finish()
