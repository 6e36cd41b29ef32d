"""Chunked prefill ('chunked'): a token budget per iteration, decodes first, then prompt chunks."""

from __future__ import annotations

from collections.abc import Sequence

from core.sim.policy import Policy, Row, Seq, State, register


@register
class Chunked(Policy):
    """Sarathi-Serve's stall-free batching: a token budget per iteration, filled first with one token
    for every running decode, then with chunks of prompts (the one already started first), so a
    long prompt is spread over many iterations instead of stalling one."""

    name = "chunked"
    label = "Chunked prefill"
    description = "a token budget per iteration: every running decode first, then chunks of prompts (Sarathi-Serve)"

    def next_iteration(self, waiting: Sequence[Seq], running: Sequence[Seq], state: State) -> list[Row]:
        rows = self.decode_rows(running, state.budget)
        left, free, slots = state.budget - len(rows), state.free_blocks, state.max_batch - len(running)
        started = [s for s in running if not s.decoding]
        for s, admitted in [(s, True) for s in started] + [(s, False) for s in waiting]:
            if left <= 0:
                break
            if not admitted and (slots <= 0 or s.decoding):
                continue
            cached, held = (s.prefilled, s.blocks) if admitted else state.start_of(s)
            chunk = min(s.target - cached, left)
            # blocks this chunk needs beyond those it holds; shrink the chunk to what is free
            while chunk > 0 and state.blocks_for(cached + chunk) - held > free:
                chunk = (free + held) * state.block_tokens - cached
            if chunk <= 0:
                break  # first come first served
            rows.append(Row(s, chunk))
            free -= state.blocks_for(cached + chunk) - held
            left -= chunk
            slots -= 0 if admitted else 1
        return rows
