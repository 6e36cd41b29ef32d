"""The live page's reading path: six questions, each answered in a sentence or two with this run's numbers.

A section is its question (the heading, in the lesson's own words), its answer (a short Markdown
template in assets/lesson/answers/, filled from the run by app.views.live.lesson) and, one click down,
"How we know": the arithmetic, caveats and error analysis that used to fill the page. The order is
the page's: the three questions the live charts answer come first (they animate in one fragment
while the model runs), then the three drawn when the run has ended.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import streamlit as st

from app.views.live import lesson

# An answer is read in one breath: at most this many words, with its numbers filled in.
ANSWER_MAX_WORDS = 50


@dataclass(frozen=True)
class Section:
    key: str  # assets/lesson/answers/<key>.md, and the anchor of its heading
    question: str


SECTIONS: tuple[Section, ...] = (
    Section("phases", "What is the difference between prefill and decode?"),
    Section("bandwidth", "Why is LLM decode memory bandwidth bound?"),
    Section("paper", "Why is decode often slower than it looks on paper?"),
    Section("cache", "How does the KV cache affect generation latency?"),
    Section("batching", "What does batching do to decode?"),
    Section("serving", "Why should serving systems schedule prefill and decode separately?"),
)
_BY_KEY = {s.key: s for s in SECTIONS}


def section(key: str) -> Section:
    return _BY_KEY[key]


def answer(key: str, values: dict[str, str]) -> str:
    """The section's answer with this run's numbers ('' until every number it needs is known)."""
    template = lesson.raw(f"answers/{key}")
    if any(values.get(slot) in (None, "") for slot in lesson.slots(template)):
        return ""
    return lesson.fill(template, values).strip()


def heading(key: str) -> None:
    st.header(section(key).question, anchor=f"q-{key}", divider="gray")


def render_answer(key: str, values: dict[str, str], waiting: str = "") -> None:
    """The answer as the section's lead paragraph; `waiting` (or nothing) while its numbers are unknown."""
    show_answer(key, answer(key, values), waiting)


def show_answer(key: str, text: str, waiting: str = "") -> None:
    """An answer already filled (`answer`'s text, '' while its numbers are unknown): the one place
    that draws an answer, in the container the tests and the tour find it by (pd_answer_<key>)."""
    if text:
        with st.container(key=f"pd_answer_{key}"):
            st.markdown(text)
    elif waiting:
        st.caption(waiting)


@contextmanager
def how_we_know(topic: str = "") -> Iterator[None]:
    """The details of a section, one click down."""
    with st.expander("How we know" + (f": {topic}" if topic else "")):
        yield
