"""Figure builders, tables, patches and run plumbing on the tiny model: no browser, no real model."""

from __future__ import annotations

import json
import math
import re
import time

import pytest

from app.shared.context import Ceilings, build_context
from app.shared.jobs import RunQueue
from app.views.live import charts, figures, lesson, metrics, shown
from app.views.live import component as live
from app.views.live.patches import apply_patch, point_count
from core import perf
from core.runner import GenerationSettings, generate_trace

MAX_NEW = 12


@pytest.fixture(scope="module")
def run_data(tiny_model):
    settings = GenerationSettings(max_new_tokens=MAX_NEW, stop_on_eos=False)
    trace = generate_trace(tiny_model, "hi <b>&", settings, annotate=_annotator(tiny_model))
    ctx = build_context(tiny_model, trace.prompt_token_ids, MAX_NEW, 1, "dynamic", Ceilings(7e9, 7e10, None, "test"))
    return trace.events, ctx


def _annotator(loaded):
    from app.shared.model import make_annotator

    return make_annotator(loaded)


def test_kv_grid_has_kv_seq_len_columns_and_a_row_per_layer(run_data):
    events, ctx = run_data
    fig = charts.figure("kv", events, ctx)
    heat = fig.data[0]
    assert len(heat.x) == events[-1].kv_seq_len == ctx.prompt_len + len(events) - 1
    assert len(heat.z) == ctx.n_layers == 2
    assert all(len(row) == events[-1].kv_seq_len for row in heat.z)
    assert f"{events[-1].kv_seq_len} positions" in fig.layout.title.text


def test_prefill_fills_all_prompt_columns_in_one_patch(run_data):
    events, ctx = run_data
    patch = figures.kv_patch(events, 0, ctx)
    assert patch["cols"]["0"]["x"] == list(range(ctx.prompt_len))
    assert "ONE parallel forward pass" in patch["layout"]["annotations"][0]["text"]
    assert figures.kv_patch(events, 1, ctx)["cols"]["0"]["x"] == [ctx.prompt_len]


def test_latency_has_one_point_per_decode_step_and_predictions(run_data):
    events, ctx = run_data
    fig = charts.figure("latency", events, ctx)
    prefill, measured, predicted, error, prefill_predicted, waited = fig.data
    assert list(waited.x) == []  # this run never waited for a page: no squares
    assert list(prefill.x) == [0]
    # the prefill's prediction is its own labelled tick, not a circle lost beside the tall bar
    assert list(prefill_predicted.y) == [events[0].predicted_ms]
    assert f"predicted {events[0].predicted_ms:.0f} ms" in prefill_predicted.text[0]
    assert list(measured.x) == list(range(1, len(events)))
    assert len(predicted.x) == len(events) and len(error.y) == len(events)
    assert "predicted" in predicted.name and "measured" in measured.name


def test_traffic_and_roofline_use_the_cost_of_every_step(run_data):
    events, ctx = run_data
    traffic = charts.figure("traffic", events, ctx)
    assert [len(t.y) for t in traffic.data] == [len(events)] * 5
    cumulative = traffic.data[3].y
    assert all(b >= a for a, b in zip(cumulative, cumulative[1:], strict=False))
    # the stacked bars (weights, cache read, cache written, activations) are each step's whole byte count
    bars = [t for t in traffic.data if t.type == "bar"]
    assert [t.name for t in bars][-1] == "activations read and written (computed)"
    for k, e in enumerate(events):
        assert sum(t.y[k] for t in bars) == pytest.approx(e.cost["bytes"]["total"] / 1e6, abs=1e-3)  # 4 decimals
    assert cumulative[-1] == pytest.approx(sum(e.cost["bytes"]["total"] for e in events) / 1e6, rel=1e-4)
    roof = charts.figure("roofline", events, ctx)
    assert len(roof.data[1].x) == 1 and len(roof.data[2].x) == len(events) - 1
    assert roof.data[1].x[0] > roof.data[2].x[0]  # prefill is more intense than decode
    # y is in GFLOP/s, the unit the text and the table quote, labelled at powers of ten only
    table = metrics.roofline_table(events, ctx)
    assert roof.data[1].y[0] == pytest.approx(table["GFLOP/s (measured time)"][0], rel=1e-3)
    assert "GFLOP/s" in roof.layout.yaxis.title.text
    for axis in (roof.layout.xaxis, roof.layout.yaxis):
        assert all(math.log10(v) == round(math.log10(v)) for v in axis.tickvals)
        assert not any(t.endswith(("B", "M", "k")) for t in axis.ticktext)


@pytest.mark.parametrize("name", charts.NAMES)
def test_patches_survive_json_and_rebuild_the_figure(run_data, name):
    """The browser gets base + patches through JSON; applying them must give the Python figure."""
    events, ctx = run_data
    chart = charts.chart(name)
    fig = json.loads(json.dumps(chart.base(ctx)))
    for k in range(len(events)):
        apply_patch(fig, json.loads(json.dumps(chart.patch(events, k, ctx))))
    assert fig == json.loads(json.dumps(charts.figure_dict(name, events, ctx)))
    assert point_count(fig) > 0


@pytest.mark.parametrize("name", charts.NAMES)
def test_each_chart_has_a_matching_table(run_data, name):
    events, ctx = run_data
    table = charts.chart(name).table(events, ctx)
    # one row per cache position (kv), per decode step (budget), else per forward
    expected = {"kv": events[-1].kv_seq_len, "budget": len(events) - 1}.get(name, len(events))
    assert len(table) == expected
    assert any("measured" in c or "computed" in c or c == "measured ms" for c in table.columns)


