"""What makes one serving engine different from another, in one class per engine kind.

A kind owns everything the lab does differently per engine: how it is started (its command, on
127.0.0.1), whether it is set up here and which version, the client that speaks its streaming API
best, the dtype the fit prices its forwards in, the model line a recording carries, and which of
its `/metrics` say it is busy. Everything else (the player, the recorder, the fit, the page) asks
the kind, never compares an engine's name, so adding an engine is one module in this package and
its import line in `__init__.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Protocol

from core.engines.openai import OpenAICompatible
from core.engines.process import EngineProcess
from core.registry import Registry


class EngineSetting(Protocol):
    """What a kind reads of a setting to start it (core.engines.launch.EngineSetting has it)."""

    name: str
    budget: int
    max_seqs: int
    threads: int

SERVED_NAME = "smollm2"  # the model name every engine the lab starts serves under
MAX_MODEL_LEN = 4096


class EngineKind:
    """One engine kind. `name` is its registry key and what a setting or an endpoint names."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""  # for the page: "vLLM (CPU)"
    description: ClassVar[str] = ""
    client: ClassVar[type[OpenAICompatible]] = OpenAICompatible
    busy_metrics: ClassVar[tuple[str, ...]] = ()  # /metrics samples that count requests in flight
    metrics_prefix: ClassVar[str] = ""  # its own samples on /metrics ("vllm:"); the rest is not its story
    tpot_experiment: ClassVar[bool] = False  # the benchmark's one-request TPOT check runs on this kind

    def installed(self) -> bool:
        """Whether `make engine-setup` has put it on this server (an outside server: never)."""
        return False

    def version(self) -> str:
        """The installed version, read without starting it."""
        return f"{self.name} (version unknown)"

    def version_label(self, reported: str, started_here: bool) -> str:
        """How a version the running server reported (`/version`) is recorded."""
        return f"{self.name} {reported}"

    def dtype(self) -> str:
        """The dtype the fit prices its forwards in."""
        return "bf16"

    def model_label(self, dtype: str) -> str | None:
        """The model line of a recording, when the lab started it (None: say what the server serves)."""
        return None

    def process(self, setting: EngineSetting, model_dir: Path, gguf: Path | None,
                port: int) -> EngineProcess:
        """The process that serves `setting` on 127.0.0.1:`port` (not started)."""
        raise ValueError(f"the lab does not start {self.label or self.name} itself: name its URL instead")


_REGISTRY: Registry[EngineKind] = Registry("engine kind")
KINDS = _REGISTRY.entries
register = _REGISTRY.register


def kind_of(name: str) -> EngineKind:
    """The kind registered under `name`; ValueError listing the known kinds otherwise."""
    return _REGISTRY.get(name)()
