"""What the cache and batching panels show before a press: the server's last measurement (a thread-safe
store of the newest complete result of each kind) and the recordings bundled in assets/experiments/
(checked when loaded: a bad or missing file is no recording, never a traceback), with their labels."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import threading

import pytest

from app.shared import experiment_results as er
from app.shared.jobs import ModelJob, RunQueue

UTC = dt.UTC


def _compare(n: int = 4, done: int | None = None) -> dict:
    done = n if done is None else done
    return {"prompt_len": 20, "n_tokens": n,
            "modes": {"dynamic": [100.0] + [40.0] * (done - 1), "static": [101.0] + [41.0] * (done - 1),
                      "none": [100.0 + 5 * k for k in range(done)]},
            "predicted": {"dynamic": [90.0] * done, "static": [None] * done, "none": [95.0] * done}}


def _batching(batches=(1, 2, 4)) -> dict:
    rows = [{"batch": b, "decode step ms (measured, median)": 50.0 + 2 * b, "decode step ms (predicted)": 52.0 + 2 * b,
             "tokens/s (measured)": round(b * 1000 / (50 + 2 * b), 1), "tokens/s (predicted)": 10.0 * b,
             "prefill ms (measured)": 80.0 * b} for b in batches]
    return {"rows": rows, "batches": list(batches), "steps": 3, "prompt_len": 30,
            "predicted": [{"batch": b, "step ms (predicted)": 52.0 + 2 * b, "tokens/s (predicted)": 10.0 * b}
                          for b in (1, 2, 4, 8)],
            "compute_bound_from": 38.0,
            "roofline": {"ridge_flop_per_byte": 11.1, "decode_intensity": 0.5, "batch": 22.2}}


def _at(minute: int) -> dt.datetime:
    return dt.datetime(2026, 12, 3, 9, minute, tzinfo=UTC)


# --- completeness -----------------------------------------------------------------------------------

def test_only_complete_results_count():
    assert er.complete("compare", _compare())
    assert not er.complete("compare", _compare(done=2))  # stopped after two forwards of four
    partial = _compare()
    del partial["modes"]["static"]
    assert "modes must be exactly" in er.problem("compare", partial)
    bad = _compare()
    bad["modes"]["none"][1] = float("nan")
    assert not er.complete("compare", bad)
    assert er.complete("batching", _batching())
    half = _batching()
    half["rows"].pop()  # batch 4 never measured
    assert "one row for every batch size" in er.problem("batching", half)
    assert not er.complete("batching", {**_batching(), "roofline": {"batch": -1}})
    assert er.problem("nonsense", {}) and er.problem("compare", [1, 2]) == "the result is not an object"


# --- the store --------------------------------------------------------------------------------------

def test_store_keeps_the_latest_complete_result_of_each_kind():
    store = er.ResultStore()
    assert store.latest("compare") is None
    assert store.offer("compare", _compare(4), "cpu A", _at(1))
    assert store.offer("compare", _compare(6), "cpu A", _at(2))  # newer wins
    assert store.latest("compare").result["n_tokens"] == 6
    assert not store.offer("compare", _compare(8), "cpu A", _at(0))  # an older one never replaces a newer
    assert not store.offer("compare", _compare(8, done=3), "cpu A", _at(5))  # a partial one is never kept
    assert store.latest("compare").result["n_tokens"] == 6
    assert store.offer("batching", _batching(), "cpu A", _at(3))
    held = store.latest("batching")
    assert held.source == "server" and held.machine == "cpu A" and held.measured_at == _at(3)
    assert store.latest("compare").kind == "compare"
    store.clear()
    assert store.latest("compare") is None and store.latest("batching") is None


def test_store_copies_the_result_and_holds_one_per_kind():
    store = er.ResultStore()
    result = _compare()
    store.offer("compare", result, "cpu", _at(1))
    result["modes"]["dynamic"][0] = 1e9  # the job's dict changing later does not change what is shown
    assert store.latest("compare").result["modes"]["dynamic"][0] == 100.0
    for k in range(50):
        store.offer("compare", _compare(), "cpu", _at(2) + dt.timedelta(seconds=k))
    assert len(store._latest) == 1  # memory stays flat run after run


def test_store_is_thread_safe():
    store = er.ResultStore()
    seen_bad: list = []
    base = _at(0)

    def writer(w: int) -> None:
        for k in range(200):
            store.offer("compare", _compare(), f"cpu {w}", base + dt.timedelta(microseconds=w * 1000 + k))
            got = store.latest("compare")
            if got is None or not er.complete("compare", got.result):
                seen_bad.append(got)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not seen_bad
    newest = base + dt.timedelta(microseconds=7 * 1000 + 199)
    assert store.latest("compare").measured_at == newest and store.latest("compare").machine == "cpu 7"


def test_record_finished_keeps_only_done_jobs(monkeypatch):
    store = er.ResultStore()
    monkeypatch.setattr(er, "STORE", store)
    assert not er.record_finished("compare", "stopped", _compare())
    assert not er.record_finished("compare", "done", _compare(done=1))
    assert er.record_finished("compare", "done", _compare())
    held = store.latest("compare")
    assert held is not None and held.machine  # this server's CPU in words


class _Finishing(ModelJob):
    kind = "probe"

    def __init__(self, queue: RunQueue) -> None:
        super().__init__(queue)
        self.seen: list[str] = []

    def work(self) -> None:
        pass

    def on_finish(self) -> None:
        self.seen.append(self.status)


def test_a_job_calls_on_finish_once_with_its_final_status():
    job = _Finishing(RunQueue()).start()
    job.join(10)
    assert job.seen == ["done"]


def test_the_page_jobs_hand_a_complete_result_to_the_store(tiny_model, monkeypatch):
    from app.views.live.jobs import BatchJob, CompareJob

    store = er.ResultStore()
    monkeypatch.setattr(er, "STORE", store)
    q = RunQueue()
    compare = CompareJob(q, tiny_model, [1, 70, 71, 72], 3).start()
    compare.join(120)
    assert compare.status == "done", compare.error
    assert store.latest("compare").result == compare.result
    batching = BatchJob(q, tiny_model, batches=(1, 2), steps=2).start()
    batching.join(120)
    assert batching.status == "done", batching.error
    held = store.latest("batching")
    assert held.result["batches"] == [1, 2] and [r["batch"] for r in held.result["rows"]] == [1, 2]


# --- the bundled recordings -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", er.KINDS)
def test_the_bundled_recordings_load_and_say_where_they_were_made(kind):
    m = er.load_bundled(kind)
    assert m is not None, f"assets/experiments/{kind}.json is missing or malformed: python -m scripts.record_experiments"
    assert m.source == "bundled" and m.kind == kind and er.complete(kind, m.result)
    p = m.provenance
    assert p["machine"]["cpu_model"] and p["machine"]["cpu_count"] >= 1 and p["machine"]["torch"]
    assert p["model"]["id"] and p["model"]["weights_source"] and p["model"]["dtype"]
    assert p["prompt"]["text"] == m.prompt and p["prompt"]["tokens"] == m.result["prompt_len"]
    assert dt.date.fromisoformat(p["recorded"]["date"]) == m.measured_at.date()
    if kind == "batching":  # the figures the panel's text quotes are in the file
        assert m.result["compute_bound_from"] and m.result["roofline"]["batch"] and m.result["predicted"]


def _copy(tmp_path, kind: str):
    shutil.copy(er.EXPERIMENTS_DIR / f"{kind}.json", tmp_path / f"{kind}.json")
    return tmp_path / f"{kind}.json"


def test_a_good_copy_loads_and_a_missing_file_is_none(tmp_path):
    _copy(tmp_path, "compare")
    assert er.load_bundled("compare", tmp_path) is not None
    assert er.load_bundled("batching", tmp_path) is None  # not there: no recording, no exception


@pytest.mark.parametrize("damage, why", [
    (lambda d: "{not json", "not JSON"),
    (lambda d: json.dumps([d]), "not a JSON object"),
    (lambda d: json.dumps({**d, "format": 99}), "format"),
    (lambda d: json.dumps({**d, "kind": "batching"}), "a recording of"),
    (lambda d: json.dumps({**d, "machine": {}}), "cpu_model"),
    (lambda d: json.dumps({**d, "recorded": {"at": "yesterday"}}), "not a date"),
    (lambda d: json.dumps({**d, "recorded": {"at": "2026-12-03T08:00:00"}}), "time zone"),
    (lambda d: json.dumps({**d, "prompt": {}}), "prompt.text"),
    (lambda d: json.dumps({**d, "result": {**d["result"], "modes": {"dynamic": [1.0]}}}), "result:"),
    (lambda d: " " * (er.MAX_FILE_BYTES + 1), "over"),
])
def test_a_malformed_recording_is_refused_with_a_reason(tmp_path, damage, why):
    path = _copy(tmp_path, "compare")
    text = damage(json.loads(path.read_text(encoding="utf-8")))
    with pytest.raises(er.RecordingError, match=why):
        er.parse_recording("compare", text)
    path.write_text(text, encoding="utf-8")
    assert er.load_bundled("compare", tmp_path) is None


def test_a_changed_file_is_read_again(tmp_path):
    path = _copy(tmp_path, "compare")
    assert er.load_bundled("compare", tmp_path) is not None
    path.write_text("{broken", encoding="utf-8")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert er.load_bundled("compare", tmp_path) is None


def test_shown_before_press_prefers_the_server_measurement(monkeypatch, tmp_path):
    store = er.ResultStore()
    monkeypatch.setattr(er, "STORE", store)
    _copy(tmp_path, "compare")
    assert er.shown_before_press("compare", tmp_path).source == "bundled"
    assert er.shown_before_press("batching", tmp_path) is None  # no file and nothing measured: button only
    store.offer("compare", _compare(), "cpu", _at(1))
    assert er.shown_before_press("compare", tmp_path).source == "server"


# --- the label line ---------------------------------------------------------------------------------

def test_labels_say_where_and_when():
    bundled = er.Measurement("compare", _compare(), "bundled", _at(7), er.machine_words("Intel(R) Xeon(R)", 2), "Hi")
    assert er.label(bundled) == ("Recorded on Intel(R) Xeon(R) with 2 vCPUs, 3 December 2026: not your run, "
                                 "and speeds vary between sessions")
    server = er.Measurement("compare", _compare(), "server", _at(7), "cpu")
    assert er.label(server, now=_at(30)) == ("Measured on this server at 09:07 UTC by a reader's earlier run; press "
                                             "the button to measure again")
    assert "09:07 UTC on 3 December 2026" in er.label(server, now=_at(7) + dt.timedelta(days=1))
    yours = er.yours("compare", _compare(), _at(8))
    assert er.label(yours, now=_at(9)).startswith("Measured just now on this server (your run")
    assert er.machine_words(None, None) == "an unnamed CPU"
