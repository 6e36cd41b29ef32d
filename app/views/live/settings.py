"""The input panel: prompt, examples, settings, Generate and Stop. Bad input becomes a message here.

Validation happens in the script thread before any job starts, so an empty prompt, a prompt
that is too long, or an out-of-range setting is explained at once instead of failing in a thread.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from app.shared.model import get_queue
from app.shared.runs import GenerationRun
from app.views.live import state
from core import settings as server_settings
from core.runner import GenerationSettings, SettingsError, encode_prompt
from core.settings import PROMPT_BOX_MAX_CHARS, run_log, runs_per_minute

EXAMPLES = [
    "Explain in two sentences why the sky is blue.",
    "Write a haiku about a GPU waiting for memory.",
    "List three facts about the Moon.",
    "What is the capital of France?",
    "Give me a recipe for pancakes in five steps.",
]

# Public limits, set by whoever runs the server and read once per process (core.settings says why).
MAX_PROMPT_TOKENS = server_settings.max_prompt_tokens()
MAX_NEW_TOKENS = server_settings.max_new_tokens()
CACHE_LABELS = {"dynamic": "on (dynamic)", "static": "on (static)", "none": "off (recompute, ≤ 32 tokens)"}

DEFAULTS: dict[str, Any] = {
    state.PROMPT: EXAMPLES[0], state.MAX_NEW: min(48, MAX_NEW_TOKENS), state.CACHE: "dynamic", state.CHAT: True,
    state.TEMPERATURE: 0.0, state.TOP_K: 0, state.SEED: 0, state.TOP_P: 1.0,
}


def rate_limited() -> str | None:
    now = time.monotonic()
    starts = [t for t in st.session_state.get(state.RUN_STARTS, []) if now - t < 60]
    st.session_state[state.RUN_STARTS] = starts
    limit = runs_per_minute()
    if len(starts) >= limit:
        wait = 60 - (now - starts[0])
        return (f"You have started {limit} runs in the last minute, this server's limit per reader. "
                f"Try again in {wait:.0f} s; your prompt and settings are kept.")
    starts.append(now)
    return None


def limits_caption() -> str:
    return (f"Limits: prompts up to {MAX_PROMPT_TOKENS:,} tokens, {MAX_NEW_TOKENS} new tokens, "
            f"{runs_per_minute()} runs per minute per reader; runs take turns on one shared model. "
            "Privacy: your prompt stays on this server and is not stored unless you save a trace.")


def _use_example() -> None:
    choice = st.session_state.get(state.EXAMPLE)
    if choice:
        st.session_state[state.PROMPT] = choice


def _session_id() -> str:
    ctx = get_script_run_ctx()
    return ctx.session_id[:8] if ctx is not None else "?"


def on_generate(loaded: Any) -> None:
    """Button callback: runs before the script, so Stop is already enabled when the page redraws."""
    prepared = prepare_run(loaded, st.session_state.get(state.PROMPT, ""))
    if isinstance(prepared, str):
        st.session_state[state.MESSAGE] = prepared
        return
    limited = rate_limited()
    if limited is not None:
        st.session_state[state.MESSAGE] = limited
        return
    settings, prompt_ids = prepared
    start_run(GenerationRun(get_queue(), loaded, st.session_state[state.PROMPT], prompt_ids, settings,
                            wait_for_page=True))


def start_run(run: GenerationRun) -> None:
    """Make `run` the session's run and start it (Generate's and a follow-up's), logged under
    PDLAB_RUN_LOG so a load test can count every start."""
    if run_log():
        old = state.current_run()
        print(f"PDLAB_GENERATE session={_session_id()} run={run.id} replaces="
              f"{getattr(old, 'id', None)}:{getattr(old, 'status', None)} t={time.monotonic():.3f}",
              file=sys.stderr, flush=True)
    state.set_run(run)
    run.start()


# How long the Stop click waits for the model to finish its forward: a decode step takes well under
# this, so the pass the click starts draws the run stopped, with its after-run sections, at once.
# A long prefill outlasts it; the page then shows the run stopping and the next poll finishes it.
STOP_WAIT_S = 1.0


def on_stop() -> None:
    run = state.current_run()
    if run is not None and run.active:
        run.stop()
        if hasattr(run, "join"):
            run.join(STOP_WAIT_S)


def render_inputs(loaded: Any) -> Any:
    """Draw the inputs; Generate and Stop act through callbacks (see on_generate). Returns the
    prompt's column, for what belongs under the prompt (the recorded runs)."""
    for key, value in DEFAULTS.items():
        st.session_state.setdefault(key, value)
    run = state.current_run()
    active = run is not None and run.active
    left, right = st.columns([3, 2], gap="large")
    with left:
        st.text_area("Prompt", key=state.PROMPT, height=100, max_chars=PROMPT_BOX_MAX_CHARS)
        b1, b2, b3, b4 = st.columns([1, 1, 2.2, 1.3], vertical_alignment="center")
        b1.button("Generate", type="primary", key=state.GENERATE, width="stretch", on_click=on_generate, args=(loaded,))
        b2.button("Stop", key=state.STOP, disabled=not active, width="stretch", on_click=on_stop)
        b3.selectbox("Try an example", EXAMPLES, index=None, key=state.EXAMPLE, on_change=_use_example,
                     placeholder="Try an example…", label_visibility="collapsed")
        with b4.popover("Limits and privacy", width="stretch"):
            st.caption(limits_caption())
    with right:
        st.slider("Max new tokens", 1, MAX_NEW_TOKENS, key=state.MAX_NEW,
                  help="Generation also stops at the model's end-of-turn token.")
        st.radio("KV cache", list(CACHE_LABELS), key=state.CACHE, horizontal=True,
                 format_func=CACHE_LABELS.__getitem__,
                 help="Off: every step recomputes the whole sequence (capped at 32 tokens).")
        chat, sampling = st.columns([1, 1], vertical_alignment="center")
        chat.toggle("Use the chat template", key=state.CHAT,
                    help="Your text is wrapped in the model's chat format (who speaks, and a short system message) "
                         "before it is split into tokens.")
        with sampling.expander("Sampling (default: greedy)"):
            st.slider("Temperature (0 = always the most likely token)", 0.0, 2.0, step=0.1, key=state.TEMPERATURE)
            st.number_input("Top-k (0 = off)", min_value=0, max_value=1000, step=1, key=state.TOP_K)
            st.number_input("Top-p (1 = off)", min_value=0.01, max_value=1.0, step=0.05, key=state.TOP_P)
            st.number_input("Seed", min_value=0, max_value=2**31 - 1, step=1, key=state.SEED)
    message = st.session_state.pop(state.MESSAGE, None)
    if message:
        st.warning(message)
    return left


