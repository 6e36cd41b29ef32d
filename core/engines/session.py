"""A started engine with everything the lab needs beside it: its client, its metrics URL, its version.

`started(setting)` is a context manager: the engine is up (health answered) inside the block and
its whole process group is stopped when the block ends, however it ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.engines.base import EngineError
from core.engines.kinds import SERVED_NAME, kind_of
from core.engines.launch import EngineSetting, engine_process
from core.engines.openai import OpenAICompatible
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
    return kind_of(engine).version()


def installed(engine: str) -> bool:
    return kind_of(engine).installed()


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
    return kind_of(engine).client(base_url, model, **timeouts)


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
