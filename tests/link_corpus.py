"""Today's links, and what each opens: the corpus the page-package move is held to.

Every page, every `page=` value of the live page, settings on each page, the bundled recordings,
and bad values (which open a page with a notice). For each link the snapshot keeps what a reader
gets from it: the page's first heading, the value of every keyed widget, the link the page writes
back, and the notices it shows. Nothing measured is kept (times differ run to run).

    python -m tests.link_corpus          # record tests/data/link_corpus.json from the code as it is

tests/test_link_corpus.py opens every link again and compares.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.apptest import open_app, open_view

CORPUS = Path(__file__).resolve().parent / "data" / "link_corpus.json"

# (page, query): "live" opens the whole app (its default page); the others open that page's view.
LINKS: list[tuple[str, dict[str, str]]] = [
    ("live", {}),
    ("live", {"page": "compare"}),
    ("live", {"page": "batching"}),
    ("live", {"page": "replay"}),
    ("live", {"page": "replay", "trace": "moon-facts"}),
    ("live", {"page": "replay", "trace": "long-prompt"}),
    ("live", {"prompt": "Why is the sky blue?", "max_new_tokens": "24", "temperature": "0.7", "top_k": "40",
              "top_p": "0.9", "seed": "7", "cache": "static"}),
    ("live", {"presenter": "1"}),
    ("live", {"page": "nonsense", "max_new_tokens": "999999", "cache": "???", "trace": "nope"}),
    ("whatif", {}),
    ("whatif", {"model": "llama-3.1-70b", "hw": "a100-80gb", "w": "fp8", "kv": "fp8", "batch": "16",
                "prompt": "4096", "gen": "512", "tp": "4"}),
    ("whatif", {"model": "llama-3.1-8b", "draft": "llama-3.2-1b", "gamma": "5", "alpha": "0.6"}),
    ("whatif", {"prompt": "4096", "cached": "3072"}),
    ("whatif", {"prompt": "100", "cached": "100"}),  # as long as the prompt: a message, the page still opens
    ("whatif", {"hw": "custom", "cmem": "48", "cbw": "900", "cbf16": "300"}),
    ("whatif", {"hw": "host", "w": "fp32"}),
    ("whatif", {"model": "nonsense", "batch": "-3", "tp": "999", "w": "int3"}),
    ("serving", {}),
    ("serving", {"n": "200", "b": "prefill-first", "budget": "256"}),
    ("serving", {"a": "static", "b": "disaggregated", "n": "100"}),
    ("serving", {"n": "abc", "b": "nonsense", "kv": "-1"}),
    ("engines", {}),
]


def _widgets(at: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("text_area", "text_input", "selectbox", "slider", "number_input", "checkbox", "toggle",
                 "radio", "select_slider", "multiselect"):
        for w in getattr(at, kind, []):
            key = getattr(w, "key", None)
            if key:
                value = w.value
                out[f"{kind}:{key}"] = list(value) if isinstance(value, tuple) else value
    return dict(sorted(out.items()))


def _notices(at: Any) -> list[str]:
    """What the page says about the link itself (a value that fell back, a name it does not know)."""
    texts = [e.value for e in [*at.warning, *at.caption, *at.info, *at.error]]
    words = ("link", "parameter", "not one of", "fell back", "ignored", "unknown")
    return sorted(t for t in texts if isinstance(t, str) and any(w in t.lower() for w in words))


def _model_ready(timeout: float = 300) -> None:
    """The live page shows a recording until the model is loaded: wait for the load, so a link opens
    the same page however soon after the server started it is opened."""
    from app.shared.model import model_loader

    assert model_loader().done.wait(timeout), "the embedded model did not load"


def snapshot(page: str, query: dict[str, str]) -> dict[str, Any]:
    if page == "live":
        _model_ready()
    at = open_app(query=query) if page == "live" else open_view(page, timeout=120, query=query)
    headings = [e.value for e in [*at.title, *at.header, *at.subheader]]
    return {"page": page, "query": query, "heading": headings[0] if headings else None,
            "widgets": _widgets(at), "link": dict(sorted(dict(at.query_params).items())),
            "notices": _notices(at)}


def record() -> list[dict[str, Any]]:
    return [snapshot(page, query) for page, query in LINKS]


if __name__ == "__main__":
    CORPUS.parent.mkdir(exist_ok=True)
    CORPUS.write_text(json.dumps(record(), indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    print(f"wrote {len(LINKS)} links to {CORPUS}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(0)  # the server's background calibration thread is still running; nothing left to keep
