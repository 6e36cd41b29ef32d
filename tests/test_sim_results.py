"""What the literature reports about scheduling, reproduced on the default `mix` workload; workloads,
arrival files and the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from core.sim.simulate import SimConfig, simulate
from core.sim.workload import generate, get_workload, load_workloads, read_arrivals

POLICIES = ("static", "prefill-first", "decode-first", "chunked", "disaggregated")


@pytest.fixture(scope="module", params=[0, 1])
def mix(request):
    return {p: simulate(SimConfig(policy=p, workload="mix", requests=1000, seed=request.param)).to_dict()
            for p in POLICIES}


def test_chunked_prefill_lowers_p99_tpot_at_similar_throughput(mix):
    chunked, pf = mix["chunked"], mix["prefill-first"]
    assert chunked["tpot_p99_s"] < 0.8 * pf["tpot_p99_s"]
    assert chunked["itl_p99_s"] < 0.5 * pf["itl_p99_s"]  # no gap as long as a long prefill
    assert chunked["throughput_tok_s"] == pytest.approx(pf["throughput_tok_s"], rel=0.05)


def test_prefill_first_starts_sooner_than_decode_first(mix):
    assert mix["prefill-first"]["ttft_p50_s"] < 0.1 * mix["decode-first"]["ttft_p50_s"]


def test_static_batching_has_the_worst_median_ttft(mix):
    static = mix["static"]["ttft_p50_s"]
    assert all(static > m["ttft_p50_s"] for p, m in mix.items() if p != "static")


def test_disaggregation_keeps_tpot_flat_as_prompts_grow():
    """Only the cache a decode reads grows with the prompt on a decode server; colocated servers also
    stall decodes behind ever longer prefills."""
    def tpot99(policy, scale):
        return simulate(SimConfig(policy=policy, prompt_scale=scale, rate_per_s=8.0)).to_dict()["tpot_p99_s"]
    growth = {p: tpot99(p, 4.0) / tpot99(p, 1.0) for p in ("disaggregated", "prefill-first", "chunked")}
    assert growth["disaggregated"] < 1.6
    assert growth["prefill-first"] > 3 * growth["disaggregated"]
    assert growth["chunked"] > growth["disaggregated"]


def test_preemptions_appear_when_kv_blocks_are_cut():
    full = simulate(SimConfig(policy="chunked", requests=300)).to_dict()
    cut = simulate(SimConfig(policy="chunked", requests=300, kv_blocks=1500)).to_dict()
    assert full["preemptions"] == 0 and full["kv_blocks_per_server"] > 20_000
    assert cut["preemptions"] > 0
    assert cut["served"] + cut["rejected"] == 300


def test_workloads_have_the_shapes_they_claim():
    works = load_workloads()
    assert set(works) == {"chat", "long-doc", "mix"}
    chat = generate(works["chat"], 4000, 10.0, seed=1)
    long_doc = generate(works["long-doc"], 2000, 10.0, seed=1)
    mixed = generate(works["mix"], 4000, 10.0, seed=1)
    assert np.median([r.prompt_tokens for r in chat]) == pytest.approx(300, rel=0.1)
    assert np.median([r.prompt_tokens for r in long_doc]) == pytest.approx(6000, rel=0.1)
    share_long = np.mean([r.prompt_tokens >= 1024 for r in mixed])
    assert 0.08 < share_long < 0.16
    gaps = np.diff([r.arrival_s for r in chat])
    assert gaps.mean() == pytest.approx(0.1, rel=0.1)
    bursty = np.diff([r.arrival_s for r in generate(works["chat"], 4000, 10.0, seed=1, arrival="bursty")])
    assert bursty.mean() == pytest.approx(0.1, rel=0.15) and bursty.std() > 1.5 * gaps.std()
    scaled = generate(works["chat"].scaled(prompt_scale=2.0), 4000, 10.0, seed=1)
    assert np.median([r.prompt_tokens for r in scaled]) == pytest.approx(600, rel=0.1)
    clipped = generate(get_workload("long-doc"), 50, 1.0, max_context=2048)
    assert all(r.prompt_tokens + r.output_tokens - 1 <= 2048 for r in clipped)
    with pytest.raises(ValueError, match="unknown workload"):
        get_workload("nope")
    with pytest.raises(ValueError, match="arrival rate"):
        generate(works["chat"], 10, 0.0)


def test_arrival_files_replay_jsonl_and_csv():
    jsonl = b'{"arrival_s": 0.5, "prompt_tokens": 20, "output_tokens": 4}\n\n{"arrival_s": 0, "prompt_tokens": 7, ' \
            b'"output_tokens": 2}\n'
    reqs = read_arrivals(jsonl, "a.jsonl")
    assert [(r.id, r.arrival_s, r.prompt_tokens) for r in reqs] == [(0, 0.0, 7), (1, 0.5, 20)]
    csv = b"arrival_s,prompt_tokens,output_tokens\n0.25,30,5\n1,8,3\n"
    assert [r.prompt_tokens for r in read_arrivals(csv, "a.csv")] == [30, 8]
    result = simulate(SimConfig(policy="prefill-first", instances=1), reqs)
    assert [len(t) for t in result.token_s] == [2, 4]


@pytest.mark.parametrize("data,name,message", [
    (b"", "a.jsonl", "no requests"),
    (b"not json\n", "a.jsonl", "line 1 is not JSON"),
    (b"[1, 2]\n", "a.jsonl", "not a JSON object"),
    (b'{"arrival_s": 0, "prompt_tokens": 5}\n', "a.jsonl", "missing 'output_tokens'"),
    (b'{"arrival_s": -1, "prompt_tokens": 5, "output_tokens": 2}\n', "a.jsonl", "line 1"),
    (b'{"arrival_s": 0, "prompt_tokens": 2.5, "output_tokens": 2}\n', "a.jsonl", "whole numbers"),
    (b'{"arrival_s": "soon", "prompt_tokens": 2, "output_tokens": 2}\n', "a.jsonl", "line 1"),
    (b'{"arrival_s": 0, "prompt_tokens": 0, "output_tokens": 2}\n', "a.jsonl", "positive"),
    (b"arrival_s,prompt_tokens\n0,5\n", "a.csv", "missing: output_tokens"),
    (b"\xff\xfe\x00", "a.jsonl", "not UTF-8"),
    (b"x" * 2_000_001, "a.jsonl", "limit"),
    # issue 29: each of these once escaped as a traceback (RecursionError, csv.Error, OverflowError)
    (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n", "a.jsonl", "line 1 is nested too deeply"),
    (b"x" * 200_000 + b",prompt_tokens,output_tokens\n0,5,2\n", "a.csv", "the CSV could not be read"),
    (b'{"arrival_s": 1e999, "prompt_tokens": 5, "output_tokens": 2}\n', "a.jsonl", "line 1"),
    (b'{"arrival_s": 0, "prompt_tokens": 1' + b"0" * 400 + b', "output_tokens": 2}\n', "a.jsonl", "line 1"),
    (b'{"arrival_s": 0, "prompt_tokens": 1' + b"0" * 5000 + b', "output_tokens": 2}\n', "a.jsonl",
     "far too long"),
])
def test_bad_arrival_files_get_clear_messages(data, name, message):
    with pytest.raises(ValueError, match=message):
        read_arrivals(data, name)


def test_requests_longer_than_the_context_window_are_refused():
    reqs = read_arrivals(b'{"arrival_s": 0, "prompt_tokens": 130000, "output_tokens": 5000}\n')
    with pytest.raises(ValueError, match="context window"):
        simulate(SimConfig(policy="chunked"), reqs)


def test_command_line_prints_the_named_metrics(tmp_path):
    arrivals = tmp_path / "a.jsonl"
    arrivals.write_text('{"arrival_s": 0, "prompt_tokens": 50, "output_tokens": 3}\n'
                        '{"arrival_s": 0.01, "prompt_tokens": 60, "output_tokens": 2}\n')
    out = subprocess.run([sys.executable, "-m", "core", "simulate", "--policy", "prefill-first", "--arrivals",
                          str(arrivals), "--instances", "1", "--per-request", "--json"],
                         capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "itl_p99_s", "throughput_tok_s",
                "goodput_req_s", "preemptions", "sim_wall_s"):
        assert key in data
    assert data["kind"] == "simulated"
    assert [len(r["token_s"]) for r in data["per_request"]] == [3, 2]
    assert data["per_request"][0]["first_token_s"] == data["per_request"][0]["token_s"][0]
    usage = data["kv_usage"][0]
    assert usage["kv_blocks"] > 0 and max(u for _, u in usage["used_blocks"]) == 8  # 4 + 4 blocks of 16 at most
    assert 0 < data["kv_peak_fraction"] <= 1
    bad = subprocess.run([sys.executable, "-m", "core", "simulate", "--requests", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "error:" in bad.stderr and "Traceback" not in bad.stderr
