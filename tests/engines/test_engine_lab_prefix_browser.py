"""The engine lab's prefix-cache experiment in Chromium against a real vLLM with its prefix cache on:
the reader plays the conversations, the page draws the engine's KV blocks from its events and the
simulator's beside them. The test listens to the same event stream with a subscriber of its own and
checks that the blocks drawn are exactly the blocks the engine reported; and a second engine listed
with an event address nobody publishes on gets a message, not a hang.

The simulator's fit here is made from the session's probe of the other vLLM (the same engine build at
another budget; a probe of a prefix-caching engine would measure its cache): this test checks what
is drawn, not how well it is predicted (engine-bench reports that).
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest

from core.engines.block_map import _key
from core.engines.kinds.vllm import kv_events_endpoint
from core.engines.kv_events import Subscriber
from tests.a11y import axe_violations, describe
from tests.conftest import ARTIFACTS, browser_page, running_app

pytestmark = [pytest.mark.engine, pytest.mark.browser, pytest.mark.prefix_engine]

NAME, SILENT = "vllm-prefix-under-test", "vllm-without-events"

BLOCK_PLOT = """() => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(g => (g.layout.annotations || []).some(a => (a.text || '').includes("engine's blocks")));
    if (!gd) return null;
    const pick = axis => gd.data.filter(t => t.yaxis === axis);
    return {engine: pick('y').flatMap(t => t.customdata || []),
            engine_places: pick('y').flatMap(t => t.x.map((x, i) => t.y[i] + ' ' + x + ' ' + t.name)),
            simulated_places: pick('y2').flatMap(t => t.x.map((x, i) => t.y[i] + ' ' + x + ' ' + t.name))};
}"""


@pytest.fixture(scope="module")
def lab_prefix(vllm_prefix, vllm, vllm_probe):
    from core.engines import experiments
    from core.engines.launch import EngineSetting
    from core.engines.session import LiveEngine

    s = vllm_prefix.setting
    experiments.fit_samples(LiveEngine(EngineSetting(NAME, "vllm", s.budget, s.max_seqs), vllm_prefix.base_url,
                                       vllm_prefix.client, vllm_prefix.version), vllm_probe)
    events = kv_events_endpoint(urlsplit(vllm_prefix.base_url).port)
    nobody = kv_events_endpoint(urlsplit(vllm.base_url).port)  # that engine publishes nothing there
    env = {"PDLAB_MAKE_ENGINE_PORTS": "off",
           "PDLAB_ENGINES": json.dumps([
               {"name": NAME, "url": vllm_prefix.base_url, "model": "smollm2", "engine": "vllm", "budget": s.budget,
                "max_seqs": s.max_seqs, "label": "vLLM with its prefix cache", "kv_events": events},
               {"name": SILENT, "url": vllm.base_url, "model": "smollm2", "engine": "vllm",
                "budget": vllm.setting.budget, "label": "vLLM without events", "kv_events": nobody}])}
    with running_app(env, "engine-lab-prefix") as url:
        yield url, events


def test_the_blocks_drawn_are_the_blocks_the_engine_reported(lab_prefix, browser):
    url, events = lab_prefix
    listener = Subscriber(events)
    try:
        assert listener.wait_connected(10.0)
        with browser_page(browser, 1440, 3600) as page:
            page.goto(f"{url}/engines")
            page.get_by_role("button", name="Play the conversations").wait_for(timeout=120_000)
            page.get_by_role("button", name="Play the conversations").click()
            page.get_by_text("conversation 1: ").first.wait_for(timeout=120_000)  # the blocks as they arrive
            live_problems = axe_violations(page)
            page.get_by_text("Conversations finished: ").first.wait_for(timeout=240_000)
            page.get_by_text("Follow-ups start in").first.wait_for(timeout=120_000)  # the simulated turns
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "engine-lab-prefix.png"), full_page=True)
            assert page.locator("[data-testid=stException]").count() == 0
            drawn = page.evaluate(BLOCK_PLOT)
            assert live_problems == [], describe(live_problems)
            problems = axe_violations(page)
            assert problems == [], describe(problems)
            body = page.inner_text("body")
        table = listener.snapshot()
    finally:
        listener.stop()
    assert table.lost == 0 and table.bad == 0 and table.stored > 0
    # every block the engine reported once the page listened is drawn once, and nothing else is. This
    # listener also heard the page's untimed warm-up, sent before the page listens: one 400-token
    # prompt, one chain of three blocks, stored before any other
    heard = {_key(b.hash): b for b in table.blocks.values()}
    assert len(drawn["engine"]) == len(set(drawn["engine"])) and set(drawn["engine"]) <= set(heard)
    warm = sorted((b for k, b in heard.items() if k not in drawn["engine"]), key=lambda b: b.order)
    assert len(warm) == 3 and warm[0].parent is None and [b.parent for b in warm[1:]] == [b.hash for b in warm[:2]]
    assert max(b.order for b in warm) < min(heard[k].order for k in drawn["engine"])
    # three conversations of four turns: 400 + 3 x 112 + 48 - 1 = 783 positions, six blocks of 128 each,
    # placed in the same conversation, place and turn by the engine's events and by the simulator
    assert len(drawn["engine_places"]) == 18
    assert sorted(drawn["engine_places"]) == sorted(drawn["simulated_places"])
    assert "18 sit in the same conversation, place and turn" in body
    assert "prompt tokens** it was sent" not in body  # markdown rendered, not shown raw


def test_an_engine_that_publishes_no_events_gets_a_message(lab_prefix, browser):
    url, _ = lab_prefix
    with browser_page(browser, 1440, 2400) as page:
        page.goto(f"{url}/engines")
        page.locator("label").filter(has_text="vLLM without events").click()  # the picker's radio
        page.get_by_text("The simulator has no fit for this engine yet").wait_for(timeout=60_000)
        page.get_by_role("button", name="Play the conversations").click()
        page.get_by_text("No blocks to draw: the engine published no KV events").wait_for(timeout=120_000)
        page.get_by_text("Conversations finished: ").first.wait_for(timeout=240_000)
        assert page.locator("[data-testid=stException]").count() == 0
        assert page.get_by_text("The engine reused").count() + page.get_by_text("The simulator predicts").count() \
            <= 1  # no fit under this name: the engine's side only, said once
