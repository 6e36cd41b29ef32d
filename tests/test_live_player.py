"""The live view's browser side: how its script is assembled, and a player driven by charts alone.

The player (app/views/live/js/player.js) runs over the steps any source offers it. A page with
charts and no token stream (no controls instance) must still play every step: a tiny Streamlit
page, written to a temporary folder, mounts two charts from a bundled recording (no model) and
nothing else.
"""

from __future__ import annotations

import re
import time

import pytest

from app.shared import replay
from app.views.live import component as live
from tests.conftest import ARTIFACTS, ROOT, browser_page, script_server

LIVE_DIR = ROOT / "app" / "views" / "live" / "js"
N = 10  # steps the page sends
RUN_ID = 7
CHARTS = ("kv", "latency")

PAGE = """
import sys
sys.path.insert(0, {root!r})

import streamlit as st

from app.views.live import component as live
from app.shared import replay

run = replay.bundled("sky-blue")  # a recording: events and context without a model
st.title("Charts alone")
for name in {charts!r}:
    live.mount(live.chart_data(name, {run_id}, run.events[:{n}], run.ctx, 0))
"""


def test_the_script_joins_every_file_in_order_with_one_entry_point() -> None:
    files = sorted(p.name for p in LIVE_DIR.glob("*.js"))
    assert sorted(live.JS_FILES) == files  # a new file is listed, a listed file exists
    assert live.JS_FILES[0] == "state.js" and live.JS_FILES[-1] == "main.js"
    exports = {name: (LIVE_DIR / name).read_text(encoding="utf-8").count("export default") for name in files}
    assert exports == {name: int(name == "main.js") for name in files}
    script = live.script()
    assert script.startswith("const PD_CSS = ") and script.count("export default") == 1
    # The files share one module scope: a name declared at the top of two files would not load.
    declared: dict[str, str] = {}
    for name in live.JS_FILES:
        text = (LIVE_DIR / name).read_text(encoding="utf-8")
        for top in re.findall(r"^(?:function|class|const|let|var)\s+(\w+)", text, flags=re.MULTILINE):
            assert top not in declared, f"{top} declared in {declared[top]} and {name}"
            declared[top] = name
    # The state lives in one object on window: no other global is written.
    assert not re.search(r"window\.__pd", script)


def test_chart_frames_carry_their_step_latency() -> None:
    run = replay.bundled("sky-blue")
    data = live.chart_data("latency", RUN_ID, run.events[:N], run.ctx, 0)
    assert [f["latency_ms"] for f in data["frames"]] == [e.latency_ms for e in run.events[:N]]
    assert "base" in data and "total" not in data


@pytest.fixture(scope="module")
def charts_only_page(tmp_path_factory):
    script = PAGE.format(root=str(ROOT), charts=CHARTS, run_id=RUN_ID, n=N)
    with script_server(script, tmp_path_factory.mktemp("charts_only"), "charts-only") as url:
        yield url


def _player(page) -> dict:
    return page.evaluate("""() => { const p = window.pdLab && window.pdLab.player;
        return p ? {runId: p.runId, shown: p.shown, available: p.available, mode: p.mode,
                    steps: window.pdLab.steps} : null; }""")


def _wait_player(page, shown: int, mode: str) -> None:
    page.wait_for_function(f"(p => p && p.shown === {shown} && p.mode === '{mode}')"
                           "(window.pdLab && window.pdLab.player)", timeout=60_000)


def _wait_kv(page, attr: str, value: int) -> None:
    page.wait_for_function(f"document.querySelector('.pd-chart[data-chart=kv]').dataset.{attr} == '{value}'",
                           timeout=10_000)


@pytest.mark.browser
def test_charts_alone_drive_the_player_to_the_last_step(charts_only_page, browser) -> None:
    prompt_len = replay.bundled("sky-blue").ctx.prompt_len
    with browser_page(browser) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(charts_only_page)
        _wait_player(page, N - 1, "live")
        state = _player(page)
        assert page.locator(".pd-controls").count() == 0  # no token stream on this page
        assert state["runId"] == RUN_ID and state["available"] == N - 1, state
        deadline = time.time() + 10  # each chart applies its steps as the player shows them
        while time.time() < deadline and not all(len(state["steps"].get(c) or []) >= N for c in CHARTS):
            time.sleep(0.2)
            state = _player(page)
        for chart in CHARTS:
            assert state["steps"].get(chart) == list(range(N)), f"{chart}: {state['steps']}"
        _wait_kv(page, "kvColumns", prompt_len + N - 1)
        assert page.locator(".pd-chart[data-chart=kv]").get_attribute("data-applied") == str(N)
        # The keys drive the same clock without a token stream: back one step (paused), then play.
        page.keyboard.press("ArrowLeft")
        _wait_player(page, N - 2, "paused")
        _wait_kv(page, "applied", N - 1)
        page.keyboard.press(" ")
        _wait_player(page, N - 1, "live")
        _wait_kv(page, "applied", N)
        ARTIFACTS.mkdir(exist_ok=True)
        page.wait_for_timeout(500)  # Plotly redraws at most every 100 ms: let the last one land
        page.screenshot(path=str(ARTIFACTS / "live-charts-only.png"))
        assert errors == []


STALE_PAGE = """
import sys
sys.path.insert(0, {root!r})

import streamlit as st

from app.views.live import component as live
from app.shared import replay

run = replay.bundled("sky-blue")
older = st.session_state.setdefault("older", live.sent_stamp())  # the pass that saw the run queued
st.title("A stale element after the current one")
live.mount(live.controls_data({run_id}, {{"state": "done", "text": "Finished"}}, run.events[:{n}], run.ctx, 0))


@st.fragment
def later():  # a fragment pass: the element above is not sent again
    if st.button("Render the stale element"):
        queued = live.controls_data(None, {{"state": "queued", "text": "Waiting"}}, [], None, 0)
        live._component(key="pd-live-stale", data={{**queued, "sent": older}})  # it feeds the same view


later()
"""


@pytest.fixture(scope="module")
def stale_page(tmp_path_factory):
    script = STALE_PAGE.format(root=str(ROOT), run_id=RUN_ID, n=N)
    with script_server(script, tmp_path_factory.mktemp("stale"), "stale-send") as url:
        yield url


@pytest.mark.browser
def test_a_stale_send_rendered_after_the_current_one_changes_nothing(stale_page, browser) -> None:
    """The load test once ended with a finished run's controls saying 'queued': an element from the
    pass that saw the run queued was rendered after the final pass and fed the same view."""
    view = "(window.pdLab && window.pdLab.player && window.pdLab.player.views.get('controls'))"
    with browser_page(browser) as page:
        page.goto(stale_page)
        controls = page.locator(".pd-controls")
        page.wait_for_function("document.querySelector('.pd-controls[data-status=done]') !== null", timeout=60_000)
        page.get_by_role("button", name="Render the stale element").click()
        # either outcome: the view ignored the send, or took it (and says 'queued' again)
        page.wait_for_function(f"(v => v && (v.staleSends === 1 || v.status.state === 'queued'))({view})",
                               timeout=60_000)
        assert controls.count() == 1  # the stale element stays empty
        assert controls.get_attribute("data-status") == "done"
        assert controls.get_attribute("data-run-id") == str(RUN_ID)
