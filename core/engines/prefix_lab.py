"""The engine's own prefix cache held to the simulator's: conversations whose follow-ups re-send the
engine's own answers, as a chat client does.

Each conversation starts with a random token-id prompt; every later turn sends the whole conversation
so far (the earlier prompts and the token ids the engine itself generated) plus a new random message,
a think time after the previous answer's last token. Random text alone would never hit; re-sending
the engine's own output ids is what lets a real prefix cache reuse the earlier turns.

Measured: each turn's TTFT as the client saw it, and the engine's prefix-cache counters (vLLM's
`prefix_cache_queries_total` and `prefix_cache_hits_total`, in tokens) before and after. Simulated:
the same turns at their measured send times, with the same content (core.sim.prefix matches it
block by block at the engine's block size), priced with the engine's fit.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from core.engines.base import EngineClient, EngineError, EngineRequest, StreamEnd, TokenArrival
from core.engines.lab import _rel, per_request_errors
from core.engines.player import PROMPT_ID_RANGE
from core.engines.record import EngineRun, RequestRecord
from core.sim.sharing import as_conversations
from core.sim.workload import Request

QUERIES, HITS = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"


@dataclass(frozen=True)
class ConversationWorkload:
    """Conversations played at once, staggered; every turn's answer has a fixed length (ignore_eos).
    The defaults stay well inside the engine's 4,096-token window (the last turn: 400 + 3 x 112 +
    64 = 800 tokens) and its KV space, so nothing is evicted and every reuse is the cache's doing."""

    conversations: int = 3
    turns: int = 4
    first_prompt: int = 400
    message: int = 64
    output: int = 48
    think_s: float = 0.5
    stagger_s: float = 0.7

    def turn_id(self, conversation: int, turn: int) -> int:
        return conversation * self.turns + turn

    def prompt_tokens(self, turn: int) -> int:
        return self.first_prompt + turn * (self.output + self.message)

    def requests(self, sent_s: dict[int, float] | None = None) -> list[Request]:
        """The turns as the simulator's requests (core.sim.sharing's conversations: each turn's content
        in pieces, its own message and the answers it re-sends), arriving at `sent_s` (measured send
        times, by id) or, without them, as a closed loop from their conversation's start."""
        single = [Request(self.turn_id(c, t), c * self.stagger_s, self.first_prompt if t == 0 else self.message,
                          self.output) for c in range(self.conversations) for t in range(self.turns)]
        turns = as_conversations(single, self.turns, self.think_s)
        if sent_s is None:
            return turns
        return [replace(r, arrival_s=sent_s.get(r.id, r.arrival_s), follows=None, think_s=0.0) for r in turns]


@dataclass
class _Conversation:
    workload: ConversationWorkload
    index: int
    messages: list[tuple[int, ...]]  # each turn's own new ids (the first: the opening prompt)
    records: list[RequestRecord] = field(default_factory=list)
    error: str | None = None


def play_conversations(client: EngineClient, workload: ConversationWorkload, run: EngineRun, seed: int = 0,
                       timeout_s: float = 300.0, prompts: dict[int, tuple[int, ...]] | None = None) -> EngineRun:
    """Play every conversation at once (each in its own thread, staggered) and record each turn.
    `prompts`, when given, is filled with each turn's prompt ids by turn id as it is sent (what the
    engine's KV events hold, to tell one conversation's blocks from another's)."""
    rng = np.random.default_rng(seed)
    convs = [_Conversation(workload, c, [tuple(int(x) for x in rng.integers(
        *PROMPT_ID_RANGE, size=workload.first_prompt if t == 0 else workload.message)) for t in range(workload.turns)])
        for c in range(workload.conversations)]
    t0 = time.perf_counter()
    run.clock_unix_s = time.time()
    run.started_at = datetime.now(UTC).isoformat(timespec="seconds")
    deadline = t0 + timeout_s

    def clock() -> float:
        return time.perf_counter() - t0

    def converse(conv: _Conversation) -> None:
        history: tuple[int, ...] = ()
        at = conv.index * workload.stagger_s
        for t in range(workload.turns):
            prompt = history + conv.messages[t]
            rid = workload.turn_id(conv.index, t)
            record = RequestRecord(id=rid, prompt_tokens=len(prompt), output_tokens=workload.output, arrival_s=at,
                                   role=f"conversation {conv.index + 1}, turn {t + 1}")
            with run._lock:
                run.requests.append(record)
                if prompts is not None:
                    prompts[rid] = prompt
            wait = at - clock()
            if wait > 0:
                time.sleep(wait)
            if time.perf_counter() > deadline:
                record.error = "not sent: the run's time ran out"
                return
            answer: list[int] = []
            sent: list[float] = []
            try:
                for item in client.stream(EngineRequest(prompt, workload.output, ignore_eos=True,
                                                        request_id=f"conv-{rid}"), sent=sent):
                    with run._lock:
                        if record.sent_s is None and sent:
                            record.sent_s = sent[0] - t0
                        if isinstance(item, TokenArrival):
                            record.token_s.append(record.sent_s + item.t_s)
                            if item.token_id is None:
                                raise EngineError("the engine did not return its output token ids, so a follow-up "
                                                  "cannot re-send its answer")
                            answer.append(item.token_id)
                        elif isinstance(item, StreamEnd):
                            record.engine_figures = dict(item.engine_figures or {})
            except EngineError as exc:
                with run._lock:
                    record.error = str(exc)
                return
            with run._lock:
                record.done = True
            if len(answer) != workload.output:
                record.error = f"the engine returned {len(answer)} of {workload.output} output ids"
                return
            history = prompt + tuple(answer)
            at = record.token_s[-1] + workload.think_s

    threads = [threading.Thread(target=converse, args=(c,), name=f"conversation-{c.index}", daemon=True)
               for c in convs]
    for th in threads:
        th.start()
    for th in threads:
        th.join(max(0.0, deadline - time.perf_counter()) + 5.0)
    with run._lock:
        run.requests.sort(key=lambda r: r.id)
        run.finished = True
    return run


