"""Calibrate THIS machine with a few seconds of microbenchmarks, so predictions use measured rates.

Vendor peaks say little about a 2-core VM: torch's one-row (GEMV) kernel reads DRAM at a fraction
of what a copy reaches, and small models spend much of a decode step in fixed Python/dispatch cost.
So the host is described by what the runner's own kernels achieve, on the runner's thread count:

- bandwidth_gemv_bytes_per_s: fp32 (1 x K) @ (K x N) over 256 MB of weights (far beyond the 32 MiB
  L3), i.e. the rate at which decode streams weights. It depends on the row length K (in_features):
  short rows are slower, so a per-K table is kept too; gemv_bandwidth() interpolates in it.
- bandwidth_copy_bytes_per_s: a large tensor copy, read + write bytes counted (the STREAM-like
  figure, for comparison with vendor bandwidth).
- matmul_flops_per_s: best of a few prefill-like matmul shapes, per dtype (2*M*N*K / t).
- overhead_step_s + overhead_layer_s * layers: fixed cost of one decode forward of a tiny Llama
  (hidden 64, vocab 256), fitted over layer counts, with the runner's own call and argmax; fp32 in
  those two fields, both dtypes in overhead_by_dtype_s (bf16 layers carry more fixed cost).
- bf16 has its own GEMV table: on CPU a bf16 GEMV streams fewer bytes per second than fp32, so
  halving the bytes does not halve the time.

Every figure is the median of repeats (the VM's bandwidth wanders by 20% between runs); loops stop
early once their time allowance is spent, so a contended machine stays within about 10 s. Results are
cached at settings.cache_dir()/calibration.json, keyed by a host fingerprint, so the app measures
once per machine / torch version / thread count.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import itertools
import json
import math
import os
import platform
import statistics
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from core import settings
from core.hardware import HOST, HardwareSpec, load_hardware, normalize_dtype

# Bump when a benchmark changes meaning: old cache entries then stop matching the fingerprint.
CALIBRATION_VERSION = 2  # 2: the matmul row table (matmul_rows_s)
CACHE_SCHEMA = 1
CACHE_FILE = "calibration.json"

# Row lengths (in_features) for the GEMV table; 576 and 1536 are SmolLM2-135M's hidden and MLP widths.
_GEMV_K_FULL = (576, 1024, 1536, 2048, 4096)
_GEMV_K_QUICK = (576, 2048)
_GEMV_HEADLINE_K = 2048  # wide enough that per-row overhead no longer hides the DRAM rate
_GEMV_MATRIX_ELEMS = 1 << 21  # 8 MB per fp32 matrix: a realistic layer, and many per working set
_MATMUL_SHAPES_FULL = ((256, 576, 1536), (512, 1024, 1024), (1024, 1024, 1024))
_MATMUL_SHAPES_QUICK = ((128, 576, 1536), (256, 512, 512))
# Rows through one weight matrix: a prefill of n tokens multiplies each matrix by n rows, and a CPU
# reaches its matmul rate only with enough rows; the time beyond streaming the matrix once is what
# the predictor's compute term prices (core.predictor). Widths as the GEMV table's ends.
_ROWS = (1, 4, 16, 64, 256)
_ROWS_K_FULL = (576, 2048)
_ROWS_K_QUICK = (576,)
_ROWS_MATRICES = 16  # of _GEMV_MATRIX_ELEMS each, cycled: 128 MB of fp32 weights per sweep
_FILL_BITS = 0x3C233C23  # as fp32 ~0.00996, and each 16-bit half as bf16 ~0.00995: normal in both views

_lock = threading.Lock()  # two app sessions calibrating at once would halve each other's numbers


@dataclass(frozen=True)
class Calibration:
    """Measured rates of this host. Units are in the names: _s seconds, bytes_per_s, flops_per_s."""

    fingerprint: dict[str, Any]
    threads: int
    quick: bool
    measured_at: str  # ISO 8601, UTC
    duration_s: float  # wall time of the whole calibration, imports included
    bandwidth_gemv_bytes_per_s: float  # fp32, K = 2048
    bandwidth_gemv_bf16_bytes_per_s: float  # bf16, K = 2048 (bf16 GEMV is slower per byte on CPU)
    bandwidth_gemv_by_k_bytes_per_s: dict[str, dict[str, float]]  # dtype -> str(K) -> bytes/s
    bandwidth_copy_bytes_per_s: float  # (read + write) bytes / s
    matmul_flops_per_s: dict[str, float]  # dtype -> best achieved
    matmul_by_shape_flops_per_s: dict[str, dict[str, float]]  # dtype -> "MxKxN" -> flop/s
    # dtype -> "MxK" -> seconds per weight element of F.linear with M rows and K-wide weight rows
    matmul_rows_s: dict[str, dict[str, float]]
    overhead_step_s: float  # fp32: fixed per forward (embedding, final norm, lm_head call, Python, argmax)
    overhead_layer_s: float  # fp32: per decoder layer, beyond its bytes and FLOPs
    # dtype -> {"step_s", "layer_s"}: bf16 layers cost more fixed time (casts in norms and rotary).
    overhead_by_dtype_s: dict[str, dict[str, float]]
    overhead_points_s: dict[str, dict[str, float]]  # dtype -> str(layers) -> median step time, tiny model
    gemv_working_set_bytes: int
    # 1-minute load average just before measuring: other busy processes on a 2-core VM can halve
    # every figure, and this is how a reader of the cache can tell.
    load_avg_1m: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        """Rebuild from to_dict() output; ValueError on anything missing, mistyped or implausible."""
        if not isinstance(data, dict):
            raise ValueError("calibration entry is not an object")
        names = {f.name for f in fields(cls)}
        missing = names - data.keys()
        if missing:
            raise ValueError(f"calibration entry lacks {sorted(missing)}")
        try:
            cal = cls(
                fingerprint=dict(data["fingerprint"]), threads=int(data["threads"]), quick=bool(data["quick"]),
                measured_at=str(data["measured_at"]), duration_s=float(data["duration_s"]),
                bandwidth_gemv_bytes_per_s=float(data["bandwidth_gemv_bytes_per_s"]),
                bandwidth_gemv_bf16_bytes_per_s=float(data["bandwidth_gemv_bf16_bytes_per_s"]),
                bandwidth_gemv_by_k_bytes_per_s={
                    str(d): {str(k): float(v) for k, v in table.items()}
                    for d, table in data["bandwidth_gemv_by_k_bytes_per_s"].items()},
                bandwidth_copy_bytes_per_s=float(data["bandwidth_copy_bytes_per_s"]),
                matmul_flops_per_s={str(k): float(v) for k, v in data["matmul_flops_per_s"].items()},
                matmul_by_shape_flops_per_s={
                    str(d): {str(k): float(v) for k, v in table.items()}
                    for d, table in data["matmul_by_shape_flops_per_s"].items()},
                matmul_rows_s={
                    str(d): {str(k): float(v) for k, v in table.items()}
                    for d, table in data["matmul_rows_s"].items()},
                overhead_step_s=float(data["overhead_step_s"]),
                overhead_layer_s=float(data["overhead_layer_s"]),
                overhead_by_dtype_s={
                    str(d): {"step_s": float(t["step_s"]), "layer_s": float(t["layer_s"])}
                    for d, t in data["overhead_by_dtype_s"].items()},
                overhead_points_s={
                    str(d): {str(k): float(v) for k, v in table.items()}
                    for d, table in data["overhead_points_s"].items()},
                gemv_working_set_bytes=int(data["gemv_working_set_bytes"]),
                load_avg_1m=float(data["load_avg_1m"]),
            )
        except (TypeError, AttributeError, KeyError) as exc:
            raise ValueError(f"malformed calibration entry: {exc}") from exc
        cal._check()
        return cal

    def _check(self) -> None:
        # A rate of 0, NaN or inf would turn every prediction into nonsense; refuse it at the door.
        values = [self.bandwidth_gemv_bytes_per_s, self.bandwidth_gemv_bf16_bytes_per_s,
                  self.bandwidth_copy_bytes_per_s, self.overhead_step_s, self.overhead_layer_s,
                  *self.matmul_flops_per_s.values()]
        values += [v for table in self.bandwidth_gemv_by_k_bytes_per_s.values() for v in table.values()]
        values += [v for table in self.overhead_by_dtype_s.values() for v in table.values()]
        if not all(math.isfinite(v) and v > 0 for v in values):
            raise ValueError("calibration holds a non-positive or non-finite rate")
        if not {"fp32", "bf16"} <= self.matmul_flops_per_s.keys():
            raise ValueError("calibration lacks fp32/bf16 matmul rates")
        if "fp32" not in self.bandwidth_gemv_by_k_bytes_per_s or "fp32" not in self.overhead_by_dtype_s:
            raise ValueError("calibration lacks the fp32 GEMV table or overheads")
        for table in self.bandwidth_gemv_by_k_bytes_per_s.values():
            if not table or any(int(k) <= 0 for k in table):  # int() raises ValueError on a bad key
                raise ValueError("GEMV table keys must be positive row lengths")
        for table in self.matmul_rows_s.values():
            if not all(math.isfinite(v) and v > 0 for v in table.values()):
                raise ValueError("calibration holds a non-positive or non-finite matmul time")
            for key in table:  # "MxK"; int() raises ValueError on a bad key
                if len(key.split("x")) != 2 or min(int(x) for x in key.split("x")) <= 0:
                    raise ValueError("matmul row-table keys must be 'MxK' with positive M and K")
            for k in {key.split("x")[1] for key in table}:  # the excess is taken from one row, past it
                rows = {int(key.split("x")[0]) for key in table if key.split("x")[1] == k}
                if 1 not in rows or len(rows) < 2:
                    raise ValueError("each width of the matmul row table needs one row and at least one more")


# ----------------------------------------------------------------------------- fingerprint and cache

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def fingerprint() -> dict[str, Any]:
    """What must match for a cached calibration to describe this process's speed."""
    import torch

    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count() or 0,
        "machine": platform.machine(),
        "torch_version": torch.__version__,
        "threads": settings.torch_threads(),
        "calibration_version": CALIBRATION_VERSION,
    }


