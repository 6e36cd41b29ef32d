"""The real embedded model through the runner and the command line (offline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core.runner import GenerationSettings, generate_trace
from core.trace import TRACE_VERSION

pytestmark = pytest.mark.model


def test_architecture_is_smollm2(embedded_model):
    cfg = embedded_model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == \
        (30, 576, 9, 3)
    assert embedded_model.info.params == 134_515_008
    assert embedded_model.info.weights_source == "gguf-q4_1-dequantised"


def test_greedy_answer_is_fluent(embedded_model):
    trace = generate_trace(embedded_model, "What is the capital of France?",
                           GenerationSettings(max_new_tokens=12, chat=True))
    assert "Paris" in trace.generated_text
    n_prompt = len(trace.prompt_token_ids)
    assert trace.events[-1].kv_seq_len == n_prompt + len(trace.events) - 1
    assert trace.events[-1].kv_shapes[0]["key"] == [1, 3, n_prompt + len(trace.events) - 1, 64]
    assert trace.events[-1].kv_bytes == 46_080 * trace.events[-1].kv_seq_len


def test_cli_generate_json_offline():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "core", "generate", "--prompt", "Name a colour.",
                          "--max-new-tokens", "5", "--chat", "--json", "--ignore-eos"],
                         capture_output=True, text=True, env=env, timeout=300, check=True)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    trace = json.loads(lines[0])
    assert trace["version"] == TRACE_VERSION == 2
    assert trace["model"]["weights_source"] == "gguf-q4_1-dequantised"
    assert trace["model"]["dtype"] == "float32"
    events = trace["events"]
    assert [e["phase"] for e in events] == ["prefill"] + ["decode"] * 4
    assert events[-1]["kv_seq_len"] == len(trace["prompt_token_ids"]) + 5 - 1
    assert "".join(e["token_text"] for e in events) == trace["generated_text"]
    assert all(e["latency_ms"] > 0 for e in events)


def test_cli_plain_text_and_bad_settings():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    ok = subprocess.run([sys.executable, "-m", "core", "generate", "--prompt", "Hello", "--max-new-tokens",
                         "3"], capture_output=True, text=True, env=env, timeout=300)
    assert ok.returncode == 0 and ok.stdout.strip()
    bad = subprocess.run([sys.executable, "-m", "core", "generate", "--prompt", "Hello", "--max-new-tokens",
                          "0"], capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2
    assert "max_new_tokens" in bad.stderr and "Traceback" not in bad.stderr
