"""The five scheduling policies the simulator compares, one small class each.

Each answers one question, "what runs in the next iteration?", from the queue, the running
requests and the free KV blocks. Preemption, block accounting, pricing and the clock belong to
the loop (core.sim.engine), so a policy reads as the one rule it stands for.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.sim.policy import Policy, Row, Seq, State, register


@register
class Static(Policy):
    """Request-level batching: when idle, take up to a batch of waiting requests, pad their prompts
    to the longest, and run the batch until its last request finishes. Finished requests keep their
    slot (their tokens are computed and thrown away) and nobody joins mid-batch."""

    name = "static"
    label = "Static batching"

    def __init__(self) -> None:
        self.batch: list[Seq] = []
        self.ghosts: list[Row] = []  # the batch's finished members, priced as padding

    def next_iteration(self, waiting: Sequence[Seq], running: Sequence[Seq], state: State) -> list[Row]:
        if not running:
            self.batch, self.ghosts = [], []
            rows = self.whole_prefills(waiting, running, state, token_limit=1 << 62)
            longest = max((r.n_new for r in rows), default=0)
            self.batch = [r.seq for r in rows]
            return [Row(r.seq, r.n_new, longest - r.n_new) for r in rows]
        rows = self.decode_rows(running)
        # a finished member still occupies its slot until the whole batch is done
        if len(self.ghosts) + len(running) < len(self.batch):
            self.ghosts = [Row(s, 0, 1) for s in self.batch if s.generated >= s.request.output_tokens]
        rows += self.ghosts
        if not rows:  # a preempted member left the batch: recompute it before decoding resumes
            rows = self.whole_prefills(waiting, running, state)[:1]
            self.batch += [r.seq for r in rows]
        return rows


@register
class PrefillFirst(Policy):
    """Continuous batching that prefills a waiting prompt, whole, in the very next iteration, ahead
    of the running decodes: new requests start fast, and every long prompt stalls everyone's next
    token for as long as its prefill takes."""

    name = "prefill-first"
    label = "Prefill first"

    def next_iteration(self, waiting: Sequence[Seq], running: Sequence[Seq], state: State) -> list[Row]:
        return self.whole_prefills(waiting, running, state) or self.decode_rows(running)


@register
class DecodeFirst(Policy):
    """Continuous batching that never delays a running decode: a waiting prompt is prefilled only
    in an iteration with no decode to run. Smooth tokens for those admitted, long waits for the rest."""

    name = "decode-first"
    label = "Decode first"

    def next_iteration(self, waiting: Sequence[Seq], running: Sequence[Seq], state: State) -> list[Row]:
        return self.decode_rows(running) or self.whole_prefills(waiting, running, state)


@register
class Chunked(Policy):
    """Sarathi-Serve's stall-free batching: a token budget per iteration, filled first with one token
    for every running decode, then with chunks of prompts (the one already started first), so a
    long prompt is spread over many iterations instead of stalling one."""

    name = "chunked"
    label = "Chunked prefill"

    def next_iteration(self, waiting: Sequence[Seq], running: Sequence[Seq], state: State) -> list[Row]:
        rows = self.decode_rows(running, state.budget)
        left, free, slots = state.budget - len(rows), state.free_blocks, state.max_batch - len(running)
        started = [s for s in running if not s.decoding]
        for s, admitted in [(s, True) for s in started] + [(s, False) for s in waiting]:
            if left <= 0:
                break
            if not admitted and (slots <= 0 or s.decoding):
                continue
            chunk = min(s.remaining_prefill, left)
            # blocks this chunk needs beyond those it holds; shrink the chunk to what is free
            while chunk > 0 and state.blocks_for(s.prefilled + chunk) - s.blocks > free:
                chunk = (free + s.blocks) * state.block_tokens - s.prefilled
            if chunk <= 0:
                break  # first come first served
            rows.append(Row(s, chunk))
            free -= state.blocks_for(s.prefilled + chunk) - s.blocks
            left -= chunk
            slots -= 0 if admitted else 1
        return rows


@register
class Disaggregated(Policy):
    """Prefill and decode on separate pools of devices. A prefill server only prefills (whole
    prompts, first come first served) and hands each request's KV cache to a decode server over the
    link; a decode server only decodes (plus recomputing a request it had to preempt), so no prompt
    ever stalls a decode. The loop runs one instance of this class per server, by role."""

    name = "disaggregated"
    label = "Disaggregated"

    def __init__(self, role: str = "prefill") -> None:
        if role not in ("prefill", "decode"):
            raise ValueError(f"a disaggregated server is a 'prefill' or a 'decode' one, got {role!r}")
        self.role = role

    def next_iteration(self, waiting: Sequence[Seq], running: Sequence[Seq], state: State) -> list[Row]:
        if self.role == "prefill":
            return self.whole_prefills(waiting, running, state)
        return self.whole_prefills(waiting, running, state) or self.decode_rows(running)
