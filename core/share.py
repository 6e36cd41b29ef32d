"""Shareable links: the page, prompt and settings as URL query parameters, and back.

A link is untrusted input: anyone can hand-edit one. Each parameter is checked on its own and a
bad one falls back to its default with a plain-text notice, so one typo never throws away the
rest of the view. Notices never quote a value unless it is short and made of safe characters.
Pure (no Streamlit): the page passes `st.query_params` in and writes `to_query_params` back out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from core.runner import CACHE_MODES, GenerationSettings, SettingsError
from core.settings import LINK_PROMPT_MAX_CHARS, PUBLIC_MAX_NEW_TOKENS

# Sections a link can open. "live" is the main run view; "compare" the cache on/off comparison;
# "batching" the batch sweep; "replay" a loaded or bundled trace played without the model.
PAGES = ("live", "compare", "batching", "replay")
DEFAULT_PAGE = "live"
# The page's first example prompt (app.views.live.settings.EXAMPLES[0]); repeated here to keep this module pure.
DEFAULT_PROMPT = "Explain in two sentences why the sky is blue."

# Public caps: what the page's widgets accept, tighter than the engine's own limits
# (GenerationSettings.validated()), because a value past a widget's range breaks that widget.
# The prompt and new-token caps live in core.settings, beside the page's own limits.
PUBLIC_MAX_TEMPERATURE = 2.0
PUBLIC_MAX_TOP_K = 1000
PUBLIC_MAX_SEED = 2**31 - 1
_MAX_NUMBER_CHARS = 32  # longer numeric text is refused unread (no 4,000-digit int parsing)

_ENGINE = GenerationSettings()
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(nan|inf|infinity)",
                    re.ASCII | re.IGNORECASE)
_SAFE_TO_QUOTE = re.compile(r"[A-Za-z0-9.+-]{1,24}", re.ASCII)
# Anything tag-like: a shared link carries plain text, never markup, whatever the page does with it.
_MARKUP = re.compile(r"<[A-Za-z/!?]")  # "3 < x" stays allowed: browsers read no tag there
# Control characters other than tab and newlines, and bidi overrides that could disguise text.
_BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202a-\u202e\u2066-\u2069]")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class ViewParams:
    """Everything a link reproduces; defaults are the engine's, so an empty URL is the default view."""

    prompt: str = DEFAULT_PROMPT
    max_new_tokens: int = _ENGINE.max_new_tokens
    temperature: float = _ENGINE.temperature
    top_k: int = _ENGINE.top_k
    top_p: float = _ENGINE.top_p
    seed: int = _ENGINE.seed
    cache: str = _ENGINE.cache
    presenter: bool = False
    page: str = DEFAULT_PAGE

    def settings(self, **extra: Any) -> GenerationSettings:
        """GenerationSettings for this view (chat and the rest from `extra` or the engine defaults)."""
        return GenerationSettings(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                  top_k=self.top_k, top_p=self.top_p, seed=self.seed, cache=self.cache,
                                  **extra)


KEYS = tuple(f.name for f in fields(ViewParams))
DEFAULTS = ViewParams()


class _Bad(ValueError):
    """One parameter's value is unusable; the message says why, in plain words."""


def _quote(raw: str) -> str:
    """The value itself when it is harmless to show, else a neutral description."""
    return f"'{raw}'" if _SAFE_TO_QUOTE.fullmatch(raw) else "the value given"


def _engine_check(key: str, value: Any) -> None:
    """Let GenerationSettings judge the value, so a link can never hold what a run would refuse."""
    try:
        GenerationSettings(**{key: value}).validated()
    except SettingsError as exc:
        raise _Bad(str(exc)) from None


def _parse_int(key: str, raw: str, low: int, high: int) -> int:
    text = raw.strip()
    if len(text) > _MAX_NUMBER_CHARS or not _INT.fullmatch(text):
        raise _Bad(f"{_quote(text)} is not a whole number")
    value = int(text)
    if value < low:
        raise _Bad(f"{_quote(text)} is negative" if value < 0 else f"{_quote(text)} is below the minimum of {low}")
    if value > high:
        raise _Bad(f"{_quote(text)} is above this page's limit of {high:,}")
    _engine_check(key, value)
    return value


