"""Hardware specs for the roofline views: vendor presets from JSON (this machine lives in core.calibrate).

Presets are data (assets/hardware/<name>.json) rather than code so a figure can be checked against
its cited datasheet, and corrected, without reading Python. All peaks are DENSE (no structured
sparsity): the sparse figures vendors print first are twice what a dense LLM matmul can reach.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from core.dtypes import normalize_dtype

HOST = "host"
# Dtypes with a peak rate in the presets (int4 has no matmul path of its own on this hardware).
DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8")


def assets_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "assets" / "hardware"


@dataclass(frozen=True)
class Interconnect:
    """The device-to-device link a preset's GPUs talk over (tensor-parallel all-reduce, pipeline hand-offs).

    `bandwidth_bytes_per_s` is PER DIRECTION: what one GPU can send while it receives as much.
    `datasheet_bandwidth_bytes_per_s` is the headline figure as printed, and
    `datasheet_bidirectional` says whether that headline counts both directions (NVLink 4's
    "900 GB/s" on H100 SXM does: 450 GB/s each way), so one can be checked against the other.
    `latency_s` is a per-hop (per all-reduce step) latency; `latency_source` cites it or says
    plainly that it is an assumption.
    """

    name: str
    bandwidth_bytes_per_s: float
    datasheet_bandwidth_bytes_per_s: float
    datasheet_bidirectional: bool
    latency_s: float
    source: str
    latency_source: str = ""
    notes: str = ""


@dataclass(frozen=True)
class HardwareSpec:
    """One machine as the cost model sees it: capacity, bandwidth and dense peak rate per dtype.

    `peak_flops[dtype]` is None where the hardware has no path for that dtype (A100 has no FP8).
    int8 figures are integer ops/s (TOPS), kept under the same key so ridge() works uniformly.
    `measured` is True only for the calibrated host; its `calibration` holds the raw measurement
    (core.calibrate.Calibration.to_dict()), for the predictor's efficiency and overhead terms.
    `interconnect` is the device-to-device link (every vendor preset has one; None for the host).
    """

    name: str
    label: str
    variant: str
    memory_bytes: int
    bandwidth_bytes_per_s: float
    peak_flops: dict[str, float | None]
    source: str
    notes: str = ""
    measured: bool = False
    calibration: dict[str, Any] | None = field(default=None, compare=False)
    interconnect: Interconnect | None = None

    @property
    def bandwidth(self) -> float:
        """Alias of bandwidth_bytes_per_s (bytes/s)."""
        return self.bandwidth_bytes_per_s

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for a dtype; ValueError when the hardware has no path for it."""
        key = normalize_dtype(dtype)
        value = self.peak_flops.get(key)
        if value is None or value <= 0:
            raise ValueError(f"{self.label} has no published {key} peak")
        return float(value)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _preset_names() -> list[str]:
    return sorted(p.stem for p in assets_dir().glob("*.json"))


def list_presets() -> list[str]:
    """Vendor presets (sorted) followed by "host", this machine calibrated (core.calibrate.resolve_hardware)."""
    return [*_preset_names(), HOST]


