"""Instrumented generation: prefill once, then one token per forward, yielding one event per forward.

The loop is what `model.generate` does (prefill with logits for the last position only, then
decode with the cache), written out so every forward can be timed and the real cache tensors
read after it. Only the forward and the token choice sit inside the timed region; reading the
cache and decoding text happen outside it, so instrumentation does not slow the measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from core.conversation import KeptCache, capped, reusable, signature, take, turn_record
from core.model import LoadedModel
from core.trace import STOP_EOS, STOP_MAX_NEW_TOKENS, STOP_STOPPED, Event, Trace

CACHE_MODES = ("dynamic", "static", "none")
NO_CACHE_MAX_NEW_TOKENS = 32  # without a cache every step recomputes the whole sequence: quadratic
MAX_BATCH = 64


class SettingsError(ValueError):
    """A generation setting is out of range; the message says which and the allowed range."""


@dataclass(frozen=True)
class GenerationSettings:
    max_new_tokens: int = 48
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 means off
    top_p: float = 1.0
    seed: int = 0
    chat: bool = True
    cache: str = "dynamic"
    batch: int = 1
    stop_on_eos: bool = True
    record_kv_norms: bool = True

    def validated(self) -> GenerationSettings:
        """Raise SettingsError for a value no run can use; return settings with caps applied."""
        if not 1 <= self.max_new_tokens <= 4096:
            raise SettingsError("max_new_tokens must be between 1 and 4096")
        if not 0.0 <= self.temperature <= 5.0:
            raise SettingsError("temperature must be between 0 and 5 (0 is greedy)")
        if not 0 <= self.top_k <= 100_000:
            raise SettingsError("top_k must be between 0 (off) and 100000")
        if not 0.0 < self.top_p <= 1.0:
            raise SettingsError("top_p must be in (0, 1]")
        if not 0 <= self.seed < 2**63:
            raise SettingsError("seed must be a non-negative integer")
        if self.cache not in CACHE_MODES:
            raise SettingsError(f"cache must be one of {', '.join(CACHE_MODES)}")
        if not 1 <= self.batch <= MAX_BATCH:
            raise SettingsError(f"batch must be between 1 and {MAX_BATCH}")
        if self.cache == "none" and self.max_new_tokens > NO_CACHE_MAX_NEW_TOKENS:
            return GenerationSettings(**{**asdict(self), "max_new_tokens": NO_CACHE_MAX_NEW_TOKENS})
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class TokenTexts:
    """Turns generated ids into per-token text whose concatenation is exactly the decoded text.

    A byte-level token can end inside a multi-byte character; its text is held back (empty) until
    the character completes, and the last token flushes whatever is left.
    """

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._emitted = ""

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def push(self, token_id: int, final: bool = False) -> str:
        self._ids.append(token_id)
        full = self._decode(self._ids)
        if not final and (full.endswith("\ufffd") or not full.startswith(self._emitted)):
            return ""
        if not full.startswith(self._emitted):
            # Decoding was not prefix-stable; give the whole remainder to the last token.
            piece = full[len(self._emitted):] if len(full) >= len(self._emitted) else ""
        else:
            piece = full[len(self._emitted):]
        self._emitted += piece
        return piece

    @property
    def text(self) -> str:
        return self._emitted


def clean_text(text: str) -> str:
    """Lone surrogates (a broken paste, a crafted URL) cannot be encoded: they become U+FFFD."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def encode_prompt(loaded: LoadedModel, prompt: str, chat: bool) -> list[int]:
    """Token ids of the prompt, through the model's chat template when `chat` is on and one exists."""
    tok = loaded.tokenizer
    prompt = clean_text(prompt)
    if chat and getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    return [int(i) for i in tok(prompt, add_special_tokens=True)["input_ids"]]


