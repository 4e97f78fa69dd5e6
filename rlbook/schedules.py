"""Learning-rate schedules: one function for every loop in the package.

A linear warm-up over ``warmup_steps`` steps, then the rate held constant or decayed linearly or
along a half cosine (Loshchilov & Hutter 2017, "SGDR", arXiv:1608.03983, eq. 5, without restarts)
towards ``floor`` × the peak, reached just after the last step — the shapes of Hugging Face's
``get_linear_schedule_with_warmup`` and ``get_cosine_schedule_with_warmup`` (floor 0). The zoo's
pretraining loop decays to 10 % of its peak; the trainers decay to zero.
"""

from __future__ import annotations

import math

SCHEDULES = ("constant", "linear", "cosine")


def scheduled_lr(lr: float, step: int, steps: int, warmup_steps: int, schedule: str = "constant", *,
                 floor: float = 0.0) -> float:
    """The learning rate of (0-based) ``step`` of ``steps`` under ``schedule`` (see the module docstring)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    decay = 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return lr * (floor + (1.0 - floor) * max(0.0, decay))
