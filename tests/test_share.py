"""Shareable links: round trips, short links, and every malformed or hostile parameter falling back alone."""

from __future__ import annotations

import pytest

from core.runner import GenerationSettings
from core.settings import LINK_PROMPT_MAX_CHARS
from core.share import (
    DEFAULT_PROMPT,
    DEFAULTS,
    PAGES,
    PUBLIC_MAX_NEW_TOKENS,
    PUBLIC_MAX_SEED,
    PUBLIC_MAX_TEMPERATURE,
    PUBLIC_MAX_TOP_K,
    ViewParams,
    link_notices,
    parse_query_params,
    to_query_params,
)


def test_defaults_match_the_engine_and_an_empty_link_is_the_default_view():
    engine = GenerationSettings()
    assert (DEFAULTS.max_new_tokens, DEFAULTS.temperature, DEFAULTS.top_k, DEFAULTS.top_p, DEFAULTS.seed,
            DEFAULTS.cache) == (engine.max_new_tokens, engine.temperature, engine.top_k, engine.top_p,
                                engine.seed, engine.cache)
    assert DEFAULTS.prompt == DEFAULT_PROMPT and DEFAULTS.page == "live" and DEFAULTS.presenter is False
    assert parse_query_params({}) == (DEFAULTS, [])
    assert to_query_params(DEFAULTS) == {}
    assert DEFAULTS.settings() == engine


ROUND_TRIPS = [
    ViewParams(),
    ViewParams(prompt="What is the capital of France?"),
    ViewParams(prompt="héllo 🙂 — 東京\nsecond line\twith a tab", page="replay"),
    ViewParams(prompt="Is 3 < 4 & 5 > 2? 100% \"quoted\" 'single' #hash ?q=1&x=2 /path"),
    ViewParams(prompt="x" * LINK_PROMPT_MAX_CHARS),
    ViewParams(temperature=0.7, top_k=40, top_p=0.95, seed=1234),
    ViewParams(temperature=PUBLIC_MAX_TEMPERATURE, top_k=PUBLIC_MAX_TOP_K, seed=PUBLIC_MAX_SEED),
    ViewParams(temperature=1e-05, top_p=1e-3),
    ViewParams(temperature=0.1 + 0.2),  # 0.30000000000000004 must survive exactly
    ViewParams(max_new_tokens=1, cache="none"),
    ViewParams(max_new_tokens=PUBLIC_MAX_NEW_TOKENS, cache="static", presenter=True, page="batching"),
    *[ViewParams(page=p, presenter=True) for p in PAGES],
]


@pytest.mark.parametrize("view", ROUND_TRIPS)
def test_round_trip(view):
    params = to_query_params(view)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in params.items())
    again, notices = parse_query_params(params)
    assert notices == []
    assert again == view
    assert link_notices(view) == []


@pytest.mark.parametrize("view", ROUND_TRIPS)
def test_round_trip_through_lists_as_streamlit_gives_them(view):
    # st.query_params.get_all(key) returns a list per key.
    again, notices = parse_query_params({k: [v] for k, v in to_query_params(view).items()})
    assert (again, notices) == (view, [])


def test_links_are_short_only_non_defaults_are_written():
    assert to_query_params(ViewParams(seed=7)) == {"seed": "7"}
    assert to_query_params(ViewParams(presenter=True, temperature=1.0)) == {"temperature": "1", "presenter": "1"}


