"""The on-demand experiments behind the panels: cache on/off/static, and decode at several batch sizes.

They run as queued background jobs like a generation (app.shared.jobs), so they never interleave with
another reader's run and a click elsewhere on the page does not abandon them halfway.

Fairness of the measurements: each job first runs a short untimed warm-up (the first forwards
after a pause are slow: caches and thread pools are cold), and the comparison advances its three
modes in lockstep, one forward of each in turn, so a burst of load from elsewhere on the machine
hits all three alike instead of whichever mode happened to run at that moment.

A job that ends with every forward measured hands its result to app.shared.experiment_results,
the server's last measurement that every reader's panel shows until they measure their own.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from app.shared import experiment_results
from app.shared.experiment_results import COMPARE_MODES
from app.shared.jobs import ModelJob, RunQueue
from app.shared.model import get_ceilings, make_annotator
from core import perf
from core.dtypes import normalize_dtype
from core.predictor import cost_for_event, host_predictor
from core.runner import NO_CACHE_MAX_NEW_TOKENS, GenerationSettings, encode_prompt, run
from core.spec import spec_from_config

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
PREDICTED_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)  # the predictor goes on past what is measured
BATCH_PROMPT = "Tell me a short story about a robot."
BATCH_STEPS = 8
BATCH_CONTEXT = BATCH_STEPS // 2  # tokens past the prompt at which a batch's decode step is priced
COMPARE_DEFAULT_TOKENS = NO_CACHE_MAX_NEW_TOKENS


def _warm_up(loaded: Any, prompt_ids: list[int], batch: int = 1) -> None:
    """Two untimed forwards, so the first measured one is not the cold one."""
    for _ in run(loaded, prompt_ids, GenerationSettings(max_new_tokens=2, batch=batch, stop_on_eos=False,
                                                        record_kv_norms=False)):
        pass


class CompareJob(ModelJob):
    """The same prompt and token count with each cache mode; EOS ignored so every mode runs as long.

    result["modes"][mode] is the measured ms of each forward; result["predicted"][mode] the
    predictor's ms for the same forward (None where core cannot price it).
    """

    kind = "compare"

    def __init__(self, queue: RunQueue, loaded: Any, prompt_ids: list[int], n_tokens: int) -> None:
        super().__init__(queue)
        self.loaded, self.prompt_ids = loaded, prompt_ids
        self.n_tokens = max(2, min(n_tokens, NO_CACHE_MAX_NEW_TOKENS))
        self.result: dict[str, Any] = {"prompt_len": len(prompt_ids), "n_tokens": self.n_tokens, "modes": {},
                                       "predicted": {}}

    def on_finish(self) -> None:
        experiment_results.record_finished(self.kind, self.status, self.result)

    def work(self) -> None:
        import torch

        self.progress = "warming up…"
        _warm_up(self.loaded, self.prompt_ids)
        # The three runs are generators advanced in turn, each inside its own inference_mode; the
        # outer one keeps the mode on while one of them suspends and another resumes.
        with torch.inference_mode():
            self._lockstep()

    def _lockstep(self) -> None:
        streams = {}
        for mode in COMPARE_MODES:
            settings = GenerationSettings(max_new_tokens=self.n_tokens, cache=mode, stop_on_eos=False,
                                          record_kv_norms=False)
            streams[mode] = run(self.loaded, self.prompt_ids, settings, self.should_stop,
                                annotate=make_annotator(self.loaded))
            self.result["modes"][mode] = []
            self.result["predicted"][mode] = []
        for k in range(self.n_tokens):
            if self.should_stop():
                return
            self.progress = (f"token {k + 1} of {self.n_tokens}, one forward with each cache mode in turn "
                             f"(dynamic, static, off)…")
            for mode, stream in streams.items():
                event = next(stream, None)
                if event is None:
                    return
                self.result["predicted"][mode].append(event.predicted_ms)
                self.result["modes"][mode].append(event.latency_ms)  # last: readers key off this list


class BatchJob(ModelJob):
    """Decode step time at several batch sizes, with a short context, measured beside the prediction."""

    kind = "batching"

    def __init__(self, queue: RunQueue, loaded: Any, batches: tuple[int, ...] = BATCH_SIZES,
                 steps: int = BATCH_STEPS) -> None:
        super().__init__(queue)
        self.loaded, self.batches, self.steps = loaded, batches, steps
        self.result: dict[str, Any] = {"rows": [], "batches": list(batches), "steps": steps, "predicted": [],
                                       "compute_bound_from": None, "roofline": None}

    def on_finish(self) -> None:
        experiment_results.record_finished(self.kind, self.status, self.result)

    def work(self) -> None:
        prompt_ids = encode_prompt(self.loaded, BATCH_PROMPT, chat=True)
        self.result["prompt_len"] = len(prompt_ids)
        self.progress = "predicting, then warming up…"
        self.result["predicted"], self.result["compute_bound_from"] = predicted_batches(self.loaded, len(prompt_ids))
        self.result["roofline"] = roofline_batch(self.loaded, len(prompt_ids))
        _warm_up(self.loaded, prompt_ids)
        base = GenerationSettings(max_new_tokens=self.steps + 1, stop_on_eos=False, record_kv_norms=False)
        for b in self.batches:
            if self.should_stop():
                return
            self.progress = f"batch {b}: prefill of {b} × {len(prompt_ids)} tokens, then {self.steps} decode steps…"
            settings = replace(base, batch=b)
            events = list(run(self.loaded, prompt_ids, settings, self.should_stop,
                              annotate=make_annotator(self.loaded)))
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
                "prefill ms (measured)": round(perf.ttft_ms(events), 1),
            })


def predicted_batches(loaded: Any, prompt_len: int) -> tuple[list[dict[str, Any]], float | None]:
    """The predictor's decode step at each of PREDICTED_BATCHES (context: the prompt plus a few tokens),
    and the batch size from which its compute term outgrows its memory terms (None if never, or unpriced).

    The crossover is where batching stops paying on this machine: below it a bigger batch rides on
    the same weight read; above it every extra row adds its own arithmetic time.
    """
    try:
        spec = spec_from_config(loaded.config)
        dtype = normalize_dtype(loaded.info.dtype)
        predictor = host_predictor(spec, dtype, measure=True)  # runs inside a queued job
    except Exception:  # no calibration or an architecture core cannot price: measured numbers only
        return [], None
    n_cached = prompt_len + BATCH_CONTEXT
    rows = []
    for b in PREDICTED_BATCHES:
        cost = cost_for_event(spec, 1, n_cached, b, dtype)
        ms = predictor.predict_s(cost, "decode") * 1000.0
        compute, memory = perf.decode_split_s(spec, predictor, n_cached, b, dtype)
        rows.append({"batch": b, "step ms (predicted)": round(ms, 2), "tokens/s (predicted)": round(b * 1000.0 / ms, 1),
                     "compute ms (predicted)": round(compute * 1000, 2), "memory ms (predicted)": round(memory * 1000, 2)})
    crossover = perf.compute_bound_batch(spec, predictor, n_cached, dtype)
    return rows, None if crossover is None else float(crossover)


def roofline_batch(loaded: Any, prompt_len: int) -> dict[str, float] | None:
    """The plain roofline estimate of the batch where decode stops being bandwidth-bound, or None
    (no calibration, or a model the cost model cannot price).

    The ridge point (calibrated matmul FLOP/s over weight-stream bytes/s, the page's roofline ridge)
    divided by the arithmetic intensity of one batch-1 decode step at this panel's context (the cost
    model's FLOPs over bytes moved). Every extra row adds its arithmetic but reads the same weights,
    so the intensity grows about in proportion to the batch and meets the ridge near this batch.
    It ignores what the predictor adds: fitted coefficients, a fixed overhead, and the cache and
    activation bytes that grow with every row.
    """
    return roofline_batch_with(loaded, prompt_len, get_ceilings())  # runs inside a queued job: measuring is allowed


def roofline_batch_with(loaded: Any, prompt_len: int, ceilings: Any) -> dict[str, float] | None:
    """roofline_batch with ceilings already measured (the script thread never measures; None
    without them)."""
    try:
        if ceilings is None or not ceilings.peak_flops or not ceilings.bandwidth:
            return None
        spec = spec_from_config(loaded.config)
        cost = cost_for_event(spec, 1, prompt_len + BATCH_CONTEXT, 1, normalize_dtype(loaded.info.dtype))
        intensity = cost.intensity
    except Exception:  # an architecture core cannot price: measured numbers only
        return None
    if intensity <= 0:
        return None
    ridge = ceilings.peak_flops / ceilings.bandwidth
    return {"ridge_flop_per_byte": round(ridge, 2), "decode_intensity": round(intensity, 3),
            "batch": round(ridge / intensity, 1), "peak_flops_per_s": round(ceilings.peak_flops),
            "bandwidth_bytes_per_s": round(ceilings.bandwidth)}
