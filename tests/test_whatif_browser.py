"""The what-if page in Chromium: every chart moves when a setting moves, a bad config.json upload is a
message that keeps the model, a good one is priced. Screenshots go to artifacts/ (look at them)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ARTIFACTS

pytestmark = [pytest.mark.browser]

CHARTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(
    gd => JSON.stringify((gd.data || []).map(t => [t.x, t.y])) + JSON.stringify(gd.layout.shapes || []))"""


def _signatures(page) -> list[str]:
    return page.evaluate(CHARTS_JS)


def _wait_for_charts(page, count: int = 5) -> None:
    page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot').length >= {count}", timeout=120_000)


def _wait_until_all_differ(page, before: list[str]) -> None:
    page.wait_for_function(
        """([js, before]) => { const now = eval(js)();
            return now.length === before.length && now.every((s, i) => s !== before[i]); }""",
        arg=[CHARTS_JS, before], timeout=60_000)


def test_every_chart_follows_the_settings(app_server, page):
    page.goto(f"{app_server}/whatif")
    _wait_for_charts(page)
    assert page.locator("[data-testid=stException]").count() == 0
    before = _signatures(page)
    assert len(before) == 5
    batch = page.get_by_label("Batch (sequences decoded together)")
    batch.fill("64")
    batch.press("Enter")
    _wait_until_all_differ(page, before)
    assert "batch=64" in page.url
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "whatif-batch64.png"), full_page=True)


def test_config_upload_bad_then_good(app_server, page, tmp_path):
    page.goto(f"{app_server}/whatif")
    _wait_for_charts(page)
    upload = page.locator("[data-testid=stFileUploaderDropzoneInput]")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "bloom", "hidden_size": 64}))
    upload.set_input_files(str(bad))
    page.get_by_text("cannot be priced").wait_for(timeout=60_000)
    page.get_by_text("The previous model is still selected").wait_for()
    assert page.get_by_text("llama-3.1-8b", exact=False).count() >= 1  # the summary names the model
    good = tmp_path / "config.json"
    good.write_text(json.dumps({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
                                "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
                                "vocab_size": 32000, "max_position_embeddings": 2048,
                                "_name_or_path": "my-tiny-llama"}))
    upload.set_input_files(str(good))
    page.get_by_text("my-tiny-llama", exact=False).first.wait_for(timeout=60_000)
    _wait_for_charts(page)
    assert page.locator("[data-testid=stException]").count() == 0
    assert page.get_by_text("cannot be priced").count() == 0
    page.screenshot(path=str(ARTIFACTS / "whatif-uploaded.png"), full_page=True)
