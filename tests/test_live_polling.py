"""The live fragment polls for the session's active run even when the pass that started it was cut short."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import streamlit as st

from app.views.live import state


@pytest.fixture(autouse=True)
def _clean_session():
    st.session_state.clear()
    yield
    st.session_state.clear()


def _run(run_id: int, active: bool) -> SimpleNamespace:
    return SimpleNamespace(id=run_id, active=active)


def test_a_run_started_after_the_last_full_pass_asks_for_one():
    finished = _run(2, active=False)
    state.set_polling(finished)  # the full pass that drew run 2's end: no polling
    assert not state.polling_lost(finished)
    started = _run(3, active=True)  # a click's callback started run 3; its pass was cut short
    assert state.polling_lost(started)
    state.set_polling(started)  # the full pass it asks for
    assert not state.polling_lost(started)


def test_a_polled_run_and_no_run_ask_for_nothing():
    run = _run(5, active=True)
    state.set_polling(run)
    assert not state.polling_lost(run)
    assert not state.polling_lost(None)
    state.set_polling(None)
    assert not state.polling_lost(_run(5, active=False))
    assert state.polling_lost(run)
