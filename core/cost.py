"""Analytic FLOPs and bytes of one forward pass: prefill and decode are the same function.

A forward runs `n_new` new tokens per sequence over `n_cached` cached ones, for `batch` sequences.
Prefill is `forward_cost(spec, prompt_len, 0)`; a decode step is `forward_cost(spec, 1, context)`;
a serving iteration that mixes both is `step_cost(spec, [(512, 0), (1, 900), (1, 47)])`.
Keeping one function means the two phases can only differ through their arguments, which is the
point the app teaches: same weights, same arithmetic per token, very different reuse.

Conventions (they match `torch.utils.flop_counter.FlopCounterMode` under eager attention):
- a multiply-add is 2 FLOPs; bias adds, norms, softmax, activations and rotary are not counted;
- attention scores (QK^T and attention x V) are counted over the full rectangle n_new x attn_len,
  masked half included, because eager kernels compute it; `flops_attn_causal` gives the causal
  (useful) part for comparison;
- bytes are a lower bound of memory traffic: each weight matrix once per forward, the cache
  read and written once, and the inputs/outputs of linear layers once each. The eager attention
  score matrix is not counted (fused kernels never materialise it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from core.dtypes import default_companion_dtype, nbytes, normalize_dtype
from core.spec import ModelSpec

FLOP_PARTS = ("attn_proj", "attn_scores", "mlp", "lm_head")
# How latent attention (DeepSeek's MLA) is run. "transformers": every forward re-expands the cached
# latent of every attended position through kv_b_proj into full keys and values (what the live
# runner and FlopCounterMode see). "serving": each row takes the cheaper of that and the absorbed
# form, which folds kv_b_proj into the row's queries and outputs and attends over the latent
# itself, as vLLM and SGLang do: decode steps and short verifications absorb, prefills and long
# chunks expand (see `absorbs`).
MLA_FORMS = ("transformers", "serving")
BYTE_PARTS = ("weights", "kv_read", "kv_write", "activations")


@dataclass(frozen=True)
class ForwardCost:
    """FLOPs and bytes of one forward. `flops` and `bytes` are keyed by part, plus "total"."""

    n_new: int
    n_cached: int
    batch: int
    flops: dict[str, int]
    flops_attn_causal: int
    bytes: dict[str, int]
    # Mixture of experts: expected distinct experts each MoE layer reads in this forward (None
    # for a dense model). Its weight bytes count these experts only.
    experts_read: float | None = None
    # Rows through the weight matrices (new tokens over every sequence) and through the LM head:
    # a CPU's matmul rate depends on how many rows share one pass over a matrix (core.calibrate).
    # 0 (a cost built before these were kept): n_new x batch and batch.
    tokens: int = 0
    lm_rows: int = 0
    # The layers' matrix FLOPs that scale with the tokens (all of attn_proj and mlp, but a latent
    # attention's re-expansion of cached positions): what a row-count rate prices. 0: unknown.
    row_flops: int = 0

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved: compare with the hardware's ridge point."""
        return self.flops["total"] / self.bytes["total"] if self.bytes["total"] else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_new": self.n_new, "n_cached": self.n_cached, "batch": self.batch,
            "flops": dict(self.flops), "flops_attn_causal": self.flops_attn_causal,
            "bytes": dict(self.bytes), "intensity": self.intensity, "experts_read": self.experts_read,
            "tokens": self.tokens, "lm_rows": self.lm_rows, "row_flops": self.row_flops,
        }


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _dtypes(weight_dtype: str, act_dtype: str | None, kv_dtype: str | None) -> tuple[str, str, str]:
    w = normalize_dtype(weight_dtype)
    companion = default_companion_dtype(w)
    a = normalize_dtype(act_dtype) if act_dtype is not None else companion
    kv = normalize_dtype(kv_dtype) if kv_dtype is not None else companion
    return w, a, kv


def latent_costs(spec: ModelSpec) -> tuple[int, int]:
    """Latent attention's (kv_b_proj FLOPs per position per layer, extra FLOPs per (query, key) pair
    of the absorbed form over the expanded one, summed over heads): what `absorbs` weighs."""
    expanded = 2 * spec.n_heads * (spec.head_dim + spec.v_head_dim)
    latent = 2 * spec.n_heads * (spec.kv_width + spec.kv_lora_rank)
    return 2 * spec.kv_up_params, latent - expanded


