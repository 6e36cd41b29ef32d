"""Why a serving engine decodes the same model faster than this project's runner: the recording's
TPOT of both on the same prompt, with the bytes each decode step moves (computed by the cost
model), the bandwidth that implies (computed: bytes / measured TPOT) and the time per layer.

Plain functions of the recording's "tpot" object (core.engines.commands.runner_tpot and
engine_tpot), testable without a browser.
"""

from __future__ import annotations

from typing import Any

RUNNER_KEYS = ("float32-page", "float32-2t", "bfloat16-2t")


def _runner_label(key: str, r: dict[str, Any]) -> str:
    n = r.get("threads", 1)
    page = " (the live page's setting)" if key == "float32-page" else ""
    return f"this project's runner, {'bf16' if 'bfloat16' in key else 'fp32'}, {n} thread{'s' if n != 1 else ''}{page}"


def rows(tpot: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per measured setting, the engine last; empty when the recording has no TPOT."""
    out = []
    runner = (tpot or {}).get("runner") or {}
    for key in RUNNER_KEYS:
        r = runner.get(key)
        if r and r.get("tpot_ms"):
            out.append(_row(_runner_label(key, r), r))
    engine = (tpot or {}).get("engine")
    if engine and engine.get("tpot_ms"):
        out.append(_row(f"the engine (vLLM CPU), {engine.get('dtype', 'bf16')}, {engine.get('threads', 2)} threads",
                        engine))
    return out


def _row(label: str, r: dict[str, Any]) -> dict[str, Any]:
    return {"who": label, "TPOT, ms (measured)": round(r["tpot_ms"], 1),
            "MB per decode step (computed)": round(r["bytes_per_step"] / 1e6),
            "GB/s achieved (computed)": round(r["achieved_bandwidth_gb_s"], 1),
            "ms per layer (computed)": round(r["ms_per_layer"], 2)}


def story(tpot: dict[str, Any]) -> str:
    """The difference in words, from the recording's own numbers ("" when it has none)."""
    runner = (tpot or {}).get("runner") or {}
    engine = (tpot or {}).get("engine") or {}
    fp32, bf16 = runner.get("float32-2t"), runner.get("bfloat16-2t")
    if not (fp32 and bf16 and engine.get("tpot_ms")):
        return ""
    e, b, f = engine, bf16, fp32
    same = f if engine.get("dtype") == "fp32" else b  # the runner row that moves the engine's bytes
    if e["tpot_ms"] >= same["tpot_ms"]:
        return (f"On this recording's machine the engine was not faster: vLLM took {e['tpot_ms']:.0f} ms per token "
                f"({e['ms_per_layer']:.2f} ms per layer) against the runner's {same['tpot_ms']:.0f} ms in the same "
                f"dtype, for the same {e['bytes_per_step'] / 1e6:,.0f} MB per step. vLLM's CPU kernels are written "
                "for AVX-512 vector instructions; on a CPU without them it falls back to slower general code, "
                "while PyTorch's own kernels still use the vector units the CPU has.")
    return (
        f"Every decode step reads all the weights, so bytes per step set the pace. In fp32 the runner moves "
        f"{f['bytes_per_step'] / 1e6:,.0f} MB per step and takes {f['tpot_ms']:.0f} ms; in bf16 the bytes halve "
        f"({b['bytes_per_step'] / 1e6:,.0f} MB) and the step takes {b['tpot_ms']:.0f} ms"
        + (f", not half: the runner's bf16 steps stream {b['achieved_bandwidth_gb_s']:.1f} GB/s against "
           f"{f['achieved_bandwidth_gb_s']:.1f} in fp32. " if b['achieved_bandwidth_gb_s'] < f['achieved_bandwidth_gb_s']
           else ". ")
        + f"vLLM, serving in {e.get('dtype', 'bf16')}, moves the "
        f"same {e['bytes_per_step'] / 1e6:,.0f} MB in {e['tpot_ms']:.0f} ms, {e['achieved_bandwidth_gb_s']:.1f} GB/s: "
        f"{e['ms_per_layer']:.2f} ms per layer against the runner's {same['ms_per_layer']:.2f}. The engine runs each "
        "layer as a few fused native kernels over a preallocated, paged cache, with no Python between them; the "
        "runner is plain PyTorch eager mode, one small operation after another, each with its own launch and "
        "its own pass over memory. Same model, same bytes to read: the engine wastes less time between reads.")
