"""Analytic performance figures derived from a run or a model's shapes: one definition of each.

The page, the CLI, the exports and the benchmarks all quote TTFT, TPOT, achieved bandwidth,
prediction error, KV bytes per token and the two crossovers. Each is defined here once, so two
views of the same run can never disagree on what a number means. Pure functions, no torch: the
events only need `phase`, `latency_ms` and `cost` (core.trace.Event has them), and the model
figures need plain shapes or a HF config.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from core.predictor import Predictor
    from core.spec import ModelSpec

# Batches searched for the compute-bound crossover: far past where any CPU or GPU decode turns.
MAX_SEARCH_BATCH = 4096
ERROR_PCT_DECIMALS = 2  # the one rounding of a prediction error, in tables, charts and CSV alike


class TimedEvent(Protocol):
    """What these functions read from an event (core.trace.Event is one)."""

    phase: str
    latency_ms: float
    cost: dict[str, Any] | None


# --- latency of a run ------------------------------------------------------------------------

def ttft_ms(events: Sequence[TimedEvent]) -> float | None:
    """Time to first token: the first forward's measured latency (the prefill, which emits the
    first token). None before any event."""
    return float(events[0].latency_ms) if events else None


def decode_latencies_ms(events: Sequence[TimedEvent]) -> list[float]:
    """Measured latency of every decode step, in order (the prefill excluded)."""
    return [float(e.latency_ms) for e in events if e.phase == "decode"]


def tpot_ms(events: Sequence[TimedEvent]) -> float | None:
    """Time per output token: the mean latency of the decode steps. None before the first one.

    A mean, not a median, so TPOT x steps is the decode time the reader waited.
    """
    decode = decode_latencies_ms(events)
    return statistics.fmean(decode) if decode else None


def achieved_bandwidth(events: Sequence[TimedEvent]) -> float | None:
    """Bytes/s over the decode steps: all their computed bytes over all their measured time.

    A ratio of sums, so it equals the mean bytes per step over TPOT (the mean step time): the
    division a reader does with the two numbers the page prints. A mean of per-step rates would
    weight the fast steps more and read higher than that division.
    Steps without a cost (an unpriced model) or with a zero time are left out; None if none remain.
    """
    steps = [e for e in events if e.phase == "decode" and e.cost and e.latency_ms > 0]
    if not steps:
        return None
    return sum(e.cost["bytes"]["total"] for e in steps) / (sum(e.latency_ms for e in steps) / 1e3)


def paper_ms(event: TimedEvent, bandwidth: float | None) -> float | None:
    """The textbook estimate of one forward: its bytes (computed) over the machine's bandwidth.

    What "decode is memory-bound, so a step takes bytes / bandwidth" promises, before any fixed
    cost, slower real kernels or arithmetic. None for an unpriced event or no bandwidth.
    """
    if not event.cost or not bandwidth:
        return None
    return 1000.0 * event.cost["bytes"]["total"] / bandwidth


# Predicted terms that a forward pays once whatever its length, and those that grow with its tokens.
FIXED_TERMS = ("overhead", "memory", "prefill_extra")
PER_TOKEN_TERMS = ("compute", "kv", "attention")


def scaled_prefill_ms(terms_ms: Mapping[str, float], tokens_priced: int, tokens: int) -> float:
    """A prefill of `tokens` tokens from the predicted terms of one priced at `tokens_priced`.

    The fixed cost and the weight stream are paid once per forward; the arithmetic and the cache
    writes grow with the tokens. Linear in the tokens, so it leaves out attention's quadratic part:
    for a short prompt's terms stretched to a few thousand tokens it reads somewhat low.
    """
    fixed = sum(terms_ms.get(k, 0.0) for k in FIXED_TERMS)
    per_token = sum(terms_ms.get(k, 0.0) for k in PER_TOKEN_TERMS) / max(1, tokens_priced)
    return fixed + per_token * max(0, tokens)


def median_terms_ms(events: Sequence[Any], phase: str = "decode") -> dict[str, float]:
    """The median of each predicted term (Event.predicted_terms_ms) over one phase's events.

    Empty when no event of that phase carries the split (an old trace, or an unpriced model).
    """
    rows = [e.predicted_terms_ms for e in events if e.phase == phase and getattr(e, "predicted_terms_ms", None)]
    if not rows:
        return {}
    return {k: statistics.median(r.get(k, 0.0) for r in rows) for k in rows[0]}


def prediction_error_pct(predicted_ms: float | None, measured_ms: float) -> float | None:
    """(predicted - measured) / measured x 100, rounded to ERROR_PCT_DECIMALS.

    Positive means the predictor over-predicted (said slower than measured). None without a
    prediction or without a positive measured time.
    """
    if predicted_ms is None or measured_ms <= 0:
        return None
    return round(100.0 * (predicted_ms - measured_ms) / measured_ms, ERROR_PCT_DECIMALS)


# --- model shapes ----------------------------------------------------------------------------

def head_dim_from_config(config: Any, default: int | None = None) -> int:
    """Per-head width from a HF config (object or dict): its `head_dim`, else hidden / heads.

    `default` answers a config that has neither (a recorded trace's partial config); without one
    that is a ValueError. core.spec.spec_from_config adds per-family defaults on top of this rule.
    """
    get = config.get if isinstance(config, Mapping) else lambda key: getattr(config, key, None)
    head_dim = get("head_dim")
    if head_dim:
        return int(head_dim)
    # GPT-2 style names too: a config object maps them itself, a plain dict from config.json does not.
    hidden, heads = get("hidden_size") or get("n_embd"), get("num_attention_heads") or get("n_head")
    if hidden and heads:
        return int(hidden) // int(heads)
    if default is not None:
        return default
    raise ValueError("config has no head_dim and no hidden_size / num_attention_heads to derive it")


def kv_bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int, dtype_bytes: float) -> int:
    """KV cache bytes of one token of one sequence: 2 (K and V) x layers x KV heads x head_dim x bytes.

    KV heads, not query heads (grouped-query attention shrinks exactly this). The same figure as
    core.cost.kv_bytes_per_token(spec, dtype), from bare shapes: a recorded trace has no ModelSpec.
    """
    return int(2 * n_layers * n_kv_heads * head_dim * dtype_bytes)


# --- crossovers ------------------------------------------------------------------------------

def crossover_tokens(weight_bytes: int, kv_bytes_per_token: int, batch: int = 1) -> float:
    """Context length where one decode step's KV reads equal its weight reads: W / (kv per token x batch).

    Below it a decode step is dominated by streaming the weights; above it, by reading the cache.
    """
    if kv_bytes_per_token <= 0 or batch < 1:
        raise ValueError("kv_bytes_per_token must be positive and batch at least 1")
    return weight_bytes / (kv_bytes_per_token * batch)


def decode_split_s(spec: ModelSpec, predictor: Predictor, n_cached: int, batch: int,
                   dtype: str, **cost_kwargs: Any) -> tuple[float, float]:
    """One decode step's predicted (compute, memory) seconds, each with its fitted coefficient.

    Memory is weights and activations plus KV traffic; the fixed overhead belongs to neither.
    `cost_kwargs` go to core.cost.forward_cost (kv_dtype, mla_form...); the LM head runs on the
    one new position, as every runner and engine does.
    """
    from core.cost import forward_cost  # late: keeps this module free of numpy for its readers

    cost = forward_cost(spec, 1, n_cached, batch, weight_dtype=dtype, **{"lm_head_tokens": 1, **cost_kwargs})
    terms = predictor.terms_s(cost, "decode")
    coef = predictor.coef
    return coef["compute"] * terms["compute"], coef["memory"] * terms["memory"] + coef["kv"] * terms["kv"]


def compute_bound_batch(spec: ModelSpec, predictor: Predictor, n_cached: int, dtype: str,
                        max_batch: int = MAX_SEARCH_BATCH, **cost_kwargs: Any) -> int | None:
    """The smallest batch from which the predictor's compute term reaches its memory terms, or None.

    This is where batching stops paying: below it more rows ride on the same weight read; from it
    on every extra row adds its own arithmetic time. None when no batch up to `max_batch` gets there.
    Arithmetic grows with every row and the weight read does not, so the gap closes monotonically
    and a bisection finds the crossing in a dozen cost evaluations.
    """
    def reached(batch: int) -> bool:
        compute, memory = decode_split_s(spec, predictor, n_cached, batch, dtype, **cost_kwargs)
        return compute >= memory

    if max_batch < 1 or not reached(max_batch):
        return None
    lo, hi = 0, max_batch  # reached(hi) holds; reached(lo) does not (batch 0 has no arithmetic)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if reached(mid):
            hi = mid
        else:
            lo = mid
    return hi
