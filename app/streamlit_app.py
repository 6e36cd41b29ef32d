"""Entry point: `streamlit run app/streamlit_app.py` from the repository root (the Community Cloud main file).

Streamlit finds the `st.App` below and serves app/navigation.py (the script each reader's session
runs: page setup and the router) through it. The App is here for its start-up hook: the server
begins loading the embedded model (preparing it first, on a fresh machine) as soon as it starts,
not when the first reader opens the page, so that reader waits only for what is left of the load.
Its one extra route, `/pdlab/model`, says where the model stands ({"state": "idle" | "loading" |
"ready" | "failed"}) without starting anything: a presenter or a deployment's health check can ask
before anyone opens the page.
"""

import sys
import threading
from contextlib import asynccontextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402


def _start_model_load() -> None:
    from app.shared.model import model_loader

    model_loader()  # starts the server's one background load and returns


@asynccontextmanager
async def _lifespan(_app):
    # importing the model's libraries takes seconds: off the event loop, so the server answers at once
    threading.Thread(target=_start_model_load, name="pdlab-preload", daemon=True).start()
    yield


async def _model_state(_request) -> JSONResponse:
    from app.shared.model import model_load_state

    return JSONResponse(model_load_state())


app = st.App("navigation.py", lifespan=_lifespan, routes=[Route("/pdlab/model", _model_state)])
