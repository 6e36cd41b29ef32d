"""The engine lab page in Chromium against a real vLLM: the reader picks it from the operator's
list, runs the stall experiment, calibrates the simulator to the engine, and sees the measured
rows of ticks with the simulated ones under them and the errors in numbers. Structure only: every
request drawn, the stall bar present, no exception; the screenshots go to artifacts/ to be looked at.

The app sees only the engine under test (the make-engine ports are switched off), listed the way an
operator lists one: through PDLAB_ENGINES.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import ARTIFACTS, browser_page, running_app

pytestmark = [pytest.mark.engine, pytest.mark.browser]

NAME = "vllm-under-test"


@pytest.fixture(scope="module")
def lab_live(vllm, vllm_probe):
    # The simulator is fitted to the engine here from the session's probe (taken before the page and
    # Chromium shared the two cores with it: probed under their load, the fit once missed its own
    # probe and was refused, so the run was never simulated). The page's own calibrate button is
    # still pressed if it shows.
    from core.engines import experiments
    from core.engines.launch import EngineSetting
    from core.engines.session import LiveEngine

    experiments.fit_samples(LiveEngine(EngineSetting(NAME, "vllm", vllm.setting.budget, vllm.setting.max_seqs),
                                       vllm.base_url, vllm.client, vllm.version), vllm_probe)
    env = {"PDLAB_MAKE_ENGINE_PORTS": "off",
           "PDLAB_ENGINES": json.dumps([{"name": NAME, "url": vllm.base_url, "model": "smollm2", "engine": "vllm",
                                         "budget": vllm.setting.budget, "max_seqs": vllm.setting.max_seqs,
                                         "label": "vLLM under test"}])}
    with running_app(env, "engine-lab-live") as url:
        yield url


LIVE_PLOTS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .filter(gd => !gd.closest('[data-testid=stExpander]'))"""  # the bundled recording sits in an expander


PLOT_SUMMARY = """gd => ({
        title: ((gd.layout.title || {}).text || '').replace(/<[^>]+>/g, ''),
        rows: ((gd.layout.yaxis || {}).ticktext || []).length,
        ticking: (gd.data || []).filter(t => (t.name || '').startsWith('an output token') && (t.x || []).length).length,
        stall: (gd.data || []).filter(t => (t.name || '').startsWith('stall')).length})"""


def _plots(page) -> list[dict]:
    return page.evaluate("() => (" + LIVE_PLOTS + ")().map(" + PLOT_SUMMARY + ")")


def test_a_reader_runs_the_stall_on_a_real_engine_and_sees_the_simulator_beside_it(lab_live, vllm, browser):
    with browser_page(browser, 1440, 4000) as page:
        page.goto(f"{lab_live}/engines")
        page.get_by_role("button", name="Start the run").wait_for(timeout=120_000)
        body = page.inner_text("body")
        assert "vLLM under test" in body
        page.get_by_role("button", name="Start the run").click()
        page.get_by_text("Run finished: ").first.wait_for(timeout=300_000)
        assert page.locator("[data-testid=stException]").count() == 0
        calibrate = page.get_by_role("button", name="Calibrate the simulator")
        if calibrate.count():
            calibrate.click()
        # the run's own simulation, drawn once the fit exists (not the recording's, in its expander)
        page.wait_for_function("() => (" + LIVE_PLOTS + ")().map(" + PLOT_SUMMARY + ")"
                               ".some(p => p.title.endsWith('(simulated)'))", timeout=300_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "engine-lab-live.png"), full_page=True)  # before any assertion
        plots = _plots(page)
        measured = [p for p in plots if p["title"].endswith("(measured)") and "tokens" in p["title"]]
        simulated = [p for p in plots if p["title"].endswith("(simulated)")]
        assert measured and simulated
        # four short streams and the long prompt, every one with its tokens, measured and simulated
        assert [p["rows"] for p in (measured[0], simulated[0])] == [5, 5]
        assert [p["ticking"] for p in (measured[0], simulated[0])] == [5, 5]
        assert measured[0]["stall"] and simulated[0]["stall"]
        assert page.locator("[data-testid=stException]").count() == 0
