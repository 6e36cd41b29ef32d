"""Record the bundled experiment results: the cache comparison and the batching panel, measured on the embedded model.

Run from the repository root (after `make prepare`; calibrate first for a fitted predictor), on a quiet
machine (about a minute; anything else busy on the CPU slows the forwards it measures):

    PDLAB_CACHE_DIR=.cache HF_HUB_OFFLINE=1 python -m scripts.record_experiments

The page's own jobs do the measuring (app.views.live.jobs.CompareJob and BatchJob, queued and run
exactly as a reader's button runs them), so a recording is a page result, not a second implementation
of one. Each file says where and when it was measured (CPU, vCPUs, torch, model and weights, dtype,
the prompt), and the page shows it, so it never passes one machine's timings off as another's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python scripts/record_experiments.py` puts scripts/, not the root, on the path
    sys.path.insert(0, str(ROOT))

from app.shared import experiment_results  # noqa: E402
from app.shared.experiment_results import EXPERIMENTS_DIR, FORMAT  # noqa: E402


def default_prompt() -> tuple[str, bool]:
    """The prompt box's default prompt and chat setting: the recording then matches a fresh page's box."""
    from app.views.live import state
    from app.views.live.settings import DEFAULTS

    return str(DEFAULTS[state.PROMPT]), bool(DEFAULTS[state.CHAT])


def _wait(job, timeout_s: float = 600.0) -> None:
    """Wait for a job like the page does: touching it, so the abandoned-tab watchdog leaves it alone."""
    deadline = time.monotonic() + timeout_s
    while job.active and time.monotonic() < deadline:
        job.touch()
        time.sleep(0.2)
    job.join(30)
    if job.status != "done":
        raise SystemExit(f"{job.kind}: the job ended {job.status}: {job.error or 'no error message'}")


def provenance(loaded, kind: str, prompt: str, chat: bool, prompt_len: int, started: float, repeats: int) -> dict:
    """Where, when and with what the result was measured, for the label the page shows."""
    from core.dtypes import normalize_dtype
    from core.predictor import host_predictor
    from core.spec import spec_from_config
    from scripts.record_traces import machine

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    predictor = host_predictor(spec_from_config(loaded.config), normalize_dtype(loaded.info.dtype), measure=True)
    return {
        "format": FORMAT, "kind": kind,
        "recorded": {"at": now.isoformat(), "date": now.date().isoformat(),
                     "by": "scripts/record_experiments.py (the page's own job code)",
                     "duration_s": round(time.monotonic() - started, 1),
                     "runs": f"fastest of {repeats} runs by total measured time" if repeats > 1 else "one run",
                     # A busy machine slows every forward: the load says how quiet it was.
                     "load_avg_1m": round(os.getloadavg()[0], 2)},
        "machine": machine(),
        "model": {"id": loaded.info.id, "weights_source": loaded.info.weights_source, "dtype": loaded.info.dtype},
        "prompt": {"text": prompt, "chat": chat, "tokens": prompt_len},
        "predictor": {"fitted": predictor.fitted, "bandwidth_bytes_per_s": round(predictor.bandwidth),
                      "peak_flops_per_s": round(predictor.peak), "coef": predictor.coef},
    }


def write(kind: str, data: dict, out_dir: Path) -> Path:
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, indent=1) + "\n"
    experiment_results.parse_recording(kind, text)  # never write a file the page could not read back
    path = out_dir / f"{kind}.json"
    path.write_text(text, encoding="utf-8")
    return path


def _fastest(jobs: list, total) -> object:
    """Best of a few runs: on a shared machine another process can slow any one run, and the fastest
    is the closest to what this machine does undisturbed (scripts/record_traces.py does the same)."""
    return min(jobs, key=total)


def record_compare(loaded, queue, out_dir: Path, repeats: int) -> dict:
    from app.views.live.jobs import COMPARE_DEFAULT_TOKENS, CompareJob
    from core.runner import encode_prompt

    started = time.monotonic()
    prompt, chat = default_prompt()
    ids = encode_prompt(loaded, prompt, chat)
    jobs = []
    for _ in range(repeats):
        jobs.append(CompareJob(queue, loaded, ids, COMPARE_DEFAULT_TOKENS).start())
        _wait(jobs[-1])
    job = _fastest(jobs, lambda j: sum(sum(v) for v in j.result["modes"].values()))
    data = provenance(loaded, "compare", prompt, chat, len(ids), started, repeats)
    data["result"] = job.result
    path = write("compare", data, out_dir)
    totals = {m: round(sum(v) / 1000, 2) for m, v in job.result["modes"].items()}
    print(f"{path.name}: prompt {len(ids)} tokens, {job.n_tokens} forwards per mode, total s {totals}, "
          f"load {data['recorded']['load_avg_1m']}")
    return data


def record_batching(loaded, queue, out_dir: Path, repeats: int) -> dict:
    from app.views.live.jobs import BATCH_PROMPT, BatchJob

    started = time.monotonic()
    jobs = []
    for _ in range(repeats):
        jobs.append(BatchJob(queue, loaded).start())
        _wait(jobs[-1])
    job = _fastest(jobs, lambda j: sum(r["decode step ms (measured, median)"] for r in j.result["rows"]))
    data = provenance(loaded, "batching", BATCH_PROMPT, True, job.result["prompt_len"], started, repeats)
    data["result"] = job.result
    path = write("batching", data, out_dir)
    rows = job.result["rows"]
    print(f"{path.name}: " + ", ".join(f"batch {r['batch']}: {r['decode step ms (measured, median)']} ms, "
                                      f"{r['tokens/s (measured)']} tok/s" for r in rows)
          + f"; predicted compute-bound from {job.result['compute_bound_from']}, roofline estimate "
          f"{(job.result['roofline'] or {}).get('batch')}; load {data['recorded']['load_avg_1m']}")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=EXPERIMENTS_DIR, help="folder for the recordings")
    parser.add_argument("--only", choices=experiment_results.KINDS, help="record just this one")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each experiment; the fastest is kept")
    args = parser.parse_args(argv)

    from app.shared.jobs import RunQueue
    from core.dtypes import normalize_dtype
    from core.model import load_embedded
    from core.predictor import host_predictor
    from core.spec import spec_from_config

    loaded = load_embedded(allow_download=False)
    if not host_predictor(spec_from_config(loaded.config), normalize_dtype(loaded.info.dtype), measure=True).fitted:
        print("warning: the predictor is not fitted on this machine (run `python -m core calibrate` first); "
              "predicted times will be the unfitted roofline sum", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    queue = RunQueue()
    if args.only in (None, "compare"):
        record_compare(loaded, queue, args.out, max(1, args.repeats))
    if args.only in (None, "batching"):
        record_batching(loaded, queue, args.out, max(1, args.repeats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
