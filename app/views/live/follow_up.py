"""A follow-up question: the conversation so far and the reader's new question, run with the last
turn's cache kept (core.conversation decides what can be kept, on token ids).

The box sits under the answer. Generate starts a new conversation from an empty cache; a follow-up
continues this one. What the follow-up kept, and its time to first token beside the same turn from
scratch, is drawn in the KV-cache section (`render_result`).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import streamlit as st

from app.shared import palette as pal
from app.shared.model import get_queue
from app.shared.runs import GenerationRun
from app.views.live import lesson, model_gate, sections, settings, state
from app.views.live.shown import sig3
from core.conversation import CACHE_CAP_BYTES, reusable, signature, turn_record
from core.runner import SettingsError, conversation_ids
from core.trace import MAX_TURN_MESSAGES, STOP_EOS

COLD_RECORDING = "a recorded run holds no cache on this server"
FOLLOW_UP_MAX_CHARS = 2_000


def answer_text(run: Any) -> str:
    """The answer as a chat client keeps it: an answer the model ended itself without its end-of-turn
    token (the chat template adds its own; kept, the model would read two)."""
    events = run.events[:-1] if getattr(run, "stop_reason", None) == STOP_EOS else run.events
    return "".join(e.token_text for e in events)


def messages_after(run: Any) -> list[dict[str, str]]:
    """The conversation up to and with `run`'s answer: its turn's messages, or its lone question."""
    turn = getattr(run, "turn", None)
    base = list(turn["messages"]) if turn else [{"role": "user", "content": str(run.prompt)}]
    return base + [{"role": "assistant", "content": answer_text(run)}]


def prepare(loaded: Any, run: Any, question: str, gen: Any) -> tuple[list[int], dict[str, Any], Any] | str:
    """(the conversation's token ids, the turn's record, what to reuse or None) for a follow-up to
    `run`, or a message saying what to change."""
    if not question or not question.strip():
        return "Type a follow-up question first."
    if len(question) > FOLLOW_UP_MAX_CHARS:
        return f"A follow-up takes at most {FOLLOW_UP_MAX_CHARS:,} characters; this one has {len(question):,}."
    messages = [*messages_after(run), {"role": "user", "content": question}]
    if len(messages) > MAX_TURN_MESSAGES:
        return (f"This conversation has {len(messages) - 1} messages, the most a saved trace keeps: press Generate "
                "to start a new one (your question stays in the box).")
    ids = conversation_ids(loaded, messages, gen.chat)
    if len(ids) > settings.MAX_PROMPT_TOKENS:
        return (f"The conversation would be {len(ids):,} tokens, over this page's {settings.MAX_PROMPT_TOKENS:,}: "
                "press Generate to start a new one (your question stays in the box).")
    if len(ids) + gen.max_new_tokens > loaded.context_window:
        return (f"The conversation ({len(ids):,} tokens) plus {gen.max_new_tokens} new tokens would pass the "
                f"model's {loaded.context_window:,}-token window: press Generate to start a new one.")
    kept = None if run.replay else getattr(run, "kept", None)
    n, reason = reusable(kept, ids, gen.cache, gen.batch, signature(loaded, gen.chat))
    if run.replay:
        reason = COLD_RECORDING
    return ids, turn_record(messages, ids, n, reason), ((kept, n) if n else None)


def on_follow_up() -> None:
    """Button callback (runs before the pass, like Generate's)."""
    run = state.current_run()
    loader = model_gate.model_loader()
    loaded = loader.loaded if loader.done.is_set() else None
    if run is None or run.active or not run.events or loaded is None:
        st.session_state[state.MESSAGE] = "A follow-up needs a finished answer and the model ready."
        return
    question = str(st.session_state.get(state.FOLLOW_UP, ""))
    try:
        gen = settings.settings_from_state()
    except SettingsError as exc:
        st.session_state[state.MESSAGE] = f"That setting cannot be used: {exc}."
        return
    prepared = prepare(loaded, run, question, gen)
    if isinstance(prepared, str):
        st.session_state[state.MESSAGE] = prepared
        return
    limited = settings.rate_limited()
    if limited is not None:
        st.session_state[state.MESSAGE] = limited
        return
    ids, turn, reuse = prepared
    st.session_state[state.FOLLOW_UP] = ""
    settings.start_run(GenerationRun(get_queue(), loaded, question, ids, gen, wait_for_page=True, turn=turn,
                                     reuse=reuse))


def render_box(run: Any) -> None:
    """Under a finished answer: the follow-up box and its button."""
    if run is None or run.active or not run.events:
        return
    box, go_col = st.columns([4, 1], vertical_alignment="bottom")
    box.text_input("Ask a follow-up", key=state.FOLLOW_UP, max_chars=FOLLOW_UP_MAX_CHARS,
                   placeholder="A follow-up question about this answer…",
                   help="The conversation so far is sent again, as a chat client does; the cache kept from this "
                        "turn is reused, so only the new part is prefilled. Generate starts a new conversation.")
    go_col.button("Ask", key=state.FOLLOW_GO, width="stretch", on_click=on_follow_up)


def result_values(run: Any) -> dict[str, str] | None:
    """What the KV-cache section says about a follow-up turn (None for a lone question)."""
    turn = getattr(run, "turn", None)
    if not turn or turn.get("index", 0) < 1 or not run.events:
        return None
    total = turn["reused_tokens"] + turn["new_tokens"]
    values = {"new": f"{turn['new_tokens']:,}", "total": f"{total:,}", "kept": f"{turn['reused_tokens']:,}",
              "ttft": sig3(run.events[0].latency_ms), "cap_mb": f"{CACHE_CAP_BYTES / 1e6:.0f}"}
    if turn.get("cold_ttft_ms"):
        values["scratch"] = sig3(turn["cold_ttft_ms"])
    if turn.get("cold_reason"):
        values["reason"] = turn["cold_reason"]
    return values


def sentence(values: dict[str, str]) -> str:
    """The one sentence the follow-up adds to the cache section's answer."""
    if "reason" in values:
        return (f"This follow-up ran cold, {values['reason']}: it prefilled all {values['total']} tokens of the "
                f"conversation in {values['ttft']} ms.")
    scratch = f", against {values['scratch']} ms from scratch" if "scratch" in values else ""
    return (f"This follow-up paid for {values['new']} new tokens, not {values['total']}: its first token "
            f"came after {values['ttft']} ms{scratch}.")


def figure(values: dict[str, str]) -> go.Figure | None:
    """Time to first token with the cache kept beside the same turn from scratch (both measured)."""
    if "scratch" not in values or "reason" in values:
        return None
    kept, scratch = float(values["ttft"]), float(values["scratch"])
    labels = [f"cache kept ({values['new']} new tokens)", f"from scratch ({values['total']} tokens)"]
    fig = go.Figure(go.Bar(x=[kept, scratch], y=labels, orientation="h", marker_color=[pal.KEPT, pal.PREFILL],
                           text=[f"{values['ttft']} ms", f"{values['scratch']} ms"], textposition="outside",
                           name="time to first token (measured)", cliponaxis=False,
                           hovertemplate="%{y}: %{x:.1f} ms<extra></extra>"))
    layout = pal.base_layout(title(kept, scratch), height=220)
    fig.update_layout(**layout)
    fig.update_layout(showlegend=False, margin={"l": 180, "r": 20, "t": 50, "b": 50})
    # room past the longer bar for its label: a kept turn that ran slower than the one from scratch
    # (other work landing in its prefill) once drew past the axis, its time cut off
    fig.update_xaxes(title_text="time to first token, ms (measured)", rangemode="tozero",
                     range=[0, max(kept, scratch) * 1.25])
    fig.update_yaxes(autorange="reversed", automargin=False)
    return fig


# A kept cache that did not make the first token come sooner than this share of the fresh prefill's
# time was slowed by something else (other work on this machine landing in its timed prefill).
NO_FASTER = 0.95


def title(kept_ms: float, scratch_ms: float) -> str:
    """The figure's finding, read from the two measured times."""
    if kept_ms <= NO_FASTER * scratch_ms:
        return f"The kept cache cut the first token's wait to {kept_ms / scratch_ms:.0%}"
    return "No faster this time: other work landed in the kept turn's prefill; ask again"


def render_result(run: Any) -> None:
    """In the KV-cache section, under its heading: the follow-up's sentence and figure."""
    values = result_values(run)
    if values is None:
        return
    fig = figure(values)
    left, right = st.columns([3, 2], gap="large")
    if fig is not None:
        left.plotly_chart(fig, key="follow_up_ttft")
    right.markdown(sentence(values) + "\n\n:blue-badge[measured]")
    if "reason" not in values:
        with right, sections.how_we_know("the follow-up"):
            st.markdown(lesson.text("follow_up", values))