def conversation_ids(loaded: LoadedModel, messages: list[dict[str, str]], chat: bool) -> list[int]:
    """Token ids of a whole conversation, ending with the reader's newest message: through the chat
    template (with the prompt for the model's answer) when `chat` is on and the model has one, else
    the texts in a row, each answer right after its question, each question after a blank line."""
    tok = loaded.tokenizer
    messages = [{"role": m["role"], "content": clean_text(m["content"])} for m in messages]
    if chat and getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    # without a template the model continued the question's text directly: an answer follows its
    # question as generated, and each new question starts after a blank line
    text = "".join(("\n\n" if i and m["role"] != "assistant" else "") + m["content"]
                   for i, m in enumerate(messages))
    return [int(i) for i in tok(text, add_special_tokens=True)["input_ids"]]


def _make_cache(loaded: LoadedModel, mode: str, max_len: int):
    from transformers import DynamicCache, StaticCache

    if mode == "dynamic":
        return DynamicCache(config=loaded.config)
    if mode == "static":
        return StaticCache(config=loaded.config, max_cache_len=max_len)
    return None


def _cache_view(cache) -> tuple[int, list[dict[str, list[int]]], int, int | None, list]:
    """Sequence length, per-layer shapes, filled bytes, allocated bytes and layer tensors."""
    if cache is None:
        return 0, [], 0, None, []
    seq = int(cache.get_seq_length())
    shapes, layers, filled, allocated = [], [], 0, 0
    for layer in cache.layers:
        keys, values = layer.keys, layer.values
        shapes.append({"key": list(keys.shape), "value": list(values.shape)})
        layers.append((keys, values))
        per_pos = keys.element_size() * keys.shape[0] * keys.shape[1] * keys.shape[3]
        per_pos += values.element_size() * values.shape[0] * values.shape[1] * values.shape[3]
        filled += per_pos * seq
        allocated += keys.numel() * keys.element_size() + values.numel() * values.element_size()
    static = any(type(layer).__name__.startswith("Static") for layer in cache.layers)
    return seq, shapes, filled, (allocated if static else None), layers


def _kv_norms(layers: list, first: int, last: int) -> dict[str, list]:
    """L2 norm of each new key and value vector, per layer and KV head, for batch row 0.

    One stacked norm and one tolist() per event: per-layer Python loops cost a few percent of a
    decode step, which the instrumentation budget cannot afford.
    """
    import torch

    keys = torch.stack([k[0, :, first:last, :] for k, _ in layers]).norm(dim=-1).double()
    values = torch.stack([v[0, :, first:last, :] for _, v in layers]).norm(dim=-1).double()
    return {"key": (keys * 1000).round().div(1000).tolist(),
            "value": (values * 1000).round().div(1000).tolist()}


def _choose(logits, settings: GenerationSettings, generator):
    """Next token for each batch row from last-position logits (greedy when temperature is 0)."""
    import torch

    if settings.temperature == 0.0:
        return logits.argmax(dim=-1)
    scores = logits.float() / settings.temperature
    if settings.top_k:
        k = min(settings.top_k, scores.shape[-1])
        kth = torch.topk(scores, k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if settings.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True, dim=-1)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative - sorted_scores.softmax(dim=-1) >= settings.top_p  # keep the first past p
        sorted_scores = sorted_scores.masked_fill(drop, float("-inf"))
        scores = torch.full_like(scores, float("-inf")).scatter(-1, order, sorted_scores)
    probs = scores.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


# annotate(event, n_new, n_cached, batch, attn_len): attn_len is the static cache's allocated
# length (attention spans all of it), None otherwise.
Annotator = Callable[[Event, int, int, int, "int | None"], None]


