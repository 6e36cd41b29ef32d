"""llama.cpp's llama-server ('llama-server'): the binary `make engine-setup` builds, serving the GGUF."""

from __future__ import annotations

import subprocess
from pathlib import Path

from core import settings
from core.engines.kinds.base import MAX_MODEL_LEN, SERVED_NAME, EngineKind, EngineSetting, register
from core.engines.openai import LlamaServer as LlamaServerClient
from core.engines.process import EngineProcess


def llama_server_binary() -> Path:
    return settings.engines_dir() / "llama-server" / "llama-server"


@register
class LlamaServer(EngineKind):
    name = "llama-server"
    label = "llama-server"
    description = "llama.cpp's server, with its logical and physical batch (-b, -ub) and slots (-np)"
    client = LlamaServerClient
    busy_metrics = ("llamacpp:requests_processing",)
    metrics_prefix = "llamacpp:"

    def installed(self) -> bool:
        return llama_server_binary().exists()

    def version(self) -> str:
        try:
            out = subprocess.run([str(llama_server_binary()), "--version"], capture_output=True, text=True,
                                 timeout=10)
            line = next((s for s in (out.stdout + out.stderr).splitlines() if s.startswith("version")), "")
            return f"llama-server {line.removeprefix('version: ').strip()}" if line else "llama-server"
        except (OSError, subprocess.SubprocessError):
            return "llama-server (version unknown)"

    def dtype(self) -> str:
        return "bf16"  # the GGUF it serves is priced as bf16; its scale is the fit's to absorb

    def model_label(self, dtype: str) -> str:
        return "SmolLM2-135M-Instruct (Q4_1 GGUF)"

    def process(self, setting: EngineSetting, model_dir: Path, gguf: Path | None, port: int) -> EngineProcess:
        if gguf is None:
            raise ValueError("llama-server serves a GGUF file: none was given")
        command = [str(llama_server_binary()), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
                   "-c", str(MAX_MODEL_LEN * setting.max_seqs), "-np", str(setting.max_seqs),
                   "-t", str(setting.threads), "-b", str(setting.budget), "-ub", str(min(setting.budget, 512)),
                   "--metrics", "--no-webui", "-a", SERVED_NAME]
        return EngineProcess(setting.name, command, f"http://127.0.0.1:{port}/health",
                             settings.engines_dir() / "logs" / f"{setting.name}.log")
