"""The one training-loop scaffold and the one optimiser configuration that every trainer runs through.

Every loop of the book — online RL (``OnlineTrainer``, ``AsyncTrainer``), preference optimisation
(``PreferenceTrainer``), the reward model (``train_reward_model``), SFT and the zoo's pretraining
(``train_on_chats``) — differs only in what one step does. What is around the step is here, once:

- ``run_steps``: the progress bar (tqdm, showing the history's last row), the live plot under it
  (``rlbook.trainers.live``), the ``History`` rows, and a checkpoint every ``checkpoint_every``
  steps and after the last one;
- ``save_run`` / ``restore_run``: checkpoint and resume (``rlbook.trainers.checkpoint``): models,
  optimizers, schedulers, random states and the history, with the run's settings checked against
  the saved ones before anything is loaded;
- ``OptimConfig``: AdamW (Loshchilov & Hutter 2019, arXiv:1711.05101), its learning-rate schedule
  (``rlbook.schedules``) and the gradient clipping, as one small value; ``build`` makes the
  optimizer and scheduler for given parameters and ``step`` takes one clipped step.

Each trainer keeps its own defaults (they are different on purpose, see ``OptimConfig``), but they
are now data in one place rather than arguments scattered over five loops.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch
from tqdm.auto import tqdm

from rlbook._checks import check_choice, check_int, check_positive, check_settings
from rlbook.schedules import SCHEDULES, RecordedSchedule, make_scheduler
from rlbook.trainers.checkpoint import (Checkpoint, load_checkpoint, restore_model, restore_optimizer, rng_state,
                                       save_checkpoint, set_rng_state)
from rlbook.trainers.history import History
from rlbook.trainers.live import live_plot
from rlbook.update import optimizer_step

__all__ = ["OPTIM_SCHEDULES", "LoopConfig", "OptimConfig", "check_checkpoint_every", "check_settings_match",
           "checkpoint_of", "postfix_of", "restore_parts", "restore_run", "run_steps", "save_run"]

# "zoo": ``rlbook.schedules.recorded_lr``, the next-token loop's own warm-up and cosine to
# ``min_lr_ratio`` of the peak (the shipped zoo checkpoints were trained with it).
OPTIM_SCHEDULES = (*SCHEDULES, "zoo")


@dataclass(frozen=True)
class OptimConfig:
    """AdamW, its learning-rate schedule and gradient clipping: every loop's optimiser, as data.

    - ``lr``: the peak learning rate; ``betas``, ``weight_decay``: AdamW's (eps is torch's 1e-8).
    - ``schedule``: "constant", "linear" or "cosine" after a linear warm-up of ``warmup`` steps
      (Hugging Face's schedulers, ``rlbook.schedules.make_scheduler``; the cosine ends at
      ``min_lr_ratio`` × ``lr``), or "zoo" (``rlbook.schedules.recorded_lr``: the warm-up starts at
      lr / warmup rather than 0 and the cosine ends at ``min_lr_ratio`` × ``lr``).
    - ``grad_clip``: the gradient's norm is clipped to it before each step (None: no clipping).

    The defaults of each loop, kept exactly as they were when each loop was written:

    - ``online`` (``OnlineTrainer``): no weight decay (the KL to the reference, when there is one,
      is the regulariser; as TRL's GRPO), betas (0.9, 0.999), a warm-up then a constant rate (RL
      runs have no fixed length), clipping at the config's ``max_grad_norm``;
    - ``preference`` (``PreferenceTrainer``) and ``reward_model`` (``train_reward_model``): torch's
      AdamW defaults (weight decay 0.01, betas (0.9, 0.999)), clipping at 1.0; preference
      optimisation has a schedule of the reader's choice, the reward model a constant rate;
    - ``next_token`` (SFT and the zoo's pretraining): betas (0.9, 0.98), the usual choice when
      training a small transformer from scratch at a high rate (Vaswani et al. 2017,
      arXiv:1706.03762, §5.3), weight decay 0.01, the "zoo" schedule to 10 % of the peak, clipping
      at 1.0.
    """

    lr: float
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    warmup: int = 0
    schedule: str = "constant"
    min_lr_ratio: float = 0.0
    grad_clip: float | None = 1.0

    def __post_init__(self):
        check_positive("lr", self.lr)
        if (not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2
                or not all(isinstance(b, (int, float)) and 0.0 <= b < 1.0 for b in self.betas)):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        check_positive("weight_decay", self.weight_decay, allow_zero=True)
        check_int("warmup", self.warmup, minimum=0)
        check_choice("schedule", self.schedule, OPTIM_SCHEDULES)
        if not isinstance(self.min_lr_ratio, (int, float)) or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")
        if self.min_lr_ratio and self.schedule not in ("cosine", "zoo"):
            raise ValueError(f"min_lr_ratio is the floor of a cosine schedule; schedule {self.schedule!r} has none")
        if self.grad_clip is not None:
            check_positive("grad_clip", self.grad_clip)

    @classmethod
    def online(cls, lr: float, *, warmup: int = 0, grad_clip: float | None = 1.0) -> OptimConfig:
        """``OnlineTrainer``'s optimiser (and its critic's, with ``warmup`` unused)."""
        return cls(lr=lr, weight_decay=0.0, warmup=warmup, grad_clip=grad_clip)

    @classmethod
    def preference(cls, lr: float, *, warmup: int = 0, schedule: str = "constant") -> OptimConfig:
        """``PreferenceTrainer``'s optimiser: torch's AdamW defaults, the reader's schedule."""
        return cls(lr=lr, warmup=warmup, schedule=schedule)

    @classmethod
    def reward_model(cls, lr: float) -> OptimConfig:
        """``train_reward_model``'s optimiser: torch's AdamW defaults at a constant rate."""
        return cls(lr=lr)

    @classmethod
    def next_token(cls, lr: float, *, warmup: int, weight_decay: float = 0.01) -> OptimConfig:
        """``train_on_chats``'s (SFT's, the zoo's) optimiser: betas (0.9, 0.98), the "zoo" schedule to 10 %."""
        return cls(lr=lr, betas=(0.9, 0.98), weight_decay=weight_decay, warmup=warmup, schedule="zoo",
                   min_lr_ratio=0.1)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def optimizer(self, parameters) -> torch.optim.AdamW:
        """AdamW over ``parameters`` at the peak rate, without a schedule (e.g. ``OnlineTrainer``'s critic)."""
        return torch.optim.AdamW(parameters, lr=self.lr, betas=self.betas, weight_decay=self.weight_decay)

    def build(self, parameters, *, steps: int | None = None):
        """``(optimizer, scheduler)`` for ``parameters``: AdamW and the schedule over ``steps`` steps
        (None is allowed for a constant rate). Call ``scheduler.step()`` after each optimizer step."""
        optimizer = self.optimizer(parameters)
        if self.schedule == "zoo":
            check_int("steps", steps, minimum=1)
            return optimizer, RecordedSchedule(optimizer, self.lr, steps=steps, warmup_steps=self.warmup,
                                               floor=self.min_lr_ratio)
        return optimizer, make_scheduler(optimizer, self.schedule, steps=steps, warmup_steps=self.warmup,
                                         min_lr_rate=self.min_lr_ratio)

    def step(self, optimizer, loss: torch.Tensor, parameters) -> float:
        """Backward, clip to ``grad_clip``, step (``rlbook.update.optimizer_step``); returns the
        gradient's norm before clipping. The scheduler is the caller's to step."""
        return optimizer_step(optimizer, loss, parameters, self.grad_clip)


