"""A real vLLM (CPU build) on loopback: streams, the stall workload, the metrics, the probe fit,
a slow answer, a dead port and an engine killed mid-run. Structure only (every token recorded,
times ordered, metrics parsed), never latency thresholds: this machine's speed is not the test."""

from __future__ import annotations

import json
import math
import os
import signal

import pytest

from core.engines.base import EngineError, EngineRequest, StreamEnd, TokenArrival
from core.engines.lab import LONG, SHORT, StallWorkload
from core.engines.metrics import scrape
from core.engines.openai import OpenAICompatible
from core.engines.player import Player, build_prompts, play
from core.engines.process import free_port
from core.engines.record import EngineRun
from core.sim.workload import Request
from tests.engines.conftest import PROBE_REPEATS

pytestmark = pytest.mark.engine


def _run(setting: str = "vllm-b2048") -> EngineRun:
    return EngineRun(engine="vllm", setting=setting, model="smollm2", started_at="",
                     settings={"budget": 2048, "max_seqs": 16})


def _ordered(times: list[float]) -> bool:
    return all(b >= a for a, b in zip(times, times[1:], strict=False))


def test_one_stream_records_every_token_with_the_engines_usage(vllm):
    assert vllm.client.health().ok
    items = list(vllm.client.stream(EngineRequest(tuple(range(2000, 2040)), 12, ignore_eos=True)))
    tokens = [i for i in items if isinstance(i, TokenArrival)]
    end = items[-1]
    assert isinstance(end, StreamEnd) and end.finish_reason == "length"
    assert [t.index for t in tokens] == list(range(12))
    assert all(t.token_id is not None for t in tokens)  # counted by the ids vLLM sends with each chunk
    assert _ordered([t.t_s for t in tokens]) and tokens[0].t_s > 0
    assert end.engine_figures["usage"]["completion_tokens"] == 12
    assert end.engine_figures["usage"]["prompt_tokens"] == 40


def test_concurrent_streams_and_a_long_prompt_are_recorded_with_the_metrics(vllm):
    before = scrape(vllm.base_url)
    requests, roles = StallWorkload(streams=3, short_output=48, long_at_s=0.4).requests()
    run = play(vllm.client, requests, _run(), roles, metrics_url=vllm.base_url, metrics_period_s=0.2)
    assert run.finished and len(run.requests) == 4
    for r in run.requests:
        assert r.error is None and r.done, r.error
        assert len(r.token_s) == r.output_tokens  # every token recorded
        assert r.sent_s is not None and r.sent_s >= r.arrival_s - 1e-6
        assert r.token_s[0] > r.sent_s and _ordered(r.token_s)
        assert r.engine_figures["usage"]["completion_tokens"] == r.output_tokens
    assert {r.role for r in run.requests} == {SHORT, LONG}
    long = next(r for r in run.requests if r.role == LONG)
    assert long.engine_figures["usage"]["prompt_tokens"] == 1536
    # the engine's own view, scraped during the run
    assert len(run.metrics) >= 2 and _ordered([m["t_s"] for m in run.metrics])
    assert max(m["values"]["vllm:num_requests_running"] for m in run.metrics) >= 2
    after = run.metrics[-1]["values"]
    assert after["vllm:time_to_first_token_seconds_count"] - before["vllm:time_to_first_token_seconds_count"] == 4
    assert after["vllm:num_requests_running"] == 0 and after["vllm:num_requests_waiting"] == 0
    # four requests, about 1,700 tokens of cache, in a 1 GiB KV space: nothing may have been preempted
    assert after["vllm:num_preemptions_total"] == before["vllm:num_preemptions_total"]
    assert 0 <= after["vllm:kv_cache_usage_perc"] <= 1
    back = EngineRun.from_json(run.to_json())
    assert [len(r.token_s) for r in back.requests] == [len(r.token_s) for r in run.requests]


