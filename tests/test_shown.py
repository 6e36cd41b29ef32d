"""The live page's printed numbers and the values a reader reads off them agree (app.views.live.shown)."""

from __future__ import annotations

import random

import pytest

from app.views.live import shown

VALUES = [0.0, 0.0123456, 0.19, 0.9996, 1.0, 6.0349, 9.996, 12.649, 99.96, 100.0, 154.5, 1234.56, 98765.4]
_RNG = random.Random(7)
VALUES += [_RNG.uniform(0, 10 ** _RNG.randint(-2, 5)) for _ in range(500)]


@pytest.mark.parametrize(("text", "value"), [(shown.sig3, shown.sig3_value),
                                             (lambda x: f"{x:.0f}", shown.whole_value),
                                             (lambda x: f"{x:.1f}", shown.tenth_value)])
def test_each_value_is_the_number_its_print_shows(text, value):
    for x in VALUES:
        assert value(x) == float(text(x)), x


def test_sizes_and_bandwidths_read_as_printed():
    for x in VALUES:
        nbytes, bandwidth = x * 1e6, x * 1e9
        assert shown.mb_value(nbytes) == float(shown.mb_text(nbytes).replace(",", "")), x
        assert shown.gbs_value(bandwidth) == float(shown.gbs_text(bandwidth)), x


def test_the_ridge_is_divided_from_the_printed_roof_and_bandwidth():
    # 107 GFLOP/s over 21.57 GB/s reads 5.0 wherever it is quoted
    assert shown.ridge_text(107.2e9, 21.571e9) == "5.0"
    assert shown.ridge_value(107.2e9, 21.571e9) == round(107 / 21.57, 1)
