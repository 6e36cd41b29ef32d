"""Preparation of the embedded model: atomic writes, damage detection, faithful logits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core import prepare, settings


@pytest.fixture(scope="module")
def prepared() -> Path:
    folder = prepare.prepared_dir()
    problem = prepare.verify_prepared(folder)
    if problem is not None:
        pytest.fail(f"embedded model {problem}: run `make prepare` first")
    return folder


def test_prepared_folder_is_complete(prepared):
    assert prepare.verify_prepared(prepared) is None
    manifest = prepare.read_manifest(prepared)
    assert manifest["weights_source"] == prepare.WEIGHTS_SOURCE_GGUF
    assert manifest["model_id"] == settings.EMBEDDED_MODEL_ID
    names = set(manifest["files"])
    assert {"config.json", "tokenizer.json", "chat_template.jinja", prepare.WEIGHTS_INDEX} <= names
    assert any(n.endswith(".safetensors") for n in names)
    assert not any(n.endswith((".bin", ".pt", ".pth", ".pkl")) for n in names)


def _copy(prepared: Path, tmp_path: Path) -> Path:
    target = tmp_path / prepared.name
    shutil.copytree(prepared, target)
    return target


def test_missing_manifest_means_interrupted(prepared, tmp_path):
    copy = _copy(prepared, tmp_path)
    (copy / prepare.MANIFEST_NAME).unlink()
    assert "interrupted" in prepare.verify_prepared(copy)


def test_truncated_shard_is_detected(prepared, tmp_path):
    copy = _copy(prepared, tmp_path)
    shard = sorted(copy.glob("*.safetensors"))[0]
    with open(shard, "r+b") as fh:
        fh.truncate(shard.stat().st_size // 2)
    assert "truncated" in prepare.verify_prepared(copy)


def test_corrupt_header_with_right_size_is_detected(prepared, tmp_path):
    copy = _copy(prepared, tmp_path)
    shard = sorted(copy.glob("*.safetensors"))[0]
    with open(shard, "r+b") as fh:
        fh.write(b"\xff" * 16)
    assert "unreadable" in prepare.verify_prepared(copy)


def test_interrupted_preparation_is_rebuilt_in_a_child(prepared, tmp_path):
    """A half-written folder (no manifest) plus a leftover partial folder are replaced by a good copy,
    built by `python -m core prepare` in a child process (as the app's server builds it), whose
    progress arrives here in order."""
    gguf = prepare.locate_gguf()
    if gguf is None:
        pytest.fail("no GGUF source found: run `make prepare` first")
    cache = tmp_path / "cache"
    half = cache / settings.PREPARED_DIR_NAME
    half.mkdir(parents=True)
    (half / "config.json").write_text("{}")
    leftover = cache / (settings.PREPARED_DIR_NAME + ".partial-xyz")
    leftover.mkdir()
    prepare.fetched_gguf(cache).parent.mkdir(parents=True)
    prepare.fetched_gguf(cache).symlink_to(gguf)  # the child's source: a GGUF fetched earlier
    messages = []
    folder = prepare.ensure_prepared(lambda f, m: messages.append((f, m)), cache=cache, in_child=True)
    assert folder == half
    assert prepare.verify_prepared(folder) is None
    assert not leftover.exists()
    assert any("rebuilding" in m for _, m in messages)
    fractions = [f for f, _ in messages]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0  # progress only moves forward
    same = json.loads((folder / prepare.WEIGHTS_INDEX).read_text())
    ref = json.loads((prepared / prepare.WEIGHTS_INDEX).read_text())
    assert same["weight_map"].keys() == ref["weight_map"].keys()


def test_a_child_that_finds_no_source_says_why(tmp_path, monkeypatch):
    """No package, no fetched GGUF, no index to fetch from: the child's own reason comes back."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(prepare.ModelUnavailable, match="make prepare"):
        prepare.ensure_prepared(cache=tmp_path, in_child=True)


def test_no_source_gives_the_command_to_run(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "find_installed_gguf", lambda: None)
    with pytest.raises(prepare.ModelUnavailable, match="make prepare"):
        prepare.ensure_prepared(cache=tmp_path, allow_download=False)


@pytest.mark.model
@pytest.mark.slow
def test_logits_match_a_direct_gguf_load(embedded_model):
    """The converted weights give the logits transformers' own GGUF loader gives."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf = prepare.locate_gguf()
    if gguf is None:
        pytest.fail("no GGUF source found: run `make prepare` first")
    reference = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=torch.float32).eval()
    tok = embedded_model.tokenizer
    for prompt in ["The capital of France is", "def fibonacci(n):", "Les chats et les chiens 🐱"]:
        ids = torch.tensor([tok(prompt)["input_ids"]])
        with torch.inference_mode():
            ours = embedded_model.model(input_ids=ids).logits
            theirs = reference(input_ids=ids).logits
        assert ours.shape == theirs.shape
        assert torch.allclose(ours, theirs, atol=1e-4, rtol=1e-4), (prompt, (ours - theirs).abs().max())
        assert ours[0, -1].argmax() == theirs[0, -1].argmax()
