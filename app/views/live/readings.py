"""Readings of a run that more than one view makes: named decisions on shown values, tested as values.

The live lesson's wording and the charts' titles both follow these (the roofline chart reads the
ceiling, the step-budget chart reads paper), so they live here rather than in either.
"""

from __future__ import annotations

import statistics

from app.shared.context import RunContext
from app.views.live import shown
from core import perf
from core.trace import Event


def past_ceiling(measured: float, ceiling: float) -> bool:
    """True when a bandwidth (bytes/s) as printed is above the calibrated ceiling as printed.

    The ceiling is a benchmark measured once per server; a run on a machine less busy than it was
    then beats it (this server's dev cache, measured under load, read 4.09 GB/s against runs at
    5-9 GB/s), and the details must then not say the run fell short of it."""
    return shown.gbs_value(measured) > shown.gbs_value(ceiling)


# A decode run at under this share of the calibrated slope (as printed) sits visibly below it on the
# roofline: its title must not say "on the slope" (a reader saw 32% and doubted the chapter's claim).
UNDER_SLOPE = 0.5


def roofline_side(measured: float, ceiling: float) -> str:
    """"past" (the run beat the calibrated slope), "under" (below UNDER_SLOPE of it) or "short"."""
    if past_ceiling(measured, ceiling):
        return "past"
    return "under" if shown.gbs_value(measured) < UNDER_SLOPE * shown.gbs_value(ceiling) else "short"


def paper_step_ms(decode: list[Event], bandwidth: float) -> float:
    """Bytes ÷ bandwidth for the median decode step, as the page prints it: divided from the printed
    MB and GB/s, so a reader's own division gives the printed time (the dashed line, perf.paper_ms per
    step, uses the unrounded figures: they differ by under 0.1%)."""
    step_bytes = statistics.median(e.cost["bytes"]["total"] for e in decode)
    return shown.tenth_value(shown.mb_value(step_bytes) / shown.gbs_divisor(bandwidth))


def beats_paper(events: list[Event], ctx: RunContext) -> bool:
    """True when this run's mean decode step (TPOT, as the tile prints it) took no longer than the
    median step's bytes ÷ the calibrated bandwidth: the paper time then overstates the step, and the
    paper answer and the step-budget chart's title say so instead of blaming costs that are not there."""
    decode = [e for e in events if e.phase == "decode" and e.cost]
    tpot = perf.tpot_ms(events)
    if not decode or tpot is None or not ctx.ceilings.bandwidth:
        return False
    return shown.sig3_value(tpot) <= paper_step_ms(decode, ctx.ceilings.bandwidth)
