"""How the project starts its own engines: vLLM's CPU build and llama.cpp's llama-server, serving the
embedded SmolLM2-135M on 127.0.0.1, with prefix reuse off (a reused prefix would measure a prefill
the simulator does not model).

The scheduler knob each exposes is the lesson: vLLM's per-iteration token budget
(`--max-num-batched-tokens`: at 2,048 a 1,536-token prompt is prefilled in one iteration, at 256 it
is chunked between decode steps); llama-server's logical and physical batch (`-b`, `-ub`) and slots
(`-np`). Set-up (environments, build, caches) lives in .engines/, made by `make engine-setup`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from core import settings
from core.engines.process import EngineProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
SERVED_NAME = "smollm2"


def engines_dir() -> Path:
    return settings.engines_dir()


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags Linux reports for this CPU (empty where there is no /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def engine_dtype(flags: frozenset[str] | None = None) -> str:
    """The dtype vLLM serves the embedded model in here, as the cost model spells it ("bf16"/"fp32").

    vLLM's CPU kernels for bf16 are written for AVX-512; on a CPU without it (AVX2 only) they fall
    back to a path that was measured 4-5x slower than fp32 on the same machine, so fp32 is chosen
    there. PDLAB_ENGINE_DTYPE overrides the choice."""
    chosen = settings.engine_dtype_setting()
    if chosen != "auto":
        return "bf16" if chosen == "bfloat16" else "fp32"
    return "bf16" if "avx512f" in (cpu_flags() if flags is None else flags) else "fp32"


def vllm_dtype_name(dtype: str) -> str:
    return {"bf16": "bfloat16", "fp32": "float32"}[dtype]


def vllm_python() -> Path:
    return engines_dir() / "vllm-venv" / "bin" / "python"


def llama_server_binary() -> Path:
    return engines_dir() / "llama-server" / "llama-server"


@dataclass(frozen=True)
class EngineSetting:
    """One engine configuration the lab measures: which engine and its scheduler knobs."""

    name: str  # e.g. "vllm-b2048": also the hardware name its calibration is saved under
    engine: str  # "vllm" or "llama-server"
    budget: int  # tokens per iteration (vLLM's --max-num-batched-tokens, llama-server's -b/-ub)
    max_seqs: int = 16  # concurrent sequences (vLLM --max-num-seqs, llama-server -np)
    threads: int = 2
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def dtype(self) -> str:
        """The dtype the fit prices this setting's forwards in: vLLM's serving dtype here; the GGUF
        llama-server serves is priced as bf16 (its scale is the fit's to absorb)."""
        return engine_dtype() if self.engine == "vllm" else "bf16"

    @property
    def label(self) -> str:
        kind = "vLLM (CPU)" if self.engine == "vllm" else "llama-server"
        return f"{kind}, {self.budget:,} tokens per iteration"


# What `make engine` serves and `engine-bench` measures. The ports are fixed so the lab page finds
# them; `engine-bench` and the tests use free ports of their own.
SETTINGS = {
    "vllm-b2048": EngineSetting("vllm-b2048", "vllm", 2048),
    "vllm-b256": EngineSetting("vllm-b256", "vllm", 256),
    "llama-b2048": EngineSetting("llama-b2048", "llama-server", 2048),
}
MAKE_ENGINE_PORTS = {"vllm-b2048": 8601, "vllm-b256": 8602, "llama-b2048": 8603}
MAX_MODEL_LEN = 4096


def engine_process(setting: EngineSetting, model_dir: Path, gguf: Path | None = None,
                   port: int | None = None) -> tuple[EngineProcess, str]:
    """The process for `setting` (not started) and its base URL."""
    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    logs = engines_dir() / "logs"
    if setting.engine == "vllm":
        cache = engines_dir() / "vllm-cache"
        env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
               "VLLM_CACHE_ROOT": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
               "OMP_NUM_THREADS": str(setting.threads), "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        command = [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                   "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
                   "--dtype", vllm_dtype_name(engine_dtype()), "--max-model-len", str(MAX_MODEL_LEN),
                   "--max-num-batched-tokens", str(setting.budget), "--max-num-seqs", str(setting.max_seqs),
                   "--no-enable-prefix-caching"]
        return EngineProcess(setting.name, command, f"{base}/health", logs / f"{setting.name}.log", env), base
    if setting.engine == "llama-server":
        if gguf is None:
            raise ValueError("llama-server serves a GGUF file: none was given")
        command = [str(llama_server_binary()), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
                   "-c", str(MAX_MODEL_LEN * setting.max_seqs), "-np", str(setting.max_seqs),
                   "-t", str(setting.threads), "-b", str(setting.budget), "-ub", str(min(setting.budget, 512)),
                   "--metrics", "--no-webui", "-a", SERVED_NAME]
        return EngineProcess(setting.name, command, f"{base}/health", logs / f"{setting.name}.log"), base
    raise ValueError(f"unknown engine {setting.engine!r}")
