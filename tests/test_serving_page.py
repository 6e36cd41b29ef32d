"""The serving simulator page without a browser: its link, its figures, its words and its exports."""

from __future__ import annotations

import csv
import io
import json
import time

import pytest

from app.shared.jobs import RunQueue
from app.views.serving import figures as figs
from app.views.serving import jobs as serving_jobs
from app.views.serving import link, results
from app.views.serving import text as page_text
from app.views.serving.jobs import SimJob, configs
from core.sim.simulate import SimConfig, simulate
from tests.apptest import open_view


@pytest.fixture(scope="module")
def pair():
    a = simulate(SimConfig(policy="prefill-first", requests=300, seed=2))
    b = simulate(SimConfig(policy="chunked", requests=300, seed=2))
    return a, b


def test_link_round_trip_and_bad_values():
    settings, notices = link.parse({"a": ["static"], "b": ["disaggregated"], "rate": ["30"], "n": ["500"],
                                    "work": ["chat"], "hw": ["h200"], "kv": ["4000"], "pscale": ["2.5"]})
    assert not notices
    params = link.to_params(settings)
    assert params == {"a": "static", "b": "disaggregated", "rate": "30.0", "n": "500", "work": "chat",
                      "hw": "h200", "kv": "4000", "pscale": "2.5"}
    again, _ = link.parse({k: [v] for k, v in params.items()})
    assert again == settings
    bad, notices = link.parse({"a": ["fifo"], "n": ["999999"], "hw": ["../etc/passwd"], "rate": ["nan"],
                               "model": ["<script>"]})
    assert bad == link.DEFAULTS
    assert len(notices) == 5 and all("could not be used" in n for n in notices)


def test_page_settings_become_two_configs_on_the_same_arrivals():
    s = {**link.DEFAULTS, "a": "static", "b": "chunked", "rate": 0.0, "kv": 0, "budget": 2048}
    a, b = configs(s)
    assert (a.policy, b.policy) == ("static", "chunked")
    assert a.rate_per_s is None and a.kv_blocks is None and b.budget == 2048
    assert a.seed == b.seed and a.workload == b.workload


def test_the_job_simulates_both_policies_and_sweeps_the_rate():
    s = {**link.DEFAULTS, "n": 200}
    job = SimJob(RunQueue(), s).start()
    job.join(120)
    assert job.status == "done", job.error
    a, b = job.results
    assert [r.arrival_s for r in a.requests] == [r.arrival_s for r in b.requests]
    assert set(job.sweep) == {"prefill-first", "chunked"}
    rates = [p["rate_per_s"] for p in job.sweep["chunked"]]
    assert rates == pytest.approx([24.0 * k / 4 for k in range(1, 7)])  # mix at 24/s, up to 1.5x


def test_the_sweep_reaches_the_chosen_multiple():
    job = SimJob(RunQueue(), {**link.DEFAULTS, "n": 50, "sweep": 3.0, "work": "chat", "a": "chunked"}).start()
    job.join(120)
    assert job.status == "done", job.error
    assert [p["rate_per_s"] for p in job.sweep["chunked"]] == pytest.approx([60.0 * k / 2 for k in range(1, 7)])


