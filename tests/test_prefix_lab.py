"""The engine lab's conversation workload as the simulator reads it (the real engine's run is in
tests/engines): each turn re-sends the earlier turns and answers, so the simulator's prefix cache
reuses them at the engine's block size."""

from __future__ import annotations

import pytest

from core.engines.launch import SETTINGS
from core.engines.prefix_lab import ConversationWorkload, counters
from core.sim.simulate import SimConfig, simulate


def test_each_turn_resends_the_conversation_so_far():
    work = ConversationWorkload(conversations=2, turns=3, first_prompt=100, message=20, output=10)
    reqs = work.requests()
    assert [r.prompt_tokens for r in reqs] == [100, 130, 160, 100, 130, 160]
    assert [r.follows for r in reqs] == [None, 0, 1, None, 3, 4]
    third = reqs[2]
    assert third.segments[:3] == reqs[1].segments and third.segments[3] == (reqs[1].answer_id, 10)
    at = work.requests({0: 0.0, 1: 2.5, 2: 5.0, 3: 0.7, 4: 3.1, 5: 6.0})
    assert [r.arrival_s for r in at] == [0.0, 2.5, 5.0, 0.7, 3.1, 6.0] and all(r.follows is None for r in at)
    # the default stays inside the engine's 4,096-token window
    default = ConversationWorkload()
    assert default.prompt_tokens(default.turns - 1) + default.output <= 4096


def test_the_simulator_reuses_what_a_block_of_128_holds():
    """Blocks of 128 (vLLM's CPU build): turn 2 re-sends 400 + 48 tokens, of which the first turn's
    cache holds 447 (the last answer token is never fed): three full blocks, 384 tokens reused."""
    work = ConversationWorkload(conversations=1, turns=2)
    result = simulate(SimConfig(model="smollm2-135m", instances=1, block_tokens=128, kv_blocks=300,
                                prefix_cache=True), work.requests())
    assert result.prefix_hits_of() == {0: 0, 1: 384}


def test_the_prefix_cache_setting_is_vllm_at_256_with_the_cache_on():
    setting = SETTINGS["vllm-b256-pc"]
    assert setting.prefix_cache and setting.fit == "vllm-b256" and setting.budget == SETTINGS["vllm-b256"].budget
    assert not SETTINGS["vllm-b256"].prefix_cache and not SETTINGS["vllm-b2048"].prefix_cache


def test_counters_come_from_vllms_metric_names():
    assert counters({"vllm:prefix_cache_queries_total": 753.0, "vllm:prefix_cache_hits_total": 256.0}) == (753.0, 256.0)
    assert counters({"vllm:num_requests_running": 0.0}) is None


@pytest.mark.parametrize("flag", ["--enable-prefix-caching", "--no-enable-prefix-caching"])
def test_the_engine_is_started_with_its_setting(flag, tmp_path):
    from core.engines.kinds import kind_of

    name = "vllm-b256-pc" if flag == "--enable-prefix-caching" else "vllm-b256"
    proc = kind_of("vllm").process(SETTINGS[name], tmp_path, None, 9999)
    assert flag in proc.command and ({"--enable-prefix-caching", "--no-enable-prefix-caching"} - {flag}).isdisjoint(
        proc.command)
