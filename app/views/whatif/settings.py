"""The what-if page's controls: model (a preset or an uploaded config.json), GPU, dtypes, batch,
lengths and the efficiency assumptions, kept in the page's link.

An uploaded config is untrusted: size-capped, parsed as JSON only, read by core.spec (which refuses
anything it cannot price, in words), never executed and never written to disk. A bad upload leaves
the previous model and every setting as they were, with a message.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from app.shared.text import plain, safe_name
from app.views.whatif import link, state
from core import whatif
from core.dtypes import DTYPES
from core.hardware import CUSTOM, HOST
from core.spec import ModelSpec, load_model_preset, spec_from_config
from core.whatif import COMPUTE_DTYPES

MAX_CONFIG_BYTES = 256_000
UPLOADED_PREFIX = "uploaded: "
WIDGETS = {"model": state.WI_MODEL, "hw": state.WI_HW, "w": state.WI_WDTYPE, "kv": state.WI_KVDTYPE,
           "batch": state.WI_BATCH, "prompt": state.WI_PROMPT, "cached": state.WI_CACHED, "gen": state.WI_GEN,
           "bw_eff": state.WI_BW_EFF, "c_eff": state.WI_C_EFF, "draft": state.WI_DRAFT,
           "gamma": state.WI_GAMMA, "alpha": state.WI_ALPHA, "tp": state.WI_TP, "c": state.WI_CDTYPE,
           **{key: state.WI_CUSTOM_HW + key for key in link.CUSTOM_FIGURES}}


def apply_link_once() -> None:
    """A session's first pass: the link's settings into the widgets, before any is drawn."""
    if st.session_state.get(state.WI_LINK_APPLIED):
        return
    st.session_state[state.WI_LINK_APPLIED] = True
    settings, notices = link.parse({k: st.query_params.get_all(k) for k in st.query_params})
    for key, widget in WIDGETS.items():
        st.session_state[widget] = settings[key]
    st.session_state[state.WI_LINK_NOTICES] = notices


def read_upload(data: bytes, filename: str) -> tuple[str, dict[str, Any]]:
    """(name, config dict) from an uploaded config.json; ValueError with a reader-facing message."""
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{filename} is {len(data):,} bytes; a config.json is a few kB (limit "
                         f"{MAX_CONFIG_BYTES:,} bytes). Upload the model's config.json, not its weights.")
    try:
        config = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{filename} is not a JSON file ({exc.__class__.__name__}: {exc}).") from None
    except RecursionError:
        raise ValueError(f"{filename} is nested too deeply to be a config.json.") from None
    except ValueError as exc:  # an integer of thousands of digits (Python's int conversion limit)
        raise ValueError(f"{filename} holds a number far too long for any model ({str(exc)[:120]}).") from None
    if not isinstance(config, dict):
        raise ValueError(f"{filename} holds JSON but not an object: a config.json is one {{...}} object.")
    name = str(config.get("_name_or_path") or filename.removesuffix(".json") or "uploaded config")[:80]
    try:
        spec_from_config(config, name=name)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"{filename} cannot be priced: {exc}") from None
    except Exception as exc:  # whatever else a hostile file provokes (recursion, overflow): still a message
        raise ValueError(f"{filename} cannot be priced ({type(exc).__name__}).") from None
    return name, config


def draft_spec(choice: str) -> ModelSpec | None:
    return load_model_preset(choice) if choice else None


def model_spec(choice: str) -> ModelSpec:
    custom = st.session_state.get(state.WI_CUSTOM)
    if choice.startswith(UPLOADED_PREFIX) and custom:
        name, config = custom
        return spec_from_config(config, name=name)
    return load_model_preset(choice)


def _take_upload() -> None:
    """Read a new upload before the model box is drawn (its value may change only before then)."""
    up = st.session_state.get(state.WI_UPLOAD)
    if up is not None and st.session_state.get(state.WI_UPLOAD_SEEN) != up.file_id:
        st.session_state[state.WI_UPLOAD_SEEN] = up.file_id
        try:
            name, config = read_upload(up.getvalue(), safe_name(up.name))
        except ValueError as exc:
            st.session_state[state.WI_UPLOAD_MESSAGE] = str(exc)
        else:
            st.session_state[state.WI_CUSTOM] = (name, config)
            st.session_state[state.WI_MODEL] = UPLOADED_PREFIX + name
            st.session_state[state.WI_UPLOAD_MESSAGE] = None


def _upload_box() -> None:
    # The box's own cap is in whole MB (1 at least); the 256 kB cap is read_upload's, with a message.
    st.file_uploader("…or upload a config.json", type=["json"], key=state.WI_UPLOAD, max_upload_size=1,
                     help=f"The model's Hugging Face config.json (a few kB, at most {MAX_CONFIG_BYTES // 1000} kB). "
                          "It is read as data, never run, and kept only in this browser session.")
    message = st.session_state.get(state.WI_UPLOAD_MESSAGE)
    if message:
        st.error(plain(message) + " The previous model is still selected.")


def render() -> dict[str, Any]:
    """Draw the controls; return the settings they hold (the keys of app.views.whatif.link)."""
    for message in st.session_state.get(state.WI_LINK_NOTICES) or []:
        st.info(message)
    _take_upload()
    custom = st.session_state.get(state.WI_CUSTOM)
    models = link.model_choices() + ([UPLOADED_PREFIX + custom[0]] if custom else [])
    if st.session_state.get(state.WI_MODEL) not in models:
        st.session_state[state.WI_MODEL] = link.DEFAULTS["model"]
    c1, c2, c3 = st.columns([3, 3, 2], gap="large")
    with c1:
        st.selectbox("Model", models, key=state.WI_MODEL,
                     help="Bundled configs of published models (their real config.json), or your own below.")
        _upload_box()
    with c2:
        st.selectbox("GPU", link.hardware_choices(), key=state.WI_HW, format_func=link.hardware_label,
                     help="Datasheet figures, dense (no sparsity), with the source cited under the charts; or "
                          "your own figures; or this server's CPU as the live page calibrated it.")
        if st.session_state[state.WI_HW] == CUSTOM:
            _custom_figures()
        d1, d2, d3 = st.columns(3)
        with d1:
            st.selectbox("Weights stored as", DTYPES, key=state.WI_WDTYPE,
                         help="Bytes per weight: what each decode step must stream.")
        with d2:
            st.selectbox("KV cache stored as", DTYPES, key=state.WI_KVDTYPE)
        with d3:
            st.selectbox("Multiplied in", COMPUTE_DTYPES, key=state.WI_CDTYPE,
                         disabled=st.session_state[state.WI_HW] == HOST,
                         help="The matrix-multiply path whose peak prices the FLOPs. Weights stored in int4 "
                              "are expanded to this before multiplying (int4 has no peak of its own). On this "
                              "server the runner multiplies in the weights' own dtype.")
            if st.session_state[state.WI_HW] == HOST:
                st.caption(f"here: {st.session_state[state.WI_WDTYPE]}, the weights' own")
        with st.expander("Efficiency assumptions (editable)"):
            st.slider("Share of the datasheet bandwidth reached", 0.05, 1.0, step=0.05, key=state.WI_BW_EFF)
            st.slider("Share of the datasheet FLOP/s reached", 0.05, 1.0, step=0.05, key=state.WI_C_EFF)
            st.caption("Well-tuned serving stacks reach about 80% of the bandwidth and 60% of the matmul peak; "
                       "every prediction for a GPU uses these two numbers. This server's predictions use "
                       "its calibration instead (measured ceilings and fitted coefficients).")
    with c3:
        st.number_input("Batch (sequences decoded together)", 1, link.MAX_BATCH, step=1, key=state.WI_BATCH)
        st.number_input("Prompt tokens", 1, link.MAX_TOKENS, step=128, key=state.WI_PROMPT)
        st.number_input("Cached prefix tokens", 0, link.MAX_TOKENS, step=128, key=state.WI_CACHED,
                        help="The prompt's leading tokens already in the cache (a follow-up's earlier turns, a "
                             "shared system prompt the server kept): the prefill computes only the rest and reads "
                             "the cached part's keys and values once. At most the prompt length less one.")
        st.number_input("Output tokens", 1, link.MAX_TOKENS, step=64, key=state.WI_GEN)
        st.number_input("Devices (tensor parallelism)", 1, link.MAX_TP, step=1, key=state.WI_TP,
                        help="One copy of the model split over this many GPUs of the same kind, linked by the "
                             "preset's interconnect; every layer then ends with two all-reduces.")
        with st.expander("Speculative decoding"):
            st.selectbox("Draft model", [""] + link.model_choices(), key=state.WI_DRAFT,
                         format_func=lambda m: m or "none (plain decode)",
                         help="A small model that guesses the next tokens; the big one checks them all in one "
                              "forward. In practice the two must share a tokenizer.")
            st.slider("Draft tokens per check (γ)", 1, 16, key=state.WI_GAMMA)
            st.slider("Acceptance rate per draft token (α)", 0.0, 0.99, step=0.01, key=state.WI_ALPHA)
    return {key: st.session_state[widget] for key, widget in WIDGETS.items()}


def _custom_figures() -> None:
    with st.expander("Your GPU's figures", expanded=True):
        st.caption("Dense peaks (no sparsity), bandwidth as the datasheet prints it, the link per direction. "
                   "They start at H100 SXM's figures.")
        cols = st.columns(3)
        for i, (key, (label, _, low, high)) in enumerate(link.CUSTOM_FIGURES.items()):
            with cols[i % 3]:
                st.number_input(label, min_value=low, max_value=high, key=state.WI_CUSTOM_HW + key,
                                format="%g")


def hardware(settings: dict[str, Any]):
    """The machine the settings name: a preset, the reader's own figures, or this server."""
    from core.calibrate import HostNotCalibrated, resolve_hardware

    if settings["hw"] == CUSTOM:
        return link.custom_hardware(settings)
    try:
        return resolve_hardware(settings["hw"])
    except HostNotCalibrated:
        raise ValueError("this server has not measured itself yet: open the live page and press Generate "
                         "once (it calibrates first), then come back") from None


def sync_url(settings: dict[str, Any]) -> None:
    """The address bar holds these settings (an uploaded model cannot travel in a link)."""
    shown = dict(settings)
    if str(shown.get("model", "")).startswith(UPLOADED_PREFIX):
        shown.pop("model")
    params = link.to_params(shown)
    current = {k: st.query_params.get(k) for k in st.query_params}
    if current != params:
        st.query_params.from_dict(params)


def scenario(settings: dict[str, Any]) -> whatif.Scenario:
    return whatif.Scenario(batch=int(settings["batch"]), prompt_len=int(settings["prompt"]),
                           gen_len=int(settings["gen"]), weight_dtype=settings["w"], kv_dtype=settings["kv"],
                           compute_dtype=settings.get("c", "bf16"),
                           assumptions={"bandwidth_efficiency": float(settings["bw_eff"]),
                                        "compute_efficiency": float(settings["c_eff"])},
                           spec_gamma=int(settings.get("gamma", 4)), spec_alpha=float(settings.get("alpha", 0.7)),
                           tp=int(settings.get("tp", 1)), cached_prefix=int(settings.get("cached", 0)))