def test_tokens_are_escaped_in_hover_text(run_data, tiny_model):
    events, ctx = run_data
    fig = charts.figure_dict("kv", events, ctx)
    cells = [c[0] for row in fig["data"][0]["customdata"] for c in row]
    assert "<" not in "".join(cells) and "&lt;" in "".join(cells)  # the prompt holds "<b>"
    assert figures.esc("<|im_end|>\n") == "&lt;|im_end|&gt;↵"


def test_tiles_say_measured_or_calibrated(run_data):
    events, ctx = run_data
    tiles = metrics.tiles(events, ctx)
    labels = [t["label"] for t in tiles]
    assert labels[:4] == ["Time to first token", "Time per output token", "Decode speed", "KV cache size"]
    assert [t["mark"] for t in tiles] == ["measured", "measured", "computed", "measured", "computed"][:len(tiles)]
    assert not any(word in t["note"] for t in tiles for word in ("measured:", "computed:"))  # the mark says it
    # the speed divides the printed step time (a reader saw 1000 ÷ "43 ms" beside 23.5 tok/s), × the rows
    from dataclasses import replace

    for batch in (1, 4):
        shown = metrics.tiles(events, replace(ctx, batch=batch))
        tpot = float(re.fullmatch(r"([\d.]+) ms", shown[1]["value"]).group(1))
        assert shown[2]["value"] == f"{1000 / tpot * batch:.1f} tok/s"
    # the bytes' details say how many positions the last step read, as the traffic chart's last bar
    # counts them, one fewer than the KV tile's
    last = events[-1]
    assert tiles[3]["note"] == f"read from the tensors: {last.kv_seq_len} positions"
    details = lesson.text("q2_bandwidth", lesson.values_for(events, ctx))
    read = int(re.search(r"it read (\d+) of them and wrote 1", details).group(1))
    assert read == last.kv_seq_len - 1
    assert last.cost["bytes"]["kv_read"] == pytest.approx(read * last.cost["bytes"]["kv_write"])


@pytest.mark.parametrize("ceiling_gbs", [0.5, 1.234, 3.3, 7.555, 16.1])
def test_bandwidth_tile_share_divides_its_printed_figures(run_data, ceiling_gbs):
    """The tile's share of the ceiling is the printed achieved figure over the printed ceiling (a
    reader saw "3.0 GB/s ... ceiling 7.56 GB/s (39% of it)", where 3.0 / 7.56 gives 40%)."""
    from dataclasses import replace

    events, ctx = run_data
    ctx = replace(ctx, ceilings=Ceilings(bandwidth=ceiling_gbs * 1e9, peak_flops=1e10))
    tile = next(t for t in metrics.tiles(events, ctx) if t["label"] == "Achieved bandwidth (decode)")
    achieved = float(re.fullmatch(r"([\d.]+) GB/s", tile["value"]).group(1))
    ceiling, pct = re.search(r"calibrated ceiling ([\d.]+) GB/s \((\d+)% of it\)", tile["note"]).groups()
    assert round(100 * achieved / float(ceiling)) == int(pct)
    assert float(ceiling) == pytest.approx(ceiling_gbs, abs=0.005)


def test_layer_detail_shows_gqa_groups(run_data):
    events, ctx = run_data
    fig = figures.layer_detail_figure(events, ctx, layer=1)
    assert list(fig.data[0].y) == ["KV head 0 ← Q 0, 1", "KV head 1 ← Q 2, 3"]
    assert len(fig.data[0].x) == events[-1].kv_seq_len


def test_crossover_matches_the_reference_figure():
    # SmolLM2-135M fp32: 538,060,032 weight bytes per decode step, 46,080 KV bytes per token.
    assert round(perf.crossover_tokens(538_060_032, 46_080, 1)) == 11_677
    assert round(perf.crossover_tokens(538_060_032, 46_080, 16)) == 730


def test_lesson_slots_are_filled_or_dashed(run_data):
    events, ctx = run_data
    text = lesson.text("q1_prefill_vs_decode", lesson.values_for(events, ctx))
    assert "[[" not in text and f"**{ctx.prompt_len} prompt positions**" in text
    assert "[[" not in lesson.text("q2_bandwidth") and "—" in lesson.text("q2_bandwidth")


def test_the_paper_and_prefill_texts_agree_with_the_run(run_data):
    """Every slot of "slower than on paper" and of the prefill sentences is filled from this run."""
    import statistics

    events, ctx = run_data
    values = lesson.values_for(events, ctx)
    for name in ("q_paper", "roofline", "formulas"):
        text = lesson.text(name, values)
        assert "[[" not in text and "—" not in text, name
    decode = events[1:]
    assert values["pred_ms"] == f"{statistics.median(e.predicted_ms for e in decode):.0f}"
    assert values["p_memory_ms"] == shown.term_ms(statistics.median(e.predicted_terms_ms['memory'] for e in decode))
    paper = statistics.median(1000 * e.cost['bytes']['total'] / 7e9 for e in decode)
    assert abs(float(values["paper_ms"]) - paper) <= 0.05 + 0.002 * paper  # from the printed MB, within rounding
    flops, seconds = events[0].cost["flops"]["total"], events[0].latency_ms / 1e3
    assert values["prefill_pct_of_peak"] == f"{100 * flops / seconds / 7e10:.0f}"
    intensity = flops / events[0].cost["bytes"]["total"]
    assert ("right of the ridge" in values["prefill_vs_ridge"]) == (intensity >= 10.0)  # ridge = 7e10 / 7e9


