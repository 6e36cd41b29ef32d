"""The engine client interface: a health check and a streamed request, plus a registry by name.

No network code lives here; a client module implements EngineClient for one engine's API and
registers itself, so a command line can pick an engine by name.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from core.registry import Registry


@dataclass(frozen=True)
class EngineRequest:
    """One generation request as every client understands it (greedy unless a temperature is set)."""

    prompt: str | tuple[int, ...]  # text, or token ids (an exact prompt length, tokenised before timing)
    max_new_tokens: int
    temperature: float = 0.0
    request_id: str = ""
    ignore_eos: bool = False  # generate exactly max_new_tokens: fixed lengths, as the simulator's

    def __post_init__(self) -> None:
        if isinstance(self.prompt, tuple):
            if not self.prompt or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in self.prompt):
                raise ValueError("a token-id prompt must be a non-empty tuple of token ids (integers >= 0)")
        elif not isinstance(self.prompt, str) or not self.prompt:
            raise ValueError("prompt must be a non-empty string")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) \
                or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")


@dataclass(frozen=True)
class TokenArrival:
    """One streamed token as the client saw it arrive: `t_s` seconds after the request was sent."""

    index: int  # 0 for the first output token
    text: str
    t_s: float
    token_id: int | None = None  # when the engine reports it

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"index must be >= 0, got {self.index}")
        if not math.isfinite(self.t_s) or self.t_s < 0:
            raise ValueError(f"t_s must be a finite time >= 0, got {self.t_s!r}")


@dataclass(frozen=True)
class StreamEnd:
    """The stream's last word: why it stopped and the engine's own figures for the request (vLLM's
    usage, llama-server's timings), when it reports them."""

    finish_reason: str | None = None
    engine_figures: dict | None = None


class EngineError(RuntimeError):
    """An engine that is down, too slow, or answered something that is not a token stream; the
    message says which, in words a reader can act on."""


@dataclass(frozen=True)
class Health:
    """Whether the engine answers and will take requests, with a line saying why not."""

    ok: bool
    detail: str = ""


class EngineClient(ABC):
    """A client of one serving engine: `name` (its registry key), `health()` and `stream()`."""

    name: ClassVar[str] = ""

    @abstractmethod
    def health(self) -> Health:
        """Whether the engine is up; never raises for an unreachable engine (ok=False says so)."""

    @abstractmethod
    def stream(self, request: EngineRequest) -> Iterator[TokenArrival | StreamEnd]:
        """Send `request` and yield each output token as it arrives, in order, then (where the
        engine says) one StreamEnd; EngineError for an engine that fails mid-stream."""


_REGISTRY: Registry[EngineClient] = Registry("engine")
ENGINES = _REGISTRY.entries
register = _REGISTRY.register
get_engine = _REGISTRY.get
