"""Issue 6 in Chromium: presenter mode with the keyboard, scrubbing a replay, save and reload through
the page, and a shared link reopening the same view. Screenshots go to artifacts/.

Two servers: one whose model cannot load (empty cache, hub off, nothing to fetch), so the replay path
is exercised exactly as a presenter on a broken network would see it; and the usual app_server with
the real model for the shared-link test (the widgets exist only with the model).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from core.trace import Trace, bundled_traces
from tests.conftest import ARTIFACTS, running_app

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def replay_server(tmp_path_factory):
    env = {"PDLAB_CACHE_DIR": str(tmp_path_factory.mktemp("empty-cache")), "HF_HUB_OFFLINE": "1",
           "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    os.environ.pop("PDLAB_MODEL_DIR", None)
    with running_app(env, "replay") as url:
        yield url


@pytest.fixture
def big_page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 1800}, accept_downloads=True)
    pg = context.new_page()
    yield pg
    context.close()


def _controls(page) -> dict:
    return page.evaluate("""() => {
        const c = document.querySelector('.pd-controls');
        const kv = document.querySelector('.pd-chart[data-chart=kv]');
        return {...c.dataset, shown: Number(c.dataset.shown || 0), available: Number(c.dataset.available || 0),
                kvApplied: kv ? Number(kv.dataset.applied || 0) : null,
                kvColumns: kv ? Number(kv.dataset.kvColumns || 0) : null};
    }""")


def _wait_shown(page, n: int, timeout: float = 10) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = _controls(page)
        if s["shown"] == n and s["kvApplied"] == n:
            return s
        time.sleep(0.1)
    raise AssertionError(f"expected step {n} on screen, got {_controls(page)}")


def _open_replay(page, url: str) -> None:
    """Open the page on the server whose model cannot load, once it says so: until the load has
    failed the page shows "still being prepared" and reruns when the failure lands, which would
    land in the middle of a test's key presses."""
    page.goto(url)
    page.get_by_text("could not be loaded").first.wait_for(timeout=120_000)
    page.wait_for_selector(".pd-controls[data-replay=true][data-available='48']", timeout=90_000)
    page.wait_for_selector(".pd-chart[data-chart=kv] .main-svg", timeout=30_000)


def test_presenter_mode_with_the_keyboard(replay_server, big_page):
    page = big_page
    _open_replay(page, replay_server + "/?presenter=1")
    assert page.get_by_test_id("stToolbar").is_hidden()  # minimal chrome
    size = page.evaluate("parseFloat(getComputedStyle(document.querySelector('.st-key-pd_tour p')).fontSize)")
    assert size >= 22, size  # large type
    assert page.get_by_text("could not be loaded").is_visible()  # the fallback banner says why
    page.keyboard.press("Space")  # the recording autoplays: Space pauses it
    page.wait_for_function("document.querySelector('.pd-controls').dataset.mode === 'paused'", timeout=5_000)
    # Where the autoplay stood when Space landed depends on how fast this machine got here (on a
    # loaded one the 48 steps had all played, and the steps forward below had nowhere to go): start
    # the stepping from a known step, then take the focus off the scrubber so the keys reach the page.
    scrub = page.locator(".pd-scrub")
    scrub.fill("10")
    shown = _wait_shown(page, 10)["shown"]
    scrub.blur()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    _wait_shown(page, shown + 2)
    page.keyboard.press("ArrowLeft")  # back: the charts are redrawn from the recording
    s = _wait_shown(page, shown + 1)
    assert s["kvColumns"] == 40 + shown  # prefill wrote 40 columns, then one per decode step shown
    assert page.locator(".pd-gen-toks .pd-tok").count() == shown + 1
    title = page.locator(".st-key-pd_tour h3").inner_text()
    assert title.startswith("1")
    page.keyboard.press("n")  # the tour's next step, as a clicker's PageDown would
    page.wait_for_function("document.querySelector('.st-key-pd_tour h3').innerText.startsWith('2')", timeout=20_000)
    page.wait_for_function("location.search.includes('presenter=1')", timeout=10_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "presenter-keyboard.png"))


# Streamlit's deferred download (app/views/live/export.py) asks the server for the file over the
# page's websocket when clicked, then starts the download; a failure shows under the button for five
# seconds only. This keeps every such message, so a download that never starts says why.
_WATCH_DOWNLOAD_ERRORS = """() => {
    window.__pdDownloadErrors = [];
    new MutationObserver(() => {
        for (const el of document.querySelectorAll('[data-testid=stDownloadButtonError]')) {
            if (!window.__pdDownloadErrors.includes(el.innerText)) window.__pdDownloadErrors.push(el.innerText);
        }
    }).observe(document.body, {childList: true, subtree: true, characterData: true});
}"""


def _download(page, button):
    """Click a download button and return the download (Playwright's EventContextManager info); a
    download that never starts fails with the button's own messages and the connection's state."""
    page.evaluate(_WATCH_DOWNLOAD_ERRORS)
    try:
        with page.expect_download(timeout=60_000) as info:
            button.click()
        return info
    except PlaywrightTimeout:
        errors = page.evaluate("window.__pdDownloadErrors")
        status = page.locator('[data-testid="stStatusWidget"]').all_inner_texts()
        raise AssertionError(f"the download never started: the button said {errors}, connection status "
                             f"{status}, button enabled {button.is_enabled()}") from None


