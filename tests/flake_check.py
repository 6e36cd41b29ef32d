"""`make flake-check`: the browser tests N times in a row, every failure's evidence kept.

    python -m tests.flake_check [--runs N] [pytest arguments...]

Each round is one pytest process over the browser tests (the engine tests excluded: they have
`make engine-test`). A failing test leaves its screenshots and every test server's thread stacks in
artifacts/failures/ (tests/conftest.py's failure hook); after each round they move to
artifacts/flake-check/round-K/, with that round's pytest output. The summary, printed and written to
artifacts/flake-check/summary.json, names every test that failed in any round. Exit 0 only when
every round passed.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time

from tests.conftest import ARTIFACTS, ROOT

OUT = ARTIFACTS / "flake-check"
DEFAULT_SELECTION = ["-m", "browser and not engine", "--ignore=tests/engines"]


def run_round(k: int, extra: list[str]) -> dict:
    folder = OUT / f"round-{k}"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(ARTIFACTS / "failures", ignore_errors=True)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rf",
                           *DEFAULT_SELECTION, *extra], cwd=ROOT, capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    (folder / "pytest.txt").write_text(output)
    if (ARTIFACTS / "failures").exists():
        shutil.move(str(ARTIFACTS / "failures"), str(folder / "failures"))
    failed = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.M)))
    tail = output.strip().splitlines()[-1] if output.strip() else ""
    return {"round": k, "exit": proc.returncode, "seconds": round(time.monotonic() - started, 1),
            "failed": failed, "summary": tail}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds in a row (default 5)")
    args, extra = parser.parse_known_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    shutil.rmtree(OUT, ignore_errors=True)
    rounds = []
    for k in range(1, args.runs + 1):
        result = run_round(k, extra)
        rounds.append(result)
        print(f"round {k}/{args.runs}: {result['summary']} ({result['seconds']} s)"
              + (f"; failed: {', '.join(result['failed'])}" if result["failed"] else ""), flush=True)
    flaky = sorted({t for r in rounds for t in r["failed"]})
    clean = all(r["exit"] == 0 for r in rounds)
    summary = {"runs": args.runs, "clean": clean, "failed_tests": flaky, "rounds": rounds}
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1))
    print(("clean: " if clean else "NOT clean: ") + f"{args.runs} rounds; evidence in {OUT.relative_to(ROOT)}/")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
