"""A page's settings in its link, read as untrusted input: the parsing both pages' links share.

Each page names its keys, their defaults and a check per key (a function from the text to a value,
or None when the text is unusable). A bad value falls back to its default and says so in a notice,
so an old or mistyped link still opens the page; only settings that differ from the defaults are
written back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

MAX_VALUE_CHARS = 64


def whole(text: str, low: int, high: int) -> int | None:
    try:
        value = int(text)
    except ValueError:
        return None
    return value if low <= value <= high else None


def number(text: str, low: float, high: float) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if low <= value <= high else None


def parse(raw: Mapping[str, Sequence[str]], defaults: Mapping[str, Any],
          checks: Mapping[str, Callable[[str], Any]]) -> tuple[dict[str, Any], list[str]]:
    """Settings from query parameters (each a list of strings), and a notice per unusable one."""
    out, notices = dict(defaults), []
    for key, values in raw.items():
        if key not in checks or not values:
            continue
        text = str(values[-1])[:MAX_VALUE_CHARS]
        value = checks[key](text)
        if value is None:
            shown = f"the default ({defaults[key]})" if defaults[key] not in ("", None) else "none"
            notices.append(f"The link's {key}={text!r} could not be used; it shows {shown} instead.")
        else:
            out[key] = value
    return out, notices


def to_params(settings: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, str]:
    """Query parameters for these settings: only those that differ from the defaults."""
    return {k: str(settings[k]) for k in defaults if k in settings and settings[k] != defaults[k]}
