"""Calibration: plausible numbers from a quick run, and a cache that survives, matches and self-heals."""

from __future__ import annotations

import dataclasses
import json

import pytest

from core import calibrate, hardware
from core.calibrate import Calibration


@pytest.fixture(scope="module")
def quick_cal() -> Calibration:
    # One real measurement for the whole module: it is the slow part (a few seconds).
    return calibrate.measure(quick=True)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PDLAB_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def counting_measure(monkeypatch, quick_cal):
    """Replace the benchmarks with a stand-in that counts calls, to test cache logic in milliseconds."""
    calls: list[bool] = []

    def fake(quick: bool = False) -> Calibration:
        calls.append(quick)
        return dataclasses.replace(quick_cal, quick=quick, measured_at=f"fake-{len(calls)}")

    monkeypatch.setattr(calibrate, "measure", fake)
    return calls


def test_quick_calibration_is_plausible(quick_cal):
    cal = quick_cal
    assert 1e9 < cal.bandwidth_gemv_bytes_per_s < 1e12
    assert 1e9 < cal.bandwidth_gemv_bf16_bytes_per_s < 1e12
    assert 1e9 < cal.bandwidth_copy_bytes_per_s < 1e12
    for dtype in ("fp32", "bf16"):
        assert 1e9 < cal.matmul_flops_per_s[dtype] < 1e13
        assert cal.matmul_flops_per_s[dtype] == max(cal.matmul_by_shape_flops_per_s[dtype].values())
        fit = cal.overhead_by_dtype_s[dtype]
        assert 0 < fit["step_s"] < 0.1 and 0 < fit["layer_s"] < 0.1
    assert 0 < cal.overhead_step_s < 0.1 and 0 < cal.overhead_layer_s < 0.1
    # More layers must cost more: a fit from points that do not rise would be meaningless.
    points = cal.overhead_points_s["fp32"]
    assert points["8"] > points["1"]
    assert cal.threads >= 1 and cal.fingerprint["threads"] == cal.threads
    assert cal.quick and 0 < cal.duration_s < 30
    assert cal.gemv_working_set_bytes >= 64 * 2**20  # twice the 32 MiB L3, so DRAM-resident


def test_gemv_bandwidth_interpolates_and_clamps(quick_cal):
    table = quick_cal.bandwidth_gemv_by_k_bytes_per_s["fp32"]
    lo, hi = table["576"], table["2048"]
    assert calibrate.gemv_bandwidth(quick_cal, 576) == lo
    assert calibrate.gemv_bandwidth(quick_cal, 100) == lo
    assert calibrate.gemv_bandwidth(quick_cal, 10_000) == hi
    mid = calibrate.gemv_bandwidth(quick_cal, 1024)
    assert min(lo, hi) <= mid <= max(lo, hi)
    assert calibrate.gemv_bandwidth(quick_cal, 2048, "bf16") == quick_cal.bandwidth_gemv_bf16_bytes_per_s
    assert calibrate.gemv_bandwidth(quick_cal, 2048, "bfloat16") == quick_cal.bandwidth_gemv_bf16_bytes_per_s
    assert calibrate.gemv_bandwidth(quick_cal, 2048, "int4") == hi  # no table of its own: fp32's
    assert calibrate.overhead_s(quick_cal, 8, "torch.bfloat16") == pytest.approx(
        quick_cal.overhead_by_dtype_s["bf16"]["step_s"] + 8 * quick_cal.overhead_by_dtype_s["bf16"]["layer_s"])
    assert calibrate.overhead_s(quick_cal, 30) == pytest.approx(
        quick_cal.overhead_step_s + 30 * quick_cal.overhead_layer_s)


def test_dict_round_trip(quick_cal):
    data = json.loads(json.dumps(quick_cal.to_dict(), allow_nan=False))
    assert Calibration.from_dict(data) == quick_cal


