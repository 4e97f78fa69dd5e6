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
of its peak; the trainers decay to zero.
"""

from __future__ import annotations

from transformers import get_scheduler

from rlbook._checks import check_choice, check_int

__all__ = ["SCHEDULES", "make_scheduler"]

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