def _parse_float(key: str, raw: str, high: float, above_zero: bool = False) -> float:
    text = raw.strip()
    if len(text) > _MAX_NUMBER_CHARS or not _FLOAT.fullmatch(text):
        raise _Bad(f"{_quote(text)} is not a number")
    value = float(text)
    if not math.isfinite(value):
        raise _Bad(f"{_quote(text)} is not a finite number")
    if value < 0:
        raise _Bad(f"{_quote(text)} is negative")
    if above_zero and value == 0:
        raise _Bad(f"{_quote(text)} is not above 0")
    if value > high:
        raise _Bad(f"{_quote(text)} is above this page's limit of {high:g}")
    _engine_check(key, value)
    return value + 0.0  # -0.0 becomes 0.0, so it compares and prints as the default


def _parse_prompt(raw: str) -> str:
    if len(raw) > LINK_PROMPT_MAX_CHARS:
        raise _Bad(f"it is {len(raw):,} characters, over the {LINK_PROMPT_MAX_CHARS:,} a link may carry")
    if not raw.strip():
        raise _Bad("it is empty")
    if _BAD_CHARS.search(raw):
        raise _Bad("it contains control characters")
    if _MARKUP.search(raw):
        raise _Bad("it contains HTML-like markup, which links do not carry")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise _Bad("it is not valid text") from None
    return raw


def _parse_choice(raw: str, choices: tuple[str, ...]) -> str:
    text = raw.strip().lower()
    if text not in choices:
        raise _Bad(f"{_quote(raw.strip())} is not one of {', '.join(choices)}")
    return text


def _parse_bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _Bad(f"{_quote(raw.strip())} is not on or off (use 1 or 0)")


def _parse_value(key: str, raw: str) -> Any:
    if key == "prompt":
        return _parse_prompt(raw)
    if key == "max_new_tokens":
        return _parse_int(key, raw, 1, PUBLIC_MAX_NEW_TOKENS)
    if key == "top_k":
        return _parse_int(key, raw, 0, PUBLIC_MAX_TOP_K)
    if key == "seed":
        return _parse_int(key, raw, 0, PUBLIC_MAX_SEED)
    if key == "temperature":
        return _parse_float(key, raw, PUBLIC_MAX_TEMPERATURE)
    if key == "top_p":
        return _parse_float(key, raw, 1.0, above_zero=True)
    if key == "cache":
        return _parse_choice(raw, CACHE_MODES)
    if key == "presenter":
        return _parse_bool(raw)
    return _parse_choice(raw, PAGES)


def _single(key: str, given: Any) -> str | None:
    """The one string a key carries; None when absent. Repeated keys must agree."""
    values = list(given) if isinstance(given, (list, tuple)) else [given]
    if not values:
        return None
    if not all(isinstance(v, str) for v in values):
        raise _Bad("it is not text")
    if len(set(values)) > 1:
        raise _Bad(f"it appears {len(values)} times with different values")
    return values[0]


def _show_default(key: str) -> str:
    value = getattr(DEFAULTS, key)
    if key == "prompt":
        return "the default prompt"
    if key == "presenter":
        return "off" if not value else "on"
    return f"{value:g}" if isinstance(value, float) else str(value)


def parse_query_params(params: Mapping[str, str | list[str]]) -> tuple[ViewParams, list[str]]:
    """The view a link describes, and one plain-text notice per parameter that fell back to its default.

    Unknown keys are ignored silently: other tools add their own (utm_source and the like).
    """
    view, notices = DEFAULTS, []
    for key in KEYS:
        if key not in params:
            continue
        try:
            raw = _single(key, params[key])
            if raw is None:
                continue
            view = replace(view, **{key: _parse_value(key, raw)})
        except _Bad as why:
            notices.append(f"Link parameter '{key}': {why}; using {_show_default(key)} instead.")
    return view, notices


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        # repr is the shortest text that reads back to the same float: round trips exactly.
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    return str(value)


def to_query_params(view: ViewParams) -> dict[str, str]:
    """Query parameters for a link to `view`: only the values that differ from the defaults."""
    return {key: _format(getattr(view, key)) for key in KEYS if getattr(view, key) != getattr(DEFAULTS, key)}


def link_notices(view: ViewParams) -> list[str]:
    """What a link to `view` could not carry (e.g. a prompt too long): empty when it reopens exactly."""
    return parse_query_params(to_query_params(view))[1]
