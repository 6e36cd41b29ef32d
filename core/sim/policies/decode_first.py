"""Decode first ('decode-first'): continuous batching that never delays a running decode."""

from __future__ import annotations

from collections.abc import Sequence

from core.sim.policy import Policy, Row, Seq, State, register


@register
class DecodeFirst(Policy):
    """Continuous batching that never delays a running decode: a waiting prompt is prefilled only
    in an iteration with no decode to run. Smooth tokens for those admitted, long waits for the rest."""

    name = "decode-first"
    label = "Decode first"
    description = "continuous batching; a prompt is prefilled only in an iteration with no decode to run"

    def next_iteration(self, waiting: Sequence[Seq], running: Sequence[Seq], state: State) -> list[Row]:
        return self.decode_rows(running) or self.whole_prefills(waiting, running, state)
