"""Any other OpenAI-compatible server ('openai'): an operator's URL, never started by the lab."""

from __future__ import annotations

from core.engines.kinds.base import EngineKind, register


@register
class OpenAIServer(EngineKind):
    name = "openai"
    label = "OpenAI-compatible server"
    description = "any server answering /v1/completions with a stream; the lab only measures it"
