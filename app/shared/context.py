"""What every figure needs to know about a run besides its events: shapes, prompt tokens, ceilings.

Built once when a run starts (from the loaded model, the prompt and the calibrated host), so the
figure builders stay pure functions of (events, context) and are testable on a tiny model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from core import perf
from core.cost import forward_cost
from core.spec import spec_from_config


@dataclass(frozen=True)
class Ceilings:
    """This machine's calibrated limits (core.hardware "host"); None fields when not calibrated."""

    bandwidth: float | None = None  # bytes/s a decode step's weight stream achieves (GEMV)
    peak_flops: float | None = None  # FLOP/s of the matmul kernels, in the model's dtype
    copy_bandwidth: float | None = None  # bytes/s of a plain copy, for comparison
    label: str = "not calibrated"


@dataclass(frozen=True)
class RunContext:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    dtype_bytes: int
    prompt_tokens: list[str]
    prompt_special: list[bool]
    max_new_tokens: int
    batch: int = 1
    cache: str = "dynamic"
    context_window: int = 8192
    weight_bytes: int | None = None  # bytes one decode forward reads in weights (core.cost)
    ceilings: Ceilings = field(default_factory=Ceilings)
    tied_embeddings: bool = False  # the output layer reuses the token embedding table (one matrix)
    kept: int = 0  # a follow-up's leading prompt positions kept in the cache from the last turn

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_tokens)

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, all layers, one sequence (core.perf.kv_bytes_per_token)."""
        return perf.kv_bytes_per_token(self.n_layers, self.n_kv_heads, self.head_dim, self.dtype_bytes)

    @property
    def kv_bytes_per_cell(self) -> int:
        """One layer, one position, K and V, every batch row: what one grid cell holds."""
        return perf.kv_bytes_per_token(1, self.n_kv_heads, self.head_dim, self.dtype_bytes) * self.batch

    @property
    def group_size(self) -> int:
        """Query heads sharing one KV head (grouped-query attention)."""
        return self.n_heads // self.n_kv_heads

    @property
    def max_positions(self) -> int:
        """Cache length at the end of a run that uses every token: the last token is never fed back."""
        return self.prompt_len + self.max_new_tokens - 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def token_label(tokenizer: Any, token_id: int) -> str:
    """One token's text on its own (unescaped; callers escape when they render)."""
    return tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)


def build_context(loaded: Any, prompt_ids: list[int], max_new_tokens: int, batch: int, cache: str,
                  ceilings: Ceilings | None = None, weight_bytes: int | None = None, kept: int = 0) -> RunContext:
    cfg = loaded.config
    n_heads = int(cfg.num_attention_heads)
    head_dim = perf.head_dim_from_config(cfg)
    special = set(getattr(loaded.tokenizer, "all_special_ids", []) or [])
    dtype_bytes = next(loaded.model.parameters()).element_size()
    if weight_bytes is None:
        weight_bytes = decode_weight_bytes(loaded)
    return RunContext(
        n_layers=int(cfg.num_hidden_layers), n_heads=n_heads,
        n_kv_heads=int(getattr(cfg, "num_key_value_heads", None) or n_heads), head_dim=head_dim,
        dtype_bytes=dtype_bytes, prompt_tokens=[token_label(loaded.tokenizer, i) for i in prompt_ids],
        prompt_special=[i in special for i in prompt_ids], max_new_tokens=max_new_tokens, batch=batch,
        cache=cache, context_window=loaded.context_window, weight_bytes=weight_bytes,
        ceilings=ceilings or Ceilings(), tied_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
        kept=kept)


def decode_weight_bytes(loaded: Any) -> int | None:
    """Weight bytes one decode step reads, from core's cost model (None if core cannot price it)."""
    try:
        dtype = {1: "int8", 2: "bf16", 4: "fp32"}.get(next(loaded.model.parameters()).element_size(), "fp32")
        return int(forward_cost(spec_from_config(loaded.config), 1, 1, 1, weight_dtype=dtype).bytes["weights"])
    except Exception:  # an architecture the cost model refuses: the page says "not priced"
        return None
