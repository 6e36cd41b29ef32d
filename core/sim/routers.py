"""Request routers: which model copy an arriving request goes to.

A router decides at each arrival, looking at the copies as they stand at that moment (the copies run
on one clock: core.sim.layouts advances each to the arrival's time first when the router asks for it).
Routers register by name, like the scheduling policies; a new one is one small class here.

- round-robin: copies in turn, whatever they hold (the default; it needs no state).
- prefix-aware: the copy whose prefix cache holds the longest start of the prompt, unless its queue
  is more than `queue_bound` requests longer than the shortest; ties (and no hit anywhere) go to the
  least loaded copy, then the lowest numbered. Needs the prefix cache on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from core.registry import Registry
from core.sim.engine import Server
from core.sim.workload import Request


class Router(ABC):
    """Picks a copy for each arriving request. `needs_state`: the copies must be advanced to the
    arrival's time before `pick` (round robin does not look)."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    description: ClassVar[str] = ""
    needs_state: ClassVar[bool] = False
    needs_prefix_cache: ClassVar[bool] = False

    def __init__(self, queue_bound: int = 4) -> None:
        self.queue_bound = queue_bound

    @abstractmethod
    def pick(self, request: Request, servers: Sequence[Server]) -> int:
        """The index of the copy that serves `request`."""


_REGISTRY: Registry[Router] = Registry("router")
ROUTERS = _REGISTRY.entries
register = _REGISTRY.register
get_router = _REGISTRY.get


@register
class RoundRobin(Router):
    name = "round-robin"
    label = "Round robin"
    description = "copies in turn, whatever they hold"

    def __init__(self, queue_bound: int = 4) -> None:
        super().__init__(queue_bound)
        self.count = 0

    def pick(self, request: Request, servers: Sequence[Server]) -> int:
        k = self.count % len(servers)
        self.count += 1
        return k


@register
class PrefixAware(Router):
    name = "prefix-aware"
    label = "Prefix-aware"
    description = ("the copy holding the longest cached start of the prompt, unless its queue is more than "
                   "a bound longer than the shortest; else the least loaded")
    needs_state = True
    needs_prefix_cache = True

    def pick(self, request: Request, servers: Sequence[Server]) -> int:
        shortest = min(s.queued() for s in servers)
        best, best_key = 0, None
        for k, server in enumerate(servers):
            if server.queued() > shortest + self.queue_bound:
                continue
            hit = server.prefix.peek(request) if server.prefix is not None else 0
            key = (-hit, server.load(), k)
            if best_key is None or key < best_key:
                best, best_key = k, key
        return best
