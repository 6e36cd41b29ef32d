"""The trace format: round trip, and clear errors for malformed files."""

from __future__ import annotations

import json

import pytest

from core.runner import GenerationSettings, generate_trace
from core.trace import MAX_TRACE_BYTES, Trace, TraceError


@pytest.fixture(scope="module")
def trace(tiny_model):
    return generate_trace(tiny_model, "round trip ✓", GenerationSettings(max_new_tokens=6, chat=False,
                                                                         stop_on_eos=False))


def test_round_trip_keeps_every_event(trace):
    again = Trace.from_json(trace.to_json())
    assert again.to_dict() == trace.to_dict()
    assert [e.token_text for e in again.events] == [e.token_text for e in trace.events]


def test_json_is_one_line_with_the_public_keys(trace):
    text = trace.to_json()
    assert "\n" not in text
    data = json.loads(text)
    for key in ("version", "model", "settings", "prompt_token_ids", "generated_text", "events"):
        assert key in data
    for key in ("phase", "positions", "token_id", "token_text", "latency_ms", "kv_seq_len", "kv_shapes"):
        assert key in data["events"][0]


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(version=99), "version"),
    (lambda d: d.pop("events"), "events"),
    (lambda d: d["events"][0].update(phase="middle"), "phase"),
    (lambda d: d["events"][0].update(positions=[3, 1]), "positions"),
    (lambda d: d["events"][0].update(latency_ms="fast"), "latency_ms"),
    (lambda d: d["events"][0].pop("token_id"), "token_id"),
    (lambda d: d.update(prompt_token_ids=["a"]), "prompt_token_ids"),
])
def test_malformed_traces_are_rejected_with_a_reason(trace, mutate, message):
    data = json.loads(trace.to_json())
    mutate(data)
    with pytest.raises(TraceError, match=message):
        Trace.from_json(json.dumps(data))


def test_truncated_and_oversized_files(trace):
    text = trace.to_json()
    with pytest.raises(TraceError, match="truncated"):
        Trace.from_json(text[: len(text) // 2])
    with pytest.raises(TraceError, match="limit"):
        Trace.from_json(" " * (MAX_TRACE_BYTES + 1))
    with pytest.raises(TraceError):
        Trace.from_json("[1, 2]")


def test_stop_reasons_are_one_vocabulary_and_old_words_still_load(trace):
    from core.trace import STOP_REASONS, bundled_traces

    assert STOP_REASONS == ("eos", "max_new_tokens", "stopped")
    assert trace.stop_reason in STOP_REASONS
    data = trace.to_dict()
    for recorded, read in (("cancelled", "stopped"), ("stopped", "stopped"), ("eos", "eos"),
                           ("max_new_tokens", "max_new_tokens")):
        assert Trace.from_dict({**data, "stop_reason": recorded}).stop_reason == read
    assert Trace.from_dict({k: v for k, v in data.items() if k != "stop_reason"}).stop_reason is None
    for path in bundled_traces().values():  # the traces shipped with the app speak the same words
        assert Trace.from_json(path.read_text(encoding="utf-8")).stop_reason in STOP_REASONS


def test_predicted_terms_round_trip_and_bad_ones_are_refused():
    from core.trace import load_trace_file

    base = {"version": 1, "model": {"id": "m"}, "settings": {}, "prompt_token_ids": [1, 2],
            "events": [{"phase": "prefill", "positions": [0, 2], "token_id": 3, "token_text": "a",
                        "latency_ms": 5.0, "kv_seq_len": 2, "kv_shapes": [], "predicted_ms": 4.0,
                        "predicted_terms_ms": {"overhead": 1.0, "memory": 3.0}}]}
    trace = load_trace_file(json.dumps(base).encode())
    assert trace.events[0].predicted_terms_ms == {"overhead": 1.0, "memory": 3.0}
    assert load_trace_file(trace.to_json().encode()).events[0].predicted_terms_ms == {"overhead": 1.0, "memory": 3.0}
    for bad in ({"overhead": "fast"}, {"overhead": float("inf")}, {"overhead": True}, ["overhead"]):
        base["events"][0]["predicted_terms_ms"] = bad
        with pytest.raises(TraceError, match="predicted_terms_ms"):
            load_trace_file(json.dumps(base).encode())
