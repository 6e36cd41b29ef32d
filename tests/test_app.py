"""The page through Streamlit's AppTest: it loads the real model, runs in the background, and
shows escaped output; bad input is a message, never a traceback."""

from __future__ import annotations

import time

import pytest
from streamlit.testing.v1 import AppTest

from tests.apptest import open_app

pytestmark = pytest.mark.model



def _app() -> AppTest:
    return open_app()


# The first run on a fresh server queues behind the once-per-server calibration and latency fit,
# whose length is the machine's (about 30 s where they were written, minutes on a slower CPU): a
# run's own deadline starts when it leaves the queue, the state the page shows as "queued".
QUEUE_TIMEOUT_S = 600


def _wait_until_started(run: object) -> None:
    deadline = time.time() + QUEUE_TIMEOUT_S
    while run.status == "queued" and time.time() < deadline:
        run.touch()
        time.sleep(0.3)
    assert run.status != "queued", "run still queued behind the server's calibration"


def _wait_for_run(at: AppTest, timeout: float = 200) -> object:
    """Runs happen in a thread; AppTest cannot see the fragment's timer, so poll like the browser does."""
    run = at.session_state["pd_run"]
    _wait_until_started(run)
    deadline = time.time() + timeout
    while run.active and time.time() < deadline:
        run.touch()
        time.sleep(0.3)
    assert not run.active, f"run still {run.status}"
    at.run()
    assert not at.exception, at.exception
    return run


def test_generate_shows_the_answer():
    at = _app()
    at.text_area(key="prompt").set_value("What is the capital of France?")
    at.slider(key="max_new_tokens").set_value(12)
    at.button(key="generate").click().run()
    assert not at.exception
    run = _wait_for_run(at)
    assert run.status == "done"
    assert "Paris" in at.session_state["last_text"]
    html = "".join(m.value for m in at.markdown)
    assert "pd-output" in html
    # the after-run sections and the lesson text filled from this run
    assert any("ONE forward pass" in m.value or "one forward pass" in m.value for m in at.markdown)
    assert f"**{len(run.prompt_ids)} prompt positions**" in "".join(m.value for m in at.markdown)
    # the run's summary names the machine its times were measured on (recordings name theirs)
    from app.shared.experiment_results import this_machine

    summary = [c.value for c in at.caption if "· cache:" in c.value]
    assert summary and f"Run on this server, {this_machine()}" in summary[0]


def test_empty_prompt_is_a_warning_not_a_crash():
    at = _app()
    at.text_area(key="prompt").set_value("   ")
    at.button(key="generate").click().run()
    assert not at.exception
    assert any("prompt" in w.value.lower() for w in at.warning)
    assert at.session_state["pd_run"] is None if "pd_run" in at.session_state else True


def test_too_long_prompt_is_a_clear_message():
    at = _app()
    at.text_area(key="prompt").set_value("token " * 1500)
    at.button(key="generate").click().run()
    assert not at.exception
    assert any("at most 1,024" in w.value for w in at.warning)


def test_stop_mid_run_leaves_a_consistent_page():
    at = _app()
    at.slider(key="max_new_tokens").set_value(200)
    at.button(key="generate").click().run()
    run = at.session_state["pd_run"]
    _wait_until_started(run)
    deadline = time.time() + 120
    while len(run.events) < 3 and time.time() < deadline:
        run.touch()
        time.sleep(0.2)
    at.button(key="stop").click().run()
    assert not at.exception
    run = _wait_for_run(at)
    assert run.status == "stopped" and 3 <= len(run.events) < 200
    assert at.session_state["last_text"] == run.generated_text
    # a second Generate after a stop starts a fresh run
    at.slider(key="max_new_tokens").set_value(4)
    at.button(key="generate").click().run()
    second = _wait_for_run(at)
    assert second is not run and second.status == "done" and not run.alive


def test_runs_per_minute_limit_is_a_message_and_keeps_the_prompt(monkeypatch):
    monkeypatch.setenv("PDLAB_RUNS_PER_MINUTE", "2")
    at = _app()
    assert any("runs per minute per reader" in c.value and "Privacy" in c.value for c in at.caption)
    at.text_area(key="prompt").set_value("Say hi.")
    at.slider(key="max_new_tokens").set_value(2)
    for _ in range(2):
        at.button(key="generate").click().run()
        _wait_for_run(at)
    at.button(key="generate").click().run()
    assert not at.exception
    assert any("runs in the last minute" in w.value for w in at.warning)
    assert at.text_area(key="prompt").value == "Say hi."


@pytest.mark.parametrize("prompt, expect", [
    ("x" * 100_000, "at most 1,024"),  # a huge paste: refused with the limit, never a traceback
    # (A lone surrogate cannot travel through a widget at all: browsers and protobuf send UTF-8.
    # core.runner.clean_text covers the other ways in; see tests/test_runner.py.)
    ("emoji 🙂👩‍👩‍👧 عربى שלום e\u0301\u0301 <b>bold</b> **md** $x$", None),
])
def test_odd_and_huge_prompts_never_raise(prompt, expect):
    at = _app()
    at.text_area(key="prompt").set_value(prompt)
    at.slider(key="max_new_tokens").set_value(2)
    at.button(key="generate").click().run()
    assert not at.exception
    if expect:
        assert any(expect in w.value for w in at.warning)
    else:
        run = _wait_for_run(at)
        assert run.status == "done"
        # the prompt's markup reached the page only escaped
        html = "".join(m.value for m in at.markdown)
        assert "<b>bold</b>" not in html
