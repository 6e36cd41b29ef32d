"""A real engine's KV blocks, live: vLLM's KV cache events over ZMQ, decoded into a block table.

vLLM started with `--kv-events-config` (`enable_kv_cache_events`, publisher `zmq`, an `ipc://`
endpoint: the engine binds it, a subscriber connects, so no loopback port can collide across
servers and tests) publishes one multipart message per batch of events: the topic, a sequence
number (8 bytes, big-endian) and the batch, msgpack'd: `[ts, events, data_parallel_rank]`, each
event a map tagged by `type`: `BlockStored` (block_hashes, parent_block_hash, token_ids, block_size,
...), `BlockRemoved` (block_hashes) or `AllBlocksCleared` (vllm/distributed/kv_events.py). A block
reused by a later request emits nothing in vLLM's default report mode: the table shows what the
engine stored and removed; reuse is read from its prefix-cache counters.

Everything received is untrusted: each message is size-capped and checked field by field; a bad
one is counted and described, never raised into the page; a gap in the sequence numbers counts the
messages lost (a subscriber that fell behind, or joined late).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

MAX_MESSAGE_BYTES = 4_000_000
MAX_BLOCKS = 100_000  # blocks the table keeps (vLLM's CPU build here holds 364 of 128 tokens)
MAX_PROBLEMS = 20


@dataclass(frozen=True)
class Stored:
    """Blocks the engine filled: their hashes in order, the block before the first, their tokens."""

    hashes: tuple[int | bytes, ...]
    parent: int | bytes | None
    token_ids: tuple[int, ...]
    block_size: int


@dataclass(frozen=True)
class Removed:
    hashes: tuple[int | bytes, ...]


@dataclass(frozen=True)
class Cleared:
    pass


Event = Stored | Removed | Cleared


def _hash(value: Any, where: str) -> int | bytes:
    if isinstance(value, bool) or not isinstance(value, (int, bytes)) or (isinstance(value, bytes) and len(value) > 64):
        raise ValueError(f"{where}: a block hash is an integer or at most 64 bytes, got {type(value).__name__}")
    return value


def _hashes(value: Any, where: str) -> tuple[int | bytes, ...]:
    if not isinstance(value, list) or not value or len(value) > MAX_BLOCKS:
        raise ValueError(f"{where}: block_hashes must be a non-empty list")
    return tuple(_hash(h, where) for h in value)


def decode_batch(payload: bytes) -> tuple[float, list[Event]]:
    """(the batch's time stamp, its events) from one message's last frame; ValueError, in words,
    for anything that is not a batch of the three event kinds."""
    if len(payload) > MAX_MESSAGE_BYTES:
        raise ValueError(f"a message of {len(payload):,} bytes; the limit is {MAX_MESSAGE_BYTES:,}")
    try:
        raw = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not msgpack: {str(exc)[:120]}") from None
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[0], (int, float)) or isinstance(raw[0], bool) \
            or not isinstance(raw[1], list):
        raise ValueError("not an event batch ([ts, events, ...])")
    events: list[Event] = []
    for k, item in enumerate(raw[1]):
        where = f"event {k}"
        if not isinstance(item, dict):
            raise ValueError(f"{where} is not a map")
        kind = item.get("type")
        if kind == "BlockStored":
            hashes = _hashes(item.get("block_hashes"), where)
            parent = item.get("parent_block_hash")
            tokens, size = item.get("token_ids"), item.get("block_size")
            if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 4096:
                raise ValueError(f"{where}: block_size must be a whole number from 1 to 4,096")
            if not isinstance(tokens, list) or len(tokens) != size * len(hashes) \
                    or any(isinstance(t, bool) or not isinstance(t, int) for t in tokens):
                raise ValueError(f"{where}: token_ids must be {size} integers per block")
            events.append(Stored(hashes, None if parent is None else _hash(parent, where), tuple(tokens), size))
        elif kind == "BlockRemoved":
            events.append(Removed(_hashes(item.get("block_hashes"), where)))
        elif kind == "AllBlocksCleared":
            events.append(Cleared())
        else:
            raise ValueError(f"{where}: unknown event type {str(kind)[:40]!r}")
    return float(raw[0]), events


@dataclass
class Block:
    hash: int | bytes
    parent: int | bytes | None
    token_ids: tuple[int, ...]
    order: int  # the how-many-th block stored since the table began
    stored_s: float


@dataclass
class BlockTable:
    """What the engine holds, as its events said: every stored block not removed since, in the order
    stored, with its chain parent and tokens; and the stream's health."""

    blocks: dict[int | bytes, Block] = field(default_factory=dict)
    stored: int = 0
    removed: int = 0
    cleared: int = 0
    messages: int = 0
    lost: int = 0  # messages missing from the sequence numbers
    bad: int = 0
    problems: list[str] = field(default_factory=list)
    last_seq: int | None = None
    block_size: int | None = None

    def apply(self, seq: int, ts: float, events: list[Event]) -> None:
        if self.last_seq is not None and seq > self.last_seq + 1:
            self.lost += seq - self.last_seq - 1
        self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)
        self.messages += 1
        for event in events:
            if isinstance(event, Stored):
                self.block_size = event.block_size
                parent = event.parent
                for k, h in enumerate(event.hashes):
                    if h not in self.blocks and len(self.blocks) < MAX_BLOCKS:
                        tokens = event.token_ids[k * event.block_size:(k + 1) * event.block_size]
                        self.blocks[h] = Block(h, parent, tokens, self.stored, ts)
                    self.stored += 1
                    parent = h
            elif isinstance(event, Removed):
                for h in event.hashes:
                    if self.blocks.pop(h, None) is not None:
                        self.removed += 1
            else:
                self.blocks.clear()
                self.cleared += 1

    def note(self, problem: str) -> None:
        self.bad += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)

    def chains(self) -> list[list[Block]]:
        """The blocks as chains: each starts at a block whose parent the table does not hold, then
        follows children in the order stored (a prompt's blocks, then the blocks its answer filled)."""
        children: dict[int | bytes, list[Block]] = {}
        roots = []
        for b in sorted(self.blocks.values(), key=lambda b: b.order):
            if b.parent is not None and b.parent in self.blocks:
                children.setdefault(b.parent, []).append(b)
            else:
                roots.append(b)
        out = []
        for root in roots:
            chain, stack = [], [root]
            while stack:
                b = stack.pop()
                chain.append(b)
                stack.extend(reversed(children.get(b.hash, [])))
            out.append(chain)
        return out


