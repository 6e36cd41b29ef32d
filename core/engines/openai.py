"""A streaming client for any OpenAI-compatible server (vLLM, llama-server, SGLang, a gateway).

It speaks `/v1/completions` (token-id prompts: exact lengths, no template) and
`/v1/chat/completions` (text prompts through the server's chat template), reads the server-sent
events with httpx-sse, and yields each token with the time it arrived. Where an engine reports
token ids per chunk (vLLM's `return_token_ids`) or a running count (llama-server's native
`tokens_predicted`), a chunk holding several tokens counts as several; otherwise one chunk with
text is one token.

Every call has a timeout: connecting, the first token, and each gap between tokens; a stream
that stops, breaks, or sends something that is not JSON raises EngineError with what was seen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
from httpx_sse import SSEError, connect_sse

from core.engines.base import (
    EngineClient,
    EngineError,
    EngineRequest,
    Health,
    StreamEnd,
    TokenArrival,
    register,
)


@register
class OpenAICompatible(EngineClient):
    """One server at `base_url` serving `model` (its served name)."""

    name: ClassVar[str] = "openai"

    def __init__(self, base_url: str, model: str, connect_timeout_s: float = 5.0, read_timeout_s: float = 60.0,
                 chat: bool = False) -> None:
        self.base_url = base_url.rstrip("/")
        self.model, self.chat = model, chat
        # read: the longest silence allowed before a token (a queued request's first one included)
        self.connect_timeout_s, self.read_timeout_s = connect_timeout_s, read_timeout_s
        self._http = httpx.Client(timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
                                  limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
                                  trust_env=False)  # loopback or the operator's list: never a proxy from the env

    def close(self) -> None:
        self._http.close()

    def health(self, timeout_s: float = 3.0) -> Health:
        for path in ("/health", "/v1/models"):
            try:
                r = self._http.get(self.base_url + path, timeout=timeout_s)
            except httpx.HTTPError as exc:
                return Health(False, f"no answer from {self.base_url} ({type(exc).__name__})")
            if r.status_code == 200:
                return Health(True)
        return Health(False, f"{self.base_url} answered {r.status_code} to /health and /v1/models")

    def body(self, request: EngineRequest) -> tuple[str, dict[str, Any]]:
        """The endpoint and JSON body for `request` (built before any timing starts)."""
        common: dict[str, Any] = {"model": self.model, "max_tokens": request.max_new_tokens, "stream": True,
                                  "temperature": request.temperature,
                                  "stream_options": {"include_usage": True}}
        if request.ignore_eos:
            common.update(ignore_eos=True, min_tokens=request.max_new_tokens)
        if self.chat:
            text = request.prompt if isinstance(request.prompt, str) else None
            if text is None:
                raise ValueError("a chat request takes a text prompt, not token ids")
            return "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": text}]}
        prompt = list(request.prompt) if isinstance(request.prompt, tuple) else request.prompt
        return "/v1/completions", {**common, "prompt": prompt, "return_token_ids": True}

    def parse(self, data: str, seen: int) -> Chunk:
        """One event's tokens: see `parse_event`."""
        return parse_event(data, seen, "chat" if self.chat else "completions")

    def stream(self, request: EngineRequest, sent: list[float] | None = None,
               on_open: Callable[[httpx.Response], None] | None = None) -> Iterator[TokenArrival | StreamEnd]:
        """Tokens of `request` as they arrive (t_s from the moment it was sent); `sent`, when given,
        receives the perf_counter time of sending, so a player can place the stream on its clock;
        `on_open` receives the open response, so another thread can close it to abort the stream."""
        path, body = self.body(request)
        index = 0
        finish: str | None = None
        figures: dict[str, Any] = {}
        t0 = time.perf_counter()
        if sent is not None:
            sent.append(t0)
        try:
            with connect_sse(self._http, "POST", self.base_url + path, json=body) as source:
                response = source.response
                if on_open is not None:
                    on_open(response)
                if response.status_code != 200:
                    response.read()
                    raise EngineError(f"{self.base_url} refused the request: HTTP {response.status_code}: "
                                      f"{response.text[:300]}")
                for event in source.iter_sse():
                    now = time.perf_counter() - t0
                    if event.data.strip() == "[DONE]":
                        break
                    chunk = self.parse(event.data, index)
                    figures.update(chunk.figures)
                    for k in range(chunk.count):
                        yield TokenArrival(index=index, text=chunk.text if k == 0 else "", t_s=now,
                                           token_id=chunk.ids[k] if k < len(chunk.ids) else None)
                        index += 1
                    finish = chunk.finish or finish
                    if chunk.last:
                        break
        except httpx.ConnectTimeout:
            raise EngineError(f"{self.base_url} did not accept a connection within {self.connect_timeout_s:.0f} s"
                              ) from None
        except httpx.TimeoutException:
            waited = "the first token" if index == 0 else f"token {index + 1}"
            raise EngineError(f"{self.base_url} stopped answering: no {waited} within {self.read_timeout_s:.0f} s"
                              ) from None
        except (httpx.HTTPError, SSEError) as exc:
            raise EngineError(f"the stream from {self.base_url} broke after {index} tokens "
                              f"({type(exc).__name__}: {exc})") from None
        yield StreamEnd(finish_reason=finish, engine_figures=figures or None)


