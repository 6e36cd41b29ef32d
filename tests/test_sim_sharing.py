"""What synthetic prompts share: shared system prompts and conversations (a closed loop)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from core.sim.sharing import as_conversations, with_system_prompts
from core.sim.simulate import SimConfig, simulate
from core.sim.workload import Request


def plain(n: int, prompt: int = 100, output: int = 20, gap: float = 1.0) -> list[Request]:
    return [Request(i, i * gap, prompt, output) for i in range(n)]


def test_system_prompts_are_shared_by_popularity_and_drawn_the_same_every_time():
    reqs = with_system_prompts(plain(2000), count=5, tokens=300, skew=1.0, seed=3)
    assert all(r.prompt_tokens == 400 and r.segments[0][1] == 300 and r.segments[1] == (-(10**9) - r.id, 100)
               for r in reqs)
    used = Counter(r.segments[0][0] for r in reqs)
    counts = [used[-1 - k] for k in range(5)]  # the k-th prompt's id is -1 - k
    # Zipf with skew 1 over five: weights 1, 1/2, ... 1/5 of 2.283 (44%, 22%, 15%, 11%, 9%)
    assert counts == sorted(counts, reverse=True) and 0.40 < counts[0] / 2000 < 0.48
    assert reqs == with_system_prompts(plain(2000), count=5, tokens=300, skew=1.0, seed=3)
    uniform = Counter(r.segments[0][0] for r in with_system_prompts(plain(2000), 5, 300, 0.0, seed=3))
    assert max(uniform.values()) / 2000 < 0.25
    assert with_system_prompts(plain(3), 0, 300, 1.0, 0) == plain(3)  # none asked: unchanged
    clipped = with_system_prompts(plain(3, prompt=900), 2, 300, 1.0, 0, max_context=1000)
    assert all(r.prompt_tokens + r.output_tokens - 1 <= 1000 for r in clipped)


def test_conversations_resend_every_earlier_turn_and_answer():
    reqs = as_conversations(plain(7, prompt=50, output=30), turns=3, think_s=2.0)
    assert [r.follows for r in reqs] == [None, 0, 1, None, 3, 4, None]
    first, second, third = reqs[:3]
    assert second.prompt_tokens == 50 + 30 + 50 and third.prompt_tokens == 130 + 30 + 50
    assert second.segments[:2] == (first.segments[0], (first.answer_id, 30))
    assert third.segments[:3] == second.segments and third.segments[3][0] != second.segments[2][0]
    assert second.think_s == 2.0 and first.think_s == 0.0
    # a turn that would not fit the window starts a conversation of its own
    fitted = as_conversations(plain(4, prompt=50, output=30), turns=4, think_s=1.0, max_context=200)
    assert [r.follows for r in fitted] == [None, 0, None, 2]
    assert all(r.prompt_tokens + r.output_tokens - 1 <= 200 for r in fitted)


def test_a_later_turn_is_sent_after_the_answer_and_reuses_the_conversation():
    """Two turns on one H100 copy, blocks of 16: turn 2 arrives 3 s after turn 1's last token and
    reuses turn 1's prompt and the full blocks of its answer that were fed back (the last answer
    token is never fed): 64 prompt + 31 answer positions, five full blocks, 80 tokens."""
    turns = as_conversations([Request(0, 0.0, 64, 32), Request(1, 0.0, 40, 5)], turns=2, think_s=3.0)
    config = SimConfig(model="llama-3.1-8b", instances=1, kv_blocks=1000, prefix_cache=True, block_tokens=16)
    result = simulate(config, turns)
    end_of_first = result.token_s[0][-1]
    assert result.requests[1].arrival_s == pytest.approx(end_of_first + 3.0)
    assert result.token_s[1][0] > end_of_first + 3.0
    assert result.prefix_hits_of()[1] == 80
    cold = simulate(SimConfig(model="llama-3.1-8b", instances=1, kv_blocks=1000, block_tokens=16), turns)
    assert cold.prefix_hit_tokens() == 0
    ttft = [r.token_s[1][0] - r.requests[1].arrival_s for r in (result, cold)]
    assert ttft[0] < ttft[1]


def test_the_router_keeps_a_conversation_on_the_copy_that_holds_it():
    """Conversations of four turns on four copies: the prefix-aware router sends each later turn to
    its conversation's copy and reuses far more than round robin; every turn is served."""
    common = {"requests": 400, "instances": 4, "turns": 4, "think_s": 2.0, "prefix_cache": True}
    aware = simulate(SimConfig(router="prefix-aware", **common))
    dealt = simulate(SimConfig(**common))
    assert aware.prefix_hit_rate() > 2 * dealt.prefix_hit_rate()
    follows = {r.id: r.follows for r in aware.requests if r.follows is not None}
    same = sum(aware.server_of[i] == aware.server_of[j] for i, j in follows.items())
    assert same / len(follows) > 0.9
    for result in (aware, dealt):
        assert all(len(t) == r.output_tokens for t, r in zip(result.token_s, result.requests, strict=True))
        for r in result.requests:  # each later turn was sent after its previous answer ended, plus the think time
            if r.follows is not None:
                assert r.arrival_s == pytest.approx(result.token_s[r.follows][-1] + 2.0)


def test_sharing_settings_in_words_and_on_the_command_line():
    with pytest.raises(ValueError, match="turns per conversation"):
        SimConfig(turns=0).checked()
    with pytest.raises(ValueError, match="think time"):
        SimConfig(think_s=-1.0).checked()
    with pytest.raises(ValueError, match="a recording brings what its prompts share"):
        SimConfig(workload="mooncake-conv", turns=3).checked()
    with pytest.raises(ValueError, match="conversations are simulated on colocated copies"):
        SimConfig(policy="disaggregated", turns=3).checked()
    out = subprocess.run([sys.executable, "-m", "core", "simulate", "--requests", "200", "--json", "--prefix-cache",
                          "--system-prompts", "4", "--system-prompt-tokens", "800"],
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert data["settings"]["system_prompts"] == 4 and data["prefix_hit_rate"] > 0.3
    refused = subprocess.run([sys.executable, "-m", "core", "simulate", "--workload", "azure-code-2023",
                              "--turns", "3"], capture_output=True, text=True)
    assert refused.returncode != 0 and "--turns" in refused.stderr and "Traceback" not in refused.stderr
