"""The script each reader's session runs: page setup and the router (served through app/streamlit_app.py).

Streamlit Community Cloud runs the entry point with the project not installed, so the repository
root is put on sys.path (here too: this script runs on its own in AppTest) before anything imports
`core`. The pages are registered with Streamlit's own router (`st.navigation`), one module per page
in app/views, each imported when first shown; the live page is the default, at `/`, and keeps every
link it ever had (`?page=live|compare|batching|replay` plus prompt and settings: those name a
lesson section inside the page, not a page of the router).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import importlib  # noqa: E402

import streamlit as st  # noqa: E402

from app.shared.palette import PAGE_CSS  # noqa: E402

st.set_page_config(page_title="Prefill & Decode Lab", page_icon="⚡", layout="wide")
st.html(PAGE_CSS)  # on every page: readable captions (see palette.PAGE_CSS)


def _view(name: str):
    """The page's render(), its module imported when the page is first shown: a server whose readers
    open only the live page never holds the other pages' libraries (pandas, the engine lab's client,
    the simulator), which keeps its memory down."""
    def render() -> None:
        importlib.import_module(f"app.views.{name}.view").render()
    render.__name__ = f"render_{name}"
    return render


PAGES = [
    st.Page(_view("live"), title="Live: prefill and decode", icon=":material/bolt:", url_path="live", default=True),
    st.Page(_view("whatif"), title="What if: any model, any GPU", icon=":material/tune:", url_path="whatif"),
    st.Page(_view("serving"), title="Serving: scheduling simulated", icon=":material/dns:", url_path="serving"),
    st.Page(_view("engines"), title="Engine lab: a real server measured", icon=":material/science:",
            url_path="engines"),
]

st.navigation(PAGES, position="top").run()
