"""A generation run in the background: the runner's events land in `events` as the model makes them.

The page validates input in the script thread (so mistakes show at once as messages), then
starts a GenerationRun; its thread waits for the queue, builds the figure context, and appends
one Event per forward. The fragment that draws reads `events` and never blocks the model.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

from app.shared import host_points
from app.shared.context import RunContext, build_context
from app.shared.jobs import ModelJob, RunQueue
from app.shared.model import get_ceilings, make_annotator
from app.shared.turns import Turns
from core.conversation import KeptCache, capped
from core.runner import GenerationSettings, cold_prefill_ms, environment, run
from core.settings import bench_log
from core.trace import STOP_EOS, STOP_MAX_NEW_TOKENS, STOP_STOPPED, Event, Trace

# The click that starts a run also reruns the whole page script, which builds every figure in
# Python; a prefill timed while that rerun holds the interpreter lock reads several times slower
# than the model is. The run waits for the page to say it has drawn, but never longer than this.
PAGE_SETTLE_MAX_S = 3.0


class Run(Protocol):
    """What the page reads of the run on screen, live or recorded: a GenerationRun (this server's
    model, now) or an app.shared.replay.ReplayRun (a trace: bundled, or a reader's file)."""

    id: int
    events: list[Event]
    ctx: RunContext | None
    status: str
    active: bool
    replay: bool  # a recorded trace, no model behind it
    bundled_name: str | None  # the bundled recording it replays (the link can carry it), else None

    def touch(self) -> None: ...

    def stop(self) -> None: ...

    def trace(self) -> Trace: ...


class GenerationRun(ModelJob):
    kind = "generate"
    replay = False
    bundled_name = None

    def __init__(self, queue: RunQueue, loaded: Any, prompt: str, prompt_ids: list[int],
                 settings: GenerationSettings, wait_for_page: bool = False,
                 turn: dict[str, Any] | None = None, reuse: tuple[KeptCache, int] | None = None) -> None:
        """`turn`: the conversation's record for this run (core.trace.Trace.turn), None for a lone
        question; `reuse`: the last turn's kept cache and how many of its positions to keep."""
        super().__init__(queue)
        self._page_drawn = threading.Event()
        if not wait_for_page:
            self._page_drawn.set()
        self.loaded = loaded
        self.prompt = prompt
        self.prompt_ids = prompt_ids
        self.settings = settings
        self.events: list[Event] = []
        self.wall: list[float] = []  # seconds from the prefill's start to each event's arrival
        self.ctx: RunContext | None = None
        self.stop_reason: str | None = None
        self.turns = Turns()  # the model's forwards and this run's page redraws (app.shared.turns)
        self.turn = turn
        self._reuse = reuse
        self.kept: KeptCache | None = None  # the cache this run leaves, for a follow-up (capped)
        self._dropped = False

    def page_drawn(self) -> None:
        """The page that started this run has finished its script pass: timing may begin."""
        self._page_drawn.set()

    def stop(self) -> None:
        super().stop()
        self._page_drawn.set()  # nothing left to wait for

    def _do_work(self) -> None:
        # Waits on this job's thread, not the model thread, so nobody else's run is held up.
        if not self._page_drawn.is_set():
            self.progress = "waiting for the page to finish drawing…"
            self._page_drawn.wait(PAGE_SETTLE_MAX_S)
        super()._do_work()

    def work(self) -> None:
        self.progress = "measuring this machine's ceilings (once per server)…"
        ceilings = get_ceilings()
        kept_n = self._reuse[1] if self._reuse else 0
        self.ctx = build_context(self.loaded, self.prompt_ids, self.settings.max_new_tokens, self.settings.batch,
                                 self.settings.cache, ceilings, kept=kept_n)
        annotate = make_annotator(self.loaded)
        self.progress = "running"
        start = time.perf_counter()
        steps = run(self.loaded, self.prompt_ids, self.settings, should_stop=self.should_stop, annotate=annotate,
                    reuse=self._reuse, on_kept=self._keep)
        self._reuse = None  # the cache now belongs to this run
        while True:
            with self.turns.forward() as waited_s:
                event = next(steps, None)
            if event is None:
                break
            if waited_s > 0:  # set before the append: a reader never sees the event without it
                event.waited_ms = round(1000.0 * waited_s, 1)
            self.events.append(event)  # list.append is atomic: readers see whole events only
            self.wall.append(time.perf_counter() - start)
        if bench_log() and self.wall_decode_tokens_per_s():
            # app.bench reads this line to compare the page's decode rate with the runner alone
            print(f"PDLAB_RUN_WALL_TPS {self.wall_decode_tokens_per_s():.4f}", file=sys.stderr, flush=True)
        last = self.events[-1] if self.events else None
        if self.should_stop():
            self.stop_reason = STOP_STOPPED
        elif last is not None and len(self.events) >= self.settings.max_new_tokens:
            self.stop_reason = STOP_MAX_NEW_TOKENS
        else:
            self.stop_reason = STOP_EOS
        host_points.record_run(self.events, self.loaded.info.to_dict(), self.settings.to_dict())
        if kept_n and self.events and self.turn is not None and not self.should_stop():
            # the same turn from scratch, timed while this job still holds the model: the page sets the
            # follow-up's time to first token beside it
            self.progress = "timing the same turn prefilled from scratch…"
            try:
                self.turn["cold_ttft_ms"] = round(cold_prefill_ms(self.loaded, self.prompt_ids,
                                                                  self.settings.cache), 4)
            except Exception as exc:  # the answer stands; only the comparison is missing, and says why
                print(f"follow-up: the time from scratch was not measured: {exc!r}", file=sys.stderr, flush=True)

    def _keep(self, kept: KeptCache) -> None:
        self.kept = None if self._dropped else capped(kept)

    def drop_cache(self) -> None:
        """Free the kept cache (a new conversation started, or the next turn runs cold); a run still
        going keeps nothing when it ends."""
        self._dropped = True
        self.kept = None

    @property
    def pauses(self) -> list[float]:
        """Seconds the model waited for this run's page to finish a redraw, one entry per wait."""
        return self.turns.pauses

    @property
    def generated_text(self) -> str:
        return "".join(e.token_text for e in self.events)

    def wall_decode_tokens_per_s(self) -> float | None:
        """Decode tokens per second of wall time, instrumentation and page included."""
        if len(self.wall) < 3:
            return None
        return (len(self.wall) - 1) / (self.wall[-1] - self.wall[0])

    def trace(self) -> Trace:
        return Trace(model=self.loaded.info.to_dict(), settings=self.settings.to_dict(),
                     prompt_token_ids=list(self.prompt_ids), events=list(self.events),
                     generated_text=self.generated_text, prompt_text=self.prompt,
                     stop_reason=self.stop_reason, environment=environment(),
                     prompt_tokens=list(self.ctx.prompt_tokens) if self.ctx is not None else None,
                     turn=dict(self.turn) if self.turn is not None else None)



@contextlib.contextmanager
def page_turn(run: Any) -> Iterator[None]:
    """Hold the model between forwards while this pass draws the page of `run` (app.shared.turns).
    Runs without a model behind them (replays) and finished runs have nothing to hold."""
    turns = getattr(run, "turns", None)
    if turns is None or not getattr(run, "active", False):
        yield
        return
    with turns.page():
        yield
