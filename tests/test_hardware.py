"""Hardware presets: every JSON loads with the fields a roofline divides by, and ridges match datasheets."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from core import hardware
from core.hardware import HardwareSpec, list_presets, load_hardware, ridge

REQUIRED = {"h100-sxm", "h200", "a100-80gb", "l4", "rtx-4090", "mi300x", "apple-m3-max"}
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
