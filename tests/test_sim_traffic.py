"""Recorded production traffic as workloads (core.sim.traffic) and the trace formats arrival files
may use (Mooncake's JSONL, the Azure trace's CSV).

The expected figures were worked out from the raw files in ../shared/traces with the standard
library alone (csv, json, datetime), not with the code under test.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core.sim.policies import POLICIES
from core.sim.simulate import SimConfig, simulate
from core.sim.traffic import TRAFFIC_DIR, play, recorded, recordings
from core.sim.workload import read_arrivals
from tests.conftest import ROOT

# name: (requests, prompt tokens, output tokens, span in s)
WHOLE = {"azure-code-2023": (8819, 18_059_974, 245_896, 3435.948),
         "azure-conv-2023": (19366, 22_361_870, 4_088_665, 3501.722),
         "mooncake-conv": (12031, 144_793_823, 4_122_048, 3536.999)}
# the window from 600 s for 60 s, at twice the recorded rate: (requests, prompt, output, last arrival in s)
WINDOW = {"azure-code-2023": (421, 711_342, 16_102, 29.6367),
          "azure-conv-2023": (301, 390_501, 76_708, 29.9978),
          "mooncake-conv": (218, 2_650_004, 74_896, 28.5)}
# the first 200 requests that fit a 2,048-token window (tinyllama-1.1b): (left out, prompt, output, last arrival)
SMALL = {"azure-code-2023": (130, 150_379, 4_172, 221.502),
         "azure-conv-2023": (15, 138_561, 50_856, 64.0954),
         "mooncake-conv": (960, 220_584, 51_205, 393.0)}


def test_each_recording_is_bundled_with_its_licence_and_attribution():
    readme = (TRAFFIC_DIR / "README.md").read_text(encoding="utf-8")
    assert set(recordings()) == set(WHOLE)
    for rec in recordings().values():
        assert (TRAFFIC_DIR / rec.file).is_file() and (TRAFFIC_DIR / rec.licence_file).is_file()
        assert rec.file in readme and rec.attribution.split(",")[0] in readme
        assert rec.source in rec.credit() and rec.licence in rec.credit()


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_a_whole_recording_reads_as_recorded(name):
    trace = recorded(name)
    n, prompt, output, span = WHOLE[name]
    assert len(trace) == n
    assert sum(r.prompt_tokens for r in trace) == prompt and sum(r.output_tokens for r in trace) == output
    assert trace[0].arrival_s == 0 and trace[-1].arrival_s == pytest.approx(span, abs=1e-3)
    assert [r.id for r in trace] == list(range(n))


@pytest.mark.parametrize("name", sorted(WINDOW))
def test_a_window_at_twice_the_rate(name):
    played = play(name, 5000, time_scale=2.0, window_start_s=600, window_s=60, max_context=1 << 20)
    n, prompt, output, last = WINDOW[name]
    assert len(played.requests) == n and played.left_out == 0
    assert sum(r.prompt_tokens for r in played.requests) == prompt
    assert sum(r.output_tokens for r in played.requests) == output
    assert played.requests[-1].arrival_s == pytest.approx(last, abs=1e-3)
    assert played.requests[0].arrival_s >= 0


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("name", sorted(SMALL))
def test_each_recording_plays_through_each_policy_leaving_out_what_a_small_model_cannot_read(name, policy):
    result = simulate(SimConfig(workload=name, model="tinyllama-1.1b", requests=200, policy=policy))
    left_out, prompt, output, last = SMALL[name]
    out = result.to_dict()
    assert out["requests"] == 200 and out["left_out"] == left_out == out["trace"]["left_out"]
    assert sum(r.prompt_tokens for r in result.requests) == prompt
    assert sum(len(t) for t in result.token_s) == output  # every request served to its last token
    assert result.requests[-1].arrival_s == pytest.approx(last, abs=1e-3)
    assert out["trace"]["source"] == recordings()[name].source


def test_mooncake_blocks_come_with_each_request():
    first = recorded("mooncake-conv")[0]
    assert first.prompt_tokens == 6758 and first.blocks == tuple(range(14))  # one id per 512 tokens


@pytest.mark.parametrize("kwargs, message", [
    ({"window_start_s": 5000}, "window's start"),
    ({"time_scale": 0}, "time scale"),
    ({"time_scale": float("nan")}, "time scale"),
    ({"window_s": -1}, "window's length"),
    ({"requests": 0}, "number of requests"),
])
def test_bad_play_settings_get_clear_messages(kwargs, message):
    args = {"requests": 10, **kwargs}
    with pytest.raises(ValueError, match=message):
        play("azure-code-2023", **args)


def test_a_window_that_selects_nothing_says_why():
    with pytest.raises(ValueError, match="no request arrives"):
        play("azure-code-2023", 10, window_start_s=100.0, window_s=1e-6)
    with pytest.raises(ValueError, match="longer than the model's context window"):
        play("mooncake-conv", 10, window_s=0.5, max_context=100)


def test_an_unknown_workload_is_a_message():
    with pytest.raises(ValueError, match="unknown workload"):
        SimConfig(workload="nope").checked()


MOONCAKE = b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n' \
           b'{"timestamp": 1500, "input_length": 100, "output_length": 2, "hash_ids": [0]}\n'


def test_mooncake_lines_read_as_an_arrival_file():
    reqs = read_arrivals(MOONCAKE, "trace.jsonl")
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens, r.blocks) for r in reqs] == [
        (0.0, 600, 5, (0, 1)), (1.5, 100, 2, (0,))]


def test_azure_rows_read_as_an_arrival_file():
    data = (b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04.0319600,3180,8\n"
            b"2023-11-16 18:17:03.9799600,4808,10\n")
    reqs = read_arrivals(data, "azure.csv")
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(4808, 10), (3180, 8)]
    assert reqs[0].arrival_s == 0 and reqs[1].arrival_s == pytest.approx(0.052, abs=1e-6)


@pytest.mark.parametrize("data, name, message", [
    (b'{"timestamp": 0, "input_length": 600, "output_length": 5}\n', "t.jsonl", "line 1: missing 'hash_ids'"),
    (b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0]}\n', "t.jsonl",
     "line 1: hash_ids holds 1 ids; a 600-token prompt has 2 blocks"),
    (b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": []}\n', "t.jsonl",
     "line 1: hash_ids holds 0 ids"),
    (b'{"timestamp": 0, "input_length": true, "output_length": 5, "hash_ids": [0]}\n', "t.jsonl",
     "line 1: token counts must be whole numbers"),
    (b'{"timestamp": NaN, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n', "t.jsonl",
     "line 1: timestamp must be a number of milliseconds from 0"),
    (b'{"timestamp": -5, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n', "t.jsonl",
     "line 1: timestamp must be"),
    (b'{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [-1]}\n', "t.jsonl",
     "line 1: hash_ids must be a list of whole numbers"),
    (b'{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [true]}\n', "t.jsonl",
     "line 1: hash_ids must be"),
    (b'{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": "0"}\n', "t.jsonl", "hash_ids must be"),
    (b'{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1e300]}\n', "t.jsonl", "hash_ids must be"),
    (b'{"timestamp": "soon", "input_length": 10, "output_length": 5, "hash_ids": [0]}\n', "t.jsonl",
     "line 1: timestamp must be a number"),
    (b'{"timestamp": 0, "input_length": 0, "output_length": 5, "hash_ids": []}\n', "t.jsonl",
     "line 1: .*prompt_tokens must be a positive integer"),
    (MOONCAKE + b'{"arrival_s": 2, "prompt_tokens": 5, "output_tokens": 2}\n', "t.jsonl", "line 3: missing 'timestamp'"),
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,2\n", "a.csv", "line 2: TIMESTAMP must read like"),
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04.x,5,2\n", "a.csv", "line 2: TIMESTAMP"),
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04.1,5,\n", "a.csv", "line 2"),
])
def test_bad_trace_lines_get_clear_messages(data, name, message):
    with pytest.raises(ValueError, match=message):
        read_arrivals(data, name)


def test_arrival_file_requests_longer_than_the_context_are_left_out_and_counted():
    data = (b'{"arrival_s": 0, "prompt_tokens": 130000, "output_tokens": 5000}\n'
            b'{"arrival_s": 1, "prompt_tokens": 100, "output_tokens": 5}\n')
    result = simulate(SimConfig(policy="chunked"), read_arrivals(data))
    assert result.to_dict()["left_out"] == 1 and [r.prompt_tokens for r in result.requests] == [100]
    assert [len(t) for t in result.token_s] == [5]


def test_command_line_plays_a_recording(tmp_path):
    out = subprocess.run([sys.executable, "-m", "core", "simulate", "--workload", "mooncake-conv", "--model",
                          "tinyllama-1.1b", "--requests", "200", "--json"],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    result = json.loads(out.stdout)
    assert result["requests"] == 200 and result["left_out"] == SMALL["mooncake-conv"][0]
    assert result["settings"]["workload"] == "mooncake-conv" and result["trace"]["licence"] == "Apache-2.0"
    big = tmp_path / "big.jsonl"  # past the page's 2 MB upload cap: a local file may be larger
    big.write_bytes((TRAFFIC_DIR / "mooncake-conversation.jsonl").read_bytes())
    out = subprocess.run([sys.executable, "-m", "core", "simulate", "--arrivals", str(big), "--model",
                          "llama-3.1-8b", "--policy", "prefill-first", "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["requests"] == WHOLE["mooncake-conv"][0]


def _simulate_cli(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core", "simulate", "--json", *flags], capture_output=True,
                          text=True, cwd=ROOT)


def test_command_line_window_scale_and_flags_that_would_change_nothing():
    out = _simulate_cli("--workload", "azure-conv-2023", "--window-start", "600", "--window", "60",
                        "--time-scale", "2", "--model", "tinyllama-1.1b")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)  # a window with no --requests plays all of it
    assert result["requests"] + result["left_out"] == WINDOW["azure-conv-2023"][0]
    assert result["trace"]["window_s"] == 60 and result["trace"]["time_scale"] == 2
    for flags, words in ((("--workload", "mooncake-conv", "--rate", "3"), "--rate would change nothing"),
                         (("--workload", "mooncake-conv", "--seed", "4"), "--seed would change nothing"),
                         (("--workload", "mix", "--time-scale", "2"), "--time-scale would change nothing"),
                         (("--workload", "mooncake-conv", "--window-start", "5000"), "window's start")):
        out = _simulate_cli(*flags)
        assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr, (flags, out.stderr)
