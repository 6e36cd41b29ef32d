"""Model shapes for the cost model, read from a Hugging Face config (object or config.json dict).

The cost model needs only shapes, never weights, so a spec can describe a 70B model on a laptop.
Every architecture listed in FAMILIES is read exactly: `params_total` equals the parameter count
of the model transformers builds from the same config (tests check this). An architecture we have
not checked is refused with a ValueError rather than priced with a guess.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets" / "models"

_MISSING = object()


@dataclass(frozen=True)
class _Family:
    """How one model_type lays out its weights, and the config defaults its transformers class uses
    (a config.json may omit any key whose value equals the class default)."""

    gpt_style: bool = False  # GPT-2 naming (n_embd, ...), LayerNorm, learned positions, biases
    tied_default: bool = False
    head_dim_default: int | None = None  # None: hidden // heads
    gated_mlp: bool = True
    qkv_bias: bool | str = False  # a bool, or the config key that switches it
    o_bias: bool | str = False
    mlp_bias: bool | str = False
    qk_norm: bool = False
    bias_default: bool = False  # what a bias switch key (qkv_bias="attention_bias") means when absent
    norm: str = "rmsnorm"  # "layernorm" (weight and bias) for families that use it
    sliding_default: int | None = None
    qwen_sliding: bool = False  # sliding only when use_sliding_window, and only from max_window_layers on
    norms_per_layer: int = 2  # Gemma 2 and 3 norm before and after both attention and the MLP: four
    # Without layer_types, every `window_pattern`-th layer (counting from 1) is global and the rest
    # slide (Gemma 2: alternate; Gemma 3: five local to one global, its sliding_window_pattern).
    window_pattern: int | None = None
    moe: str | None = None  # "mixtral", "qwen" or "deepseek": how the config names its experts (see _experts)
    mla: bool = False  # multi-head latent attention (DeepSeek): the cache holds a compressed latent


FAMILIES: dict[str, _Family] = {
    "llama": _Family(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias"),
    "mistral": _Family(sliding_default=4096),
    "qwen2": _Family(qkv_bias=True, qwen_sliding=True, sliding_default=4096),
    "qwen3": _Family(head_dim_default=128, qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True,
                     qwen_sliding=True, sliding_default=4096),
    "gemma": _Family(tied_default=True, head_dim_default=256, qkv_bias="attention_bias",
                     o_bias="attention_bias"),
    "smollm3": _Family(tied_default=True, qkv_bias="attention_bias", o_bias="attention_bias",
                       mlp_bias="mlp_bias"),
    "phi3": _Family(),
    # Gemma 2 and 3 interleave sliding-window layers (whose cache stops growing at the window) with
    # global ones; their logit soft-capping and embedding scaling are elementwise, not priced.
    "gemma2": _Family(tied_default=True, head_dim_default=256, qkv_bias="attention_bias", o_bias="attention_bias",
                      norms_per_layer=4, sliding_default=4096, window_pattern=2),
    "gemma3_text": _Family(tied_default=True, head_dim_default=256, qkv_bias="attention_bias",
                           o_bias="attention_bias", qk_norm=True, norms_per_layer=4, sliding_default=4096,
                           window_pattern=6),
    # Pythia: LayerNorm, a plain GELU MLP with biases, attention biases unless switched off, an untied
    # head (embed_out). Its parallel residual and partial rotary embedding change neither the weights
    # nor the matmul FLOPs, so the shapes above price it exactly.
    "gpt_neox": _Family(gated_mlp=False, qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias=True,
                        bias_default=True, norm="layernorm"),
    # OPT: LayerNorm, a plain ReLU MLP (ffn_dim wide), biases unless enable_bias is off, a tied head,
    # and a learned position table with two extra rows (positions are offset by 2). The variants
    # that project embeddings to another width (word_embed_proj_dim) or normalise after each block
    # (opt-350m) add matrices this spec has no place for; they are refused, not priced with a guess.
    "opt": _Family(gated_mlp=False, qkv_bias="enable_bias", o_bias="enable_bias", mlp_bias="enable_bias",
                   bias_default=True, norm="layernorm", tied_default=True),
    # Falcon: LayerNorm, a plain GELU MLP (ffn_hidden_size, default 4 x hidden), one `bias` switch for
    # every linear, a tied head; multi-query (one KV head, falcon-7b) or, in the new decoder
    # architecture (falcon-40b/180b), num_kv_heads groups. Rotary or ALiBi: neither has weights.
    "falcon": _Family(gated_mlp=False, qkv_bias="bias", o_bias="bias", mlp_bias="bias", norm="layernorm",
                      tied_default=True),
    # Mixture of experts: every MLP (Mixtral) or the sparse layers (Qwen MoE) hold num_experts gated
    # experts and a router; each token runs its top num_experts_per_tok. Qwen2-MoE adds a shared
    # expert behind a one-output gate on every sparse layer.
    "mixtral": _Family(moe="mixtral"),
    "qwen2_moe": _Family(qkv_bias="qkv_bias", bias_default=True, qwen_sliding=True, moe="qwen"),
    "qwen3_moe": _Family(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True, qwen_sliding=True,
                         moe="qwen"),
    # DeepSeek-V3: multi-head latent attention (queries through an optional low-rank pair, keys and
    # values compressed into one kv_lora_rank latent plus a shared rotary key, which is what the cache
    # holds) and, from layer first_k_dense_replace on, 256 routed experts plus a shared one.
    "deepseek_v3": _Family(qkv_bias="attention_bias", o_bias="attention_bias", moe="deepseek", mla=True),
    "gpt2": _Family(gpt_style=True, tied_default=True, gated_mlp=False, qkv_bias=True, o_bias=True,
                    mlp_bias=True),
    "gpt_bigcode": _Family(gpt_style=True, tied_default=True, gated_mlp=False, qkv_bias=True, o_bias=True,
                           mlp_bias=True),
}

# config.json files written by old tools sometimes lack model_type but name the class.
_ARCH_TO_TYPE = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "GemmaForCausalLM": "gemma", "SmolLM3ForCausalLM": "smollm3",
    "Phi3ForCausalLM": "phi3", "GPT2LMHeadModel": "gpt2", "GPTBigCodeForCausalLM": "gpt_bigcode",
    "GPTNeoXForCausalLM": "gpt_neox", "OPTForCausalLM": "opt", "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text", "FalconForCausalLM": "falcon", "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV3ForCausalLM": "deepseek_v3",
}
# Multimodal wrappers whose text decoder is what the cost model prices (its config sits in text_config).
_TEXT_OF = {"gemma3": "gemma3_text"}


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder-only transformer, and its parameter count by part.

    Counts are totals over all layers. `params_lm_head` is 0 when the head is tied to the token
    embedding (the tied matrix is counted once, in `params_embed`, as `model.parameters()` does).
    `sliding_window` is the window of the `n_sliding_layers` layers that use one (None when none do):
    transformers' cache keeps only the last `sliding_window - 1` positions for those layers.
    """

    name: str
    model_type: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    mlp_width: int
    gated_mlp: bool
    vocab: int
    max_positions: int
    tied_embeddings: bool
    attn_bias: bool  # biases on the q, k, v projections
    attn_out_bias: bool  # bias on the output projection
    mlp_bias: bool
    learned_pos_emb: bool
    norm: str  # "rmsnorm" (weight only) or "layernorm" (weight and bias)
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma 3)
    norms_per_layer: int = 2
    sliding_window: int | None = None
    n_sliding_layers: int = 0
    pos_offset: int = 0  # extra rows of a learned position table (OPT's positions start at 2)
    # Mixture of experts (all 0 for a dense model): experts per MoE layer, experts each token runs,
    # one expert's width (a gated MLP), a shared expert's width (0: none), and how many layers are
    # MoE layers (the others keep a dense MLP of mlp_width).
    n_experts: int = 0
    experts_per_token: int = 0
    expert_width: int = 0
    shared_expert_width: int = 0
    n_moe_layers: int = 0
    shared_expert_gate: bool = False  # Qwen2-MoE scales its shared expert by a one-output gate
    # Multi-head latent attention (all 0 otherwise): head_dim is then the query/key head width
    # (qk_nope + qk_rope_head_dim), n_kv_heads is 1 (one latent shared by every head), and the
    # cache holds kv_lora_rank + qk_rope_head_dim values per token and layer.
    q_lora_rank: int = 0  # 0: queries through one full matrix
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    params_embed: int = field(init=False)
    params_pos: int = field(init=False)
    params_attn: int = field(init=False)
    params_mlp: int = field(init=False)
    params_norm: int = field(init=False)
    params_lm_head: int = field(init=False)
    params_total: int = field(init=False)

    def __post_init__(self) -> None:
        for name in ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "mlp_width", "vocab",
                     "max_positions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{self.name}: {name} must be a positive integer, got {value!r}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}: n_heads ({self.n_heads}) is not a multiple of n_kv_heads "
                             f"({self.n_kv_heads})")
        if self.norm not in ("rmsnorm", "layernorm"):
            raise ValueError(f"{self.name}: norm must be 'rmsnorm' or 'layernorm', got {self.norm!r}")
        if not 0 <= self.n_sliding_layers <= self.n_layers:
            raise ValueError(f"{self.name}: n_sliding_layers must be within 0..n_layers")
        if (self.sliding_window is None) != (self.n_sliding_layers == 0):
            raise ValueError(f"{self.name}: sliding_window and n_sliding_layers must be set together")
        if self.sliding_window is not None and self.sliding_window < 2:
            raise ValueError(f"{self.name}: sliding_window must be at least 2")
        if self.n_moe_layers and not (0 < self.experts_per_token <= self.n_experts and self.expert_width > 0
                                      and self.n_moe_layers <= self.n_layers):
            raise ValueError(f"{self.name}: a mixture of experts needs 0 < experts per token <= experts, "
                             "a positive expert width and at most n_layers MoE layers")
        if self.kv_lora_rank and not (0 < self.qk_rope_head_dim < self.head_dim and self.v_head_dim > 0
                                      and self.n_kv_heads == 1 and self.q_lora_rank >= 0):
            raise ValueError(f"{self.name}: latent attention needs 0 < qk_rope_head_dim < head_dim, a positive "
                             "v_head_dim and one shared latent (n_kv_heads 1)")
        d, L = self.hidden, self.n_layers
        counts = {
            "params_embed": self.vocab * d,
            "params_pos": (self.max_positions + self.pos_offset) * d if self.learned_pos_emb else 0,
            "params_attn": self.attn_matrix_params + self.attn_bias_params,
            "params_mlp": self.mlp_matrix_params + self.mlp_bias_params,
            # two norms per block plus the final one; LayerNorm carries a bias as well as a weight
            "params_norm": (self.norms_per_layer * L + 1) * d * (2 if self.norm == "layernorm" else 1)
            + (2 * L * self.head_dim if self.qk_norm else 0)
            + L * (self.q_lora_rank + self.kv_lora_rank),  # latent attention's norms on both latents
            "params_lm_head": 0 if self.tied_embeddings else self.vocab * d,
        }
        counts["params_total"] = sum(counts.values())
        for key, value in counts.items():
            object.__setattr__(self, key, value)

    # Matrices and bias vectors are split because a quantised checkpoint stores them differently.
    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def kv_width(self) -> int:
        """Values the cache holds per token and layer: a key and a value per KV head, or the latent
        and the shared rotary key of latent attention."""
        return self.kv_lora_rank + self.qk_rope_head_dim if self.is_mla else 2 * self.kv_dim

    @property
    def kv_up_params(self) -> int:
        """Latent attention's kv_b_proj, one layer: it turns a cached latent back into every head's
        key (without rotary part) and value. transformers applies it to every attended position in
        every forward; a serving engine folds it into the query and the output instead."""
        return self.kv_lora_rank * self.n_heads * (self.head_dim - self.qk_rope_head_dim + self.v_head_dim)

    def attn_matrices(self) -> list[tuple[int, int]]:
        """(input width, elements) of each attention matrix of one layer (fused or not, the same elements)."""
        d = self.hidden
        if not self.is_mla:
            return [(d, d * (self.q_dim + 2 * self.kv_dim)), (self.q_dim, self.q_dim * d)]
        q = ([(d, d * self.q_lora_rank), (self.q_lora_rank, self.q_lora_rank * self.q_dim)] if self.q_lora_rank
             else [(d, d * self.q_dim)])
        return q + [(d, d * self.kv_width), (self.kv_lora_rank, self.kv_up_params),
                    (self.n_heads * self.v_head_dim, self.n_heads * self.v_head_dim * d)]

    @property
    def attn_matrix_params(self) -> int:
        """q, k, v (or latent) and output projection matrices, all layers."""
        return self.n_layers * sum(n for _, n in self.attn_matrices())

    @property
    def attn_bias_params(self) -> int:
        if self.is_mla:  # the first query projection (if low-rank), the latent one, the output one
            return self.n_layers * (self.q_lora_rank + self.kv_width + self.hidden) if self.attn_bias else 0
        per_layer = ((self.q_dim + 2 * self.kv_dim) if self.attn_bias else 0) + (
            self.hidden if self.attn_out_bias else 0)
        return self.n_layers * per_layer

    @property
    def is_moe(self) -> bool:
        return self.n_moe_layers > 0

    @property
    def expert_params(self) -> int:
        """One expert of one layer: gate, up and down matrices."""
        return 3 * self.hidden * self.expert_width

    @property
    def moe_layer_fixed_params(self) -> int:
        """What every token of an MoE layer reads whatever its routing: the router, and the shared
        expert with its one-output gate where there is one."""
        shared = 3 * self.hidden * self.shared_expert_width + (self.hidden if self.shared_expert_gate else 0)
        return self.hidden * self.n_experts + shared

    @property
    def dense_mlp_params(self) -> int:
        """The MLP matrices of one dense layer."""
        return (self.mlp_in_matrices + 1) * self.hidden * self.mlp_width

    def mlp_params_read(self, experts: float) -> float:
        """MLP matrix elements of all layers when each MoE layer reads `experts` of its experts."""
        dense = (self.n_layers - self.n_moe_layers) * self.dense_mlp_params
        return dense + self.n_moe_layers * (self.moe_layer_fixed_params + experts * self.expert_params)

    def experts_read(self, tokens: int) -> float:
        """Expected distinct experts one MoE layer reads for a forward of `tokens` tokens, routing
        uniform and independent: E(1 - (1 - k/E)^tokens). k for one token, E for many."""
        if not self.is_moe or tokens <= 0:
            return 0.0
        e, k = self.n_experts, self.experts_per_token
        return e * (1.0 - (1.0 - k / e) ** tokens)

    @property
    def params_active(self) -> int:
        """Parameters one token runs through: every expert it is not routed to left out (the total
        for a dense model)."""
        idle = self.n_moe_layers * (self.n_experts - self.experts_per_token) * self.expert_params
        return self.params_total - idle

    @property
    def mlp_in_matrices(self) -> int:
        """Matrices reading the block input: gate and up for a gated (SwiGLU/GeGLU) MLP, one otherwise."""
        return 2 if self.gated_mlp else 1

    @property
    def mlp_matrix_params(self) -> int:
        return int(self.mlp_params_read(self.n_experts))

    @property
    def mlp_bias_params(self) -> int:
        if not self.mlp_bias:
            return 0
        return self.n_layers * (self.mlp_in_matrices * self.mlp_width + self.hidden)

    @property
    def n_full_layers(self) -> int:
        return self.n_layers - self.n_sliding_layers

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read(d: dict[str, Any], *names: str, default: Any = _MISSING, model: str = "config") -> Any:
    """First present, non-null key among `names`; ValueError naming the field if none is."""
    for name in names:
        if d.get(name) is not None:
            return d[name]
    if default is _MISSING:
        raise ValueError(f"{model}: config has no {' / '.join(repr(n) for n in names)} field")
    return default