@pytest.mark.parametrize(("key", "raw", "why"), [
    ("max_new_tokens", "abc", "not a whole number"),
    ("max_new_tokens", "0", "below the minimum"),
    ("max_new_tokens", "-5", "negative"),
    ("max_new_tokens", str(PUBLIC_MAX_NEW_TOKENS + 1), "limit"),
    ("max_new_tokens", "4096", "limit"),  # the engine allows it; the page does not
    ("max_new_tokens", "12.5", "not a whole number"),
    ("max_new_tokens", "1_000", "not a whole number"),  # int() would accept it
    ("max_new_tokens", "٤٨", "not a whole number"),  # Arabic-Indic digits: int() would accept them too
    ("max_new_tokens", "9" * 5000, "not a whole number"),
    ("max_new_tokens", "", "not a whole number"),
    ("temperature", "nan", "finite"),
    ("temperature", "NaN", "finite"),
    ("temperature", "inf", "finite"),
    ("temperature", "-inf", "finite"),
    ("temperature", "1e999", "finite"),
    ("temperature", "-0.5", "negative"),
    ("temperature", "3", "limit"),
    ("temperature", "0x1p-2", "not a number"),
    ("temperature", "hot", "not a number"),
    ("top_k", "-1", "negative"),
    ("top_k", str(PUBLIC_MAX_TOP_K + 1), "limit"),
    ("top_p", "0", "above 0"),
    ("top_p", "1.5", "limit"),
    ("top_p", "-0.1", "negative"),
    ("seed", str(2**63), "limit"),
    ("seed", "-1", "negative"),
    ("cache", "paged", "not one of"),
    ("cache", "", "not one of"),
    ("presenter", "maybe", "not on or off"),
    ("page", "admin", "not one of"),
    ("page", "../../etc/passwd", "not one of"),
    ("prompt", "", "empty"),
    ("prompt", "   \n ", "empty"),
    ("prompt", "x" * (LINK_PROMPT_MAX_CHARS + 1), "over the"),
    ("prompt", "a" * 1_000_000, "over the"),
    ("prompt", "hello\x00world", "control characters"),
    ("prompt", "bell\x07", "control characters"),
    ("prompt", "\u202eevil", "control characters"),  # right-to-left override disguises text
    ("prompt", "<script>alert(1)</script>", "markup"),
    ("prompt", "hi <img src=x onerror=alert(1)>", "markup"),
    ("prompt", "<!-- comment -->", "markup"),
    ("prompt", "</textarea><b>", "markup"),
    ("prompt", "lone \udcff surrogate", "not valid text"),
])
def test_a_bad_value_falls_back_for_that_key_only_with_a_notice(key, raw, why):
    good = {"seed": "7", "page": "compare"} if key not in ("seed", "page") else {"top_k": "5", "cache": "static"}
    view, notices = parse_query_params({**good, key: raw})
    assert getattr(view, key) == getattr(DEFAULTS, key)
    assert len(notices) == 1
    assert f"'{key}'" in notices[0] and why in notices[0] and "instead" in notices[0]
    # The other parameters of the same link still apply.
    expected, _ = parse_query_params(good)
    assert view == expected != DEFAULTS


@pytest.mark.parametrize("raw", [
    "<script>alert(1)</script>", "\x00\x01", "x" * 10_000, "'; DROP TABLE--", "=HYPERLINK(\"http://x\")",
    "javascript:alert(1)", "\u202e1", "1<b>",
])
@pytest.mark.parametrize("key", ["temperature", "seed", "cache", "page", "presenter"])
def test_notices_never_echo_hostile_text(key, raw):
    _, notices = parse_query_params({key: raw})
    assert len(notices) == 1
    notice = notices[0]
    assert raw not in notice
    assert len(notice) < 200
    assert not any(c in notice for c in "<>\x00\u202e")


def test_a_harmless_bad_value_is_quoted_to_help_the_reader():
    _, notices = parse_query_params({"temperature": "7.5"})
    assert notices == ["Link parameter 'temperature': '7.5' is above this page's limit of 2; using 0 instead."]


def test_repeated_keys():
    view, notices = parse_query_params({"seed": ["3", "3"], "top_k": ["1", "2"]})
    assert view.seed == 3  # the same value twice is harmless
    assert view.top_k == 0 and len(notices) == 1 and "2 times" in notices[0]
    assert parse_query_params({"seed": []}) == (DEFAULTS, [])


@pytest.mark.parametrize("value", [5, None, 1.5, b"48", ["48", 5], {"a": 1}])
def test_values_of_the_wrong_type(value):
    view, notices = parse_query_params({"max_new_tokens": value})
    assert view == DEFAULTS and len(notices) == 1 and "not text" in notices[0]


def test_unknown_keys_are_ignored_silently():
    view, notices = parse_query_params({"utm_source": "x", "embed": "true", "<script>": "1", "seed": "9"})
    assert view == ViewParams(seed=9) and notices == []


@pytest.mark.parametrize(("raw", "expected"), [
    ("1", True), ("true", True), ("ON", True), (" yes ", True), ("0", False), ("false", False), ("off", False),
])
def test_presenter_spellings(raw, expected):
    assert parse_query_params({"presenter": raw}) == (ViewParams(presenter=expected), [])


@pytest.mark.parametrize(("raw", "expected"), [
    (" 0.7 ", 0.7), ("+1", 1.0), (".5", 0.5), ("5e-1", 0.5), ("-0", 0.0), ("2", 2.0),
])
def test_number_spellings_that_are_accepted(raw, expected):
    view, notices = parse_query_params({"temperature": raw})
    assert notices == [] and view.temperature == expected


def test_values_are_case_and_space_tolerant_where_it_cannot_mislead():
    view, notices = parse_query_params({"cache": " Static ", "page": "REPLAY", "max_new_tokens": " 64 "})
    assert notices == [] and (view.cache, view.page, view.max_new_tokens) == ("static", "replay", 64)


def test_every_accepted_view_is_runnable():
    """Whatever a link can hold, GenerationSettings accepts (the page never builds a run the engine refuses)."""
    for view in ROUND_TRIPS:
        view.settings().validated()


def test_link_notices_say_what_a_link_cannot_carry():
    assert link_notices(ViewParams(prompt="y" * (LINK_PROMPT_MAX_CHARS + 1)))
    assert link_notices(ViewParams(prompt="ok")) == []
