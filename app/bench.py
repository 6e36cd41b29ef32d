"""`python -m app.bench --json`: how smoothly the page draws a real run, and what drawing costs the model.

Starts its own Streamlit server on a free port, drives the page in Debian's Chromium, and prints
one single-line JSON object last:
  model_ready_s       cold server: page opened until the prompt box shows (model loaded)
  first_paint_s       warm server, new session: page opened until the title shows
  ui_updates_per_s    chart redraws per second that added data (Plotly `plotly_afterplot` events
                      after which the plotted point count grew, per chart, summed) during the run,
                      with the live view scrolled to the top of a 1440x1000 window (charts out of
                      view are not redrawn, so this counts what a reader watching the run sees)
  ui_generation_ratio decode tokens/s of the runner alone / decode tokens/s with the page drawing
                      (same prompt and settings; both from wall-clock time of the decode steps)
and, to explain them: each chart's median redraw time and the share of wall time the page's main
thread was busy during the run (Chrome's TaskDuration).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Write a short story about a robot who learns to paint."
MAX_NEW = 64


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(port: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "streamlit", "run", "app/streamlit_app.py", "--server.headless=true",
           f"--server.port={port}", "--server.address=127.0.0.1", "--server.fileWatcherType=none",
           "--browser.gatherUsageStats=false"]
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), "PDLAB_BENCH_LOG": "1"}
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def _wait_healthy(port: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError("streamlit did not become healthy")


def _runner_alone_tokens_per_s() -> float:
    """Decode tokens/s of core's runner with the page's settings and annotator, no page at all."""
    from app.model_service import make_annotator
    from core.model import load_default
    from core.runner import GenerationSettings, encode_prompt, run

    loaded = load_default()
    settings = GenerationSettings(max_new_tokens=MAX_NEW, stop_on_eos=False)
    ids = encode_prompt(loaded, PROMPT, True)
    rates = []
    for _ in range(2):
        stamps = []
        start = time.perf_counter()
        for _event in run(loaded, ids, settings, annotate=make_annotator(loaded)):
            stamps.append(time.perf_counter() - start)
        rates.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))
    return max(rates)


def _page_run(page, url: str, server_pid: int) -> dict:
    page.goto(url)
    page.get_by_label("Prompt").wait_for(timeout=300_000)
    page.get_by_label("Prompt").fill(PROMPT)
    slider = page.get_by_role("slider").first
    slider.focus()
    page.keyboard.press("Home")  # the slider starts at 1
    for _ in range(MAX_NEW - 1):
        page.keyboard.press("ArrowRight")
    page.wait_for_timeout(500)
    page.evaluate("window.__pdAfterplot = []")
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    import psutil

    server = psutil.Process(server_pid)
    cpu0 = sum(server.cpu_times()[:2])
    busy0, t0 = _main_thread_busy_s(cdp), time.perf_counter()
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Generate").click()
    # Scroll the live view to the top of the window, as a reader who pressed Generate does: charts
    # out of view are not redrawn (live.js), so an unscrolled page would count almost no redraws.
    page.wait_for_selector(".pd-controls")
    page.evaluate("document.querySelector('.pd-controls').scrollIntoView({block: 'start'})")
    page.wait_for_function("document.querySelector('.pd-controls') && "
                           "['done','stopped','error'].includes(document.querySelector('.pd-controls').dataset.status) && "
                           "document.querySelector('.pd-controls').dataset.shown == "
                           "document.querySelector('.pd-controls').dataset.available", timeout=300_000)
    wall = time.perf_counter() - t0
    busy = (_main_thread_busy_s(cdp) - busy0) / wall
    server_cores = (sum(server.cpu_times()[:2]) - cpu0) / wall
    return {"busy": busy, "server_cores": server_cores, **page.evaluate("""() => ({afterplot: window.__pdAfterplot || [], drawMs: window.__pdDrawMs || {},
        tiles: Array.from(document.querySelectorAll('.pd-tile')).map(t => t.innerText),
        available: Number(document.querySelector('.pd-controls').dataset.available)})""")}


def _main_thread_busy_s(cdp) -> float:
    """Seconds the page's main thread has spent on tasks (Chrome's own TaskDuration metric)."""
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return float(metrics.get("TaskDuration", 0.0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one single-line JSON object last")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from playwright.sync_api import sync_playwright

    port = _free_port()
    (ROOT / "artifacts").mkdir(exist_ok=True)
    proc = _start_server(port, ROOT / "artifacts" / f"bench-{port}.log")
    url = f"http://127.0.0.1:{port}"
    result: dict = {"max_new_tokens": MAX_NEW, "prompt": PROMPT, "load_avg_1m_start": round(os.getloadavg()[0], 2)}
    try:
        _wait_healthy(port)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=os.environ.get("PDLAB_CHROMIUM", "/usr/bin/chromium"))
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            t0 = time.perf_counter()
            page.goto(url)
            page.get_by_label("Prompt").wait_for(timeout=300_000)
            result["model_ready_s"] = round(time.perf_counter() - t0, 2)
            paints = []
            for _ in range(3):
                fresh = browser.new_page(viewport={"width": 1440, "height": 1000})
                t0 = time.perf_counter()
                fresh.goto(url)
                fresh.get_by_role("heading", name="Prefill & Decode Lab").wait_for(timeout=60_000)
                paints.append(time.perf_counter() - t0)
                fresh.close()
            result["first_paint_s"] = round(statistics.median(paints), 2)
            page_data = _page_run(page, url, proc.pid)
            browser.close()
        plots = [p for p in page_data["afterplot"] if p.get("run") is not None]
        if len(plots) >= 2:
            span = (plots[-1]["t"] - plots[0]["t"]) / 1000.0
            result["ui_updates_per_s"] = round(len(plots) / span, 2) if span > 0 else None
            for chart in ("kv", "latency", "traffic", "roofline"):
                mine = [p for p in plots if p["chart"] == chart]
                chart_span = (mine[-1]["t"] - mine[0]["t"]) / 1000.0 if len(mine) >= 2 else 0
                result[f"{chart}_updates_per_s"] = round(len(mine) / chart_span, 2) if chart_span > 0 else None
        for chart, times in sorted(page_data["drawMs"].items()):
            if times:
                result[f"{chart}_draw_ms_median"] = round(statistics.median(times), 1)
        result["browser_main_thread_busy"] = round(page_data["busy"], 3)  # fraction of wall time, during the run
        result["server_cpu_cores"] = round(page_data["server_cores"], 3)  # model thread included
        result["tokens"] = page_data["available"]
        page_tps = _parse_speed(page_data["tiles"])
        result["page_decode_tokens_per_s"] = page_tps
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    alone = _runner_alone_tokens_per_s()
    result["runner_alone_decode_tokens_per_s"] = round(alone, 2)
    page_wall = _server_wall_rate(ROOT / "artifacts" / f"bench-{port}.log")
    if page_wall:
        result["page_wall_decode_tokens_per_s"] = round(page_wall, 2)
    with_page = page_wall or page_tps
    result["ui_generation_ratio"] = round(alone / with_page, 3) if with_page else None
    result["load_avg_1m_end"] = round(os.getloadavg()[0], 2)  # other work on the machine skews every figure
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    return 0


def _parse_speed(tiles: list[str]) -> float | None:
    for text in tiles:
        if text.startswith("Decode speed"):
            try:
                return float(text.split("\n")[1].split()[0])
            except (IndexError, ValueError):
                return None
    return None


def _server_wall_rate(log: Path) -> float | None:
    """The page run's wall-clock decode rate, which the server logs when PDLAB_BENCH_LOG is set."""
    try:
        for line in reversed(log.read_text().splitlines()):
            if line.startswith("PDLAB_RUN_WALL_TPS "):
                return float(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


if __name__ == "__main__":
    sys.exit(main())
