"""The bundled engine recording the lab plays where no engine runs (Streamlit Community Cloud, or a
server where `make engine` was not started): read once per file version, checked field by field.

It is made by `python -m core engine record` (core.engines.commands) and holds, per engine setting,
the measured run, the simulator's token times for the same requests, the errors between them and
the fit the simulator used, plus when and on which machine it was recorded.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from core.engines.commands import BUNDLE_PATH
from core.engines.experiments import read_bundle
from core.engines.record import MAX_RECORD_BYTES

_lock = threading.Lock()
_cached: dict[tuple[str, float], dict[str, Any]] = {}


def load(path: Path = BUNDLE_PATH) -> tuple[dict[str, Any] | None, str | None]:
    """(the recording, None), or (None, why it cannot be played) in words."""
    try:
        stat = path.stat()
    except OSError:
        return None, f"the recording {path.name} is not on this server"
    key = (str(path), stat.st_mtime)
    with _lock:
        if key in _cached:
            return _cached[key], None
    if stat.st_size > MAX_RECORD_BYTES:
        return None, f"the recording {path.name} is {stat.st_size:,} bytes; the limit is {MAX_RECORD_BYTES:,}"
    try:
        bundle = read_bundle(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"the recording {path.name} cannot be read: {exc}"
    if not bundle["settings"]:
        return None, f"the recording {path.name} holds no run"
    with _lock:
        _cached.clear()
        _cached[key] = bundle
    return bundle, None
