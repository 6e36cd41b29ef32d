"""Where each KV block sits: the conversation and place it holds, and the turn that stored it, for the
engine's blocks (from its KV events) and the simulator's (from its prefix cache) alike, so a page can
draw the two side by side and count where they differ.

The engine's events name a block by hash, its parent and its tokens, and carry the time of their
batch. A chain whose first block holds the tokens at some place of a conversation's prompt is placed
there; its turn is the last turn of that conversation sent before the block was stored (a closed-loop
conversation has one turn in the engine at a time). A chain that starts nowhere the run sent (another
client's, or one whose first blocks were removed before the page saw them) is drawn apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.engines.kv_events import BlockTable
from core.engines.prefix_lab import ConversationWorkload
from core.engines.record import EngineRun

STORED_SLACK_S = 0.05  # an event's time stamp may precede the client's send time by this much


@dataclass(frozen=True)
class PlacedBlock:
    conversation: int | None  # 0-based; None: its chain starts at no place this run's prompts hold
    index: int  # its place: block k holds positions k * size to (k + 1) * size - 1
    turn: int | None  # 0-based turn that stored it; None where it cannot be told
    key: str  # the engine's block hash (shortened hex) or the simulator's request and block


def _key(value: int | bytes) -> str:
    raw = value.to_bytes(16, "big", signed=True) if isinstance(value, int) else value
    return raw.hex()[-12:]


def _place(tokens: tuple[int, ...], prompts: Mapping[int, tuple[int, ...]],
           work: ConversationWorkload) -> tuple[int, int] | None:
    """(conversation, block index) whose positions hold `tokens` in the longest prompt sent so far."""
    size = len(tokens)
    for c in range(work.conversations):
        sent = [prompts[work.turn_id(c, t)] for t in range(work.turns) if work.turn_id(c, t) in prompts]
        if not sent:
            continue
        longest = max(sent, key=len)
        for k in range(len(longest) // size):
            if longest[k * size:(k + 1) * size] == tokens:
                return c, k
    return None


def _turn(run: EngineRun, sent: Mapping[int, float], work: ConversationWorkload, conversation: int,
          stored_unix: float) -> int | None:
    """The last turn of `conversation` sent (`sent`: send times by turn id) before `stored_unix`."""
    if run.clock_unix_s is None:
        return None
    at = stored_unix - run.clock_unix_s + STORED_SLACK_S
    turns = [t for t in range(work.turns) if sent.get(work.turn_id(conversation, t), float("inf")) <= at]
    return turns[-1] if turns else None


def engine_blocks(table: BlockTable, run: EngineRun, prompts: Mapping[int, tuple[int, ...]],
                  work: ConversationWorkload) -> list[PlacedBlock]:
    """The engine's blocks, each placed in its conversation and given the turn that stored it."""
    out = []
    sent = {r.id: r.sent_s for r in run.requests if r.sent_s is not None}
    for chain in table.chains():
        place = _place(chain[0].token_ids, prompts, work)
        for depth, block in enumerate(chain):
            if place is None:
                out.append(PlacedBlock(None, depth, None, _key(block.hash)))
                continue
            conv, first = place
            out.append(PlacedBlock(conv, first + depth, _turn(run, sent, work, conv, block.stored_s), _key(block.hash)))
    return out


def simulated_blocks(held: Sequence[Sequence[int]], work: ConversationWorkload) -> list[PlacedBlock]:
    """The simulator's findable blocks at the end ((request id, block index) from its prefix cache),
    placed the same way: a turn's request id says its conversation and turn."""
    out = []
    for rid, k in held:
        conv, turn = divmod(rid, work.turns)
        out.append(PlacedBlock(conv, k, turn, f"turn {turn + 1}, block {k + 1}"))
    return out


def agreement(engine: list[PlacedBlock], simulated: list[PlacedBlock]) -> dict[str, int]:
    """How many blocks sit in the same conversation, place and turn in both, and how many only in one."""
    a = {(b.conversation, b.index, b.turn) for b in engine}
    b = {(x.conversation, x.index, x.turn) for x in simulated}
    return {"engine": len(engine), "simulated": len(simulated), "same": len(a & b),
            "engine_only": len(a - b), "simulated_only": len(b - a)}
