"""Step patches: the small change one event makes to a figure, applied the same way in Python and JS.

A live chart starts from a base figure and receives one patch per step; the browser applies it
and calls Plotly.react, so only the new points travel. `apply_patch` here is the reference for
applyPatch in app/views/live/js/plotly_loader.js (tests check that applying every patch to the
base rebuilds the full figure), so the page and the tables never disagree.

A patch is a dict with optional keys:
  "append": {trace_index: {"x": [...], "y": [...], "customdata": [...], ...}}  (extend 1-D arrays)
  "cols":   {trace_index: {"x": [...], "z": [[row0...], [row1...]], "customdata": [[...], ...]}}
            (append columns to a heatmap: each row of z / customdata grows)
  "layout": {"title.text": ..., "annotations": [...]}  (dotted paths set; lists replaced whole)
Trace indices are strings so the patch survives a JSON round trip unchanged.
"""

from __future__ import annotations

from typing import Any

Patch = dict[str, Any]


def _set_path(target: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = value


def apply_patch(fig: dict[str, Any], patch: Patch) -> dict[str, Any]:
    """Apply one patch in place to a figure dict ({"data": [...], "layout": {...}}) and return it."""
    data = fig["data"]
    for idx, arrays in patch.get("append", {}).items():
        trace = data[int(idx)]
        for key, values in arrays.items():
            trace[key] = list(trace.get(key) or []) + list(values)
    for idx, arrays in patch.get("cols", {}).items():
        trace = data[int(idx)]
        for key, values in arrays.items():
            if key in ("z", "customdata", "text"):
                rows = [list(r) for r in (trace.get(key) or [[] for _ in values])]
                trace[key] = [row + list(new) for row, new in zip(rows, values, strict=True)]
            else:
                trace[key] = list(trace.get(key) or []) + list(values)
    for path, value in patch.get("layout", {}).items():
        _set_path(fig.setdefault("layout", {}), path, value)
    return fig


def point_count(fig: dict[str, Any]) -> int:
    """Points a figure plots (heatmap cells count one each): the bench's 'did this redraw add data'."""
    total = 0
    for trace in fig.get("data", []):
        z = trace.get("z")
        if z is not None:
            total += sum(len(row) for row in z)
        else:
            total += len(trace.get("y") or [])
    return total
