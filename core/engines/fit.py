"""The simulator calibrated to a real engine: a short probe, the same predictor, the same terms.

No second cost model: the probe measures the engine's forwards as the client sees them (a prefill
alone, as the TTFT of a one-token request; decode steps at a few batch sizes and one over a long
cache, as the steady gaps between tokens of that many concurrent streams), prices each with
core.cost, and fits the host predictor's coefficients to them with core.predictor.fit, plus the
fixed extra of a forward that carries a prompt and the extra of attention over the cache (terms
the host fit keeps at 0, see ENGINE_TERMS). One more difference: an engine's fixed cost per
iteration (scheduler, sampler, detokeniser, HTTP) is its own, not the project's runner's, so the
runner's measured overhead is not added; that constant is folded into the weight-stream (memory)
term, which is also the same for every step of one model.

The fit is saved under the setting's name (e.g. "vllm-b256"), which `simulate --hardware` accepts.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

from core import settings
from core.dtypes import normalize_dtype
from core.engines.base import EngineClient, EngineError
from core.engines.launch import EngineSetting
from core.engines.player import play
from core.engines.record import EngineRun
from core.predictor import UNFITTED, Predictor, fit
from core.sim.workload import Request
from core.spec import ModelSpec

DEFAULT_DTYPE = "bf16"  # what a fit saved before fits carried their dtype was priced in
# The host fit's terms plus two the host keeps at 0. The fixed extra of a multi-token forward: an
# engine's prefill pays a cost per iteration that carries a prompt (building its attention
# metadata, then the request's first-token bookkeeping), measured here as short prompts' TTFT well
# above a decode step. The attention extra: an engine's attention kernel over a long cache can run
# well below its matrix products' rate, which shows as each later chunk of a chunked prompt taking
# longer than the compute term alone charges; the probe's prefill lengths span a share of
# attention from almost none to a fifth of the FLOPs, so the two rates are told apart.
ENGINE_TERMS = ("memory", "kv", "compute", "prefill_extra", "attention")
PREFILL_LENGTHS = (32, 256, 768, 1536)
DECODE_BATCHES = (1, 4, 8, 16)
DECODE_PROMPT, DECODE_OUTPUT, SKIP = 64, 40, 6  # gaps before SKIP and in the last SKIP tokens are ramps
# One decode probe over a long cache. The short ones all read 84 cached positions per stream, so the
# cache a step reads (the KV term) differs between them only with the batch size, which per-stream
# costs follow too, and a little noise moved the fitted KV term anywhere; a queue's decode steps
# (sixteen streams over hundreds of positions each) are priced mostly by it. Eight streams over ~800
# positions read five times the cache of the largest short probe. Its output is longer: the steady
# steps begin once every stream has its first token (eight 768-token prompts take 24 iterations at a
# budget of 256).
LONG_DECODE_PROMPT, LONG_DECODE_OUTPUT, LONG_DECODE_BATCH = 768, 64, 8
# Prompts sent at once, to separate a per-request cost outside the forwards (HTTP, tokenizing, one
# request at a time in the engine's front end) from a forward's own fixed cost: one prompt pays both
# once; k prompts sent together pay the forward's once and the front end's k times.
CONCURRENT = (1, 4, 8, 16)
CONCURRENT_PROMPT = 32
REQUEST_COST_GRID_S = tuple(i / 2000 for i in range(0, 81))  # 0 to 40 ms in steps of 0.5 ms
FITS_FORMAT = 3  # 2: each fit carries the ceilings it was fitted on; 3: and the attention extra
KV_SPACE_BYTES = 1 << 30  # VLLM_CPU_KVCACHE_SPACE=1 (core.engines.launch)


def embedded_spec() -> ModelSpec:
    from core.spec import load_model_preset

    return load_model_preset("smollm2-135m")


def prefill_forwards(spec: ModelSpec, n: int, budget: int, dtype: str = DEFAULT_DTYPE) -> list[dict]:
    """The forwards an engine with `budget` tokens per iteration runs for an n-token prompt alone:
    chunks of at most `budget`, each over the chunks before it (one forward when n <= budget)."""
    from core.predictor import cost_for_event

    out, done = [], 0
    while done < n:
        chunk = min(budget, n - done)
        out.append(cost_for_event(spec, chunk, done, 1, dtype).to_dict())
        done += chunk
    return out


def probe(client: EngineClient, budget: int, repeats: int = 2, seed: int = 7,
          dtype: str = DEFAULT_DTYPE) -> list[tuple[dict | list[dict], str, float]]:
    """(cost, phase, measured seconds) of prefills alone (priced as the chunks `budget` makes of
    them) and of decode steps (decode_probes). One short request first, unmeasured: the first
    request after a quiet spell ran 30 ms slower than the next ones."""
    from core.predictor import cost_for_event

    spec = embedded_spec()
    samples: list[tuple[dict | list[dict], str, float]] = []
    play(client, [Request(10_000, 0.0, 16, 2)], _probe_run(), seed=seed - 1, timeout_s=120)
    rid = 0
    for rep in range(repeats):
        for n in PREFILL_LENGTHS:
            run = play(client, [Request(rid, 0.0, n, 1)], _probe_run(), seed=seed + rid, timeout_s=120)
            rid += 1
            ttft = run.requests[0].ttft_s
            if ttft is not None:
                forwards = prefill_forwards(spec, n, budget, dtype)
                samples.append((forwards if len(forwards) > 1 else forwards[0], "prefill", ttft))
        for prompt, output, b in decode_probes():
            requests = [Request(rid + k, 0.0, prompt, output) for k in range(b)]
            rid += b
            run = play(client, requests, _probe_run(), seed=seed + rid + 1000 * rep, timeout_s=300)
            step = batch_step_s([r.token_s for r in run.requests if not r.error and r.token_s])
            if step is not None:
                cached = prompt + output // 2
                samples.append((cost_for_event(spec, 1, cached, b, dtype).to_dict(), "decode", step))
    return samples


def batch_step_s(streams: list[list[float]]) -> float | None:
    """The decode step of streams sent together: the median over streams of steady_step_s, counted
    from the moment every stream has its first token (before it, other streams' prompt chunks share
    the steps)."""
    after = max((t[0] for t in streams if t), default=0.0)
    steps = [step for t in streams if (step := steady_step_s([x for x in t if x >= after])) is not None]
    return median(steps) if steps else None


def decode_probes() -> list[tuple[int, int, int]]:
    """(prompt, output, streams) of each decode probe: the short ones at DECODE_BATCHES, then the
    long-cache one."""
    return [(DECODE_PROMPT, DECODE_OUTPUT, b) for b in DECODE_BATCHES] + \
        [(LONG_DECODE_PROMPT, LONG_DECODE_OUTPUT, LONG_DECODE_BATCH)]


def probe_concurrent(client: EngineClient, repeats: int = 2, seed: int = 11) -> list[tuple[int, list[float]]]:
    """(k, each request's measured TTFT, sorted) for k short prompts sent at the same moment."""
    out: list[tuple[int, list[float]]] = []
    rid = 20_000
    for rep in range(repeats):
        for k in CONCURRENT:
            requests = [Request(rid + i, 0.0, CONCURRENT_PROMPT, 1) for i in range(k)]
            rid += k
            run = play(client, requests, _probe_run(), seed=seed + rid + 1000 * rep, timeout_s=120)
            ttfts = sorted(r.ttft_s for r in run.requests if not r.error and r.ttft_s is not None)
            if len(ttfts) == k:
                out.append((k, ttfts))
    return out


def steady_step_s(token_s: list[float]) -> float | None:
    """A stream's mean time per token between its first and last SKIP tokens (the ramps left out).
    The mean over that span, not the median gap: a busy engine streams several tokens in one event,
    and with sixteen streams over half the single gaps were measured as zero."""
    steady = token_s[SKIP:len(token_s) - SKIP]
    if len(steady) < 2 or steady[-1] <= steady[0]:
        return None
    return (steady[-1] - steady[0]) / (len(steady) - 1)


def _probe_run() -> EngineRun:
    return EngineRun(engine="probe", setting="probe", model="smollm2", started_at="")


def base_predictor(dtype: str = DEFAULT_DTYPE) -> Predictor:
    """The host predictor for the embedded model in the engine's dtype, unfitted, without the
    runner's own per-forward overhead (see the module docstring), and with its FLOPs at one peak: the
    row curves were calibrated on this process's PyTorch matmuls, not an engine's kernels, and a fit
    saved in assets/engines/fits.json is rebuilt without them."""
    from core.predictor import host_predictor

    return replace(host_predictor(embedded_spec(), dtype, use_fit=False), overhead_s=0.0, layer_curve=(),
                   head_curve=())


MAX_FIT_ERROR = 0.35  # a fit worse than this on its own probe says the probe was disturbed, not the engine


def fit_engine(samples: list[tuple[dict | list[dict], str, float]], setting: EngineSetting) -> Predictor:
    """The fitted predictor; EngineError, in words, when the probe's figures cannot be trusted."""
    kept = [(c, p, m) for c, p, m in samples if math.isfinite(m) and m > 0]
    if len(kept) < 6:
        raise EngineError(f"the probe of {setting.name} measured only {len(kept)} usable forwards; "
                          "the engine may have failed or be overloaded: calibrate again")
    fitted = fit(base_predictor(setting.dtype), kept, label=f"engine {setting.name}", terms=ENGINE_TERMS)
    errors = sorted(abs(predicted_s(fitted, c, p) - m) / m for c, p, m in kept)
    if errors[len(errors) // 2] > MAX_FIT_ERROR:
        raise EngineError(f"the probe of {setting.name} does not fit itself (median error "
                          f"{errors[len(errors) // 2]:.0%}): the machine was probably busy with other work; "
                          "calibrate again when it is quiet")
    return fitted


def predicted_s(predictor: Predictor, cost: dict | list[dict], phase: str) -> float:
    """What `predictor` says a probe sample took: the sum over its forwards (a chunked prompt has several)."""
    return sum(predictor.predict_s(c, phase) for c in (cost if isinstance(cost, list) else [cost]))


def _path():
    return settings.cache_dir() / "engine-fits.json"


def save(setting: EngineSetting, predictor: Predictor, samples: list[tuple[dict | list[dict], str, float]],
         engine_version: str = "", capacity: dict[str, int] | None = None,
         request_overhead_s: float = 0.0) -> dict[str, Any]:
    """Save the fit with everything the simulator needs of its engine: the token budget, the most
    running sequences, the KV capacity and block size (`capacity`, read from the engine; computed
    from the KV space it was given when the engine does not publish it) and the per-request cost."""
    from core.cost import kv_bytes_per_token

    dtype = normalize_dtype(predictor.dtype)
    read = capacity is not None
    entry = {"coef": dict(predictor.coef), "dtype": dtype, "engine": setting.engine,
             "engine_version": engine_version, "budget": setting.budget, "max_seqs": setting.max_seqs,
             "kv_tokens": capacity["kv_tokens"] if read else KV_SPACE_BYTES // kv_bytes_per_token(embedded_spec(), dtype),
             "block_size": capacity["block_size"] if read else 16,
             "kv_source": "read from the engine's /metrics" if read else "computed from the KV space given",
             "request_overhead_s": round(float(request_overhead_s), 6),
             "fitted_at": datetime.now(UTC).isoformat(timespec="seconds"),
             "samples": [_sample_record(predictor, c, p, m) for c, p, m in samples],
             # the ceilings the coefficients multiply, kept with them: a later host calibration (or none,
             # on a server that has not calibrated) must not change what this fit predicts
             "base": {"hardware": predictor.hardware.to_dict(), "n_layers": predictor.n_layers,
                      "overhead_s": predictor.overhead_s, "bandwidth": predictor.bandwidth, "peak": predictor.peak}}
    data = load_all(bundled=False)
    data[setting.name] = entry
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"format": FITS_FORMAT, "fits": data}, indent=1))
    tmp.replace(path)
    return entry