class LoopConfig:
    """Base of a loop's settings dataclass (``NextTokenConfig``, ``SFTConfig``, ``RewardModelConfig``).

    ``__post_init__`` checks every field with the class's ``CHECKS`` (name → ``check(name, value)``),
    so an invalid setting raises ``ValueError`` naming it; ``to_dict`` gives the settings as a dict
    (what the run's ``History.config`` records).
    """

    CHECKS: ClassVar[dict] = {}

    def __post_init__(self):
        check_settings(type(self).__name__, self.CHECKS, self.to_dict())

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# --- the loop ---------------------------------------------------------------------------------
def check_checkpoint_every(checkpoint_every) -> None:
    """``checkpoint_every`` must be None or a positive int."""
    if checkpoint_every is not None and (not isinstance(checkpoint_every, int) or isinstance(checkpoint_every, bool)
                                         or checkpoint_every < 1):
        raise ValueError(f"checkpoint_every must be a positive int or None, got {checkpoint_every!r}")


def postfix_of(keys: dict):
    """A progress-bar postfix for ``run_steps``: ``{short: f"{row[key]:.3f}"}`` for each ``key: short``
    of ``keys`` the row logs."""
    return lambda row: {short: f"{row[key]:.3f}" for key, short in keys.items() if key in row}


