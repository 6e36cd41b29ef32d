"""How many words a reader meets on a page: the measure behind the lesson's 1,500-word reading path.

The words of the visible text (`innerText`) of the page's main area, in the window the caller set,
after scrolling through it (charts out of view draw only once seen), with the text that assistive
technology skips (`aria-hidden`, such as Streamlit's icon ligatures) left out. Closed expanders hide
their contents, so `reading_path_words` is what a reader sees without opening anything and
`all_words` is the same count with every expander open. Tokens drawn one per element count as words.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"\S+")

# The main area's innerText minus that of every outermost aria-hidden element inside it.
_VISIBLE_TEXT_JS = """() => {
  const main = document.querySelector('[data-testid="stMain"]') || document.body;
  const hidden = Array.from(main.querySelectorAll('[aria-hidden="true"]'))
    .filter(el => !el.parentElement || !el.parentElement.closest('[aria-hidden="true"]'));
  return {text: main.innerText, hidden: hidden.map(el => el.innerText || '')};
}"""

_SCROLL_THROUGH_JS = """async () => {
  const step = Math.max(200, Math.floor(window.innerHeight * 0.8));
  for (let y = 0; y < document.documentElement.scrollHeight; y += step) {
    window.scrollTo(0, y);
    const main = document.querySelector('[data-testid="stMain"]');
    if (main && main.scrollHeight > main.clientHeight) main.scrollTop = y;
    await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  }
  window.scrollTo(0, 0);
}"""


def count_words(text: str) -> int:
    return len(_WORD.findall(text))


def visible_words(page) -> int:
    """Words of the main area's visible text, aria-hidden text left out."""
    got = page.evaluate(_VISIBLE_TEXT_JS)
    return max(0, count_words(got["text"]) - sum(count_words(t) for t in got["hidden"]))


def scroll_through(page) -> None:
    page.evaluate(_SCROLL_THROUGH_JS)


def open_every_expander(page) -> int:
    """Open every closed expander of the main area (clicking its summary, as a reader would); how many."""
    summaries = page.locator('[data-testid="stMain"] [data-testid="stExpander"] details:not([open]) > summary')
    n = summaries.count()
    for _ in range(n):
        first = summaries.first
        if not first.count():
            break
        first.click()
    return n


def lesson_words(page) -> dict[str, int]:
    """`lesson_words_default` (expanders as the page left them) and `lesson_words_total` (all open)."""
    scroll_through(page)
    default = visible_words(page)
    open_every_expander(page)
    scroll_through(page)
    return {"lesson_words_default": default, "lesson_words_total": visible_words(page)}
