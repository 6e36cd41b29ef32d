"""The what-if page's settings in its link: parsed as untrusted input, written back minus defaults.

A link names a model preset and a hardware preset by name only (never a path or a URL the server
would open), and numbers within the page's own limits. Anything else falls back to its default and
says so in a notice, so a bad or old link still opens a page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.shared import link_params
from app.shared.link_params import number, whole
from core.deployment import COMPUTE_DTYPES, MAX_BATCH, MAX_TP
from core.dtypes import DTYPES
from core.hardware import CUSTOM, HOST
from core.hardware import list_presets as hardware_presets
from core.spec import list_model_presets

MAX_TOKENS = 1_048_576
# A custom GPU's figures: link key -> (label, default, low, high). The defaults are H100 SXM's
# datasheet figures (assets/hardware/h100-sxm.json), a familiar place to start editing from.
CUSTOM_FIGURES: dict[str, tuple[str, float, float, float]] = {
    "cmem": ("Memory (GB)", 80.0, 0.1, 100_000.0),
    "cbw": ("Memory bandwidth (GB/s)", 3350.0, 1.0, 1_000_000.0),
    "cfp32": ("fp32 peak (TFLOP/s, 0 = none)", 67.0, 0.0, 1_000_000.0),
    "cbf16": ("bf16 peak (TFLOP/s)", 989.4, 0.0, 1_000_000.0),
    "cfp16": ("fp16 peak (TFLOP/s)", 989.4, 0.0, 1_000_000.0),
    "cfp8": ("fp8 peak (TFLOP/s)", 1978.9, 0.0, 1_000_000.0),
    "cint8": ("int8 peak (TOPS)", 1978.9, 0.0, 1_000_000.0),
    "clink": ("Link bandwidth per direction (GB/s, 0 = none)", 450.0, 0.0, 100_000.0),
    "clat": ("Link latency per hop (µs)", 3.0, 0.0, 10_000.0),
}
PEAK_KEYS = {"cfp32": "fp32", "cbf16": "bf16", "cfp16": "fp16", "cfp8": "fp8", "cint8": "int8"}
DEFAULTS: dict[str, Any] = {"model": "llama-3.1-8b", "hw": "h100-sxm", "w": "bf16", "kv": "bf16",
                            "batch": 1, "prompt": 1024, "cached": 0, "gen": 256, "bw_eff": 0.8, "c_eff": 0.6,
                            "draft": "", "gamma": 4, "alpha": 0.7, "tp": 1, "c": "bf16",
                            **{key: default for key, (_, default, _, _) in CUSTOM_FIGURES.items()}}
DTYPE_KEYS = ("w", "kv")


def model_choices() -> list[str]:
    return list_model_presets()


def hardware_choices() -> list[str]:
    """Datasheet presets, then your own figures, then this server (calibrated, CPU)."""
    return [*(h for h in hardware_presets() if h != HOST), CUSTOM, HOST]


def hardware_label(name: str) -> str:
    return {CUSTOM: "custom: your own figures", HOST: "this server (calibrated CPU)"}.get(name, name)




def parse(raw: Mapping[str, Sequence[str]]) -> tuple[dict[str, Any], list[str]]:
    """Settings from query parameters (each a list of strings), and a notice per unusable one."""
    checks = {
        "model": lambda t: t if t in model_choices() else None,
        "hw": lambda t: t if t in hardware_choices() else None,
        "w": lambda t: t if t in DTYPES else None,
        "kv": lambda t: t if t in DTYPES else None,
        "batch": lambda t: whole(t, 1, MAX_BATCH),
        "prompt": lambda t: whole(t, 1, MAX_TOKENS),
        "cached": lambda t: whole(t, 0, MAX_TOKENS),
        "gen": lambda t: whole(t, 1, MAX_TOKENS),
        "bw_eff": lambda t: number(t, 0.05, 1.0),
        "c_eff": lambda t: number(t, 0.05, 1.0),
        "draft": lambda t: t if t in model_choices() or t == "" else None,
        "gamma": lambda t: whole(t, 1, 16),
        "alpha": lambda t: number(t, 0.0, 0.99),
        "tp": lambda t: whole(t, 1, MAX_TP),
        "c": lambda t: t if t in COMPUTE_DTYPES else None,
        **{key: (lambda t, lo=lo, hi=hi: number(t, lo, hi)) for key, (_, _, lo, hi) in CUSTOM_FIGURES.items()},
    }
    return link_params.parse(raw, DEFAULTS, checks)


def to_params(settings: Mapping[str, Any]) -> dict[str, str]:
    """Query parameters for these settings: only those that differ from the defaults."""
    return link_params.to_params(settings, DEFAULTS)


def custom_hardware(settings: Mapping[str, Any]):
    """The custom GPU these settings describe (core.hardware.custom_spec; ValueError in words)."""
    from core.hardware import custom_spec

    return custom_spec(memory_bytes=float(settings["cmem"]) * 1e9, bandwidth_bytes_per_s=float(settings["cbw"]) * 1e9,
                       peak_flops={d: float(settings[k]) * 1e12 for k, d in PEAK_KEYS.items()},
                       link_bytes_per_s=float(settings["clink"]) * 1e9, link_latency_s=float(settings["clat"]) * 1e-6)
