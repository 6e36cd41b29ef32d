"""Many readers and impatient clicks against one server: own runs, consistent state, bounded memory.

Figures (peak RSS, RSS growth, threads) are written to artifacts/load.json for the notes; the
bounds asserted are generous ceilings that only a leak or a crash would cross.
"""

from __future__ import annotations

import contextlib
import json
import re
import time

import psutil
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.conftest import (
    ARTIFACTS,
    STREAMLIT_WITH_STACKS,
    free_port,
    live_state,
    server_stacks,
    start_streamlit,
    stop,
    wait_healthy,
)

pytestmark = [pytest.mark.browser, pytest.mark.model, pytest.mark.slow]

WORDS = ("apple", "violin", "glacier", "lantern", "pepper", "saturn", "harbor", "cactus")
SETTLED = ("done", "stopped", "error", "abandoned")
STOP_AT = (1, 3, 6, 10, 25)  # the fifty cycles' stop points, in steps the page has received


@pytest.fixture(scope="module")
def server():
    port = free_port()
    # Fifty runs in about a minute is the point of one test: lift the per-reader rate limit.
    proc = start_streamlit(STREAMLIT_WITH_STACKS, port, log_name="load", env={"PDLAB_RUNS_PER_MINUTE": "1000", "PDLAB_RUN_LOG": "1"})
    try:
        wait_healthy(port, proc)
        server_proc = psutil.Process(proc.pid)
        server_proc.popen, server_proc.log_path = proc, ARTIFACTS / f"load-{port}.log"  # for server_stacks
        yield f"http://127.0.0.1:{port}", server_proc
    finally:
        stop(proc)


def _server_stacks(proc: psutil.Process) -> str:
    """Every server thread's stack, from the server's own log (see conftest.STREAMLIT_WITH_STACKS)."""
    return server_stacks(proc.popen, proc.log_path)


# Script errors and console errors per page, kept here rather than as attributes on Playwright's
# Page objects (which are proxies: an attribute set on one can read back as missing).
_ERRORS: dict[int, list[str]] = {}


def _watch(page) -> None:
    log = _ERRORS.setdefault(id(page), [])
    page.on("pageerror", lambda exc: log.append(f"pageerror: {exc}"[:2000]))
    page.on("console", lambda msg: msg.type in ("error", "warning") and log.append(
        f"console.{msg.type}: {msg.text}"[:2000]))


def _page_report(page) -> str:
    """What a stuck page holds: the DOM state, each live view's steps, script errors, the top of the
    page text, and a screenshot (artifacts/load-stuck-N.png). Each part is read on its own, so one
    that fails (a page gone blank) does not hide the others."""
    parts = []
    readers = (
        ("state", lambda: live_state(page)),
        ("script errors", lambda: _ERRORS.get(id(page), [])[-20:]),
        ("url", lambda: page.url),
        ("views", lambda: page.evaluate("""() => {
            const p = window.pdLab && window.pdLab.player;
            if (!p) return null;
            const bar = document.querySelector('.pd-status');
            const out = {runId: p.runId, shown: p.shown, available: p.available, mode: p.mode,
                         status: bar ? bar.innerText : null};
            for (const [k, v] of p.views) out[k] = {runId: v.runId, applied: v.applied,
                frames: Array.from(v.frames.keys()), receipts: v.receipts || null, resends: v.resends || 0,
                stale: v.staleSends || 0};
            return out;
        }""")),
        ("text", lambda: page.evaluate("document.body ? document.body.innerText.slice(0, 400) : null")),
    )
    for name, read in readers:
        try:
            parts.append(f"{name}: {read()!r}")
        except Exception as exc:  # a report must not hide the failure it reports
            parts.append(f"{name}: unreadable ({type(exc).__name__}: {str(exc)[:200]})")
    with contextlib.suppress(Exception):
        shot = ARTIFACTS / f"load-stuck-{len(list(ARTIFACTS.glob('load-stuck-*.png')))}.png"
        page.screenshot(path=str(shot), timeout=10_000)
        parts.append(f"screenshot: {shot.name}")
    return " | ".join(parts)


def _record(key: str, value) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "load.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=1))


def _open(page, url: str, prompt: str, tokens: int) -> None:
    page.goto(url)
    page.get_by_label("Prompt").wait_for(timeout=240_000)
    page.get_by_label("Prompt").fill(prompt)
    slider = page.get_by_role("slider").first
    slider.focus()
    page.keyboard.press("Home")
    for _ in range(tokens - 1):
        page.keyboard.press("ArrowRight")


