"""Figures of the prefix-cache run: the KV blocks the engine stored (from its events) above the blocks
the simulator's prefix cache holds for the same turns, and each turn's time to first token, measured
beside simulated with and without the cache. Plain functions returning figure dicts."""

from __future__ import annotations

from statistics import median
from typing import Any

from app.shared import palette as pal
from core.engines.block_map import PlacedBlock

Figure = dict[str, Any]
TURN_COLOURS = (pal.BLUE, pal.ORANGE, pal.GREEN, pal.PURPLE, pal.SKY, pal.VERMILLION)
TURN_SYMBOLS = ("square", "diamond", "triangle-up", "circle", "hexagon", "star")
UNKNOWN = "not placed"
ROW_PX = 30


def _rows(conversations: int, blocks: list[PlacedBlock]) -> list[str]:
    names = [f"conversation {c + 1}" for c in range(conversations)]
    if any(b.conversation is None for b in blocks):
        names.append(UNKNOWN)
    return names


def _traces(blocks: list[PlacedBlock], rows: list[str], axis: str, who: str, legend: bool) -> list[dict]:
    """One trace per turn (its colour and shape), the blocks at (block number, conversation row)."""
    by_turn: dict[int | None, list[PlacedBlock]] = {}
    for b in blocks:
        by_turn.setdefault(b.turn, []).append(b)
    out = []
    for turn in sorted(by_turn, key=lambda t: (t is None, t or 0)):
        group = by_turn[turn]
        colour = pal.GREY if turn is None else TURN_COLOURS[turn % len(TURN_COLOURS)]
        symbol = "x" if turn is None else TURN_SYMBOLS[turn % len(TURN_SYMBOLS)]
        name = "stored at a time no turn explains" if turn is None else f"stored by turn {turn + 1}"
        out.append({"type": "scatter", "mode": "markers", "xaxis": "x" if axis == "y" else "x2", "yaxis": axis,
                    "x": [b.index + 1 for b in group],
                    "y": [rows[b.conversation] if b.conversation is not None else UNKNOWN for b in group],
                    "customdata": [b.key for b in group], "name": name, "legendgroup": name, "showlegend": legend,
                    "marker": {"symbol": symbol, "size": 20, "color": colour, "line": {"width": 1, "color": "white"}},
                    "hovertemplate": f"{who}: block %{{x}} of %{{y}}, {name}<br>%{{customdata}}<extra></extra>"})
    return out


def block_maps(engine: list[PlacedBlock], simulated: list[PlacedBlock] | None, conversations: int,
               block_tokens: int | None, title: str) -> Figure:
    """The engine's blocks on top, the simulator's below (or a note where it has none yet): one row per
    conversation, block k at x = k (it holds positions (k - 1) x size + 1 to k x size)."""
    rows = _rows(conversations, engine)
    both = [*engine, *(simulated or [])]
    width = max([b.index + 1 for b in both] + [4])
    data = _traces(engine, rows, "y", "engine", legend=True)
    shown = {t["name"] for t in data}
    if simulated:
        for trace in _traces(simulated, rows[:conversations], "y2", "simulator", legend=False):
            trace["showlegend"] = trace["name"] not in shown
            data.append(trace)
    size = f"{block_tokens:,} tokens" if block_tokens else "its block size"
    axis = {"range": [0.4, width + 0.6], "dtick": 1, "zeroline": False}
    cats = {"type": "category", "autorange": "reversed", "categoryorder": "array"}
    layout = pal.base_layout(title, height=200 + 2 * ROW_PX * len(rows) + 60, showlegend=True)
    layout.update({
        "xaxis": {**axis, "anchor": "y", "showticklabels": False},
        "xaxis2": {**axis, "anchor": "y2", "title": {"text": f"block of the conversation (each {size})"}},
        "yaxis": {**cats, "categoryarray": rows, "domain": [0.56, 1.0]},
        "yaxis2": {**cats, "categoryarray": rows[:conversations], "domain": [0.0, 0.40]},
        "annotations": [
            {"text": "<b>The engine's blocks</b> (measured: its own KV events)", "xref": "paper", "yref": "paper",
             "x": 0, "y": 1.0, "yanchor": "bottom", "xanchor": "left", "showarrow": False},
            {"text": "<b>The simulator's blocks</b> (simulated: its prefix cache, same turns)" if simulated
             else "<b>The simulator's blocks</b>: drawn when the run ends and the simulator has a fit",
             "xref": "paper", "yref": "paper", "x": 0, "y": 0.44, "yanchor": "bottom", "xanchor": "left",
             "showarrow": False}],
    })
    layout["margin"] = {**layout["margin"], "l": 130, "t": 80, "b": 100}
    layout["legend"] = {**layout["legend"], "y": -0.18}
    return pal.fit_legend({"data": data, "layout": layout})


MARKS = (":blue[■]", ":orange[◆]", ":green[▲]", ":violet[●]")


def block_rows(blocks: list[PlacedBlock], conversations: int) -> str:
    """The engine's blocks as lines of coloured marks, one line per conversation, one mark per block in
    the shape and colour of the turn that stored it: what the page shows while the events arrive (a
    line of text costs the browser far less than redrawing a chart twice a second on cores the
    engine is timed on)."""
    lines = []
    for c in [*range(conversations), None]:
        row = sorted((b for b in blocks if b.conversation == c), key=lambda b: b.index)
        if c is None and not row:
            continue
        marks = " ".join(":gray[×]" if b.turn is None else MARKS[b.turn % len(MARKS)] for b in row)
        lines.append(f"{'not placed' if c is None else f'conversation {c + 1}'}: {marks or '(none yet)'}")
    legend = " · ".join(f"{m} stored by turn {t + 1}" for t, m in enumerate(MARKS))
    return "  \n".join(lines) + f"  \n{legend}"


def turn_ttfts(turns: list[dict], turns_per_conversation: int, title: str) -> Figure:
    """Each turn's time to first token, the median over the conversations: measured, simulated with
    the prefix cache and simulated without it (what the cache saved)."""
    series = (("ttft_measured_s", "measured", pal.MEASURED, "solid"),
              ("ttft_simulated_s", "simulated, prefix cache on", pal.PREDICTED, "dash"),
              ("ttft_without_cache_simulated_s", "simulated, no prefix cache", pal.GREY, "dot"))
    data = []
    for key, name, colour, dash in series:
        xs, ys = [], []
        for t in range(turns_per_conversation):
            values = [row[key] for row in turns if row["id"] % turns_per_conversation == t and row.get(key) is not None]
            if values:
                xs.append(t + 1)
                ys.append(median(values) * 1000)
        if ys:
            data.append({"type": "scatter", "mode": "lines+markers", "x": xs, "y": ys, "name": name,
                         "line": {"color": colour, "dash": dash, "width": 2}, "marker": {"size": 9, "color": colour},
                         "hovertemplate": f"turn %{{x}}: %{{y:,.0f}} ms ({name})<extra></extra>"})
    layout = pal.base_layout(title, height=380,
                             xaxis={"title": {"text": "turn of the conversation"}, "dtick": 1},
                             yaxis={"title": {"text": "time to first token, median (ms)"}, "rangemode": "tozero"})
    layout["margin"] = {**layout["margin"], "b": 110}
    layout["legend"] = {**layout["legend"], "y": -0.25}
    return pal.fit_legend({"data": data, "layout": layout})
