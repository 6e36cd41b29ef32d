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
