"""A server's prefix cache, with vLLM v1's rules: full KV blocks are kept by content and reused.

How vLLM v1 does it (vllm/v1/core/block_pool.py, kv_cache_manager.py), and this model of it:
- A block is named by its chain: the name of the block before it and the tokens it holds. Two
  prompts share a block only if they share everything up to and including it.
- A block is registered (becomes findable) as soon as the tokens scheduled into it fill it: prompt
  blocks and blocks of generated tokens alike, while their request still runs.
- A freed block keeps its content and name; it is overwritten only when memory needs a block, least
  recently freed first (a request's blocks are freed last block first, so its tail goes first).
  Blocks never used come before any freed one.
- A new request reuses the leading run of registered full blocks, capped so that at least one token
  of its prompt is computed; a block in use by another request is shared, not copied, and counted once.
- Counters follow vLLM's `prefix_cache_queries` / `prefix_cache_hits` (in tokens): a request's first
  admission counts its prompt and its reused tokens; a preempted request's recompute may reuse its own
  freed blocks but counts as neither.

Where this differs from vLLM: a block that two requests fill at once is registered once (vLLM may keep
both copies); a request sees the blocks registered by requests scheduled in earlier iterations, not
by those admitted in the same iteration.

What a prompt holds comes from its request (core.sim.workload.Request): `segments`, pieces of content
by id and length, or Mooncake's `blocks` (one id per 512 tokens); otherwise the prompt is its own.
A request's generated tokens are its own content.
"""

from __future__ import annotations

from collections import OrderedDict

from core.sim.policy import Seq
from core.sim.workload import PREFIX_BLOCK_TOKENS, Request


def content(request: Request) -> list[tuple[tuple[int, int], int]]:
    """What the request's prompt and answer are made of: (content id, tokens) pieces in order. Ids
    are pairs of integers (hashed the same in every process): a source's own id, a prompt of its own,
    or a request's answer."""
    if request.segments:
        pieces = [((0, c), n) for c, n in request.segments]
    elif request.blocks:
        last = request.prompt_tokens - PREFIX_BLOCK_TOKENS * (len(request.blocks) - 1)
        pieces = [((0, b), PREFIX_BLOCK_TOKENS) for b in request.blocks[:-1]] + [((0, request.blocks[-1]), last)]
    else:
        pieces = [((1, request.id), request.prompt_tokens)]  # a prompt of its own
    answer = (2, request.id) if request.answer_id is None else (0, request.answer_id)
    pieces.append((answer, request.output_tokens))  # a later turn may re-send it under that id
    return pieces


def block_names(request: Request, block_tokens: int) -> list[int]:
    """A name for each full block of the request's prompt and answer, in order, such that two blocks
    have the same name exactly when everything up to their last token is the same content.

    A block ending inside piece i at offset k of it is named by (what came before piece i, piece i's
    id, k): the same pieces before, the same piece, as far in. One hash per piece, not per block."""
    names: list[int] = []
    before, start = 0, 0  # hash of the pieces before this one; this piece's first position
    for cid, n in content(request):
        piece = hash((before, cid)) << 24  # offsets stay below 2**24 (pieces are at most 1M tokens)
        first = (-start) % block_tokens or block_tokens  # offset of the first block end inside this piece
        names.extend(piece | k for k in range(first, n + 1, block_tokens))
        before, start = hash((before, cid, n)), start + n
    return names


