"""Engine kinds are the way in: everything the lab does per engine is asked of its kind, and nothing
outside core/engines/kinds compares an engine's name. A throwaway kind, registered in one place,
is accepted by the operator's configuration, gets its own client, version line, dtype and label.
"""

from __future__ import annotations

import ast
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from core.engines.endpoints import operator_endpoints, version_of
from core.engines.kinds import KINDS, EngineKind, kind_of
from core.engines.kinds.base import register
from core.engines.launch import SETTINGS, EngineSetting
from core.engines.openai import OpenAICompatible
from core.engines.session import client_for, installed

ROOT = Path(__file__).resolve().parent.parent
NAMES = {"vllm", "llama-server", "openai"}


@contextlib.contextmanager
def registered(cls: type[EngineKind]) -> Iterator[type[EngineKind]]:
    register(cls)
    try:
        yield cls
    finally:
        KINDS.pop(cls.name, None)


def test_the_three_kinds_and_what_each_owns():
    assert list(KINDS)[:3] == ["vllm", "llama-server", "openai"]  # a kind added later follows them
    assert all(kind_of(n).label and kind_of(n).description for n in KINDS)
    assert kind_of("llama-server").client.__name__ == "LlamaServer"
    assert kind_of("openai").client is OpenAICompatible and not kind_of("openai").installed()
    assert SETTINGS["llama-b2048"].label == "llama-server, 2,048 tokens per iteration"
    assert SETTINGS["vllm-b256"].label == "vLLM (CPU), 256 tokens per iteration"


def test_no_engine_name_is_compared_outside_the_kinds():
    """`engine == "vllm"` and friends were spread over five files; the kinds own that now."""
    found = []
    for folder in ("core", "app"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("core/engines/kinds/"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Compare):
                    consts = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                    if NAMES & {c for c in consts if isinstance(c, str)}:
                        found.append(f"{rel}:{node.lineno}")
                elif isinstance(node, ast.Dict):  # a table keyed by engine name is a comparison too
                    keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                    if len(NAMES & keys) >= 2:
                        found.append(f"{rel}:{node.lineno}")
    assert found == []


def test_a_kind_registered_in_one_place_is_accepted_and_asked_everywhere():
    class Quiet(OpenAICompatible):
        pass

    class Tgi(EngineKind):
        name = "tgi"
        label = "Text Generation Inference"
        description = "Hugging Face's server"
        client = Quiet

        def version_label(self, reported: str, started_here: bool) -> str:
            return f"tgi {reported}"

        def dtype(self) -> str:
            return "fp16"

    entry = {"name": "my-tgi", "url": "http://127.0.0.1:9", "model": "m", "engine": "tgi"}
    env = {"PDLAB_ENGINES": json.dumps([entry])}
    refused, problems = operator_endpoints(env, set())
    assert refused == [] and "'engine' must be" in problems[0]
    with registered(Tgi):
        endpoints, problems = operator_endpoints(env, set())
        assert problems == [] and endpoints[0].engine == "tgi"
        client = client_for("tgi", "http://127.0.0.1:9", "m")
        assert type(client) is Quiet
        client.close()
        assert not installed("tgi")
        assert EngineSetting("my-tgi", "tgi", 512).dtype == "fp16"
        assert EngineSetting("my-tgi", "tgi", 512).label == "Text Generation Inference, 512 tokens per iteration"
        assert version_of(endpoints[0], timeout_s=0.2) == "tgi (version unknown)"  # nothing listens on port 9
    assert "tgi" not in KINDS