@register
class LlamaServer(OpenAICompatible):
    """llama.cpp's llama-server through its native `/completion` endpoint: its OpenAI-compatible
    one holds back tokens that end mid-character and then sends several as one chunk without
    saying how many, while the native one counts them (`tokens_predicted`) and turns off prompt
    reuse per request (`cache_prompt: false`)."""

    name: ClassVar[str] = "llama-server"

    def body(self, request: EngineRequest) -> tuple[str, dict[str, Any]]:
        prompt = list(request.prompt) if isinstance(request.prompt, tuple) else request.prompt
        body: dict[str, Any] = {"prompt": prompt, "n_predict": request.max_new_tokens, "stream": True,
                                "temperature": request.temperature, "cache_prompt": False, "return_tokens": True}
        if request.ignore_eos:
            body["ignore_eos"] = True
        return "/completion", body

    def parse(self, data: str, seen: int) -> Chunk:
        return parse_event(data, seen, "llama")


@dataclass(frozen=True)
class Chunk:
    """What one server-sent event carried: `count` new tokens (their ids where given), the text,
    why the stream finished (on its last chunk) and the engine's own figures."""

    count: int
    text: str = ""
    ids: tuple[int, ...] = ()
    finish: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    last: bool = False


def parse_event(data: str, seen: int, flavor: str) -> Chunk:
    """Parse one event's data for `flavor` ("completions", "chat" or "llama"), `seen` tokens so
    far; EngineError, in words, for anything that is not a stream event."""
    try:
        chunk = json.loads(data)
    except ValueError:
        raise EngineError(f"the engine sent an event that is not JSON after {seen} tokens: {data[:120]!r}") from None
    if not isinstance(chunk, dict):
        raise EngineError(f"the engine sent a {type(chunk).__name__} instead of an event object after {seen} tokens")
    if "error" in chunk:
        raise EngineError(f"the engine reported an error after {seen} tokens: {str(chunk['error'])[:300]}")
    figures: dict[str, Any] = {}
    _collect_figures(chunk, figures)
    if flavor == "llama":
        ids = _ids(chunk.get("tokens"))
        predicted = chunk.get("tokens_predicted")
        count = (predicted - seen if isinstance(predicted, int) and not isinstance(predicted, bool)
                 else len(ids) or (1 if chunk.get("content") else 0))
        stop = bool(chunk.get("stop"))
        if stop and isinstance(predicted, int):  # the last chunk repeats the total: count what is new
            count = max(0, predicted - seen)
        return Chunk(max(0, count), str(chunk.get("content") or ""), ids, chunk.get("stop_type") if stop else None,
                     figures, last=stop)
    count, texts, all_ids, finish = 0, [], [], None
    choices = chunk.get("choices") or []
    if not isinstance(choices, list):
        raise EngineError(f"the engine sent 'choices' that are not a list after {seen} tokens")
    for choice in choices:
        if not isinstance(choice, dict):
            raise EngineError(f"the engine sent a choice that is not an object after {seen} tokens")
        text = ((choice.get("delta") or {}).get("content") if flavor == "chat" else choice.get("text")) or ""
        ids = _ids(choice.get("token_ids"))
        count += len(ids) if ids else (1 if text else 0)
        texts.append(str(text))
        all_ids.extend(ids)
        finish = choice.get("finish_reason") or finish
    return Chunk(count, "".join(texts), tuple(all_ids), finish, figures)


def _ids(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(int(t) for t in value if isinstance(t, int) and not isinstance(t, bool))


def _collect_figures(chunk: dict[str, Any], figures: dict[str, Any]) -> None:
    """The engine's own per-request figures: vLLM's usage, llama-server's timings."""
    if isinstance(chunk.get("usage"), dict):
        figures["usage"] = chunk["usage"]
    if isinstance(chunk.get("timings"), dict):
        figures["timings"] = chunk["timings"]
