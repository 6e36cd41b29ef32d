"""The runner on a tiny random model: event structure, cache growth, text, sampling, cancel."""

from __future__ import annotations

import pytest

from core.runner import (
    NO_CACHE_MAX_NEW_TOKENS,
    GenerationSettings,
    SettingsError,
    TokenTexts,
    decode_over_filled_cache,
    encode_prompt,
    generate_trace,
    run,
)


def _settings(**kw) -> GenerationSettings:
    base = {"max_new_tokens": 8, "stop_on_eos": False, "chat": False}
    return GenerationSettings(**{**base, **kw})


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_one_prefill_then_one_event_per_decode_step(tiny_model, cache):
    trace = generate_trace(tiny_model, "hello", _settings(cache=cache))
    n_prompt = len(trace.prompt_token_ids)
    assert [e.phase for e in trace.events] == ["prefill"] + ["decode"] * 7
    assert trace.events[0].positions == [0, n_prompt]
    for i, event in enumerate(trace.events[1:], start=1):
        assert event.positions == [n_prompt + i - 1, n_prompt + i]
        assert event.step == i
    # The last token produced never enters the cache.
    assert trace.events[-1].kv_seq_len == n_prompt + 8 - 1
    layers = tiny_model.config.num_hidden_layers
    assert len(trace.events[-1].kv_shapes) == layers
    shape = trace.events[-1].kv_shapes[0]["key"]
    assert shape[0] == 1 and shape[1] == 2 and shape[3] == 16
    if cache == "dynamic":
        assert shape[2] == n_prompt + 7
        assert trace.events[-1].kv_bytes_allocated is None
    else:
        assert shape[2] == n_prompt + 8  # preallocated for the whole run
        assert trace.events[-1].kv_bytes_allocated == layers * 2 * 2 * 16 * (n_prompt + 8) * 4
    assert trace.events[-1].kv_bytes == layers * 2 * 2 * 16 * (n_prompt + 7) * 4


def test_no_cache_mode_recomputes_and_is_capped(tiny_model):
    trace = generate_trace(tiny_model, "hi", _settings(cache="none", max_new_tokens=100))
    assert len(trace.events) == NO_CACHE_MAX_NEW_TOKENS
    assert trace.settings["max_new_tokens"] == NO_CACHE_MAX_NEW_TOKENS
    n_prompt = len(trace.prompt_token_ids)
    assert trace.events[3].positions == [0, n_prompt + 3]
    assert all(e.kv_seq_len == 0 and e.kv_shapes == [] for e in trace.events)


def test_cache_modes_agree_on_greedy_tokens(tiny_model):
    ids = {mode: generate_trace(tiny_model, "abc", _settings(cache=mode)).generated_ids
           for mode in ("dynamic", "static", "none")}
    assert ids["dynamic"] == ids["static"] == ids["none"]


def test_token_texts_concatenate_to_decoded_text_with_multibyte_characters(tiny_model):
    # Byte tokens: emoji, accents and CJK split across several tokens.
    tok = tiny_model.tokenizer
    text = "héllo 🙂 日本 ok"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(text)  # really split
    stream = TokenTexts(tok)
    pieces = [stream.push(t, final=(i == len(ids) - 1)) for i, t in enumerate(ids)]
    assert "".join(pieces) == text
    assert "" in pieces  # partial characters were held back
    assert all("\ufffd" not in p for p in pieces)


def test_generated_text_matches_decode(tiny_model):
    for seed in range(3):
        trace = generate_trace(tiny_model, "x", _settings(temperature=1.0, seed=seed, max_new_tokens=24))
        decoded = tiny_model.tokenizer.decode(trace.generated_ids, skip_special_tokens=False)
        assert "".join(e.token_text for e in trace.events) == trace.generated_text == decoded


def test_sampling_is_reproducible_by_seed(tiny_model):
    a = generate_trace(tiny_model, "seed", _settings(temperature=1.2, top_k=50, top_p=0.9, seed=7))
    b = generate_trace(tiny_model, "seed", _settings(temperature=1.2, top_k=50, top_p=0.9, seed=7))
    c = generate_trace(tiny_model, "seed", _settings(temperature=1.2, top_k=50, top_p=0.9, seed=8))
    assert a.generated_ids == b.generated_ids
    assert a.generated_ids != c.generated_ids


def test_top_k_one_equals_greedy(tiny_model):
    greedy = generate_trace(tiny_model, "k", _settings()).generated_ids
    top1 = generate_trace(tiny_model, "k", _settings(temperature=1.5, top_k=1, seed=3)).generated_ids
    assert greedy == top1


def test_stops_on_eos(tiny_model):
    import torch

    # Force the LM head to prefer EOS (id 2) so the run must stop after the first token.
    model = tiny_model.model
    bias = torch.zeros(model.config.vocab_size)
    bias[2] = 1e4
    handle = model.lm_head.register_forward_hook(lambda _m, _i, out: out + bias)
    try:
        trace = generate_trace(tiny_model, "stop", _settings(stop_on_eos=True))
    finally:
        handle.remove()
    assert len(trace.events) == 1 and trace.stop_reason == "eos"


