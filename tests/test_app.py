"""The page through Streamlit's AppTest: it loads the real model and shows escaped output."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.model

APP = str(Path(__file__).resolve().parent.parent / "app" / "streamlit_app.py")


def _app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=240)
    at.run()
    assert not at.exception, at.exception
    return at


def test_generate_shows_the_answer():
    at = _app()
    at.text_area(key="prompt").set_value("What is the capital of France?")
    at.slider(key="max_new_tokens").set_value(12)
    at.button(key="generate").click().run()
    assert not at.exception
    assert "Paris" in at.session_state["last_text"]
    html = "".join(m.value for m in at.markdown)
    assert "pd-output" in html


def test_empty_prompt_is_a_warning_not_a_crash():
    at = _app()
    at.text_area(key="prompt").set_value("   ")
    at.button(key="generate").click().run()
    assert not at.exception
    assert any("prompt" in w.value.lower() for w in at.warning)
