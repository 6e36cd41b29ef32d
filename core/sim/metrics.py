"""Latency metrics of simulated requests, defined as the single-run views define them (core.perf).

- TTFT (time to first token): from a request's arrival to its first output token, queueing
  included (in a single run there is no queue, so it is the prefill's time).
- E2E (end to end): from arrival to the last output token.
- TPOT (time per output token): the mean gap between output tokens after the first,
  (E2E - TTFT) / (n - 1) for n output tokens. For one run with no queue this equals the mean
  decode-step latency that core.perf.tpot_ms reports.
- ITL (inter-token latency): every gap between two consecutive output tokens of a request; its
  p99 catches the stalls a mean hides.
- Throughput: output tokens over the makespan; goodput: requests per second meeting both targets.
"""

from __future__ import annotations

import numpy as np


def tpot_s(e2e_s: float, ttft_s: float, n_tokens: int) -> float:
    """(E2E - TTFT) / (n - 1): the mean time per output token after the first (ValueError for n < 2)."""
    if n_tokens < 2:
        raise ValueError(f"TPOT needs at least two output tokens, got {n_tokens}")
    if e2e_s < ttft_s:
        raise ValueError(f"E2E ({e2e_s} s) cannot end before the first token ({ttft_s} s)")
    return (e2e_s - ttft_s) / (n_tokens - 1)


# --- summaries of a whole simulation ------------------------------------------------------

PERCENTILES = (50, 90, 99)


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def per_request(arrival_s: float, token_s: list[float]) -> dict[str, float | int | None]:
    """One request's TTFT, E2E and TPOT (None with fewer than two tokens), in seconds."""
    if not token_s:
        return {"ttft_s": None, "e2e_s": None, "tpot_s": None, "tokens": 0}
    ttft, e2e = token_s[0] - arrival_s, token_s[-1] - arrival_s
    return {"ttft_s": ttft, "e2e_s": e2e, "tpot_s": tpot_s(e2e, ttft, len(token_s)) if len(token_s) > 1 else None,
            "tokens": len(token_s)}


def summary(arrivals: list[float], tokens: list[list[float]], ttft_target_s: float,
            tpot_target_s: float) -> dict[str, float | int | None]:
    """Percentiles of TTFT, TPOT, ITL and E2E over the served requests, as `vllm bench serve`
    reports them; throughput = output tokens / makespan (first arrival to last token); goodput =
    requests per second that met both the TTFT and the TPOT target (a one-token request has no TPOT
    to miss)."""
    served = [(a, t) for a, t in zip(arrivals, tokens, strict=True) if t]
    ttft = np.array([t[0] - a for a, t in served])
    e2e = np.array([t[-1] - a for a, t in served])
    tpot = np.array([(t[-1] - t[0]) / (len(t) - 1) for _, t in served if len(t) > 1])
    itl = np.concatenate([np.diff(np.asarray(t)) for _, t in served if len(t) > 1]) if tpot.size else np.array([])
    out: dict[str, float | int | None] = {}
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2e", e2e)):
        out[f"{name}_mean_s"] = float(values.mean()) if values.size else None
        for q in PERCENTILES:
            out[f"{name}_p{q}_s"] = _pct(values, q)
    start = min(arrivals) if arrivals else 0.0
    end = max((t[-1] for _, t in served), default=start)
    makespan = end - start
    n_tokens = int(sum(len(t) for _, t in served))
    good = sum(1 for a, t in served
               if t[0] - a <= ttft_target_s and (len(t) < 2 or (t[-1] - t[0]) / (len(t) - 1) <= tpot_target_s))
    out.update({"requests": len(arrivals), "served": len(served), "output_tokens": n_tokens,
                "makespan_s": makespan,
                "throughput_tok_s": n_tokens / makespan if makespan > 0 else None,
                "request_rate_served_per_s": len(served) / makespan if makespan > 0 else None,
                "goodput_req_s": good / makespan if makespan > 0 else None,
                "good_requests": good, "ttft_target_s": ttft_target_s, "tpot_target_s": tpot_target_s})
    return out
