"""The live view: keyed components-v2 instances (pace controls + token stream, and one per chart).

Every fragment rerun hands each instance the steps it has not recently been sent; the
JavaScript (live.js) queues them and draws step by step with Plotly.react, so nothing blanks
between updates. Figures come from app.figures as a base plus one patch per step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import streamlit as st

from app.components import figures, metrics
from app.services.context import RunContext
from core.trace import Event

_HERE = Path(__file__).resolve().parent / "live"
OVERLAP_PASSES = 3  # resend the steps of the last few passes in case a render was coalesced

# Not isolated in a shadow root: Plotly puts its own styles in document.head and must see its
# elements. For the same reason our CSS is injected by the script into the page head.
_JS = ("const PD_CSS = " + json.dumps((_HERE / "live.css").read_text(encoding="utf-8")) + ";\n"
       + (_HERE / "live.js").read_text(encoding="utf-8"))
_component = st.components.v2.component("pdlab_live", js=_JS, isolate_styles=False)


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
    return data


def chart_data(name: str, run_id: int, events: list[Event], ctx: RunContext, start: int) -> dict[str, Any]:
    base, patch = figures.BUILDERS[name]
    data: dict[str, Any] = {"instance": name, "kind": "chart", "chart": name, "run_id": run_id,
                            "frames": [{"step": k, "patch": patch(events, k, ctx)} for k in range(start, len(events))]}
    if start == 0:
        data["base"] = base(ctx)  # live.js draws its title and legend as HTML
    return data


def mount(data: dict[str, Any], total: int | None = None, resent: bool = False) -> None:
    """Mount one live view. `total` (the run's step count this pass) lets the browser notice steps it
    never received (a render the frontend coalesced away under load) and ask for a resend;
    `resent` marks the pass that answers such a request."""
    from app import state

    if total is not None:
        data = {**data, "total": total, "resent": resent}
    _component(key=f"pd-live-{data['instance']}", data=data, height="content",
               on_resend_change=state.request_resend)
