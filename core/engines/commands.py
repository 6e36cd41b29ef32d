"""Command lines of the engine lab: `engine serve|calibrate|record` and `engine-bench`.

Every command that starts an engine stops its process group before it returns, on success, error
or Ctrl-C. Progress goes to stderr; stdout carries the result (one JSON line with --json).
"""

from __future__ import annotations

import json
import signal
import statistics
import sys
import time
from contextlib import ExitStack, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

from core.engines.kinds import kind_of
from core.engines.lab import QueueWorkload, StallWorkload
from core.engines.launch import MAKE_ENGINE_PORTS, ROOT, SETTINGS
from core.engines.prefix_lab import ConversationWorkload

BUNDLE_PATH = ROOT / "assets" / "engines" / "stall-recording.json"
BENCH_SETTINGS = ("vllm-b2048", "vllm-b256", "vllm-b256-pc", "llama-b2048")
REPEATS = 3


def _say(fraction: float, message: str) -> None:
    print(f"[{fraction * 100:5.1f}%] {message}", file=sys.stderr, flush=True)


def _exit_on_sigterm() -> None:
    """SIGTERM and SIGHUP (a closed terminal) unwind like Ctrl-C, so every started engine's process
    group is stopped on the way out (their default action would end this process and orphan them)."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


def _host_calibrated() -> None:
    """Measure this machine's calibration now if it has none: the engine fit prices its probe at the
    host's ceilings, and measuring before any engine starts keeps the measurement quiet (on a cold
    machine `make engine-bench` otherwise stopped at the first fit, asking for `core calibrate`)."""
    from core.calibrate import host_calibration, load_cached

    if load_cached() is None:
        _say(0.0, "measuring this machine's calibration first (once; tens of seconds)")
        host_calibration(measure=True)


def _names(arg: str | None, default: tuple[str, ...]) -> list[str]:
    names = [n.strip() for n in arg.split(",")] if arg else list(default)
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise ValueError(f"unknown engine setting(s) {', '.join(unknown)}; known: {', '.join(SETTINGS)}")
    return names


def cmd_serve(args) -> int:
    """Serve the settings on their fixed ports until Ctrl-C or SIGTERM (make engine)."""
    from core.engines.session import installed, started

    # the settings the lab page lists, on their fixed ports
    names = [n for n in _names(args.only, tuple(MAKE_ENGINE_PORTS)) if installed(SETTINGS[n].engine)]
    unserved = [n for n in names if n not in MAKE_ENGINE_PORTS]
    if unserved:
        raise ValueError(f"{', '.join(unserved)} has no port of its own to be served on; "
                         f"served: {', '.join(MAKE_ENGINE_PORTS)}")
    if not names:
        raise ValueError("no engine is set up: run `make engine-setup`")
    _exit_on_sigterm()
    with ExitStack() as stack:
        for name in names:
            _say(0.0, f"starting {name} on 127.0.0.1:{MAKE_ENGINE_PORTS[name]}")
            live = stack.enter_context(started(SETTINGS[name], MAKE_ENGINE_PORTS[name], _say))
            print(f"{name}: {live.base_url} ({live.version}) is serving", flush=True)
        print("every engine is up; the engine lab page lists them. Ctrl-C stops them all.", flush=True)
        with suppress(KeyboardInterrupt):  # Ctrl-C, SIGTERM or SIGHUP: then the stack stops every engine
            while True:
                signal.pause()
    print("stopped", flush=True)
    return 0


def cmd_calibrate(args) -> int:
    _exit_on_sigterm()
    _host_calibrated()
    from core.engines import experiments
    from core.engines.session import started

    out, entries = {}, {}
    for name in _names(args.only, ("vllm-b2048", "vllm-b256")):
        with started(SETTINGS[name], progress=_say) as live:
            entries[name] = experiments.calibrate(live)
            out[name] = {k: v for k, v in entries[name].items() if k != "samples"}
    if args.bundle:
        experiments.engine_fit.bundle(entries)
    print(json.dumps(out) if args.json else json.dumps(out, indent=1))
    return 0


def cmd_record(args) -> int:
    """Make the bundled recording the lab plays where no engine runs."""
    _exit_on_sigterm()
    _host_calibrated()
    from core.engines import experiments
    from core.engines.session import started

    results, fits = [], {}
    prompt_ids = runner_prompt_ids()
    tpot_engine = None
    for name in _names(args.only, ("vllm-b2048", "vllm-b256")):
        with started(SETTINGS[name], progress=_say) as live:
            _say(0.3, f"{name}: calibrating the simulator to it")
            fits[name] = experiments.calibrate(live)
            _say(0.6, f"{name}: the stall workload")
            results.append(experiments.stall(live))
            if tpot_engine is None:
                tpot_engine = engine_tpot(live, prompt_ids)
    _say(0.9, "the project's runner on the same prompt (the engines are stopped)")
    data = experiments.bundle(results, fits)
    data["tpot"] = {"runner": runner_tpot(), "engine": tpot_engine}
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")
    print(json.dumps({r["setting"]: r["comparison"] for r in results}, indent=1))
    return 0


def cmd_play(args) -> int:
    """Send an arrival file (or a preset workload) to one engine on its arrival times, then simulate
    the same requests with that engine's fit: the measured and the simulated run side by side."""
    _exit_on_sigterm()
    from core.engines import experiments
    from core.engines.player import play
    from core.engines.session import started
    from core.sim.workload import MAX_UPLOAD_BYTES, generate, get_workload, read_arrivals

    (name,) = _names(args.only, ("vllm-b256",))[:1]
    if args.arrivals:
        path = Path(args.arrivals)
        if not path.is_file() or path.stat().st_size > MAX_UPLOAD_BYTES:
            raise ValueError(f"no arrival file of at most {MAX_UPLOAD_BYTES:,} bytes at {path}")
        requests = read_arrivals(path.read_bytes(), path.name)
    else:
        work = get_workload(args.workload)
        requests = generate(work, args.requests, args.rate or 2.0, seed=args.seed, max_context=2048)
    too_long = [r.id for r in requests if r.prompt_tokens + r.output_tokens > 4096]
    if too_long:
        raise ValueError(f"{len(too_long)} request(s) exceed the engines' 4,096-token window (first: {too_long[0]})")
    with started(SETTINGS[name], progress=_say) as live:
        if experiments.engine_fit.engine_predictor(name, bundled=False) is None or args.calibrate:
            _say(0.2, f"{name}: calibrating the simulator to it")
            experiments.calibrate(live)
        run = play(live.client, requests, experiments.new_run(live, "arrival file" if args.arrivals else args.workload),
                   seed=args.seed, metrics_url=live.base_url, timeout_s=args.timeout)
    sim, comparison = experiments.simulated(run, name)
    out = {"setting": name, "comparison": comparison.to_dict(), "requests": len(run.requests),
           "errors": sum(1 for r in run.requests if r.error)}
    if args.out:
        Path(args.out).write_text(json.dumps({"run": run.to_dict(), "simulated": {str(k): v for k, v in sim.items()},
                                              "comparison": comparison.to_dict()}))
    print(json.dumps(out) if args.json else json.dumps(out, indent=1))
    return 0


