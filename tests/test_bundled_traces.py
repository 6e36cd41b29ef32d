"""Bundled traces: each loads and is self-consistent, and regenerating it with the embedded model gives
the same tokens, so the replay shown while the model loads never drifts from the code."""

from __future__ import annotations

from dataclasses import fields

import pytest

from core.runner import GenerationSettings, generate_trace
from core.trace import MAX_TRACE_BYTES, Trace, TraceError, bundled_traces, load_trace_file

BUNDLED = bundled_traces()
NAMES = sorted(BUNDLED)


def _load(name: str) -> Trace:
    return load_trace_file(BUNDLED[name].read_bytes())


def test_there_are_bundled_traces():
    assert len(NAMES) >= 3, "run `python -m scripts.record_traces` to record them"


@pytest.mark.parametrize("name", NAMES)
def test_bundled_trace_is_consistent(name):
    data = BUNDLED[name].read_bytes()
    assert len(data) < 1_500_000
    trace = Trace.from_json(data)
    events = trace.events
    n_prompt, n = len(trace.prompt_token_ids), len(events)
    assert n >= 2 and [e.phase for e in events] == ["prefill"] + ["decode"] * (n - 1)
    assert [e.step for e in events] == list(range(n))
    assert events[0].positions == [0, n_prompt]
    assert events[-1].kv_seq_len == n_prompt + n - 1
    assert "".join(e.token_text for e in events) == trace.generated_text
    assert all(e.predicted_ms is not None and e.predicted_ms > 0 and e.cost for e in events)
    assert all(e.latency_ms > 0 for e in events)
    settings = trace.settings
    assert settings["temperature"] == 0.0 and settings["cache"] == "dynamic" and settings["chat"] is True
    hardware = trace.hardware or {}
    assert hardware.get("hardware") and hardware.get("machine", {}).get("cpu_model")
    assert "record_traces" in hardware.get("recorded", {}).get("by", "")
    assert trace.model["weights_source"] and trace.prompt_text


def test_the_bundled_traces_show_what_they_are_for():
    prompts = {name: len(_load(name).prompt_token_ids) for name in NAMES}
    assert max(prompts.values()) >= 150, "one trace needs a long prompt so prefill is visibly heavier"
    long_trace = _load(max(prompts, key=prompts.get))
    assert long_trace.events[0].latency_ms > 2 * max(e.latency_ms for e in long_trace.events[1:5])


def _settings(trace: Trace) -> GenerationSettings:
    known = {f.name for f in fields(GenerationSettings)}
    values = {k: v for k, v in trace.settings.items() if k in known}
    values["record_kv_norms"] = False  # norms do not change the tokens; skipping them saves time
    return GenerationSettings(**values)


@pytest.mark.model
@pytest.mark.parametrize("name", NAMES)
def test_regenerating_a_bundled_trace_gives_the_same_tokens(embedded_model, name):
    trace = _load(name)
    assert embedded_model.info.id == trace.model["id"]
    assert embedded_model.info.weights_source == trace.model["weights_source"]
    again = generate_trace(embedded_model, trace.prompt_text, _settings(trace))
    assert again.prompt_token_ids == trace.prompt_token_ids, "the chat template or tokenizer changed"
    assert again.generated_ids == trace.generated_ids, (
        f"{name} drifted from the code: re-record with `python -m scripts.record_traces` "
        "(see assets/traces/README.md)")
    assert again.generated_text == trace.generated_text
    assert [e.kv_seq_len for e in again.events] == [e.kv_seq_len for e in trace.events]


# --- loading files: every way a file can be wrong gives a message, not a traceback ---------------

def test_load_trace_file_accepts_bytes_text_and_a_byte_order_mark():
    data = BUNDLED[NAMES[0]].read_bytes()
    reference = Trace.from_json(data).to_dict()
    assert load_trace_file(data).to_dict() == reference
    assert load_trace_file(data.decode("utf-8")).to_dict() == reference
    assert load_trace_file(b"\xef\xbb\xbf" + data).to_dict() == reference


@pytest.mark.parametrize(("content", "message"), [
    (b"", "empty"),
    (b"\xff\xfe\x00garbage", "UTF-8"),
    (b"\x89PNG\r\n\x1a\n", "UTF-8"),
    (b"{\"version\": 1, \"model\": {", "truncated"),
    (b"[]", "object"),
    (b"{\"version\": 99}", "version"),
    (b" " * (MAX_TRACE_BYTES + 1), "limit"),
])
def test_load_trace_file_explains_bad_files(content, message):
    with pytest.raises(TraceError, match=message):
        load_trace_file(content)


def test_a_truncated_bundled_file_is_refused():
    data = BUNDLED[NAMES[0]].read_bytes()
    with pytest.raises(TraceError, match="truncated"):
        load_trace_file(data[: len(data) // 2])


def test_summary_gives_the_headline_figures():
    trace = _load(NAMES[0])
    s = trace.summary()
    assert s["prompt_tokens"] == len(trace.prompt_token_ids) and s["generated_tokens"] == len(trace.events)
    assert s["ttft_ms"] == trace.events[0].latency_ms
    decode = [e.latency_ms for e in trace.events[1:]]
    assert s["tpot_ms"] == pytest.approx(sum(decode) / len(decode))
    assert s["model"] == trace.model["id"] and s["hardware"] == trace.hardware["hardware"]
    assert Trace(model={}, settings={}, prompt_token_ids=[]).summary()["ttft_ms"] is None
