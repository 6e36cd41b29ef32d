"""Disaggregated ('disaggregated'): prefill and decode servers apart, the cache handed over."""

from __future__ import annotations

from collections.abc import Sequence

from core.sim.policy import Policy, Row, Seq, State, register


@register
class Disaggregated(Policy):
    """Prefill and decode on separate pools of devices. A prefill server only prefills (whole
    prompts, first come first served) and hands each request's KV cache to a decode server over the
    link; a decode server only decodes (plus recomputing a request it had to preempt), so no prompt
    ever stalls a decode. The loop runs one instance of this class per server, by role."""

    name = "disaggregated"
    label = "Disaggregated"
    layout = "disaggregated"
    description = "prefill servers and decode servers apart, the KV cache handed over the link"

    def __init__(self, role: str = "prefill") -> None:
        if role not in ("prefill", "decode"):
            raise ValueError(f"a disaggregated server is a 'prefill' or a 'decode' one, got {role!r}")
        self.role = role

    def next_iteration(self, waiting: Sequence[Seq], running: Sequence[Seq], state: State) -> list[Row]:
        if self.role == "prefill":
            return self.whole_prefills(waiting, running, state)
        return self.whole_prefills(waiting, running, state) or self.decode_rows(running)
