"""The page: a prompt, a Generate button, and the model's answer."""

from __future__ import annotations

import html

import streamlit as st

from app import model_service

EXAMPLES = [
    "Explain in two sentences why the sky is blue.",
    "Write a haiku about a GPU waiting for memory.",
    "List three facts about the Moon.",
]


def render() -> None:
    st.title("Prefill & Decode Lab")
    st.caption("A real language model (SmolLM2-135M-Instruct) runs on this server while you watch.")
    with st.spinner("Loading the model (the first start prepares it once)…"):
        try:
            loaded = model_service.get_model()
        except Exception as exc:  # shown to the reader, never as a traceback
            st.error(f"The model could not be loaded: {exc}")
            return
    from core.runner import GenerationSettings, SettingsError, generate_trace

    prompt = st.text_area("Prompt", value=st.session_state.get("prompt", EXAMPLES[0]), key="prompt",
                          max_chars=20_000)
    max_new = st.slider("Max new tokens", 1, 256, 48, key="max_new_tokens")
    if st.button("Generate", type="primary", key="generate"):
        if not prompt.strip():
            st.warning("Type a prompt first: the model needs at least one token to start from.")
            return
        try:
            with model_service.RUN_LOCK:
                trace = generate_trace(loaded, prompt, GenerationSettings(max_new_tokens=max_new))
        except SettingsError as exc:
            st.warning(str(exc))
            return
        st.session_state["last_text"] = trace.generated_text
        st.session_state["last_info"] = (
            f"{len(trace.prompt_token_ids)} prompt tokens · TTFT {trace.events[0].latency_ms:.0f} ms "
            f"(measured) · {len(trace.events)} tokens · weights: {trace.model['weights_source']}")
    if "last_text" in st.session_state:
        st.markdown(
            f'<div class="pd-output" data-testid="pd-output" style="white-space:pre-wrap">'
            f"{html.escape(st.session_state['last_text'])}</div>",
            unsafe_allow_html=True)
        st.caption(st.session_state["last_info"])
