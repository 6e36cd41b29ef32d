"""One engine run drawn whole: its measured ticks, the simulator's ticks for the same requests right
under them (on the same time axis, so a gap lines up with its prediction), the engine's own
metrics, and the numbers. The live view (after a run) and the recording both draw a run this way.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from app.views.engines import figures as figs
from app.views.engines import numbers
from app.views.engines.text import ERROR_CAPTION
from core.engines.record import EngineRun


def x_range(runs: list[tuple[EngineRun, dict[int, list[float]] | None]]) -> float:
    """A right edge shared by every chart of these runs, so side-by-side settings compare by eye."""
    sets = [numbers.rows(run) for run, _ in runs] + [numbers.rows(run, sim) for run, sim in runs if sim]
    return figs.x_extent(*sets)


def ticks(run: EngineRun, simulated: dict[int, list[float]] | None, key: str, x_max: float,
          missing: str | None = None) -> None:
    """Measured ticks, then the simulated ones under them (or why there are none)."""
    st.plotly_chart(figs.token_ticks(numbers.rows(run), "measured", "Every stream's tokens as they arrived (measured)",
                                     x_max), key=f"{key}_measured")
    if simulated:
        st.plotly_chart(figs.token_ticks(numbers.rows(run, simulated), "simulated",
                                         "The simulator's prediction (simulated)", x_max),
                        key=f"{key}_simulated")
    elif missing:
        st.info(missing)
    st.caption(figs.TICKS_KEY)


def metrics(run: EngineRun, key: str, x_max: float) -> None:
    st.plotly_chart(figs.engine_metrics(run, "What the engine reported (measured)", x_max),
                    key=f"{key}_metrics")
    st.caption("The engine publishes these counts on its `/metrics` page; this page read them about every half "
               "second during the run, so they are coarser than the ticks. A step up in prompt tokens is a prompt "
               "the engine finished prefilling.")


def table(run: EngineRun, simulated: dict[int, list[float]] | None, comparison: dict[str, Any] | None) -> None:
    rows = numbers.summary_rows(run, simulated, comparison)
    # a static table: it wraps in a narrow column instead of hiding the error column behind a scroll
    st.table(pd.DataFrame(rows).set_index(""))
    st.caption(ERROR_CAPTION)


def show(run: EngineRun, simulated: dict[int, list[float]] | None, comparison: dict[str, Any] | None, key: str,
         x_max: float | None = None, side_by_side: bool = True, missing: str | None = None) -> None:
    """The whole run. `side_by_side`: ticks on the left, the engine's metrics on the right (a full-width
    run); otherwise one above the other (a run in a column of its own)."""
    x_max = x_max or x_range([(run, simulated)])
    if side_by_side:
        left, right = st.columns([3, 2], gap="large")
        with left:
            ticks(run, simulated, key, x_max, missing)
        with right:
            metrics(run, key, x_max)
    else:
        ticks(run, simulated, key, x_max, missing)
        metrics(run, key, x_max)
    table(run, simulated, comparison)
