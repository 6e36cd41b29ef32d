"""The what-if page's settings in its link: parsed as untrusted input, written back minus defaults.

A link names a model preset and a hardware preset by name only (never a path or a URL the server
would open), and numbers within the page's own limits. Anything else falls back to its default and
says so in a notice, so a bad or old link still opens a page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.services import link_params
from app.services.link_params import number, whole
from core.dtypes import DTYPES
from core.hardware import HOST
from core.hardware import list_presets as hardware_presets
from core.spec import list_model_presets
from core.whatif import COMPUTE_DTYPES, MAX_BATCH, MAX_TP

DEFAULTS: dict[str, Any] = {"model": "llama-3.1-8b", "hw": "h100-sxm", "w": "bf16", "kv": "bf16",
                            "batch": 1, "prompt": 1024, "gen": 256, "bw_eff": 0.8, "c_eff": 0.6,
                            "draft": "", "gamma": 4, "alpha": 0.7, "tp": 1}
MAX_TOKENS = 1_048_576
DTYPE_KEYS = ("w", "kv")


def model_choices() -> list[str]:
    return list_model_presets()


def hardware_choices() -> list[str]:
    """Datasheet presets only: "host" is this server, priced on the live page from its calibration."""
    return [h for h in hardware_presets() if h != HOST]




def parse(raw: Mapping[str, Sequence[str]]) -> tuple[dict[str, Any], list[str]]:
    """Settings from query parameters (each a list of strings), and a notice per unusable one."""
    checks = {
        "model": lambda t: t if t in model_choices() else None,
        "hw": lambda t: t if t in hardware_choices() else None,
        "w": lambda t: t if t in DTYPES else None,
        "kv": lambda t: t if t in DTYPES else None,
        "batch": lambda t: whole(t, 1, MAX_BATCH),
        "prompt": lambda t: whole(t, 1, MAX_TOKENS),
        "gen": lambda t: whole(t, 1, MAX_TOKENS),
        "bw_eff": lambda t: number(t, 0.05, 1.0),
        "c_eff": lambda t: number(t, 0.05, 1.0),
        "draft": lambda t: t if t in model_choices() or t == "" else None,
        "gamma": lambda t: whole(t, 1, 16),
        "alpha": lambda t: number(t, 0.0, 0.99),
        "tp": lambda t: whole(t, 1, MAX_TP),
    }
    return link_params.parse(raw, DEFAULTS, checks)


def to_params(settings: Mapping[str, Any]) -> dict[str, str]:
    """Query parameters for these settings: only those that differ from the defaults."""
    return link_params.to_params(settings, DEFAULTS)


def compute_dtype_for(weight_dtype: str) -> str:
    return weight_dtype if weight_dtype in COMPUTE_DTYPES else "bf16"
