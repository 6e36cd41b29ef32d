"""Prefill first ('prefill-first'): continuous batching, a waiting prompt ahead of the decodes."""

from __future__ import annotations

from collections.abc import Sequence

from core.sim.policy import Policy, Row, Seq, State, register


@register
class PrefillFirst(Policy):
    """Continuous batching that prefills a waiting prompt, whole, in the very next iteration, ahead
    of the running decodes: new requests start fast, and every long prompt stalls everyone's next
    token for as long as its prefill takes."""

    name = "prefill-first"
    label = "Prefill first"
    description = "continuous batching; a waiting prompt is prefilled whole in the next iteration, ahead of decodes"

    def next_iteration(self, waiting: Sequence[Seq], running: Sequence[Seq], state: State) -> list[Row]:
        return self.whole_prefills(waiting, running, state) or self.decode_rows(running)
