"""Entry point: `streamlit run app/streamlit_app.py` from the repository root.

Streamlit Community Cloud runs exactly that with the project not installed, so the repository
root is put on sys.path before anything imports `core`. The title is drawn before the heavy
imports (torch, transformers) so the first paint does not wait for them.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

st.set_page_config(page_title="Prefill & Decode Lab", page_icon="⚡", layout="wide")

from app.views.live import render  # noqa: E402

render()
