"""The event loop of one simulated server: admit, ask the policy, price, advance the clock, emit tokens.

Time only moves by iterations (each priced by core.sim.steptime.StepTime from exactly the rows it
holds) or by jumping to the next arrival when the server is idle. KV memory is paged: a request
holds ceil(positions / 16) blocks; a request waits while its prompt's blocks are not free, and
when a running decode needs a new block and none is left, the most recently admitted request is
preempted (its blocks freed, its cache to be recomputed later), as vLLM does by default.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from core.cost import row_sums
from core.sim.policy import Policy, Seq, State
from core.sim.prefix import PrefixCache
from core.sim.steptime import StepTime


@dataclass
class ServerLog:
    """What one server did: every iteration (start, seconds, prefill tokens, decode tokens, rows,
    padded tokens) and the KV blocks in use after it."""

    iterations: list[tuple[float, float, int, int, int, int]] = field(default_factory=list)
    kv_used: list[tuple[float, int]] = field(default_factory=list)
    kv_blocks: int = 0
    prefix_queries: int = 0  # prompt tokens looked up in the prefix cache (first admissions)
    prefix_hits: int = 0  # of those, tokens reused
    hits_of: dict[int, int] = field(default_factory=dict)  # request id -> prompt tokens reused
    prefix_blocks_stored: int = 0  # blocks the prefix cache made findable (as an engine's BlockStored events)
    prefix_blocks_held: list[tuple[int, int]] = field(default_factory=list)  # findable at the end: (request id,
    # block index in it) of the request that made each findable, in the order made so
    preemptions: int = 0
    rejected: list[int] = field(default_factory=list)  # request ids too large for this server's KV memory


class SimulationStopped(Exception):  # noqa: N818 (a request, not an error)
    """The simulation's `should_stop` said so: its reader stopped it or left."""


STOP_CHECK_EVERY = 1024  # loop passes between two `should_stop` calls (well under a millisecond of work)


