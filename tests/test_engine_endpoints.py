"""The engine lab's list of engines: only the operator's, checked entry by entry, never a traceback."""

from __future__ import annotations

import json

from core.engines.endpoints import Endpoint, configured, read_config
from core.engines.launch import MAKE_ENGINE_PORTS, SETTINGS


def _ops(*entries) -> dict[str, str]:
    return {"PDLAB_MAKE_ENGINE_PORTS": "off", "PDLAB_ENGINES": json.dumps(list(entries))}


def test_make_engine_endpoints_on_their_fixed_ports():
    found = configured({})
    assert [e.name for e in found] == list(MAKE_ENGINE_PORTS)
    assert [e.base_url for e in found] == [f"http://127.0.0.1:{p}" for p in MAKE_ENGINE_PORTS.values()]
    b256 = found[1]
    assert (b256.setting, b256.budget, b256.engine, b256.operator) == ("vllm-b256", 256, "vllm", False)
    assert b256.engine_setting() is SETTINGS["vllm-b256"] and b256.where == "127.0.0.1:8602"
    # only the prefix-cache setting publishes KV events: at a socket beside its port, never a loopback port
    events = {e.name: e.kv_events for e in found}
    assert events["vllm-b256-pc"].startswith("ipc://") and events["vllm-b256-pc"].endswith("-8604.ipc")
    assert [n for n, ev in events.items() if ev] == ["vllm-b256-pc"]
    assert found[3].label.endswith("prefix cache on")


def test_make_engine_ports_can_be_turned_off_or_moved():
    assert configured({"PDLAB_MAKE_ENGINE_PORTS": "off"}) == []
    moved = configured({"PDLAB_MAKE_ENGINE_PORTS": "9700"})
    assert [e.base_url for e in moved] == [f"http://127.0.0.1:{p}" for p in range(9700, 9704)]
    assert moved[3].kv_events.endswith("-9703.ipc")
    found, problems = read_config({"PDLAB_MAKE_ENGINE_PORTS": "lots"})
    assert len(found) == 4 and "neither 'off' nor a port" in problems[0]


def test_an_operator_entry_is_used_with_its_fields():
    found, problems = read_config(_ops({"name": "gpu-box", "url": "https://engines.internal:8000/", "model": "llama",
                                        "budget": 512, "max_seqs": 64, "engine": "vllm",
                                        "label": "Big <b>GPU</b> box"}))
    assert problems == []
    (e,) = found
    assert e == Endpoint("gpu-box", "Big bGPU/b box", "https://engines.internal:8000", "llama", None, 512, 64, "vllm")
    assert e.operator and e.where == "configured by the operator"  # the reader never sees the operator's host
    setting = e.engine_setting()
    assert (setting.name, setting.budget, setting.max_seqs) == ("gpu-box", 512, 64)


def test_an_operator_entry_may_name_its_kv_events_address():
    (e,) = configured(_ops({"name": "pc", "url": "http://127.0.0.1:9000", "model": "m", "engine": "vllm",
                            "kv_events": "ipc:///tmp/engine-9000.ipc"}))
    assert e.kv_events == "ipc:///tmp/engine-9000.ipc"
    for bad in ("tcp://127.0.0.1:5557", "ipc://relative.ipc", "ipc:///tmp/a b", "ipc:///" + "x" * 300, 7):
        found, problems = read_config(_ops({"name": "pc", "url": "http://127.0.0.1:9000", "model": "m",
                                            "kv_events": bad}))
        assert found == [] and "'kv_events' must be an ipc:// address" in problems[0], bad


def test_an_operator_entry_without_a_budget_is_simulated_at_vllms_default():
    (e,) = configured(_ops({"name": "x", "url": "http://10.0.0.5:8000", "model": "m"}))
    assert e.budget is None and e.engine_setting().budget == 2048 and e.engine == "openai"


def test_malformed_entries_are_skipped_with_a_message_each():
    good = {"name": "ok", "url": "http://10.0.0.5:8000", "model": "m"}
    bad = [
        "not an object",
        {"name": "Has Spaces", "url": "http://a", "model": "m"},
        {"name": "ftp", "url": "ftp://10.0.0.5/", "model": "m"},
        {"name": "file", "url": "file:///etc/passwd", "model": "m"},
        {"name": "creds", "url": "http://user:secret@10.0.0.5:8000", "model": "m"},
        {"name": "nomodel", "url": "http://10.0.0.5:8000"},
        {"name": "h100-sxm", "url": "http://10.0.0.5:8000", "model": "m"},  # a GPU preset's name
        {"name": "host", "url": "http://10.0.0.5:8000", "model": "m"},  # this machine's name in the simulator
        {"name": "vllm-b256", "url": "http://10.0.0.5:8000", "model": "m"},  # a make-engine name
        {"name": "ok", "url": "http://10.0.0.6:8000", "model": "m"},  # taken by the good one
        {"name": "b", "url": "http://10.0.0.5:8000", "model": "m", "budget": True},
        {"name": "c", "url": "http://10.0.0.5:8000", "model": "m", "budget": 0},
        {"name": "d", "url": "http://10.0.0.5:8000", "model": "m", "engine": "sglang"},
    ]
    found, problems = read_config(_ops(good, *bad))
    assert [e.name for e in found] == ["ok"]
    assert len(problems) == len(bad)
    assert all(p.startswith("PDLAB_ENGINES entry ") and "is skipped: " in p for p in problems)
    assert "secret" not in " ".join(problems)


def test_json_that_is_not_a_list_or_not_json_is_one_message():
    for raw, words in (("{nope", "is not JSON"), ('{"name": "x"}', "must be a JSON list")):
        found, problems = read_config({"PDLAB_MAKE_ENGINE_PORTS": "off", "PDLAB_ENGINES": raw})
        assert found == [] and len(problems) == 1 and words in problems[0]