def counters(metrics: dict[str, float]) -> tuple[float, float] | None:
    """(prefix-cache queries, hits) in tokens from a /metrics scrape; None where the engine has none."""
    if QUERIES not in metrics or HITS not in metrics:
        return None
    return metrics[QUERIES], metrics[HITS]


def simulated_turns(run: EngineRun, workload: ConversationWorkload, fit: str, budget: int, max_seqs: int,
                    prefix_cache: bool = True):
    """The simulator, prefix cache on (or off, to say what the cache saved), on the turns the engine was
    sent (at their measured send times, with the same content), priced with the engine fit `fit` at
    its block size."""
    from core.sim.simulate import SimConfig, engine_limits, simulate

    sent = {r.id: r.left_s for r in run.requests if r.sent_s is not None}
    requests = [r for r in workload.requests(sent) if r.id in sent]
    limits = engine_limits(fit)
    if limits is None:
        raise ValueError(f"no saved engine fit {fit!r}: run `python -m core engine calibrate --only {fit}` first")
    config = SimConfig(policy="chunked", requests=len(requests), hardware=fit, prefix_cache=prefix_cache,
                       **{**limits, "budget": budget, "max_batch": max_seqs})
    result = simulate(config, sorted(requests, key=lambda r: r.id), keep_blocks=prefix_cache)
    return {r.id: list(t) for r, t in zip(result.requests, result.token_s, strict=True)}, result


def compare_turns(run: EngineRun, workload: ConversationWorkload, fit: str, budget: int, max_seqs: int,
                  before: tuple[float, float] | None, after: tuple[float, float] | None) -> dict[str, Any]:
    """Measured against simulated: each turn's TTFT (median and p90 error over the turns; each
    turn's pair) and the prefix cache's hit tokens (the engine's counters against the simulator's)."""
    sim, result = simulated_turns(run, workload, fit, budget, max_seqs)
    cold, _ = simulated_turns(run, workload, fit, budget, max_seqs, prefix_cache=False)
    errors = per_request_errors(run, sim)
    turns = []
    hits = result.prefix_hits_of()
    for r in run.requests:
        simulated, without = sim.get(r.id) or [], cold.get(r.id) or []
        turns.append({"id": r.id, "role": r.role, "prompt_tokens": r.prompt_tokens,
                      "ttft_measured_s": r.ttft_s, "ttft_simulated_s": simulated[0] - r.left_s if simulated else None,
                      "ttft_without_cache_simulated_s": without[0] - r.left_s if without else None,
                      "hit_tokens_simulated": hits.get(r.id, 0)})
    engine_hits = engine_queries = None
    if before is not None and after is not None:
        engine_queries, engine_hits = after[0] - before[0], after[1] - before[1]
    return {"workload": asdict(workload), "fit": fit, "turns": turns, "ttft_error": errors["ttft"],
            "hit_tokens_measured": engine_hits, "queries_measured": engine_queries,
            "hit_tokens_simulated": result.prefix_hit_tokens(),
            "queries_simulated": sum(log.prefix_queries for _, log in result.servers),
            "blocks_stored_simulated": sum(log.prefix_blocks_stored for _, log in result.servers),
            "blocks_held_simulated": [list(b) for _, log in result.servers for b in log.prefix_blocks_held],
            "hit_token_error": _rel(float(result.prefix_hit_tokens()), engine_hits) if engine_hits else None}
