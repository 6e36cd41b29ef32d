"""Open a page in Streamlit's AppTest (no browser): the whole app, or one page's view alone.

One builder for every AppTest in the suite, so each test says only what it opens and with what:
`open_app()` runs app/navigation.py (the live page, with its router), `open_view("whatif")`
runs that page's render() by itself; both take the link's query parameters and session values
to start from, run the first pass, and fail on an exception in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app" / "navigation.py")


def _render_view(name: str) -> None:
    """The script AppTest runs for one page (its source is run on its own: imports stay inside)."""
    import importlib

    importlib.import_module(f"app.views.{name}.view").render()


def _start(at: AppTest, query: Mapping[str, str] | None, session: Mapping[str, Any] | None,
           run: bool) -> AppTest:
    for key, value in (query or {}).items():
        at.query_params[key] = value
    for key, value in (session or {}).items():
        at.session_state[key] = value
    if run:
        at.run()
        assert not at.exception, at.exception
    return at


def open_app(timeout: float = 240, query: Mapping[str, str] | None = None,
             session: Mapping[str, Any] | None = None, run: bool = True) -> AppTest:
    """The whole app as Streamlit runs it (the live page unless the query says otherwise)."""
    return _start(AppTest.from_file(APP, default_timeout=timeout), query, session, run)


def open_view(name: str, timeout: float = 60, query: Mapping[str, str] | None = None,
              session: Mapping[str, Any] | None = None, run: bool = True) -> AppTest:
    """One page's view (app.views.<name>.render) by itself."""
    at = AppTest.from_function(_render_view, default_timeout=timeout, args=(name,))
    return _start(at, query, session, run)
