"""Latency metrics of simulated requests, defined as the single-run views define them (core.perf).

- TTFT (time to first token): from a request's arrival to its first output token, queueing
  included (in a single run there is no queue, so it is the prefill's time).
- E2E (end to end): from arrival to the last output token.
- TPOT (time per output token): the mean gap between output tokens after the first,
  (E2E - TTFT) / (n - 1) for n output tokens. For one run with no queue this equals the mean
  decode-step latency that core.perf.tpot_ms reports.
"""

from __future__ import annotations


def tpot_s(e2e_s: float, ttft_s: float, n_tokens: int) -> float:
    """(E2E - TTFT) / (n - 1): the mean time per output token after the first (ValueError for n < 2)."""
    if n_tokens < 2:
        raise ValueError(f"TPOT needs at least two output tokens, got {n_tokens}")
    if e2e_s < ttft_s:
        raise ValueError(f"E2E ({e2e_s} s) cannot end before the first token ({ttft_s} s)")
    return (e2e_s - ttft_s) / (n_tokens - 1)