def test_timeline_shows_a_long_prefill_and_its_lanes(pair):
    a, _ = pair
    rid = figs.long_request(a)
    assert rid is not None and a.requests[rid].prompt_tokens >= 2048
    start = figs.default_window(a, 0.5)
    assert start <= a.requests[rid].arrival_s <= start + 0.5
    fig = figs.timeline(a, start, 0.5, "t")
    lanes = {t["y"][0] for t in fig["data"] if t["y"]}
    assert lanes == {"server 1: prefill", "server 1: decode"} or lanes == {"server 2: prefill", "server 2: decode"}
    prefill = next(t for t in fig["data"] if t["y"] and t["y"][0].endswith("prefill"))
    # prefill-first prefills the long prompt whole: one iteration far longer than a typical decode step
    decode = next(t for t in fig["data"] if t["y"] and t["y"][0].endswith("decode"))
    assert max(prefill["x"]) > 5 * sorted(decode["x"])[len(decode["x"]) // 2]
    assert all(0.25 <= w <= 0.85 + 1e-9 for w in prefill["width"])
    assert "prompt arrives" in fig["layout"]["annotations"][0]["text"]


def test_disaggregated_timeline_shows_both_servers():
    d = simulate(SimConfig(policy="disaggregated", requests=200, seed=2))
    fig = figs.timeline(d, figs.default_window(d, 0.5), 0.5, "t")
    lanes = {t["y"][0] for t in fig["data"] if t["y"]}
    assert any(lane.startswith("prefill server") for lane in lanes)
    assert any(lane.startswith("decode server") for lane in lanes)


def test_static_timeline_draws_its_padding():
    s = simulate(SimConfig(policy="static", requests=200, seed=2, rate_per_s=4.0))
    fig = figs.timeline(s, 0.0, 5.0, "t")
    assert any(t["name"].startswith("padding") for t in fig["data"])


def test_ticks_distributions_kv_goodput_and_sweep(pair):
    a, b = pair
    ticks = figs.token_ticks(a, 0.5, 1.0, "t")
    assert ticks["data"][0]["x"] and all(0.5 <= x <= 1.5 for x in ticks["data"][0]["x"])
    dist = figs.distributions([a, b], ["A", "B"])
    assert [t["name"] for t in dist["data"]] == ["A", "A", "B", "B"]
    assert all(t["y"][-1] == pytest.approx(100) for t in dist["data"])
    assert {s["x0"] for s in dist["layout"]["shapes"]} == {1.0, 0.05}
    kv = figs.kv_usage([a, b], ["A", "B"])
    assert all(0 <= y <= 100 for t in kv["data"] for y in t["y"])
    good = figs.goodput([a, b], ["A", "B"])
    assert good["data"][1]["y"] == [a.metrics["goodput_req_s"], b.metrics["goodput_req_s"]]
    sweep = figs.rate_sweep({"chunked": [{"rate_per_s": 1.0, "throughput_tok_s": 100.0, "tpot_p99_s": 0.02,
                                          "ttft_p99_s": 0.1, "goodput_req_s": 1.0}]}, {"chunked": "B"})
    assert sweep["data"][0]["y"] == [20.0] and sweep["data"][0]["name"] == "B"
    for fig in (ticks, dist, kv, good, sweep):
        assert "simulated" in fig["layout"]["title"]["text"] or fig is ticks


def test_verdict_and_table_take_their_numbers_from_the_results(pair):
    a, b = pair
    text = page_text.verdict(a, b)
    assert "simulated" in text
    assert page_text.ms(a.metrics["ttft_p50_s"]) in text and page_text.ms(b.metrics["tpot_p99_s"]) in text
    rows = page_text.metric_rows(a, b, ["A", "B"])
    assert rows[0] == {"metric (simulated)": "TTFT p50", "A": page_text.ms(a.metrics["ttft_p50_s"]),
                       "B": page_text.ms(b.metrics["ttft_p50_s"])}


def test_exports_hold_every_request_of_both_policies(pair):
    a, b = pair
    rows = list(csv.DictReader(io.StringIO(results.export_csv([a, b]))))
    assert len(rows) == 600 and {r["policy"] for r in rows} == {"prefill-first", "chunked"}
    data = json.loads(results.export_json([a, b]))
    assert [d["settings"]["policy"] for d in data] == ["prefill-first", "chunked"]
    assert all(d["kind"] == "simulated" for d in data)
    assert len(data[0]["per_request"][0]["token_s"]) == a.requests[0].output_tokens


def test_precheck_refuses_what_cannot_be_simulated_in_words():
    from app.views.serving.jobs import precheck

    precheck(dict(link.DEFAULTS))
    with pytest.raises(ValueError, match="no memory for the KV cache"):
        precheck({**link.DEFAULTS, "model": "llama-3.1-405b"})
    with pytest.raises(ValueError, match="two model copies"):
        precheck({**link.DEFAULTS, "a": "disaggregated", "inst": 1})


def test_custom_lengths_replace_the_mix():
    a, _ = configs({**link.DEFAULTS, "pmed": 3000, "omed": 20, "sigma": 0.1})
    result = simulate(a.__class__(**{**a.__dict__, "requests": 200}))
    prompts = sorted(r.prompt_tokens for r in result.requests)
    assert 2500 < prompts[100] < 3500 and max(r.output_tokens for r in result.requests) < 40


def test_verdict_names_the_trade_off_when_each_policy_wins_one(pair):
    a, b = pair
    # on these arrivals prefill-first starts sooner and chunked streams more evenly
    assert a.metrics["ttft_p50_s"] < b.metrics["ttft_p50_s"] and b.metrics["tpot_p99_s"] < a.metrics["tpot_p99_s"]
    assert "Neither wins both: **Prefill first** starts answers sooner, **Chunked prefill** keeps them" in \
        page_text.verdict(a, b)
    same = page_text.verdict(a, a)
    assert "Neither wins both" not in same


def test_a_kv_cache_too_small_for_any_request_is_said_and_drawn_empty():
    """Issue 29: one KV block (inside the page's range) turns every request away. The page says so
    and why, and draws its charts empty (the timeline raised inside Plotly before)."""

    result = simulate(SimConfig(policy="chunked", requests=40, seed=2, kv_blocks=1))
    assert result.metrics["served"] == 0
    why = page_text.unserved(result)
    assert why.startswith("No request could be served") and "1 block of 16 tokens" in why
    fig = figs.timeline(result, 0.0, 1.0, "t")
    assert len(fig["data"]) == 1 and not fig["data"][0]["x"]
    assert any(a["text"] == "no request could be served" for a in fig["layout"]["annotations"])
    assert page_text.unserved(simulate(SimConfig(policy="chunked", requests=40, seed=2))) is None

    at = open_view("serving", timeout=120, query={"kv": "1", "n": "40"}, run=False)
    at.run()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the simulation is a queued job: each pass polls it
        if at.exception or any("could be served" in w.value for w in at.warning):
            break
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert sum("No request could be served" in w.value for w in at.warning) == 2


def test_every_page_simulation_is_estimated_and_capped_before_it_runs():
    """Issue 29: a link inside every limit (5,000 requests of 100k-token outputs) once simulated
    hundreds of millions of tokens, unstoppable. Its work is now estimated first and refused with
    the cap named; the default page is well inside it."""

    assert serving_jobs.job_work(dict(link.DEFAULTS)) < serving_jobs.MAX_JOB_WORK / 2
    heavy, notices = link.parse({"n": ["5000"], "omed": ["131072"], "pmed": ["100"]})
    assert not notices  # every value is inside the page's limits
    assert serving_jobs.job_work(heavy) > 100 * serving_jobs.MAX_JOB_WORK
    with pytest.raises(ValueError, match="capped at 5 million"):
        serving_jobs.precheck(heavy)
    job = SimJob(RunQueue(), heavy).start()  # a job made without the page's precheck refuses too
    job.join(30)
    assert job.status == "error" and "capped" in job.error and not job.results


def test_a_running_simulation_stops_when_asked_and_at_the_time_cap(monkeypatch):
    from core.sim.simulate import SimulationStopped

    asked = []

    def stop_now() -> bool:
        asked.append(1)
        return True

    with pytest.raises(SimulationStopped):
        simulate(SimConfig(policy="chunked", requests=300, seed=2), should_stop=stop_now)
    assert len(asked) == 1  # stopped at the first check, not at the end

    s = {**link.DEFAULTS, "n": 200}
    job = SimJob(RunQueue(), s).start()
    job.stop()
    job.join(30)
    assert job.status == "stopped" and len(job.results) < 2

    monkeypatch.setattr(serving_jobs, "MAX_JOB_S", 0.0)  # every check is past the cap
    job = SimJob(RunQueue(), s).start()
    job.join(30)
    assert job.status == "error" and "stopped after 0 s" in job.error


def test_the_reader_stops_a_running_simulation_from_the_page():
    at = open_view("serving", timeout=120, query={"n": "5000"}, run=False)  # the largest page run: time to press Stop
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.button(key="sv_stop").click().run()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any("stopped before it finished" in w.value for w in at.warning):
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("stopped before it finished" in w.value for w in at.warning)


def test_a_live_run_waits_for_at_most_the_running_simulation():
    """Issue 29: the heaviest simulation a link may ask for is running and another is queued when a
    reader presses Generate: the live run goes next, within the time cap, ahead of the queued one."""
    from app.shared.jobs import ModelJob

    class _Live(ModelJob):
        kind = "generate"

        def work(self) -> None:
            pass

    heaviest = {**link.DEFAULTS, "n": 5000}  # about 4.6 M work units: under the cap, seconds of work
    assert serving_jobs.job_work(heaviest) <= serving_jobs.MAX_JOB_WORK
    q = RunQueue()
    running = SimJob(q, heaviest).start()
    deadline = time.monotonic() + 30
    while running.status != "running" and time.monotonic() < deadline:
        time.sleep(0.01)
    queued = SimJob(q, {**heaviest, "seed": 1}).start()
    while queued.queue_position != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    live = _Live(q).start()
    for job in (running, queued, live):  # the page polls each of its jobs; nobody has left
        while job.alive:
            for j in (running, queued, live):
                j.touch()
            job.join(0.5)
    assert live.status == "done" and running.status == queued.status == "done"
    assert running.finished <= live.started < queued.started
    assert live.started - live.created <= serving_jobs.MAX_JOB_S


def test_a_recording_plays_from_its_minute_at_its_scale_and_sweeps_its_speed():
    s = {**link.DEFAULTS, "n": 200, "work": "azure-conv-2023", "wstart": 10, "tscale": 2.0, "a": "chunked"}
    assert link.parse({k: [str(v)] for k, v in link.to_params(s).items()})[0] == s
    job = SimJob(RunQueue(), s).start()
    job.join(120)
    assert job.status == "done", job.error
    a, b = job.results
    assert a.played is not None and a.played.window_start_s == 600 and a.played.time_scale == 2.0
    assert a.to_dict()["trace"]["trace"] == "azure-conv-2023" and len(a.requests) == 200
    assert [r.arrival_s for r in a.requests] == [r.arrival_s for r in b.requests]
    base = serving_jobs.offered_rate(configs({**s, "n": serving_jobs.SWEEP_RECORDED_REQUESTS})[0])
    assert [p["rate_per_s"] for p in job.sweep["chunked"]] == pytest.approx([base * k / 4 for k in range(1, 7)])
    words = page_text.verdict(a, b)
    assert "recorded traffic: Azure conversation trace (2023), from minute 10 of it, at 2× its recorded rate" in words


def test_the_page_plays_a_recording_naming_its_source_and_what_it_left_out():
    at = open_view("serving", timeout=120, query={"work": "mooncake-conv", "model": "tinyllama-1.1b", "n": "100"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(" requests** (" in m.value for m in at.markdown):
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("kvcache-ai/Mooncake" in c.value and "Apache-2.0" in c.value for c in at.caption)
    verdict = next(m.value for m in at.markdown if " requests** (" in m.value)
    assert "recorded traffic: Mooncake conversation trace" in verdict
    assert "more were left out: longer than tinyllama-1.1b's context window" in verdict
    assert at.number_input(key="sv_tscale").value == 1.0 and at.selectbox(key="sv_arrival").disabled


@pytest.mark.parametrize("work", ["azure-code-2023", "azure-conv-2023", "mooncake-conv"])
def test_each_recording_at_the_page_defaults_fits_a_page_simulation(work):
    """Picking a recording must not be refused at its first look: its sweep plays fewer requests."""
    s = {**link.DEFAULTS, "work": work}
    serving_jobs.precheck(s)
    assert serving_jobs.job_work(s) <= serving_jobs.MAX_JOB_WORK


def test_prefix_caching_on_the_page_reports_what_it_reused_and_marks_those_requests():
    """The page's switch and router reach both policies' configs; the tiles' line, the table and the
    ticks chart take their figures from the results; a link carries both and refuses bad values."""
    from app.views.serving import figures as figs
    from app.views.serving import link, text
    from app.views.serving.jobs import configs

    settings = {**link.DEFAULTS, "work": "mooncake-conv", "n": 200, "pcache": 1, "router": "prefix-aware",
                "inst": 4, "a": "chunked", "b": "prefill-first"}
    a, b = configs(settings)
    assert a.prefix_cache and b.prefix_cache and a.router == b.router == "prefix-aware"
    off = configs({**settings, "pcache": 0})[0]
    assert not off.prefix_cache and off.router == "round-robin"  # the router reads the caches: dealt in turn
    result = simulate(a)
    line = text.prefix_line(result)
    assert f"{result.prefix_hit_rate():.1%} of prompt tokens reused" in line and "prefix-aware router" in line
    assert text.prefix_line(simulate(off)) is None
    rows = text.metric_rows(result, simulate(b), ["A", "B"])
    assert rows[-1]["metric (simulated)"] == "prefix cache: prompt tokens reused"
    assert rows[-1]["A"] == f"{result.prefix_hit_rate():.1%}"
    span = max(t[-1] for t in result.token_s if t)
    fig = figs.token_ticks(result, 0.0, span, "ticks")
    cached = next(t for t in fig["data"] if t["name"] == "arrives, its prompt's start cached")
    hits = result.prefix_hits_of()
    assert cached["y"] and all(hits[rid] > 0 for rid in cached["y"])
    plain = next(t for t in fig["data"] if t["name"] == "request arrives")
    assert all(hits.get(rid, 0) == 0 for rid in plain["y"])
    parsed, notices = link.parse({"pcache": ["1"], "router": ["prefix-aware"]})
    assert parsed["pcache"] == 1 and parsed["router"] == "prefix-aware" and not notices
    parsed, notices = link.parse({"pcache": ["7"], "router": ["nearest"]})
    assert parsed["pcache"] == 0 and parsed["router"] == "round-robin" and len(notices) == 2


def test_what_the_prompts_share_reaches_a_synthetic_workload_and_not_a_recording():
    from app.views.serving.jobs import configs

    settings = {**link.DEFAULTS, "sysn": 3, "syst": 500, "turns": 2, "think": 1.5, "pcache": 1, "n": 200}
    a, b = configs(settings)
    assert (a.system_prompts, a.system_prompt_tokens, a.turns, a.think_s) == (3, 500, 2, 1.5) and b.turns == 2
    result = simulate(a)
    assert result.prefix_hit_rate() > 0.2 and any(r.follows is not None for r in result.requests)
    recorded = configs({**settings, "work": "mooncake-conv"})[0]
    assert (recorded.system_prompts, recorded.turns) == (0, 1)  # a recording brings its own
    parsed, notices = link.parse({"sysn": ["3"], "turns": ["99"], "think": ["nan"]})
    assert parsed["sysn"] == 3 and parsed["turns"] == 1 and parsed["think"] == 5.0 and len(notices) == 2
