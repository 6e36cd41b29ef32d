"""The scheduling policy interface: which requests share the next iteration, and how much of each.

A policy only decides; it never prices or advances time. The loop (core.sim.engine) asks it for
the next iteration's rows, prices them with the step time, and moves the clock. Policies register
by name so a command line or a config can pick one; the five the simulator teaches are in the
core.sim.policies package, which registers them all when imported.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from core.registry import Registry
from core.sim.workload import Request


@dataclass(slots=True, eq=False)
class Seq:
    """A request on one simulated server, and how far it has got. Mutated by the loop only.

    `target` is how many positions must be in its cache before it can sample its next token: the
    prompt at first; after a preemption (its cache thrown away) the prompt plus every token
    generated so far, all recomputed in one prefill.
    """

    request: Request
    available_s: float
    target: int
    prefilled: int = 0  # positions in its KV cache on this server
    generated: int = 0  # output tokens produced so far
    blocks: int = 0  # KV blocks it holds
    preemptions: int = 0
    token_s: list[float] = field(default_factory=list)  # when each output token came out
    # with a prefix cache (core.sim.prefix): the physical blocks it holds, its block names, how many
    # of its blocks are registered (findable by name)
    table: list[int] = field(default_factory=list)
    names: list[int] | None = None
    registered: int = 0

    @property
    def decoding(self) -> bool:
        """True once its cache holds everything: each further row feeds one token."""
        return self.prefilled >= self.target

    @property
    def remaining_prefill(self) -> int:
        return max(0, self.target - self.prefilled)


_new_tuple = tuple.__new__


class Row(NamedTuple):
    """One request's share of an iteration: `n_new` tokens fed over its cached ones.

    `pad` tokens are priced but thrown away: static batching pads every prompt to the batch's
    longest and keeps computing finished sequences until the whole batch is done.
    """

    seq: Seq
    n_new: int
    pad: int = 0


@dataclass(slots=True)
class State:
    """What the server knows besides the queues. The loop updates the clock and the free blocks in
    place before each decision (a copy per iteration would cost more than the decision); policies
    only read it."""

    now_s: float
    free_blocks: int  # KV blocks free after the running decodes' next tokens are reserved
    block_tokens: int = 16
    max_batch: int = 256  # sequences one iteration may hold (vLLM's max_num_seqs)
    max_prefill_tokens: int = 8192  # whole-prompt policies: prompt tokens per iteration, one prompt at least
    budget: int = 512  # chunked prefill: tokens per iteration, decodes included
    prefix: Any = None  # the server's core.sim.prefix.PrefixCache when prefix caching is on

    def start_of(self, seq: Seq) -> tuple[int, int]:
        """(positions in its cache, blocks it holds for nothing) if `seq` were scheduled now: a request
        not yet holding blocks starts from its reused prefix, whose blocks cost nothing when another
        request holds them and one free block each when they are free but still cached."""
        if self.prefix is None or seq.blocks:
            return seq.prefilled, seq.blocks
        hit, evictable = self.prefix.lookup(seq)
        return hit, hit // self.block_tokens - evictable

    def blocks_for(self, positions: int) -> int:
        return -(-positions // self.block_tokens)


class Policy(ABC):
    """A scheduling policy: `name` (its registry key) and one decision per iteration."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    description: ClassVar[str] = ""  # one line, for the command line's help and the page's fallback
    layout: ClassVar[str] = "colocated"  # the deployment layout it runs in (core.sim.layouts)

    @abstractmethod
    def next_iteration(self, waiting: Sequence[Seq], running: Sequence[Seq], state: State) -> list[Row]:
        """The rows of the next iteration. `waiting` is in arrival order (preempted requests first);
        `running` in admission order. A row for a waiting request admits it. An empty list means
        nothing can run now (the loop then waits for the next arrival)."""

    # --- helpers the policies share -------------------------------------------------------

    @staticmethod
    def decode_rows(running: Sequence[Seq], limit: int | None = None) -> list[Row]:
        """One token for every running request whose prompt is in its cache, oldest first."""
        one = _new_tuple  # tuple.__new__: a decode row per running request per iteration, the hottest line
        rows = [one(Row, (s, 1, 0)) for s in running if s.prefilled >= s.target]
        return rows if limit is None else rows[:limit]

    @staticmethod
    def whole_prefills(waiting: Sequence[Seq], running: Sequence[Seq], state: State,
                       token_limit: int | None = None) -> list[Row]:
        """Whole prompts of waiting requests, first come first served, while the KV blocks, the
        batch limit and the per-iteration prompt-token limit allow (one prompt always, if it fits)."""
        rows, free, tokens, slots = [], state.free_blocks, 0, state.max_batch - len(running)
        limit = state.max_prefill_tokens if token_limit is None else token_limit
        for s in waiting:
            if slots <= 0:
                break
            if s.decoding:
                continue  # arrived with its cache (a disaggregated hand-off): the loop admits it
            cached, held = state.start_of(s)
            need, n_new = state.blocks_for(s.target) - held, s.target - cached
            if need > free or (rows and tokens + n_new > limit):
                break  # first come first served: nobody overtakes the head of the queue
            rows.append(Row(s, n_new))
            free -= need
            tokens += n_new
            slots -= 1
        return rows


_REGISTRY: Registry[Policy] = Registry("policy")
POLICIES = _REGISTRY.entries
register = _REGISTRY.register
get_policy = _REGISTRY.get
