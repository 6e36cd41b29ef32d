"""All of a session's state, in one place: every session key, the current run, panel jobs, and what
the live view was sent.

Streamlit reruns the script on every click (and, with fastReruns, interrupts the previous run),
so anything that must survive a rerun lives in `st.session_state` under the keys below, and
only through these helpers. Jobs themselves run in their own threads (app.services.jobs); the
session keeps a reference so any later script run or fragment pass can read them. Only views and
sections use this module: components and services hold no session state (tests/test_layers.py).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

RUN = "pd_run"
FEED = "pd_feed"
FINALIZED = "pd_finalized_run"
FULL_PASS = "pd_full_pass"
FRAGMENT_SEEN = "pd_fragment_seen_pass"
LESSON_TEXTS = "pd_live_lesson_texts"  # the lesson prose beside the live charts, refreshed every few s
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


# What-if page (app/views/whatif.py): its widgets, the uploaded config and its link bookkeeping.
WI_MODEL = "wi_model"
WI_HW = "wi_hw"
WI_WDTYPE = "wi_weight_dtype"
WI_KVDTYPE = "wi_kv_dtype"
WI_BATCH = "wi_batch"
WI_PROMPT = "wi_prompt_len"
WI_GEN = "wi_gen_len"
WI_BW_EFF = "wi_bandwidth_efficiency"
WI_C_EFF = "wi_compute_efficiency"
WI_DRAFT = "wi_draft_model"  # "" = no speculative decoding
WI_GAMMA = "wi_draft_tokens"
WI_ALPHA = "wi_acceptance"
WI_TP = "wi_tensor_parallel"
WI_CDTYPE = "wi_compute_dtype"
WI_CUSTOM_HW = "wi_custom_hw_"  # prefix: one widget per custom GPU figure, named by its link key
WI_UPLOAD = "wi_config_upload"
WI_CUSTOM = "wi_custom_config"  # (name, config dict) of the last good upload
WI_UPLOAD_SEEN = "wi_upload_seen"  # file id of the upload already read
WI_UPLOAD_MESSAGE = "wi_upload_message"
WI_LINK_APPLIED = "wi_link_applied"
WI_LINK_NOTICES = "wi_link_notices"
# serving simulator page: one widget key per setting (keys of app.services.serving_link), then its runs
SV_PREFIX = "sv_"  # + a serving_link key, e.g. "sv_rate"
SV_JOB = "sv_job"  # the SimJob of the settings on screen (or being simulated)
SV_SEEN = "sv_seen_job"  # id of the last finished job a full rerun was made for
SV_UPLOAD = "sv_arrivals_upload"
SV_UPLOADED = "sv_arrivals"  # (file name, list of Request) of the last good arrival file
SV_UPLOAD_SEEN = "sv_upload_seen"
SV_UPLOAD_MESSAGE = "sv_upload_message"
SV_USE_UPLOAD = "sv_use_upload"
SV_WINDOW = "sv_window_start"
SV_LINK_APPLIED = "sv_link_applied"
SV_LINK_NOTICES = "sv_link_notices"


def get(key: str, default: Any = None) -> Any:
    return st.session_state.get(key, default)


def put(key: str, value: Any) -> None:
    st.session_state[key] = value


def current_run():
    return st.session_state.get(RUN)


def set_run(run) -> None:
    """Make `run` the session's run; stop the previous one so one session never runs two at once."""
    old = st.session_state.get(RUN)
    if old is not None and old is not run and old.active:
        old.stop()
    st.session_state[RUN] = run
    st.session_state.pop(FINALIZED, None)


def feed() -> dict[str, Any]:
    """What the live view was sent recently (see app.components.live_component.send_window)."""
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


def request_resend() -> None:
    """A live view's callback: it found a gap in what it received, so send it everything next pass."""
    st.session_state[RESEND] = True


def take_resend() -> bool:
    """True once after a view asked for a resend."""
    return bool(st.session_state.pop(RESEND, False))


def needs_final_rerun(run) -> bool:
    """True once per finished run: the page then reruns fully to draw the after-run sections."""
    if run is None or run.active or st.session_state.get(FINALIZED) == run.id:
        return False
    st.session_state[FINALIZED] = run.id
    return True


def job(key: str):
    return st.session_state.get(key)


def set_job(key: str, job) -> None:
    old = st.session_state.get(key)
    if old is not None and old is not job and old.active:
        old.stop()
    st.session_state[key] = job

# Engine lab page (app/views/engines.py): its widgets, then the session's run and calibration jobs
LB_ENGINE = "lb_engine"  # the picked endpoint's name (a radio over the healthy ones)
LB_STREAMS = "lb_streams"
LB_BY_HAND = "lb_by_hand"  # True: the reader injects the long prompt with a button
LB_START = "lb_start"
LB_INJECT = "lb_inject"
LB_STOP = "lb_stop"
LB_CALIBRATE = "lb_calibrate"
LB_RECHECK = "lb_recheck"
LB_RUN_JOB = "lb_run_job"  # the session's StallRunJob (its run stays drawn after it ends)
LB_CAL_JOB = "lb_cal_job"  # the session's CalibrateJob
LB_SEEN = "lb_seen_jobs"  # ids of finished jobs a full rerun was already made for