def run(loaded: LoadedModel, prompt_ids: list[int], settings: GenerationSettings,
        should_stop: Callable[[], bool] | None = None,
        annotate: Annotator | None = None,
        reuse: tuple[KeptCache, int] | None = None,
        on_kept: Callable[[KeptCache], None] | None = None) -> Iterator[Event]:
    """Yield one Event per forward pass. Stops on EOS, max tokens, or `should_stop()` between forwards.

    `annotate(event, n_new, n_cached, batch, attn_len)` may add cost and prediction fields to each
    event (core.predictor provides one); it runs outside the timed region.

    `reuse`: (a kept cache, how many of its positions to keep; core.conversation.reusable decides):
    the prefill then runs over the prompt's remaining tokens only, its positions starting after the
    kept ones. Readying the kept cache (a crop, or a static cache's copy into a new allocation) is
    timed into the prefill: it is part of the wait for the first token. `on_kept` receives the
    cache this turn leaves (whatever way the run ends), for the next turn.
    """
    import torch

    settings = settings.validated()
    if not prompt_ids:
        raise SettingsError("the prompt is empty: type at least one token")
    window = loaded.context_window
    if len(prompt_ids) + settings.max_new_tokens > window:
        raise SettingsError(
            f"prompt ({len(prompt_ids)} tokens) + max new tokens ({settings.max_new_tokens}) exceeds "
            f"the model's context window of {window} tokens")
    model, device = loaded.model, loaded.model.device
    eos = _eos_ids(loaded)
    generator = torch.Generator(device="cpu").manual_seed(settings.seed)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    texts = TokenTexts(loaded.tokenizer)
    total_len = len(prompt_ids) + settings.max_new_tokens
    kept_n, prepare_ms = 0, 0.0
    if reuse is not None and settings.cache != "none" and settings.batch == 1 and 0 < reuse[1] < len(prompt_ids):
        started = time.perf_counter()
        cache = take(reuse[0], reuse[1], total_len, loaded.config)
        kept_n, prepare_ms = reuse[1], (time.perf_counter() - started) * 1000.0
    else:
        cache = _make_cache(loaded, settings.cache, total_len)
    sequence = torch.tensor([prompt_ids] * settings.batch, dtype=torch.long, device=device)
    next_input = sequence[:, kept_n:]
    n_cached = kept_n
    generated: list[int] = []
    sig = signature(loaded, settings.chat)

    def leave() -> None:
        if on_kept is not None and cache is not None and settings.batch == 1:
            held = int(cache.get_seq_length())
            on_kept(KeptCache(ids=(list(prompt_ids) + generated)[:held], cache=cache, mode=settings.cache,
                              signature=sig))

    consistent = True  # False while a forward may have half-updated the cache: nothing is kept then
    with torch.inference_mode():
        try:
            for step in range(settings.max_new_tokens):
                if step and should_stop is not None and should_stop():
                    return
                n_new = next_input.shape[1]
                consistent = False
                token, latency_ms = _timed_forward(model, sequence if cache is None else next_input, cache,
                                                   settings, generator, sync)
                if step == 0:
                    latency_ms += prepare_ms
                token_id = int(token.item())
                generated.append(token_id)
                consistent = True

                is_last = step == settings.max_new_tokens - 1 or (settings.stop_on_eos and token_id in eos)
                first = n_cached if cache is not None else 0
                seq, shapes, filled, allocated, layers = _cache_view(cache)
                event = Event(
                    phase="prefill" if step == 0 else "decode",
                    positions=[first, first + n_new] if cache is not None else [0, sequence.shape[1]],
                    token_id=token_id, token_text=texts.push(token_id, final=is_last),
                    latency_ms=round(latency_ms, 4), kv_seq_len=seq, kv_shapes=shapes, step=step,
                    kv_bytes=filled, kv_bytes_allocated=allocated,
                    # a follow-up's prefill also reads the kept positions' vectors: the grid draws them
                    kv_norms=_kv_norms(layers, 0 if (step == 0 and kept_n) else first, first + n_new)
                    if (settings.record_kv_norms and layers) else None,
                )
                if annotate is not None:
                    annotate(event, n_new if cache is not None else sequence.shape[1],
                             n_cached if cache is not None else 0, settings.batch,
                             total_len if settings.cache == "static" else None)
                yield event
                if is_last:
                    return
                n_cached += n_new
                next_input = token.view(1, 1).expand(settings.batch, 1)
                if cache is None:
                    sequence = torch.cat([sequence, next_input], dim=1)
        finally:
            if consistent:
                leave()


