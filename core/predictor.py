"""Predicted latency of one forward pass, from the cost model and a hardware spec.

The model is additive, the way the calibrated analysers that held up on real CPUs were built:

    time = overhead + (weight + activation bytes) / bandwidth + KV bytes / bandwidth + FLOPs / peak
           (+ a fixed extra for a forward of several new tokens at once, such as the prefill: it
              builds the causal mask and the cache; a no-cache run pays it on every forward)
           (+ an extra per attention-score FLOP, for kernels whose attention runs slower than
              their matrix products: 0 on this host, fitted for a serving engine)

with the bandwidth and peak measured on this machine by `core.calibrate` (the "host" preset) or
taken from a datasheet (the other presets). On this machine the FLOPs term is priced by rows, not
at one peak: a CPU multiplies a matrix by 16 rows at a third of the rate it reaches with 256, so the
term is each matrix's calibrated time beyond streaming it once at the forward's row count
(`matmul_curve`); a decode step's single row adds next to nothing to its weight stream. Each term carries a coefficient: 1.0 means "exactly
the roofline figure"; `fit` sets them by least squares from measured forwards of one model on
this machine, so the prediction becomes calibrated without becoming a lookup table. The naive
roofline `max(FLOPs / peak, bytes / bandwidth)` is kept beside it so the gain stays visible.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core import settings
from core.cost import ForwardCost, forward_cost
from core.dtypes import normalize_dtype
from core.hardware import HardwareSpec
from core.spec import ModelSpec

TERMS = ("overhead", "memory", "kv", "compute", "prefill_extra", "attention")
# The fixed overhead is measured directly by calibration and kept at 1.0: within one model every
# forward streams the same weights, so a fitted overhead and a fitted memory term are collinear.
# The prefill extra is not fitted either: a few ms on prefills of 100 ms and more lies inside their
# noise, so disjoint fits could not agree on it (`bench --stability`); it stays a term (0 on this
# host) for machines whose figures say otherwise. The attention extra is 0 here too: the runner's
# eager attention is matrix products like the rest, priced by the compute term; a serving engine's
# attention kernel over a long cache is not (core.engines.fit fits it).
FITTED_TERMS = ("memory", "kv", "compute")
UNFITTED = {"overhead": 1.0, "memory": 1.0, "kv": 1.0, "compute": 1.0, "prefill_extra": 0.0, "attention": 0.0}

# Datasheet presets: what fraction of the published roofline a well-tuned serving stack reaches,
# and launch overhead per layer. Assumptions, not measurements: they are shown as such.
PRESET_ASSUMPTIONS = {"bandwidth_efficiency": 0.8, "compute_efficiency": 0.6, "overhead_layer_s": 20e-6,
                      "overhead_step_s": 100e-6}
FIT_FORMAT = 4  # 4: the compute term from the calibrated matmul row curves


@dataclass(frozen=True)
class Predictor:
    """Turns a ForwardCost into seconds for one (hardware, model, dtype)."""

    hardware: HardwareSpec
    n_layers: int
    dtype: str
    overhead_s: float  # fixed time per forward: per-step plus per-layer overheads
    bandwidth: float  # bytes/s the weight stream achieves (calibrated or datasheet x efficiency)
    peak: float  # FLOP/s the matmuls achieve
    coef: dict[str, float] = field(default_factory=lambda: dict(UNFITTED))
    fitted: bool = False
    fit_info: dict[str, Any] | None = None
    # The arithmetic a forward adds to streaming its weights, as calibrated on this CPU for each
    # count of rows through a matrix (matmul_curve): (rows, seconds per FLOP-per-row) for the decoder
    # layers' matrices and for the LM head. Empty (a datasheet machine, an engine's fit): FLOPs / peak.
    layer_curve: tuple[tuple[int, float], ...] = ()
    head_curve: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        # a coefficient set written before a term existed prices that term as unfitted
        if any(k not in self.coef for k in TERMS):
            object.__setattr__(self, "coef", {**UNFITTED, **self.coef})

    def terms_s(self, cost: ForwardCost | dict, phase: str) -> dict[str, float]:
        """Each additive term in seconds before its coefficient (the features of the fit)."""
        b = cost.bytes if isinstance(cost, ForwardCost) else cost["bytes"]
        f = cost.flops if isinstance(cost, ForwardCost) else cost["flops"]
        n_new = cost.n_new if isinstance(cost, ForwardCost) else int(cost.get("n_new", 1))
        return {
            "overhead": self.overhead_s,
            "memory": (b["weights"] + b["activations"]) / self.bandwidth,
            "kv": (b["kv_read"] + b["kv_write"]) / self.bandwidth,
            "compute": self._compute_s(cost, f, n_new),
            # Keyed on the shape, not the name: a no-cache "decode" step re-reads the whole prompt
            # in one multi-token forward, so it pays what a prefill pays.
            "prefill_extra": 1.0 if phase == "prefill" or n_new > 1 else 0.0,
            # on top of the compute term, which already counts these FLOPs at the matrix rate
            "attention": f["attn_scores"] / self.peak,
        }

    def _compute_s(self, cost: ForwardCost | dict, f: dict, n_new: int) -> float:
        """The arithmetic term: FLOPs / peak, or, with calibrated row curves, each matrix product's
        time beyond streaming its weights at its count of rows (a 16-token prefill runs its matrices
        at a third of the rate a 256-token one does on this kind of CPU), attention scores at peak."""
        if not self.layer_curve:
            return f["total"] / self.peak
        if isinstance(cost, ForwardCost):
            batch, tokens, lm_rows, per_rows = cost.batch, cost.tokens, cost.lm_rows, cost.row_flops
        else:
            batch, tokens = int(cost.get("batch", 1)), int(cost.get("tokens", 0))
            lm_rows, per_rows = int(cost.get("lm_rows", 0)), cost.get("row_flops", 0)
        tokens = tokens or n_new * batch
        lm_rows = lm_rows or batch
        matmul = f["attn_proj"] + f["mlp"]
        per_rows = per_rows or matmul  # a cost from before row_flops was kept: every matrix FLOP scales
        # what does not scale with the tokens (latent attention re-expanding its cache) at peak, as before
        seconds = (f["attn_scores"] + matmul - per_rows) / self.peak
        seconds += curve_at(self.layer_curve, tokens) / tokens * per_rows
        if lm_rows and f["lm_head"]:
            seconds += curve_at(self.head_curve or self.layer_curve, lm_rows) / lm_rows * f["lm_head"]
        return seconds

    def predict_s(self, cost: ForwardCost | dict, phase: str) -> float:
        return float(sum(self.contributions_s(cost, phase).values()))

    def contributions_s(self, cost: ForwardCost | dict, phase: str) -> dict[str, float]:
        """Each term times its coefficient, in seconds: the prediction split into what it is made of
        (they sum to predict_s), so a page can show where a step's time goes."""
        terms = self.terms_s(cost, phase)
        return {k: self.coef[k] * terms[k] for k in TERMS}

    def naive_s(self, cost: ForwardCost | dict) -> float:
        """The textbook roofline with the same ceilings: max(FLOPs / peak, bytes / bandwidth)."""
        b = cost.bytes if isinstance(cost, ForwardCost) else cost["bytes"]
        f = cost.flops if isinstance(cost, ForwardCost) else cost["flops"]
        return max(f["total"] / self.peak, b["total"] / self.bandwidth)

    def describe(self) -> dict[str, Any]:
        return {"hardware": self.hardware.name, "measured_hardware": self.hardware.measured,
                "dtype": self.dtype, "overhead_s": self.overhead_s, "bandwidth_bytes_per_s": self.bandwidth,
                "peak_flops_per_s": self.peak, "coef": dict(self.coef), "fitted": self.fitted,
                "fit": self.fit_info}