def _sample_record(predictor: Predictor, cost: dict | list[dict], phase: str, measured: float) -> dict[str, Any]:
    forwards = cost if isinstance(cost, list) else [cost]
    return {"phase": phase, "n_new": sum(int(c.get("n_new", 1)) for c in forwards), "forwards": len(forwards),
            "n_cached": int(forwards[0].get("n_cached", 0)), "batch": int(forwards[0].get("batch", 1)),
            "measured_s": measured, "predicted_s": predicted_s(predictor, cost, phase)}


BUNDLED_FITS = Path(__file__).resolve().parents[2] / "assets" / "engines" / "fits.json"


def _read_fits(path: Path) -> dict[str, dict[str, Any]]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict) or raw.get("format") != FITS_FORMAT or not isinstance(raw.get("fits"), dict):
        return {}
    return raw["fits"]


def bundle(entries: dict[str, dict[str, Any]]) -> None:
    """Write `entries` (fits just made) over the bundled ones: `engine calibrate --bundle`."""
    data = {**_read_fits(BUNDLED_FITS), **entries}
    text = json.dumps({"format": FITS_FORMAT, "about": "Fits of the simulator to vLLM's CPU build, made by `python -m "
                       "core engine calibrate --bundle` on the machine each entry's samples came from; used where "
                       "this machine has none of its own (core.engines.fit.load_all).", "fits": data}, indent=1)
    BUNDLED_FITS.write_text(text + "\n", encoding="utf-8")


