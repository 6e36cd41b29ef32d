"""Command line for the engine: prepare the model, generate a trace, estimate, calibrate, benchmark.

Progress and diagnostics go to stderr; stdout carries only the result (one JSON line with --json),
so the output can be piped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _progress_to_stderr(fraction: float, message: str) -> None:
    print(f"[{fraction * 100:5.1f}%] {message}", file=sys.stderr, flush=True)


def _load(args):
    from core import model as model_mod

    if getattr(args, "model_dir", None):
        return model_mod.load_local(Path(args.model_dir))
    if getattr(args, "model", None):
        return model_mod.load_hub(args.model)
    return model_mod.load_default(_progress_to_stderr)


def cmd_prepare(args) -> int:
    import resource
    import time

    from core import prepare

    start = time.perf_counter()
    folder = prepare.ensure_prepared(_progress_to_stderr)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"prepared: {folder} ({time.perf_counter() - start:.1f} s, peak RSS {peak_mb:.0f} MB)")
    return 0


def cmd_generate(args) -> int:
    from core.runner import GenerationSettings, generate_trace

    settings = GenerationSettings(
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
        top_p=args.top_p, seed=args.seed, chat=args.chat, cache=args.cache, batch=args.batch,
        stop_on_eos=not args.ignore_eos, record_kv_norms=not args.no_kv_norms).validated()
    loaded = _load(args)
    from core import perf
    from core.predictor import host_predictor, make_annotator
    from core.runner import warm_up

    warm_up(loaded)  # the first forward's one-time costs stay out of the printed TTFT
    from core.spec import spec_from_config

    spec = spec_from_config(loaded.config)
    predictor = host_predictor(spec, loaded.info.dtype, measure=True)  # the CLI owns the machine
    annotate = make_annotator(spec, predictor, predictor.dtype)
    if args.json:
        trace = generate_trace(loaded, args.prompt, settings, annotate=annotate)
        trace.hardware = predictor.describe()
        print(trace.to_json())
    else:
        def show(event) -> None:
            print(event.token_text, end="", flush=True)

        trace = generate_trace(loaded, args.prompt, settings, annotate=annotate, on_event=show)
        print()
        ttft, tpot_ms = perf.ttft_ms(trace.events) or 0.0, perf.tpot_ms(trace.events)
        tpot = f"{tpot_ms:.1f} ms" if tpot_ms is not None else "n/a"
        print(f"[{loaded.info.id} · {loaded.info.weights_source} · {len(trace.prompt_token_ids)} prompt "
              f"tokens · TTFT {ttft:.1f} ms · TPOT {tpot} · stop: {trace.stop_reason}]", file=sys.stderr)
    return 0


def cmd_calibrate(args) -> int:
    """Measure this machine, then fit the predictor on the default model's train split."""
    import json

    from core import calibrate, fitdata

    cal = calibrate.calibrate(force=True, quick=args.quick)
    result = {"calibration": cal.to_dict()}
    if not args.no_fit:
        result["predictor"] = fitdata.ensure_fitted(_load(args), repeats=3, force=True).describe()
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=1))
    return 0


def cmd_estimate(args) -> int:
    import json

    from core.estimate import estimate_run

    # --hardware host calibrates this machine on first use, as `calibrate` would: the CLI owns it.
    result = estimate_run(args.model, args.hardware, args.prompt_len, args.gen_len, args.batch,
                          args.dtype, args.kv_dtype, measure=True, tp=args.tp)
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    return 0