def _key(fp: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]


def cache_path() -> Path:
    return settings.cache_dir() / CACHE_FILE


def _read_entries(path: Path) -> dict[str, Any]:
    """The cache's entries, or {} for a missing, unreadable or foreign-format file (never raises)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != CACHE_SCHEMA or not isinstance(
            data.get("entries"), dict):
        return {}
    return data["entries"]


def load_cached(fp: dict[str, Any] | None = None) -> Calibration | None:
    """The cached calibration for this host fingerprint, or None (absent, corrupt or foreign)."""
    fp = fingerprint() if fp is None else fp
    entry = _read_entries(cache_path()).get(_key(fp))
    try:
        cal = Calibration.from_dict(entry)
    except ValueError:
        return None
    # The key is a hash; compare the full fingerprint so a collision or hand edit cannot slip through.
    return cal if cal.fingerprint == fp else None


def _store(cal: Calibration) -> None:
    path = cache_path()
    entries = _read_entries(path)
    entries[_key(cal.fingerprint)] = cal.to_dict()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write-then-rename so a reader (another app session) never sees half a file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".calibration-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"schema": CACHE_SCHEMA, "entries": entries}, f, indent=2, allow_nan=False)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only cache dir costs a re-measure next time, not a crash now
        warnings.warn(f"could not write calibration cache {path}: {exc}", stacklevel=2)


# ----------------------------------------------------------------------------- microbenchmarks

def _load_avg_1m() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):  # not every platform has a load average
        return -1.0


def _median_time(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _gemv_table(buffer, ks: tuple[int, ...], dtype, repeats: int, max_s: float) -> dict[str, float]:
    """bytes/s of F.linear(x, W) with x (1 x K), cycling through every matrix that fits in `buffer`.

    The matrices are views of one big buffer, so by the time a matrix comes round again the other
    ~256 MB have flushed it from cache: each call reads its weights from DRAM, as decode does.
    Row lengths are interleaved within each repeat so the VM's bandwidth drifts (20% over seconds)
    hit every K alike and the table's shape stays meaningful. Past `max_s` it stops after the third
    repeat: on a contended VM the full count would push calibration past its time budget.
    """
    import torch
    import torch.nn.functional as F

    flat = buffer.view(dtype)
    sweeps: dict[int, tuple[list, Any, int]] = {}
    for k in ks:
        n = max(64, _GEMV_MATRIX_ELEMS // k)
        per = n * k
        count = flat.numel() // per
        mats = [flat[i * per:(i + 1) * per].view(n, k) for i in range(count)]
        sweeps[k] = (mats, torch.full((1, k), 0.01, dtype=dtype), count * per * flat.element_size())
    times: dict[int, list[float]] = {k: [] for k in ks}
    began = time.perf_counter()
    for r in range(repeats + 1):
        for k, (mats, x, _) in sweeps.items():
            start = time.perf_counter()
            for w in mats:
                F.linear(x, w)
            if r:  # repeat 0 is warm-up (first touch of kernels, allocator)
                times[k].append(time.perf_counter() - start)
        if r >= 3 and time.perf_counter() - began > max_s:
            break
    return {str(k): nbytes / statistics.median(times[k]) for k, (_, _, nbytes) in sweeps.items()}


def _rows_table(buffer, ks: tuple[int, ...], dtype, repeats: int) -> dict[str, float]:
    """Seconds per weight element of F.linear(x, W) with x (M x K), for M in _ROWS and K in `ks`,
    cycling through _ROWS_MATRICES matrices of `buffer` as the GEMV table does (so each pass reads
    its weights afresh). Row counts are interleaved within each repeat, so a drift of the VM's speed
    hits them alike; M = 1 is the GEMV of the same matrices, the baseline the excess is taken from."""
    import torch
    import torch.nn.functional as F

    flat = buffer.view(dtype)
    times: dict[str, list[float]] = {}
    for r in range(repeats + 1):
        for k in ks:
            n = max(64, _GEMV_MATRIX_ELEMS // k)
            per = n * k
            mats = [flat[i * per:(i + 1) * per].view(n, k) for i in range(min(_ROWS_MATRICES, flat.numel() // per))]
            for m in _ROWS:
                x = torch.full((m, k), 0.01, dtype=dtype)
                start = time.perf_counter()
                for w in mats:
                    F.linear(x, w)
                if r:  # repeat 0 is warm-up
                    times.setdefault(f"{m}x{k}", []).append((time.perf_counter() - start) / (len(mats) * per))
    return {key: statistics.median(ts) for key, ts in times.items()}


def _matmul_table(shapes, dtype, repeats: int) -> dict[str, float]:
    import torch

    gen = torch.Generator().manual_seed(0)
    out: dict[str, float] = {}
    for m, k, n in shapes:
        a = torch.rand(m, k, generator=gen).to(dtype)
        b = torch.rand(k, n, generator=gen).to(dtype)
        seconds = _median_time(lambda a=a, b=b: torch.matmul(a, b), repeats)
        out[f"{m}x{k}x{n}"] = 2.0 * m * n * k / seconds
    return out


def _tiny_llama(layers: int, dtype):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval().to(dtype)


def _overheads(layer_counts: tuple[int, ...], rounds: int, steps: int, dtype,
               max_s: float) -> dict[str, float]:
    """Median decode-step time of tiny Llamas, per layer count.

    Tiny widths make bytes and FLOPs negligible, so what remains is the per-forward and per-layer
    cost of Python, module dispatch and cache bookkeeping. The timed call mirrors core.runner:
    forward with a DynamicCache and logits_to_keep=1, then argmax and .item(). Stops after two
    timed rounds once `max_s` is spent (contended VM).
    """
    import torch
    from transformers import DynamicCache

    models = {n: _tiny_llama(n, dtype) for n in layer_counts}
    times: dict[int, list[float]] = {n: [] for n in layer_counts}
    with torch.inference_mode():
        caches, tokens = {}, {}
        for n, model in models.items():
            caches[n] = DynamicCache(config=model.config)
            out = model(input_ids=torch.arange(8).view(1, 8), cache=caches[n], use_cache=True, logits_to_keep=1)
            tokens[n] = out.logits[:, -1, :].argmax(dim=-1).view(1, 1)
        # Interleave the models round by round so a slow spell of the VM hits every layer count alike.
        began = time.perf_counter()
        for r in range(rounds + 1):
            if r > 2 and time.perf_counter() - began > max_s:
                break
            for n, model in models.items():
                for _ in range(steps):
                    start = time.perf_counter()
                    out = model(input_ids=tokens[n], cache=caches[n], use_cache=True, logits_to_keep=1)
                    token_id = int(out.logits[:, -1, :].argmax(dim=-1).item())
                    elapsed = time.perf_counter() - start
                    tokens[n] = torch.tensor([[token_id]])
                    if r:  # round 0 warms caches and allocator
                        times[n].append(elapsed)
    return {str(n): statistics.median(v) for n, v in times.items()}


def _fit_overheads(points: dict[str, float]) -> tuple[float, float]:
    """Least-squares time = a + b * layers; both clamped positive (noise on 2 points can flip a sign)."""
    xs = [float(k) for k in points]
    ys = list(points.values())
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = mean_y - slope * mean_x
    return max(intercept, 1e-6), max(slope, 1e-7)


def measure(quick: bool = False) -> Calibration:
    """Run the microbenchmarks now: about 6-8 s full, 3-4 s quick on a 2-core VM (imports included).

    quick=True uses a 64 MB working set (still twice the L3), fewer shapes and repeats: for tests.
    """
    import torch

    from core.model import configure_torch

    start = time.perf_counter()
    load_avg = _load_avg_1m()
    configure_torch()  # measure on the thread count the runner will use
    fp = fingerprint()
    working_set = (64 if quick else 256) * 2**20
    repeats = 3 if quick else 7

    with torch.inference_mode():
        # One buffer serves every memory benchmark: allocating 256 MB several times would cost more
        # than the measurements. Filling it also faults every page in (an untouched page reads as the
        # shared zero page, which would look impossibly fast).
        buffer = torch.empty(working_set // 4, dtype=torch.int32)
        buffer.fill_(_FILL_BITS)
        buffer = buffer.view(torch.float32)

        ks = _GEMV_K_QUICK if quick else _GEMV_K_FULL
        gemv = {"fp32": _gemv_table(buffer, ks, torch.float32, repeats, max_s=0.5 if quick else 1.5),
                "bf16": _gemv_table(buffer, ks, torch.bfloat16, repeats, max_s=0.7 if quick else 2.0)}

        rows_ks = _ROWS_K_QUICK if quick else _ROWS_K_FULL
        rows = {"fp32": _rows_table(buffer, rows_ks, torch.float32, 1 if quick else 3),
                "bf16": _rows_table(buffer, rows_ks, torch.bfloat16, 1 if quick else 3)}

        half = buffer.numel() // 2
        src, dst = buffer[:half], buffer[half:2 * half]
        copy_s = _median_time(lambda src=src, dst=dst: dst.copy_(src), repeats)
        copy_bw = 2 * half * buffer.element_size() / copy_s
        del buffer, src, dst  # free 256 MB before the matmul and model benchmarks

        shapes = _MATMUL_SHAPES_QUICK if quick else _MATMUL_SHAPES_FULL
        mm_reps = 3 if quick else 5
        matmul = {"fp32": _matmul_table(shapes, torch.float32, mm_reps),
                  "bf16": _matmul_table(shapes, torch.bfloat16, mm_reps)}

    layer_counts = (1, 8) if quick else (1, 4, 8)
    points, overheads = {}, {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        points[name] = _overheads(layer_counts, rounds=2 if quick else 5, steps=5 if quick else 12,
                                  dtype=dtype, max_s=0.5 if quick else 1.5)
        step_s, layer_s = _fit_overheads(points[name])
        overheads[name] = {"step_s": step_s, "layer_s": layer_s}

    headline = str(_GEMV_HEADLINE_K)
    cal = Calibration(
        fingerprint=fp, threads=torch.get_num_threads(), quick=quick,
        measured_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        duration_s=round(time.perf_counter() - start, 3),
        bandwidth_gemv_bytes_per_s=gemv["fp32"][headline],
        bandwidth_gemv_bf16_bytes_per_s=gemv["bf16"][headline],
        bandwidth_gemv_by_k_bytes_per_s=gemv,
        bandwidth_copy_bytes_per_s=copy_bw,
        matmul_flops_per_s={d: max(t.values()) for d, t in matmul.items()},
        matmul_by_shape_flops_per_s=matmul,
        matmul_rows_s=rows,
        overhead_step_s=overheads["fp32"]["step_s"], overhead_layer_s=overheads["fp32"]["layer_s"],
        overhead_by_dtype_s=overheads, overhead_points_s=points,
        gemv_working_set_bytes=working_set, load_avg_1m=load_avg,
    )
    cal._check()
    return cal


def calibrate(force: bool = False, quick: bool = False) -> Calibration:
    """The cached calibration for this host, measuring (and caching) it when absent or forced.

    A full cached result also answers a quick request; a quick one never stands in for a full one,
    and never overwrites a cached full one.
    """
    with _lock:
        fp = fingerprint()
        cached = None if force else load_cached(fp)
        if cached is not None and (quick or not cached.quick):
            return cached
        cal = measure(quick=quick)
        existing = load_cached(fp)
        if not (cal.quick and existing is not None and not existing.quick):
            _store(cal)
        return cal


def load_or_calibrate(force: bool = False, quick: bool = False) -> Calibration:
    """Cached numbers, measured on first use (a few seconds): for callers allowed to measure."""
    return calibrate(force=force, quick=quick)


class HostNotCalibrated(ValueError):
    """"host" was asked for where measuring is not allowed, and this machine has no cached calibration."""


def host_calibration(measure: bool = False) -> Calibration:
    """This machine's calibration from the on-disk cache; measured (and cached) only if `measure`.

    Measuring takes seconds of both cores and must not run beside a generation, so only callers
    that own the machine for a while (the CLI, a queued job, the benchmark) pass measure=True.
    Without it a quick cached result is accepted; with it a full one is required, as calibrate() does.
    """
    if measure:
        return load_or_calibrate()
    cal = load_cached()
    if cal is None:
        raise HostNotCalibrated("this machine has no calibration yet: run `python -m core calibrate` "
                                "(a few seconds), or ask for it where measuring is allowed (measure=True)")
    return cal


def resolve_hardware(name: str, measure: bool = False) -> HardwareSpec:
    """The one lookup of a hardware name: a vendor preset, or "host" (this machine, calibrated).

    It lives here, above core.hardware, because only "host" needs the calibration (and torch):
    presets stay plain JSON reads that never measure. For "host" the cached calibration is used;
    without one, HostNotCalibrated unless `measure` allows measuring now (see host_calibration).
    """
    if name == HOST:
        return host_spec(host_calibration(measure))
    return load_hardware(name)


# ----------------------------------------------------------------------------- helpers for consumers

def _short_dtype(dtype: Any) -> str:
    try:
        return normalize_dtype(dtype)  # "float32", torch.bfloat16 ... -> "fp32", "bf16"
    except ValueError:
        return str(dtype)  # e.g. "int4": no table of its own, the caller gets the fp32 figures


def _log_interp(pts: list[tuple[int, float]], k: int) -> float:
    """A value over row widths at width `k`: linear in log(width) between the sorted points, clamped to
    their ends (the GEMV table and the matmul row table are both measured at a few widths)."""
    if k <= pts[0][0]:
        return pts[0][1]
    if k >= pts[-1][0]:
        return pts[-1][1]
    for (k0, v0), (k1, v1) in itertools.pairwise(pts):
        if k0 <= k <= k1:
            t = math.log(k / k0) / math.log(k1 / k0)
            return v0 + t * (v1 - v0)
    return pts[-1][1]  # unreachable: the loop covers the open interval


def gemv_bandwidth(cal: Calibration, in_features: int, dtype: str = "fp32") -> float:
    """GEMV bytes/s for a layer with this row length, interpolated in log(K) over the measured table.

    Clamped to the table's ends. dtypes without a table (fp16 ...) use the fp32 one.
    """
    table = (cal.bandwidth_gemv_by_k_bytes_per_s.get(_short_dtype(dtype))
             or cal.bandwidth_gemv_by_k_bytes_per_s["fp32"])
    return _log_interp(sorted((int(k), v) for k, v in table.items()), in_features)


def matmul_excess_s(cal: Calibration, rows: float, in_features: int, dtype: str = "fp32") -> float:
    """Seconds per weight element that `rows` rows through a matrix with `in_features`-wide rows take
    beyond one row (the matrix streamed once): the arithmetic a prefill adds to the weight stream.

    Linear in the rows between the measured counts (a matmul's time is close to affine in its rows
    once they fill the vector units) and past the last, along its last segment; log-linear in the
    width between the measured widths, clamped at the ends. 0 without a table (a calibration from
    before it) and for one row or fewer; never negative.
    """
    table = cal.matmul_rows_s.get(_short_dtype(dtype)) or cal.matmul_rows_s.get("fp32")
    if not table or rows <= 1:
        return 0.0
    by_width: dict[int, list[tuple[int, float]]] = {}
    for key, v in table.items():
        m, k = (int(x) for x in key.split("x"))
        by_width.setdefault(k, []).append((m, v))

    def at_width(pts: list[tuple[int, float]]) -> float:
        pts.sort()
        base = pts[0][1]  # the one-row time (Calibration._check requires it)
        for (m0, v0), (m1, v1) in itertools.pairwise(pts):
            if rows <= m1 or (m1, v1) == pts[-1]:  # within a segment, or along the last one past it
                return max(0.0, v0 + (v1 - v0) * (rows - m0) / (m1 - m0) - base)
        return 0.0  # unreachable: _check requires two counts per width

    return _log_interp(sorted((k, at_width(pts)) for k, pts in by_width.items()), in_features)


def overhead_s(cal: Calibration, layers: int, dtype: str = "fp32") -> float:
    """Fixed seconds of one forward with `layers` decoder layers (fp32 figures for other dtypes)."""
    fit = cal.overhead_by_dtype_s.get(_short_dtype(dtype)) or cal.overhead_by_dtype_s["fp32"]
    return fit["step_s"] + fit["layer_s"] * layers


def _total_memory_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # psutil is a dependency, but a spec without it beats no spec
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def host_spec(cal: Calibration) -> HardwareSpec:
    """This machine as a HardwareSpec: bandwidth = GEMV bandwidth, peaks = best measured matmul."""
    fp = cal.fingerprint
    mode = "quick" if cal.quick else "full"
    return HardwareSpec(
        name=HOST,
        label="This machine (calibrated)",
        variant=f"{fp.get('cpu_model', 'CPU')}, {fp.get('cpu_count', '?')} logical CPUs, "
                f"{cal.threads} torch thread(s), torch {fp.get('torch_version', '?')}",
        memory_bytes=_total_memory_bytes(),
        bandwidth_bytes_per_s=cal.bandwidth_gemv_bytes_per_s,
        peak_flops={"fp32": cal.matmul_flops_per_s["fp32"], "bf16": cal.matmul_flops_per_s["bf16"],
                    "fp16": None, "fp8": None, "int8": None},
        source=f"measured by core/calibrate.py ({mode} mode) at {cal.measured_at} in {cal.duration_s:.1f} s",
        notes=("Achieved, not theoretical: bandwidth is fp32 GEMV from DRAM with 2048-wide rows (what decode "
               "reads weights at; narrower rows are slower, see calibration.bandwidth_gemv_by_k_bytes_per_s); "
               "peaks are the best of a few matmul shapes. fp16/fp8/int8 were not measured."),
        measured=True,
        calibration=cal.to_dict(),
    )