def load_all(bundled: bool = True) -> dict[str, dict[str, Any]]:
    """Every saved fit by name: this machine's (the cache's), over the bundled ones (assets/engines/
    fits.json: what a fresh clone's `simulate --hardware vllm-b256` uses, fitted where they say) when
    `bundled`. The engine lab's live analyses ask for this machine's only."""
    own = _read_fits(_path())
    return {**_read_fits(BUNDLED_FITS), **own} if bundled else own


def engine_predictor(name: str, bundled: bool = True) -> tuple[Predictor, dict[str, Any]] | None:
    """The fitted predictor saved under `name`, with its entry; None when there is none (or it is
    unreadable). Built from the entry alone: no host calibration is read."""
    from core.hardware import spec_from_dict

    entry = load_all(bundled).get(name)
    if entry is None:
        return None
    try:
        base = entry["base"]
        coef = {**UNFITTED, **{k: float(v) for k, v in entry["coef"].items() if k in UNFITTED}}
        predictor = Predictor(hardware=spec_from_dict(base["hardware"], measured=True), n_layers=int(base["n_layers"]),
                              dtype=normalize_dtype(entry.get("dtype", DEFAULT_DTYPE)),
                              overhead_s=float(base["overhead_s"]),
                              bandwidth=float(base["bandwidth"]), peak=float(base["peak"]), coef=coef, fitted=True,
                              fit_info={"engine_fit": name, "engine": entry.get("engine"),
                                        "fitted_at": entry.get("fitted_at")})
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not (predictor.bandwidth > 0 and predictor.peak > 0) or any(not math.isfinite(v) or v < 0 for v in coef.values()):
        return None
    return predictor, entry


def saved_entry(name: str, bundled: bool = True) -> dict[str, Any] | None:
    """The saved fit's entry (coefficients, when, on which engine), read without building anything."""
    return load_all(bundled).get(name)
