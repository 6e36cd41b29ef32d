"""vLLM's own prefix cache, measured: conversations that re-send the engine's own answers reuse the
earlier turns' blocks, its KV events name the blocks it stored, and the simulator's prefix cache
predicts the same reuse and the same blocks. Structure and counts
only; the TTFT errors are engine-bench's figures, not thresholds here."""

from __future__ import annotations

import pytest

from core.engines import experiments
from core.engines.prefix_lab import ConversationWorkload

pytestmark = [pytest.mark.engine, pytest.mark.prefix_engine]


def test_follow_ups_reuse_the_engines_cache_as_the_simulator_predicts(vllm_prefix):
    """Two conversations of three turns (400-token openings, 64-token messages, 48-token answers),
    blocks of 128: turn 2 reuses 384 tokens (the first turn's cache holds 447), turn 3 reuses 512
    (of 559): 1,792 hit tokens in all, on the engine's counters and in the simulator."""
    work = ConversationWorkload(conversations=2, turns=3)
    out = experiments.conversations(vllm_prefix, work)
    turns = out["turns"]
    assert len(turns) == 6 and all(t["ttft_measured_s"] is not None for t in turns), out["run"]
    assert [t["prompt_tokens"] for t in turns] == [400, 512, 624] * 2  # each turn re-sent the engine's own answer
    assert [t["hit_tokens_simulated"] for t in turns] == [0, 384, 512] * 2
    assert out["queries_measured"] == sum(t["prompt_tokens"] for t in turns) == out["queries_simulated"]
    assert out["hit_tokens_measured"] == out["hit_tokens_simulated"] == 1792
    assert out["hit_token_error"] == 0.0 and out["ttft_error"]["requests"] == 6
    assert out["fit"] == "vllm-b256"
    # the engine's own blocks, from its KV events: each conversation's cache ends at 671 positions, five
    # full blocks of 128 stored once each (reuse stores nothing), one chain per conversation; the
    # simulator made the same ten blocks findable
    events = out["kv_events"]
    assert events["bad"] == 0 and events["lost"] == 0 and events["block_size"] == 128, events
    assert events["blocks_stored"] == out["blocks_stored_simulated"] == 10
    assert sorted(events["chains"]) == [5, 5]
    # and each in the same place: the same conversation, the same block of it, stored by the same turn
    # (turn 1 stores blocks 1-3, turn 2 block 4, turn 3 block 5: 447, 559 and 671 positions computed)
    assert events["placed"] == {"engine": 10, "simulated": 10, "same": 10, "engine_only": 0, "simulated_only": 0}
