"""Learning-rate schedules: every training loop in the package builds its scheduler here.

A linear warm-up over ``warmup_steps`` optimizer steps, then the rate held constant, or decayed
linearly, or along a half cosine (Loshchilov & Hutter 2017, "SGDR", arXiv:1608.03983, eq. 5,
without restarts) to ``min_lr_rate`` × the peak at the end of ``steps``. With progress
p = (t − warmup_steps) / (steps − warmup_steps) after the warm-up, the multiplier of the peak rate
at step t is

    warm-up     t / warmup_steps                                  (t < warmup_steps)
    constant    1
    linear      1 − p
    cosine      min_lr_rate + (1 − min_lr_rate) · ½ (1 + cos π p)

These are Hugging Face's schedulers (``transformers.get_scheduler``: "constant_with_warmup",
"linear", "cosine_with_min_lr"), the ones TRL's trainers use, so a run here and a run through TRL
see the same rates. Each is a ``torch.optim.lr_scheduler.LambdaLR``: call ``scheduler.step()``
after each ``optimizer.step()``; its ``state_dict()`` is plain numbers, so a checkpoint stores it
as JSON. As in Hugging Face's, step 0 of a warm-up has rate 0. The zoo's pretraining decays to 10 %
of its peak (``recorded_lr``, kept as the
shipped checkpoints were built with it; ``RecordedSchedule`` steps it); the trainers decay to zero.
"""

from __future__ import annotations

import math

from transformers import get_scheduler

from rlbook._checks import check_choice, check_int

__all__ = ["SCHEDULES", "RecordedSchedule", "make_scheduler", "recorded_lr"]

SCHEDULES = ("constant", "linear", "cosine")
_HUGGING_FACE_NAMES = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine_with_min_lr"}


def make_scheduler(optimizer, schedule: str = "constant", *, steps: int | None = None, warmup_steps: int = 0,
                   min_lr_rate: float = 0.0):
    """The ``schedule`` ("constant", "linear" or "cosine") of ``optimizer``'s learning rate over ``steps`` steps.

    ``min_lr_rate`` is where the cosine ends, as a fraction of the peak. A constant schedule needs
    no step budget (``steps`` may be None); the decaying ones do.
    """
    check_choice("schedule", schedule, SCHEDULES)
    check_int("warmup_steps", warmup_steps, minimum=0)
    if schedule != "constant":
        check_int("steps", steps, minimum=1)
    if not 0.0 <= min_lr_rate <= 1.0:
        raise ValueError(f"min_lr_rate must be in [0, 1], got {min_lr_rate}")
    if min_lr_rate and schedule != "cosine":
        raise ValueError(f"min_lr_rate is the floor of the cosine schedule; schedule {schedule!r} has none")
    extra = {"min_lr_rate": min_lr_rate} if schedule == "cosine" else None
    return get_scheduler(_HUGGING_FACE_NAMES[schedule], optimizer, num_warmup_steps=warmup_steps,
                         num_training_steps=steps, scheduler_specific_kwargs=extra)


def recorded_lr(lr: float, step: int, *, steps: int, warmup_steps: int, floor: float = 0.1) -> float:
    """The zoo's learning rate at (0-based) ``step``, as the shipped checkpoints were built with it.

    lr · (t + 1) / warmup_steps during the warm-up, then a half cosine (Loshchilov & Hutter 2017,
    arXiv:1608.03983, eq. 5) from lr down to ``floor`` · lr with progress
    p = (t − warmup_steps) / (steps − warmup_steps). Every trainer uses
    ``rlbook.schedules.make_scheduler`` (Hugging Face's schedulers) instead; this one differs in the
    warm-up, where Hugging Face's rate starts at 0, and in how the product is rounded. It is kept,
    operation for operation, so that ``python -m rlbook.zoo build`` reproduces the shipped
    checkpoints bit for bit.
    """
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    return lr * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


class RecordedSchedule:
    """``recorded_lr`` as a scheduler: sets every group's rate to ``recorded_lr(peak, t, ...)`` for the
    coming (0-based) step t, at construction (t = 0) and after each ``step()``.

    It writes the rate itself rather than scaling a base rate (as ``LambdaLR`` does), so the rates
    are the very floats the zoo's checkpoints were trained with. ``state_dict()`` is plain numbers.
    """

    def __init__(self, optimizer, lr: float, *, steps: int, warmup_steps: int, floor: float = 0.1):
        check_int("steps", steps, minimum=1)
        check_int("warmup_steps", warmup_steps, minimum=0)
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"floor must be in [0, 1], got {floor}")
        self.optimizer, self.lr, self.steps, self.warmup_steps, self.floor = optimizer, lr, steps, warmup_steps, floor
        self.last_step = 0
        self._apply()

    def _apply(self) -> None:
        rate = recorded_lr(self.lr, self.last_step, steps=self.steps, warmup_steps=self.warmup_steps, floor=self.floor)
        for group in self.optimizer.param_groups:
            group["lr"] = rate

    def step(self) -> None:
        self.last_step += 1
        self._apply()

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        return {"last_step": self.last_step, "lr": self.lr, "steps": self.steps, "warmup_steps": self.warmup_steps,
                "floor": self.floor}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` returned (the schedule's settings must match)."""
        own = self.state_dict()
        if not isinstance(state, dict) or set(state) != set(own):
            raise ValueError(f"state must be a RecordedSchedule's state_dict ({sorted(own)}), got {state!r}")
        differences = [key for key in own if key != "last_step" and state[key] != own[key]]
        if differences:
            raise ValueError(f"the saved schedule differs from this one in {differences}")
        self.last_step = check_int("the saved last_step", state["last_step"], minimum=0)
        self._apply()