class Server:
    """One simulated server: its queues, clock and KV blocks. Requests are offered in arrival order
    (`offer`); `run` advances the loop up to a time, or to the end of what it was offered, so a
    router can look at every copy's state at each arrival (copies on one clock).

    `state` gives the limits (block size, batch, budgets); the server keeps its own copy, whose clock
    and free blocks the loop moves. `hand_off`: a disaggregated prefill server; a request leaves as
    soon as its first token is out. `should_stop` is asked every STOP_CHECK_EVERY passes; True ends
    the run with SimulationStopped. `prefix_cache`: full blocks are kept by content and reused
    (core.sim.prefix), as vLLM v1 does; `names` may be shared by servers of the same block size;
    `keep_blocks`: the log lists the blocks findable at the end and who made them so (a cost per block).
    """

    def __init__(self, policy: Policy, step: StepTime, kv_blocks: int, state: State, hand_off: bool = False,
                 should_stop: Callable[[], bool] | None = None, prefix_cache: bool = False,
                 names: dict[int, list[int]] | None = None, keep_blocks: bool = False) -> None:
        self.log = ServerLog(kv_blocks=kv_blocks)
        self.policy, self.step_time, self.kv_blocks = policy, step, kv_blocks
        self.block = state.block_tokens
        self.prefix = PrefixCache(kv_blocks, self.block, names, keep_blocks) if prefix_cache else None
        self.state = replace(state, prefix=self.prefix)
        self.hand_off, self.should_stop = hand_off, should_stop
        self.pending: deque[Seq] = deque()  # offered, not yet at the scheduler (available_s in order)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.free = kv_blocks
        self.now = 0.0
        self.passes = 0
        self.shape = step.shape  # what core.cost.row_sums needs, once per run
        self.finished: list[Seq] | None = None  # a list to collect requests as they end (a closed loop)
        self.blocked = False  # nothing can happen until more is offered
        self.admitted: set[int] = set()  # ids of the requests the current iteration admits

    def offer(self, seq: Seq) -> None:
        self.pending.append(seq)
        self.blocked = False

    def next_event_s(self) -> float:
        """When this server next does something with what it holds (infinity: nothing until offered more)."""
        if self.blocked:
            return float("inf")
        if self.waiting or self.running:
            return self.now
        return max(self.now, self.pending[0].available_s) if self.pending else float("inf")

    def step(self) -> None:
        """One pass of the loop (a closed loop's driver interleaves the copies pass by pass)."""
        self.blocked = not self._pass(False)

    def queued(self) -> int:
        """Requests offered that are not running yet."""
        return len(self.pending) + len(self.waiting)

    def load(self) -> int:
        return len(self.pending) + len(self.waiting) + len(self.running)

    def run(self, until: float = float("inf")) -> ServerLog:
        """Advance until the clock reaches `until`, or (with `until` left infinite) until every request
        offered is served; a server with nothing it can do before more is offered stops early."""
        final = until == float("inf")
        while (self.pending or self.waiting or self.running) and self.now < until:
            if not self._pass(final):
                break
        if final and self.prefix is not None:
            pc = self.prefix
            self.log.prefix_queries, self.log.prefix_hits, self.log.hits_of = pc.query_tokens, pc.hit_tokens, pc.hits_of
            self.log.prefix_blocks_stored = pc.registrations
            if pc.made is not None:
                self.log.prefix_blocks_held = pc.held_blocks()
        return self.log

    def _preempt_last(self) -> None:
        victim = self.running.pop()
        if self.prefix is None:
            self.free += victim.blocks
        else:
            self.prefix.release(victim)
            self.free = self.prefix.free
        victim.blocks = victim.prefilled = 0
        victim.target = victim.request.prompt_tokens + victim.generated
        victim.preemptions += 1
        self.log.preemptions += 1
        self.waiting.appendleft(victim)

    def _start(self, seq: Seq, n_new: int) -> int:
        """Admit `seq`, which the policy scheduled while it holds no blocks: it starts from the blocks
        it reuses (the policy counted them). Returns the positions in its cache."""
        if n_new and seq.prefilled == 0:
            self.admitted.add(id(seq))
            if self.prefix is not None:
                seq.prefilled = self.prefix.admit(seq)
                seq.blocks = self.prefix.held(seq)
        return seq.prefilled

    def _pass(self, final: bool) -> bool:
        """One pass of the loop: admit what has arrived, then one iteration (or a wait, or a
        preemption). False when nothing can happen until more is offered."""
        self.passes += 1
        if self.should_stop is not None and self.passes % STOP_CHECK_EVERY == 0 and self.should_stop():
            raise SimulationStopped
        block, kv_blocks, pc, log, state = self.block, self.kv_blocks, self.prefix, self.log, self.state
        pending, waiting, running, now = self.pending, self.waiting, self.running, self.now
        while pending and pending[0].available_s <= now:
            s = pending.popleft()
            final_positions = s.request.prompt_tokens + s.request.output_tokens - 1
            if -(-final_positions // block) > kv_blocks:
                log.rejected.append(s.request.id)  # could never hold its own cache, even alone
                continue
            waiting.append(s)
        free = self.free
        # requests that arrive with their cache (a disaggregated hand-off) are admitted here
        while waiting and waiting[0].decoding and waiting[0].blocks == 0 and len(running) < state.max_batch:
            if -(-(waiting[0].prefilled + 1) // block) > free:  # its cache, and room for the next token
                break
            s = waiting.popleft()
            if pc is None:
                s.blocks = -(-s.prefilled // block)
                free -= s.blocks
            else:
                pc.grow(s, -(-s.prefilled // block))
                pc.register(s, s.prefilled)
                s.blocks, free = pc.held(s), pc.free
            running.append(s)
        self.free = free
        if not waiting and not running:
            if pending:
                self.now = max(now, pending[0].available_s)
                return True
            return False
        # reserve a block for every decode whose next token starts one; preempt while short
        while True:
            need = 0
            for s in running:  # a plain loop, the rare condition first: this runs every iteration
                if s.prefilled >= s.blocks * block and s.prefilled >= s.target:
                    need += 1
            if need <= self.free or not running:
                break
            self._preempt_last()
        state.now_s, state.free_blocks = now, self.free - need
        rows = self.policy.next_iteration(waiting, running, state)
        if not rows:
            if running and _stuck(running):
                self._preempt_last()  # part-way prefills hold every block: free the newest for the others
            elif pending:
                self.now = max(now, pending[0].available_s)
            elif running:
                self._preempt_last()
            elif not final:
                return False  # only a later arrival can change anything
            else:
                raise RuntimeError(f"policy {self.policy.name} scheduled nothing with {len(waiting)} requests "
                                   "waiting and none running")
            return True
        free = self.free
        admitted = self.admitted
        admitted.clear()
        # a row of a request holding no blocks admits it (a running one always holds some)
        start = self._start
        sums = row_sums(self.shape, [(n_new + pad, seq.prefilled if seq.blocks else start(seq, n_new))
                                     for seq, n_new, pad in rows])
        prefill_tokens = decode_tokens = padded = 0
        for seq, n_new, pad in rows:
            padded += pad
            if n_new == 0:
                continue
            cached = seq.prefilled
            if cached >= seq.target:
                decode_tokens += n_new
            else:
                prefill_tokens += n_new
            want = -(-(cached + n_new) // block)
            if pc is None:
                free -= want - seq.blocks
            elif cached + n_new >= seq.blocks * block:  # its last block filled (one check for both)
                if want > seq.blocks:
                    pc.grow(seq, want)
                pc.register(seq, cached + n_new)  # findable once scheduled, as vLLM registers them
            seq.blocks = want
        if pc is not None:
            free = pc.free
        step = self.step_time
        positions = 0
        if step.learned_positions:
            from core.cost import _position_rows
            positions = _position_rows([(r.n_new + r.pad, r.seq.prefilled, 1) for r in rows], step.learned_positions)
        dt = step.seconds_of(sums, positions)
        if admitted:
            skipped = []
            found = 0
            while found < len(admitted):
                s = waiting.popleft()
                if id(s) in admitted:
                    running.append(s)
                    found += 1
                else:
                    skipped.append(s)
            waiting.extendleft(reversed(skipped))
        log.iterations.append((now, dt, prefill_tokens, decode_tokens, len(rows), padded))
        now += dt
        done = False
        hand_off = self.hand_off
        for seq, n_new, _ in rows:
            if n_new == 0:
                continue
            seq.prefilled += n_new
            if seq.prefilled >= seq.target:
                seq.generated += 1
                seq.token_s.append(now)
                if seq.generated >= seq.request.output_tokens or (hand_off and seq.generated == 1):
                    if pc is None:
                        free += seq.blocks
                    else:
                        pc.release(seq)
                        free = pc.free
                    seq.blocks = -1  # gone from this server
                    done = True
                    if self.finished is not None:
                        self.finished.append(seq)
        if done:
            self.running = [s for s in running if s.blocks != -1]
        if free < 0:
            raise AssertionError(f"KV blocks overcommitted ({free}) by policy {self.policy.name}")
        self.free, self.now = free, now
        log.kv_used.append((now, kv_blocks - free))
        return True


def run_server(arrivals: list[Seq], policy: Policy, step: StepTime, kv_blocks: int, state: State,
               hand_off: bool = False, should_stop: Callable[[], bool] | None = None,
               prefix_cache: bool = False, keep_blocks: bool = False) -> ServerLog:
    """Serve `arrivals` (sorted by available_s) to completion on one Server, filling in each Seq's
    token times."""
    server = Server(policy, step, kv_blocks, state, hand_off, should_stop, prefix_cache, keep_blocks=keep_blocks)
    for seq in arrivals:
        server.offer(seq)
    return server.run()


def _stuck(running: list[Seq]) -> bool:
    """Every running request is part-way through a prefill that cannot get blocks."""
    return all(not s.decoding for s in running)