def _median_spread(values: list[float | None]) -> dict[str, float | None]:
    kept = [v for v in values if v is not None]
    if not kept:
        return {"median": None, "spread": None, "values": values}
    return {"median": statistics.median(kept), "spread": max(kept) - min(kept), "values": values}


def runner_tpot(new_tokens: int = 48, threads: int = 2) -> dict[str, Any]:
    """The project's own runner on the engines' prompt: TPOT, bytes per decode step, bandwidth, in
    fp32 and bf16 at the engine's thread count, and fp32 at the live page's own (PDLAB_THREADS)."""
    import torch

    from core import perf
    from core.model import configure_torch, load_default
    from core.predictor import default_annotator
    from core.runner import GenerationSettings, generate_trace
    from core.settings import torch_threads

    out = {}
    try:
        for key, dtype, n in ((f"float32-{threads}t", "float32", threads), (f"bfloat16-{threads}t", "bfloat16", threads),
                              ("float32-page", "float32", torch_threads())):
            loaded = load_default(dtype=dtype)
            torch.set_num_threads(n)  # after loading, which applies the page's own count
            annotate = default_annotator(loaded, measure=True)
            settings = GenerationSettings(max_new_tokens=new_tokens, stop_on_eos=False, chat=False,
                                          record_kv_norms=False).validated()
            trace = generate_trace(loaded, RUNNER_PROMPT, settings, annotate=annotate)
            decode = [e for e in trace.events if e.phase == "decode"]
            tpot = perf.tpot_ms(trace.events)
            step_bytes = statistics.median(e.cost["bytes"]["total"] for e in decode)
            out[key] = {"dtype": dtype, "threads": n, "tpot_ms": tpot, "bytes_per_step": step_bytes,
                                    "achieved_bandwidth_gb_s": step_bytes / (tpot / 1000) / 1e9 if tpot else None,
                                    "ms_per_layer": tpot / loaded.config.num_hidden_layers if tpot else None,
                                    "prompt_tokens": len(trace.prompt_token_ids)}
            del loaded
    finally:
        configure_torch()
    return out