def run_steps(step, steps: range, *, history: History, panels: dict, title: str, progress: bool = True,
              live: bool | None = None, postfix=None, checkpoint_dir=None, checkpoint_every: int | None = None,
              save=None, stop_after: int | None = None) -> History:
    """Run ``step(i)`` for each (0-based, run-wide) step index ``i`` of ``steps``; returns ``history``.

    ``step(i)`` does one step and returns its row (a dict, appended to ``history``) or None when it
    recorded its own row. After each step the progress bar shows ``postfix(last_row)`` (default:
    ``history.postfix()``), the live plot of ``history.rows`` under ``panels`` is updated (``live``:
    None draws in Jupyter when ``progress``), and, with ``checkpoint_dir``, ``save(checkpoint_dir)``
    is called after every ``checkpoint_every``-th step (None: only after the last one).
    ``stop_after``: stop once this many steps (run-wide) are done, as an interrupted run would
    (the last of them is then checkpointed); the schedule still spans the whole run.
    """
    check_checkpoint_every(checkpoint_every)
    if stop_after is not None:
        check_int("stop_after", stop_after, minimum=steps.start)
        steps = range(steps.start, min(steps.stop, stop_after))
    if checkpoint_dir is not None and save is None:
        raise ValueError("save must be given with checkpoint_dir")
    with (tqdm(steps, desc=title, unit="step", disable=not progress) as bar,
          live_plot(history.rows, panels, live=live, progress=progress, title=title) as plot):
        for index in bar:
            row = step(index)
            if row is not None:
                history.append(row)
            if history.rows:
                bar.set_postfix(history.postfix() if postfix is None else postfix(history.rows[-1]), refresh=False)
            plot.update()
            done = index + 1
            due = done == steps.stop or (checkpoint_every is not None and done % checkpoint_every == 0)
            if checkpoint_dir is not None and due:
                save(checkpoint_dir)
    return history


# --- checkpoint and resume ----------------------------------------------------------------------
def checkpoint_of(*, models: dict, optimizers: dict, schedulers: dict | None = None,
                  meta: dict | None = None) -> Checkpoint:
    """A ``Checkpoint`` of live objects: ``models`` / ``optimizers``: name → module / optimizer (their
    state dicts); ``schedulers``: name → scheduler, whose state dict goes into the meta under that
    name; ``meta``: any JSON values (counters, settings, history rows). The random states are added
    to the meta as ``rng``."""
    return Checkpoint(
        models={name: model.state_dict() for name, model in models.items()},
        optimizers={name: optimizer.state_dict() for name, optimizer in optimizers.items()},
        meta={**(meta or {}), **{name: s.state_dict() for name, s in (schedulers or {}).items()}, "rng": rng_state()})


def save_run(directory, step: int, **parts) -> str:
    """Write an atomic ``checkpoint_of(**parts)`` of a run after ``step`` steps; returns its folder."""
    return str(save_checkpoint(directory, step, checkpoint_of(**parts)))


def restore_parts(checkpoint: Checkpoint, *, models: dict, optimizers: dict, schedulers: dict | None = None) -> None:
    """Load ``checkpoint``'s parts into the live objects ``checkpoint_of`` was given (each checked
    to fit), then the random states."""
    for name, model in models.items():
        restore_model(model, checkpoint.models[name], name=name)
    for name, optimizer in optimizers.items():
        restore_optimizer(optimizer, checkpoint.optimizers[name], name=name)
    for name, scheduler in (schedulers or {}).items():
        scheduler.load_state_dict(checkpoint.meta[name])
    set_rng_state(checkpoint.meta["rng"])


def check_settings_match(current: dict, saved, *, what: str = "the trainer's settings") -> None:
    """Raise ``ValueError`` naming the settings in which ``current`` differs from a checkpoint's ``saved``."""
    differences = sorted(key for key in current if not isinstance(saved, dict) or saved.get(key) != current[key])
    if differences:
        raise ValueError(f"{what} differ from the checkpoint's in {differences}: build the trainer with the saved "
                         "settings")


def restore_run(path, *, models: dict, optimizers: dict, schedulers: dict | None = None, meta=(),
                settings: dict | None = None) -> dict:
    """Restore a checkpoint ``save_run`` wrote into live objects; returns its ``meta``.

    ``models``, ``optimizers``, ``schedulers``: name → the live object, as given to ``save_run``;
    the checkpoint must hold exactly these models (``ValueError`` otherwise, e.g. a reference model
    one run has and the other lacks). ``meta``: the names its meta must also hold. ``settings``:
    compared with the saved ``meta["settings"]`` (``check_settings_match``) before anything is
    loaded. The random states are restored last.
    """
    schedulers = schedulers or {}
    checkpoint = load_checkpoint(path)
    checkpoint.require(models=list(models), optimizers=list(optimizers),
                       meta=[*meta, *schedulers, "rng", *(["settings"] if settings is not None else [])])
    if settings is not None:
        check_settings_match(settings, checkpoint.meta["settings"])
    if set(checkpoint.models) != set(models):
        raise ValueError(f"the checkpoint's models {sorted(checkpoint.models)} do not match this trainer's "
                         f"{sorted(models)}")
    restore_parts(checkpoint, models=models, optimizers=optimizers, schedulers=schedulers)
    return checkpoint.meta
