"""The on-demand experiments behind the panels: cache on/off/static, and decode at several batch sizes.

They run as queued background jobs like a generation (app.jobs), so they never interleave with
another reader's run and a click elsewhere on the page does not abandon them halfway.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from app.jobs import Job, RunQueue
from app.model_service import make_annotator
from core.runner import NO_CACHE_MAX_NEW_TOKENS, GenerationSettings, encode_prompt, run

BATCH_SIZES = (1, 2, 4, 8, 16)
BATCH_PROMPT = "Tell me a short story about a robot."
BATCH_STEPS = 8
COMPARE_MODES = ("dynamic", "static", "none")


class CompareJob(Job):
    """The same prompt and token count with each cache mode; EOS ignored so every mode runs as long."""

    kind = "compare"

    def __init__(self, queue: RunQueue, loaded: Any, prompt_ids: list[int], n_tokens: int) -> None:
        super().__init__(queue)
        self.loaded, self.prompt_ids = loaded, prompt_ids
        self.n_tokens = max(2, min(n_tokens, NO_CACHE_MAX_NEW_TOKENS))
        self.result: dict[str, Any] = {"prompt_len": len(prompt_ids), "n_tokens": self.n_tokens, "modes": {}}

    def work(self) -> None:
        for mode in COMPARE_MODES:
            if self.should_stop():
                return
            self.progress = f"running with cache = {mode} ({self.n_tokens} tokens)…"
            settings = GenerationSettings(max_new_tokens=self.n_tokens, cache=mode, stop_on_eos=False,
                                          record_kv_norms=False)
            latencies = [e.latency_ms for e in run(self.loaded, self.prompt_ids, settings, self.should_stop)]
            self.result["modes"][mode] = latencies


class BatchJob(Job):
    """Decode step time at several batch sizes, with a short context, measured beside the prediction."""

    kind = "batching"

    def __init__(self, queue: RunQueue, loaded: Any, batches: tuple[int, ...] = BATCH_SIZES,
                 steps: int = BATCH_STEPS) -> None:
        super().__init__(queue)
        self.loaded, self.batches, self.steps = loaded, batches, steps
        self.result: dict[str, Any] = {"rows": [], "steps": steps}

    def work(self) -> None:
        prompt_ids = encode_prompt(self.loaded, BATCH_PROMPT, chat=True)
        self.result["prompt_len"] = len(prompt_ids)
        base = GenerationSettings(max_new_tokens=self.steps + 1, stop_on_eos=False, record_kv_norms=False)
        for b in self.batches:
            if self.should_stop():
                return
            self.progress = f"batch {b}: prefill of {b} × {len(prompt_ids)} tokens, then {self.steps} decode steps…"
            settings = replace(base, batch=b)
            events = list(run(self.loaded, prompt_ids, settings, self.should_stop,
                              annotate=make_annotator(self.loaded, settings)))
            decode = events[1:]
            if not decode:
                return
            step_ms = statistics.median(e.latency_ms for e in decode)
            predicted = [e.predicted_ms for e in decode if e.predicted_ms is not None]
            pred_ms = statistics.median(predicted) if predicted else None
            self.result["rows"].append({
                "batch": b, "decode step ms (measured, median)": round(step_ms, 2),
                "decode step ms (predicted)": round(pred_ms, 2) if pred_ms else None,
                "tokens/s (measured)": round(b * 1000.0 / step_ms, 1),
                "tokens/s (predicted)": round(b * 1000.0 / pred_ms, 1) if pred_ms else None,
                "prefill ms (measured)": round(events[0].latency_ms, 1),
            })
