"""The what-if page's session keys (read and written through the helpers of app.shared.session)."""

from __future__ import annotations

from app.shared.session import get as get  # noqa: F401
from app.shared.session import job as job
from app.shared.session import put as put
from app.shared.session import set_job as set_job

# What-if page (app/views/whatif/view.py): its widgets, the uploaded config and its link bookkeeping.
WI_MODEL = "wi_model"
WI_HW = "wi_hw"
WI_WDTYPE = "wi_weight_dtype"
WI_KVDTYPE = "wi_kv_dtype"
WI_BATCH = "wi_batch"
WI_PROMPT = "wi_prompt_len"
WI_CACHED = "wi_cached_prefix"  # prompt tokens already in the cache
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