def test_prefill_sentences_reconcile_their_numbers(run_data):
    """n tokens promise 2n/B FLOPs per weight byte; the run's figure is lower by exactly the weights
    that do no per-token work, and the roofline's intensity counts the other bytes too."""
    events, ctx = run_data
    v = lesson.values_for(events, ctx)
    cost, n = events[0].cost, events[0].cost["n_new"]
    assert v["ideal_flop_per_byte"] == f"{2 * n / ctx.dtype_bytes:.0f}"
    busy = (cost["flops"]["attn_proj"] + cost["flops"]["mlp"]) / (2 * n) * ctx.dtype_bytes
    assert v["idle_weight_pct"] == f"{100 * (1 - busy / cost['bytes']['weights']):.0f}"
    assert float(v["prefill_intensity"]) < float(v["prefill_flop_per_weight_byte"]) <= 2 * n / ctx.dtype_bytes + 1


def test_small_terms_keep_two_digits_and_the_gap_reads_by_its_sign():
    assert shown.term_ms(85.94) == "85.9" and shown.term_ms(0.042) == "0.042" and shown.term_ms(0.0) == "0.0"
    assert lesson._rest_sentence(100.0, 80.0).startswith("the other 20 ms are what the prediction misses")
    assert lesson._rest_sentence(74.0, 99.0).startswith("25 ms less than predicted")
    assert lesson._rest_sentence(37.5, 41.0).startswith("3.5 ms less than predicted")  # 41 − 37.5, as printed
    assert lesson._rest_sentence(80.0, 79.5) == "the prediction matches it to within 1 ms"


def test_send_window_resends_recent_passes_and_everything_on_full_runs():
    feed: dict = {}
    assert live.send_window(feed, 1, 3, full=False) == 0
    assert live.send_window(feed, 1, 5, full=False) == 0
    assert live.send_window(feed, 1, 8, full=False) == 0
    assert live.send_window(feed, 1, 9, full=False) == 3  # overlap of the last 3 passes
    assert live.send_window(feed, 1, 9, full=True) == 0
    assert live.send_window(feed, 2, 1, full=False) == 0  # a new run starts over


def test_controls_frames_carry_raw_text_for_textcontent(run_data):
    events, ctx = run_data
    data = live.controls_data(7, {"state": "running", "text": "x"}, events, ctx, 0)
    assert [f["step"] for f in data["frames"]] == list(range(len(events)))
    assert len(data["prompt"]) == ctx.prompt_len
    assert data["frames"][-1]["tiles"]


def test_queue_is_fifo_and_reports_positions():
    q = RunQueue()
    assert q.acquire(1, lambda: False)
    order = []

    import threading

    def waiter(t):
        q.acquire(t, lambda: False)
        order.append(t)
        q.release(t)

    threads = [threading.Thread(target=waiter, args=(t,)) for t in (2, 3)]
    threads[0].start()
    time.sleep(0.1)
    threads[1].start()
    time.sleep(0.1)
    assert q.position(1) == 0 and q.position(2) == 1 and q.position(3) == 2
    q.release(1)
    for t in threads:
        t.join(5)
    assert order == [2, 3] and not q.busy


def test_generation_run_in_background_and_stop(tiny_model, monkeypatch):
    from app.shared import model as model_service
    from app.shared.runs import GenerationRun

    monkeypatch.setattr(model_service, "_ceilings", Ceilings())
    q = RunQueue()
    ids = [1, 5, 6, 7]
    done = GenerationRun(q, tiny_model, "x", ids, GenerationSettings(max_new_tokens=6, stop_on_eos=False)).start()
    done.join(30)
    assert done.status == "done" and len(done.events) == 6 and done.ctx is not None
    from app.shared import host_points  # the what-if page's "this server" view gets the run as a point

    point = host_points.STORE.points()[-1]
    assert point.source == "server" and point.prompt_tokens == len(ids) and point.decode_steps == 5
    assert point.ttft_ms == done.events[0].latency_ms
    assert done.trace().to_json()
    slow = GenerationRun(q, tiny_model, "x", ids, GenerationSettings(max_new_tokens=400, stop_on_eos=False))
    slow.start()
    slow.stop()
    slow.join(30)
    assert slow.status == "stopped" and not slow.alive and len(slow.events) < 400


def test_abandoned_run_ends_itself(tiny_model, monkeypatch):
    from app.shared import jobs
    from app.shared import model as model_service
    from app.shared.runs import GenerationRun

    monkeypatch.setattr(model_service, "_ceilings", Ceilings())
    monkeypatch.setattr(jobs, "ABANDON_AFTER_S", 0.0)
    run = GenerationRun(RunQueue(), tiny_model, "x", [1, 5], GenerationSettings(max_new_tokens=400,
                                                                                stop_on_eos=False)).start()
    run.join(30)
    assert run.status == "abandoned" and not run.alive


def test_budget_bars_are_the_prediction_split_beside_measured_and_paper(run_data):
    """Each decode step's stacked bars add up to its prediction; the dashed line is bytes / bandwidth."""
    events, ctx = run_data
    fig = charts.figure_dict("budget", events, ctx)
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    measured, paper = fig["data"][len(bars)], fig["data"][len(bars) + 1]
    decode = [e for e in events if e.phase == "decode"]
    assert list(measured["x"]) == [k for k, e in enumerate(events) if e.phase == "decode"]
    assert measured["y"] == pytest.approx([e.latency_ms for e in decode], abs=1e-3)
    stacked = [sum(b["y"][i] for b in bars) for i in range(len(decode))]
    assert stacked == pytest.approx([e.predicted_ms for e in decode], abs=0.01)  # prefill_extra is 0 in decode
    assert paper["y"] == pytest.approx([1000 * e.cost["bytes"]["total"] / ctx.ceilings.bandwidth for e in decode],
                                       abs=1e-3)  # the patch keeps ms to 3 decimals
    assert all("(predicted)" in b["name"] for b in bars) and "(measured)" in measured["name"]


