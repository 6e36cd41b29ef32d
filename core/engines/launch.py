"""How the project starts its own engines: vLLM's CPU build and llama.cpp's llama-server, serving the
embedded SmolLM2-135M on 127.0.0.1, with prefix reuse off (a reused prefix would measure a prefill
the stall experiment does not expect), except the one setting that measures the prefix cache itself.

The scheduler knob each exposes is the lesson: vLLM's per-iteration token budget
(`--max-num-batched-tokens`: at 2,048 a 1,536-token prompt is prefilled in one iteration, at 256 it
is chunked between decode steps); llama-server's logical and physical batch (`-b`, `-ub`) and slots
(`-np`). Set-up (environments, build, caches) lives in .engines/, made by `make engine-setup`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from core.engines.kinds import kind_of
from core.engines.process import EngineProcess, free_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class EngineSetting:
    """One engine configuration the lab measures: which engine and its scheduler knobs."""

    name: str  # e.g. "vllm-b2048": also the hardware name its calibration is saved under
    engine: str  # an engine kind's name (core.engines.kinds): "vllm" or "llama-server"
    budget: int  # tokens per iteration (vLLM's --max-num-batched-tokens, llama-server's -b/-ub)
    max_seqs: int = 16  # concurrent sequences (vLLM --max-num-seqs, llama-server -np)
    threads: int = 2
    extra: dict[str, str] = field(default_factory=dict)
    prefix_cache: bool = False  # the engine's own prefix cache (off for the stall experiment)
    kv_events: bool = False  # publish its KV cache events (core.engines.kv_events) on an ipc:// endpoint
    fit: str | None = None  # the saved fit its forwards are priced with, when not its own name's

    @property
    def dtype(self) -> str:
        """The dtype the fit prices this setting's forwards in (its engine kind's: vLLM's serving
        dtype here; the GGUF llama-server serves is priced as bf16)."""
        return kind_of(self.engine).dtype()

    @property
    def label(self) -> str:
        return f"{kind_of(self.engine).label}, {self.budget:,} tokens per iteration"


# What `make engine` serves and `engine-bench` measures. The ports are fixed so the lab page finds
# them; `engine-bench` and the tests use free ports of their own.
SETTINGS = {
    "vllm-b2048": EngineSetting("vllm-b2048", "vllm", 2048),
    "vllm-b256": EngineSetting("vllm-b256", "vllm", 256),
    "llama-b2048": EngineSetting("llama-b2048", "llama-server", 2048),
    # the same engine and budget as vllm-b256 with prefix caching on: priced with vllm-b256's fit (a
    # probe of repeated prompts would measure the cache, not the forwards)
    "vllm-b256-pc": EngineSetting("vllm-b256-pc", "vllm", 256, prefix_cache=True, kv_events=True, fit="vllm-b256"),
}
MAKE_ENGINE_PORTS = {"vllm-b2048": 8601, "vllm-b256": 8602, "llama-b2048": 8603, "vllm-b256-pc": 8604}


def engine_process(setting: EngineSetting, model_dir: Path, gguf: Path | None = None,
                   port: int | None = None) -> tuple[EngineProcess, str]:
    """The process for `setting` (not started), as its engine kind starts it, and its base URL."""
    port = port or free_port()
    return kind_of(setting.engine).process(setting, model_dir, gguf, port), f"http://127.0.0.1:{port}"
