"""A conversation's KV cache kept between turns, so a follow-up prefills only what the cache lacks.

A chat client re-sends the whole conversation with every question. A server that kept the cache of
the last turn matches the new token ids against the ids whose keys and values it holds, keeps the
longest common prefix and prefills only the rest. The match is on token ids, never on text: the
chat template re-tokenizes the model's answer, and at the answer's end (the end-of-turn marker, the
newline the template adds) the ids can differ from the ones the model generated.

What is kept, and when a turn runs cold instead (each reason is a sentence the page shows):
- batch 1 only: a batched run's rows are copies of one prompt, and a follow-up is one reader's;
- the cache must be on, and in the same mode as the turn that filled it;
- the model and its settings (chat template, dtype) must be the ones that filled it;
- at most CACHE_CAP_BYTES per conversation: past it, only the leading positions that fit are kept
  (a follow-up then reuses those and prefills the rest).

transformers 5.24: `DynamicCache.crop` takes a *negative* count of positions to drop (a positive
length raises); a StaticCache is sized to its first prompt plus its new tokens, so a follow-up in
static mode allocates a new one for the whole conversation and copies the kept positions in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.model import LoadedModel

# A full 8,192-token window of SmolLM2-135M is about 377 MB in fp32 (46 kB a token). Eight readers
# each keeping 24 MB (about 520 tokens of this model) add at most 192 MB to the server.
CACHE_CAP_BYTES = 24_000_000

COLD_BATCH = "a batch of several sequences runs cold: a follow-up is one reader's conversation"
COLD_NO_CACHE = "with the cache off there is nothing kept to reuse"
COLD_MODE = "the cache mode changed since the last turn, so its cache cannot be continued"
COLD_SETTINGS = "a setting that changes the tokens or their vectors changed since the last turn"
COLD_NEW = "the conversation changed from its first token (a new conversation or system prompt)"
COLD_NONE = "no earlier turn's cache is kept"


@dataclass
class KeptCache:
    """The cache left by a finished turn: `ids` are the token ids whose keys and values it holds, in
    order (the conversation so far, less the last generated token, which never went through a
    forward). `signature` is what must match for a follow-up to continue it."""

    ids: list[int]
    cache: Any
    mode: str
    signature: tuple

    @property
    def nbytes(self) -> int:
        """Bytes of the kept positions' keys and values."""
        if self.cache is None:
            return 0
        return sum(layer.keys[..., : len(self.ids), :].numel() * layer.keys.element_size() * 2
                   for layer in self.cache.layers)

    @property
    def allocated(self) -> int:
        """Bytes the cache holds in memory: a static cache's whole allocation, kept positions or not."""
        if self.cache is None:
            return 0
        return sum(layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()
                   for layer in self.cache.layers)


def signature(loaded: LoadedModel, chat: bool) -> tuple:
    """What a kept cache's keys and values depend on besides the token ids."""
    info = loaded.info.to_dict()
    return (info.get("id"), info.get("weights_source"), info.get("dtype"), bool(chat))


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading token ids two sequences share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def reusable(kept: KeptCache | None, prompt_ids: list[int], mode: str, batch: int,
             sig: tuple) -> tuple[int, str | None]:
    """(positions of `kept` a turn over `prompt_ids` can keep, why none when 0). At least one prompt
    token is always prefilled: the forward that yields the first new token needs an input."""
    if kept is None or kept.cache is None:
        return 0, COLD_NONE
    if batch != 1:
        return 0, COLD_BATCH
    if mode == "none":
        return 0, COLD_NO_CACHE
    if mode != kept.mode:
        return 0, COLD_MODE
    if sig != kept.signature:
        return 0, COLD_SETTINGS
    n = min(common_prefix(kept.ids, prompt_ids), len(prompt_ids) - 1)
    if n <= 0:
        return 0, COLD_NEW
    return n, None


def take(kept: KeptCache, n: int, total_len: int, config: Any) -> Any:
    """The kept cache cut to its first `n` positions, ready for a turn of `total_len` positions in
    all: a dynamic cache is cropped in place; a static one is copied into a new allocation. The
    cache moves to the turn: `kept` is left empty (a second follow-up from the same turn runs cold)."""
    held, source = len(kept.ids), kept.cache
    kept.ids, kept.cache = [], None
    if kept.mode == "dynamic" and type(source).__name__ == "DynamicCache":
        if held > n:
            source.crop(-(held - n))  # transformers 5.24: a negative count drops from the end
        return source
    from transformers import StaticCache

    cache = StaticCache(config=config, max_cache_len=total_len)
    for i, layer in enumerate(source.layers):
        cache.update(layer.keys[..., :n, :], layer.values[..., :n, :], i)
    return cache


def capped(kept: KeptCache, cap_bytes: int = CACHE_CAP_BYTES) -> KeptCache | None:
    """`kept` within the cap, counted in the bytes it holds (a static cache's whole allocation): its
    leading positions that fit, copied into a cache of exactly that length so the rest is freed
    (None when not even one position fits). The copy is a dynamic cache whatever the mode: `take`
    copies it into a static allocation when the next turn needs one."""
    if kept.allocated <= cap_bytes:
        return kept
    per_token = kept.nbytes // max(1, len(kept.ids))
    n = min(len(kept.ids), cap_bytes // per_token) if per_token else 0
    if n < 1:
        return None
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, layer in enumerate(kept.cache.layers):
        cache.update(layer.keys[..., :n, :].clone(), layer.values[..., :n, :].clone(), i)
    return KeptCache(ids=kept.ids[:n], cache=cache, mode=kept.mode, signature=kept.signature)


def turn_record(messages: list[dict[str, str]], ids: list[int], reused: int, reason: str | None) -> dict[str, Any]:
    """A turn as a trace records it (core.trace.Trace.turn): its index among the reader's questions,
    the conversation up to it, the positions kept and prefilled, and why nothing was kept."""
    turn: dict[str, Any] = {"index": sum(1 for m in messages if m["role"] == "user") - 1,
                            "messages": [dict(m) for m in messages], "reused_tokens": reused,
                            "new_tokens": len(ids) - reused}
    if reason:
        turn["cold_reason"] = reason
    return turn
