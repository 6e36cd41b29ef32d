"""Placing a real engine's KV blocks (from its events) and the simulator's in the same frame, and the
prefix-cache experiment's figures and sentences built from them. Hand-made event batches in the shape
vLLM publishes (tests/test_kv_events.py holds one its own encoder wrote); the real engine's are held
to the simulator in tests/engines/test_vllm_prefix_cache.py and drawn in the browser test beside it."""

from __future__ import annotations

from app.views.engines import prefix_figures, prefix_text
from core.engines.block_map import agreement, engine_blocks, simulated_blocks
from core.engines.kv_events import BlockTable, Removed, Stored
from core.engines.prefix_lab import ConversationWorkload
from core.engines.record import EngineRun, RequestRecord

SIZE = 4
WORK = ConversationWorkload(conversations=2, turns=2, first_prompt=9, message=3, output=4)
T0 = 1_000_000.0  # the run's wall clock at its zero


def _conversation(c: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Turn 1's prompt (9 tokens), and turn 2's: turn 1's, its 4-token answer, a 3-token message."""
    base = 100 * (c + 1)
    first = tuple(range(base, base + 9))
    return first, first + tuple(range(base + 50, base + 54)) + tuple(range(base + 80, base + 83))


def _run() -> tuple[EngineRun, dict[int, tuple[int, ...]]]:
    run = EngineRun("vllm", "test", "m", "", clock_unix_s=T0)
    prompts = {}
    for c in range(2):
        p1, p2 = _conversation(c)
        prompts[WORK.turn_id(c, 0)], prompts[WORK.turn_id(c, 1)] = p1, p2
        run.requests += [RequestRecord(WORK.turn_id(c, 0), 9, 4, 0.0, sent_s=c * 0.5, token_s=[c * 0.5 + 1]),
                         RequestRecord(WORK.turn_id(c, 1), 16, 4, 0.0, sent_s=c * 0.5 + 2, token_s=[c * 0.5 + 3])]
    return run, prompts


def _stored(tokens: tuple[int, ...], first: int, hashes: list[int], parent: int | None) -> Stored:
    return Stored(tuple(hashes), parent, tokens[first * SIZE:(first + len(hashes)) * SIZE], SIZE)


def test_the_engines_blocks_are_placed_by_their_tokens_and_timed_to_a_turn():
    """Turn 1 of each conversation computes 9 + 4 - 1 = 12 positions: three blocks; turn 2 computes 19:
    four, the fourth new. Conversation 2's turn 1 overlaps conversation 1's in time, so only the tokens
    can tell their chains apart; the turn comes from the event's time."""
    run, prompts = _run()
    _, c1 = _conversation(0)
    _, c2 = _conversation(1)
    table = BlockTable()
    table.apply(0, T0 + 0.3, [_stored(c1, 0, [11, 12], None)])  # conversation 1's prompt blocks
    table.apply(1, T0 + 0.7, [_stored(c2, 0, [21, 22], None)])
    table.apply(2, T0 + 0.9, [_stored(c1, 2, [13], 12), _stored(c2, 2, [23], 22)])  # the answers fill block 3
    table.apply(3, T0 + 2.2, [_stored(c1, 3, [14], 13)])  # turn 2's message fills block 4
    table.apply(4, T0 + 2.8, [_stored(c2, 3, [24], 23)])
    blocks = engine_blocks(table, run, prompts, WORK)
    placed = {(b.conversation, b.index, b.turn) for b in blocks}
    expected = {(c, k, 0) for c in (0, 1) for k in range(3)} | {(0, 3, 1), (1, 3, 1)}
    assert placed == expected and len(blocks) == 8
    sim = simulated_blocks([(0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (2, 2), (1, 3), (3, 3)], WORK)
    assert agreement(blocks, sim) == {"engine": 8, "simulated": 8, "same": 8, "engine_only": 0, "simulated_only": 0}
    # a block the engine removed is gone from its side, and counted as the simulator's alone
    table.apply(5, T0 + 3.5, [Removed((24,))])
    assert agreement(engine_blocks(table, run, prompts, WORK), sim)["simulated_only"] == 1


def test_a_chain_the_run_never_sent_is_drawn_apart():
    run, prompts = _run()
    table = BlockTable()
    table.apply(0, T0 + 0.3, [Stored((91, 92), None, tuple(range(900, 908)), SIZE)])  # another client's prompt
    blocks = engine_blocks(table, run, prompts, WORK)
    assert [(b.conversation, b.index, b.turn) for b in blocks] == [(None, 0, None), (None, 1, None)]
    fig = prefix_figures.block_maps(blocks, None, WORK.conversations, SIZE, "t")
    assert fig["layout"]["yaxis"]["categoryarray"][-1] == prefix_figures.UNKNOWN
    assert "drawn when the run ends" in fig["layout"]["annotations"][1]["text"]


def test_the_block_figure_draws_every_block_once_with_its_hash():
    run, prompts = _run()
    _, c1 = _conversation(0)
    table = BlockTable()
    table.apply(0, T0 + 0.3, [_stored(c1, 0, [11, 12, 13], None)])
    blocks = engine_blocks(table, run, prompts, WORK)
    sim = simulated_blocks([(0, 0), (0, 1), (0, 2)], WORK)
    fig = prefix_figures.block_maps(blocks, sim, WORK.conversations, SIZE, "Each follow-up stores only ...")
    engine = [t for t in fig["data"] if t["yaxis"] == "y"]
    simulated = [t for t in fig["data"] if t["yaxis"] == "y2"]
    assert sorted(k for t in engine for k in t["customdata"]) == sorted(b.key for b in blocks)
    assert sum(len(t["x"]) for t in simulated) == 3 and [t["x"] for t in engine] == [[1, 2, 3]]
    assert all(t["name"] == "stored by turn 1" for t in fig["data"])
    assert [t["showlegend"] for t in fig["data"]] == [True, False]  # one legend entry per turn


def test_the_answer_and_the_stream_problems_in_words():
    turns = [{"id": i, "ttft_measured_s": 0.3 if i % 2 == 0 else 0.05, "ttft_simulated_s": 0.28,
              "ttft_without_cache_simulated_s": 0.4} for i in range(4)]
    comparison = {"turns": turns, "hit_tokens_measured": 1792.0, "queries_measured": 3408.0,
                  "hit_tokens_simulated": 1792}
    line = prefix_text.answer(comparison, 2)
    assert "1,792 of the 3,408 prompt tokens" in line and "53%" in line
    assert "**50 ms** against 300 ms" in line and "at 400 ms" in line
    assert "published no counters" in prefix_text.answer({**comparison, "hit_tokens_measured": None}, 2)
    table = BlockTable(lost=3)
    table.note("not msgpack: bad")
    problems = prefix_text.stream_problems(table)
    assert len(problems) == 2 and "3 event messages never arrived" in problems[0] and "not msgpack" in problems[1]
    assert prefix_text.stream_problems(BlockTable()) == []
    fig = prefix_figures.turn_ttfts(turns, 2, "t")
    assert [t["name"] for t in fig["data"]] == ["measured", "simulated, prefix cache on", "simulated, no prefix cache"]
    assert fig["data"][0]["y"] == [300.0, 50.0]