# The envelope a config must fit before anything is priced. No config field of a published model is
# near 10^12 (the largest: context windows of a few million positions), and no published model has
# more than a few trillion parameters; 10^14 leaves a wide margin. Beyond these a config is refused
# with a message, so arithmetic on a reader's numbers never overflows a float or runs without bound.
MAX_CONFIG_INT = 10**12
MAX_PARAMS = 10**14


def _as_int(value: Any, field_name: str, model: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{model}: config field {field_name!r} must be an integer, got {str(value)[:40]!r}")
    if abs(value) > MAX_CONFIG_INT:
        raise ValueError(f"{model}: config field {field_name!r} is about 10^{len(str(abs(value))) - 1}, beyond "
                         f"any real model (this page accepts at most 10^12)")
    return value


def _switch(d: dict[str, Any], rule: bool | str, default: bool = False) -> bool:
    """A family's fixed choice, or the config key that switches it (absent: the class default)."""
    if isinstance(rule, bool):
        return rule
    value = d.get(rule)
    return default if value is None else bool(value)


def _sliding(d: dict[str, Any], fam: _Family, n_layers: int, model: str) -> tuple[int | None, int]:
    """(window, number of sliding layers), following the rules transformers' configs and caches use."""
    window = d.get("sliding_window", fam.sliding_default)
    if fam.qwen_sliding and not d.get("use_sliding_window", False):
        window = None
    layer_types = d.get("layer_types")
    if layer_types is not None:
        unknown = set(layer_types) - {"full_attention", "sliding_attention"}
        if unknown:
            raise ValueError(f"{model}: layer_types {sorted(unknown)} are not supported")
        if len(layer_types) != n_layers:
            raise ValueError(f"{model}: layer_types has {len(layer_types)} entries for {n_layers} layers")
        n_sliding = sum(t == "sliding_attention" for t in layer_types)
    elif window is None:
        n_sliding = 0
    elif fam.window_pattern:
        pattern = _as_int(d.get("sliding_window_pattern", fam.window_pattern), "sliding_window_pattern", model)
        if pattern < 1:
            raise ValueError(f"{model}: sliding_window_pattern must be at least 1, got {pattern}")
        n_sliding = n_layers - n_layers // pattern  # every pattern-th layer (counting from 1) is global
    elif fam.qwen_sliding:
        first = _as_int(d.get("max_window_layers", 28), "max_window_layers", model)
        n_sliding = max(0, n_layers - first)
    elif d.get("model_type") == "smollm3":
        raise ValueError(f"{model}: smollm3 with use_sliding_window needs an explicit layer_types field")
    else:
        n_sliding = n_layers
    if n_sliding == 0:
        return None, 0
    if window is None:
        raise ValueError(f"{model}: layer_types has sliding layers but the config has no sliding_window")
    return _as_int(window, "sliding_window", model), n_sliding


def _config_dict(config: Any) -> dict[str, Any]:
    if isinstance(config, dict):
        text = config.get("text_config")
        if config.get("model_type") in _TEXT_OF and isinstance(text, dict):
            return {"model_type": _TEXT_OF[config["model_type"]], **text}
        return dict(config)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        # A multimodal config nests the text model; the cost model prices the text decoder.
        get_text = getattr(config, "get_text_config", None)
        if callable(get_text):
            config = get_text(decoder=True)
        return dict(config.to_dict())
    raise ValueError(f"expected a transformers config or a dict, got {type(config).__name__}")


def spec_from_config(config: Any, name: str | None = None) -> ModelSpec:
    """Read a ModelSpec from a `transformers.PretrainedConfig` or a config.json dict.

    ValueError (naming the field) for a missing or malformed field or an unsupported model_type.
    """
    d = _config_dict(config)
    model_type = d.get("model_type") or next(
        (_ARCH_TO_TYPE[a] for a in d.get("architectures") or [] if a in _ARCH_TO_TYPE), None)
    label = name or d.get("_name_or_path") or model_type or "config"
    if not model_type:
        raise ValueError(f"{label}: config has no 'model_type' field (and no known 'architectures')")
    fam = FAMILIES.get(model_type)
    if fam is None:
        raise ValueError(f"{label}: model_type {model_type!r} is not supported by the cost model "
                         f"(supported: {', '.join(sorted(FAMILIES))})")

    def need(*keys: str) -> int:
        return _as_int(_read(d, *keys, model=label), keys[0], label)

    norms_per_layer = fam.norms_per_layer
    if model_type == "falcon":
        hidden = need("hidden_size", "n_embed")
        n_layers = need("num_hidden_layers", "n_layer")
        n_heads = need("num_attention_heads", "n_head")
        max_positions = _as_int(_read(d, "max_position_embeddings", default=2048), "max_position_embeddings", label)
        if hidden % n_heads:
            raise ValueError(f"{label}: hidden_size ({hidden}) is not divisible by num_attention_heads ({n_heads})")
        head_dim = hidden // n_heads
        new_arch = bool(d.get("new_decoder_architecture", False))
        groups = _as_int(_read(d, "num_kv_heads", "n_head_kv", default=n_heads), "num_kv_heads", label)
        n_kv = groups if new_arch or not d.get("multi_query", True) else 1
        mlp_width = _as_int(_read(d, "ffn_hidden_size", default=4 * hidden), "ffn_hidden_size", label)
        # parallel attention normalises once per block (twice in the new architecture, one norm per
        # branch); the sequential block normalises before attention and before the MLP
        n_ln = d.get("num_ln_in_parallel_attn") or (2 if new_arch else 1)
        norms_per_layer = 2 if not d.get("parallel_attn", True) or n_ln == 2 else 1
        norm, learned_pos = fam.norm, False
    elif fam.gpt_style:
        if d.get("add_cross_attention"):
            raise ValueError(f"{label}: add_cross_attention models are not supported")
        hidden = need("n_embd", "hidden_size")
        n_layers = need("n_layer", "num_hidden_layers")
        n_heads = need("n_head", "num_attention_heads")
        max_positions = need("n_positions", "max_position_embeddings")
        if hidden % n_heads:
            raise ValueError(f"{label}: n_embd ({hidden}) is not divisible by n_head ({n_heads})")
        head_dim = hidden // n_heads
        # gpt_bigcode's multi-query attention shares one K and one V head across all query heads.
        n_kv = 1 if (model_type == "gpt_bigcode" and d.get("multi_query", True)) else n_heads
        mlp_width = _as_int(_read(d, "n_inner", default=4 * hidden), "n_inner", label)
        norm, learned_pos = "layernorm", True
    else:
        hidden = need("hidden_size")
        n_layers = need("num_hidden_layers")
        n_heads = need("num_attention_heads")
        max_positions = need("max_position_embeddings")
        n_kv = _as_int(_read(d, "num_key_value_heads", default=n_heads), "num_key_value_heads", label)
        default_hd = fam.head_dim_default
        if default_hd is None:
            if hidden % n_heads:
                raise ValueError(f"{label}: hidden_size ({hidden}) is not divisible by num_attention_heads "
                                 f"({n_heads}) and the config has no head_dim")
            default_hd = hidden // n_heads
        head_dim = _as_int(_read(d, "head_dim", default=default_hd), "head_dim", label)
        mlp_width = need("ffn_dim") if model_type == "opt" else need("intermediate_size")
        norm, learned_pos = fam.norm, model_type == "opt"
        if model_type == "opt":
            proj = _read(d, "word_embed_proj_dim", default=hidden)
            if proj != hidden:
                raise ValueError(f"{label}: OPT with word_embed_proj_dim ({proj}) different from hidden_size "
                                 f"({hidden}) projects its embeddings through extra matrices the cost model does "
                                 "not price (opt-350m)")
            if not d.get("do_layer_norm_before", True) or d.get("_remove_final_layer_norm", False):
                raise ValueError(f"{label}: OPT with layer norm after each block (do_layer_norm_before false) "
                                 "is not supported (opt-350m)")
    mla: dict[str, int] = {}
    if fam.mla:
        mla = _latent(d, label)
        n_kv, head_dim = 1, mla.pop("qk_head_dim")
    window, n_sliding = _sliding(d, fam, n_layers, label)
    moe = _experts(d, fam, n_layers, mlp_width, label)
    spec = ModelSpec(
        name=label, model_type=model_type, n_layers=n_layers, hidden=hidden, n_heads=n_heads,
        n_kv_heads=n_kv, head_dim=head_dim, mlp_width=mlp_width, gated_mlp=fam.gated_mlp,
        vocab=need("vocab_size"), max_positions=max_positions,
        tied_embeddings=bool(_read(d, "tie_word_embeddings", default=fam.tied_default)),
        attn_bias=_switch(d, fam.qkv_bias, fam.bias_default), attn_out_bias=_switch(d, fam.o_bias, fam.bias_default),
        mlp_bias=_switch(d, fam.mlp_bias, fam.bias_default), learned_pos_emb=learned_pos, norm=norm, qk_norm=fam.qk_norm,
        sliding_window=window, n_sliding_layers=n_sliding, pos_offset=2 if model_type == "opt" else 0,
        norms_per_layer=norms_per_layer, **moe, **mla,
    )
    if spec.params_total > MAX_PARAMS:
        raise ValueError(f"{label}: {spec.params_total:.2g} parameters, beyond any published model by far "
                         f"(this page prices up to {MAX_PARAMS:.0e})")
    return spec


def _latent(d: dict[str, Any], model: str) -> dict[str, int]:
    """Latent attention's ranks and head widths, as DeepSeek's configs name them."""
    def need(key: str) -> int:
        return _as_int(_read(d, key, model=model), key, model)

    rope, nope = need("qk_rope_head_dim"), need("qk_nope_head_dim")
    q_rank = _read(d, "q_lora_rank", default=0)  # null: queries through one full matrix
    fields = {"q_lora_rank": _as_int(q_rank, "q_lora_rank", model), "kv_lora_rank": need("kv_lora_rank"),
              "qk_rope_head_dim": rope, "v_head_dim": need("v_head_dim"), "qk_head_dim": nope + rope}
    if min(fields.values()) < 0 or nope <= 0 or fields["kv_lora_rank"] <= 0:
        raise ValueError(f"{model}: latent attention ranks and head widths must be positive")
    return fields


def _experts(d: dict[str, Any], fam: _Family, n_layers: int, mlp_width: int, model: str) -> dict[str, int]:
    """The ModelSpec fields of a mixture of experts, named as transformers' configs name them."""
    if fam.moe is None:
        return {}
    n_experts = _as_int(_read(d, "num_local_experts", "num_experts", "n_routed_experts", model=model),
                        "num_experts", model)
    k = _as_int(_read(d, "num_experts_per_tok", model=model), "num_experts_per_tok", model)
    if n_experts == 0:
        return {}
    if not 0 < k <= n_experts:
        raise ValueError(f"{model}: num_experts_per_tok ({k}) must be between 1 and num_experts ({n_experts})")
    if fam.moe == "mixtral":  # every layer, experts as wide as intermediate_size, no shared expert
        return {"n_experts": n_experts, "experts_per_token": k, "expert_width": mlp_width, "n_moe_layers": n_layers}
    if fam.moe == "deepseek":  # layers from first_k_dense_replace on; n_shared_experts fused into one, no gate
        if _read(d, "moe_layer_freq", default=1) != 1:
            raise ValueError(f"{model}: moe_layer_freq other than 1 is not supported (transformers ignores it)")
        first = _as_int(_read(d, "first_k_dense_replace", default=0), "first_k_dense_replace", model)
        width = _as_int(_read(d, "moe_intermediate_size", model=model), "moe_intermediate_size", model)
        shared = _as_int(_read(d, "n_shared_experts", default=0), "n_shared_experts", model)
        return {"n_experts": n_experts, "experts_per_token": k, "expert_width": width,
                "n_moe_layers": max(0, n_layers - first), "shared_expert_width": width * shared}
    dense_only = d.get("mlp_only_layers") or []
    step = _as_int(d.get("decoder_sparse_step", 1), "decoder_sparse_step", model)
    if step < 1:
        raise ValueError(f"{model}: decoder_sparse_step must be at least 1, got {step}")
    # every step-th layer (counting from 1) is sparse unless listed dense: counted, not walked, so
    # the time does not grow with the layer count a config claims
    if not isinstance(dense_only, list):
        raise ValueError(f"{model}: mlp_only_layers must be a list of layer numbers")
    listed_dense = {i for i in dense_only if isinstance(i, int) and not isinstance(i, bool)
                    and 0 <= i < n_layers and (i + 1) % step == 0}
    n_moe = n_layers // step - len(listed_dense)
    shared = _read(d, "shared_expert_intermediate_size", model=model) if d.get("model_type") == "qwen2_moe" else 0
    return {"n_experts": n_experts, "experts_per_token": k, "n_moe_layers": n_moe,
            "expert_width": _as_int(_read(d, "moe_intermediate_size", model=model), "moe_intermediate_size", model),
            "shared_expert_width": _as_int(shared, "shared_expert_intermediate_size", model),
            "shared_expert_gate": bool(shared)}


def spec_from_json(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a config.json file (or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ValueError(f"no config file at {p}") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{p} does not hold a JSON object")
    if name is None:
        name = data.get("_name_or_path") or (p.parent.name if p.name == "config.json" else p.stem)
    return spec_from_config(data, name=name)


def list_model_presets() -> list[str]:
    """Names of the bundled configs (assets/models/<name>.json), sorted."""
    return sorted(p.stem for p in ASSETS_DIR.glob("*.json"))


def load_model_preset(name_or_path: str | Path) -> ModelSpec:
    """A bundled preset by name, or a config.json path (file or folder); ValueError otherwise."""
    if not isinstance(name_or_path, (str, Path)) or not str(name_or_path).strip():
        raise ValueError(f"expected a preset name or a config.json path, got {name_or_path!r}")
    text = str(name_or_path).strip()
    if isinstance(name_or_path, str) and text in list_model_presets():
        return spec_from_json(ASSETS_DIR / f"{text}.json", name=text)
    p = Path(text)
    if p.is_file() and p.suffix == ".json" or p.is_dir() and (p / "config.json").is_file():
        return spec_from_json(p)
    raise ValueError(f"{text!r} is neither a model preset ({', '.join(list_model_presets())}) "
                     "nor a path to a config.json")
