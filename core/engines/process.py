"""Start a serving engine as its own process group on loopback, wait for its health endpoint, and
stop the whole group whatever happens.

An engine forks helpers (vLLM's API server and engine core, compile workers); stopping only the
parent would leave them holding memory and a port, so every engine is started in a new session and
stopped with SIGTERM to its group, then SIGKILL if it does not go within a few seconds.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from core.engines.base import EngineError

Progress = Callable[[float, str], None]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the engine binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class EngineProcess:
    """One engine process group: `start()` waits until `health_url` answers 200, `stop()` ends it.

    Use as a context manager so an exception, a Ctrl-C or a failed start still stops the group.
    The engine's output goes to `log_path`; its last lines are quoted when it fails to start.
    """

    def __init__(self, name: str, command: Sequence[str], health_url: str, log_path: Path,
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.name, self.command, self.health_url = name, list(command), health_url
        self.log_path, self.env, self.cwd = Path(log_path), env, cwd
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 600.0, progress: Progress | None = None) -> EngineProcess:
        port = urlsplit(self.health_url).port
        if port is not None and port_open(port):  # else the health check would be answered by whatever holds it
            raise EngineError(f"port {port} on 127.0.0.1 is already in use (an engine left running from an "
                              f"earlier start?), so {self.name} cannot take it")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        try:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **(self.env or {})}, cwd=self.cwd,
                                         start_new_session=True)
        except OSError as exc:
            raise EngineError(f"{self.name} could not be started ({exc}); did `make engine-setup` finish?") from None
        finally:
            log.close()
        started = time.monotonic()
        reported = -1e9
        while True:
            waited = time.monotonic() - started
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise EngineError(f"{self.name} exited with code {self.proc.returncode} while starting; "
                                  f"the last lines of {self.log_path}:\n{tail}")
            if self._healthy():
                if progress:
                    progress(1.0, f"{self.name} is up after {waited:.0f} s")
                return self
            if waited > timeout_s:
                self.stop()
                raise EngineError(f"{self.name} did not answer {self.health_url} within {timeout_s:.0f} s; "
                                  f"the last lines of {self.log_path}:\n{self.log_tail()}")
            if progress and waited - reported >= 5.0:
                reported = waited
                progress(min(0.99, waited / timeout_s), f"starting {self.name}: {waited:.0f} s so far "
                                                        "(vLLM took 1-7 minutes on the 2-core machines tried)")
            time.sleep(0.5)

    def _healthy(self) -> bool:
        try:
            return httpx.get(self.health_url, timeout=2.0, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the group, SIGKILL after `grace_s`; safe to call twice or on a dead group."""
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            # the leader is gone; its helpers may not be: the group gets the same signal until empty
            if not _group_alive(self.proc.pid):
                break
        self.proc.poll()

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
