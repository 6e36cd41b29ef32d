"""The scheduling policy interface: which requests share the next iteration, and how much of each.

A policy only decides; it never prices or advances time. The loop asks it for the next
iteration's rows, prices them with the predictor, and moves the clock. Policies register by name
so a command line or a config can pick one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from core.registry import Registry
from core.sim.workload import Request


@dataclass(frozen=True)
class Running:
    """A request the server has admitted, and how far it has got."""

    request: Request
    prefilled: int = 0  # prompt tokens already in its KV cache
    generated: int = 0  # output tokens produced so far


@dataclass(frozen=True)
class State:
    """What the server knows besides the queues: the clock and the KV cache room."""

    now_s: float
    kv_capacity_tokens: int  # positions the KV cache can hold, all sequences together
    kv_used_tokens: int = 0


@dataclass(frozen=True)
class Row:
    """One request's share of an iteration: `n_new` tokens fed on top of `n_cached` cached ones.

    A prefill row feeds (part of) the prompt; a decode row feeds one token. An iteration's rows
    run as one batched forward, which is what the predictor prices.
    """

    request_id: int
    n_new: int
    n_cached: int


class Policy(ABC):
    """A scheduling policy: `name` (its registry key) and one decision per iteration."""

    name: ClassVar[str] = ""

    @abstractmethod
    def next_iteration(self, waiting: Sequence[Request], running: Sequence[Running],
                       state: State) -> list[Row]:
        """The rows of the next iteration, given the queue, the admitted requests and the state.

        An empty list means nothing can run now (the loop then waits for the next arrival).
        """


_REGISTRY: Registry[Policy] = Registry("policy")
POLICIES = _REGISTRY.entries
register = _REGISTRY.register
get_policy = _REGISTRY.get
