"""The engine lab page in Chromium where no engine answers: it lists the make-engine engines as not
answering, shows the operator's bad entry as a message, and plays the bundled recording (measured
ticks, the simulator's ticks under them, the engine's metrics, the errors). Screenshots go to
artifacts/.

The app runs with the make-engine ports moved to loopback ports nobody listens on, so a developer's
running engine (8601-8604) is never seen; the live-engine tests live in tests/engines/.
"""

from __future__ import annotations

import json
import socket

import pytest

from tests.conftest import ARTIFACTS, browser_page, free_port, running_app

pytestmark = [pytest.mark.browser]

READY = "Run finished: "  # the recording's status line under its setting's heading


def _closed_base() -> int:
    """A port p with p, p+1, p+2 all refusing connections on 127.0.0.1 right now."""
    while True:
        base = free_port()
        if base + 2 > 65535:
            continue
        refused = []
        for port in (base, base + 1, base + 2):
            with socket.socket() as s:
                s.settimeout(0.5)
                refused.append(s.connect_ex(("127.0.0.1", port)) != 0)
        if all(refused):
            return base


@pytest.fixture(scope="module")
def lab_server():
    env = {"PDLAB_MAKE_ENGINE_PORTS": str(_closed_base()),
           "PDLAB_ENGINES": json.dumps([{"name": "Not A Name", "url": "http://127.0.0.1:1", "model": "m"}])}
    with running_app(env, "engine-lab") as url:
        yield url


def _open(page, url: str) -> None:
    page.goto(f"{url}/engines")
    page.get_by_text(READY).first.wait_for(timeout=120_000)
    page.wait_for_function("""() => {
        const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
        return plots.length >= 3 && plots.every(gd => gd._fullLayout && (gd.data || []).length > 0);
    }""", timeout=60_000)


def _traces(page) -> list[dict]:
    return page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
        title: ((gd.layout.title || {}).text || '').replace(/<[^>]+>/g, ''),  // Streamlit bolds it
        names: (gd.data || []).map(t => t.name || ''),
        stall: (gd.data || []).filter(t => (t.name || '').startsWith('stall')).map(t => (t.x || []).length)}))""")


def test_recording_mode_lists_the_engines_and_plays_the_recording(lab_server, browser):
    with browser_page(browser, 1440, 4200) as page:
        _open(page, lab_server)
        assert page.locator("[data-testid=stException]").count() == 0
        body = page.inner_text("body")
        assert body.count("not answering") == 4  # the four make-engine engines, on ports nobody serves
        assert "PDLAB_ENGINES entry 1 is skipped" in body  # the operator's bad entry, in words
        assert "A recording, not a live run: measured on" in body
        assert "make engine" in body and "Start the run" not in body
        plots = _traces(page)
        ticks = [p for p in plots if "tokens" in p["title"] and p["title"].endswith("(measured)")]
        simulated = [p for p in plots if p["title"].endswith("(simulated)")]
        assert ticks and simulated and len(ticks) == len(simulated)
        assert all(n.endswith("(simulated)") or n == "request sent" for p in simulated for n in p["names"])
        assert all(p["stall"] and p["stall"][0] >= 3 for p in ticks + simulated)  # a stall bar in the rows
        metrics = [p for p in plots if p["title"].startswith("What the engine reported")]
        assert metrics and all(n.endswith("(engine's metrics)") for p in metrics for n in p["names"])
        assert page.get_by_text("error (computed)").count() >= 1
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "engine-lab-recording.png"), full_page=True)


def test_recording_mode_on_a_narrow_screen_and_after_a_recheck(lab_server, browser):
    with browser_page(browser, 820, 6000) as page:
        _open(page, lab_server)
        page.get_by_role("button", name="Check the engines again").click()
        page.wait_for_function("() => document.body.innerText.split('not answering').length - 1 === 4",
                               timeout=60_000)
        page.get_by_text(READY).first.wait_for(timeout=60_000)
        assert page.locator("[data-testid=stException]").count() == 0
        page.screenshot(path=str(ARTIFACTS / "engine-lab-recording-narrow.png"), full_page=True)
