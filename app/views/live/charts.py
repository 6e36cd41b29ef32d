"""The live charts, registered once: each chart's figure builders, its table and the lesson text beside it.

Adding a live chart means one entry here (plus its builders in app.views.live.figures and its table
in app.views.live.metrics): the live section, the browser component, the tables, the page
benchmark and the tests all iterate this registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from app.shared.context import RunContext
from app.views.live import figures, metrics
from app.views.live.patches import Patch, apply_patch
from core.trace import Event


@dataclass(frozen=True)
class LiveChart:
    """One chart the browser draws step by step: a base figure plus one patch per event."""

    name: str  # also the live component's instance name and the chart's CSS/test hook
    base: Callable[[RunContext], dict[str, Any]]
    patch: Callable[[list[Event], int, RunContext], Patch]
    table: Callable[[list[Event], RunContext], pd.DataFrame]  # the numbers behind it, for readers without the chart
    table_title: str
    lesson: str  # assets/lesson/<lesson>.md: how we know, one click down beside the chart
    section: str  # the question it answers (app.views.live.sections)
    topic: str  # what its "How we know" expander covers


LIVE_CHARTS: tuple[LiveChart, ...] = (
    LiveChart("kv", figures.kv_base, figures.kv_patch, metrics.kv_table,
              "Table: the cache grid", "q1_prefill_vs_decode", "phases",
              "the grid"),
    LiveChart("latency", figures.latency_base, figures.latency_patch, metrics.latency_table,
              "Table: latency per forward", "latency", "phases", "the times"),
    LiveChart("traffic", figures.traffic_base, figures.traffic_patch, metrics.traffic_table,
              "Table: bytes per forward", "q2_bandwidth", "bandwidth", "the bytes"),
    LiveChart("budget", figures.budget_base, figures.budget_patch, metrics.budget_table,
              "Table: a step's parts", "q_paper", "paper", "the parts"),
    LiveChart("roofline", figures.roofline_base, figures.roofline_patch, metrics.roofline_table,
              "Table: roofline points", "roofline", "bandwidth", "the roofline"),
)
NAMES = tuple(c.name for c in LIVE_CHARTS)
# The chart drawn beside the tiles and token streams, at the top: a reader's first screen shows the
# model at work (its cache filling), not only the inputs. Its section's answer sits by the next chart.
PINNED = "kv"
_BY_NAME = {c.name: c for c in LIVE_CHARTS}


def chart(name: str) -> LiveChart:
    return _BY_NAME[name]


def figure_dict(name: str, events: list[Event], ctx: RunContext) -> dict[str, Any]:
    """The whole figure as a dict: the base with every step's patch applied (what the browser ends with)."""
    c = chart(name)
    fig = c.base(ctx)
    for k in range(len(events)):
        apply_patch(fig, c.patch(events, k, ctx))
    return fig


def figure(name: str, events: list[Event], ctx: RunContext) -> go.Figure:
    """The finished chart as a Plotly figure (tests, exports, anything that is not the live view)."""
    return go.Figure(figure_dict(name, events, ctx))
