"""A real llama-server (built by `make engine-setup`) on loopback: its native stream counted token
by token, its timings, its counters, and a long prompt among short streams. Skipped, with the
make target that builds it, where it is not built (`make test` sets up vLLM only)."""

from __future__ import annotations

import pytest

from core.engines.base import EngineRequest, StreamEnd, TokenArrival
from core.engines.lab import LONG, StallWorkload
from core.engines.player import play
from core.engines.record import EngineRun

pytestmark = pytest.mark.engine


def test_one_stream_is_counted_by_the_servers_own_total(llama):
    items = list(llama.client.stream(EngineRequest(tuple(range(3000, 3032)), 16, ignore_eos=True)))
    tokens = [i for i in items if isinstance(i, TokenArrival)]
    end = items[-1]
    assert isinstance(end, StreamEnd)
    assert len(tokens) == 16 and [t.index for t in tokens] == list(range(16))
    timings = end.engine_figures["timings"]
    assert timings["predicted_n"] == 16 and timings["prompt_n"] == 32
    assert timings["cache_n"] == 0  # cache_prompt: false, so no prefix was reused


def test_streams_and_a_long_prompt_with_the_servers_counters(llama):
    requests, roles = StallWorkload(streams=3, short_output=40, long_at_s=0.3).requests()
    run = play(llama.client, requests, EngineRun(engine="llama-server", setting="llama-b2048", model="smollm2",
                                                 started_at=""), roles, metrics_url=llama.base_url)
    for r in run.requests:
        assert r.error is None and len(r.token_s) == r.output_tokens, (r.id, r.error, len(r.token_s))
        assert all(b >= a for a, b in zip(r.token_s, r.token_s[1:], strict=False))
    long = next(r for r in run.requests if r.role == LONG)
    assert long.engine_figures["timings"]["prompt_n"] == 1536
    last = run.metrics[-1]["values"]
    assert last["llamacpp:prompt_tokens_total"] >= 1536 + 3 * 32
    assert last["llamacpp:tokens_predicted_total"] >= sum(r.output_tokens for r in run.requests)
