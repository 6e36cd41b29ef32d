"""Whether each configured engine answers, checked for every reader at most every few seconds.

Why cached: every click reruns the page, and a page that waited up to three seconds per engine on
every rerun would feel broken; the answer is the same for every session, so one process-wide cache
serves them all. Why in parallel: three engines that are all down then cost one timeout, not three.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from core.engines.base import Health
from core.engines.endpoints import Endpoint
from core.engines.openai import OpenAICompatible

TTL_S = 5.0
CONNECT_TIMEOUT_S = 2.0

_lock = threading.Lock()
_cache: dict[tuple[str, str], tuple[float, Health]] = {}


def _check(endpoint: Endpoint) -> Health:
    client = OpenAICompatible(endpoint.base_url, endpoint.model, connect_timeout_s=CONNECT_TIMEOUT_S)
    try:
        health = client.health()
    finally:
        client.close()
    if health.ok or not endpoint.operator:
        return health
    # an operator's URL may name a host inside their network: the reader sees only its name
    return Health(False, health.detail.replace(endpoint.base_url, endpoint.name))


def health_of(endpoints: list[Endpoint], max_age_s: float = TTL_S) -> dict[str, Health]:
    """Health of every endpoint by name, from the cache when younger than `max_age_s`."""
    now = time.monotonic()
    with _lock:
        fresh = {e.name: _cache[(e.name, e.base_url)][1] for e in endpoints
                 if (e.name, e.base_url) in _cache and now - _cache[(e.name, e.base_url)][0] < max_age_s}
    stale = [e for e in endpoints if e.name not in fresh]
    if stale:
        with ThreadPoolExecutor(max_workers=len(stale), thread_name_prefix="engine-health") as pool:
            checked = dict(zip((e.name for e in stale), pool.map(_check, stale), strict=True))
        with _lock:
            for e in stale:
                _cache[(e.name, e.base_url)] = (time.monotonic(), checked[e.name])
        fresh.update(checked)
    return fresh


def forget() -> None:
    """Drop every cached answer (a reader's "check again")."""
    with _lock:
        _cache.clear()
