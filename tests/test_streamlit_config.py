"""The project's .streamlit/config.toml, checked against the Streamlit it ships with.

Streamlit replaces a large element with a reference to a copy the browser reported holding when the
rerun began. Under rapid reruns the browser can drop that copy first; in Streamlit 1.67 a reference
it cannot resolve ("Cached ForwardMsg MISS") ends the connection for good, with every widget
disabled (the fifty Stop/Generate cycles in tests/test_load.py hit it on a slow machine). The
config turns the cache off by raising its size floor beyond any element; these tests fail if that
setting goes, or if Streamlit stops reading it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from streamlit import config
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.runtime import forward_msg_cache

CONFIG = Path(__file__).resolve().parent.parent / ".streamlit" / "config.toml"


def _element(size: int) -> ForwardMsg:
    msg = ForwardMsg()
    msg.delta.new_element.markdown.body = "x" * size
    return msg


@pytest.fixture
def size_floor():
    """Sets Streamlit's cache floor for one test and puts the previous value back."""
    before = config.get_option("global.minCachedMessageSize")
    yield lambda value: config.set_option("global.minCachedMessageSize", value)
    config.set_option("global.minCachedMessageSize", before)


def test_streamlit_would_cache_a_large_element_by_default(size_floor):
    """The premise: with Streamlit's default floor a 50 kB element is sent once, then referenced."""
    size_floor(config.get_config_options()["global.minCachedMessageSize"].default_val)
    msg = _element(50_000)
    forward_msg_cache.populate_hash_if_needed(msg)
    assert msg.metadata.cacheable


def test_the_project_config_keeps_every_element_out_of_the_message_cache(size_floor):
    floor = tomllib.loads(CONFIG.read_text())["global"]["minCachedMessageSize"]
    assert floor >= 1e12
    size_floor(floor)
    msg = _element(5_000_000)  # larger than any chart or component payload the app sends
    forward_msg_cache.populate_hash_if_needed(msg)
    assert not msg.metadata.cacheable
