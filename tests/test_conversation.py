"""A follow-up that keeps the conversation's cache (core.conversation, core.runner.generate_turn):
what is kept is matched on token ids, the prefill covers only the rest, and the first new token is
the one a prefill from scratch gives."""

from __future__ import annotations

import json

import pytest
import torch

from core import conversation as conv
from core.runner import GenerationSettings, generate_turn, run
from core.trace import Trace, TraceError

QUESTION, FOLLOW_UP = "Name three colours.", "Which one is warmest?"


def _two_turns(model, **settings):
    s = GenerationSettings(max_new_tokens=8, stop_on_eos=False, **settings)
    messages = [{"role": "user", "content": QUESTION}]
    first, kept = generate_turn(model, messages, s)
    held = list(kept.ids)  # the turn below takes the cache over and empties its record
    messages += [{"role": "assistant", "content": first.generated_text}, {"role": "user", "content": FOLLOW_UP}]
    second, left = generate_turn(model, messages, s, kept=kept)
    return first, held, second, left, messages


def test_common_prefix_and_the_reasons_a_turn_runs_cold(tiny_model):
    assert conv.common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and conv.common_prefix([], [1]) == 0
    sig = conv.signature(tiny_model, True)
    kept = conv.KeptCache(ids=[5, 6, 7, 8], cache=object(), mode="dynamic", signature=sig)
    assert conv.reusable(None, [5, 6], "dynamic", 1, sig) == (0, conv.COLD_NONE)
    assert conv.reusable(kept, [5, 6, 7, 8, 9], "dynamic", 2, sig) == (0, conv.COLD_BATCH)
    assert conv.reusable(kept, [5, 6, 7, 8, 9], "none", 1, sig) == (0, conv.COLD_NO_CACHE)
    assert conv.reusable(kept, [5, 6, 7, 8, 9], "static", 1, sig) == (0, conv.COLD_MODE)
    assert conv.reusable(kept, [5, 6, 7, 8, 9], "dynamic", 1, conv.signature(tiny_model, False)) == (0, conv.COLD_SETTINGS)
    assert conv.reusable(kept, [9, 6, 7], "dynamic", 1, sig) == (0, conv.COLD_NEW)
    assert conv.reusable(kept, [5, 6, 7, 8, 9], "dynamic", 1, sig) == (4, None)
    assert conv.reusable(kept, [5, 6, 9], "dynamic", 1, sig) == (2, None)  # up to where the ids differ
    # the whole prompt cached: one token is still prefilled, to have an input for the first new token
    assert conv.reusable(kept, [5, 6, 7, 8], "dynamic", 1, sig) == (3, None)


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_a_follow_up_prefills_only_what_the_cache_lacks(tiny_model, mode):
    first, held, second, left, messages = _two_turns(tiny_model, cache=mode)
    assert first.turn["index"] == 0 and first.turn["cold_reason"] == conv.COLD_NONE
    # the cache held the first turn's prompt and every generated token but the last (never fed)
    assert held == (first.prompt_token_ids + first.generated_ids)[:-1]
    turn = second.turn
    reused = conv.common_prefix(held, second.prompt_token_ids)
    assert turn["index"] == 1 and "cold_reason" not in turn
    assert turn["reused_tokens"] == reused >= len(first.prompt_token_ids)  # matched on ids, not on text
    assert turn["reused_tokens"] + turn["new_tokens"] == len(second.prompt_token_ids)
    prefill = second.events[0]
    assert prefill.positions == [reused, len(second.prompt_token_ids)] and prefill.n_new == turn["new_tokens"]
    assert prefill.kv_seq_len == len(second.prompt_token_ids)
    assert turn["cold_ttft_ms"] > 0
    assert left.ids == (second.prompt_token_ids + second.generated_ids)[:-1]
    # the same conversation from scratch picks the same tokens (greedy): the kept keys and values are right
    cold = list(run(tiny_model, second.prompt_token_ids, GenerationSettings(max_new_tokens=8, stop_on_eos=False,
                                                                          cache=mode)))
    assert [e.token_id for e in cold] == second.generated_ids


def _first_turn(model, **settings):
    s = GenerationSettings(max_new_tokens=8, stop_on_eos=False, **settings)
    return generate_turn(model, [{"role": "user", "content": QUESTION}], s)


def test_the_kept_cache_matches_a_fresh_prefill_tensor_by_tensor(tiny_model):
    """The first new token's logits with the cache kept and from scratch agree to float rounding."""
    _, _, second, _, _ = _two_turns(tiny_model)
    n = second.turn["reused_tokens"]
    ids = torch.tensor([second.prompt_token_ids])
    _, kept = _first_turn(tiny_model)
    with torch.inference_mode():
        cache = conv.take(kept, n, len(second.prompt_token_ids) + 1, tiny_model.config)
        warm = tiny_model.model(input_ids=ids[:, n:], cache=cache, use_cache=True).logits[0, -1]
        cold = tiny_model.model(input_ids=ids).logits[0, -1]
    assert torch.allclose(warm, cold, atol=1e-4)