def _settled(s: dict) -> bool:
    """The run is over, the display shows every step, and the KV grid (a separate component whose
    last frame can arrive one poll after the token stream's) has caught up. A grid that never
    catches up fails the test by timeout."""
    grid_ok = s["available"] == 0 or s["kvColumns"] == s["prompt"] + s["available"] - 1
    if s["status"] == "done" and s["available"] == 0:
        return False  # a finished run made at least one token: its frames are still on the way
    return s["status"] in SETTLED and s["shown"] == s["available"] and grid_ok


def _wait_settled(page, timeout: float = 240, proc: psutil.Process | None = None) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = live_state(page)
        if _settled(s):
            return s
        time.sleep(0.1)
    report = _page_report(page)
    if proc is not None:
        (ARTIFACTS / "load-stuck.txt").write_text(f"{report}\n\n{_server_stacks(proc)}")
    raise AssertionError(f"never settled: {report}")


def _stop_point(page, previous_run: str | None, stop_button, steps: int, timeout: float = 120) -> str:
    """Wait until the live view shows a run other than `previous_run` with at least `steps` steps
    received and its Stop button enabled ("stop"), or until that run has settled first ("over")."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = live_state(page)
        if s["runId"] not in (None, previous_run):
            if _settled(s):
                return "over"
            if s["available"] >= steps and stop_button.is_enabled():
                return "stop"
        time.sleep(0.05)  # a poll interval, not a wait for the state: the loop reads the page
    raise AssertionError(f"the new run never showed: {_page_report(page)}")


def _rss_mb(proc: psutil.Process) -> float:
    return proc.memory_info().rss / 1e6


# Marked `load` (make load-test runs the load tests alone); part of make test. In one session a
# page went blank under this load in 2 of ~22 runs (the whole Streamlit app unmounted); after the
# live charts were made lighter, none in 34 runs. Should it recur, live.js reloads the page (and
# this test fails, with the page's errors in artifacts/load-errors.txt).
def _all_settled(pages: list, proc: psutil.Process, previous: dict[int, str | None], peak: float,
                 timeout: float = 300) -> tuple[dict[int, dict], float]:
    """Each page's live state once its run (another than `previous[i]`) has settled, and the server's
    peak RSS meanwhile; the pages still waiting and the server's stacks go to load-stuck.txt."""
    deadline = time.time() + timeout
    states: dict[int, dict] = {}
    while time.time() < deadline and len(states) < len(pages):
        peak = max(peak, _rss_mb(proc))
        for i, page in enumerate(pages):
            s = live_state(page)
            if i not in states and s["runId"] != previous.get(i) and _settled(s):
                states[i] = s
        time.sleep(0.5)
    if len(states) < len(pages):
        stuck = {i: _page_report(page) for i, page in enumerate(pages) if i not in states}
        (ARTIFACTS / "load-stuck.txt").write_text(f"{stuck}\n\n{_server_stacks(proc)}")
        raise AssertionError(f"some sessions never finished (deadlock?): {stuck}; server stacks in "
                             "artifacts/load-stuck.txt")
    return states, peak


@pytest.mark.load
def test_eight_sessions_generate_at_once_each_seeing_its_own_run(server, browser):
    """Eight readers press Generate at once, then each asks a follow-up at once: every session sees
    its own run and keeps its own conversation's cache."""
    url, proc = server
    contexts = [browser.new_context(viewport={"width": 1280, "height": 1600}) for _ in WORDS]
    pages = [c.new_page() for c in contexts]
    for page in pages:
        _watch(page)
    try:
        for word, page in zip(WORDS, pages, strict=True):
            _open(page, url, f"Use the word {word} in one short sentence.", tokens=6)
        peak = _rss_mb(proc)
        for page in pages:
            page.get_by_role("button", name="Generate").click()
        states, peak = _all_settled(pages, proc, {}, peak)
        for i, word in enumerate(WORDS):
            s = states[i]
            assert s["status"] == "done" and s["exceptions"] == 0, (s, _page_report(pages[i]))
            text = s["promptText"].replace(" ", "").replace("\n", "")
            assert word in text, (word, text)
            assert not any(other in text for other in WORDS if other != word)
            assert s["available"] > 0 and s["kvColumns"] == s["prompt"] + s["available"] - 1, \
                (s, _page_report(pages[i]))
        # then every session asks a follow-up at once: each keeps its own conversation's cache
        first_ids = {i: states[i]["runId"] for i in states}
        for word, page in zip(WORDS, pages, strict=True):
            main = page.get_by_test_id("stMainBlockContainer")
            main.get_by_role("textbox", name="Ask a follow-up").fill(f"Now use {word} in a question.")
        for page in pages:
            page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Ask", exact=True).click()
        follow, peak = _all_settled(pages, proc, first_ids, peak)
        for i, word in enumerate(WORDS):
            s, page = follow[i], pages[i]
            assert s["status"] == "done" and s["exceptions"] == 0, (s, _page_report(page))
            kept = int(page.locator(".pd-prompt-toks").get_attribute("data-kept") or 0)
            assert kept >= states[i]["prompt"], (kept, states[i])  # its own first turn, kept
            text = s["promptText"].replace(" ", "").replace("\n", "")
            assert word in text and not any(other in text for other in WORDS if other != word), (word, text)
            assert s["kvColumns"] == s["prompt"] + s["available"] - 1, (s, _page_report(page))
            assert page.get_by_text(re.compile(r"This follow-up paid for \d+ new tokens")).count() == 1
        _record("eight_sessions_peak_rss_mb", round(peak, 1))
        assert peak < 3000
    finally:
        (ARTIFACTS / "load-errors.txt").write_text(
            "\n".join(f"page {i}: {e}" for i, p in enumerate(pages) for e in _ERRORS.get(id(p), [])))
        for c in contexts:
            c.close()


