"""The engine lab's session keys (read and written through the helpers of app.shared.session)."""

from __future__ import annotations

from app.shared.session import get as get  # noqa: F401
from app.shared.session import job as job
from app.shared.session import put as put
from app.shared.session import set_job as set_job

# Engine lab page (app/views/engines/view.py): its widgets, then the session's run and calibration jobs
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
LB_PC_START = "lb_pc_start"  # the prefix-cache experiment's start button
LB_PC_JOB = "lb_pc_job"  # the session's ConversationJob
LB_SEEN = "lb_seen_jobs"  # ids of finished jobs a full rerun was already made for
