"""What prompts share, for synthetic workloads: shared system prompts, and conversations.

Both rewrite generated requests (core.sim.workload.generate) into ones whose prompts are made of
named pieces (`Request.segments`), which the prefix cache (core.sim.prefix) matches block by block.

- System prompts: `count` distinct prompts of `tokens` tokens; each request starts with one of
  them, the k-th most popular drawn with weight 1 / k**skew (Zipf: skew 0 is uniform, larger skew
  puts more requests on the first few), then its own text (the workload's prompt length).
- Conversations: consecutive requests grouped into conversations of `turns`. A turn re-sends the
  whole conversation so far (every earlier prompt and answer) and adds its own message (the
  workload's prompt length); it is sent `think_s` after the previous answer's last token (a closed
  loop: its arrival is decided while simulating). A turn that would not fit the model's context
  window starts a conversation of its own instead, at its own arrival time.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from core.sim.workload import Request

MAX_SYSTEM_PROMPTS = 10_000
MAX_TURNS = 100
MAX_THINK_S = 3600.0
# content ids for generated pieces: negative, apart from recorded block ids (which are >= 0)
_SYSTEM, _OWN, _ANSWER = -1, -(10**9), -(2 * 10**9)


def check(count: int, tokens: int, skew: float, turns: int, think_s: float) -> None:
    """ValueError, in words, for settings a generator cannot use."""
    for name, value, low, high in (("system prompts", count, 0, MAX_SYSTEM_PROMPTS),
                                   ("system prompt tokens", tokens, 1, 131_072),
                                   ("turns per conversation", turns, 1, MAX_TURNS)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be a whole number from {low:,} to {high:,}, got {value!r}")
    for name, value, high in (("system prompt skew", skew, 4.0), ("think time", think_s, MAX_THINK_S)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 <= value <= high:
            raise ValueError(f"{name} must be a number from 0 to {high:g}, got {value!r}")


def with_system_prompts(requests: list[Request], count: int, tokens: int, skew: float, seed: int,
                        max_context: int | None = None) -> list[Request]:
    """Each request's prompt becomes one of `count` shared system prompts of `tokens` tokens followed
    by its own text, clipped so prompt and output still fit `max_context`."""
    if count == 0:
        return list(requests)
    rng = np.random.default_rng(seed + 7919)  # apart from the workload's own draw
    weights = 1.0 / np.arange(1, count + 1) ** skew
    which = rng.choice(count, size=len(requests), p=weights / weights.sum())
    out = []
    for r, k in zip(requests, which, strict=True):
        own = r.prompt_tokens
        if max_context is not None:
            own = max(1, min(own, max_context - tokens - r.output_tokens + 1))
            if tokens + own + r.output_tokens - 1 > max_context:
                raise ValueError(f"a {tokens:,}-token system prompt leaves no room in the model's "
                                 f"{max_context:,}-token context window")
        out.append(replace(r, prompt_tokens=tokens + own, segments=((_SYSTEM - int(k), tokens), (_OWN - r.id, own))))
    return out


def as_conversations(requests: list[Request], turns: int, think_s: float,
                     max_context: int | None = None) -> list[Request]:
    """Consecutive requests grouped into conversations of `turns` (see the module's docstring)."""
    if turns <= 1:
        return list(requests)
    out: list[Request] = []
    previous: Request | None = None
    done = 0
    for r in requests:
        # a request's own text (after its system prompt, when it has one): a later turn adds only that
        own = ((_OWN - r.id, r.segments[-1][1] if r.segments else r.prompt_tokens),)
        if previous is not None and done < turns:
            grown = previous.segments + ((previous.answer_id, previous.output_tokens),) + own
            prompt = sum(n for _, n in grown)
            if max_context is None or prompt + r.output_tokens - 1 <= max_context:
                turn = replace(r, arrival_s=previous.arrival_s, prompt_tokens=prompt, segments=grown,
                               answer_id=_ANSWER - r.id, follows=previous.id, think_s=float(think_s))
                out.append(turn)
                previous, done = turn, done + 1
                continue
        root = replace(r, segments=r.segments or own, answer_id=_ANSWER - r.id)
        out.append(root)
        previous, done = root, 1
    return out