def _positive(value: Any, where: str, key: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{where}: interconnect.{key} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: interconnect.{key} must be a number, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise ValueError(f"{where}: interconnect.{key} must be positive and finite, got {value!r}")
    return number


def interconnect_from_dict(data: Any, preset: str) -> Interconnect | None:
    """The `interconnect` block of a preset (None when absent); ValueError naming preset and field."""
    if data is None:
        return None
    where = f"hardware {preset!r}"
    if not isinstance(data, dict):
        raise ValueError(f"{where}: interconnect must be an object, got {type(data).__name__}")
    for key in ("name", "bandwidth_bytes_per_s", "datasheet_bandwidth_bytes_per_s", "datasheet_bidirectional",
                "latency_s", "source"):
        if key not in data:
            raise ValueError(f"{where}: interconnect.{key} is missing")
    for key in ("name", "source"):
        if not isinstance(data[key], str) or not data[key].strip():
            raise ValueError(f"{where}: interconnect.{key} must be a non-empty string")
    if not isinstance(data["datasheet_bidirectional"], bool):
        raise ValueError(f"{where}: interconnect.datasheet_bidirectional must be true or false, "
                         f"got {data['datasheet_bidirectional']!r}")
    return Interconnect(
        name=data["name"],
        bandwidth_bytes_per_s=_positive(data["bandwidth_bytes_per_s"], where, "bandwidth_bytes_per_s"),
        datasheet_bandwidth_bytes_per_s=_positive(data["datasheet_bandwidth_bytes_per_s"], where,
                                                  "datasheet_bandwidth_bytes_per_s"),
        datasheet_bidirectional=data["datasheet_bidirectional"],
        latency_s=_positive(data["latency_s"], where, "latency_s"),
        source=data["source"], latency_source=str(data.get("latency_source", "")),
        notes=str(data.get("notes", "")),
    )


def spec_from_dict(data: dict[str, Any], measured: bool = False) -> HardwareSpec:
    """Build a spec from a preset's JSON, checking the fields a roofline divides by."""
    peaks = data.get("peak_flops") or {}
    peak_flops: dict[str, float | None] = {d: (None if peaks.get(d) is None else float(peaks[d])) for d in DTYPES}
    spec = HardwareSpec(
        name=str(data["name"]), label=str(data["label"]), variant=str(data["variant"]),
        memory_bytes=int(data["memory_bytes"]), bandwidth_bytes_per_s=float(data["bandwidth_bytes_per_s"]),
        peak_flops=peak_flops, source=str(data["source"]), notes=str(data.get("notes", "")),
        measured=bool(data.get("measured", measured)), calibration=data.get("calibration"),
        interconnect=interconnect_from_dict(data.get("interconnect"), str(data["name"])),
    )
    if spec.bandwidth_bytes_per_s <= 0 or spec.memory_bytes <= 0:
        raise ValueError(f"hardware {spec.name!r}: bandwidth and memory must be positive")
    return spec


def load_hardware(name: str) -> HardwareSpec:
    """A vendor preset by name, read from its JSON; never measures anything.

    "host" is not a file but this machine, calibrated: core.calibrate.resolve_hardware answers it
    (and every name), so a plain preset lookup can never start a calibration or import torch.
    Only names from list_presets() are accepted, never paths: the name may come from a page reader.
    """
    names = _preset_names()
    if name == HOST:
        raise ValueError(f"{HOST!r} is this machine, calibrated, not a preset: use "
                         "core.calibrate.resolve_hardware('host')")
    if name not in names:
        raise ValueError(f"unknown hardware {name!r}; valid names: {', '.join(names)}, and {HOST!r} "
                         "(this machine, through core.calibrate.resolve_hardware)")
    with open(assets_dir() / f"{name}.json", encoding="utf-8") as f:
        return spec_from_dict(json.load(f))


def ridge(spec: HardwareSpec, dtype: str) -> float:
    """Ridge point in FLOP/byte: arithmetic intensity above which an operation is compute-bound."""
    return spec.peak(dtype) / spec.bandwidth_bytes_per_s


CUSTOM = "custom"


def custom_spec(memory_bytes: float, bandwidth_bytes_per_s: float, peak_flops: dict[str, float | None],
                link_bytes_per_s: float | None = None, link_latency_s: float = 3e-6) -> HardwareSpec:
    """A machine from the reader's own figures (an unreleased GPU, a cloud instance, a datasheet not
    bundled here). Same checks as a preset: positive memory and bandwidth, at least one positive
    peak; a peak of None or 0 means "no path for that dtype". `link_bytes_per_s` is the link's
    PER-DIRECTION bandwidth; without it tensor parallelism cannot be priced."""
    peaks = {d: (float(v) if v else None) for d, v in peak_flops.items() if d in DTYPES}
    if not any(peaks.values()):
        raise ValueError("a custom machine needs at least one positive peak FLOP/s figure")
    if any(v is not None and not 0 < v < float("inf") for v in peaks.values()):
        raise ValueError("peak FLOP/s figures must be positive and finite")
    link = None
    if link_bytes_per_s:
        link = Interconnect(name="your link", bandwidth_bytes_per_s=float(link_bytes_per_s),
                            datasheet_bandwidth_bytes_per_s=float(link_bytes_per_s), datasheet_bidirectional=False,
                            latency_s=float(link_latency_s), source="figures entered on the page",
                            latency_source="entered on the page")
    spec = spec_from_dict({
        "name": CUSTOM, "label": "Custom GPU (your figures)", "variant": "figures entered on the page",
        "memory_bytes": int(memory_bytes), "bandwidth_bytes_per_s": float(bandwidth_bytes_per_s),
        "peak_flops": peaks, "source": "entered by the reader on the what-if page: not a datasheet, not checked",
        "notes": "Peaks are taken as dense (no sparsity); the link bandwidth as per direction.",
    })
    return replace(spec, interconnect=link)