def test_scrub_then_save_and_reload_through_the_page(replay_server, big_page):
    page = big_page
    _open_replay(page, replay_server + "/")
    scrub = page.locator(".pd-scrub")
    scrub.fill("10")
    s = _wait_shown(page, 10)
    assert s["mode"] == "paused" and s["kvColumns"] == 40 + 9
    scrub.fill("48")
    assert _wait_shown(page, 48)["kvColumns"] == 40 + 47  # the last token is produced, not cached
    scrub.fill("1")
    assert _wait_shown(page, 1)["kvColumns"] == 40  # back to the prefill alone
    page.screenshot(path=str(ARTIFACTS / "replay-scrubbed.png"))
    # save the trace, then load the saved file back: the same run replays
    page.get_by_text("Recorded runs: replay, load, save").click()
    save = page.get_by_role("button", name="Save trace (JSON)").first
    save.wait_for(state="visible", timeout=30_000)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=60_000)  # no rerun in flight
    info = _download(page, save)
    saved = Path(info.value.path()).read_bytes()
    assert info.value.suggested_filename.startswith("pdlab-smollm2-135m-instruct-explain")
    original = Trace.from_json(bundled_traces()["sky-blue"].read_bytes())
    assert Trace.from_json(saved).events == original.events
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(
        {"name": info.value.suggested_filename, "mimeType": "application/json", "buffer": saved})
    page.wait_for_function("document.querySelector('.pd-status').innerText.includes('your file')", timeout=30_000)
    # the uploader's own message, not the model banner's "could not be loaded": the pass that read the
    # file has ended before a second file is set
    page.get_by_text(f"Loaded '{info.value.suggested_filename}'").wait_for(timeout=10_000)
    bad = json.dumps({"version": 7, "events": []}).encode()
    uploads = []  # the uploader's own requests: evidence of whether the browser sent the file at all
    page.on("request", lambda r: "upload_file" in r.url and uploads.append(f"{r.method} {r.url[-12:]}"))
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=60_000)  # no rerun in flight
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(
        {"name": "old.json", "mimeType": "application/json", "buffer": bad})
    try:
        page.get_by_text("version 7 is not supported").wait_for(timeout=20_000)
    except PlaywrightTimeout:
        chips = page.locator("[data-testid=stFileUploaderFileName]").all_inner_texts()
        raise AssertionError(f"no message for the bad file; upload requests {uploads}, files shown {chips}, "
                             f"player {_controls(page)}") from None
    assert "your file" in page.locator(".pd-status").inner_text()  # the view stayed
    page.screenshot(path=str(ARTIFACTS / "replay-bad-upload.png"))


@pytest.mark.model
def test_a_shared_link_reopens_the_view(app_server, big_page):
    page = big_page
    link = ("/?prompt=Why+is+the+Moon+bright%3F&max_new_tokens=12&temperature=0.7&top_k=40&seed=7&cache=static"
            "&trace=moon-facts")
    page.goto(app_server + link)
    page.get_by_label("Prompt").wait_for(timeout=180_000)
    assert page.get_by_label("Prompt").input_value() == "Why is the Moon bright?"
    slider = page.get_by_test_id("stSlider").filter(has_text="Max new tokens")
    assert slider.get_by_test_id("stSliderThumbValue").inner_text() == "12"
    assert page.get_by_role("radio", name="on (static)").is_checked()
    page.wait_for_selector(".pd-controls[data-replay=true][data-available='44']", timeout=60_000)
    query = parse_qs(urlparse(page.url).query)
    assert query["prompt"] == ["Why is the Moon bright?"] and query["trace"] == ["moon-facts"]
    assert query["max_new_tokens"] == ["12"] and query["cache"] == ["static"] and query["page"] == ["replay"]
    # a change to a widget goes back into the address bar
    page.get_by_text("on (dynamic)").click()
    page.wait_for_function("!location.search.includes('cache=')", timeout=20_000)
    page.get_by_role("button", name="Share this view").click()
    page.get_by_text("Why+is+the+Moon+bright").first.wait_for(timeout=10_000)
    page.screenshot(path=str(ARTIFACTS / "shared-link.png"))


HOSTILE = ["<img src=x onerror=window.__pwned=1>", "<script>window.__pwned=2</script>", "**md** $x$",
           "</div><b>bold</b>"]


def test_hostile_generated_tokens_render_as_text_everywhere(replay_server, big_page):
    """A trace whose generated tokens are HTML: every view (token chips, hover, answer, tables)
    must show the characters, never build elements from them."""
    page = big_page
    _open_replay(page, replay_server + "/")
    data = json.loads(bundled_traces()["sky-blue"].read_bytes())
    for i, text in enumerate(HOSTILE, start=2):
        data["events"][i]["token_text"] = text
    data["generated_text"] = "".join(e["token_text"] for e in data["events"])
    page.get_by_text("Recorded runs: replay, load, save").click()
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(
        {"name": "hostile.json", "mimeType": "application/json", "buffer": json.dumps(data).encode()})
    page.wait_for_function("document.querySelector('.pd-status').innerText.includes('your file')", timeout=30_000)
    page.locator(".pd-scrub").fill("48")
    _wait_shown(page, 48)
    time.sleep(1.0)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img[src=x]").count() == 0
    assert page.locator(".pd-gen-toks b, .pd-gen-toks script").count() == 0
    shown = page.locator(".pd-gen-toks").inner_text()
    assert "<img" in shown and "<script>" in shown
    page.screenshot(path=str(ARTIFACTS / "replay-hostile-tokens.png"))
