"""How the live page prints each kind of number, and the number a reader reads off each print.

One module for both halves: where a reader will redo a division (a size over a bandwidth, a share
of a ceiling, a measured time minus a predicted one), the page does it on the values as printed,
and those come from here, rounded the way the print rounds them, never parsed back out of a string.
Each `*_value` twin returns exactly the number its formatter prints.
"""

from __future__ import annotations

import math


def _round_sig(value: float, digits: int) -> float:
    """`value` rounded to `digits` significant figures, as `f"{value:.{digits}g}"` prints it."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def sig3(value: float) -> str:
    """A figure to three significant figures (154, 12.6, 6.03, 0.190): two such
    figures divided by a reader give a percentage right to the point (two figures can be 5% off)."""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:#.3g}"


def sig3_value(value: float) -> float:
    """The number sig3 prints."""
    return float(round(value)) if value >= 100 else round(value, 1) if value >= 10 else _round_sig(value, 3)


def gbs_text(bandwidth: float) -> str:
    """A bandwidth (bytes/s) in GB/s as the page prints it: two decimals, the precision at which a reader
    dividing a printed size by it gets the printed time (the "about this run" table prints the same)."""
    return f"{bandwidth / 1e9:.2f}"


def gbs_value(bandwidth: float) -> float:
    """The GB/s gbs_text prints."""
    return round(bandwidth / 1e9, 2)


def gbs_divisor(bandwidth: float) -> float:
    """The GB/s a reader divides by: the printed figure, or the exact one when it prints as 0.00 (a
    bandwidth under 5 MB/s, which only a broken calibration gives; never a division by zero)."""
    return gbs_value(bandwidth) or bandwidth / 1e9


def ridge_value(peak_flops: float, bandwidth: float) -> float:
    """The ridge point in FLOP/byte, divided from the printed roof and bandwidth (sig3 GFLOP/s over
    gbs_text GB/s) and rounded to one decimal: 107 ÷ 21.57 reads 5.0 wherever it is quoted, not 4.9
    in one place and 5.0 in another from differently rounded copies of the same calibration."""
    return round(sig3_value(peak_flops / 1e9) / gbs_divisor(bandwidth), 1)


def ridge_text(peak_flops: float, bandwidth: float) -> str:
    """The ridge point as the page prints it (ridge_value)."""
    return f"{ridge_value(peak_flops, bandwidth):.1f}"


def signed_pct(x: float) -> str:
    """A percentage with its sign, "+12%" or "−38%" (a true minus sign)."""
    r = round(x)
    return f"{'−' if r < 0 else '+'}{abs(r)}%"


def fmt_bytes(n: float | None) -> str:
    """Bytes in decimal units, the page's one convention (1 MB = 10^6 bytes, like GB/s of bandwidth)."""
    if n is None:
        return "n/a"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def mb_text(nbytes: float) -> str:
    """A size in MB: whole MB from 100 up, else three significant figures (the tiny test model)."""
    mb = nbytes / 1e6
    return f"{mb:,.0f}" if mb >= 100 else f"{mb:.3g}"


def mb_value(nbytes: float) -> float:
    """The MB mb_text prints."""
    mb = nbytes / 1e6
    return float(round(mb)) if mb >= 100 else _round_sig(mb, 3)


def whole_ms(value: float) -> str:
    """Milliseconds in whole numbers from 10 up, else two significant figures."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def term_ms(value: float) -> str:
    """A term in ms with one decimal, or two significant digits when that would read 0.0."""
    return f"{value:.1f}" if value >= 0.05 or value == 0 else f"{value:.2g}"


def whole_value(value: float) -> float:
    """The number f"{value:.0f}" prints."""
    return float(round(value))


def tenth_value(value: float) -> float:
    """The number f"{value:.1f}" prints."""
    return round(value, 1)