def test_fifty_rapid_stop_generate_cycles_leave_no_trace(server, browser):
    url, proc = server
    context = browser.new_context(viewport={"width": 1280, "height": 1600})
    page = context.new_page()
    _watch(page)
    try:
        # a prompt the model answers at length with the chat template and without (asked raw, "Tell me
        # a long story" ended at its first token, so half the cycles had nothing to stop)
        _open(page, url, "Once upon a time, in a lighthouse by the sea,", tokens=24)
        page.get_by_role("button", name="Generate").click()
        _wait_settled(page, proc=proc)
        rss_before, threads_before = _rss_mb(proc), proc.num_threads()
        stop_button = page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop", exact=True)
        previous_run = live_state(page)["runId"]
        outcomes, rss_series, stops = [], [], []
        for i in range(50):
            # Streamlit disables every widget while its connection is down. A lost connection that
            # never came back (a "Cached ForwardMsg MISS" under rapid reruns: .streamlit/config.toml
            # now keeps elements out of that cache) failed here; a reconnect on a loaded 2-core
            # machine can still take a while, so the click waits up to 2 minutes, and a page that
            # stays disabled leaves its status, errors and the server's stacks in load-stuck.txt.
            try:
                page.get_by_role("button", name="Generate").click(timeout=120_000)
            except PlaywrightTimeout:
                conn = page.evaluate("() => { const w = document.querySelector('[data-testid=stStatusWidget]');"
                                     " return w ? w.innerText : null; }")
                (ARTIFACTS / "load-stuck.txt").write_text(
                    f"cycle {i}; status widget: {conn!r}\n{_page_report(page)}\n\n{_server_stacks(proc)}")
                raise
            if i % 5 == 0:
                page.get_by_text("Use the chat template").click()  # a widget change mid-run
            # Stop once the page has received STOP_AT[i % 5] steps of the new run (from its first
            # token to one past the 24 asked for, which lets the run finish); a run that ends first
            # is not clicked at all. It may still end between that check and the click (also a
            # valid race): the browser checks and clicks in one step, so a button disabled by then
            # is left alone instead of waited on.
            stop_at = STOP_AT[i % len(STOP_AT)]
            at_click = None
            if _stop_point(page, previous_run, stop_button, stop_at) == "stop":
                at_click = live_state(page)["available"]
                stop_button.evaluate("b => { if (!b.disabled) b.click(); }")
            s = _wait_settled(page, proc=proc)
            stops.append((stop_at, at_click, s["status"], s["available"]))
            previous_run = s["runId"]
            assert s["exceptions"] == 0, (i, s)
            if s["available"]:
                assert s["kvColumns"] == s["prompt"] + s["available"] - 1, (i, s)
            outcomes.append(s["status"])
            rss_series.append(round(_rss_mb(proc) - rss_before, 1))
        # the last run's worker threads end after its page has settled: wait for them, with a bound
        deadline = time.time() + 30
        while proc.num_threads() > threads_before + 2 and time.time() < deadline:
            time.sleep(0.1)
        growth = _rss_mb(proc) - rss_before
        threads_after = proc.num_threads()
        _record("fifty_cycles", {"rss_growth_mb": round(growth, 1), "rss_growth_series_mb": rss_series,
                                 "threads_before": threads_before, "threads_after": threads_after,
                                 "stops": stops,  # (stop point, steps at the click, status, steps)
                                 "outcomes": {k: outcomes.count(k) for k in set(outcomes)}})
        assert threads_after <= threads_before + 2, (threads_before, threads_after)
        assert outcomes.count("stopped") > 0, stops  # the cycles did stop runs mid-way
        assert growth <= 50, f"RSS grew {growth:.1f} MB over 50 cycles"
    finally:
        (ARTIFACTS / "load-fifty-errors.txt").write_text("\n".join(_ERRORS.get(id(page), [])))
        context.close()
