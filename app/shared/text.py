"""Text made safe to show: what a reader, a file or a link supplied never becomes markup on the page."""

from __future__ import annotations

import re

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$])")


def plain(text: str) -> str:
    """Text shown literally by st.markdown-based elements: Markdown and HTML specials escaped."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def safe_name(name: str) -> str:
    """A file name fit to show inside a message: plain characters only, never markup."""
    cleaned = re.sub(r"[^A-Za-z0-9._ -]", "_", str(name or "file"))[:80]
    return cleaned or "file"


_DTYPE_WORDS = {"float32": "32-bit floats (4 bytes per weight)", "fp32": "32-bit floats (4 bytes per weight)",
                "bfloat16": "16-bit bfloat16 numbers (2 bytes per weight)", "bf16": "16-bit bfloat16 numbers (2 bytes per weight)",
                "float16": "16-bit floats (2 bytes per weight)", "fp16": "16-bit floats (2 bytes per weight)"}


def describe_weights(source: str, dtype: str | None = None) -> str:
    """Where a run's weights came from, in words (the trace keeps the short code, e.g. gguf-q4_1-dequantised)."""
    held = f" held as {_DTYPE_WORDS[dtype]}" if dtype in _DTYPE_WORDS else ""
    if source == "gguf-q4_1-dequantised":
        return ("a 4-bit (Q4_1) copy shipped with the app, expanded back to full-size numbers for the CPU"
                + (f": {_DTYPE_WORDS[dtype]}" if dtype in _DTYPE_WORDS else ""))
    if source == "hub-original":
        return "the original weights from the Hugging Face hub" + held
    if source == "local-folder":
        return "a model folder on this server" + held
    return str(source) + held


def stop_sentence(reason: str | None, n_tokens: int, max_new_tokens: int | None) -> str:
    """Why the answer ends where it does, for the line under it."""
    if reason == "max_new_tokens":
        limit = max_new_tokens or n_tokens
        return f"Stopped at the {limit}-token limit: it may end mid-sentence."
    if reason == "eos":
        return "The model ended the answer itself: it produced its end-of-turn token."
    if reason == "stopped":
        return f"You stopped this run after {n_tokens} tokens."
    return ""