def settings_from_state():
    """GenerationSettings from the widgets, validated; raises SettingsError with a readable message."""
    return GenerationSettings(
        max_new_tokens=int(st.session_state[state.MAX_NEW]), temperature=float(st.session_state[state.TEMPERATURE]),
        top_k=int(st.session_state[state.TOP_K]), seed=int(st.session_state[state.SEED]),
        top_p=float(st.session_state.get(state.TOP_P, 1.0)),
        chat=bool(st.session_state[state.CHAT]), cache=str(st.session_state[state.CACHE]),
    ).validated()


def prepare_run(loaded: Any, prompt: str) -> tuple[Any, list[int]] | str:
    """(settings, prompt token ids) for a run, or a message saying what to change."""
    if not prompt or not prompt.strip():
        return "Type a prompt first: the model needs at least one token of your own to start from."
    try:
        settings = settings_from_state()
    except SettingsError as exc:
        return f"That setting cannot be used: {exc}."
    prompt_ids = encode_prompt(loaded, prompt, settings.chat)
    if len(prompt_ids) > MAX_PROMPT_TOKENS:
        return (f"The prompt is {len(prompt_ids):,} tokens after the chat template; this page takes at most "
                f"{MAX_PROMPT_TOKENS:,} so the cache grid stays readable. Shorten it (or use the CLI, "
                f"`python -m core generate`, for long prompts).")
    if len(prompt_ids) + settings.max_new_tokens > loaded.context_window:
        return (f"Prompt ({len(prompt_ids)} tokens) + max new tokens ({settings.max_new_tokens}) exceeds the "
                f"model's context window of {loaded.context_window} tokens.")
    return settings, prompt_ids
