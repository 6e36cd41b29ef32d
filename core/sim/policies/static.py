"""Static batching ('static'): a padded batch runs until its last request ends."""

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
    description = "request-level batching: a padded batch runs until its last request ends; nobody joins mid-way"

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
