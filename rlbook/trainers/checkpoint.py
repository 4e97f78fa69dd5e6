"""Atomic checkpoints: a training run can stop at any moment and resume to the same numbers.

Layout of a checkpoint folder ``DIR``::

    DIR/step_00000002/   one complete checkpoint: <name>.pt files (state dicts) and state.json
    DIR/latest           the name of the newest complete checkpoint ("step_00000002")

Atomicity: a checkpoint is written into a temporary folder beside it and renamed into place with
``os.replace`` (atomic on one file system), and only then is ``latest`` replaced, itself through
a temporary file and ``os.replace``. A crash at any moment leaves ``latest`` naming a complete
checkpoint. Older checkpoints are removed after the new one is in place (``keep`` newest kept).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

__all__ = ["save_checkpoint", "load_checkpoint", "rng_state", "set_rng_state"]

LATEST = "latest"
STATE_FILE = "state.json"


def save_checkpoint(directory, step: int, tensors: dict, meta: dict, *, keep: int = 1) -> Path:
    """Write ``tensors`` (name → anything ``torch.save`` takes) and ``meta`` (JSON) as step ``step``.

    Returns the checkpoint's folder ``directory/step_<step>``.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:08d}"
    staging = Path(tempfile.mkdtemp(prefix=".writing_", dir=root))
    for name, value in tensors.items():
        torch.save(value, staging / f"{name}.pt")
    (staging / STATE_FILE).write_text(json.dumps(meta, indent=1))
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    _write_atomically(root / LATEST, final.name)
    _remove_old(root, keep)
    return final


def load_checkpoint(path) -> tuple[dict, dict]:
    """Read a checkpoint: ``path`` is a checkpoint folder or a root holding ``latest``.

    Returns ``(tensors, meta)`` as they were given to ``save_checkpoint``.
    """
    folder = Path(path)
    if (folder / LATEST).is_file():
        folder = folder / (folder / LATEST).read_text().strip()
    if not (folder / STATE_FILE).is_file():
        raise ValueError(f"path must be a checkpoint folder or a folder with a '{LATEST}' file, got {str(path)!r}")
    meta = json.loads((folder / STATE_FILE).read_text())
    tensors = {file.stem: torch.load(file, weights_only=False) for file in sorted(folder.glob("*.pt"))}
    return tensors, meta


def rng_state() -> dict:
    """The global random states of Python, NumPy and torch."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    """Restore what ``rng_state`` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def _write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(prefix=".latest_", dir=path.parent)
    with os.fdopen(handle, "w") as file:
        file.write(text)
    os.replace(temporary, path)


def _remove_old(root: Path, keep: int) -> None:
    checkpoints = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in checkpoints[:-keep] if keep > 0 else []:
        shutil.rmtree(old)