def absorbs(n_new: int, held: int, n_layers: int, up_flops: int, pair_gap: int) -> bool:
    """Whether a row of `n_new` tokens over `held` cached positions (summed over layers) costs fewer
    FLOPs absorbed than expanded: expanding runs kv_b_proj on every attended position, absorbing
    runs it once per new token but scores every pair against the wider latent."""
    span = held + n_layers * n_new
    return n_layers * n_new * up_flops + n_new * span * pair_gap < span * up_flops


def _causal_positions(n_new: int, n_cached: int, window: int | None) -> int:
    """Sum over new tokens i = 1..n_new of the keys it may see: n_cached + i, at most `window`."""
    first, last = n_cached + 1, n_cached + n_new
    if window is None or last <= window:
        return (first + last) * n_new // 2
    if first > window:
        return window * n_new
    return (first + window) * (window - first + 1) // 2 + (last - window) * window


def _held(n_cached: int, window: int | None) -> int:
    """Cached positions one layer keeps and attends over: transformers' sliding cache keeps
    window - 1 past positions, then appends the new ones."""
    return n_cached if window is None else min(n_cached, window - 1)


def held_positions(spec: ModelSpec, n_cached: int) -> int:
    """Cached positions a row over `n_cached` cached tokens reads, summed over layers (a dynamic
    cache): what its kv_read counts, in positions. A simulator sums it over rows (`row_sums`)."""
    return RowShape.of(spec).held(n_cached)


@dataclass(frozen=True)
class RowShape:
    """What the row sums of a batched step need of a model: its layers, their sliding-window split,
    and, when each row picks its latent-attention form as vLLM's MLA does, the two costs it weighs."""

    n_layers: int
    sliding: tuple[int, int, int] | None = None  # (full layers, windowed layers, window)
    latent: tuple[int, int] | None = None  # latent_costs(spec) when rows choose a latent form

    @classmethod
    def of(cls, spec: ModelSpec, latent_form: bool = False) -> RowShape:
        sliding = None
        if spec.sliding_window is not None:
            sliding = (spec.n_full_layers, spec.n_sliding_layers, spec.sliding_window)
        return cls(spec.n_layers, sliding, latent_costs(spec) if latent_form and spec.is_mla else None)

    def held(self, n_cached: int) -> int:
        """Cached positions a row over `n_cached` reads, summed over layers (transformers' sliding
        cache keeps window - 1 past positions, then appends the new ones)."""
        if self.sliding is None:
            return self.n_layers * n_cached
        full, windowed, window = self.sliding
        return full * n_cached + windowed * min(n_cached, window - 1)

    def held_padded(self, n_new: int, attn_len: int) -> int:
        """The same for a static cache, where every row attends over `attn_len` positions (a window
        at most, and never fewer than its own new tokens)."""
        if self.sliding is None:
            return self.n_layers * (attn_len - n_new)
        full, windowed, window = self.sliding
        return full * (attn_len - n_new) + windowed * (max(min(attn_len, window), n_new) - n_new)


class RowSums(NamedTuple):
    """The sums over a batched step's rows that its cost is linear in (summed over layers). A named
    tuple: the simulator builds one per iteration, tens of thousands per run."""

    rows: int = 0  # sequences, a row's count included
    tokens: int = 0  # new tokens
    held: int = 0  # cached positions read
    pairs: int = 0  # (query, key) pairs attended in the expanded form
    multi: bool = False  # some row brings more than one new token
    latent_pairs: int = 0  # pairs attended over the latent (absorbed rows)
    expanded: int = 0  # positions the expanded rows attend over (what latent attention re-expands)
    absorbed: int = 0  # new tokens of absorbed rows

    @property
    def latent(self) -> tuple[int, int, int]:
        return self.latent_pairs, self.expanded, self.absorbed


_new_tuple = tuple.__new__


