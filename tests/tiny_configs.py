"""Tiny Hugging Face config fields shared by the spec and cost tests (random weights, built in ms)."""

from __future__ import annotations

# Token ids must fit the tiny vocabularies, or transformers warns (and smollm3 refuses to build).
NO_IDS = {"pad_token_id": None, "bos_token_id": None, "eos_token_id": None}


def small(vocab: int, positions: int) -> dict:
    """A Llama-shaped config with grouped-query attention (4 query heads sharing 2 KV heads)."""
    return {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": vocab, "max_position_embeddings": positions, **NO_IDS}


def neox_small(vocab: int, positions: int) -> dict:
    """The same size as a GPT-NeoX (Pythia) config: multi-head attention, a plain MLP."""
    return {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
            "vocab_size": vocab, "max_position_embeddings": positions, **NO_IDS}


def gpt_small(vocab: int, positions: int) -> dict:
    """The same size in GPT-2's own field names."""
    return {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": vocab, "n_positions": positions,
            "bos_token_id": None, "eos_token_id": None}


def opt_small(vocab: int, positions: int) -> dict:
    """The same size as an OPT config (ffn_dim, biases, learned positions offset by 2)."""
    return {"hidden_size": 64, "ffn_dim": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
            "word_embed_proj_dim": 64, "vocab_size": vocab, "max_position_embeddings": positions,
            "pad_token_id": 1, "bos_token_id": None, "eos_token_id": None}


def falcon_small(vocab: int, positions: int) -> dict:
    """The same size as a Falcon config: falcon-7b's layout (multi-query, parallel attention, no biases)."""
    return {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": vocab,
            "max_position_embeddings": positions, "multi_query": True, "parallel_attn": True,
            "new_decoder_architecture": False, "bias": False, "alibi": False, **NO_IDS}


def moe_small(vocab: int, positions: int) -> dict:
    """The Llama-shaped config with 4 experts of width 48, each token running 2 of them."""
    return {**small(vocab, positions), "num_local_experts": 4, "num_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 48}


def deepseek_small(vocab: int, positions: int) -> dict:
    """A DeepSeek-V3-shaped config: latent attention (low-rank queries, a 16-wide latent plus an
    8-wide rotary key cached per layer), one dense layer, then 4 routed experts (2 per token) and
    one shared expert."""
    return {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 4, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
            "qk_nope_head_dim": 16, "v_head_dim": 12, "n_routed_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 48, "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1,
            "topk_group": 1, "vocab_size": vocab, "max_position_embeddings": positions, **NO_IDS}
