"""The analytic core imports without torch or streamlit: estimates and figures must not pay for a model.

`python -m core estimate`, the page's figure builders and the simulator price forwards from shapes
alone; importing torch would add seconds and hundreds of MB to each. Checked in a fresh interpreter,
since this test process has long since imported both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIGHT = ("core.cost", "core.predictor", "core.estimate", "core.perf", "core.hardware", "core.trace",
         "core.export", "core.sim.policy", "core.sim.metrics", "core.engines.base")
HEAVY = ("torch", "streamlit", "transformers")


def test_analytic_core_leaves_torch_and_streamlit_unimported():
    code = ("import importlib, json, sys\n"
            f"for name in {LIGHT!r}:\n"
            "    importlib.import_module(name)\n"
            f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == dict.fromkeys(HEAVY, False)


def test_the_page_modules_leave_torch_unimported():
    """Every page module imports at the top of its file, so none of them may pull in torch: the title
    must paint while the model (and torch with it) still loads in the background."""
    code = ("import json, sys\n"
            "import app.views.live.view\n"
            "print(json.dumps({m: m in sys.modules for m in ('torch', 'transformers')}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"torch": False, "transformers": False}