def _peak_for(hardware: HardwareSpec, dtype: str) -> float:
    try:
        return hardware.peak(dtype)
    except ValueError:
        # No native path for this dtype (e.g. fp8 on A100): kernels upcast to the 16-bit path.
        return hardware.peak("bf16")


def host_predictor(spec: ModelSpec, dtype: str = "fp32", calibration=None, use_fit: bool = True,
                   measure: bool = False) -> Predictor:
    """The predictor for this machine, from its calibration (and a saved fit, when one matches).

    Without `calibration`, the cached one is used; `measure=True` lets a missing one be measured now
    (core.calibrate.HostNotCalibrated otherwise).
    """
    from core import calibrate

    dtype = normalize_dtype(dtype)
    cal = calibration if calibration is not None else calibrate.host_calibration(measure)
    hardware = calibrate.host_spec(cal)

    def excess(rows: int, k: int) -> float:
        return calibrate.matmul_excess_s(cal, rows, k, dtype)

    grid = sorted({int(key.split("x")[0]) for table in cal.matmul_rows_s.values() for key in table})
    predictor = Predictor(
        hardware=hardware, n_layers=spec.n_layers, dtype=dtype,
        overhead_s=calibrate.overhead_s(cal, spec.n_layers, dtype),
        bandwidth=weight_stream_bandwidth(spec, lambda k: calibrate.gemv_bandwidth(cal, k, dtype)),
        peak=_peak_for(hardware, dtype),
        layer_curve=matmul_curve(layer_matrices(spec), excess, grid),
        head_curve=matmul_curve([(spec.hidden, spec.vocab * spec.hidden)], excess, grid))
    if use_fit:
        saved = load_fit(predictor, spec)
        if saved is not None:
            return saved
    return predictor