def warm_up(loaded: LoadedModel) -> None:
    """One untimed forward and decode step of a one-token prompt, run once after loading.

    The first prefill after a load pays one-time costs (torch's lazy set-up of its kernels and
    buffers) that have nothing to do with the prompt; without this they land in the first
    reader's time to first token, and the latency model, fitted on warm forwards, calls the
    difference unexplained.
    """
    first = encode_prompt(loaded, "Hello", chat=False)[:1]
    for _ in run(loaded, first, GenerationSettings(max_new_tokens=2, stop_on_eos=False, record_kv_norms=False)):
        pass


def decode_over_filled_cache(loaded: LoadedModel, batch: int, cached_tokens: int, steps: int) -> list[float]:
    """Seconds of each of `steps` decode forwards at `batch` over a cache already `cached_tokens` long.

    The forward is the runner's decode step exactly (the same _timed_forward, the same cache class);
    only the cache is filled with a constant instead of being
    computed by a prefill, which changes no step's speed but saves the prefill of batch x context
    tokens that a long batched cache would otherwise cost. This is how the latency fit sees the
    cache's cost per byte: at batch 1 the cache is too small a share of a step to weigh.
    """
    import torch
    from transformers import DynamicCache

    from core.spec import spec_from_config

    spec = spec_from_config(loaded.config)
    model, device = loaded.model, loaded.model.device
    dtype = next(model.parameters()).dtype
    settings = GenerationSettings(max_new_tokens=steps, batch=batch, chat=False).validated()
    if cached_tokens < 1 or cached_tokens + steps > loaded.context_window:
        raise SettingsError(f"a cache of {cached_tokens} tokens plus {steps} steps does not fit the model's "
                            f"context window of {loaded.context_window} tokens")
    generator = torch.Generator(device="cpu").manual_seed(settings.seed)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    cache = DynamicCache(config=loaded.config)
    shape = (batch, spec.n_kv_heads, cached_tokens, spec.head_dim)
    for layer in range(spec.n_layers):
        cache.update(torch.full(shape, 0.01, dtype=dtype, device=device),
                     torch.full(shape, 0.01, dtype=dtype, device=device), layer)
    next_input = torch.zeros((batch, 1), dtype=torch.long, device=device)
    seconds = []
    with torch.inference_mode():
        for _ in range(steps):
            token, latency_ms = _timed_forward(model, next_input, cache, settings, generator, sync)
            seconds.append(latency_ms / 1000.0)
            next_input = token.view(1, 1).expand(batch, 1)
    return seconds


def cold_prefill_ms(loaded: LoadedModel, prompt_ids: list[int], mode: str = "dynamic") -> float:
    """Milliseconds of one prefill of all of `prompt_ids` into a fresh cache, timed as the runner
    times a prefill (forward and token choice): the same turn from scratch, set beside a follow-up
    that kept the cache. Nothing is generated and the cache is dropped."""
    import torch

    settings = GenerationSettings(max_new_tokens=1, cache=mode if mode != "none" else "dynamic",
                                  chat=False, record_kv_norms=False).validated()
    if not prompt_ids or len(prompt_ids) + 1 > loaded.context_window:
        raise SettingsError("the conversation does not fit the model's context window")
    device = loaded.model.device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    cache = _make_cache(loaded, settings.cache, len(prompt_ids) + 1)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    with torch.inference_mode():
        _, ms = _timed_forward(loaded.model, ids, cache, settings, torch.Generator(device="cpu"), sync)
    return ms


def _timed_forward(model, input_ids, cache, settings: GenerationSettings, generator, sync) -> tuple[Any, float]:
    """One forward and its token choice, timed as every measured step is (the token on the CPU before
    the clock stops); `cache` None re-feeds the whole sequence. Returns the chosen token and ms."""
    sync()
    start = time.perf_counter()
    if cache is None:
        out = model(input_ids=input_ids, use_cache=False, logits_to_keep=1)
    else:
        out = model(input_ids=input_ids, cache=cache, use_cache=True, logits_to_keep=1)
    # Sampling is per row but row 0's choice feeds every row, so a batch stays one prompt.
    token = _choose(out.logits[:, -1, :], settings, generator)[:1]
    token.item()  # waits for the choice: a step is timed until its token is known
    sync()
    return token, (time.perf_counter() - start) * 1000.0