def test_cancel_between_forwards(tiny_model):
    calls = {"n": 0}

    def should_stop() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    trace = generate_trace(tiny_model, "cancel", _settings(max_new_tokens=50), should_stop=should_stop)
    assert len(trace.events) == 4
    assert trace.stop_reason == "stopped"  # the page's word too (core.trace.STOP_REASONS)


def test_batch_repeats_the_prompt(tiny_model):
    trace = generate_trace(tiny_model, "batch", _settings(batch=3))
    assert trace.events[-1].kv_shapes[0]["key"][0] == 3
    single = generate_trace(tiny_model, "batch", _settings(batch=1))
    assert trace.generated_ids == single.generated_ids
    assert trace.events[-1].kv_bytes == 3 * single.events[-1].kv_bytes


def test_kv_norms_come_from_the_cache(tiny_model):
    trace = generate_trace(tiny_model, "norms", _settings(max_new_tokens=3))
    prefill = trace.events[0]
    n_prompt = len(trace.prompt_token_ids)
    keys = prefill.kv_norms["key"]
    assert len(keys) == tiny_model.config.num_hidden_layers
    assert len(keys[0]) == 2 and len(keys[0][0]) == n_prompt
    assert all(v > 0 for v in keys[0][0])
    assert len(trace.events[1].kv_norms["value"][0][0]) == 1


@pytest.mark.parametrize("bad", [
    {"max_new_tokens": 0}, {"max_new_tokens": 10**6}, {"temperature": -1}, {"top_p": 0.0},
    {"top_k": -3}, {"cache": "paged"}, {"batch": 0}, {"batch": 10**4}, {"seed": -1},
])
def test_out_of_range_settings_raise_a_clear_error(tiny_model, bad):
    with pytest.raises(SettingsError):
        list(run(tiny_model, [5, 6], _settings(**bad)))


def test_prompt_longer_than_context_is_refused(tiny_model):
    too_long = [5] * (tiny_model.context_window + 1)
    with pytest.raises(SettingsError, match="context window"):
        list(run(tiny_model, too_long, _settings()))


def test_empty_prompt_is_refused(tiny_model):
    with pytest.raises(SettingsError, match="empty"):
        list(run(tiny_model, [], _settings()))


def test_chat_template_wraps_the_prompt(tiny_model):
    plain = encode_prompt(tiny_model, "hi", chat=False)
    chat = encode_prompt(tiny_model, "hi", chat=True)
    assert len(chat) > len(plain)
    assert chat[0] == 1  # <|im_start|>


@pytest.mark.parametrize("prompt", [
    "emoji 🙂👩‍👩‍👧 end", "عربى שלום mixed", "e\u0301\u0301 combining", "bad \ud800 surrogate \udfff",
    "<script>alert(1)</script> **bold** $x$ `code`", "\x00 nul and \u202e override",
])
def test_odd_unicode_prompts_run_and_round_trip(tiny_model, prompt):
    trace = generate_trace(tiny_model, prompt, _settings(max_new_tokens=4, chat=True))
    assert len(trace.events) == 4
    decoded = tiny_model.tokenizer.decode(trace.prompt_token_ids, skip_special_tokens=True)
    if "\ud800" not in prompt:
        assert prompt in decoded
    else:
        assert "\ufffd" in decoded  # the lone surrogates were replaced, not dropped silently


def test_decode_over_a_filled_cache_runs_decode_steps_at_its_batch_over_that_cache(tiny_model, monkeypatch):
    seen = []
    forward = tiny_model.model.forward

    def spy(*args, **kwargs):
        seen.append((tuple(kwargs["input_ids"].shape), kwargs["cache"].get_seq_length()))
        return forward(*args, **kwargs)

    monkeypatch.setattr(tiny_model.model, "forward", spy)
    seconds = decode_over_filled_cache(tiny_model, batch=4, cached_tokens=20, steps=3)
    assert len(seconds) == 3 and all(s > 0 for s in seconds)
    assert seen == [((4, 1), 20), ((4, 1), 21), ((4, 1), 22)]  # one new token per row, the cache growing
    with pytest.raises(SettingsError, match="context window"):
        decode_over_filled_cache(tiny_model, batch=1, cached_tokens=tiny_model.context_window, steps=1)


def test_warm_up_runs_one_untimed_forward_pair_and_changes_nothing(tiny_model):
    """The load-time warm-up (the first prefill after a load paid one-time costs the prediction never
    sees) leaves the model as it found it: the same greedy tokens after it as before."""
    from core.runner import warm_up

    before = generate_trace(tiny_model, "abc", _settings()).generated_ids
    warm_up(tiny_model)
    assert generate_trace(tiny_model, "abc", _settings()).generated_ids == before


def test_the_app_warms_the_model_up_once_when_it_loads_it(monkeypatch):
    from app.shared import model as service

    loaded, calls = object(), []
    monkeypatch.setattr(service, "load_default", lambda **_: loaded)
    monkeypatch.setattr(service, "warm_up", calls.append)
    monkeypatch.setattr(service, "_keep_gc_off_the_model", lambda: None)
    service.get_model.clear()
    try:
        assert service.get_model() is loaded and service.get_model() is loaded
    finally:
        service.get_model.clear()
    assert calls == [loaded]
