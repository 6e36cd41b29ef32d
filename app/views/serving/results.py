"""What the serving page computes from two simulations besides their words: the timeline's window and
the downloads (per-request CSV, everything as JSON)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np

from core.sim.simulate import SimResult


def window_length(result: SimResult) -> float:
    """About sixty typical iterations of the first server: long enough to see a long prefill and the
    decodes around it, short enough to see single iterations."""
    durations = [it[1] for it in result.servers[0][1].iterations]
    if not durations:
        return 1.0
    return float(min(30.0, max(0.05, 60 * float(np.median(durations)))))


def export_csv(results: list[SimResult]) -> str:
    """Per-request results of both policies as CSV (token times in the JSON export)."""
    out = io.StringIO()
    fields = ["policy", "id", "arrival_s", "prompt_tokens", "output_tokens", "server", "preemptions",
              "first_token_s", "ttft_s", "tpot_s", "e2e_s", "tokens"]
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for res in results:
        for rec in res.per_request():
            writer.writerow({"policy": res.config.policy, **rec})
    return out.getvalue()


def export_json(results: list[SimResult]) -> str:
    return json.dumps([r.to_dict(per_request=True) for r in results])
