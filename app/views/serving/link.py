"""The serving simulator page's settings in its link: parsed as untrusted input, written back minus defaults.

Presets and policies travel by name only; numbers within the page's limits. Anything else falls
back to its default with a notice, so an old or mistyped link still opens the page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.shared import link_params
from app.shared.link_params import number, whole
from core.hardware import HOST
from core.hardware import list_presets as hardware_presets
from core.sim.policies import POLICIES
from core.sim.routers import ROUTERS
from core.sim.simulate import DEFAULT_HARDWARE, DEFAULT_MODEL, MAX_INSTANCES
from core.sim.traffic import recordings
from core.sim.workload import ARRIVALS, load_workloads
from core.spec import list_model_presets

MAX_PAGE_REQUESTS = 5000
DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "fp32")
DEFAULTS: dict[str, Any] = {"model": DEFAULT_MODEL, "hw": DEFAULT_HARDWARE, "dtype": "bf16", "tp": 1, "inst": 2,
                            "work": "mix", "arrival": "poisson", "rate": 0.0, "n": 1000, "a": "prefill-first",
                            "b": "chunked", "budget": 512, "kv": 0, "ttft": 1.0, "tpot": 0.05, "pscale": 1.0,
                            "seed": 0, "pmed": 0, "omed": 0, "sigma": 0.0,
                            "sweep": 1.5, "tscale": 1.0, "wstart": 0, "pcache": 0, "router": "round-robin",
                            "sysn": 0, "syst": 1000, "turns": 1, "think": 5.0}
MAX_TIME_SCALE = 100.0  # a recorded trace played at most this many times faster (or slower: its inverse)


def policy_choices() -> list[str]:
    return list(POLICIES)


def router_choices() -> list[str]:
    return list(ROUTERS)




def parse(raw: Mapping[str, Sequence[str]]) -> tuple[dict[str, Any], list[str]]:
    """Settings from query parameters (each a list of strings), and a notice per unusable one."""
    gpus = [h for h in hardware_presets() if h != HOST]
    checks = {
        "model": lambda t: t if t in list_model_presets() else None,
        "hw": lambda t: t if t in gpus else None,
        "dtype": lambda t: t if t in DTYPES else None,
        "tp": lambda t: whole(t, 1, 64),
        "inst": lambda t: whole(t, 1, MAX_INSTANCES),
        "work": lambda t: t if t in load_workloads() or t in recordings() else None,
        "arrival": lambda t: t if t in ARRIVALS else None,
        "rate": lambda t: number(t, 0.0, 10_000.0),
        "n": lambda t: whole(t, 10, MAX_PAGE_REQUESTS),
        "a": lambda t: t if t in policy_choices() else None,
        "b": lambda t: t if t in policy_choices() else None,
        "budget": lambda t: whole(t, 16, 65_536),
        "kv": lambda t: whole(t, 0, 10_000_000),
        "ttft": lambda t: number(t, 0.001, 600.0),
        "tpot": lambda t: number(t, 0.0001, 10.0),
        "pscale": lambda t: number(t, 0.1, 8.0),
        "seed": lambda t: whole(t, 0, 2**32 - 1),
        "pmed": lambda t: whole(t, 0, 131_072),
        "omed": lambda t: whole(t, 0, 131_072),
        "sigma": lambda t: number(t, 0.0, 3.0),
        "sweep": lambda t: number(t, 0.5, 4.0),
        "tscale": lambda t: number(t, 1 / MAX_TIME_SCALE, MAX_TIME_SCALE),
        "wstart": lambda t: whole(t, 0, 59),
        "pcache": lambda t: whole(t, 0, 1),
        "router": lambda t: t if t in router_choices() else None,
        "sysn": lambda t: whole(t, 0, 100),
        "syst": lambda t: whole(t, 1, 32_768),
        "turns": lambda t: whole(t, 1, 20),
        "think": lambda t: number(t, 0.0, 600.0),
    }
    return link_params.parse(raw, DEFAULTS, checks)


def to_params(settings: Mapping[str, Any]) -> dict[str, str]:
    """Query parameters for these settings: only those that differ from the defaults."""
    return link_params.to_params(settings, DEFAULTS)
