"""The what-if page through Streamlit's AppTest: settings, link, bad uploads, never a traceback."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from core import whatif
from core.hardware import load_hardware
from core.spec import load_model_preset
from tests.apptest import open_view


def _app(**params: str) -> AppTest:
    return open_view("whatif", query=params)


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_default_page_answers_with_predicted_figures():
    at = _app()
    m = _metrics(at)
    assert set(m) == {"Time to first token", "Time per output token", "Tokens per second", "Whole answer", "Memory"}
    ans = whatif.answer(load_model_preset("llama-3.1-8b"), load_hardware("h100-sxm"), whatif.Scenario())
    assert m["Time per output token"] == f"{ans.tpot_s * 1e3:.2f} ms"  # 6.43 ms: under 10 ms, two decimals
    assert len(at.get("plotly_chart")) == 5
    text = "".join(md.value for md in at.markdown)
    assert "predicted" in text and "counted" in text


def test_moving_a_setting_moves_the_answer_and_the_link():
    at = _app()
    before = _metrics(at)
    at.number_input(key="wi_batch").set_value(64).run()
    after = _metrics(at)
    assert after["Time per output token"] != before["Time per output token"]
    assert after["Tokens per second"] != before["Tokens per second"]
    assert at.query_params["batch"] in ("64", ["64"])
    at.selectbox(key="wi_model").set_value("llama-3.1-70b").run()
    assert not at.exception
    assert "devices" in "".join(md.value for md in at.markdown)  # 70B in bf16 does not fit one H100


def test_a_link_opens_its_settings_and_a_bad_link_still_opens_a_page():
    at = _app(model="llama-3.1-70b", hw="a100-80gb", batch="16", w="int4")
    assert at.selectbox(key="wi_model").value == "llama-3.1-70b"
    assert at.number_input(key="wi_batch").value == 16 and at.selectbox(key="wi_weight_dtype").value == "int4"
    bad = _app(model="../../etc/passwd", batch="lots")
    assert bad.selectbox(key="wi_model").value == "llama-3.1-8b"
    assert len(bad.info) == 2 and len(bad.metric) == 5


def test_settings_beyond_the_context_window_are_a_message_not_a_traceback():
    at = _app(model="gpt2", prompt="1000", gen="100")
    assert not at.exception
    assert any("context window" in e.value for e in at.error)
    assert at.number_input(key="wi_prompt_len").value == 1000  # the reader's settings are kept



def test_speculative_decoding_from_the_link():
    at = _app(model="llama-3.1-70b", draft="llama-3.1-8b", gamma="6", alpha="0.8")
    text = "".join(md.value for md in at.markdown)
    assert "Speculative decoding" in text and "γ = 6" in text and "α = 0.80" in text
    plain = "".join(md.value for md in _app().markdown)
    assert "**Speculative decoding**" not in plain  # no draft model: plain decode only


def test_tensor_parallel_link_prices_each_device():
    at = _app(model="llama-3.1-70b", tp="4", batch="8", prompt="2048")
    text = "".join(md.value for md in at.markdown)
    assert "**Split over 4 devices**" in text and "NVLink" in text
    assert "Memory per device" in _metrics(at)


def test_a_mixture_of_experts_shows_its_experts_read_growing_with_the_batch():
    """Mixtral on two H100s: the answer names its active parameters and the experts a decode step
    reads at the chosen batch, and a sixth chart draws that number from k to E against the batch."""
    import json

    one, crowd = _app(model="mixtral-8x7b", tp="2", batch="1"), _app(model="mixtral-8x7b", tp="2", batch="32")
    for at, read in ((one, "2.0"), (crowd, f"{8 * (1 - 0.75 ** 32):.1f}")):
        text = "".join(md.value for md in at.markdown)
        assert "**Mixture of experts**" in text and "12.9 billion of the 46.7 billion" in text
        assert f"**{read} of the 8 experts** per layer" in text, text
        charts = at.get("plotly_chart")
        assert len(charts) == 6
        fig = json.loads(charts[-1].proto.spec)
        assert fig["layout"]["title"]["text"].startswith("Mixture of experts")
        curve = fig["data"][0]["y"]
        assert curve[0] == 2.0 and curve == sorted(curve) and curve[-1] > 7.99
    dense = "".join(md.value for md in _app(model="llama-3.1-8b").markdown)
    assert "Mixture of experts" not in dense


def test_latent_attention_says_what_it_caches_and_which_form_is_priced():
    """DeepSeek-V3 on 8 H100s in fp8: the answer names the latent cache (70,272 bf16 bytes per token
    against 4,997,120 for full heads), says the serving engines' form is the one priced, and gives
    the typical step's FLOPs both ways, the transformers form the larger."""
    import re

    at = _app(model="deepseek-v3", hw="h100-sxm", tp="8", w="fp8", kv="bf16", batch="4")
    assert not at.exception
    text = "".join(md.value for md in at.markdown)
    assert "**Multi-head latent attention**" in text, text
    assert "70,272 bytes per token" in text and "4,997,120" in text
    assert "as serving engines (vLLM, SGLang) run it" in text
    serving, expanded = (float(x.replace(",", "")) for x in
                         re.search(r"does ([\d,.]+) GFLOPs that way;.*?would do ([\d,.]+)", text).groups())
    assert expanded > 2 * serving
    assert "Multi-head latent attention" not in "".join(md.value for md in _app(model="mixtral-8x7b").markdown)