@pytest.mark.parametrize("mutate", [
    lambda d: d.pop("bandwidth_gemv_bytes_per_s"),
    lambda d: d.update(bandwidth_gemv_bytes_per_s=0.0),
    lambda d: d.update(bandwidth_copy_bytes_per_s=float("nan")),
    lambda d: d.update(matmul_flops_per_s={"fp32": 1e10}),
    lambda d: d.update(overhead_points_s="not a dict"),
    lambda d: d.update(bandwidth_gemv_by_k_bytes_per_s={"fp32": {"wide": 1e10}}),
    lambda d: d.pop("matmul_rows_s"),
    lambda d: d.update(matmul_rows_s={"fp32": {"16x576": 0.0}}),
    lambda d: d.update(matmul_rows_s={"fp32": {"sixteen": 1e-10}}),
    lambda d: d.update(matmul_rows_s={"fp32": {"1x576": 1e-9}}),  # a width measured at one count only
    lambda d: d.update(matmul_rows_s={"fp32": {"4x576": 1e-9, "16x576": 2e-9}}),  # no one-row baseline
])
def test_from_dict_rejects_bad_entries(quick_cal, mutate):
    data = quick_cal.to_dict()
    mutate(data)
    with pytest.raises(ValueError):
        Calibration.from_dict(data)


def test_cache_round_trip_with_real_measurement(cache_dir):
    first = calibrate.calibrate(quick=True)
    path = cache_dir / "calibration.json"
    assert path.is_file()
    stored = json.loads(path.read_text())
    assert stored["schema"] == calibrate.CACHE_SCHEMA and len(stored["entries"]) == 1
    again = calibrate.calibrate(quick=True)
    assert again == first  # read back, not re-measured (measured_at would differ)
    assert calibrate.load_cached() == first


def test_force_remeasures_and_quick_never_replaces_full(cache_dir, counting_measure):
    full = calibrate.load_or_calibrate()
    assert counting_measure == [False] and not full.quick
    assert calibrate.calibrate(quick=True) == full  # a full result answers a quick request
    forced = calibrate.calibrate(force=True, quick=True)
    assert counting_measure == [False, True] and forced.quick
    assert calibrate.load_cached() == full  # the quick one did not overwrite the full one
    refreshed = calibrate.calibrate(force=True)
    assert counting_measure[-1] is False and calibrate.load_cached() == refreshed != full


def test_quick_cache_does_not_stand_in_for_full(cache_dir, counting_measure):
    calibrate.calibrate(quick=True)
    calibrate.calibrate()
    assert counting_measure == [True, False]


@pytest.mark.parametrize("content", [
    "{ not json", "", "[]", '{"schema": 1, "entries": []}', '{"schema": 999, "entries": {}}',
    '{"schema": 1, "entries": {"deadbeef": {"x": 1}}}', "\udcff",
])
def test_corrupt_cache_is_remeasured_and_repaired(cache_dir, counting_measure, content):
    path = cache_dir / "calibration.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    cal = calibrate.load_or_calibrate()
    assert counting_measure == [False]
    assert calibrate.load_cached() == cal  # the file was rewritten with a valid entry


def test_corrupt_entry_under_the_right_key_is_remeasured(cache_dir, counting_measure, quick_cal):
    fp = calibrate.fingerprint()
    bad = dict(quick_cal.to_dict(), fingerprint=fp, quick=False, bandwidth_gemv_bytes_per_s=-1)
    (cache_dir / "calibration.json").write_text(json.dumps({"schema": 1, "entries": {calibrate._key(fp): bad}}))
    calibrate.load_or_calibrate()
    assert counting_measure == [False]


def test_foreign_fingerprint_is_ignored(cache_dir, counting_measure, quick_cal):
    foreign = dict(calibrate.fingerprint(), cpu_model="Some Other CPU")
    entry = dict(quick_cal.to_dict(), fingerprint=foreign, quick=False)
    # Stored under THIS host's key, as a copied-over cache file might be: the full fingerprint must match.
    key = calibrate._key(calibrate.fingerprint())
    (cache_dir / "calibration.json").write_text(json.dumps({"schema": 1, "entries": {key: entry}}))
    assert calibrate.load_cached() is None
    cal = calibrate.load_or_calibrate()
    assert counting_measure == [False] and cal.fingerprint == calibrate.fingerprint()


def test_thread_count_is_part_of_the_fingerprint(monkeypatch):
    monkeypatch.setenv("PDLAB_THREADS", "1")
    one = calibrate._key(calibrate.fingerprint())
    monkeypatch.setenv("PDLAB_THREADS", "2")
    assert calibrate._key(calibrate.fingerprint()) != one


def test_unwritable_cache_dir_still_returns_a_calibration(tmp_path, monkeypatch, counting_measure):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("PDLAB_CACHE_DIR", str(blocker / "sub"))  # a path under a file cannot be created
    with pytest.warns(UserWarning, match="calibration cache"):
        cal = calibrate.load_or_calibrate()
    assert cal.measured_at == "fake-1"


