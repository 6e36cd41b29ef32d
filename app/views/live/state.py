"""The live page's session keys, its current run, and what the live view was sent.

Keys are named here once so the whole page agrees on them; values are read and written through the
helpers re-exported from app.shared.session. The run is the session's own: one session never runs
two at once.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.shared.session import get as get  # noqa: F401
from app.shared.session import job as job
from app.shared.session import put as put
from app.shared.session import set_job as set_job

RUN = "pd_run"
FEED = "pd_feed"
FINALIZED = "pd_finalized_run"
FULL_PASS = "pd_full_pass"
FRAGMENT_SEEN = "pd_fragment_seen_pass"
LESSON_TEXTS = "pd_live_lesson_texts"  # the lesson prose beside the live charts, refreshed every few s
POLLING = "pd_polling_run"  # the run the live fragment was last set to poll for (by a full pass)
RESEND = "pd_resend"  # a live view asked for every step again (it missed a render)
COMPARE = "pd_compare_job"
BATCHING = "pd_batch_job"
COMPARE_SEEN = "pd_compare_seen"  # id of the finished job the page already redrew for
BATCHING_SEEN = "pd_batch_seen"
MESSAGE = "pd_message"
RUN_STARTS = "pd_run_starts"  # start times of this session's recent runs (the per-reader rate limit)
LAST_TEXT = "last_text"  # the answer last drawn (tests read it)
LINK_APPLIED = "pd_link_applied"  # the link's values went into the widgets (once per session)
LINK_NOTICES = "pd_link_notices"  # what the link asked for that could not be used
PAGE = "pd_page"  # the lesson section a link or the tour points at (live, compare, batching, replay)
TOUR_STEP = "pd_tour_step"
UPLOAD = "pd_trace_upload"
UPLOAD_MESSAGE = "pd_trace_message"
BUNDLED = "pd_bundled_choice"

# Widget keys (the widgets own these values; listed here so the whole page agrees on them).
PROMPT = "prompt"
EXAMPLE = "example"
MAX_NEW = "max_new_tokens"
CACHE = "cache_mode"
CHAT = "chat"
TEMPERATURE = "temperature"
TOP_K = "top_k"
SEED = "seed"
TOP_P = "top_p"
PRESENTER = "presenter"
GENERATE = "generate"
STOP = "stop"
COMPARE_TOKENS = "compare_tokens"
COMPARE_GO = "compare_go"
BATCH_GO = "batch_go"
LAYER = "detail_layer"
KV_WHICH = "detail_which"
FOLLOW_UP = "follow_up"  # the follow-up question's box
FOLLOW_GO = "follow_go"


def current_run():
    return st.session_state.get(RUN)


def set_run(run) -> None:
    """Make `run` the session's run; stop the previous one so one session never runs two at once."""
    old = st.session_state.get(RUN)
    if old is not None and old is not run and old.active:
        old.stop()
    if old is not None and old is not run and hasattr(old, "drop_cache"):
        old.drop_cache()  # a follow-up already holds what it keeps; anything else is freed now
    st.session_state[RUN] = run
    st.session_state.pop(FINALIZED, None)


def feed() -> dict[str, Any]:
    """What the live view was sent recently (see app.views.live.component.send_window)."""
    return st.session_state.setdefault(FEED, {})


def begin_full_pass() -> None:
    """Called once per full script run, so the fragment can tell a full run from its own reruns."""
    st.session_state[FULL_PASS] = st.session_state.get(FULL_PASS, 0) + 1


def fragment_sees_full_pass() -> bool:
    """True the first time the fragment runs inside a new full script run."""
    current = st.session_state.get(FULL_PASS, 0)
    if st.session_state.get(FRAGMENT_SEEN) != current:
        st.session_state[FRAGMENT_SEEN] = current
        return True
    return False


def set_polling(run) -> None:
    """A full pass registers the live fragment: it polls for `run` when that run is active."""
    st.session_state[POLLING] = run.id if run is not None and run.active else None


def polling_lost(run) -> bool:
    """True when `run` is active but no full pass set the fragment to poll for it.

    A click's callbacks run before its pass; a pass that is then preempted (a live view's value
    asks for a fragment-only rerun) never reaches the fragment that would poll for the new run, and
    the page sat on "waiting for the page to finish drawing" with the run long over. The fragment
    asks for a full pass instead (tests/test_load.py's eight sessions found it)."""
    return run is not None and run.active and st.session_state.get(POLLING) != run.id


def request_resend() -> None:
    """A live view's callback: it found a gap in what it received, so send it everything next pass."""
    st.session_state[RESEND] = True


def take_resend() -> bool:
    """True once after a view asked for a resend."""
    return bool(st.session_state.pop(RESEND, False))


def needs_final_rerun(run) -> bool:
    """True once per finished run: the page draws the after-run sections (a fragment pass reruns
    the page for them; a full pass draws them itself)."""
    if run is None or run.active or st.session_state.get(FINALIZED) == run.id:
        return False
    st.session_state[FINALIZED] = run.id
    return True
