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
  lesson_words_default words of the live page's visible text after the run, 1440x900, scrolled
                      through, expanders closed, aria-hidden text left out (app.devtools.words)
  lesson_words_total  the same with every expander open
and, to explain them: each chart's median redraw time, the share of wall time the page's main
thread was busy during the run (Chrome's TaskDuration), and the server's CPU use.

Where the machine has two cores or more, the headline run puts the server (and so the model) on
core 0 and the browser on the others, the way a deployment runs: the reader's browser draws on the
reader's machine, and only the server's share of drawing (the fragment passes) competes with the
model. The same run is then repeated with everything sharing every core (key `shared`): the case
of a reader running the app on their own small laptop, where the browser's drawing takes CPU from
the model. Both are reported; the runner alone runs in
this process between the page runs (median of three), on core 0 like the server.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from app.devtools.words import lesson_words
from app.views.live import charts
from core.settings import chromium_path

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Write a short story about a robot who learns to paint."
MAX_NEW = 64
ALL_CPUS = set(range(os.cpu_count() or 1))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, log: Path) -> subprocess.Popen:
    """The app as a developer starts it, offline, logging each run's decode rate (PDLAB_BENCH_LOG)."""
    cmd = [sys.executable, "-m", "streamlit", "run", "app/streamlit_app.py", "--server.headless=true",
           f"--server.port={port}", "--server.address=127.0.0.1", "--server.fileWatcherType=none",
           "--browser.gatherUsageStats=false"]
    env = {"HF_HUB_OFFLINE": "1", **os.environ, "PDLAB_BENCH_LOG": "1"}  # offline unless told otherwise
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def wait_healthy(port: int, timeout: float = 120, proc: subprocess.Popen | None = None) -> None:
    """Until the Streamlit server on `port` answers its health check; RuntimeError at once if `proc`
    (the server, when given) exits first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the app exited with {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError("streamlit did not become healthy")


class RunnerAlone:
    """Core's runner with the page's settings and annotator, no page at all, in this process.

    Measured between the page runs (interleaved), so slow drift of a shared machine touches both
    sides of the ratio alike."""

    def __init__(self) -> None:
        from app.shared.model import make_annotator
        from core.model import load_default
        from core.runner import GenerationSettings, encode_prompt

        self.loaded = load_default()
        self.settings = GenerationSettings(max_new_tokens=MAX_NEW, stop_on_eos=False)
        self.ids = encode_prompt(self.loaded, PROMPT, True)
        self.annotate = make_annotator(self.loaded)
        self.rates: list[float] = []
        self.measure()  # warm-up: the first run in a process is slower (allocations, lazy imports)
        self.rates.clear()

    def measure(self) -> float:
        from core.runner import run

        stamps = []
        start = time.perf_counter()
        for _event in run(self.loaded, self.ids, self.settings, annotate=self.annotate):
            stamps.append(time.perf_counter() - start)
        rate = (len(stamps) - 1) / (stamps[-1] - stamps[0])
        self.rates.append(rate)
        return rate


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
    page.evaluate("(window.pdLab = window.pdLab || {}).afterplot = []")
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    import psutil

    server = psutil.Process(server_pid)
    cpu0 = sum(server.cpu_times()[:2])
    busy0, t0 = _main_thread_busy_s(cdp), time.perf_counter()
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Generate").click()
    # Scroll the live view to the top of the window, as a reader who pressed Generate does: charts
    # out of view are not redrawn (live/chart_view.js), so an unscrolled page would count almost no redraws.
    page.wait_for_selector(".pd-controls")
    page.evaluate("document.querySelector('.pd-controls').scrollIntoView({block: 'start'})")
    page.wait_for_function("document.querySelector('.pd-controls') && "
                           "['done','stopped','error'].includes(document.querySelector('.pd-controls').dataset.status) && "
                           "document.querySelector('.pd-controls').dataset.shown == "
                           "document.querySelector('.pd-controls').dataset.available", timeout=300_000)
    wall = time.perf_counter() - t0
    busy1 = _main_thread_busy_s(cdp)
    busy = {name: (busy1[name] - busy0[name]) / wall for name in BUSY_METRICS}
    server_cores = (sum(server.cpu_times()[:2]) - cpu0) / wall
    return {"busy": busy, "server_cores": server_cores, **page.evaluate("""() => ({afterplot: (window.pdLab || {}).afterplot || [],
        drawMs: (window.pdLab || {}).drawMs || {},
        tiles: Array.from(document.querySelectorAll('.pd-tile')).map(t => t.innerText),
        available: Number(document.querySelector('.pd-controls').dataset.available)})""")}


def _reading_words(page) -> dict[str, int]:
    """The lesson's words after the bench's own default run, in a 1440x900 window (app.devtools.words)."""
    page.set_viewport_size({"width": 1440, "height": 900})
    page.get_by_test_id("pd-output").wait_for(timeout=120_000)  # the after-run sections are drawn
    return lesson_words(page)


BUSY_METRICS = ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration")


def _main_thread_busy_s(cdp) -> dict[str, float]:
    """Seconds the page's main thread has spent on tasks, and on script, layout and style within them
    (Chrome's own Performance metrics)."""
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {name: float(metrics.get(name, 0.0)) for name in BUSY_METRICS}


def _set_affinity(procs: list, cpus: set[int]) -> None:
    """Every thread of these processes onto `cpus` (threads started later inherit it)."""
    import psutil

    for proc in procs:
        try:
            threads = proc.threads()
        except psutil.Error:
            continue
        for thread in threads:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(thread.id, cpus)


def _placement(server_pid: int, isolate: bool) -> str:
    """Put the server (model included) on core 0 and this process with the browser on the others,
    as when the reader's browser runs on the reader's own machine; or let everything share all cores."""
    import psutil

    me = psutil.Process()
    server = psutil.Process(server_pid)
    server_tree = [server, *server.children(recursive=True)]
    server_pids = {p.pid for p in server_tree}
    browser_tree = [me, *[c for c in me.children(recursive=True) if c.pid not in server_pids]]
    if not isolate or len(ALL_CPUS) < 2:
        _set_affinity(server_tree + browser_tree, ALL_CPUS)
        return "shared"
    _set_affinity(server_tree, {0})
    _set_affinity(browser_tree, ALL_CPUS - {0})
    return "isolated"


def _alone_on_server_core(alone: RunnerAlone, placement: str) -> None:
    """One runner-alone measurement, on the core the server has when isolated (it idles meanwhile)."""
    if placement == "isolated":
        os.sched_setaffinity(0, {0})
    try:
        alone.measure()
    finally:
        os.sched_setaffinity(0, ALL_CPUS if placement == "shared" else ALL_CPUS - {0})


def _summary(page_data: dict) -> dict:
    out: dict = {}
    plots = [p for p in page_data["afterplot"] if p.get("run") is not None]
    if len(plots) >= 2:
        span = (plots[-1]["t"] - plots[0]["t"]) / 1000.0
        out["ui_updates_per_s"] = round(len(plots) / span, 2) if span > 0 else None
        for chart in charts.NAMES:
            mine = [p for p in plots if p["chart"] == chart]
            chart_span = (mine[-1]["t"] - mine[0]["t"]) / 1000.0 if len(mine) >= 2 else 0
            out[f"{chart}_updates_per_s"] = round(len(mine) / chart_span, 2) if chart_span > 0 else None
    for chart, times in sorted(page_data["drawMs"].items()):
        if times:
            out[f"{chart}_draw_ms_median"] = round(statistics.median(times), 1)
            out[f"{chart}_draws"] = len(times)
    # fractions of wall time during the run: all tasks, and script / layout / style within them
    out["browser_main_thread_busy"] = round(page_data["busy"]["TaskDuration"], 3)
    for name, key in (("ScriptDuration", "script"), ("LayoutDuration", "layout"), ("RecalcStyleDuration", "style")):
        out[f"browser_{key}_share"] = round(page_data["busy"][name], 3)
    out["server_cpu_cores"] = round(page_data["server_cores"], 3)  # model thread included
    out["tokens"] = page_data["available"]
    out["page_decode_tokens_per_s"] = _parse_speed(page_data["tiles"])
    return out


WHATIF_SWEEP = [(model, gpu, batch, prompt, dtype)
                for model in ("llama-3.1-8b", "llama-3.1-70b", "mistral-7b-v0.1")
                for gpu in ("h100-sxm", "a100-80gb", "l4")
                for batch, prompt, dtype in ((1, 1024, "bf16"), (64, 8192, "int8"), (512, 32768, "int4"))
                if prompt + 256 <= 32768 or model != "mistral-7b-v0.1"]


def whatif_recompute() -> dict[str, float]:
    """Python time to rebuild every what-if chart for one setting (answer, sweeps and the five
    figures, as the page does on any change), median and worst over a sweep of settings."""
    from app.views.whatif import figures as figs
    from app.views.whatif.settings import scenario
    from app.views.whatif.text import summary
    from core import whatif
    from core.hardware import load_hardware
    from core.spec import load_model_preset

    times = []
    for model, gpu, batch, prompt, dtype in WHATIF_SWEEP:
        spec, hw = load_model_preset(model), load_hardware(gpu)
        settings = {"batch": batch, "prompt": prompt, "gen": 256, "w": dtype, "kv": "bf16", "bw_eff": 0.8,
                    "c_eff": 0.6}
        start = time.perf_counter()
        s = scenario(settings)
        ans = whatif.answer(spec, hw, s)
        summary(ans)
        for fig in (figs.roofline(ans), figs.batch_tradeoff(whatif.batch_sweep(spec, hw, s), s.batch),
                    figs.bytes_by_context(whatif.bytes_per_step_by_context(spec, s), ans.crossover_tokens, batch),
                    figs.time_split(ans), figs.memory_stack(ans)):
            json.dumps(fig)  # what st.plotly_chart sends
        times.append(1000 * (time.perf_counter() - start))
    return {"whatif_recompute_ms": round(statistics.median(times), 1), "whatif_recompute_max_ms": round(max(times), 1),
            "whatif_settings_timed": len(times), **whatif_host_recompute()}


def whatif_host_recompute() -> dict[str, float]:
    """The same on this server (its calibration; a sixth chart of predicted lines and measured points),
    median of 5; empty when this server has not been calibrated yet."""
    from app.shared import host_points
    from app.views.whatif import figures as figs
    from app.views.whatif.settings import scenario
    from app.views.whatif.text import summary
    from core import whatif
    from core.calibrate import HostNotCalibrated, resolve_hardware
    from core.spec import load_model_preset

    try:
        hw = resolve_hardware("host")
    except HostNotCalibrated:
        return {}
    spec = load_model_preset("smollm2-135m")
    settings = {"batch": 1, "prompt": 40, "gen": 48, "w": "fp32", "kv": "fp32", "bw_eff": 0.8, "c_eff": 0.6}
    times = []
    for _ in range(5):
        start = time.perf_counter()
        s = whatif.on_hardware(scenario(settings), hw)
        ans = whatif.answer(spec, hw, s)
        summary(ans)
        for fig in (figs.roofline(ans), figs.batch_tradeoff(whatif.batch_sweep(spec, hw, s), s.batch),
                    figs.bytes_by_context(whatif.bytes_per_step_by_context(spec, s), ans.crossover_tokens, 1),
                    figs.time_split(ans), figs.memory_stack(ans),
                    figs.host_measured(whatif.host_curves(spec, hw, s, 43), host_points.all_points(), [])):
            json.dumps(fig)
        times.append(1000 * (time.perf_counter() - start))
    return {"whatif_host_recompute_ms": round(statistics.median(times), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one single-line JSON object last")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from playwright.sync_api import sync_playwright

    port = free_port()
    (ROOT / "artifacts").mkdir(exist_ok=True)
    log = ROOT / "artifacts" / f"bench-{port}.log"
    proc = start_server(port, log)
    url = f"http://127.0.0.1:{port}"
    result: dict = {"max_new_tokens": MAX_NEW, "prompt": PROMPT, "cpus": os.cpu_count(),
                    "load_avg_1m_start": round(os.getloadavg()[0], 2)}
    runs: list[tuple[str, dict]] = []
    try:
        wait_healthy(port)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path())
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
            alone = RunnerAlone()
            for isolate in (True, False):
                placement = _placement(proc.pid, isolate)
                if isolate and placement == "shared":
                    continue  # one core: the shared run below is the only one
                _alone_on_server_core(alone, placement)
                runs.append((placement, _page_run(page, url, proc.pid)))
            _alone_on_server_core(alone, runs[0][0])
            _placement(proc.pid, False)
            result.update(_reading_words(page))
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    alone_rate = statistics.median(alone.rates)
    result["runner_alone_decode_tokens_per_s"] = round(alone_rate, 2)
    result["runner_alone_runs"] = [round(r, 2) for r in alone.rates]
    walls = _server_wall_rates(log)
    for i, (placement, page_data) in enumerate(runs):
        summary = _summary(page_data)
        wall = walls[i] if i < len(walls) else None
        summary["page_wall_decode_tokens_per_s"] = round(wall, 2) if wall else None
        with_page = wall or summary["page_decode_tokens_per_s"]
        summary["ui_generation_ratio"] = round(alone_rate / with_page, 3) if with_page else None
        if i == 0:
            result["placement"] = placement
            result.update(summary)
        else:
            result[placement] = summary
    result.update(whatif_recompute())
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


def _server_wall_rates(log: Path) -> list[float]:
    """Each page run's wall-clock decode rate, in order (the server logs them when PDLAB_BENCH_LOG is set)."""
    rates = []
    try:
        for line in log.read_text().splitlines():
            if line.startswith("PDLAB_RUN_WALL_TPS "):
                rates.append(float(line.split()[1]))
    except (OSError, ValueError):
        return rates
    return rates


if __name__ == "__main__":
    sys.exit(main())