def layer_matrices(spec: ModelSpec) -> list[tuple[int, int]]:
    """(row width, elements over all layers) of the decoder layers' weight matrices."""
    per_layer = [*spec.attn_matrices(),  # q, k, v (or latent) and output projections
                 (spec.hidden, spec.mlp_in_matrices * spec.hidden * spec.mlp_width),  # gate and up
                 (spec.mlp_width, spec.mlp_width * spec.hidden)]  # down
    return [(k, n * spec.n_layers) for k, n in per_layer]


def matmul_curve(matrices: list[tuple[int, int]], excess: Callable[[int, int], float],
                 grid: list[int]) -> tuple[tuple[int, float], ...]:
    """(rows, seconds per FLOP-per-row) at each calibrated row count: the time `matrices` take
    beyond streaming them once, when that many rows pass through each, over their FLOPs per row.
    It is linear in the rows between the grid's counts (core.calibrate.matmul_excess_s), so these
    points describe it whole (curve_at); () without a grid."""
    per_row = 2.0 * sum(n for _, n in matrices)
    if not grid or not per_row:
        return ()
    return tuple((m, sum(n * excess(m, k) for k, n in matrices) / per_row) for m in grid)


def curve_at(curve: tuple[tuple[int, float], ...], rows: int) -> float:
    """A matmul_curve at `rows`: linear between its points, along its last segment past them."""
    if rows <= curve[0][0]:
        return curve[0][1] if rows == curve[0][0] else 0.0
    for (m0, v0), (m1, v1) in zip(curve, curve[1:], strict=False):
        if rows <= m1:
            return v0 + (v1 - v0) * (rows - m0) / (m1 - m0)
    if len(curve) < 2:
        return curve[-1][1]
    (m0, v0), (m1, v1) = curve[-2], curve[-1]
    return max(0.0, v1 + (v1 - v0) * (rows - m1) / (m1 - m0))


def weight_stream_bandwidth(spec: ModelSpec, gemv_bandwidth: Callable[[int], float]) -> float:
    """Bytes/s at which a forward streams this model's weights, each matrix at its own row width.

    On a CPU a matrix-vector product with 576-wide rows runs at about half the speed of one with
    2048-wide rows (measured by core.calibrate), so one bandwidth figure would misprice a small
    model. The effective figure is total bytes over the summed time of every matrix.
    """
    matrices = layer_matrices(spec) + [(spec.hidden, spec.vocab * spec.hidden)]
    total = sum(n for _, n in matrices)
    seconds = sum(n / gemv_bandwidth(k) for k, n in matrices)
    return total / seconds


