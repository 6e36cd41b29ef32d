"""Record the bundled traces: real greedy runs of the embedded model, replayed when the model is not ready.

Run from the repository root (after `make prepare`; calibrate first for a fitted predictor):

    PDLAB_CACHE_DIR=.cache HF_HUB_OFFLINE=1 python -m scripts.record_traces

Each trace keeps the predictor and the machine it was measured on in `hardware`, so a replay
never passes one machine's latencies off as another's. Greedy decoding makes the token ids a
function of the code and the weights only; tests/test_bundled_traces.py regenerates them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python scripts/record_traces.py` puts scripts/, not the root, on the path
    sys.path.insert(0, str(ROOT))

from core.trace import BUNDLED_DIR, Trace  # noqa: E402

LONG_CONTEXT = (
    "Here are my notes from a talk on serving language models. A model generates text in two phases. "
    "In the prefill phase it reads the whole prompt in one forward pass: every prompt token goes through "
    "every layer at once, so the matrix multiplications are large and the processor is kept busy with "
    "arithmetic. In the decode phase it produces one token per forward pass. Each step reuses the keys "
    "and values of all earlier tokens, which are kept in the KV cache, but it still has to stream every "
    "weight of the model from memory to compute a single token. That is why decode speed is usually "
    "limited by memory bandwidth rather than by arithmetic, and why serving systems batch many requests "
    "together during decode. The cache itself grows by one entry per layer for every token.\n\n"
    "Using only these notes, explain in a few sentences why decode is slower per token than prefill."
)

# (file name, prompt, max_new_tokens): a short factual question, the page's default prompt and
# settings (so the trace shown while the model loads matches the prompt box), and a ~200-token prompt
# whose prefill is visibly heavier than a decode step. Chosen for clear greedy margins (see README).
RECORDINGS = (
    ("moon-facts", "List three facts about the Moon.", 48),
    ("sky-blue", "Explain in two sentences why the sky is blue.", 48),
    ("long-prompt", LONG_CONTEXT, 40),
)
MAX_FILE_BYTES = 1_500_000


def greedy_settings(max_new_tokens: int):
    from core.runner import GenerationSettings

    return GenerationSettings(max_new_tokens=max_new_tokens, temperature=0.0, chat=True, cache="dynamic")


def machine() -> dict:
    """The recording machine: enough for a reader to judge whether its latencies resemble theirs."""
    import torch

    from core.calibrate import fingerprint

    fp = fingerprint()
    return {"cpu_model": fp["cpu_model"], "cpu_count": fp["cpu_count"], "arch": fp["machine"],
            "os": platform.platform(terse=True), "python": platform.python_version(),
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def min_logit_margin(loaded, trace: Trace) -> float:
    """Smallest gap between the chosen and the runner-up logit, from one teacher-forced forward.

    A near-tie could flip on a CPU with different rounding; the margin says how safe the
    regeneration test is on other machines.
    """
    import torch

    ids = trace.prompt_token_ids + trace.generated_ids[:-1]
    with torch.inference_mode():
        logits = loaded.model(input_ids=torch.tensor([ids])).logits[0, len(trace.prompt_token_ids) - 1:]
    top2 = logits.float().topk(2, dim=-1)
    chosen = top2.indices[:, 0].tolist()
    if chosen != trace.generated_ids:
        print("  warning: the teacher-forced argmax differs from the incremental run", file=sys.stderr)
    return round(float((top2.values[:, 0] - top2.values[:, 1]).min()), 4)


def to_text(trace: Trace) -> str:
    """Valid JSON with one top-level key, and one event, per line: readable, with small diffs on re-record."""
    data = trace.to_dict()
    events = data.pop("events")

    def dump(value) -> str:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))

    lines = [f" {dump(key)}: {dump(value)}," for key, value in data.items()]
    body = ",\n".join("  " + dump(event) for event in events)
    return "{\n" + "\n".join(lines) + '\n "events": [\n' + body + "\n ]\n}\n"


def record(loaded, predictor, name: str, prompt: str, max_new_tokens: int, out_dir: Path,
           repeats: int = 2) -> Path:
    from core.predictor import default_annotator
    from core.runner import generate_trace

    settings = greedy_settings(max_new_tokens)
    annotate = default_annotator(loaded, predictor=predictor)
    # Best of a few runs by total time: on a shared machine another process can slow any one run,
    # and the fastest run is the closest to what this machine does undisturbed.
    runs = [generate_trace(loaded, prompt, settings, annotate=annotate) for _ in range(repeats)]
    if len({tuple(r.generated_ids) for r in runs}) != 1:
        raise SystemExit(f"{name}: greedy runs disagree; the trace would not be reproducible")
    trace = min(runs, key=lambda r: sum(e.latency_ms for e in r.events))
    # The recording machine's folder layout is nobody's business and differs on every clone.
    trace.model.pop("path", None)
    from app.shared.context import token_label

    trace.prompt_tokens = [token_label(loaded.tokenizer, i) for i in trace.prompt_token_ids]  # replay w/o tokenizer
    trace.hardware = {
        **predictor.describe(), "machine": machine(),
        "recorded": {"date": datetime.date.today().isoformat(), "by": "recorded by scripts/record_traces.py",
                     "runs": f"fastest of {repeats} identical greedy runs by total time",
                     # A busy machine slows every forward: the load says how quiet it was.
                     "load_avg_1m": round(os.getloadavg()[0], 2),
                     "min_logit_margin": min_logit_margin(loaded, trace)},
    }
    text = to_text(trace)
    Trace.from_json(text)  # never write a file the app could not read back
    if len(text.encode()) > MAX_FILE_BYTES:
        raise SystemExit(f"{name}: {len(text.encode()):,} bytes, over {MAX_FILE_BYTES:,}; shorten the prompt")
    path = out_dir / f"{name}.json"
    path.write_text(text, encoding="utf-8")
    s = trace.summary()
    print(f"{path.name}: {s['prompt_tokens']} prompt + {s['generated_tokens']} generated tokens, "
          f"TTFT {s['ttft_ms']:.0f} ms, TPOT {s['tpot_ms']:.0f} ms, {len(text.encode()) / 1e3:.0f} kB, "
          f"min logit margin {trace.hardware['recorded']['min_logit_margin']}, "
          f"load {trace.hardware['recorded']['load_avg_1m']}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BUNDLED_DIR, help="folder for the trace files")
    parser.add_argument("--repeats", type=int, default=2, help="runs per trace; the fastest is kept")
    args = parser.parse_args(argv)

    from core.dtypes import normalize_dtype
    from core.model import load_embedded
    from core.predictor import host_predictor
    from core.spec import spec_from_config

    loaded = load_embedded(allow_download=False)
    predictor = host_predictor(spec_from_config(loaded.config), normalize_dtype(loaded.info.dtype),
                               measure=True)
    if not predictor.fitted:
        print("warning: the predictor is not fitted on this machine (run `python -m core calibrate` first); "
              "predicted times will be the unfitted roofline sum", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    # One throwaway run first: the first forwards of a process pay one-off allocation costs.
    from core.runner import generate_trace

    generate_trace(loaded, "Hello", greedy_settings(2))
    for name, prompt, max_new in RECORDINGS:
        record(loaded, predictor, name, prompt, max_new, args.out, max(1, args.repeats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
