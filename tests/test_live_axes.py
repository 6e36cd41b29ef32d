"""A live chart's y axes cover its data in every state of the live drawing (no model).

Reported: a 48-token run whose memory traffic chart ended with both axes at 0-4 ("MB per step",
"MB total") and its 538 MB bars flat at the top. Plotly.react skips its autorange when told the
data did not change (an unchanged `datarevision`) and then gives each autoranged axis its default
range; the live view's throttled redraws (a queued redraw that fires after the step was already
drawn) redraw without a new step. A tiny Streamlit page mounts every live chart from a bundled
48-token recording and puts them through such redraws, a width change, a step back and forward,
and a legend toggle, checking the axes after each.
"""

from __future__ import annotations

import statistics

import pytest

from app.shared import replay
from app.views.live import charts, figures, shown
from core import perf
from tests.conftest import ARTIFACTS, ROOT, browser_page, script_server
from tests.live_axes import assert_axes_cover_data, wait_settled

RECORDING = "sky-blue"  # 48 tokens, like the reported run
RUN_ID = 11
CHARTS = charts.NAMES

PAGE = """
import sys
sys.path.insert(0, {root!r})

import streamlit as st

from app.views.live import charts
from app.views.live import component as live
from app.shared import replay

run = replay.bundled({recording!r})
st.title("Every live chart")
for name in charts.NAMES:
    live.mount(live.chart_data(name, {run_id}, run.events, run.ctx, 0))
"""


@pytest.fixture(scope="module")
def charts_page(tmp_path_factory):
    script = PAGE.format(root=str(ROOT), recording=RECORDING, run_id=RUN_ID)
    with script_server(script, tmp_path_factory.mktemp("live_axes"), "live-axes") as url:
        yield url


def test_latency_and_traffic_say_in_plain_words_what_they_show() -> None:
    """Both errors in the latency title (the prefill's signed), the error's sign defined on the
    chart, no code names, and every series labelled measured, computed or predicted."""
    run = replay.bundled(RECORDING)
    events, ctx = run.events, run.ctx
    latency = charts.figure_dict("latency", events, ctx)
    prefill = perf.prediction_error_pct(events[0].predicted_ms, events[0].latency_ms)
    title = latency["layout"]["title"]["text"]
    assert f"prefill {shown.signed_pct(prefill)}" in title, title
    decode = [perf.prediction_error_pct(e.predicted_ms, e.latency_ms) for e in events[1:]]
    fast = sum(1 for x in decode if x < 0)
    assert f"decode {shown.signed_pct(statistics.median(decode))} (the steps' median; {fast} of {len(decode)} " \
           "predicted too fast)" in title, title
    notes = " ".join(a["text"] for a in latency["layout"]["annotations"])
    assert "(predicted − measured) ÷ measured" in notes and "below 0 = predicted too fast" in notes
    traffic = charts.figure_dict("traffic", events, ctx)
    for fig in (latency, traffic):
        words = [fig["layout"]["title"]["text"], *(t["name"] for t in fig["data"]),
                 *(a["text"] for a in fig["layout"].get("annotations", []))]
        assert not [w for w in words if "core." in w], words
        assert all(any(k in t["name"] for k in ("measured", "computed", "predicted")) for t in fig["data"])
    assert f"{ctx.weight_bytes / 1e6:,.0f} MB" in traffic["layout"]["title"]["text"]  # the finding, with its size
    first = figures.latency_base(ctx)["layout"]["title"]["text"]  # before any step: the line is there
    assert "prediction error" in first


def _redraw_without_a_new_step(page) -> None:
    # What a queued redraw does when its timer fires after the step it waited for was drawn:
    # the same step, drawn again.
    page.evaluate("""() => { for (const [id, v] of window.pdLab.player.views) if (v.fig) v.react(); }""")


def _settled_check(page, when: str) -> None:
    wait_settled(page, CHARTS)
    assert_axes_cover_data(page, CHARTS, when)


@pytest.mark.browser
def test_every_live_chart_keeps_axes_that_cover_its_data(charts_page, browser) -> None:
    n = len(replay.bundled(RECORDING).events)
    # Tall enough that every chart is in view, so every chart is redrawn at every step.
    with browser_page(browser, width=1440, height=3200) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(charts_page)
        page.wait_for_function(f"(p => p && p.shown === {n - 1})(window.pdLab && window.pdLab.player)",
                               timeout=60_000)
        for name in CHARTS:
            page.wait_for_function(f"document.querySelector('.pd-chart[data-chart={name}]')"
                                   f"?.dataset.applied === '{n}'", timeout=20_000)
        _settled_check(page, "after the last step")
        traffic = {r["axis"]: r for r in assert_axes_cover_data(page, CHARTS) if r["chart"] == "traffic"}
        assert traffic["yaxis"]["dataMax"] > 500 and traffic["yaxis2"]["dataMax"] > 20_000, traffic
        # the legend's keys are drawn by the page, not Plotly: the boxed waits' key is a square, as on
        # the chart (a reader saw a circle beside the text's "pink squares")
        keys = dict(page.evaluate("""() => Array.from(document.querySelectorAll(
            '.pd-chart[data-chart=latency] .pd-legend-item')).map(i => [i.innerText.trim(),
            Array.from(i.querySelectorAll('svg > *')).map(e => e.tagName)])"""))
        boxed = next(tags for text, tags in keys.items() if text.startswith("boxed"))
        assert boxed == ["rect"], keys
        assert "circle" in next(tags for text, tags in keys.items() if text.startswith("predicted")), keys

        _redraw_without_a_new_step(page)
        _settled_check(page, "redrawn with no new step")
        _redraw_without_a_new_step(page)  # twice: the first redraw must not leave a trap for the next
        _settled_check(page, "redrawn twice with no new step")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "live-axes-redrawn.png"))

        page.set_viewport_size({"width": 700, "height": 3200})  # the width observer redraws every chart
        page.wait_for_function("document.querySelector('.pd-chart[data-chart=traffic] .js-plotly-plot')"
                               "._fullLayout.width < 700", timeout=10_000)
        _settled_check(page, "after a width change")
        _redraw_without_a_new_step(page)
        _settled_check(page, "after a width change, redrawn")

        page.keyboard.press("ArrowLeft")  # step back: every chart redraws from its base
        page.wait_for_function(f"window.pdLab.player.shown === {n - 2}", timeout=10_000)
        _settled_check(page, "one step back")
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"window.pdLab.player.shown === {n - 1}", timeout=10_000)
        _settled_check(page, "one step forward again")

        weights = page.locator(".pd-chart[data-chart=traffic] .pd-legend-item").first
        weights.click()  # hide the weights: the per-step axis shrinks to the KV bars
        page.wait_for_function("document.querySelector('.pd-chart[data-chart=traffic] .js-plotly-plot')"
                               "._fullData[0].visible === 'legendonly'", timeout=10_000)
        _settled_check(page, "weights hidden")
        weights.click()
        page.wait_for_function("document.querySelector('.pd-chart[data-chart=traffic] .js-plotly-plot')"
                               "._fullData[0].visible === true", timeout=10_000)
        _settled_check(page, "weights shown again")
        _redraw_without_a_new_step(page)
        _settled_check(page, "weights shown again, redrawn")
        assert errors == []
