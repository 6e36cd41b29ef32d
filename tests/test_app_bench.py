"""app.bench's arithmetic, without a browser: redraw counting, run rates from the server log."""

from __future__ import annotations

from app.devtools import bench


def _page_data(afterplot):
    return {"afterplot": afterplot, "drawMs": {"kv": [30.0, 50.0, 40.0], "latency": []},
            "busy": {"TaskDuration": 0.8, "ScriptDuration": 0.2, "LayoutDuration": 0.05, "RecalcStyleDuration": 0.04},
            "server_cores": 0.9, "available": 12, "tiles": ["TTFT\n400 ms\nmeasured", "Decode speed\n11.5 tok/s\nx"]}


def test_summary_counts_redraws_that_added_points_over_their_span():
    plots = [{"t": 1000.0 + 100 * i, "chart": "kv" if i % 2 else "latency", "points": i, "run": 3}
             for i in range(11)]
    plots.append({"t": 5000.0, "chart": "kv", "points": 99, "run": None})  # before the run: ignored
    out = bench._summary(_page_data(plots))
    assert out["ui_updates_per_s"] == 11.0  # 11 redraws over 1.0 s
    assert out["kv_updates_per_s"] == round(5 / 0.8, 2) and out["traffic_updates_per_s"] is None
    assert out["kv_draw_ms_median"] == 40.0 and out["kv_draws"] == 3 and "latency_draw_ms_median" not in out
    assert out["browser_main_thread_busy"] == 0.8 and out["browser_script_share"] == 0.2
    assert out["page_decode_tokens_per_s"] == 11.5 and out["tokens"] == 12


def test_wall_rates_come_from_the_server_log_in_order(tmp_path):
    log = tmp_path / "bench.log"
    log.write_text("noise\nPDLAB_RUN_WALL_TPS 12.5000\nmore\nPDLAB_RUN_WALL_TPS 11.2500\n")
    assert bench._server_wall_rates(log) == [12.5, 11.25]
    assert bench._server_wall_rates(tmp_path / "missing.log") == []
