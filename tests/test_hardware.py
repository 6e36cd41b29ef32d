"""Hardware presets: every JSON loads with the fields a roofline divides by, and ridges match datasheets."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from core import hardware
from core.hardware import HardwareSpec, Interconnect, list_presets, load_hardware, ridge, spec_from_dict

REQUIRED = {"h100-sxm", "h200", "a100-80gb", "l4", "rtx-4090", "mi300x", "apple-m3-max",
            "a100-40gb", "h100-pcie", "b200", "l40s"}
VENDOR = sorted(set(list_presets()) - {"host"})


def test_list_includes_required_presets_and_host():
    names = list_presets()
    assert set(names) >= REQUIRED
    assert "host" in names
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", VENDOR)
def test_preset_loads_with_positive_figures(name):
    spec = load_hardware(name)
    assert isinstance(spec, HardwareSpec)
    assert spec.name == name
    assert spec.memory_bytes > 1e9 and spec.bandwidth_bytes_per_s > 1e10
    assert spec.bandwidth == spec.bandwidth_bytes_per_s
    assert spec.peak_flops["bf16"] and spec.peak_flops["bf16"] > 1e12
    assert spec.peak_flops["fp32"] and spec.peak_flops["fp32"] > 1e12
    assert set(spec.peak_flops) == set(hardware.DTYPES)
    assert spec.variant.strip() and spec.source.strip() and spec.label.strip()
    assert "http" in spec.source  # every figure must be traceable to a page
    assert not spec.measured


@pytest.mark.parametrize("name", VENDOR)
def test_preset_json_is_complete_and_dense(name):
    data = json.loads((hardware.assets_dir() / f"{name}.json").read_text())
    for key in ("name", "label", "variant", "memory_bytes", "bandwidth_bytes_per_s", "peak_flops", "source",
                "notes"):
        assert key in data, key
    assert set(data["peak_flops"]) == {"fp32", "bf16", "fp16", "fp8", "int8"}
    # Sparse figures are exactly 2x dense; a sparse bf16 peak above fp8's would betray a mix-up.
    peaks = data["peak_flops"]
    if peaks["fp8"] is not None:
        assert peaks["fp8"] >= peaks["bf16"]
    assert peaks["bf16"] >= peaks["fp32"]


@pytest.mark.parametrize("name, dtype, expected", [
    ("h100-sxm", "bf16", 295.0), ("a100-80gb", "bf16", 153.0), ("h200", "bf16", 206.0),
    ("mi300x", "bf16", 246.7), ("l4", "bf16", 403.3), ("rtx-4090", "bf16", 163.9),
    ("a100-40gb", "bf16", 200.6), ("h100-pcie", "bf16", 378.0), ("b200", "bf16", 281.3),
    ("l40s", "bf16", 419.0), ("b200", "fp8", 562.5), ("h100-pcie", "fp8", 756.5),
])
def test_ridge_points(name, dtype, expected):
    assert ridge(load_hardware(name), dtype) == pytest.approx(expected, rel=0.02)


def test_ridge_accepts_torch_style_dtype_names():
    spec = load_hardware("h100-sxm")
    assert ridge(spec, "bfloat16") == ridge(spec, "bf16") == ridge(spec, "torch.bfloat16")
    assert ridge(spec, "float32") == pytest.approx(67e12 / 3.35e12)


def test_ridge_for_unsupported_or_unknown_dtype_raises():
    with pytest.raises(ValueError, match="fp8"):
        ridge(load_hardware("a100-80gb"), "fp8")  # Ampere has no FP8 path
    with pytest.raises(ValueError, match="unknown dtype"):
        ridge(load_hardware("a100-80gb"), "fp4")


@pytest.mark.parametrize("bad", ["h100", "../settings", "", "H100-SXM", "host.json"])
def test_unknown_name_lists_valid_ones(bad):
    with pytest.raises(ValueError) as info:
        load_hardware(bad)
    message = str(info.value)
    for name in REQUIRED | {"host"}:
        assert name in message


def test_spec_is_frozen_and_serialisable():
    spec = load_hardware("l4")
    with pytest.raises(AttributeError):
        spec.bandwidth_bytes_per_s = 1.0  # type: ignore[misc]
    data = spec.to_dict()
    assert json.loads(json.dumps(data))["peak_flops"]["bf16"] == spec.peak_flops["bf16"]


def test_host_is_not_a_preset_and_the_error_says_where_it_lives():
    with pytest.raises(ValueError, match="resolve_hardware"):
        load_hardware("host")


def test_hardware_module_never_imports_calibrate():
    # Inside functions too: a preset lookup must never be able to start a measurement.
    tree = ast.parse(Path(hardware.__file__).read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
            names.update(f"{node.module}.{a.name}" for a in node.names)
    assert not {n for n in names if "calibrate" in n or n.split(".")[0] == "torch"}


def test_preset_lookups_never_import_calibrate_or_torch():
    code = ("import json, sys\n"
            "from core.hardware import list_presets, load_hardware\n"
            "names = list_presets()\n"
            "specs = [load_hardware(n) for n in names if n != 'host']\n"
            "print(json.dumps({'host_listed': 'host' in names, 'loaded': len(specs),\n"
            "                  'calibrate': 'core.calibrate' in sys.modules,\n"
            "                  'torch': 'torch' in sys.modules}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=True, cwd=Path(hardware.__file__).resolve().parent.parent)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"host_listed": True, "loaded": len(VENDOR), "calibrate": False, "torch": False}


# ---- new presets: figures against their datasheets (dense, decimal) ----

@pytest.mark.parametrize("name, memory, bandwidth, peaks", [
    ("a100-40gb", 40e9, 1555e9, {"fp32": 19.5e12, "bf16": 312e12, "fp16": 312e12, "fp8": None, "int8": 624e12}),
    ("h100-pcie", 80e9, 2.0e12, {"fp32": 51e12, "bf16": 756e12, "fp16": 756e12, "fp8": 1513e12, "int8": 1513e12}),
    # HGX B200 datasheet per GPU, with sparsity: BF16 4.5 PF, FP8 9 PF, INT8 9 POPS; dense is half.
    ("b200", 180e9, 8.0e12, {"fp32": 75e12, "bf16": 2.25e15, "fp16": 2.25e15, "fp8": 4.5e15, "int8": 4.5e15}),
    # L40S datasheet: BF16 362.05 dense | 733 sparse; FP8 733 | 1,466.
    ("l40s", 48e9, 864e9, {"fp32": 91.6e12, "bf16": 362.05e12, "fp16": 362.05e12, "fp8": 733e12, "int8": 733e12}),
])
def test_new_presets_match_their_datasheets(name, memory, bandwidth, peaks):
    spec = load_hardware(name)
    assert spec.memory_bytes == memory
    assert spec.bandwidth_bytes_per_s == pytest.approx(bandwidth, rel=1e-9)
    for dtype, value in peaks.items():
        if value is None:
            assert spec.peak_flops[dtype] is None, dtype
        else:
            assert spec.peak_flops[dtype] == pytest.approx(value, rel=1e-9), dtype


def test_dense_not_sparse_peaks_for_new_presets():
    # The sparse figures vendors print first: none may have slipped in.
    assert load_hardware("l40s").peak("bf16") != pytest.approx(733e12, rel=0.01)
    assert load_hardware("h100-pcie").peak("bf16") != pytest.approx(1513e12, rel=0.01)
    assert load_hardware("b200").peak("bf16") != pytest.approx(4.5e15, rel=0.01)
    assert load_hardware("a100-40gb").peak("bf16") == load_hardware("a100-80gb").peak("bf16")


# ---- interconnect ----

@pytest.mark.parametrize("name", VENDOR)
def test_every_preset_has_an_interconnect(name):
    link = load_hardware(name).interconnect
    assert isinstance(link, Interconnect)
    assert link.name.strip()
    assert link.bandwidth_bytes_per_s > 1e9  # per direction
    assert link.latency_s > 0 and link.latency_s < 1e-3
    assert "http" in link.source
    # The headline figure and the per-direction one agree with the flag: bidirectional headlines are halved.
    factor = 2 if link.datasheet_bidirectional else 1
    assert link.bandwidth_bytes_per_s * factor == pytest.approx(link.datasheet_bandwidth_bytes_per_s, rel=1e-9)
    # A latency is either cited or said plainly to be an assumption.
    assert link.latency_source.strip()
    # No device-to-device link is faster than the memory it feeds.
    assert link.bandwidth_bytes_per_s < load_hardware(name).bandwidth_bytes_per_s


@pytest.mark.parametrize("name, kind, per_direction, bidirectional", [
    ("h100-sxm", "NVLink 4", 450e9, True),    # "900 GB/s" counts both directions
    ("h200", "NVLink 4", 450e9, True),
    ("a100-80gb", "NVLink 3", 300e9, True),   # "600 GB/s"
    ("a100-40gb", "NVLink 3", 300e9, True),
    ("b200", "NVLink 5", 900e9, True),        # "1.8 TB/s"
    ("h100-pcie", "PCIe Gen5", 64e9, True),   # "128 GB/s"
    ("l4", "PCIe Gen4", 32e9, True),          # "64 GB/s"
    ("l40s", "PCIe Gen4", 32e9, True),        # "64 GB/s bidirectional"
    ("rtx-4090", "PCIe Gen4", 32e9, False),
    ("mi300x", "Infinity Fabric", 448e9, True),  # 7 links x 128 GB/s = 896 GB/s both ways
    ("apple-m3-max", "Thunderbolt", 5e9, False),  # 40 Gb/s, full duplex
])
def test_interconnect_figures_per_direction(name, kind, per_direction, bidirectional):
    link = load_hardware(name).interconnect
    assert kind in link.name
    assert link.bandwidth_bytes_per_s == pytest.approx(per_direction, rel=0.02)
    assert link.datasheet_bidirectional is bidirectional


def test_pcie_generations_differ_by_two():
    gen4 = load_hardware("l4").interconnect.bandwidth_bytes_per_s
    gen5 = load_hardware("h100-pcie").interconnect.bandwidth_bytes_per_s
    assert gen5 == pytest.approx(2 * gen4)
    assert gen4 == pytest.approx(32e9, rel=0.03) and gen5 == pytest.approx(64e9, rel=0.03)


def test_interconnect_round_trips_through_to_dict():
    spec = load_hardware("h100-sxm")
    data = json.loads(json.dumps(spec.to_dict()))
    assert data["interconnect"]["bandwidth_bytes_per_s"] == 450e9
    assert data["interconnect"]["datasheet_bidirectional"] is True
    assert spec_from_dict(data) == spec


def test_interconnect_defaults_to_none_for_callers_that_build_a_spec():
    spec = HardwareSpec(name="x", label="X", variant="v", memory_bytes=1, bandwidth_bytes_per_s=1.0,
                        peak_flops={}, source="s")
    assert spec.interconnect is None
    data = json.loads((hardware.assets_dir() / "l4.json").read_text())
    del data["interconnect"]
    assert spec_from_dict(data).interconnect is None


def _l4_with(**changes):
    data = json.loads((hardware.assets_dir() / "l4.json").read_text())
    data["interconnect"].update(changes)
    return data


@pytest.mark.parametrize("changes, field", [
    ({"bandwidth_bytes_per_s": 0}, "bandwidth_bytes_per_s"),
    ({"bandwidth_bytes_per_s": -32e9}, "bandwidth_bytes_per_s"),
    ({"bandwidth_bytes_per_s": "fast"}, "bandwidth_bytes_per_s"),
    ({"bandwidth_bytes_per_s": None}, "bandwidth_bytes_per_s"),
    ({"bandwidth_bytes_per_s": True}, "bandwidth_bytes_per_s"),
    ({"datasheet_bandwidth_bytes_per_s": float("nan")}, "datasheet_bandwidth_bytes_per_s"),
    ({"latency_s": 0.0}, "latency_s"),
    ({"latency_s": float("inf")}, "latency_s"),
    ({"datasheet_bidirectional": "yes"}, "datasheet_bidirectional"),
    ({"source": ""}, "source"),
    ({"name": None}, "name"),
])
def test_malformed_interconnect_is_refused_naming_preset_and_field(changes, field):
    with pytest.raises(ValueError) as info:
        spec_from_dict(_l4_with(**changes))
    message = str(info.value)
    assert "'l4'" in message and f"interconnect.{field}" in message


def test_missing_interconnect_field_or_wrong_type_is_refused():
    data = _l4_with()
    del data["interconnect"]["latency_s"]
    with pytest.raises(ValueError, match=r"'l4'.*interconnect\.latency_s is missing"):
        spec_from_dict(data)
    data = _l4_with()
    data["interconnect"] = [32e9]
    with pytest.raises(ValueError, match=r"'l4'.*interconnect must be an object"):
        spec_from_dict(data)