def preset_predictor(spec: ModelSpec, hardware: HardwareSpec, dtype: str = "bf16",
                     assumptions: dict[str, float] | None = None) -> Predictor:
    """A datasheet machine: roofline ceilings times assumed efficiencies, plus launch overheads.

    `assumptions` overrides any of PRESET_ASSUMPTIONS (a what-if reader may edit them); each must be
    positive, and an efficiency at most 1 (no kernel beats its datasheet).
    """
    dtype = normalize_dtype(dtype)
    a = {**PRESET_ASSUMPTIONS, **(assumptions or {})}
    unknown = set(a) - set(PRESET_ASSUMPTIONS)
    if unknown:
        raise ValueError(f"unknown assumptions: {', '.join(sorted(unknown))}")
    for key, value in a.items():
        if not isinstance(value, (int, float)) or not value > 0 or (key.endswith("efficiency") and value > 1):
            raise ValueError(f"assumption {key} must be positive{' and at most 1' if 'efficiency' in key else ''}, "
                             f"got {value!r}")
    return Predictor(
        hardware=hardware, n_layers=spec.n_layers, dtype=dtype,
        overhead_s=a["overhead_step_s"] + a["overhead_layer_s"] * spec.n_layers,
        bandwidth=hardware.bandwidth * a["bandwidth_efficiency"],
        peak=_peak_for(hardware, dtype) * a["compute_efficiency"],
        fit_info={"assumptions": dict(a)})


def predictor_for(spec: ModelSpec, hardware_name: str, dtype: str, measure: bool = False) -> Predictor:
    """The predictor for a hardware name; "host" may be measured now only when `measure` allows it."""
    from core.hardware import HOST, load_hardware

    if hardware_name == HOST:
        return host_predictor(spec, dtype, measure=measure)
    return preset_predictor(spec, load_hardware(hardware_name), dtype)


# --- fitting -------------------------------------------------------------------------------

# (cost dict, phase, measured seconds); the cost may be a list of forwards timed together (a
# prompt an engine prefilled in chunks: each chunk pays every term once)
Sample = tuple[dict | list[dict], str, float]


def summed_terms_s(predictor: Predictor, cost: dict | list[dict], phase: str) -> dict[str, float]:
    """terms_s of one forward, or summed over several timed as one."""
    forwards = cost if isinstance(cost, list) else [cost]
    total = dict.fromkeys(TERMS, 0.0)
    for c in forwards:
        for k, v in predictor.terms_s(c, phase).items():
            total[k] += v
    return total


def fit(predictor: Predictor, samples: Iterable[Sample], label: str = "",
        terms: tuple[str, ...] = FITTED_TERMS) -> Predictor:
    """Coefficients minimising the absolute relative error over measured forwards.

    Rows are divided by the measured time, so a 70 ms decode step and a 2 s prefill weigh the
    same; iteratively reweighted least squares turns the squared error into an absolute one, so
    a few forwards slowed by another process on a shared machine do not drag the fit. A term
    whose coefficient comes out negative is dropped and the rest refitted: a negative time would
    be a fit artefact, not physics. `terms` are the coefficients fitted (a real engine's fit adds
    the multi-token extra: core.engines.fit); the overhead is never fitted.
    """
    rows, target = [], []
    for cost, phase, measured in samples:
        seconds = summed_terms_s(predictor, cost, phase)
        rows.append([seconds[k] / measured for k in terms])
        target.append(1.0 - seconds["overhead"] / measured)
    if len(rows) < len(terms) + 1:
        raise ValueError(f"need at least {len(terms) + 1} measured forwards to fit, got {len(rows)}")
    x, y = np.asarray(rows), np.asarray(target)
    active = [i for i in range(len(terms)) if np.any(x[:, i] != 0)]
    while True:
        solution = _irls_l1(x[:, active], y)
        if (solution >= 0).all():
            break
        active = [i for i, c in zip(active, solution, strict=True) if c > min(solution)]
    coef = {**UNFITTED, **dict.fromkeys(terms, 0.0)}
    for i, c in zip(active, solution, strict=True):
        coef[terms[i]] = float(c)
    return replace(predictor, coef=coef, fitted=True,
                   fit_info={"samples": len(rows), "label": label, "coef": coef})


