"""Shared fixtures: a tiny random-weight model for fast tests, the prepared embedded model, a live app."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"

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


@pytest.fixture(scope="session")
def embedded_model():
    """The prepared SmolLM2 (make test prepares it first). Fails loudly, never skips silently."""
    from core import prepare
    from core.model import load_embedded

    problem = prepare.verify_prepared(prepare.prepared_dir())
    if problem is not None:
        pytest.fail(f"embedded model {problem}: run `make prepare` first")
    return load_embedded(allow_download=False)


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


def start_streamlit(args_prefix: list[str], port: int, cwd: Path = ROOT, env: dict | None = None,
                    log_name: str = "streamlit", script: str = "app/streamlit_app.py") -> subprocess.Popen:
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / f"{log_name}-{port}.log", "w")  # noqa: SIM115 (outlives this call)
    cmd = [*args_prefix, "run", script, "--server.headless=true",
           f"--server.port={port}", "--server.address=127.0.0.1", "--server.fileWatcherType=none",
           "--browser.gatherUsageStats=false"]
    return subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})


def stop(proc: subprocess.Popen) -> None:
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
    proc = start_streamlit([sys.executable, "-m", "streamlit"], port, env=env, log_name=log_name)
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
    prompt tokens, KV grid columns and any Streamlit exception on the page."""
    return page.evaluate("""() => {
        const c = document.querySelector('.pd-controls');
        const kv = document.querySelector('.pd-chart[data-chart=kv]');
        const toks = document.querySelector('.pd-prompt-toks');
        return {available: c ? Number(c.dataset.available || 0) : 0, status: c ? c.dataset.status : null,
                shown: c ? Number(c.dataset.shown || 0) : 0,
                prompt: document.querySelectorAll('.pd-prompt-toks .pd-tok').length,
                promptText: toks ? toks.innerText : '',
                kvColumns: kv ? Number(kv.dataset.kvColumns || 0) : null,
                exceptions: document.querySelectorAll('[data-testid=stException]').length};
    }""")


@contextlib.contextmanager
def browser_page(browser, width: int = 1440, height: int = 1000):
    """A page in its own browser context (its own cookies and session), closed afterwards."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def page(browser):
    with browser_page(browser) as pg:
        yield pg


def pytest_collection_modifyitems(config, items):
    """Real-engine tests (tests/engines) run after every other test, the browser tests included,
    never beside them: an engine holds gigabytes and both cores. A test that kills its engine runs
    last of all. The sort is stable, so every other test keeps its order."""
    def rank(item) -> int:
        if item.get_closest_marker("kills_engine"):
            return 2
        return 1 if "engines" in Path(str(item.fspath)).relative_to(ROOT).parts[:2] else 0

    items.sort(key=rank)