def test_a_prompt_injected_mid_run_is_sent_then(vllm):
    work = StallWorkload(streams=2, short_output=40)
    requests, roles = work.requests(inject_long=False)
    prompts = build_prompts(requests, seed=3)
    run = _run()
    player = Player(vllm.client, run, metrics_url=None)
    for r in requests:
        player.submit(r, prompts[r.id], roles[r.id])
    player.start()
    # inject once the first stream is decoding: the state the run reports, not a clock
    while not any(len(r.token_s) >= 5 for r in run.snapshot().requests):
        assert player.wait(0.05) is False
    at = player.clock()
    long = work.long_request(len(requests), at)
    player.submit(long, build_prompts([long], seed=4)[long.id], LONG, at_s=at)
    assert player.wait(300)
    player.finish()
    injected = next(r for r in run.requests if r.role == LONG)
    assert injected.arrival_s == pytest.approx(at) and injected.sent_s >= at - 1e-6
    assert len(injected.token_s) == work.long_output and injected.error is None


def test_the_probe_fit_prices_the_same_requests_in_the_simulator(vllm, vllm_probe):
    from core.engines import experiments
    from core.engines import fit as engine_fit

    entry = experiments.fit_samples(vllm, vllm_probe)
    assert entry["engine"] == "vllm" and entry["budget"] == 2048
    phases = [s["phase"] for s in entry["samples"]]
    assert phases.count("prefill") == PROBE_REPEATS * len(engine_fit.PREFILL_LENGTHS)
    assert phases.count("decode") == PROBE_REPEATS * len(engine_fit.decode_probes())
    longest = max((s for s in entry["samples"] if s["phase"] == "decode"), key=lambda s: s["n_cached"] * s["batch"])
    cached = engine_fit.LONG_DECODE_PROMPT + engine_fit.LONG_DECODE_OUTPUT // 2
    assert (longest["n_cached"], longest["batch"]) == (cached, engine_fit.LONG_DECODE_BATCH)  # the long-cache probe
    assert all(s["measured_s"] > 0 and s["predicted_s"] > 0 for s in entry["samples"])
    # its limits come with it: the KV capacity and block size as the engine publishes them, the cost
    # a request pays outside the forwards (fitted on prompts sent together), the running-sequence cap
    assert entry["kv_source"].startswith("read") and entry["block_size"] == 128 and entry["kv_tokens"] > 0
    assert 0 <= entry["request_overhead_s"] <= engine_fit.REQUEST_COST_GRID_S[-1]
    assert [k for k, _ in vllm_probe[1]] == list(engine_fit.CONCURRENT) * PROBE_REPEATS
    assert entry["max_seqs"] == vllm.setting.max_seqs
    result = experiments.stall(vllm, StallWorkload(streams=2, short_output=32, long_at_s=0.3))
    sim = result["simulated"]
    run = EngineRun.from_dict(result["run"])
    assert set(sim) == {str(r.id) for r in run.requests}
    assert all(len(sim[str(r.id)]) == r.output_tokens for r in run.requests)
    c = result["comparison"]
    for key in ("ttft_error_median", "itl_error_median", "stall_measured_s", "stall_simulated_s", "stall_error"):
        assert c[key] is not None and math.isfinite(c[key]) and c[key] >= 0, key


def test_the_queueing_experiment_holds_the_simulator_and_the_engine_itself_to_every_request(vllm, vllm_probe):
    """A small burst past the engine's sequence cap, played twice (`again`): the simulator's errors and
    the engine's against itself (its second play), each over every request, with the queue scraped."""
    from core.engines import experiments
    from core.engines.fit import engine_predictor
    from core.engines.lab import QueueWorkload

    if engine_predictor("vllm-b2048", bundled=False) is None:
        experiments.fit_samples(vllm, vllm_probe)
    work = QueueWorkload(steady_rate=2.0, steady_s=1.0, burst_rate=24.0, burst_s=1.0, prompt_median=64.0,
                         output_median=12.0, long_prompts=1, long_prompt=600, long_output=8)
    out = experiments.queueing(vllm, work, seed=3, again=True)
    assert out["requests"] == len(work.requests(3)[0]) > vllm.setting.max_seqs
    for key in ("errors", "engine_self"):
        for metric in ("ttft", "tpot", "e2e"):
            e = out[key][metric]
            assert e["requests"] == out["requests"], (key, metric)
            assert all(math.isfinite(e[q]) and e[q] >= 0 for q in ("median", "p90")), (key, metric)
    assert out["peak_waiting"] is not None  # the engine's queue was read from its /metrics


