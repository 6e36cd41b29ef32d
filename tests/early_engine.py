"""A real engine started in the background as soon as the tests are collected.

vLLM's CPU build needs about two minutes to start (most of it torch compile), and the engine tests
run last: started at the beginning, those minutes pass while the other tests run, and the engine
tests find it answering. It starts at the lowest CPU priority (nice 19, inherited from the thread
that starts it: Linux niceness is per thread), so it takes only the CPU the other tests leave idle,
and goes back to normal priority once it answers (where the user may raise priority: root; elsewhere
it stays low, which only the engine's own start can feel).
"""

from __future__ import annotations

import contextlib
import os
import threading

import psutil

from core.engines.launch import SETTINGS
from core.engines.session import LiveEngine, installed, started


def renice_group(pgid: int, value: int) -> None:
    """Every thread of every process in process group `pgid` to niceness `value` (best effort)."""
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) != pgid:
                continue
            for thread in proc.threads():
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, thread.id, value)


class EarlyEngine:
    def __init__(self, name: str) -> None:
        self.setting = SETTINGS[name]
        self.ready = threading.Event()
        self.live: LiveEngine | None = None
        self.error: BaseException | None = None
        self._session = None
        self._lock = threading.Lock()
        threading.Thread(target=self._start, name=f"early-{name}", daemon=True).start()

    def _start(self) -> None:
        try:
            os.nice(19)  # this thread only, and so the engine it starts
            session = started(self.setting, progress=None, timeout_s=900)
            live = session.__enter__()
            with self._lock:
                self._session, self.live = session, live
            if live.process is not None and live.process.proc is not None:
                renice_group(live.process.proc.pid, 0)
        except BaseException as exc:  # handed to the test that asks for the engine
            self.error = exc
        finally:
            self.ready.set()

    def take(self, timeout_s: float = 900) -> LiveEngine:
        """The engine once it answers; its start-up error, raised, if it failed."""
        if not self.ready.wait(timeout_s):
            raise TimeoutError(f"{self.setting.name} did not start within {timeout_s:.0f} s")
        if self.error is not None:
            raise self.error
        assert self.live is not None
        return self.live

    def stop(self) -> None:
        """Stops the engine's process group (safe to call twice, or before it answered: then it
        waits for the start to end first)."""
        self.ready.wait(960)
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.__exit__(None, None, None)


_EARLY: dict[str, EarlyEngine] = {}


def start_early(name: str) -> None:
    if name not in _EARLY and installed(SETTINGS[name].engine):
        _EARLY[name] = EarlyEngine(name)


def early(name: str) -> EarlyEngine | None:
    return _EARLY.get(name)


def stop_all() -> None:
    for engine in list(_EARLY.values()):
        engine.stop()
    _EARLY.clear()
