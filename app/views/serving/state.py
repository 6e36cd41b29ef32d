"""The serving page's session keys (read and written through the helpers of app.shared.session)."""

from __future__ import annotations

from app.shared.session import get as get  # noqa: F401
from app.shared.session import job as job
from app.shared.session import put as put
from app.shared.session import set_job as set_job

# serving simulator page: one widget key per setting (keys of app.views.serving.link), then its runs
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
