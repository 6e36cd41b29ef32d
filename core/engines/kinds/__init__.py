"""The engine kinds the lab knows, one module each; importing this package registers them all.

To add an engine: a module here with a `@register`ed `EngineKind` subclass, and its import line
below. Settings (core.engines.launch), endpoints, sessions, recordings and the metrics scrape all
ask `kind_of(name)`.
"""

# The order here is the order pages and messages list them in.
# isort: off
from core.engines.kinds import vllm  # noqa: F401
from core.engines.kinds import llama_server  # noqa: F401
from core.engines.kinds import openai_server  # noqa: F401
# isort: on
from core.engines.kinds.base import KINDS, MAX_MODEL_LEN, SERVED_NAME, EngineKind, kind_of

__all__ = ["KINDS", "MAX_MODEL_LEN", "SERVED_NAME", "EngineKind", "kind_of"]
