"""Run-time knobs shared by every notebook, test and trainer.

``RLBOOK_SIZE`` chooses how big a run is: ``full`` (the default, what a reader gets) or ``ci``
(the smallest size that still shows every claim a lesson asserts; ``make test`` sets it).
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

SIZES = ("ci", "full")


def size() -> str:
    """The current run size, read from the ``RLBOOK_SIZE`` environment variable."""
    value = os.environ.get("RLBOOK_SIZE", "full").strip().lower()
    if value not in SIZES:
        raise ValueError(f"RLBOOK_SIZE must be one of {SIZES}, got {value!r}")
    return value


def is_ci() -> bool:
    """True when running at the CI size."""
    return size() == "ci"


def pick(*, ci, full):
    """Return ``ci`` at the CI size and ``full`` otherwise: ``steps = pick(ci=20, full=200)``."""
    return ci if is_ci() else full


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch so that the same seed gives the same numbers."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def default_device() -> torch.device:
    """CUDA when available, else CPU (the book's default tier)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