def row_sums(shape: RowShape, rows: Sequence[tuple[int, int]], counts: Sequence[int] | None = None,
             attn_len: int | None = None) -> RowSums:
    """The row sums of one batched step of (n_new, n_cached) rows, each standing for `counts[i]`
    sequences (one each by default); `attn_len`: every row attends over that many positions (a
    static cache).

    The one place they are added up: the cost model (`step_cost`), the simulator's fitted step time
    and its event loop all read them from here. A row attends over its held positions plus its own
    new tokens on every layer, so its pairs are n_new * (held + layers * n_new)."""
    layers = shape.n_layers
    if counts is None and attn_len is None and shape.sliding is shape.latent is None:
        # the simulator's common case, once per iteration: kept to four running sums
        tokens = cached = cross = square = 0
        multi = False
        for n_new, n_cached in rows:
            tokens += n_new
            cached += n_cached
            cross += n_new * n_cached
            square += n_new * n_new
            if n_new > 1:
                multi = True
        held = layers * cached
        # tuple.__new__ skips the named tuple's Python-level constructor (a tenth of the call)
        return _new_tuple(RowSums, (len(rows), tokens, held, layers * (cross + square), multi, 0,
                                    held + layers * tokens, 0))
    n_rows = tokens = held = pairs = latent_pairs = expanded = absorbed = 0
    multi = False
    for i, (n_new, n_cached) in enumerate(rows):
        count = 1 if counts is None else counts[i]
        h = shape.held(n_cached) if attn_len is None else shape.held_padded(n_new, attn_len)
        span = h + layers * n_new
        n_rows += count
        tokens += n_new * count
        held += h * count
        multi = multi or n_new > 1
        if shape.latent is not None and absorbs(n_new, h, layers, *shape.latent):
            latent_pairs += n_new * span * count
            absorbed += n_new * count
        else:
            pairs += n_new * span * count
            expanded += span * count
    return RowSums(n_rows, tokens, held, pairs, multi, latent_pairs, expanded, absorbed)


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str = "fp32") -> int:
    """KV cache bytes of one token of one sequence: 2 (K and V) x layers x KV heads x head_dim.

    KV heads, not query heads: grouped- and multi-query attention exist to shrink exactly this.
    Latent attention caches kv_lora_rank + qk_rope_head_dim values per layer instead.
    """
    return nbytes(spec.n_layers * spec.kv_width, kv_dtype)


def kv_cache_bytes(spec: ModelSpec, seq_len: int, batch: int = 1, kv_dtype: str = "fp32") -> int:
    """Bytes a transformers DynamicCache holds for `seq_len` positions: sliding-window layers keep
    only their last `window - 1` positions."""
    _check_int(seq_len, "seq_len", 0)
    _check_int(batch, "batch", 1)
    held = spec.n_full_layers * seq_len
    if spec.sliding_window is not None:
        held += spec.n_sliding_layers * min(seq_len, spec.sliding_window - 1)
    return nbytes(spec.kv_width * held * batch, kv_dtype)


def forward_cost(spec: ModelSpec, n_new: int, n_cached: int, batch: int = 1, *,
                 weight_dtype: str = "fp32", act_dtype: str | None = None, kv_dtype: str | None = None,
                 lm_head_tokens: int | None = None, attn_len: int | None = None,
                 mla_form: str = "transformers") -> ForwardCost:
    """FLOPs and bytes of one forward of `n_new` tokens over `n_cached` cached ones, for `batch` rows.

    The uniform case of `step_cost`: `batch` identical rows.

    lm_head_tokens: positions per sequence the LM head runs on. Default 1, what the runner and
        `generate` do (logits_to_keep=1); pass n_new to describe a plain forward, which computes
        logits for every position.
    attn_len: key positions each new token's attention covers. Default n_cached + n_new (a dynamic
        cache); a static cache attends over its whole allocated length, so pass that length.
    act_dtype / kv_dtype: default to weight_dtype, except bf16 for fp8/int8/int4 weights.
    mla_form: how a latent-attention model runs (MLA_FORMS); ignored by every other model.
    """
    _check_int(batch, "batch", 1)
    return step_cost(spec, [(n_new, n_cached, batch)], weight_dtype=weight_dtype, act_dtype=act_dtype,
                     kv_dtype=kv_dtype, lm_head_tokens=lm_head_tokens, attn_len=attn_len, mla_form=mla_form)


def _position_rows(rows: Sequence[tuple[int, int, int]], max_positions: int) -> int:
    """Distinct rows of a learned position table one forward reads: the union of every row's
    positions n_cached .. n_cached + n_new - 1 (rows at the same positions share the lookup)."""
    spans = sorted((min(c, max_positions), min(c + n, max_positions)) for n, c, _ in rows)
    total, reach = 0, 0
    for lo, hi in spans:
        lo = max(lo, reach)
        if hi > lo:
            total += hi - lo
            reach = hi
    return total


