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
    preemptions: int = 0
    rejected: list[int] = field(default_factory=list)  # request ids too large for this server's KV memory


class SimulationStopped(Exception):  # noqa: N818 (a request, not an error)
    """The simulation's `should_stop` said so: its reader stopped it or left."""


STOP_CHECK_EVERY = 1024  # loop passes between two `should_stop` calls (well under a millisecond of work)


def run_server(arrivals: list[Seq], policy: Policy, step: StepTime, kv_blocks: int, state: State,
               hand_off: bool = False, should_stop: Callable[[], bool] | None = None,
               prefix_cache: bool = False) -> ServerLog:
    """Serve `arrivals` (sorted by available_s) to completion, filling in each Seq's token times.

    `state` gives the limits (block size, batch, budgets); its clock and free blocks are the loop's.
    `hand_off`: a disaggregated prefill server; a request leaves as soon as its first token is out.
    `should_stop` is asked every STOP_CHECK_EVERY passes; True ends the run with SimulationStopped.
    `prefix_cache`: full blocks are kept by content and reused (core.sim.prefix), as vLLM v1 does.
    """
    log = ServerLog(kv_blocks=kv_blocks)
    block = state.block_tokens
    pc = PrefixCache(kv_blocks, block) if prefix_cache else None
    state = replace(state, prefix=pc)  # this server's own: the loop moves its clock and free blocks
    waiting: deque[Seq] = deque()
    running: list[Seq] = []
    free = kv_blocks
    now = 0.0
    nxt, n = 0, len(arrivals)
    shape = step.shape  # what core.cost.row_sums needs, once per run

    def preempt_last() -> None:
        nonlocal free
        victim = running.pop()
        if pc is None:
            free += victim.blocks
        else:
            pc.release(victim)
            free = pc.free
        victim.blocks = victim.prefilled = 0
        victim.target = victim.request.prompt_tokens + victim.generated
        victim.preemptions += 1
        log.preemptions += 1
        waiting.appendleft(victim)

    passes = 0
    while nxt < n or waiting or running:
        passes += 1
        if should_stop is not None and passes % STOP_CHECK_EVERY == 0 and should_stop():
            raise SimulationStopped
        while nxt < n and arrivals[nxt].available_s <= now:
            s = arrivals[nxt]
            nxt += 1
            final = s.request.prompt_tokens + s.request.output_tokens - 1
            if -(-final // block) > kv_blocks:
                log.rejected.append(s.request.id)  # could never hold its own cache, even alone
                continue
            waiting.append(s)
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
        if not waiting and not running:
            if nxt < n:
                now = max(now, arrivals[nxt].available_s)
            continue
        # reserve a block for every decode whose next token starts one; preempt while short
        while True:
            need = sum(1 for s in running if s.prefilled >= s.target and s.prefilled >= s.blocks * block)
            if need <= free or not running:
                break
            preempt_last()
        state.now_s, state.free_blocks = now, free - need
        rows = policy.next_iteration(waiting, running, state)
        if not rows:
            if running and _stuck(running):
                preempt_last()  # part-way prefills hold every block: free the newest for the others
            elif nxt < n:
                now = max(now, arrivals[nxt].available_s)
            elif running:
                preempt_last()
            else:
                raise RuntimeError(f"policy {policy.name} scheduled nothing with {len(waiting)} requests "
                                   "waiting and none running")
            continue
        admitted = set()
        for seq, n_new, _ in rows:
            if n_new and seq.blocks == 0 and seq.prefilled == 0:
                admitted.add(id(seq))
                if pc is not None:  # it starts from the blocks it reuses (the policy counted them)
                    seq.prefilled = pc.admit(seq)
                    seq.blocks = pc.held(seq)
        sums = row_sums(shape, [(n_new + pad, seq.prefilled) for seq, n_new, pad in rows])
        prefill_tokens = decode_tokens = padded = 0
        for seq, n_new, pad in rows:
            padded += pad
            if n_new == 0:
                continue
            if seq.prefilled >= seq.target:
                decode_tokens += n_new
            else:
                prefill_tokens += n_new
            want = -(-(seq.prefilled + n_new) // block)
            if pc is None:
                free -= want - seq.blocks
            else:
                if want > seq.blocks:
                    pc.grow(seq, want)
                if (seq.prefilled + n_new) // block > seq.prefilled // block:
                    pc.register(seq, seq.prefilled + n_new)  # findable once scheduled, as vLLM registers them
            seq.blocks = want
        if pc is not None:
            free = pc.free
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
        if done:
            running = [s for s in running if s.blocks != -1]
        if free < 0:
            raise AssertionError(f"KV blocks overcommitted ({free}) by policy {policy.name}")
        log.kv_used.append((now, kv_blocks - free))
    if pc is not None:
        log.prefix_queries, log.prefix_hits, log.hits_of = pc.query_tokens, pc.hit_tokens, pc.hits_of
    return log


def _stuck(running: list[Seq]) -> bool:
    """Every running request is part-way through a prefill that cannot get blocks."""
    return all(not s.decoding for s in running)