RUNNER_PROMPT = "Explain in two sentences why the first token of an answer takes longer than the next ones."


def runner_prompt_ids() -> tuple[int, ...]:
    """RUNNER_PROMPT as the embedded model's tokenizer reads it (no chat template), so the engine
    is sent exactly the tokens the runner prefills."""
    from transformers import AutoTokenizer

    from core.engines.session import model_paths

    tokenizer = AutoTokenizer.from_pretrained(str(model_paths()[0]))
    return tuple(tokenizer(RUNNER_PROMPT)["input_ids"])


def engine_tpot(live, prompt_ids: tuple[int, ...], new_tokens: int = 48) -> dict[str, Any]:
    """The engine's TPOT on the runner's prompt, one stream, and what it implies per step."""
    from core.engines.base import EngineRequest, TokenArrival
    from core.engines.fit import embedded_spec
    from core.predictor import cost_for_event

    times = [a.t_s for a in live.client.stream(EngineRequest(prompt_ids, new_tokens, ignore_eos=True))
             if isinstance(a, TokenArrival)]
    tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
    spec, dtype = embedded_spec(), live.setting.dtype
    step_bytes = cost_for_event(spec, 1, len(prompt_ids) + new_tokens // 2, 1, dtype).bytes["total"]
    return {"tpot_ms": tpot * 1000 if tpot else None, "bytes_per_step": step_bytes, "tokens": len(times),
            "achieved_bandwidth_gb_s": step_bytes / tpot / 1e9 if tpot else None,
            "ms_per_layer": tpot * 1000 / spec.n_layers if tpot else None, "dtype": dtype,
            "prompt_tokens": len(prompt_ids), "threads": live.setting.threads}


def _conversation_summary(convs: list[dict[str, Any]]) -> dict[str, Any]:
    """The conversation experiment's repeats: TTFT errors over the turns and the hit-token error,
    each as median and spread over the repeats, with every repeat's counts."""
    return {"ttft_error_median": _median_spread([c["ttft_error"]["median"] for c in convs]),
            "ttft_error_p90": _median_spread([c["ttft_error"]["p90"] for c in convs]),
            "hit_token_error": _median_spread([c["hit_token_error"] for c in convs]),
            "hit_tokens_measured": [c["hit_tokens_measured"] for c in convs],
            "hit_tokens_simulated": [c["hit_tokens_simulated"] for c in convs],
            "queries_measured": [c["queries_measured"] for c in convs],
            "queries_simulated": [c["queries_simulated"] for c in convs],
            "turns": [c["turns"] for c in convs]}


def cmd_bench(args) -> int:
    """engine-bench: start each setting; REPEATS times calibrate, then play the queueing workload
    (twice: the second play holds the engine to itself), the stall and the poisson workloads; report
    medians and spreads of the simulator's errors; TPOT of runner and engine."""
    _exit_on_sigterm()
    _host_calibrated()
    from core.engines import experiments
    from core.engines.session import installed, started

    t0 = time.perf_counter()
    names = [n for n in _names(args.only, BENCH_SETTINGS) if installed(SETTINGS[n].engine)]
    settings_out = []
    tpot_engine = None
    prompt_ids = runner_prompt_ids()
    for name in names:
        setting = SETTINGS[name]
        t_start = time.perf_counter()
        if setting.prefix_cache:  # its own experiment only: conversations against its prefix cache
            with started(setting, progress=_say) as live:
                start_s = time.perf_counter() - t_start
                convs = []
                for k in range(REPEATS):
                    _say(0.3 + 0.2 * k, f"{name}: conversations, repeat {k + 1} of {REPEATS}")
                    convs.append(experiments.conversations(live, seed=k))
            settings_out.append({"setting": name, "label": setting.label + ", prefix caching on",
                                 "engine_version": live.version, "start_s": start_s, "fit": setting.fit,
                                 "prefix_cache": _conversation_summary(convs)})
            continue
        with started(setting, progress=_say) as live:
            start_s = time.perf_counter() - t_start
            stalls, pois, queues, coefs = [], [], [], []
            for k in range(REPEATS):
                # each repeat on a fit made just before it: on a shared machine the engine's speed
                # drifts within minutes, which a fit made once carries into every later play as error
                _say(0.2 + 0.2 * k, f"{name}: repeat {k + 1} of {REPEATS}: calibrating")
                fit_entry = experiments.calibrate(live)
                coefs.append(fit_entry["coef"])
                _say(0.3 + 0.2 * k, f"{name}: repeat {k + 1} of {REPEATS}")
                queues.append(experiments.queueing(live, seed=k, again=True))
                stalls.append(experiments.stall(live, seed=k)["comparison"])
                pois.append(experiments.poisson(live, seed=k)["comparison"])
            if kind_of(setting.engine).tpot_experiment and tpot_engine is None:
                tpot_engine = engine_tpot(live, prompt_ids)
        row = {"setting": name, "label": setting.label, "engine_version": live.version, "start_s": start_s,
               "fit": {k: v for k, v in fit_entry.items() if k != "samples"}, "repeat_coefs": coefs}
        for key in ("ttft_error_median", "itl_error_median"):
            row[key] = _median_spread([c[key] for c in pois])
            row["stall_workload_" + key] = _median_spread([c[key] for c in stalls])
        for key in ("stall_measured_s", "stall_simulated_s", "stall_error"):
            row[key] = _median_spread([c[key] for c in stalls])
        # past saturation: each request's error, median and p90 per repeat, then their median and spread
        # and the engine against itself (the same requests played twice): the floor under those errors
        row["queueing"] = {f"{who}{metric}_error_{q}": _median_spread([r[key][metric][q] for r in queues])
                           for who, key in (("", "errors"), ("engine_self_", "engine_self"))
                           for metric in ("ttft", "tpot", "e2e") for q in ("median", "p90")}
        row["queueing"]["requests"] = [r["requests"] for r in queues]
        row["queueing"]["peak_waiting"] = [r["peak_waiting"] for r in queues]
        settings_out.append(row)
    _say(0.9, "the project's runner on the same kind of prompt")
    runner = runner_tpot()
    out = {"settings": settings_out, "tpot": {"runner": runner, "engine": tpot_engine},
           "repeats": REPEATS, "workloads": {"stall": StallWorkload().__dict__, "queueing": QueueWorkload().__dict__,
                                             "conversations": asdict(ConversationWorkload()),
                                             "poisson": {"requests": experiments.POISSON_REQUESTS,
                                                         "rate_per_s": experiments.POISSON.rate_per_s}},
           "bench_s": time.perf_counter() - t0}
    print(json.dumps(out) if args.json else json.dumps(out, indent=1))
    return 0


def add_parsers(sub) -> None:
    e = sub.add_parser("engine", help="real serving engines: serve, calibrate the simulator to one, record")
    esub = e.add_subparsers(dest="engine_command", required=True)
    s = esub.add_parser("serve", help="serve vLLM (budgets 2,048 and 256) and llama-server on loopback until Ctrl-C")
    s.add_argument("--only", help="comma-separated settings (default: every one set up)")
    s.set_defaults(func=cmd_serve)
    c = esub.add_parser("calibrate", help="probe an engine and save its fit under the setting's name")
    c.add_argument("--only", help="comma-separated settings (default vllm-b2048,vllm-b256)")
    c.add_argument("--json", action="store_true")
    c.add_argument("--bundle", action="store_true",
                   help="also write the fits to assets/engines/fits.json, what a fresh clone's simulate uses")
    c.set_defaults(func=cmd_calibrate)
    r = esub.add_parser("record", help="regenerate the lab's bundled recording")
    r.add_argument("--only", help="comma-separated settings (default vllm-b2048,vllm-b256)")
    r.add_argument("--out", default=str(BUNDLE_PATH))
    r.set_defaults(func=cmd_record)
    p = esub.add_parser("play", help="send an arrival file or a workload to one engine, then simulate the same requests")
    p.add_argument("--only", help="the engine setting (default vllm-b256)")
    p.add_argument("--arrivals", help="JSONL or CSV: arrival_s, prompt_tokens, output_tokens (as simulate --arrivals)")
    p.add_argument("--workload", default="chat", choices=["chat", "long-doc", "mix"])
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--rate", type=float, default=None, help="arrivals per second (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--calibrate", action="store_true", help="probe the engine again even if a fit is saved")
    p.add_argument("--timeout", type=float, default=600.0, help="give up on unfinished requests after this many s")
    p.add_argument("--out", help="write the measured run, the simulated token times and the errors here (JSON)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_play)
    b = sub.add_parser("engine-bench", help="measure the simulator against real engines (starts and stops them)")
    b.add_argument("--only", help=f"comma-separated settings (default {','.join(BENCH_SETTINGS)})")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)

