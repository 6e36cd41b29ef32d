"""The simulator's prefix cache, on hand-worked cases: what is reused, what is evicted first, what counts.

Blocks of 16 tokens. Requests arrive 10 s apart (each is over long before the next, on an H100) unless
a case needs them together, so each case's cache holds exactly what the earlier requests left.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core.sim.engine import run_server
from core.sim.layouts import _positions
from core.sim.policies import get_policy
from core.sim.policy import Seq, State
from core.sim.prefix import block_names
from core.sim.simulate import SimConfig, deployment, simulate
from core.sim.steptime import StepTime
from core.sim.workload import Request

B = 16


def run(requests: list[Request], kv_blocks: int = 1000, cache: bool = True, keep_blocks: bool = False, **settings):
    config = SimConfig(model="llama-3.1-8b", hardware="h100-sxm", kv_blocks=kv_blocks, block_tokens=B,
                       prefix_cache=cache, **{"instances": 1, **settings})
    return simulate(config, requests, keep_blocks=keep_blocks)


def req(i: int, at: float, segments: list[tuple[int, int]], output: int = 1) -> Request:
    return Request(i, at, sum(n for _, n in segments), output, segments=tuple(segments))


def test_a_shared_prefix_is_reused_and_prefills_only_the_rest():
    system = (7, 64)  # a 64-token system prompt: four full blocks
    reqs = [req(0, 0.0, [system, (100, 20)], output=4), req(1, 10.0, [system, (101, 30)], output=4)]
    on, off = run(reqs), run(reqs, cache=False)
    assert on.prefix_hits_of() == {0: 0, 1: 64}
    assert on.prefix_hit_tokens() == 64 and on.prefix_hit_rate() == pytest.approx(64 / (84 + 94))
    ttft_on = on.token_s[1][0] - reqs[1].arrival_s
    ttft_off = off.token_s[1][0] - reqs[1].arrival_s
    assert ttft_on < ttft_off  # 30 tokens prefilled over 64 cached, against 94 from scratch
    # the same iteration log: the second request's prefill fed 30 tokens, not 94
    assert [it[2] for it in on.servers[0][1].iterations if it[2]] == [84, 30]
    assert off.prefix_hit_rate() == 0.0 and off.prefix_hit_tokens() == 0


def test_at_least_one_prompt_token_is_computed():
    """The same 64-token prompt twice: four full blocks are cached, three are reused (48 tokens), so
    the last 16 are computed and the model has a position to sample from."""
    reqs = [req(0, 0.0, [(7, 64)]), req(1, 10.0, [(7, 64)])]
    result = run(reqs)
    assert result.prefix_hits_of()[1] == 48
    assert [it[2] for it in result.servers[0][1].iterations if it[2]] == [64, 16]


def test_a_mooncake_block_maps_onto_the_simulators_blocks():
    """Mooncake's ids name 512-token blocks: two prompts whose first ids agree share 512 tokens in
    blocks of 16 or 128, and nothing in blocks of 1,000 (the first block runs into the second id)."""
    a, b = Request(0, 0.0, 1024, 1, blocks=(1, 2)), Request(1, 0.0, 1000, 1, blocks=(1, 3))
    for size, shared in ((16, 32), (128, 4), (1000, 0)):
        na, nb = block_names(a, size), block_names(b, size)
        agree = next((k for k, (x, y) in enumerate(zip(na, nb, strict=False)) if x != y), min(len(na), len(nb)))
        assert agree == shared, size
    reqs = [Request(0, 0.0, 1024, 1, blocks=(1, 2)), Request(1, 10.0, 1000, 1, blocks=(1, 3))]
    assert run(reqs).prefix_hits_of()[1] == 512


def test_freed_blocks_are_overwritten_least_recently_freed_first():
    """Six blocks. A (prefix a, two blocks) then B (prefix b, two blocks) finish; C (four blocks of its
    own) takes the two never used, then A's (freed first): B's stay cached. E (prefix b) reuses them;
    D (prefix a) finds nothing."""
    a, b = (1, 32), (2, 32)
    reqs = [req(0, 0.0, [a]), req(1, 10.0, [b]), req(2, 20.0, [(3, 64)]), req(3, 30.0, [b, (4, 16)]),
            req(4, 40.0, [a, (5, 16)])]
    hits = run(reqs, kv_blocks=6).prefix_hits_of()
    assert hits == {0: 0, 1: 0, 2: 0, 3: 32, 4: 0}
    assert run(reqs, kv_blocks=1000).prefix_hits_of()[4] == 32  # with room, A's blocks would have stayed


def test_the_blocks_held_at_the_end_are_those_stored_and_not_overwritten():
    """The same run, block by block. C takes the two never-used blocks and A's two. E reuses B's two
    and takes one more: the least recently freed, C's last (a request frees its last block first).
    D finds no a and takes three: C's other three. What remains findable, in the order stored, is what
    an engine's stored-minus-removed events would list: B's two, E's one, D's three."""
    a, b = (1, 32), (2, 32)
    reqs = [req(0, 0.0, [a]), req(1, 10.0, [b]), req(2, 20.0, [(3, 64)]), req(3, 30.0, [b, (4, 16)]),
            req(4, 40.0, [a, (5, 16)])]
    log = run(reqs, kv_blocks=6, keep_blocks=True).servers[0][1]
    assert log.prefix_blocks_stored == 2 + 2 + 4 + 1 + 3
    assert log.prefix_blocks_held == [(1, 0), (1, 1), (3, 2), (4, 0), (4, 1), (4, 2)]
    assert run(reqs, kv_blocks=6).servers[0][1].prefix_blocks_held == []  # only kept when asked
    roomy = run(reqs, kv_blocks=1000, keep_blocks=True).servers[0][1]  # nothing overwritten: D reuses A's two
    assert roomy.prefix_blocks_held == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (2, 3), (3, 2),
                                        (4, 2)]


def test_a_block_shared_by_running_requests_is_counted_once():
    """Two requests share a 64-token prefix and run together: the KV in use is the four shared blocks
    once, plus each one's own."""
    system = (7, 64)
    reqs = [req(0, 0.0, [system, (10, 16)], output=64), req(1, 0.05, [system, (11, 16)], output=64)]
    result = run(reqs)
    assert result.prefix_hits_of()[1] == 64
    log = result.servers[0][1]
    # at most: 4 shared + (1 own prompt block + 64 generated tokens' 4 or 5 blocks) each
    own = -(-(16 + 63) // B)
    assert max(used for _, used in log.kv_used) == 4 + 2 * own
    alone = run(reqs, cache=False).servers[0][1]
    assert max(used for _, used in alone.kv_used) == 2 * (4 + own)


def test_a_preempted_requests_recompute_is_not_a_hit():
    """Unique prompts under memory pressure: requests are preempted and recomputed (reusing their own
    freed blocks where still cached), yet no prompt token counts as a hit."""
    reqs = [Request(i, 0.0, 40, 200) for i in range(6)]
    result = run(reqs, kv_blocks=40)
    assert sum(result.preemptions_of) > 0
    assert result.prefix_hit_tokens() == 0 and result.prefix_hit_rate() == 0.0
    assert all(len(t) == 200 for t in result.token_s)  # everyone still finished


def test_generated_tokens_are_cached_too():
    """A follow-up that re-sends the first turn's prompt and answer reuses the answer's full blocks:
    the first turn's cache holds its 32 prompt tokens and the first 32 of its 33 answer tokens (the
    last one sampled is never fed), four full blocks."""
    first = Request(0, 0.0, 32, 33, segments=((1, 32),), answer_id=50)
    follow_up = req(1, 10.0, [(1, 32), (50, 32), (9, 50)])
    assert run([first, follow_up]).prefix_hits_of()[1] == 64
    # a prompt that only starts the same way as the answer shares only the prompt's blocks
    other = req(1, 10.0, [(1, 32), (51, 32), (9, 50)])
    assert run([first, other]).prefix_hits_of()[1] == 32
    # without an id for its answer, the answer is its own: nothing else can name it
    plain = Request(0, 0.0, 32, 33, segments=((1, 32),))
    assert run([plain, follow_up]).prefix_hits_of()[1] == 32


def test_every_policy_runs_with_the_cache_and_reports_it():
    system = (7, 256)
    reqs = [req(i, i * 0.01, [system, (100 + i, 40)], output=20) for i in range(40)]
    for policy in ("chunked", "prefill-first", "decode-first", "static"):
        result = run(reqs, policy=policy)
        assert all(len(t) == 20 for t in result.token_s), policy
        assert result.prefix_hit_tokens() > 0, policy
    split = simulate(SimConfig(model="llama-3.1-8b", instances=2, policy="disaggregated", prefix_cache=True,
                               block_tokens=B), reqs)
    assert split.prefix_hit_tokens() > 0 and all(len(t) == 20 for t in split.token_s)


def test_the_command_line_switch_and_json():
    base = [sys.executable, "-m", "core", "simulate", "--requests", "200", "--json"]
    off = json.loads(subprocess.run(base, capture_output=True, text=True, check=True).stdout)
    assert off["prefix_hit_rate"] == 0.0 and off["prefix_hit_tokens"] == 0 and off["settings"]["prefix_cache"] is False
    on = json.loads(subprocess.run([*base, "--prefix-cache", "--workload", "mooncake-conv", "--time-scale", "0.1"],
                                   capture_output=True, text=True, check=True).stdout)
    assert on["settings"]["prefix_cache"] is True
    assert 0 < on["prefix_hit_rate"] < 1 and on["prefix_hit_tokens"] > 0


def test_a_setting_that_is_not_a_switch_is_refused():
    with pytest.raises(ValueError, match="prefix caching is on or off"):
        SimConfig(prefix_cache="yes").checked()


# --- routers: copies on one clock -----------------------------------------------------------------

def test_the_prefix_aware_router_sends_a_prompt_where_its_prefix_is_cached():
    """Two copies. A (prefix a) goes to copy 0, B (prefix b) to copy 1 (no hit anywhere: the less
    loaded); later C (prefix b) finds b cached on copy 1 and goes there, where round robin deals it
    to copy 0 and misses."""
    reqs = [req(0, 0.0, [(1, 64), (10, 16)], output=50), req(1, 0.01, [(2, 64), (11, 16)], output=50),
            req(2, 10.0, [(2, 64), (12, 16)])]
    aware = run(reqs, instances=2, router="prefix-aware")
    assert aware.server_of == [0, 1, 1] and aware.prefix_hits_of()[2] == 64
    dealt = run(reqs, instances=2)
    assert dealt.server_of == [0, 1, 0] and dealt.prefix_hit_tokens() == 0


def test_the_prefix_aware_router_passes_over_a_copy_whose_queue_is_too_long():
    """One running sequence per copy. Copy 0 holds prefix a and runs A; four more prompts starting
    with a arrive together: with a bound of 2 the first three queue on copy 0 (queues 0, 1, 2 against
    the other's 0), the fourth would make it 3 longer, so it goes to copy 1."""
    a = (1, 64)
    reqs = [req(0, 0.0, [a, (10, 16)], output=500)] + [req(i, 0.5, [a, (10 + i, 16)]) for i in range(1, 5)]
    result = run(reqs, instances=2, router="prefix-aware", router_queue_bound=2, max_batch=1)
    assert result.server_of == [0, 0, 0, 0, 1]
    assert run(reqs, instances=2, router="prefix-aware", router_queue_bound=0, max_batch=1).server_of == [0, 0, 1, 0, 1]


def test_round_robin_through_the_router_matches_the_simulator_before_routers():
    """The router deals in turn as the layout did (copies' shares fixed before they ran): the same
    requests, the same token times, with and without the cache, on two and three copies."""
    for copies in (2, 3):
        config = SimConfig(requests=120, instances=copies, kv_blocks=4000).checked()
        result = simulate(config)
        ordered, _ = _positions(result.requests)
        spec, hw, scenario = deployment(config)
        step = StepTime.fit(spec, hw, scenario)
        state = State(0.0, 4000, budget=config.budget)
        for k in range(copies):
            seqs = [Seq(r, r.arrival_s, r.prompt_tokens) for r in ordered[k::copies]]
            run_server(seqs, get_policy("chunked")(), step, 4000, state)
            for s in seqs:
                assert result.token_s[s.request.id] == s.token_s


def test_on_the_mooncake_conversation_trace_the_cache_and_the_router_pay_off():
    """The bundled Mooncake conversation trace on an H100 (llama-3.1-8b reads all of it): with the
    cache, requests reuse earlier turns and the median TTFT drops; with four copies, sending a prompt
    where its prefix is cached reuses more than dealing in turn."""
    common = {"workload": "mooncake-conv", "requests": 300, "model": "llama-3.1-8b", "hardware": "h100-sxm",
              "time_scale": 0.5}
    on = simulate(SimConfig(instances=1, prefix_cache=True, **common))
    off = simulate(SimConfig(instances=1, **common))
    assert 0 < on.prefix_hit_rate() < 1 and off.prefix_hit_rate() == 0.0
    assert on.metrics["ttft_p50_s"] < off.metrics["ttft_p50_s"]
    dealt = simulate(SimConfig(instances=4, prefix_cache=True, **common))
    aware = simulate(SimConfig(instances=4, prefix_cache=True, router="prefix-aware", **common))
    assert aware.prefix_hit_rate() > dealt.prefix_hit_rate() > 0


def test_routers_refuse_settings_they_cannot_use():
    with pytest.raises(ValueError, match="turn the prefix cache on"):
        SimConfig(router="prefix-aware").checked()
    with pytest.raises(ValueError, match="unknown router"):
        SimConfig(router="random").checked()
    with pytest.raises(ValueError, match="disaggregated serving deals"):
        SimConfig(policy="disaggregated", router="prefix-aware", prefix_cache=True).checked()
    with pytest.raises(ValueError, match="queue bound"):
        SimConfig(router_queue_bound=-1).checked()
