"""Peak memory of a process serving the page: loads the app in AppTest, runs one generation.

`python -m core bench` runs this as a child process, so the engine never imports streamlit.
Prints the number of events and the peak RSS in MB (VmHWM: ru_maxrss would include the parent's
peak, which Linux carries across fork and exec).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "navigation.py"


def peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=600)
    at.run()
    at.text_area(key="prompt").set_value("Explain in two sentences why the sky is blue.")
    at.button(key="generate").click().run()
    run = at.session_state["pd_run"]
    deadline = time.time() + 300
    while run.active and time.time() < deadline:  # the page generates in a background thread
        run.touch()
        time.sleep(0.3)
    at.run()
    if at.exception or run.status != "done":
        print(f"serve probe failed: {at.exception or run.status}", file=sys.stderr)
        return 1
    print(len(run.events), peak_rss_mb())
    return 0


if __name__ == "__main__":
    sys.exit(main())