def _irls_l1(x: np.ndarray, y: np.ndarray, iterations: int = 50) -> np.ndarray:
    """Least absolute deviations by iteratively reweighted least squares."""
    weights = np.ones(len(y))
    solution = np.zeros(x.shape[1])
    for _ in range(iterations):
        root = np.sqrt(weights)[:, None]
        solution, *_ = np.linalg.lstsq(x * root, y * root[:, 0], rcond=None)
        weights = 1.0 / np.maximum(np.abs(y - x @ solution), 1e-3)
    return solution


def _fit_path() -> Path:
    return settings.cache_dir() / "predictor-fit.json"


def _fit_key(predictor: Predictor, spec: ModelSpec) -> str:
    fp = predictor.hardware.calibration.get("fingerprint") if predictor.hardware.calibration else None
    # The architecture, not the name: a model's name is often the folder it was loaded from.
    shape = {k: getattr(spec, k) for k in ("model_type", "n_layers", "hidden", "n_heads", "n_kv_heads",
                                            "head_dim", "mlp_width", "vocab", "tied_embeddings")}
    return json.dumps({"fingerprint": fp, "model": shape, "dtype": predictor.dtype}, sort_keys=True)


def save_fit(predictor: Predictor, spec: ModelSpec) -> None:
    path = _fit_path()
    try:
        entries = json.loads(path.read_text()) if path.is_file() else {}
        if not isinstance(entries, dict) or entries.get("format") != FIT_FORMAT:
            entries = {"format": FIT_FORMAT}
    except ValueError:
        entries = {"format": FIT_FORMAT}
    entries[_fit_key(predictor, spec)] = {"coef": predictor.coef, "fit": predictor.fit_info}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, indent=1))
    tmp.replace(path)


def load_fit(predictor: Predictor, spec: ModelSpec) -> Predictor | None:
    """The saved fit for this machine, model and dtype; None when absent or unreadable."""
    try:
        entries = json.loads(_fit_path().read_text())
        if entries.get("format") != FIT_FORMAT:
            return None
        entry = entries[_fit_key(predictor, spec)]
        coef = {k: float(entry["coef"].get(k, UNFITTED[k])) for k in TERMS}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if any(not np.isfinite(v) or v < 0 for v in coef.values()):
        return None
    return replace(predictor, coef=coef, fitted=True, fit_info=entry.get("fit"))


# --- the runner's annotator ----------------------------------------------------------------

def cost_for_event(spec: ModelSpec, n_new: int, n_cached: int, batch: int, dtype: str,
                   attn_len: int | None = None) -> ForwardCost:
    """The forward the runner executes: LM head on the last position only (logits_to_keep=1)."""
    return forward_cost(spec, n_new, n_cached, batch, weight_dtype=dtype, lm_head_tokens=1,
                        attn_len=attn_len)


def make_annotator(spec: ModelSpec, predictor: Predictor | None, dtype: str) -> Callable:
    """An annotator for core.runner.run: cost of every forward, and its predicted time."""
    def annotate(event, n_new: int, n_cached: int, batch: int, attn_len: int | None = None) -> None:
        cost = cost_for_event(spec, n_new, n_cached, batch, dtype, attn_len)
        event.cost = cost.to_dict()
        if predictor is not None:
            parts = predictor.contributions_s(cost, event.phase)
            event.predicted_ms = round(sum(parts.values()) * 1000.0, 4)
            event.predicted_terms_ms = {k: round(v * 1000.0, 4) for k, v in parts.items()}

    return annotate


def default_annotator(loaded, predictor: Predictor | None = None, measure: bool = False) -> Callable:
    """Cost and predicted time for every event of a run of `loaded` on this machine (the batch and
    cache length come with each event, so one annotator serves any settings). Without `predictor`,
    this machine's calibration is used, measured now only if `measure` allows it."""
    from core.spec import spec_from_config

    spec = spec_from_config(loaded.config)
    dtype = normalize_dtype(loaded.info.dtype)
    if predictor is None:
        predictor = host_predictor(spec, dtype, measure=measure)
    return make_annotator(spec, predictor, dtype)