def _eos_ids(loaded: LoadedModel) -> set[int]:
    ids = set()
    for source in (loaded.model.generation_config, loaded.config):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    if loaded.tokenizer.eos_token_id is not None:
        ids.add(int(loaded.tokenizer.eos_token_id))
    return ids


def generate_trace(loaded: LoadedModel, prompt: str, settings: GenerationSettings,
                   should_stop: Callable[[], bool] | None = None,
                   annotate: Annotator | None = None,
                   on_event: Callable[[Event], None] | None = None) -> Trace:
    """Run a whole generation and return its trace (the CLI's `--json` output)."""
    settings = settings.validated()
    prompt_ids = encode_prompt(loaded, prompt, settings.chat)
    trace = Trace(model=loaded.info.to_dict(), settings=settings.to_dict(), prompt_token_ids=prompt_ids,
                  prompt_text=prompt, environment=environment())
    _fill(trace, loaded, run(loaded, prompt_ids, settings, should_stop, annotate), on_event)
    return trace


def generate_turn(loaded: LoadedModel, messages: list[dict[str, str]], settings: GenerationSettings,
                  kept: KeptCache | None = None, annotate: Annotator | None = None,
                  measure_cold: bool = True) -> tuple[Trace, KeptCache | None]:
    """One turn of a conversation: `messages` end with the reader's newest question; `kept` is the
    cache the last turn left. Returns the turn's trace (its `turn` record says what was reused, or
    why nothing was, and with `measure_cold` the same turn's prefill timed from scratch) and the
    cache this turn leaves, within core.conversation's cap."""
    settings = settings.validated()
    prompt_ids = conversation_ids(loaded, messages, settings.chat)
    n, reason = reusable(kept, prompt_ids, settings.cache, settings.batch, signature(loaded, settings.chat))
    turn = turn_record(messages, prompt_ids, n, reason)
    trace = Trace(model=loaded.info.to_dict(), settings=settings.to_dict(), prompt_token_ids=prompt_ids,
                  prompt_text=messages[-1]["content"], environment=environment(), turn=turn)
    left: list[KeptCache] = []
    _fill(trace, loaded, run(loaded, prompt_ids, settings, annotate=annotate,
                             reuse=(kept, n) if n and kept is not None else None, on_kept=left.append))
    if measure_cold and n:
        turn["cold_ttft_ms"] = round(cold_prefill_ms(loaded, prompt_ids, settings.cache), 4)
    return trace, (capped(left[-1]) if left else None)


def _fill(trace: Trace, loaded: LoadedModel, events: Iterator[Event],
          on_event: Callable[[Event], None] | None = None) -> None:
    """Collect a run's events into `trace`, then its stop reason and text."""
    for event in events:
        trace.events.append(event)
        if on_event is not None:
            on_event(event)
    settings = trace.settings
    last = trace.events[-1] if trace.events else None
    if last is not None and settings["stop_on_eos"] and last.token_id in _eos_ids(loaded):
        trace.stop_reason = STOP_EOS
    elif len(trace.events) >= settings["max_new_tokens"]:
        trace.stop_reason = STOP_MAX_NEW_TOKENS
    else:
        trace.stop_reason = STOP_STOPPED
    # What was shown, token by token; equal to decoding the ids unless a cancel cut a character.
    trace.generated_text = "".join(e.token_text for e in trace.events)


def environment() -> dict[str, Any]:
    """Library versions and threads: what an 'about this run' panel and a saved trace need."""
    import platform

    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "threads": torch.get_num_threads(),
            "device": "cuda" if torch.cuda.is_available() else "cpu", "machine": platform.machine()}