def step_cost(spec: ModelSpec, rows: Sequence[tuple[int, int] | tuple[int, int, int]], *,
              weight_dtype: str = "fp32", act_dtype: str | None = None, kv_dtype: str | None = None,
              lm_head_tokens: int | None = None, attn_len: int | None = None,
              mla_form: str = "transformers") -> ForwardCost:
    """FLOPs and bytes of one batched forward whose rows have different shapes.

    Each row is (n_new, n_cached) or (n_new, n_cached, count): `count` sequences feeding n_new
    tokens over n_cached cached ones. A serving iteration mixes a prefill chunk of 512 tokens with
    30 decodes at different context lengths; it is still one forward, so the weights are read once
    for all rows, while every row brings its own tokens' arithmetic, its own cache reads and writes
    and its own activations. `forward_cost` is the case of one shape.

    The returned ForwardCost has `batch` = number of rows, and `n_new` / `n_cached` of the row with
    the most new tokens (the shape that decides whether the forward is a multi-token one).
    lm_head_tokens, attn_len, mla_form: as in forward_cost, applied to every row.
    """
    if not rows:
        raise ValueError("a forward needs at least one row")
    if mla_form not in MLA_FORMS:
        raise ValueError(f"mla_form must be one of {', '.join(MLA_FORMS)}, got {mla_form!r}")
    w_dt, a_dt, kv_dt = _dtypes(weight_dtype, act_dtype, kv_dtype)
    lm_each = None if lm_head_tokens is None else _check_int(lm_head_tokens, "lm_head_tokens", 0)
    s = spec
    groups = [(s.n_full_layers, None)]
    if s.sliding_window is not None:
        groups.append((s.n_sliding_layers, s.sliding_window))
    clean: list[tuple[int, int, int]] = []
    lm_rows = causal_pairs = latent_causal = 0  # summed over rows and layers
    shape = RowShape.of(s, latent_form=mla_form == "serving")
    for row in rows:
        n_new, n_cached, count = (*row, 1) if len(row) == 2 else row
        _check_int(n_new, "n_new", 1)
        _check_int(n_cached, "n_cached", 0)
        _check_int(count, "count", 1)
        lm_tokens = 1 if lm_each is None else lm_each
        if lm_tokens > n_new:
            raise ValueError(f"lm_head_tokens ({lm_tokens}) cannot exceed n_new ({n_new})")
        if attn_len is not None and _check_int(attn_len, "attn_len", 1) < n_cached + n_new:
            raise ValueError(f"attn_len ({attn_len}) is shorter than n_cached + n_new ({n_cached + n_new})")
        clean.append((n_new, n_cached, count))
        lm_rows += lm_tokens * count
        # causal pairs (what a kernel that skips masked pairs computes), summed over layers
        causal_sum = sum(layers * _causal_positions(n_new, n_cached, window) for layers, window in groups)
        h = shape.held(n_cached) if attn_len is None else shape.held_padded(n_new, attn_len)
        if shape.latent is not None and absorbs(n_new, h, s.n_layers, *shape.latent):
            latent_causal += causal_sum * count
        else:
            causal_pairs += causal_sum * count
    sums = row_sums(shape, [(n, c) for n, c, _ in clean], [k for _, _, k in clean], attn_len)
    tokens, n_rows, held_rows, pairs = sums.tokens, sums.rows, sums.held, sums.pairs
    latent_pairs, expanded, absorbed = sums.latent
    # Two matmuls (scores, weighted sum) per head per (query, key) pair, 2 FLOPs per multiply-add:
    # over the key width and the value width (both head_dim but in latent attention, whose absorbed
    # form scores against the whole cached latent and sums its kv_lora_rank part).
    value_dim = s.v_head_dim if s.is_mla else s.head_dim
    per_pair = 2 * s.n_heads * (s.head_dim + value_dim)
    per_latent_pair = 2 * s.n_heads * (s.kv_width + s.kv_lora_rank)
    # Latent attention runs kv_b_proj on every expanded position, or once per absorbed token (its
    # key half on the query, its value half on the output: the same elements).
    token_attn = s.attn_matrix_params - s.n_layers * s.kv_up_params
    up_flops = 2 * s.kv_up_params * (expanded + absorbed * s.n_layers) if s.is_mla else 0
    # Each token runs the dense MLPs whole and, in an MoE layer, the router, the shared expert and
    # its k routed experts; the weights read are the experts any token of the forward was routed to.
    experts = s.experts_read(tokens) if s.is_moe else None
    mlp_per_token = int(s.mlp_params_read(s.experts_per_token))
    flops = {
        "attn_proj": 2 * tokens * token_attn + up_flops,
        "attn_scores": per_pair * pairs + per_latent_pair * latent_pairs,
        "mlp": 2 * tokens * mlp_per_token,
        "lm_head": 2 * lm_rows * s.hidden * s.vocab,
    }
    flops["total"] = sum(flops.values())

    # Weights: each matrix once per forward, whatever the batch; of an embedding table only the
    # rows looked up, unless the LM head (tied or not) reads a whole vocab x hidden matrix anyway.
    runs_head = lm_rows > 0
    matrix_elems = s.attn_matrix_params + (round(s.mlp_params_read(experts)) if s.is_moe else s.mlp_matrix_params)
    if runs_head:
        matrix_elems += s.vocab * s.hidden
    if not (s.tied_embeddings and runs_head):
        matrix_elems += min(tokens, s.vocab) * s.hidden
    if s.learned_pos_emb:
        matrix_elems += _position_rows(clean, s.max_positions) * s.hidden
    # Biases and norm weights are small vectors a quantised checkpoint keeps in a float type.
    vector_elems = s.attn_bias_params + s.mlp_bias_params + s.params_norm

    # Activations: each linear's input read once (a fused group reads it once) and output written.
    if s.is_mla:  # the two query matrices, the latent projection, the output projection
        per_token_layer = (s.hidden + 2 * s.q_lora_rank + s.q_dim + s.kv_width) + (s.n_heads * s.v_head_dim + s.hidden)
    else:  # qkv projection, output projection
        per_token_layer = (s.hidden + s.q_dim + 2 * s.kv_dim) + (s.q_dim + s.hidden)
    dense_mlp = (s.hidden + s.mlp_in_matrices * s.mlp_width) + (s.mlp_width + s.hidden)
    act_elems = tokens * s.n_layers * per_token_layer + lm_rows * (s.hidden + s.vocab)
    act_elems += tokens * (s.n_layers - s.n_moe_layers) * dense_mlp
    if s.is_mla:  # kv_b_proj's input and output per expanded position; per absorbed token, two folds
        nope = s.head_dim - s.qk_rope_head_dim
        act_elems += expanded * (s.kv_lora_rank + s.n_heads * (nope + s.v_head_dim))
        act_elems += absorbed * s.n_layers * s.n_heads * (nope + 2 * s.kv_lora_rank + s.v_head_dim)
    if s.is_moe:  # the router, each routed expert's gated MLP, the shared expert and its gate
        def gated(width: int) -> int:
            return (s.hidden + 2 * width) + (width + s.hidden)
        moe = (s.hidden + s.n_experts) + s.experts_per_token * gated(s.expert_width)
        if s.shared_expert_width:
            moe += gated(s.shared_expert_width) + ((s.hidden + 1) if s.shared_expert_gate else 0)
        act_elems += tokens * s.n_moe_layers * moe

    nbytes_ = {
        "weights": nbytes(matrix_elems, w_dt) + nbytes(vector_elems, a_dt),
        "kv_read": nbytes(s.kv_width * held_rows, kv_dt),
        "kv_write": nbytes(s.kv_width * s.n_layers * tokens, kv_dt),
        "activations": nbytes(act_elems, a_dt),
    }
    nbytes_["total"] = sum(nbytes_.values())
    widest = max(clean, key=lambda r: (r[0], r[1]))
    return ForwardCost(n_new=widest[0], n_cached=widest[1], batch=n_rows, flops=flops,
                       flops_attn_causal=per_pair * causal_pairs + per_latent_pair * latent_causal, bytes=nbytes_,
                       experts_read=experts, tokens=tokens, lm_rows=lm_rows,
                       row_flops=flops["attn_proj"] + flops["mlp"] - up_flops)


