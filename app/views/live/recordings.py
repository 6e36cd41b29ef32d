"""Recorded runs on the page: replay a bundled or uploaded trace, and save the current run.

Everything a reader can do with traces lives here: the bundled-recording picker, the uploader
(a bad file is a clear message and the view on screen stays), the JSON and CSV downloads of the
current run, and the banners that say a run on screen is a recording and where it came from.
A replay becomes the session's run (state.set_run), so the live view draws it with the same charts.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.shared import replay
from app.shared.text import describe_weights, plain, safe_name
from app.views.live import export, state
from core.trace import TraceError, load_trace_file

MAX_UPLOAD_BYTES = 20 * 1024 * 1024  # .streamlit/config.toml maxUploadSize = 20 (MB)


def load_upload(content: bytes, name: str, tokenizer: Any = None) -> tuple[Any | None, str]:
    """(a replay run, "") for a good trace file, or (None, why not) for any bad one. Never raises."""
    label = safe_name(name)
    if len(content) > MAX_UPLOAD_BYTES:
        return None, (f"'{label}' is {len(content) / 2**20:.1f} MB; a trace file may be at most "
                      f"{MAX_UPLOAD_BYTES // 2**20} MB. Nothing was changed.")
    try:
        trace = load_trace_file(content)
    except TraceError as exc:
        return None, f"'{label}' is not a trace this page can replay: {exc}. Nothing was changed."
    except Exception as exc:  # anything else a hostile file can provoke: still a message
        return None, f"'{label}' could not be read ({type(exc).__name__}). Nothing was changed."
    if not trace.events:
        return None, f"'{label}' holds no steps to replay (0 events). Nothing was changed."
    try:
        run = replay.replay_run(trace, f"your file '{label}'", tokenizer)
    except Exception as exc:
        return None, f"'{label}' could not be replayed ({type(exc).__name__}: {exc}). Nothing was changed."
    return run, ""


def _on_upload(tokenizer: Any) -> None:
    files = st.session_state.get(state.UPLOAD)
    if files is None:
        return
    content = files.getvalue()
    run, message = load_upload(content, files.name, tokenizer)
    if run is None:
        st.session_state[state.UPLOAD_MESSAGE] = ("error", message)
        return
    state.set_run(run)
    st.session_state[state.UPLOAD_MESSAGE] = ("success", f"Loaded '{safe_name(files.name)}': "
                                                   f"{len(run.events)} steps, replaying below.")


def play_bundled(name: str | None = None) -> None:
    name = name or st.session_state.get(state.BUNDLED) or replay.DEFAULT_BUNDLED
    if name not in replay.bundled_names():
        name = replay.bundled_names()[0]
    state.set_run(replay.bundled(name))


def ensure_something_on_screen() -> None:
    """No run yet (model preparing or unavailable): put the default bundled recording on screen."""
    if state.current_run() is None and replay.bundled_names():
        play_bundled(replay.DEFAULT_BUNDLED)


def model_banner(kind: str, message: str = "") -> None:
    """The banner above a replay shown because the model is not (yet) there."""
    if kind == "loading":
        st.info("**The model is still being prepared on this server.** Meanwhile you are watching a "
                "**recorded run** of the same model, replayed without it: the charts, tokens and cache "
                "growth are exactly what the model produced when it was recorded.", icon=":material/hourglass_top:")
    else:
        st.warning("**The model could not be loaded on this server, so this page replays recorded runs.** "
                   "Every chart below is a real run of SmolLM2-135M, recorded earlier; you can still play, "
                   "pause, step and scrub it, load your own trace file, and read the lesson.\n\n"
                   f"Why the model is unavailable: {plain(message[:600])}", icon=":material/warning:")


def replay_banner(run: Any) -> None:
    """Says that the run on screen is a recording, and on which machine its timings were measured."""
    if run is None or not run.replay:
        return
    trace = run.trace()
    s = trace.summary()
    st.info(f"**Recorded run, not live:** {plain(run.source)} · model {plain(s['model'])} "
            f"(weights: {plain(describe_weights(str(s['weights_source']), trace.model.get('dtype')))}) · timings measured on "
            f"{plain(replay.recorded_on(trace))}. Use ▶ / ❚❚ / ← → or the step slider to walk through it.",
            icon=":material/videocam:")


def render_tools(loaded: Any = None, expanded: bool = False) -> None:
    """The 'Recorded runs' expander: bundled picker, uploader, and this run's downloads."""
    with st.expander("Recorded runs: replay, load, save", expanded=expanded):
        names = replay.bundled_names()
        c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
        if names:
            c1.selectbox("Bundled recordings (real runs of this model)", names, key=state.BUNDLED,
                         format_func=replay.bundled_label)
            c2.button("Replay it", key="pd_replay_bundled", on_click=play_bundled, width="stretch")
        tokenizer = getattr(loaded, "tokenizer", None)
        st.file_uploader("Load a trace file (.json saved by this page or `python -m core generate --json`)",
                         type=["json"], key=state.UPLOAD, on_change=_on_upload, args=(tokenizer,),
                         help="At most 20 MB. A file that is not a valid trace is refused with a message; "
                              "what is on screen stays.")
        kind_message = st.session_state.get(state.UPLOAD_MESSAGE)
        if kind_message:
            kind, message = kind_message
            (st.error if kind == "error" else st.success)(plain(message))
        export.render(state.current_run(), key_prefix="tools")
