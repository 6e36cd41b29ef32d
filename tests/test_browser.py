"""The page in Chromium: type a prompt, generate, read the answer, keep a screenshot."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ARTIFACTS, ROOT, free_port, start_streamlit, stop, wait_healthy

pytestmark = [pytest.mark.browser, pytest.mark.model]


def test_prompt_to_answer_in_chromium(app_server, page):
    page.goto(app_server)
    box = page.get_by_label("Prompt")
    box.wait_for(timeout=180_000)
    box.fill("What is the capital of France? <b>bold?</b>")
    page.get_by_role("button", name="Generate").click()
    output = page.get_by_test_id("pd-output")
    output.wait_for(timeout=180_000)
    assert output.inner_text().strip()
    # Readers get the app, not Streamlit's developer chrome (.streamlit/config.toml: toolbarMode viewer).
    assert page.get_by_role("button", name="Deploy").count() == 0
    assert page.get_by_text("Clear cache").count() == 0
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "first-page.png"), full_page=True)


CLOUD_LAUNCHER = """
import sys, os
root = os.getcwd()
# Community Cloud runs `streamlit run app/streamlit_app.py` with the project not installed:
# drop the repository root and any editable-install finder so only the app's own bootstrap helps.
sys.path[:] = [p for p in sys.path if p not in ("", root)]
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
try:
    import core  # noqa: F401
    print("PRECONDITION-FAILED: core importable before the app ran", flush=True)
    sys.exit(3)
except ImportError:
    pass
from streamlit.web.cli import main
sys.argv = ["streamlit", *sys.argv[1:]]
sys.exit(main())
"""


def test_starts_the_way_community_cloud_starts_it(page, tmp_path):
    launcher = tmp_path / "cloud_launcher.py"
    launcher.write_text(CLOUD_LAUNCHER)
    port = free_port()
    proc = start_streamlit([sys.executable, str(launcher)], port, cwd=ROOT, log_name="cloud",
                           env={"PYTHONPATH": ""})
    try:
        wait_healthy(port, proc)
        page.goto(f"http://127.0.0.1:{port}")
        page.get_by_label("Prompt").wait_for(timeout=180_000)
        log = Path(ARTIFACTS / f"cloud-{port}.log").read_text()
        assert "ModuleNotFoundError" not in log and "PRECONDITION-FAILED" not in log
        assert page.get_by_text("ModuleNotFoundError").count() == 0
    finally:
        stop(proc)


def test_the_server_loads_the_model_when_it_starts_before_any_page_opens():
    """The entry point's start-up hook starts the model's load (app/streamlit_app.py): with no page
    ever opened, the server's /pdlab/model route (which starts nothing itself) reaches "ready"."""
    port = free_port()
    proc = start_streamlit([sys.executable, "-m", "streamlit"], port, log_name="preload")
    try:
        wait_healthy(port, proc)
        deadline, state = time.time() + 180, None
        while time.time() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/pdlab/model", timeout=10) as resp:
                state = json.load(resp)
            if state["state"] not in ("idle", "loading"):
                break
            time.sleep(0.2)  # the route's poll interval
        assert state == {"state": "ready"}, state
    finally:
        stop(proc)


def test_chromium_is_the_debian_one():
    assert os.path.exists(os.environ.get("PDLAB_CHROMIUM", "/usr/bin/chromium"))