def test_an_arrival_file_is_played_on_its_times_and_simulated_on_the_same_requests(vllm, vllm_probe):
    """The simulator's own arrival format, sent to the engine: each request leaves at its arrival
    time, and the simulation of the same requests (with this engine's fit) covers every one."""
    from core.engines import experiments
    from core.engines.fit import engine_predictor
    from core.sim.workload import read_arrivals

    lines = [{"arrival_s": 0.0, "prompt_tokens": 40, "output_tokens": 12},
             {"arrival_s": 0.3, "prompt_tokens": 300, "output_tokens": 6},
             {"arrival_s": 0.6, "prompt_tokens": 16, "output_tokens": 9}]
    requests = read_arrivals("\n".join(json.dumps(x) for x in lines).encode(), "a.jsonl")
    run = play(vllm.client, requests, _run(), timeout_s=120)
    for want, got in zip(lines, sorted(run.requests, key=lambda r: r.id), strict=True):
        assert got.error is None and len(got.token_s) == want["output_tokens"]
        assert got.sent_s == pytest.approx(want["arrival_s"], abs=0.25)  # sent when due, not all at once
    if engine_predictor("vllm-b2048") is None:
        experiments.fit_samples(vllm, vllm_probe)
    sim, comparison = experiments.simulated(run, "vllm-b2048")
    assert sorted(sim) == [0, 1, 2] and [len(sim[i]) for i in range(3)] == [12, 6, 9]
    assert all(sim[r.id][0] > r.sent_s for r in run.requests)  # the simulated arrivals are the send times
    assert comparison.requests == 3 and comparison.ttft_error_median is not None


def test_a_slow_answer_times_out_in_words_and_the_run_ends(vllm):
    impatient = OpenAICompatible(vllm.base_url, "smollm2", read_timeout_s=0.005)
    run = play(impatient, [Request(0, 0.0, 1536, 4)], _run(), timeout_s=60)
    assert run.finished
    r = run.requests[0]
    assert r.error is not None and "stopped answering" in r.error and not r.done
    impatient.close()


def test_an_engine_that_is_not_there_is_said_so_and_nothing_hangs():
    nobody = OpenAICompatible(f"http://127.0.0.1:{free_port()}", "smollm2", connect_timeout_s=1.0)
    health = nobody.health()
    assert not health.ok and "no answer" in health.detail
    with pytest.raises(EngineError, match="broke after 0 tokens"):
        list(nobody.stream(EngineRequest("hello", 4)))
    run = play(nobody, [Request(0, 0.0, 8, 4), Request(1, 0.0, 8, 4)], _run(), timeout_s=30)
    assert run.finished and all(r.error and not r.token_s for r in run.requests)


def test_cancel_ends_a_stream_that_is_waiting_for_its_first_token(vllm):
    """Stop mid-prefill: the open stream is closed, not left to wait for its token."""
    run = _run()
    player = Player(vllm.client, run)
    long = Request(0, 0.0, 1536, 8)
    player.submit(long, build_prompts([long], seed=11)[0], LONG)
    player.start()
    while not player._open:  # the response is open: the stream is blocked on the prefill
        assert player.wait(0.01) is False
    player.cancel()
    assert player.wait(30)
    player.finish()
    r = run.requests[0]
    assert r.token_s == [] and r.error == "cancelled after 0 tokens" and not r.done
    assert vllm.client.health().ok


@pytest.mark.kills_engine
def test_an_engine_that_dies_mid_run_keeps_every_token_recorded(vllm):
    requests, roles = StallWorkload(streams=3, short_output=400, long_at_s=60).requests(inject_long=False)
    prompts = build_prompts(requests)
    run = _run()
    player = Player(vllm.client, run)
    for r in requests:
        player.submit(r, prompts[r.id], roles[r.id])
    player.start()
    while not all(len(r.token_s) >= 3 for r in run.snapshot().requests):
        assert player.wait(0.05) is False
    os.killpg(vllm_process_group(vllm), signal.SIGKILL)
    assert player.wait(120), "a stream hung after its engine died"
    player.finish()
    for r in run.requests:
        assert r.error and "broke after" in r.error, r.error
        assert 3 <= len(r.token_s) < r.output_tokens and _ordered(r.token_s)
    assert not vllm.client.health().ok


def vllm_process_group(live) -> int:
    return live.process.proc.pid