class PrefixCache:
    """One server's KV blocks with their names: who holds each, which are free, which are findable.

    Physical blocks are numbered as first used; `used_ever` counts those handed out at least once. A
    Seq keeps its own blocks (`Seq.table`, in position order) and how many are registered."""

    def __init__(self, total_blocks: int, block_tokens: int, names: dict[int, list[int]] | None = None,
                 keep_blocks: bool = False) -> None:
        self.total, self.block = total_blocks, block_tokens
        self.used_ever = 0
        self.ref: list[int] = []  # per physical block: requests holding it
        self.name_of: list[int | None] = []
        self.by_name: dict[int, int] = {}  # findable blocks: name -> physical block
        self.free_queue: OrderedDict[int, None] = OrderedDict()  # freed blocks, least recently freed first
        self.names: dict[int, list[int]] = {} if names is None else names  # per request id, worked out once
        self.query_tokens = self.hit_tokens = 0
        self.registrations = 0  # blocks made findable (a real engine's BlockStored events, one per block)
        # with keep_blocks: (request id, block index, name) as each became findable (a cost per block)
        self.made: list[tuple[int, int, int]] | None = [] if keep_blocks else None
        self.hits_of: dict[int, int] = {}  # per request id: prompt tokens reused at its first admission

    @property
    def free(self) -> int:
        """Blocks a request could take now: never used, or freed (cached content is overwritten)."""
        return self.total - self.used_ever + len(self.free_queue)

    def _request_names(self, request: Request) -> list[int]:
        found = self.names.get(request.id)
        if found is None:
            found = self.names[request.id] = block_names(request, self.block)
        return found

    def _names(self, seq: Seq) -> list[int]:
        if seq.names is None:
            seq.names = self._request_names(seq.request)
        return seq.names

    def peek(self, request: Request) -> int:
        """Prompt tokens a request arriving now would reuse here (a router's question)."""
        return self._walk(self._request_names(request), request.prompt_tokens)[0]

    def lookup(self, seq: Seq) -> tuple[int, int]:
        """(tokens it would reuse, how many of those blocks are free now) for a request that must
        hold `seq.target` positions before it samples."""
        return self._walk(self._names(seq), seq.target)

    def _walk(self, names: list[int], positions: int) -> tuple[int, int]:
        """The leading run of registered full blocks among `names`, leaving at least one of
        `positions` to compute: (its tokens, how many of its blocks are free now)."""
        by_name, ref = self.by_name, self.ref
        hit = evictable = 0
        for name in names[:(positions - 1) // self.block]:
            block = by_name.get(name)
            if block is None:
                break
            hit += 1
            evictable += ref[block] == 0
        return hit * self.block, evictable

    def admit(self, seq: Seq) -> int:
        """Take the reused blocks for a request starting (or restarting) its prefill; returns the
        tokens reused, now in its cache. Counted only at a first admission."""
        hit, _ = self.lookup(seq)
        table, by_name, ref = seq.table, self.by_name, self.ref
        for name in seq.names[:hit // self.block]:
            block = by_name[name]
            if ref[block] == 0:
                del self.free_queue[block]
            ref[block] += 1
            table.append(block)
        seq.registered = len(table)
        if seq.preemptions == 0:
            self.query_tokens += seq.request.prompt_tokens
            self.hit_tokens += hit
            self.hits_of[seq.request.id] = hit
        return hit

    def grow(self, seq: Seq, blocks: int) -> None:
        """Give `seq` blocks until it holds `blocks`: never-used ones first, then the least recently
        freed, whose cached content is overwritten."""
        table = seq.table
        need = blocks - len(table)
        fresh = min(need, self.total - self.used_ever)
        if fresh > 0:
            first = self.used_ever
            self.used_ever += fresh
            if fresh == 1:
                table.append(first)
                self.ref.append(1)
                self.name_of.append(None)
            else:
                table.extend(range(first, first + fresh))
                self.ref.extend([1] * fresh)
                self.name_of.extend([None] * fresh)
            need -= fresh
        if need <= 0:
            return
        pop, name_of, by_name, ref = self.free_queue.popitem, self.name_of, self.by_name, self.ref
        for _ in range(need):
            block = pop(last=False)[0]
            old = name_of[block]
            if old is not None:
                if by_name.get(old) == block:
                    del by_name[old]
                name_of[block] = None
            ref[block] = 1
            table.append(block)

    def register(self, seq: Seq, positions: int) -> None:
        """Make the blocks that `positions` tokens fill findable by name (those not already are)."""
        full, done = positions // self.block, seq.registered
        if full <= done:
            return
        table, names, by_name, name_of = seq.table, self._names(seq), self.by_name, self.name_of
        for k in range(done, min(full, len(names))):
            name = names[k]
            if name not in by_name:
                by_name[name] = table[k]
                name_of[table[k]] = name
                self.registrations += 1
                if self.made is not None:
                    self.made.append((seq.request.id, k, name))
        seq.registered = full

    def release(self, seq: Seq) -> None:
        """Free every block `seq` holds, last block first; their content stays findable until overwritten."""
        ref, queue = self.ref, self.free_queue
        for block in reversed(seq.table):
            ref[block] -= 1
            if ref[block] == 0:
                queue[block] = None
        seq.table = []
        seq.registered = 0

    def held(self, seq: Seq) -> int:
        return len(seq.table)

    def held_blocks(self) -> list[tuple[int, int]]:
        """The blocks findable now, as (id of the request that made it findable, its index in that
        request's blocks), in the order they were made findable: what an engine's BlockStored events
        minus its BlockRemoved events would list."""
        made = self.made or []
        latest = {name: n for n, (_, _, name) in enumerate(made) if name in self.by_name}
        return [(rid, k) for n, (rid, k, name) in enumerate(made) if latest.get(name) == n]
