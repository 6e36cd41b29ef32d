"""Shared fixtures: a tiny random-weight model for fast tests, the prepared embedded model, a live app."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
PENDING_SHOTS = ARTIFACTS / "failures" / ".pending"  # pages closed before the failure hook ran

# Tests never reach the hub: the embedded model comes from the prepared copy.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PDLAB_CACHE_DIR", str(ROOT / ".cache"))


def _byte_tokenizer():
    """A byte-level tokenizer with no merges: every byte is a token, so multi-byte characters
    split across tokens, which is exactly the case the per-token text must survive."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   unk_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    fast.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return fast


def make_tiny_model(layers: int = 2, seed: int = 0, context: int = 512):
    """A random-weight Llama with grouped-query attention, small enough to run in milliseconds."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.model import LoadedModel, ModelInfo

    tokenizer = _byte_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, max_position_embeddings=context, tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    info = ModelInfo(id="tiny-random-llama", weights_source="random", dtype="float32",
                     params=sum(p.numel() for p in model.parameters()))
    return LoadedModel(model=model, tokenizer=tokenizer, info=info)


@pytest.fixture(scope="session")
def tiny_model():
    return make_tiny_model()


@functools.cache
def _embedded():
    from core.model import load_embedded

    return load_embedded(allow_download=False)


def _prepared_problem() -> str | None:
    from core import prepare

    return prepare.verify_prepared(prepare.prepared_dir())


@pytest.fixture(scope="session")
def embedded_model():
    """The prepared SmolLM2 (make test prepares it first). Fails loudly, never skips silently."""
    problem = _prepared_problem()
    if problem is not None:
        pytest.fail(f"embedded model {problem}: run `make prepare` first")
    return _embedded()


def pytest_collection_finish(session):
    """Before the first test: measure this machine once (its calibration and the latency fit, saved
    in PDLAB_CACHE_DIR where every server and test reads them) while nothing else runs, then start
    the real engine the engine tests need in the background (tests/early_engine.py), so its minutes
    of start-up overlap the other tests instead of adding to them."""
    if session.config.option.collectonly:
        return
    items = session.items
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if any(i.get_closest_marker("model") or i.get_closest_marker("browser") for i in items) \
            and _prepared_problem() is None:
        from core.fitdata import ensure_fitted

        started = time.monotonic()
        ensure_fitted(_embedded())  # calibrates first when no calibration is cached
        if reporter is not None:
            reporter.write_line(f"host calibration and latency fit ready ({time.monotonic() - started:.0f} s)")
    # Only the first vLLM starts early: starting the prefix-cache one after it too moved its start off
    # the end of the run but slowed the tests beside it by as much (two cores leave little CPU idle).
    if any("vllm" in getattr(i, "fixturenames", ()) for i in items):
        from tests.early_engine import start_early

        start_early("vllm-b2048")
        if reporter is not None:
            reporter.write_line("vLLM starting in the background for the engine tests (they run last)")


def pytest_sessionfinish(session, exitstatus):
    from tests.early_engine import stop_all

    stop_all()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited early with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"streamlit on port {port} not healthy after {timeout} s")


# Streamlit started with faulthandler listening on SIGUSR1: when a test fails, the failure hook below
# asks every server still running for each thread's stack (written to that server's log).
STREAMLIT_WITH_STACKS = [sys.executable, "-c", (
    "import faulthandler, runpy, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
    "sys.argv[0] = 'streamlit'; runpy.run_module('streamlit', run_name='__main__')")]

# every server a test started and has not stopped: {port: (process, its log file)}
_SERVERS: dict[int, tuple[subprocess.Popen, Path]] = {}


def start_streamlit(args_prefix: list[str], port: int, cwd: Path = ROOT, env: dict | None = None,
                    log_name: str = "streamlit", script: str = "app/streamlit_app.py") -> subprocess.Popen:
    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / f"{log_name}-{port}.log"
    log = open(log_path, "w")  # noqa: SIM115 (outlives this call)
    cmd = [*args_prefix, "run", script, "--server.headless=true",
           f"--server.port={port}", "--server.address=127.0.0.1", "--server.fileWatcherType=none",
           "--browser.gatherUsageStats=false"]
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    _SERVERS[port] = (proc, log_path)
    return proc


def server_stacks(proc: subprocess.Popen, log_path: Path) -> str:
    """Every thread's stack of a server started with STREAMLIT_WITH_STACKS, read back from its log
    (with the log's tail before it); a server started otherwise would die of the signal, so only
    those are asked."""
    if proc.poll() is not None:
        return f"(server exited with {proc.returncode})\n" + log_path.read_text(errors="replace")[-20000:]
    if "faulthandler" not in " ".join(map(str, proc.args)):
        return log_path.read_text(errors="replace")[-20000:]
    before = log_path.stat().st_size
    os.kill(proc.pid, signal.SIGUSR1)
    deadline = time.time() + 5
    while time.time() < deadline and log_path.stat().st_size == before:
        time.sleep(0.05)  # the dump is written by the server's own signal handler: wait for it to land
    time.sleep(0.2)
    return log_path.read_text(errors="replace")[-40000:]


def stop(proc: subprocess.Popen) -> None:
    for port, (p, _) in list(_SERVERS.items()):
        if p is proc:
            del _SERVERS[port]
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextlib.contextmanager
def running_app(env: dict | None = None, log_name: str = "app"):
    """A Streamlit server of the app on a free loopback port, healthy inside the block (its URL
    yielded) and stopped after it; `env` adds to this process's environment."""
    port = free_port()
    proc = start_streamlit(STREAMLIT_WITH_STACKS, port, env=env, log_name=log_name)
    try:
        wait_healthy(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def app_server():
    """One Streamlit server for the browser tests, started the way a developer starts it."""
    with running_app() as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=os.environ.get("PDLAB_CHROMIUM", "/usr/bin/chromium"))
        yield chromium
        chromium.close()


def live_state(page) -> dict:
    """What the live view shows now, read from its DOM: steps received and shown, the run's state,
    prompt tokens (a follow-up's kept ones included), KV grid columns and any Streamlit exception."""
    return page.evaluate("""() => {
        const c = document.querySelector('.pd-controls');
        const kv = document.querySelector('.pd-chart[data-chart=kv]');
        const toks = document.querySelector('.pd-prompt-toks');
        return {available: c ? Number(c.dataset.available || 0) : 0, status: c ? c.dataset.status : null,
                runId: c && c.dataset.runId !== 'null' ? (c.dataset.runId || null) : null,
                shown: c ? Number(c.dataset.shown || 0) : 0,
                prompt: document.querySelectorAll('.pd-prompt-toks .pd-tok').length
                        + Number((toks && toks.dataset.kept) || 0),  // a follow-up folds its kept tokens
                promptText: toks ? toks.innerText : '',
                kvColumns: kv ? Number(kv.dataset.kvColumns || 0) : null,
                exceptions: document.querySelectorAll('[data-testid=stException]').length};
    }""")


@contextlib.contextmanager
def script_server(script: str, folder: Path, log_name: str):
    """A Streamlit server for a small page written by a test (`script`, the page's source), with
    Plotly served beside it the way the app serves it: the charts-only harness of the live-view
    tests. Yields the page's URL; the server is stopped afterwards."""
    (folder / "page.py").write_text(script, encoding="utf-8")
    (folder / "static").mkdir(exist_ok=True)  # Streamlit serves static/ beside the main script
    shutil.copy(ROOT / "app" / "static" / "plotly.min.js", folder / "static" / "plotly.min.js")
    port = free_port()
    proc = start_streamlit([sys.executable, "-m", "streamlit"], port, log_name=log_name,
                           script=str(folder / "page.py"), env={"STREAMLIT_SERVER_ENABLE_STATIC_SERVING": "true"})
    try:
        wait_healthy(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@contextlib.contextmanager
def browser_page(browser, width: int = 1440, height: int = 1000):
    """A page in its own browser context (its own cookies and session), closed afterwards."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        yield page
    except BaseException:
        # the failure hook runs after this block has closed the page: take its picture now
        with contextlib.suppress(Exception):
            PENDING_SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(PENDING_SHOTS / f"page-{time.monotonic_ns()}.png"), full_page=True,
                            timeout=15_000)
        raise
    finally:
        context.close()


@pytest.fixture
def page(browser):
    with browser_page(browser) as pg:
        yield pg


def pytest_collection_modifyitems(config, items):
    """Real-engine tests (tests/engines) run after every other test, the browser tests included,
    never beside them: an engine holds gigabytes and both cores. The tests that start a second vLLM
    with its prefix cache on come next (its start then shares the cores with no measurement), and a
    test that kills its engine runs last of all. The sort is stable, so every other test keeps its order."""
    def rank(item) -> int:
        if item.get_closest_marker("kills_engine"):
            return 3
        if item.get_closest_marker("prefix_engine"):
            return 2
        return 1 if "engines" in Path(str(item.fspath)).relative_to(ROOT).parts[:2] else 0

    items.sort(key=rank)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test leaves evidence in artifacts/failures/<test>/: a screenshot of every page its
    browser still has open, and every running test server's thread stacks and log tail."""
    report = yield
    if report.failed and call.when in ("setup", "call"):
        with contextlib.suppress(Exception):
            keep_failure_evidence(item)
    return report


def keep_failure_evidence(item) -> Path:
    folder = ARTIFACTS / "failures" / re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid)[-150:]
    folder.mkdir(parents=True, exist_ok=True)
    browser = item.funcargs.get("browser")
    pages = [v for v in item.funcargs.values() if type(v).__name__ == "Page"]
    if browser is not None:
        with contextlib.suppress(Exception):
            pages += [p for c in browser.contexts for p in c.pages if p not in pages]
    for i, pg in enumerate(pages):
        with contextlib.suppress(Exception):
            pg.screenshot(path=str(folder / f"page-{i}.png"), full_page=True, timeout=15_000)
            (folder / f"page-{i}.url.txt").write_text(pg.url)
    for shot in sorted(PENDING_SHOTS.glob("*.png")) if PENDING_SHOTS.exists() else []:
        shot.replace(folder / f"closed-{shot.name}")
    for port, (proc, log_path) in list(_SERVERS.items()):
        with contextlib.suppress(Exception):
            (folder / f"server-{port}.txt").write_text(server_stacks(proc, log_path))
    return folder


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_sessionstart(session):
    """Each run's failure evidence is its own: what an earlier run left is cleared. A run ended by
    SIGTERM (a CI timeout, `kill`) ends like Ctrl-C, so its fixtures and pytest_sessionfinish still
    stop the engines and servers it started, instead of leaving a vLLM of about 2.4 GB behind."""
    shutil.rmtree(ARTIFACTS / "failures", ignore_errors=True)
    signal.signal(signal.SIGTERM, _interrupted)