def _flat(cost: ForwardCost) -> list[int]:
    return [cost.flops[k] for k in FLOP_PARTS] + [cost.bytes[k] for k in BYTE_PARTS] + [cost.row_flops]


def _sum_decode(spec: ModelSpec, first: int, last: int, batch: int, kwargs: dict[str, Any]) -> list[int]:
    """Exact sum of decode-step costs for n_cached = first..last (inclusive).

    A decode step's cost is affine in n_cached between breakpoints (a sliding window stops the
    growth at window - 1), so each affine piece sums in closed form: N f(a) + slope N(N-1)/2.
    This equals summing forward_cost step by step, without pricing every step at the final length.
    """
    total = [0] * (len(FLOP_PARTS) + len(BYTE_PARTS) + 1)
    if last < first:
        return total
    cuts = sorted({spec.sliding_window - 1} if spec.sliding_window is not None else set())
    pieces, start = [], first
    for cut in cuts:
        if start <= cut < last:
            pieces.append((start, cut))
            start = cut + 1
    pieces.append((start, last))
    for a, z in pieces:
        n = z - a + 1
        f_a = _flat(forward_cost(spec, 1, a, batch, **kwargs))
        if n == 1:
            slope = [0] * len(f_a)
        else:
            f_next = _flat(forward_cost(spec, 1, a + 1, batch, **kwargs))
            slope = [y - x for x, y in zip(f_a, f_next, strict=True)]
        total = [t + n * x + m * n * (n - 1) // 2 for t, x, m in zip(total, f_a, slope, strict=True)]
    return total


def _phase(values: list[int]) -> dict[str, Any]:
    """_flat's vector (or a sum of them) as a phase's counts: FLOPs by part, bytes, and the matrix FLOPs
    that scale with the tokens (`row_flops`, what a calibrated CPU prices by rows)."""
    flops = dict(zip(FLOP_PARTS, values[:len(FLOP_PARTS)], strict=True))
    nb = dict(zip(BYTE_PARTS, values[len(FLOP_PARTS):len(FLOP_PARTS) + len(BYTE_PARTS)], strict=True))
    nb["total"] = sum(nb.values())
    return {"flops": sum(flops.values()), "flops_by_part": flops, "bytes": nb, "row_flops": values[-1]}


def estimate(spec: ModelSpec, prompt_len: int, gen_len: int, batch: int = 1, dtype: str = "fp32",
             kv_dtype: str | None = None, *, act_dtype: str | None = None,
             static_cache_len: int | None = None, mla_form: str = "transformers") -> dict[str, Any]:
    """FLOPs and bytes of a whole generation: one prefill, then gen_len - 1 decode steps.

    The prefill produces the first token; decode step i (1..gen_len-1) feeds token i back over a
    cache of prompt_len + i - 1 positions, so the cache grows every step. The LM head runs on one
    position per forward (logits_to_keep=1). `static_cache_len`: every forward attends over that
    preallocated length instead. `mla_form`: how a latent-attention model runs (MLA_FORMS). No
    time here: core.predictor turns these counts into seconds.
    """
    _check_int(prompt_len, "prompt_len", 1)
    _check_int(gen_len, "gen_len", 1)
    _check_int(batch, "batch", 1)
    if static_cache_len is not None and static_cache_len < prompt_len + gen_len - 1:
        raise ValueError(f"static_cache_len ({static_cache_len}) is shorter than prompt_len + gen_len - 1")
    w_dt, a_dt, kv_dt = _dtypes(dtype, act_dtype, kv_dtype)
    kwargs = {"weight_dtype": w_dt, "act_dtype": a_dt, "kv_dtype": kv_dt, "lm_head_tokens": 1,
              "attn_len": static_cache_len, "mla_form": mla_form}
    prefill = _phase(_flat(forward_cost(spec, prompt_len, 0, batch, **kwargs)))
    prefill["n_tokens"] = prompt_len
    decode = _phase(_sum_decode(spec, prompt_len, prompt_len + gen_len - 2, batch, kwargs))
    decode["steps"] = gen_len - 1
    extra: dict[str, Any] = {}
    if spec.is_moe:  # a decode step routes `batch` tokens; the prefill all of its prompt tokens
        extra = {"n_experts": spec.n_experts, "experts_per_token": spec.experts_per_token,
                 "experts_read_per_layer": spec.experts_read(batch)}
        prefill["experts_read_per_layer"] = spec.experts_read(prompt_len * batch)
    if spec.is_mla:
        extra["mla_form"] = mla_form
    return {
        "params": spec.params_total,
        "active_params": spec.params_active,
        **extra,
        "dtypes": {"weights": w_dt, "activations": a_dt, "kv": kv_dt},
        "kv_bytes_per_token": kv_bytes_per_token(spec, kv_dt),
        # the last generated token is never fed back, so it never enters the cache
        "kv_bytes_final": kv_cache_bytes(spec, prompt_len + gen_len - 1, batch, kv_dt),
        "prefill": prefill,
        "decode": decode,
    }