def test_crop_takes_a_negative_count_in_this_transformers(tiny_model):
    """transformers 5.24's DynamicCache.crop drops a count from the end (a positive length raises):
    take() relies on that, and the cache moves to the new turn (the kept record is left empty)."""
    _, kept = _first_turn(tiny_model)
    held = len(kept.ids)
    cache = conv.take(kept, held - 3, held + 10, tiny_model.config)
    assert int(cache.get_seq_length()) == held - 3
    assert kept.cache is None and conv.reusable(kept, [1, 2], "dynamic", 1, kept.signature) == (0, conv.COLD_NONE)
    with pytest.raises(ValueError):
        cache.crop(2)


def test_a_batch_or_a_new_conversation_runs_cold_and_says_why(tiny_model):
    s = GenerationSettings(max_new_tokens=4, stop_on_eos=False)
    first, kept = generate_turn(tiny_model, [{"role": "user", "content": QUESTION}], s)
    batched = GenerationSettings(max_new_tokens=4, stop_on_eos=False, batch=2)
    messages = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": first.generated_text},
                {"role": "user", "content": FOLLOW_UP}]
    trace, left = generate_turn(tiny_model, messages, batched, kept=kept)
    assert trace.turn["reused_tokens"] == 0 and trace.turn["cold_reason"] == conv.COLD_BATCH
    assert left is None and "cold_ttft_ms" not in trace.turn and trace.events[0].positions[0] == 0
    new = [{"role": "system", "content": "Answer in French."}, *messages]
    _, kept = generate_turn(tiny_model, [{"role": "user", "content": QUESTION}], s)
    trace, _ = generate_turn(tiny_model, new, s, kept=kept)
    # the system prompt comes first: the template's very first tokens still match, and little more
    assert trace.turn["reused_tokens"] < len(first.prompt_token_ids)


def test_the_kept_cache_is_capped_in_bytes_keeping_its_leading_positions(tiny_model):
    _, kept = _first_turn(tiny_model)
    per_token = kept.nbytes // len(kept.ids)
    small = conv.capped(kept, cap_bytes=10 * per_token)
    assert len(small.ids) == 10 and small.ids == kept.ids[:10] and small.nbytes <= 10 * per_token
    assert all(layer.keys.shape[-2] == 10 for layer in small.cache.layers)  # copied: the rest is freed
    assert conv.capped(kept, cap_bytes=per_token - 1) is None
    assert conv.capped(kept, cap_bytes=kept.nbytes) is kept


def test_a_turn_is_saved_in_a_version_2_trace_and_version_1_still_reads(tiny_model):
    _, _, second, _, messages = _two_turns(tiny_model)
    back = Trace.from_json(second.to_json())
    assert back.version == 2 and back.turn["reused_tokens"] == second.turn["reused_tokens"]
    assert back.turn["messages"] == messages
    data = json.loads(second.to_json())
    data["turn"]["new_tokens"] += 1
    with pytest.raises(TraceError, match="add up"):
        Trace.from_json(json.dumps(data))
    shifted = json.loads(second.to_json())
    shifted["events"][0]["positions"][0] += 1  # a crafted file: the prefill does not start after the reused
    with pytest.raises(TraceError, match="must start after the reused tokens"):
        Trace.from_json(json.dumps(shifted))
    old = json.loads(second.to_json())
    old["version"] = 1
    assert Trace.from_json(json.dumps(old)).turn is None  # a version 1 file is one question
    old["version"] = 3
    with pytest.raises(TraceError, match="version 3 is not supported"):
        Trace.from_json(json.dumps(old))


@pytest.mark.model
def test_on_the_real_model_a_follow_up_reuses_the_whole_first_turn(embedded_model):
    """SmolLM2's chat template re-tokenizes the first answer as generated: the follow-up keeps every
    position the cache held and prefills only the template's turn marks and the new question.
    Timing targets live in `python -m core bench` (follow_up_ttft_ratio)."""
    s = GenerationSettings(max_new_tokens=16, stop_on_eos=True)
    messages = [{"role": "user", "content": "Explain in two sentences why the sky is blue."}]
    first, kept = generate_turn(embedded_model, messages, s)
    held = list(kept.ids)
    messages += [{"role": "assistant", "content": first.generated_text},
                 {"role": "user", "content": "And why is the sunset red?"}]
    second, _ = generate_turn(embedded_model, messages, s, kept=kept)
    turn = second.turn
    assert turn["reused_tokens"] == conv.common_prefix(held, second.prompt_token_ids)
    assert turn["reused_tokens"] >= len(held) - 1  # at most the end-of-turn mark re-tokenized apart
    follow_up = len(embedded_model.tokenizer("And why is the sunset red?")["input_ids"])
    # the question, the answer's last token (never fed) and the template's turn marks (11 for SmolLM2)
    assert turn["new_tokens"] <= follow_up + 12