class Subscriber:
    """Connects to an engine's event endpoint and keeps a BlockTable up to date on a thread of its own.
    `snapshot()` copies what it knows under its lock; `stop()` ends the thread and closes the socket."""

    def __init__(self, endpoint: str, poll_ms: int = 100) -> None:
        import zmq

        if not endpoint.startswith("ipc://"):
            raise ValueError("the lab reads KV events from an ipc:// endpoint only")
        self.endpoint, self.poll_ms = endpoint, poll_ms
        self.table = BlockTable()
        self.lock = threading.Lock()
        self.connected_at = time.monotonic()
        self._stop = threading.Event()
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES + 1024)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._monitor = self._sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self._sock.connect(endpoint)
        self._thread = threading.Thread(target=self._loop, name="kv-events", daemon=True)
        self._thread.start()

    def wait_connected(self, timeout_s: float = 5.0) -> bool:
        """True once the connection to the publisher is made (what it sends from then on arrives: a
        PUB socket drops what it sends before a subscriber has joined); False if no engine publishes
        there within `timeout_s`."""
        from zmq.utils.monitor import recv_monitor_message

        if self._monitor is None:
            return True
        if self._monitor.poll(int(timeout_s * 1000)):
            recv_monitor_message(self._monitor)
            self._sock.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None
            time.sleep(0.05)  # the subscription follows the handshake: let it reach the publisher
            return True
        return False

    def _loop(self) -> None:
        import zmq

        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                if not dict(poller.poll(self.poll_ms)):
                    continue
                frames = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.ZMQError:
                if self._stop.is_set():
                    return
                time.sleep(self.poll_ms / 1000)
                continue
            self.receive(frames)

    def receive(self, frames: list[bytes]) -> None:
        """One message (topic, sequence number, batch) into the table, or counted as bad."""
        try:
            if len(frames) != 3 or len(frames[1]) != 8:
                raise ValueError(f"a message of {len(frames)} frames (expected topic, sequence number, batch)")
            seq = int.from_bytes(frames[1], "big", signed=True)
            ts, events = decode_batch(frames[2])
        except ValueError as exc:
            with self.lock:
                self.table.note(str(exc)[:200])
            return
        with self.lock:
            self.table.apply(seq, ts, events)

    def snapshot(self) -> BlockTable:
        with self.lock:
            t = self.table
            return BlockTable(dict(t.blocks), t.stored, t.removed, t.cleared, t.messages, t.lost, t.bad,
                              list(t.problems), t.last_seq, t.block_size)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        if self._monitor is not None:
            self._sock.disable_monitor()
            self._monitor.close(linger=0)
        self._sock.close(linger=0)
        self._ctx.term()


def ipc_endpoint(folder: Path, port: int) -> str:
    """The event endpoint of the engine serving on `port`: a socket file in `folder` (or the temp
    folder where that path is too long for a Unix socket)."""
    import tempfile

    path = folder / f"kv-events-{port}.ipc"
    if len(str(path)) > 100:
        path = Path(tempfile.gettempdir()) / f"pdlab-kv-events-{port}.ipc"
    return f"ipc://{path}"
