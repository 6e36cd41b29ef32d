"""The engine's own view of a run: its Prometheus `/metrics`, scraped while the run goes.

vLLM exports histograms of TTFT and inter-token latency, running and waiting requests, KV cache
usage and preemptions; llama-server (with `--metrics`) exports counters and a few gauges. Both are
parsed with prometheus_client's text parser and flattened to `name{label=value}` keys (the model
name label dropped), so a recording holds plain numbers the page can draw beside the client's view.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from core.engines.kinds import KINDS

# each engine kind's own samples; everything else on /metrics (process, python) is not the engine's story
PREFIXES = tuple(k.metrics_prefix for k in KINDS.values() if k.metrics_prefix)
BUSY = tuple(name for k in KINDS.values() for name in k.busy_metrics)  # requests in flight
DROPPED_LABELS = {"model_name", "engine"}
KEPT_BUCKETS = ("time_to_first_token_seconds", "inter_token_latency_seconds")
MAX_METRICS_BYTES = 2_000_000


def parse(text: str) -> dict[str, float]:
    """Flattened samples of the engine's metrics; ValueError for text that is not the exposition format."""
    if len(text) > MAX_METRICS_BYTES:
        raise ValueError(f"/metrics sent {len(text):,} bytes; the limit is {MAX_METRICS_BYTES:,}")
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name
                # `_created` stamps and `_info` label sets (vLLM's whole cache config) are not measurements
                if not name.startswith(PREFIXES) or name.endswith(("_created", "_info")):
                    continue
                if name.endswith("_bucket") and not any(k in name for k in KEPT_BUCKETS):
                    continue
                labels = {k: v for k, v in sample.labels.items() if k not in DROPPED_LABELS}
                key = name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}" if labels else "")
                out[key] = float(sample.value)
    except (ValueError, TypeError, IndexError) as exc:
        raise ValueError(f"/metrics is not Prometheus text: {exc}") from None
    return out


def scrape(base_url: str, timeout_s: float = 3.0) -> dict[str, float]:
    """One scrape of `base_url`/metrics (httpx errors propagate; parse errors are ValueError)."""
    r = httpx.get(base_url.rstrip("/") + "/metrics", timeout=timeout_s, trust_env=False)
    r.raise_for_status()
    return parse(r.text)


def cache_config(base_url: str, timeout_s: float = 3.0) -> dict[str, int] | None:
    """The KV cache an engine was started with, as it publishes it (vLLM: the labels of
    `vllm:cache_config_info`): {"block_size", "kv_tokens"}; None where it publishes nothing usable."""
    try:
        r = httpx.get(base_url.rstrip("/") + "/metrics", timeout=timeout_s, trust_env=False)
        r.raise_for_status()
        return parse_cache_config(r.text)
    except (httpx.HTTPError, ValueError):
        return None


def parse_cache_config(text: str) -> dict[str, int] | None:
    """{"block_size", "kv_tokens"} from vLLM's `cache_config_info` labels (kv_cache_size_tokens, or
    num_gpu_blocks x block_size); None when absent or not whole positive numbers."""
    if len(text) > MAX_METRICS_BYTES:
        return None
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.name.endswith("cache_config_info"):
                    continue
                labels = sample.labels
                block = int(labels["block_size"])
                tokens = labels.get("kv_cache_size_tokens")
                kv = int(tokens) if tokens not in (None, "None") else int(labels["num_gpu_blocks"]) * block
                if block > 0 and kv > 0:
                    return {"block_size": block, "kv_tokens": kv}
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    return None


class Scraper:
    """Scrapes every `period_s` on a thread and hands each sample to `sink(t_s, values)`; a failed
    scrape is counted and skipped (the run's own records matter more than the engine's view)."""

    def __init__(self, base_url: str, sink: Callable[[float, dict[str, float]], None], clock: Callable[[], float],
                 period_s: float = 0.5) -> None:
        self.base_url, self.sink, self.clock, self.period_s = base_url, sink, clock, period_s
        self.failures = 0
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.once()
            self._stop.wait(self.period_s)

    def once(self) -> None:
        try:
            values = scrape(self.base_url)
        except (httpx.HTTPError, ValueError) as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"[:200]
            return
        self.sink(self.clock(), values)

    def start(self) -> Scraper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self.once()  # the final state, after the last request


def wait_idle(base_url: str, timeout_s: float = 30.0) -> bool:
    """True once the engine reports no request in flight (a run starts from an idle engine)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            values = scrape(base_url)
        except (httpx.HTTPError, ValueError):
            return False
        busy = sum(v for k, v in values.items() if k.startswith(BUSY))
        if busy == 0:
            return True
        time.sleep(0.2)
    return False
