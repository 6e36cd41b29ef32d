"""The live view: keyed components-v2 instances (pace controls + token stream, and one per chart).

Every fragment rerun hands each instance the steps it has not recently been sent; the
JavaScript (app/views/live/js/, see JS_FILES) queues them and draws step by step with
Plotly.react, so nothing blanks between updates. Figures come from app.views.live.charts as a
base plus one patch per step. This module holds no session state: the caller passes what to do
when the browser asks for a resend.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

from app.shared.context import RunContext
from app.views.live import charts, metrics
from core.trace import Event

_HERE = Path(__file__).resolve().parent / "js"
_EPOCH = secrets.token_hex(4)  # this server process: a send from another process is never compared
_SENDS = itertools.count()
OVERLAP_PASSES = 3  # resend the steps of the last few passes in case a render was coalesced

# The browser side, one role per file, joined in this order into one ES module (no build step).
# The files share one scope, so a later file uses what an earlier one defines; the module keeps
# no state of its own (Streamlit may evaluate it several times): everything is on
# `window.pdLab` (state.js). Only main.js, last, may `export default`.
JS_FILES = (
    "state.js",          # the one state object, window.pdLab
    "plotly_loader.js",  # plotly.min.js loaded once, step patches (mirror of patches.py), theme colours
    "player.js",         # the clock: steps known, step shown, pace; offer() for any data source; keys
    "watchdog.js",       # reload a page whose Streamlit app vanished (once a minute at most)
    "view_common.js",    # receipts, resend requests, DOM helpers
    "chart_view.js",     # one Plotly chart
    "controls_view.js",  # pace buttons, scrubber, status, tiles, token stream
    "main.js",           # the component's entry point: one view per instance, by data.kind
)


def script() -> str:
    """The component's JavaScript: live.css as the PD_CSS constant, then JS_FILES in order."""
    parts = ["const PD_CSS = " + json.dumps((_HERE / "live.css").read_text(encoding="utf-8")) + ";"]
    for name in JS_FILES:
        parts.append(f"// ==== {name} ====\n" + (_HERE / name).read_text(encoding="utf-8"))
    return "\n".join(parts)


# Not isolated in a shadow root: Plotly puts its own styles in document.head and must see its
# elements. For the same reason main.js injects our CSS into the page head.
_component = st.components.v2.component("pdlab_live", js=script(), isolate_styles=False)


def send_window(feed: dict[str, Any], run_id: int, n_events: int, full: bool) -> int:
    """First step to send this pass. `feed` (session state) remembers what recent passes sent.

    Everything on a new run or a full script run (cheap, and it heals any lost render); otherwise
    from what the pass OVERLAP_PASSES ago had sent, so a render React coalesced is covered.
    """
    if feed.get("run_id") != run_id or full:
        feed.clear()
        feed.update({"run_id": run_id, "sent": []})
        start = 0
    else:
        sent = feed["sent"]
        start = sent[-OVERLAP_PASSES] if len(sent) >= OVERLAP_PASSES else 0
    feed["sent"] = (feed["sent"] + [n_events])[-OVERLAP_PASSES:]
    return start


def controls_frames(events: list[Event], ctx: RunContext, start: int) -> list[dict[str, Any]]:
    frames = []
    for k in range(start, len(events)):
        e = events[k]
        frames.append({"step": k, "text": e.token_text, "special": _special(e.token_text), "phase": e.phase,
                       "latency_ms": e.latency_ms, "tiles": metrics.tiles(events[:k + 1], ctx)})
    return frames


def _special(text: str) -> bool:
    return text.startswith("<|") and text.endswith("|>")


def controls_data(run_id: int | None, status: dict[str, str], events: list[Event], ctx: RunContext | None,
                  start: int) -> dict[str, Any]:
    data: dict[str, Any] = {"instance": "controls", "kind": "controls", "run_id": run_id, "status": status,
                            "frames": []}
    if ctx is not None and run_id is not None:
        data["prompt"] = [{"text": t, "special": s} for t, s in zip(ctx.prompt_tokens, ctx.prompt_special,
                                                                     strict=True)]
        data["frames"] = controls_frames(events, ctx, start)
        data["kept"] = ctx.kept  # a follow-up's positions kept from the last turn (the strip folds them)
    return data


def chart_data(name: str, run_id: int, events: list[Event], ctx: RunContext, start: int) -> dict[str, Any]:
    c = charts.chart(name)
    # Each frame carries its step's measured latency too, so charts alone can pace the player.
    data: dict[str, Any] = {"instance": name, "kind": "chart", "chart": name, "run_id": run_id,
                            "frames": [{"step": k, "patch": c.patch(events, k, ctx),
                                        "latency_ms": events[k].latency_ms} for k in range(start, len(events))]}
    if start == 0:
        data["base"] = c.base(ctx)  # chart_view.js draws its title and legend as HTML
    return data


def sent_stamp() -> dict[str, Any]:
    """Orders this process's sends. Streamlit can render an element left from an earlier pass after
    the current one (both feed the same view, by instance): the browser ignores a send older than
    one its view already took (isStaleSend in js/view_common.js), or a queued run's status could
    come back over a finished one, with no later pass to correct it."""
    return {"epoch": _EPOCH, "n": next(_SENDS)}


def mount(data: dict[str, Any], total: int | None = None, resent: bool = False,
          on_resend: Callable[[], None] | None = None) -> None:
    """Mount one live view. `total` (the run's step count this pass) lets the browser notice steps it
    never received (a render the frontend coalesced away under load) and ask for a resend, which
    calls `on_resend` (it should make the next pass send every step); `resent` marks the pass that
    answers such a request. Without `total` the browser never asks."""
    data = {**data, "sent": data.get("sent") or sent_stamp()}
    if total is not None:
        data = {**data, "total": total, "resent": resent}
    _component(key=f"pd-live-{data['instance']}", data=data, height="content", on_resend_change=on_resend)