def test_host_preset_uses_cached_calibration(cache_dir, monkeypatch, quick_cal):
    full = dataclasses.replace(quick_cal, quick=False)
    calibrate._store(full)

    def boom(quick: bool = False):
        raise AssertionError("host spec must come from the cache here")

    monkeypatch.setattr(calibrate, "measure", boom)
    assert calibrate.resolve_hardware("host", measure=True) == calibrate.resolve_hardware("host")
    spec = calibrate.resolve_hardware("host")
    assert spec.measured and spec.name == "host"
    assert spec.label == "This machine (calibrated)"
    assert spec.bandwidth_bytes_per_s == full.bandwidth_gemv_bytes_per_s
    assert spec.peak_flops["fp32"] == full.matmul_flops_per_s["fp32"]
    assert spec.peak_flops["fp16"] is None
    assert spec.calibration == full.to_dict()
    assert spec.memory_bytes > 2**28
    assert spec.variant and spec.source
    assert hardware.ridge(spec, "fp32") == pytest.approx(
        full.matmul_flops_per_s["fp32"] / full.bandwidth_gemv_bytes_per_s)


def test_host_without_a_cached_calibration_refuses_unless_measuring_is_allowed(cache_dir, counting_measure):
    with pytest.raises(calibrate.HostNotCalibrated, match="python -m core calibrate"):
        calibrate.resolve_hardware("host")
    assert counting_measure == []  # refused, never measured
    spec = calibrate.resolve_hardware("host", measure=True)
    assert counting_measure == [False] and spec.measured
    assert calibrate.resolve_hardware("host") == spec  # now cached: answered without measuring
    assert counting_measure == [False]


def test_resolve_hardware_passes_presets_through(counting_measure):
    assert calibrate.resolve_hardware("l4") == hardware.load_hardware("l4")
    with pytest.raises(ValueError, match="unknown hardware"):
        calibrate.resolve_hardware("no-such-gpu", measure=True)
    assert counting_measure == []


def test_the_row_table_times_matmuls_by_their_rows_and_grows_with_them(quick_cal):
    """The matmul row table (core.predictor prices a prefill's arithmetic from it): seconds per weight
    element for 1 to 256 rows; more rows take longer per pass, and far less per row."""
    for dtype in ("fp32", "bf16"):
        table = quick_cal.matmul_rows_s[dtype]
        assert {int(key.split("x")[0]) for key in table} == set(calibrate._ROWS)
        fp32 = quick_cal.matmul_rows_s["fp32"]
    one, many = fp32["1x576"], fp32["256x576"]
    assert many > one and many / 256 < one / 4  # 256 rows cost more than one, and far less than 256 passes


def _table_cal(quick_cal, table):
    return dataclasses.replace(quick_cal, matmul_rows_s={"fp32": table})


def test_matmul_excess_interpolates_in_rows_extrapolates_past_them_and_blends_widths(quick_cal):
    table = {"1x576": 1.0, "4x576": 2.0, "16x576": 4.0, "64x576": 10.0, "256x576": 40.0,
             "1x2048": 1.0, "4x2048": 1.5, "16x2048": 3.0, "64x2048": 8.0, "256x2048": 32.0}
    cal = _table_cal(quick_cal, table)
    ex = calibrate.matmul_excess_s
    assert ex(cal, 1, 576) == 0.0 and ex(cal, 0.5, 576) == 0.0  # one row: the stream alone
    assert ex(cal, 16, 576) == pytest.approx(3.0)
    assert ex(cal, 10, 576) == pytest.approx(2.0)  # halfway between 4 (1.0) and 16 (3.0)
    assert ex(cal, 512, 576) == pytest.approx(40.0 + 30.0 / 192 * 256 - 1.0)  # the last segment's slope
    assert ex(cal, 16, 300) == ex(cal, 16, 576) and ex(cal, 16, 8192) == ex(cal, 16, 2048)  # clamped
    middle = ex(cal, 16, 1086)  # log-halfway between the widths
    assert middle == pytest.approx((3.0 + 2.0) / 2, rel=0.01)
    assert ex(dataclasses.replace(quick_cal, matmul_rows_s={}), 64, 576) == 0.0  # no table: nothing added
