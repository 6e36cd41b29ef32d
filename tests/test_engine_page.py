"""The engine lab page without a browser (AppTest), where no engine answers: it plays the bundled
recording, lists the operator's engines with their health, shows a bad setting as a message, and a
run on an engine that is down ends in words, never a traceback."""

from __future__ import annotations

import json
import socket

import pytest
from streamlit.testing.v1 import AppTest

from app.shared.jobs import RunQueue
from app.views.engines import health as engine_health
from app.views.engines.jobs import CalibrateJob, StallRunJob
from core.engines.endpoints import Endpoint
from tests.apptest import open_view


def _closed_port() -> int:
    """A loopback port nobody listens on (bound and released: connecting to it is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def no_engines(monkeypatch):
    monkeypatch.setenv("PDLAB_MAKE_ENGINE_PORTS", "off")
    monkeypatch.delenv("PDLAB_ENGINES", raising=False)
    engine_health.forget()
    yield
    engine_health.forget()


def _app(session: dict | None = None) -> AppTest:
    return open_view("engines", session=session)


def _text(at: AppTest) -> str:
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info]
                     + [w.value for w in at.warning] + [e.value for e in at.error])


def test_without_an_engine_the_page_plays_the_recording(no_engines):
    at = _app()
    text = _text(at)
    assert "No engine is configured on this server." in text
    assert "plays a recording" in text and "A **recording**, not a live run: measured on" in text
    assert "Run finished: 5 requests" in text  # the recording's own status line
    assert "`make engine`" in text and "2-3 minutes" in text
    for word in ("**TTFT**", "**TPOT**", "(E2E − TTFT) / (n − 1)", "**The stall**", "[serving page](./serving)"):
        assert word in text
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    titles = [c["layout"]["title"]["text"] for c in charts]
    assert any(t.endswith("(measured)") and "tokens" in t for t in titles)
    assert any(t.endswith("(simulated)") for t in titles)
    assert any(t.startswith("What the engine reported") for t in titles)
    assert len(at.table) >= 1 and "error (computed)" in at.table[0].value.columns
    assert "lb_start" not in [b.key for b in at.button]  # no engine: no run to start


def test_engines_that_do_not_answer_are_listed_and_bad_settings_are_messages(no_engines, monkeypatch):
    monkeypatch.setenv("PDLAB_MAKE_ENGINE_PORTS", str(_closed_port()))
    monkeypatch.setenv("PDLAB_ENGINES", json.dumps([
        {"name": "box", "url": f"http://127.0.0.1:{_closed_port()}", "model": "m", "label": "The operator's box"},
        {"name": "bad", "url": "gopher://example.org", "model": "m"}]))
    at = _app()
    text = _text(at)
    assert text.count("not answering") == 5  # the four make-engine settings and the operator's
    assert "The operator" in text and "entry 2 is skipped" in text and "http:// or https://" in text
    assert "plays a recording" in text
    assert [b.key for b in at.button] == ["lb_recheck"]  # nothing to start a run with


def test_a_run_on_an_engine_that_is_down_ends_in_words(no_engines):
    port = _closed_port()
    down = Endpoint("down", "A stopped engine", f"http://127.0.0.1:{port}", "smollm2", None, 256)
    job = StallRunJob(RunQueue(), down, streams=2).start()
    job.join(60)
    assert job.status == "done" and job.run is None
    assert job.failure.startswith("A stopped engine is not answering (no answer from")
    cal = CalibrateJob(RunQueue(), down).start()
    cal.join(60)
    assert cal.status == "done" and "is not answering" in cal.failure and cal.entry is None
    # the session's ended run stays on the page even though no engine answers now
    at = _app({"lb_run_job": job, "lb_seen_jobs": {job.id}})
    text = _text(at)
    assert "No engine answers right now" in text
    assert "The run on A stopped engine could not start: A stopped engine is not answering" in text
    assert f":{port}" not in text  # an operator's engine is named, its address never shown
    assert "The bundled recording" in [e.label for e in at.expander][-1]


def test_streams_out_of_range_are_refused():
    with pytest.raises(ValueError, match="from 1 to 8"):
        StallRunJob(RunQueue(), Endpoint("x", "x", "http://127.0.0.1:1", "m"), streams=9)
