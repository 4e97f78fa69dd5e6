"""One loading function for a shipped zoo model, a real pretrained model, a local folder, or a hub id.

``load_model("arith-base")`` loads the zoo checkpoint shipped inside the package;
``load_model("smollm2-135m-instruct")`` a real pretrained model, built once into the user's cache
(``rlbook.models.pretrained``); ``load_model("path/to/folder")`` a model saved with ``save_pretrained``;
``load_model("Qwen/Qwen2.5-0.5B-Instruct", device="cuda")`` a hub model (downloaded by
``transformers`` the first time, or read from the local cache when offline). All of them go
through ``transformers``' ``from_pretrained``; only where the files come from differs.
"""

from __future__ import annotations

from pathlib import Path

import torch
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from transformers import (AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase,
                          PreTrainedTokenizerFast)
from transformers.models.auto.tokenization_auto import get_tokenizer_config
from transformers.utils import logging as transformers_logging

from rlbook.models.pretrained import PRETRAINED, ensure_pretrained, pretrained_folder

GENERIC_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
ZOO_DIR = Path(__file__).resolve().parent.parent / "zoo" / "models"


def zoo_names() -> list[str]:
    """Names of the zoo models shipped in this installation."""
    if not ZOO_DIR.is_dir():
        return []
    return sorted(p.name for p in ZOO_DIR.iterdir() if (p / "config.json").is_file())


def resolve(name_or_path: str) -> tuple[str, str]:
    """Where ``name_or_path`` comes from: ``("zoo" | "pretrained" | "local" | "hub", location)``.

    Nothing is loaded or built: a pretrained name (``rlbook.models.pretrained.PRETRAINED``) resolves
    to its folder in the cache, which ``load_model`` and ``load_tokenizer`` build on first use.
    """
    if not isinstance(name_or_path, (str, Path)) or not str(name_or_path).strip():
        raise ValueError(f"name_or_path must be a zoo name, a folder or a hub id, got {name_or_path!r}")
    name = str(name_or_path)
    if name in zoo_names():
        return "zoo", str(ZOO_DIR / name)
    if name in PRETRAINED:
        return "pretrained", str(pretrained_folder(name))
    if Path(name).expanduser().is_dir():
        return "local", str(Path(name).expanduser())
    if not _is_hub_id(name):
        raise ValueError(
            f"name_or_path={name!r} is not a zoo model ({', '.join(zoo_names()) or 'none shipped'}), "
            f"a pretrained model ({', '.join(sorted(PRETRAINED))}), an existing folder, "
            "or a hub id of the form 'owner/name'"
        )
    return "hub", name


def _is_hub_id(name: str) -> bool:
    """Whether ``name`` is written like a hub repository id, "owner/name": each part of letters,
    digits, "-", "_" and ".", not starting or ending with "-" or ".", no "--" or ".." (the hub's
    rules, as ``huggingface_hub.utils.validate_repo_id`` checks them). Dots are common
    ("Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.2-1B"), so a dot does not make it a file."""
    if name.count("/") != 1:
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def checkpoint_location(name_or_path: str) -> str:
    """The folder (or hub id) ``from_pretrained`` reads for a zoo name, pretrained name, folder or hub id;
    a pretrained model is built into the cache first. What another library (TRL) is handed."""
    source, location = resolve(name_or_path)
    return str(ensure_pretrained(str(name_or_path))) if source == "pretrained" else location


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """The tokenizer of a zoo model, pretrained model, folder or hub id, with a pad token and left padding
    for sampling."""
    location = checkpoint_location(name_or_path)
    if get_tokenizer_config(location).get("tokenizer_class") in GENERIC_TOKENIZER_CLASSES:
        # A tokenizer saved as a plain tokenizers pipeline (the zoo's character tokenizer) is loaded as
        # exactly that: AutoTokenizer would pick the model family's class (Qwen2Tokenizer) from
        # config.json and rebuild a byte-level pipeline that drops the spaces and newlines.
        tokenizer = PreTrainedTokenizerFast.from_pretrained(location)
    else:
        tokenizer = AutoTokenizer.from_pretrained(location)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_model(name_or_path: str, *, device: str | torch.device | None = None,
               dtype: torch.dtype | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``(model, tokenizer)`` from a zoo name, a pretrained name (built into the cache on first use),
    a local folder or a hub id.

    ``device`` defaults to CPU; ``dtype`` to the checkpoint's own (float32 for the zoo). The
    model is returned in eval mode.
    """
    location = checkpoint_location(name_or_path)
    tokenizer = load_tokenizer(name_or_path)
    kwargs = {"dtype": dtype} if dtype is not None else {}
    # No "Loading weights" bar: it takes well under a second here, and a notebook stores the bar as a
    # widget whose plain-text form reads "0/50" forever, as if the loading had never run.
    bars_were_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(location, **kwargs)
    finally:
        if bars_were_on:
            transformers_logging.enable_progress_bar()
    model.to(torch.device(device) if device is not None else torch.device("cpu"))
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model, tokenizer