def cmd_simulate(args) -> int:
    import json
    from pathlib import Path

    from core.sim.simulate import SimConfig, engine_limits, simulate
    from core.sim.traffic import is_recorded
    from core.sim.workload import MAX_FILE_BYTES, MAX_REQUESTS, read_arrivals

    given = {"model": args.model, "dtype": args.dtype, "tp": args.tp, "instances": args.instances,
             "budget": args.budget, "kv_blocks": args.kv_blocks, "max_batch": args.max_batch,
             "block_tokens": args.block_size, "request_overhead_s": args.request_overhead}
    # a real engine's fit brings its own setting; flags given explicitly still win
    limits = engine_limits(args.hardware, args.block_size) or {}
    chosen = {**limits, **{k: v for k, v in given.items() if v is not None}}
    synthetic = {"--rate": args.rate, "--arrival": args.arrival, "--seed": args.seed, "--prompt-scale": args.prompt_scale,
                 "--output-scale": args.output_scale, "--prompt-median": args.prompt_median,
                 "--output-median": args.output_median, "--length-sigma": args.length_sigma,
                 "--system-prompts": args.system_prompts, "--system-prompt-tokens": args.system_prompt_tokens,
                 "--system-prompt-skew": args.system_prompt_skew, "--turns": args.turns, "--think-time": args.think_time}
    recorded = {"--time-scale": args.time_scale, "--window-start": args.window_start, "--window": args.window}
    playing = is_recorded(args.workload) and not args.arrivals
    unused = [f for f, v in recorded.items() if v is not None] if not playing else []
    if playing or args.arrivals:
        unused += [f for f, v in synthetic.items() if v is not None]
    if unused:
        what = ("a recording plays its own arrivals and lengths" if playing else
                "an arrival file has its own arrivals and lengths" if args.arrivals else
                "they apply to a recorded trace (--workload azure-code-2023, azure-conv-2023 or mooncake-conv)")
        raise ValueError(f"{', '.join(unused)} would change nothing here: {what}")
    count = args.requests if args.requests is not None else (
        MAX_REQUESTS if playing and args.window is not None else 1000)  # a window bounds a recording itself
    picked = {k: v for k, v in {"rate_per_s": args.rate, "arrival": args.arrival, "seed": args.seed,
                                "prompt_scale": args.prompt_scale, "output_scale": args.output_scale,
                                "time_scale": args.time_scale, "window_start_s": args.window_start}.items()
              if v is not None}
    config = SimConfig(policy=args.policy, workload=args.workload, requests=count, hardware=args.hardware,
                       ttft_target_s=args.ttft_target, tpot_target_s=args.tpot_target,
                       prompt_median=args.prompt_median, output_median=args.output_median,
                       length_sigma=args.length_sigma, window_s=args.window, prefix_cache=args.prefix_cache,
                       router=args.router, router_queue_bound=args.router_queue_bound,
                       **{k: v for k, v in {"system_prompts": args.system_prompts,
                                            "system_prompt_tokens": args.system_prompt_tokens,
                                            "system_prompt_skew": args.system_prompt_skew, "turns": args.turns,
                                            "think_s": args.think_time}.items() if v is not None},
                       **picked, **chosen)
    requests = None
    if args.arrivals:
        path = Path(args.arrivals)
        if not path.is_file():
            raise ValueError(f"no arrival file at {path}")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"the arrival file is larger than {MAX_FILE_BYTES:,} bytes")
        requests = read_arrivals(path.read_bytes(), path.name, max_bytes=MAX_FILE_BYTES)
    result = simulate(config, requests)
    out = result.to_dict(per_request=args.per_request)
    print(json.dumps(out) if args.json else json.dumps(out, indent=1))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prepare", help="prepare the embedded SmolLM2 model (one-time conversion)")
    p.set_defaults(func=cmd_prepare)

    g = sub.add_parser("generate", help="run the real model and print the text (or the trace as JSON)")
    g.add_argument("--prompt", required=True)
    g.add_argument("--max-new-tokens", type=int, default=32)
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--json", action="store_true", help="print the run's trace as one JSON line")
    g.add_argument("--cache", choices=["dynamic", "static", "none"], default="dynamic")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--batch", type=int, default=1)
    g.add_argument("--ignore-eos", action="store_true", help="keep going past the end-of-text token")
    g.add_argument("--no-kv-norms", action="store_true", help="leave per-vector norms out of the trace")
    g.add_argument("--model-dir", help="a local transformers model folder (safetensors only)")
    g.add_argument("--model", help="a Hugging Face model id (needs the network)")
    g.set_defaults(func=cmd_generate)

    c = sub.add_parser("calibrate", help="measure this machine and fit the latency predictor")
    c.add_argument("--json", action="store_true")
    c.add_argument("--quick", action="store_true", help="smaller microbenchmarks (less accurate)")
    c.add_argument("--no-fit", action="store_true", help="microbenchmarks only, no model runs")
    c.set_defaults(func=cmd_calibrate, model=None, model_dir=None)

    e = sub.add_parser("estimate", help="cost model and predicted time, without running a model")
    e.add_argument("--model", required=True, help="a model preset name or a config.json path")
    e.add_argument("--hardware", required=True, help="a hardware preset name, or 'host'")
    e.add_argument("--prompt-len", type=int, required=True)
    e.add_argument("--gen-len", type=int, required=True, help="generated tokens (the first from prefill)")
    e.add_argument("--batch", type=int, default=1)
    e.add_argument("--tp", type=int, default=1, help="tensor parallelism: devices one model is split over")
    e.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16", "fp8", "int8", "int4"])
    e.add_argument("--kv-dtype", default=None, choices=["fp32", "bf16", "fp16", "fp8", "int8", "int4"])
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_estimate)

    from core.sim.simulate import DEFAULT_HARDWARE, DEFAULT_MODEL

    s = sub.add_parser("simulate", help="simulate a serving machine under a scheduling policy (all times simulated)",
                       description="Discrete-event simulation of serving: requests arrive, a policy batches them, "
                                   "every iteration is priced by the cost model and the datasheet predictor.")
    from core.sim.policies import POLICIES
    from core.sim.routers import ROUTERS

    s.add_argument("--policy", default="chunked", choices=list(POLICIES),
                   help="; ".join(f"{name}: {cls.description}" for name, cls in POLICIES.items()))
    from core.sim.traffic import recordings
    from core.sim.workload import load_workloads

    s.add_argument("--workload", default="mix", choices=[*load_workloads(), *recordings()],
                   help="a synthetic mix, or recorded production traffic played as recorded: "
                        + "; ".join(f"{n}: {r.short}" for n, r in recordings().items()))
    s.add_argument("--time-scale", type=float, default=None,
                   help="a recorded trace: multiply its requests per second (default 1: as recorded)")
    s.add_argument("--window-start", type=float, default=None,
                   help="a recorded trace: start this many seconds into the recording (default 0)")
    s.add_argument("--window", type=float, default=None,
                   help="a recorded trace: play only this many seconds of it (default: to the end, or --requests)")
    s.add_argument("--requests", type=int, default=None,
                   help="requests to simulate (default 1000; a recording played for a --window: all in it)")
    s.add_argument("--rate", type=float, default=None,
                   help="mean arrivals per second (default: the workload's, near saturation: chat 60, long-doc 4, "
                        "mix 24)")
    s.add_argument("--arrival", default=None, choices=["poisson", "bursty"], help="default poisson")
    s.add_argument("--arrivals", help="replay an arrival file instead (JSONL or CSV: arrival_s, prompt_tokens, "
                                      "output_tokens; or Mooncake's JSONL, or the Azure trace's CSV), up to 64 MB")
    s.add_argument("--model", default=None, help=f"a model preset (default {DEFAULT_MODEL}; an engine fit's own)")
    s.add_argument("--hardware", default=DEFAULT_HARDWARE,
                   help=f"a GPU preset (default {DEFAULT_HARDWARE}), or a real engine's fit saved by "
                        "`engine calibrate` (e.g. vllm-b256: the embedded model in bf16)")
    s.add_argument("--dtype", default=None, choices=["fp32", "bf16", "fp16", "fp8", "int8", "int4"],
                   help="default bf16, or the dtype an engine fit served")
    s.add_argument("--tp", type=int, default=None, help="devices per model copy (default 1)")
    s.add_argument("--instances", type=int, default=None,
                   help="model copies (default 2, an engine fit 1); disaggregated uses half for prefill, half for decode")
    s.add_argument("--budget", type=int, default=None,
                   help="chunked: tokens per iteration (default 512, or an engine fit's --max-num-batched-tokens)")
    s.add_argument("--kv-blocks", type=int, default=None,
                   help="KV blocks per copy (default: 0.9 of memory less the weights, or the engine's own capacity)")
    s.add_argument("--block-size", type=int, default=None, help="tokens per KV block (default 16, or the engine's)")
    s.add_argument("--request-overhead", type=float, default=None,
                   help="seconds each request costs before it queues (HTTP, tokenizing; default 0, or an engine "
                        "fit's fitted figure)")
    s.add_argument("--seed", type=int, default=None, help="the synthetic workload's draw (default 0)")
    s.add_argument("--prompt-scale", type=float, default=None, help="multiply every prompt length (default 1)")
    s.add_argument("--output-scale", type=float, default=None, help="multiply every output length (default 1)")
    s.add_argument("--prompt-median", type=float, default=None,
                   help="custom lengths: every prompt log-normal around this median (default: the workload's mix)")
    s.add_argument("--output-median", type=float, default=None, help="custom lengths: the same for outputs")
    s.add_argument("--length-sigma", type=float, default=None,
                   help="custom lengths: spread, sigma of the log (default: the workload's)")
    s.add_argument("--max-batch", type=int, default=None,
                   help="running sequences at most, the rest queue (default 256, or an engine fit's --max-num-seqs)")
    s.add_argument("--ttft-target", type=float, default=1.0, help="goodput: TTFT target in s (default 1)")
    s.add_argument("--tpot-target", type=float, default=0.05, help="goodput: TPOT target in s (default 0.05)")
    s.add_argument("--prefix-cache", action="store_true",
                   help="keep full KV blocks by content and reuse them for prompts that share a prefix (vLLM v1's "
                        "automatic prefix caching; off by default)")
    s.add_argument("--router", default="round-robin", choices=list(ROUTERS),
                   help="which copy an arriving request goes to (default round-robin; prefix-aware needs "
                        "--prefix-cache)")
    s.add_argument("--router-queue-bound", type=int, default=4,
                   help="prefix-aware: pass over a copy whose queue is more than this many requests longer "
                        "than the shortest (default 4)")
    s.add_argument("--system-prompts", type=int, default=None,
                   help="synthetic workloads: prompts start with one of this many shared system prompts (default 0)")
    s.add_argument("--system-prompt-tokens", type=int, default=None, help="each system prompt's length (default 1000)")
    s.add_argument("--system-prompt-skew", type=float, default=None,
                   help="their popularity: the k-th drawn with weight 1/k^skew (default 1; 0 = all alike)")
    s.add_argument("--turns", type=int, default=None,
                   help="synthetic workloads: conversations of this many turns, each re-sending the earlier turns "
                        "and answers (default 1)")
    s.add_argument("--think-time", type=float, default=None,
                   help="seconds between an answer's last token and the next turn (default 5)")
    s.add_argument("--per-request", action="store_true", help="add every request's arrival and token times")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_simulate)

    from core import bench

    bench.add_parser(sub)
    from core.engines import commands as engine_commands

    engine_commands.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from core.engines.base import EngineError
    from core.model import ModelLoadError
    from core.prepare import ModelUnavailable
    from core.runner import SettingsError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ModelLoadError, ModelUnavailable, SettingsError, ValueError, EngineError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