def test_serving_sketch_stalls_every_stream_whole_and_not_in_chunks(run_data, tiny_model):
    """The sketch is the serving simulator's own policies (prefill-first, chunked) on this model's
    step time, scaled so one reader's decode step takes the run's measured TPOT."""
    from app.views.live import serving_sketch as sk
    from core import perf

    events, ctx = run_data
    fitted = sk.step_time_for(tiny_model.config, "fp32")
    assert fitted is not None
    whole, chunked = sk.timelines(events, ctx, fitted)
    (start, end), = whole.prefill_spans_s  # served whole: one long iteration
    assert whole.longest_gap_s() >= end - start  # every stream waits for all of it
    assert len(chunked.prefill_spans_s) == -(-whole.long_prompt // sk.CHUNK)
    assert max(b - a for a, b in chunked.prefill_spans_s) < end - start
    assert chunked.longest_gap_s() < whole.longest_gap_s() and chunked.wait_s() > whole.wait_s()
    values = sk.slot_values(events, ctx, fitted)
    assert values["stall_whole_s"] == f"{whole.longest_gap_s():.1f}"
    assert values["chunk_iterations"] == f"{len(chunked.prefill_spans_s)} iterations" and values["budget"] == str(sk.CHUNK + len(sk.STREAMS))
    # one reader's decode step at the run's context is the measured TPOT; three readers share the weights
    step, _ = fitted
    one = step.of_rows([(1, ctx.prompt_len + len(events) // 2)])
    scaled = sk._scaled(step, perf.tpot_ms(events) / 1e3 / one)
    assert scaled.of_rows([(1, ctx.prompt_len + len(events) // 2)]) * 1e3 == pytest.approx(perf.tpot_ms(events))
    three_ms = float(values["three_step_ms"])
    assert 0 < three_ms < len(sk.STREAMS) * perf.tpot_ms(events) + 1  # the weights read once, not three times
    assert scaled.of_rows([(1, sk.STREAM_PROMPT)] * 3) > scaled.of_rows([(1, sk.STREAM_PROMPT)])
    text = lesson.text("serving", {**lesson.values_for(events, ctx), **values})
    assert "[[" not in text and "—" not in text
    assert len(sk.figure(events, ctx, fitted).data) > 0
    assert sk.timelines(events[:1], ctx, fitted) is None  # no decode step yet: nothing to estimate from
    assert sk.timelines(events, ctx, None) is None  # no step time (an uncalibrated server): no sketch


def test_a_prefill_held_up_by_other_work_neither_sizes_the_sketch_nor_reads_as_arithmetic(run_data, tiny_model):
    """A prefill three times its prediction (another job landed in it, or a cold start): the serving
    sketch is sized by the prediction and says why, and the roofline verdict blames the hold-up, not
    thin matrix products (the prediction already counts those)."""
    import dataclasses

    from app.views.live import serving_sketch as sk

    events, ctx = run_data
    first = _predicted_at(events[0], events[0].latency_ms / 3)
    slow = [first, *events[1:]]
    # the sketch is sized by the decode steps alone: a held-up prefill changes nothing in it
    fitted = sk.step_time_for(tiny_model.config, "fp32")
    assert sk.slot_values(slow, ctx, fitted) == sk.slot_values(events, ctx, fitted)
    low_ridge = dataclasses.replace(ctx, ceilings=Ceilings(7e11, 7e10, None, "test"))  # ridge 0.1 FLOP/byte
    verdict = lesson.values_for(slow, low_ridge)["prefill_verdict"]
    assert "time it does not account for" in verdict and "arithmetic is what sets its time" not in verdict
    assert verdict.startswith("**So was this prefill compute-bound?** By its FLOPs and bytes, yes, but this "
                              "measurement took far longer")
    gap = int(re.search(r"the other (\d+) ms are time it does not account for", verdict).group(1))
    took = float(re.search(r"Timed, it took ([\d.]+) ms", verdict).group(1))
    said = float(re.search(r"predicts (\d+) ms", verdict).group(1))
    assert gap == round(took - said)  # divided from the printed figures
    normal = [_predicted_at(first, first.latency_ms / 1.2), *events[1:]]
    plain = lesson.values_for(normal, low_ridge)["prefill_verdict"]
    assert "does not account for" not in plain and "adds the parts up" in plain  # the prediction explains it
    # the answer first: this tiny model reaches a sliver of a 70 GFLOP/s roof, which the answer says
    assert plain.startswith(("**So was this prefill compute-bound?** Only in principle: it ran far below the roof",
                             "**So was this prefill compute-bound?** Yes, but far below the roof"))
    # 1.7x the prediction (a run a reader saw: 279 ms against 163): the latency section calls that gap
    # noise, so the verdict must not put it on the thin matrix products the prediction already counts
    middling = lesson.values_for([_predicted_at(first, first.latency_ms / 1.7), *events[1:]], low_ridge)
    assert "time it does not account for" in middling["prefill_verdict"]


def _predicted_at(event, total_ms: float):
    """The event with its predicted terms rescaled to sum to total_ms (the split kept)."""
    import dataclasses

    scale = total_ms / sum(event.predicted_terms_ms.values())
    return dataclasses.replace(event, predicted_terms_ms={k: v * scale for k, v in event.predicted_terms_ms.items()},
                               predicted_ms=total_ms)


def test_a_step_gap_on_one_side_in_every_step_is_not_called_noise():
    assert "not random noise" in lesson._rest_sentence(66.0, 53.0, 1.0)
    assert "other work on the same cores comes and goes" in lesson._rest_sentence(66.0, 53.0, 0.6)


def test_a_prefill_far_slower_than_predicted_is_explained(run_data):
    import dataclasses

    events, ctx = run_data
    first = events[0]
    slow = dataclasses.replace(first, latency_ms=first.predicted_ms * 2)  # predicted 50% too fast
    close = dataclasses.replace(first, latency_ms=first.predicted_ms * 1.05)
    on_time = [dataclasses.replace(e, latency_ms=e.predicted_ms) for e in events[1:]]  # decode as predicted
    behind = [dataclasses.replace(e, latency_ms=e.predicted_ms * 1.5) for e in events[1:]]  # −33% each
    assert "one short burst timed once" in lesson.values_for([slow, *on_time], ctx)["prefill_error_note"]
    whole = lesson.values_for([slow, *behind], ctx)["prefill_error_note"]
    assert "the whole run went slower" in whole and "(median −33%)" in whole
    assert lesson.values_for([close, *events[1:]], ctx)["prefill_error_note"] == ""
    text = lesson.text("latency", lesson.values_for([close, *events[1:]], ctx))
    assert "—" not in text and "[[" not in text


def test_the_cache_share_is_written_on_the_charts_where_its_slices_are_too_thin(run_data):
    """At a short context the KV series are slivers: the traffic and budget charts say in numbers
    how big they are at the step last drawn, and the traffic note says they are too thin to see."""
    events, ctx = run_data
    last = len(events) - 1
    b = events[-1].cost["bytes"]
    share = 100.0 * (b["kv_read"] + b["kv_write"]) / b["total"]
    traffic = charts.figure_dict("traffic", events, ctx)["layout"]["annotations"]
    assert len(traffic) == 1 and f"KV cache at step {last}:" in traffic[0]["text"]
    assert f"{share:.1f}% of its bytes" in traffic[0]["text"] and "(computed)" not in traffic[0]["text"]
    assert ("a thin sliver" in traffic[0]["text"]) == (share < 3)
    first = figures.traffic_patch(events, 0, ctx)["layout"]["annotations"][0]["text"]
    assert first.startswith("■ KV cache at prefill:")
    budget = charts.figure_dict("budget", events, ctx)["layout"]["annotations"]
    kv_ms = events[-1].predicted_terms_ms["kv"]
    assert f"latest step ({last}): the KV cache's part, {kv_ms:.1f} ms predicted" in budget[0]["text"]
    assert f" {events[-1].predicted_ms:.0f} ms" not in budget[0]["text"]  # the step's total is the answer's


def _with(events, latencies: dict[int, float], waits: dict[int, float]):
    """The run's events with some latencies and page waits replaced: a run whose slow steps fall
    where the test needs them."""
    import dataclasses

    return [dataclasses.replace(e, latency_ms=latencies.get(k, 10.0 if k else e.latency_ms),
                                waited_ms=waits.get(k)) for k, e in enumerate(events)]


def test_the_latency_chart_boxes_exactly_the_steps_that_waited_and_the_text_counts_them(run_data):
    """The text's count of waits can be checked on the chart: one square per waited forward, at its
    measured time, named as such in the legend (a square, since the roofline's rings mean predictions)."""
    events, ctx = run_data
    waited = _with(events, {}, {3: 420.0, 8: 380.0})
    fig = charts.figure("latency", waited, ctx)
    boxes = fig.data[5]
    assert list(boxes.x) == [3, 8] == lesson.waited_steps(waited)
    assert list(boxes.y) == [waited[3].latency_ms, waited[8].latency_ms]
    assert list(boxes.customdata) == [420.0, 380.0] and "a page-redraw wait" in boxes.name
    assert boxes.marker.symbol == "square-open" and boxes.name.startswith("boxed")
    assert lesson.redraw_parts(waited)[0] == ("waits_many", {"n": "2", "total": "0.8 s"})
    assert lesson.values_for(waited, ctx)["pause_note"] == lesson.pause_note(waited) != ""
    assert lesson.values_for(events, ctx)["pause_note"] == ""  # never waited: nothing said


def test_the_latency_text_blames_other_work_only_for_slow_steps_away_from_every_wait(run_data):
    events, ctx = run_data

    def names(steps, waits):
        return [name for name, _ in lesson.redraw_parts(_with(events, steps, waits))]

    # median decode step 10 ms: step 3 is slow and boxed, 4 slow right after it, 9 slow far from any wait
    mixed = _with(events, {3: 30.0, 4: 25.0, 9: 40.0}, {3: 500.0, 6: 400.0})
    assert lesson.slow_steps(mixed, {3, 6}) == lesson.SlowSteps(median_ms=10.0, boxed=1, after=1, away=1)
    parts = lesson.redraw_parts(mixed)
    assert [n for n, _ in parts] == ["waits_many", "slow_many", "after_redraw", "away_one"]
    limit = lesson.text("redraws/slow_limit", {"factor": "1.5", "limit_ms": "15", "median_ms": "10.0"}).strip()
    assert parts[1][1] == {"slow": "3", "limit": limit, "parts": ", ".join(
        lesson.text(f"redraws/{n}", {"n": "1"}).strip() for n in ("part_boxed_one", "part_after", "part_away_one"))}
    assert lesson.pause_note(mixed).startswith(" ") and "—" not in lesson.pause_note(mixed)
    assert lesson.redraw_parts(_with(events, {}, {3: 40.0}))[0] == ("waits_once", {"n": "1", "total": "40 ms"})
    assert names({3: 30.0, 5: 25.0}, {3: 500.0}) == ["waits_once", "slow_many", "after_redraw"]  # nothing blamed away
    assert names({3: 30.0, 6: 25.0}, {3: 500.0, 6: 400.0}) == ["waits_many", "slow_many", "after_redraw"]
    assert lesson.redraw_parts(_with(events, {3: 30.0, 6: 25.0}, {3: 500.0, 6: 400.0}))[1][1]["parts"] == \
        lesson.text("redraws/part_all_boxed", {"n": "2"}).strip()
    assert names({3: 30.0}, {3: 500.0}) == ["waits_once", "one_boxed", "after_redraw"]
    assert names({9: 30.0}, {3: 500.0}) == ["waits_once", "one_away", "away_one"]
    assert names({}, {3: 500.0}) == ["waits_once", "slow_none"]  # no slow step: no other work named
    assert names({4: 30.0}, {3: 500.0}) == ["waits_once", "one_after", "after_redraw"]
    assert names({8: 30.0, 9: 40.0}, {3: 500.0}) == ["waits_once", "slow_many", "away_many"]
    both = lesson.redraw_parts(_with(events, {3: 30.0, 6: 25.0, 9: 40.0}, {3: 500.0, 6: 400.0}))
    assert both[1][1]["parts"].startswith(lesson.text("redraws/part_boxed_many", {"n": "2"}).strip())
    assert both[-1] == ("away_one", {"n": "1"})


def test_a_trace_keeps_its_page_waits():
    from core.trace import Event, Trace

    e = Event(phase="prefill", positions=[0, 2], token_id=1, token_text="a", latency_ms=5.0, kv_seq_len=2,
              kv_shapes=[], waited_ms=312.5)
    back = Trace.from_json(Trace(model={}, settings={}, prompt_token_ids=[1, 2], events=[e]).to_json())
    assert back.events[0].waited_ms == 312.5


def test_crossover_labels_sit_in_the_legend_not_on_each_other(run_data):
    _, ctx = run_data
    fig = figures.crossover_figure(ctx)
    lines = [t for t in fig.data if t.showlegend is not False and "KV read" in t.name]
    for t, b in zip(lines, (1, 4, 16), strict=True):
        cross = perf.crossover_tokens(ctx.weight_bytes, ctx.kv_bytes_per_token, b)
        assert f"batch {b}: overtakes weights at {cross:,.0f} tokens (computed)" in t.name
    assert not any(t.text for t in fig.data)  # no labels beside the dots to collide


def test_roofline_rings_the_predicted_points_around_the_measured_ones(run_data):
    events, ctx = run_data
    roof = charts.figure("roofline", events, ctx)
    prefill, decode, predicted = roof.data[1], roof.data[2], roof.data[3]
    assert predicted.marker.symbol == "circle-open"
    assert predicted.marker.size > max(prefill.marker.size, decode.marker.size)  # visible where they coincide
    assert "rings" in predicted.name


def _norms(per_head: list[float], layers: int = 2) -> dict:
    return {"key": [[[v] for v in per_head] for _ in range(layers)],
            "value": [[[1.0] for _ in per_head] for _ in range(layers)]}


def test_the_gqa_chart_says_what_its_brightness_is_and_which_head_stands_out():
    from core.trace import Event

    events = [Event(phase="decode", positions=[k, k + 1], token_id=1, token_text="a", latency_ms=1.0,
                    kv_seq_len=k + 1, kv_shapes=[], kv_norms=_norms([2.0, 6.0 + k % 2, 2.0])) for k in range(10)]
    name, values = lesson.layer_heads(events, 3, 1, "key")
    assert name == "weights"  # the longest at every position: its projection weights, not the tokens
    assert values == {"which": "key", "layer": "1", "top": "1", "top_mean": "6.5", "others_mean": "2.0",
                      "ratio": "3.2", "n": "10", "longest_pct": "100%"}
    assert lesson.layer_heads(events, 3, 1, "value")[0] == "flat"
    assert lesson.head_reading(6.5, 2.0, 0.5) == "bright" and lesson.head_reading(2.5, 2.0, 1.0) == "flat"
    assert lesson.layer_heads(events, 1, 1, "key") == (None, {"which": "key", "layer": "1"})
    text = lesson.layer_heads_sentence(events, 3, 1, "key", batch=2)
    assert text.startswith(lesson.reading("heads_what", "batch", values)) and "—" not in text
    assert lesson.layer_heads_sentence([], 3, 1) == "" and lesson.layer_heads([], 3, 1) is None


def _last_digit(printed: str) -> float:
    """Half a unit of a printed figure's last digit: how far rounding can have moved it."""
    return 0.5 * 10.0 ** -(len(printed.split(".")[1]) if "." in printed else 0)


def _agrees(shown: str, a: str, b: str, scale: float = 1.0) -> bool:
    """Whether `shown` is a ÷ b (times scale) as a reader gets it from the printed operands, to the
    precision `shown` is printed at; a and b may themselves be rounded (interval arithmetic)."""
    x, y, z = (float(t.replace(",", "")) for t in (a, b, shown))
    lo = scale * (x - _last_digit(a)) / (y + _last_digit(b))
    hi = scale * (x + _last_digit(a)) / (y - _last_digit(b))
    reader = scale * x / y
    return lo - _last_digit(shown) <= z <= hi + _last_digit(shown) and abs(reader - z) <= _last_digit(shown) + 1e-9


@pytest.mark.parametrize("bandwidth", [7e9, 7.5512e9, 13.771971665e9, 0.3049e9])
def test_the_paper_time_is_the_printed_bytes_over_the_printed_bandwidth(run_data, bandwidth):
    """A reader saw "542 MB at 7.6 GB/s is 71.8 ms" (542 / 7.6 = 71.3): the time was divided from the
    unrounded ceiling, 7.55 GB/s. The printed division must come out as printed, and its two parts must
    add up to it; the printed time stays within rounding of the unrounded bytes ÷ bandwidth."""
    import dataclasses
    import re
    import statistics

    events, ctx = run_data
    ctx = dataclasses.replace(ctx, ceilings=Ceilings(bandwidth, 7e10, None, "test"))
    values = lesson.values_for(events, ctx)
    text = lesson.text("q_paper", values)
    mb, gbs, ms = re.search(r"the median step's \*\*([\d.,]+) MB\*\* at this machine's\s+calibrated ([\d.]+) GB/s "
                            r"take \*\*([\d.]+) ms\*\*", text).groups()
    assert _agrees(ms, mb, gbs, 1.0), (mb, gbs, ms)  # MB ÷ (GB/s) is ms
    assert round(float(mb.replace(",", "")) / float(gbs), 1) == float(ms)  # exactly what the reader gets
    unrounded = statistics.median(perf.paper_ms(e, bandwidth) for e in events[1:])
    assert abs(float(ms) - unrounded) <= 0.05 + 0.002 * unrounded  # and the dashed line it names
    weights, kv = re.search(r"against ([\d.]+) ms on paper for the weights\s+and activations alone \(the cache's "
                            r"([\d.]+) ms on paper", text).groups()
    assert abs(float(weights) + float(kv) - float(ms)) <= 1e-9 or float(kv) < 0.05  # the parts add up
    verdict = values["prefill_verdict"]
    if "right of the ridge" in verdict or "Being right" in verdict:
        mb, ms, gbs = re.search(r"its ([\d.,]+) MB would take only ([\d.]+) ms at ([\d.]+) GB/s",
                                verdict).groups()
        assert _agrees(ms, mb, gbs, 1.0), (mb, gbs, ms)


@pytest.mark.parametrize("share", [0.31, 0.7])
def test_the_prefill_verdict_prints_the_share_of_the_roof_its_numbers_give(run_data, share):
    """Right of the ridge but at 31% of the roof, the verdict said "Yes, in the roofline's sense". It
    now answers "only in principle" below half the roof, and its percentage is the printed roof time
    over the printed measured time, and the roofline paragraph's GFLOP/s over its roof."""
    import dataclasses
    import re

    events, ctx = run_data
    prefill = events[0]
    achieved = prefill.cost["flops"]["total"] / (prefill.latency_ms / 1e3)
    peak = achieved / share
    ctx = dataclasses.replace(ctx, ceilings=Ceilings(peak / 0.1, peak, None, "test"))  # ridge 0.1 FLOP/byte
    normal = [_predicted_at(prefill, prefill.latency_ms / 1.1), *events[1:]]
    values = lesson.values_for(normal, ctx)
    verdict = values["prefill_verdict"]
    roof, took, pct, gflops = re.search(
        r"its FLOPs need ([\d.]+) ms even at the roof\. Timed, it took ([\d.]+) ms, so it "
        r"reached (?:only )?(\d+)% of the compute roof \(the calibrated ([\d.]+) GFLOP/s\)", verdict).groups()
    assert _agrees(pct, roof, took, 100.0), (roof, took, pct)
    assert pct == values["prefill_pct_of_peak"] == f"{100 * share:.0f}" and gflops == values["peak_gflops"]
    paragraph = lesson.text("roofline", values)
    shown = re.search(r"Its FLOPs over its measured time come to \*\*([\d.]+) GFLOP/s\*\*, (\d+)% of\s+"
                      r"the ([\d.]+) GFLOP/s roof", paragraph).groups()
    assert shown[1] == pct
    assert _agrees(pct, shown[0], shown[2], 100.0), shown  # three figures each: a reader's division agrees
    assert ("reached only" in verdict) == (share < 0.5)
    assert "in the roofline's sense" not in verdict
    # the prediction's parts, in whole ms, add up to the prediction the latency paragraph prints
    total, a, m, f = map(int, re.search(r"predicts (\d+) ms for it .*?: (\d+) ms of arithmetic, (\d+) ms moving "
                                        r"the weights, activations and cache, and (\d+) ms of fixed costs",
                                        verdict).groups())
    assert a + m + f == total == int(values["prefill_predicted_ms"])
    most = "Arithmetic is most of that" in verdict
    assert most == (2 * a >= total) and most != ("Arithmetic is less than half of that" in verdict)
    # the answer up front agrees with that split (a reader saw "only in principle" answered, then
    # "arithmetic is what sets its time" at the end of the same paragraph)
    opening = verdict.removeprefix("**So was this prefill compute-bound?** ")
    if not most:
        assert opening.startswith("Only in principle:")
    elif share < 0.5:
        assert opening.startswith("Yes, but far below the roof: arithmetic set its pace")
    else:
        assert opening.startswith("Yes.")


def test_rounded_parts_add_up_to_their_rounded_sum():
    assert lesson.split_rounded([39.19, 0.75], 39.9, 1) == [39.2, 0.7]  # 39.2 + 0.8 would read 40.0
    assert lesson.split_rounded([53.85, 48.26, 25.82], 128, 0) == [54, 48, 26]
    for parts in ([1.45, 1.45, 1.45], [0.2, 0.2, 0.2, 0.2, 0.2], [10.04, 0.33]):
        for digits in (0, 1):
            total = round(sum(parts), digits)
            split = lesson.split_rounded(parts, total, digits)
            assert abs(sum(split) - total) < 1e-9
            assert all(abs(x - p) < 10.0 ** -digits + 1e-9 for x, p in zip(split, parts, strict=True))


def test_the_reported_paper_division_now_comes_out_as_printed():
    """The page a reader saw: 542 MB of a SmolLM2 decode step over a 7.55 GB/s ceiling, printed "7.6 GB/s
    ... 71.8 ms". The bundled recording's steps at that ceiling now print 7.55 GB/s, and 542 ÷ 7.55 = 71.8."""
    import dataclasses
    import re

    from app.shared import replay
    from core.trace import bundled_traces, load_trace_file

    trace = load_trace_file(bundled_traces()["moon-facts"].read_bytes())
    ctx = replay.context_from_trace(trace)
    ctx = dataclasses.replace(ctx, ceilings=Ceilings(7.5512e9, ctx.ceilings.peak_flops, None, "test"))
    text = lesson.text("q_paper", lesson.values_for(trace.events, ctx))
    assert re.search(r"\*\*542 MB\*\* at this machine's\s+calibrated 7\.55 GB/s take \*\*71\.8 ms\*\*",
                     text)


def test_a_tied_embedding_is_said_to_be_one_matrix():
    """SmolLM2's output layer reuses its token embedding table: the prefill sentence naming both must
    say so, or a reader doubles the idle share (reader check 9 expected about 42%, not 21%)."""
    import dataclasses

    from app.shared import replay

    run = replay.bundled("sky-blue")
    assert run.ctx.tied_embeddings  # from the bundled config, as the live model's own config says
    text = lesson.text("formulas", lesson.values_for(run.trace_data.events, run.ctx))
    assert "one shared matrix" in text and "—" not in text.split("Count the activations")[0]
    untied = dataclasses.replace(run.ctx, tied_embeddings=False)
    assert "one shared matrix" not in lesson.text("formulas", lesson.values_for(run.trace_data.events, untied))


def test_coloured_chart_notes_colour_only_their_key(run_data):
    """A note drawn in a series' colour starts with its ■ key: the page colours the key and keeps the
    words in the text colour (vermillion words on white read at 3.9:1, under WCAG AA's 4.5:1)."""
    events, ctx = run_data
    for chart in charts.LIVE_CHARTS:
        notes = list(chart.base(ctx)["layout"].get("annotations") or [])
        for k in range(len(events)):
            notes += (chart.patch(events, k, ctx).get("layout") or {}).get("annotations") or []
        for note in notes:
            if (note.get("font") or {}).get("color"):
                assert note["text"].startswith("■"), (chart.name, note["text"])


@pytest.mark.parametrize("ridge_over_intensity", [0.95, 1.05])
def test_a_prefill_at_the_ridge_is_called_balanced_not_compute_bound(run_data, ridge_over_intensity):
    """A prefill within a tenth of the ridge (a reader saw 14.9 FLOP/byte against a ridge of 14.8) has
    bytes and FLOPs that take about as long: the verdict says neither limit dominates, on either side,
    rather than 'only 39 ms' for its bytes beside 39.0 ms for its FLOPs."""
    import dataclasses

    events, ctx = run_data
    cost = events[0].cost
    intensity = cost["flops"]["total"] / cost["bytes"]["total"]
    bw = 7e10
    ridged = dataclasses.replace(ctx, ceilings=Ceilings(bw, intensity * ridge_over_intensity * bw, None, "test"))
    values = lesson.values_for(events, ridged)
    assert lesson.at_the_ridge(intensity, intensity * ridge_over_intensity)
    assert values["prefill_verdict"].startswith("**So was this prefill compute-bound?** Neither limit dominates:"), values["prefill_verdict"]
    assert "would take only" not in values["prefill_verdict"]
    assert values["prefill_vs_ridge"].startswith("at the ridge")
    assert not lesson.at_the_ridge(intensity, intensity * 1.2) and not lesson.at_the_ridge(intensity, 0.0)


def test_the_prefill_verdict_readings_are_named_decisions():
    """The verdict's parts are chosen as values (lesson.prefill_readings) and worded in
    assets/lesson/readings: side of the ridge, the answer, how near the roof, what closes it."""
    r = lesson.prefill_readings(14.9, 14.8, 28, predicted=True, split=True, mostly_arithmetic=True)
    assert r == {"side": "ridge", "answer": "yes_slow", "timed": "far", "tail": "split"}
    r = lesson.prefill_readings(40.0, 14.8, 60, predicted=True, split=True, mostly_arithmetic=True)
    assert (r["side"], r["answer"], r["timed"]) == ("right", "yes", "near")
    assert lesson.prefill_readings(40.0, 14.8, 20, True, False, True)["answer"] == "held_up"
    assert lesson.prefill_readings(40.0, 14.8, 20, True, True, False)["answer"] == "principle_far"
    assert lesson.prefill_readings(40.0, 14.8, 60, True, True, False)["answer"] == "principle"
    assert lesson.prefill_readings(40.0, 14.8, 60, False, False, True)["tail"] == "unpredicted"
    assert lesson.prefill_readings(5.0, 14.8, 60, True, True, True)["side"] == "left"
    for part, names in (("prefill_answer", ("principle", "principle_far", "held_up", "yes", "yes_slow")),
                        ("prefill_head", ("ridge", "right")), ("prefill_timed", ("near", "far")),
                        ("prefill_tail", ("unpredicted", "held_up")), ("prefill_vs_ridge", ("ridge", "right", "left"))):
        for name in names:
            assert lesson.reading(part, name, {}), (part, name)


def test_the_rest_of_a_step_is_a_named_reading():
    """The median step against its prediction, read as a value (lesson.rest_reading) and worded in
    assets/lesson/readings/rest.*: within 3% (at least 1 ms) it matches; slower in 90% of the steps
    is the whole run; slower otherwise is scattered; below it is faster."""
    assert lesson.rest_reading(80.0, 79.5) == "matches"
    assert lesson.rest_reading(100.0, 97.5) == "matches"  # 2.5 ms, under 3% of 100
    assert lesson.rest_reading(66.0, 53.0, 0.9) == "systematic"
    assert lesson.rest_reading(66.0, 53.0, 0.89) == "scattered"
    assert lesson.rest_reading(74.0, 99.0, 1.0) == "faster"
    for name in ("matches", "systematic", "scattered", "faster"):
        assert "[[" not in lesson.reading("rest", name, {"gap_ms": "1", "within_ms": "1", "share": "90%"})
    assert lesson._left_of_ridge_verdict(5.0, 0.5 * 5.0 * 1e9, 1e9).endswith("not the bytes alone, set its pace.")
    assert lesson._left_of_ridge_verdict(5.0, 5.0 * 1e9, 1e9).endswith(": moving its bytes set its pace.")
