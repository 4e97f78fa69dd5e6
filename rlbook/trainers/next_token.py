"""Deterministic next-token training on (prompt, completion) chats, on the CPU.

One loop serves every zoo model (``rlbook.zoo.build`` pretrains them with it) and SFT
(``rlbook.trainers.sft``): the corpus is a list of (prompt, completion) texts in the chat
format, and the loss is the cross-entropy of the completion tokens only (the prompt is context).
The zoo's "base" models are therefore pretraining and instruction-following in one step: they have
only ever seen answers in the book's format, some of them wrong on purpose.

Simplified on purpose: no packing, no gradient accumulation, a fixed sequence cap; the corpora are
short chats, and on 2 CPU cores a plain AdamW loop with a cosine schedule (to 10 % of the peak,
after a linear warm-up; ``rlbook.schedules.recorded_lr``, re-exported here) is what trains fastest.
The loop's scaffold (progress bar, live plot, history, checkpoint and resume) is
``rlbook.trainers.harness``'s, as every trainer's; its optimiser is ``OptimConfig.next_token``.
Batches are drawn at random, not bucketed by length: bucketing saves padding, but it makes every
batch all-direct or all-scratchpad, and the arithmetic model then never learned to read the
operands (pass@1 ≈ 0 instead of ≈ 0.25 with the same budget, measured when the zoo was built).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import torch

from rlbook._checks import check_int, check_positive
from rlbook.padding import stack_padded
from rlbook.schedules import recorded_lr
from rlbook.trainers.data import shuffled_batches
from rlbook.trainers.harness import LoopConfig, OptimConfig, postfix_of, restore_run, run_steps, save_run
from rlbook.trainers.history import History
from rlbook.trainers.live import SFT_PANELS

__all__ = ["SETTING_CHECKS", "NextTokenConfig", "collate", "encode_chats", "recorded_lr", "run_chats", "train_on_chats"]


def encode_chats(tokenizer, chats: list[tuple[str, str]], *, max_length: int) -> list[tuple[list[int], int]]:
    """Token ids of ``prompt + completion + eos`` and where the completion starts, for each chat.

    Truncation rule: the joined sequence is cut to its first ``max_length`` tokens, so a long
    completion loses its end and an over-long prompt leaves no completion token (that row then has
    no loss). Prompts are plain strings, used as they are (``sft`` formats them first).

    This differs on purpose from ``rlbook.trainers.data.encode_prompt_completions``, the
    preference / policy encoder, which caps prompt and completion separately (the prompt keeps its
    last tokens, the completion its first) because it must return the two parts apart, a prompt to
    left-pad and a completion to score; a next-token corpus is one right-padded sequence per row.
    """
    encoded = []
    for prompt, completion in chats:
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = (prompt_ids + completion_ids)[:max_length]
        encoded.append((ids, len(prompt_ids)))
    return encoded


def collate(batch: list[tuple[list[int], int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad a batch; labels are -100 on the prompt and on padding (no loss there)."""
    input_ids, attention = stack_padded([ids for ids, _ in batch], pad_id, side="right")
    starts = torch.tensor([start for _, start in batch])
    on_prompt = torch.arange(input_ids.shape[1]).unsqueeze(0) < starts.unsqueeze(1)
    return input_ids, attention, input_ids.masked_fill(on_prompt | (attention == 0), -100)


# Each setting of the next-token loop and its check, as check(name, value).
SETTING_CHECKS = {
    "steps": partial(check_int, minimum=1), "batch_size": partial(check_int, minimum=1), "lr": check_positive,
    "weight_decay": partial(check_positive, allow_zero=True), "warmup": partial(check_int, minimum=0),
    "max_length": partial(check_int, minimum=2), "seed": check_int,
}


@dataclass
class NextTokenConfig(LoopConfig):
    """Every setting of one next-token run (``train_on_chats``); invalid settings raise ``ValueError``.

    ``steps`` AdamW steps on batches of ``batch_size`` chats cut to ``max_length`` tokens, peak rate
    ``lr`` after ``warmup`` steps, ``weight_decay``; ``seed`` fixes the initial batch order and
    torch's random state. The optimiser is ``optim()`` (``OptimConfig.next_token``).
    """

    CHECKS: ClassVar[dict] = SETTING_CHECKS
    steps: int
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup: int = 50
    max_length: int = 256
    seed: int = 0

    def optim(self) -> OptimConfig:
        """AdamW with betas (0.9, 0.98), the zoo's warm-up and cosine to 10 %, clipping at 1.0."""
        return OptimConfig.next_token(self.lr, warmup=self.warmup, weight_decay=self.weight_decay)


def train_on_chats(model, tokenizer, chats: list[tuple[str, str]], *, steps: int, batch_size: int = 64,
                   lr: float = 3e-3, weight_decay: float = 0.01, warmup: int = 50, max_length: int = 256,
                   seed: int = 0, progress: bool = True, desc: str = "pretrain", live: bool | None = None,
                   checkpoint_dir=None, checkpoint_every: int | None = None, resume_from=None,
                   stop_after: int | None = None) -> list[float]:
    """Train ``model`` in place on ``chats`` for ``steps`` AdamW steps; returns the loss per step.

    The settings make a ``NextTokenConfig``; the run is ``run_chats``'s (see it for ``desc``,
    ``live``, the checkpoints, ``resume_from`` and ``stop_after``). Batches are drawn by a seeded
    shuffle, so the same seed and corpus give the same weights.
    """
    config = NextTokenConfig(steps=steps, batch_size=batch_size, lr=lr, weight_decay=weight_decay, warmup=warmup,
                             max_length=max_length, seed=seed)
    history = run_chats(model, tokenizer, chats, config, progress=progress, desc=desc, live=live,
                        checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, resume_from=resume_from,
                        stop_after=stop_after)
    return history.column("loss")


def run_chats(model, tokenizer, chats: list[tuple[str, str]], config: NextTokenConfig, *, progress: bool = True,
              desc: str = "pretrain", live: bool | None = None, checkpoint_dir=None,
              checkpoint_every: int | None = None, resume_from=None, stop_after: int | None = None) -> History:
    """Train ``model`` in place on ``chats`` as ``config`` says; returns the history (step, loss).

    ``desc`` labels the progress bar (``rlbook.trainers.sft`` passes "sft"); ``live``: draw the loss
    live under it (``rlbook.trainers.live``; None: in Jupyter when ``progress``). With
    ``checkpoint_dir`` a checkpoint is written every ``checkpoint_every`` steps (None: at the end);
    ``resume_from`` (a checkpoint folder or such a ``checkpoint_dir``) restores model, optimizer,
    schedule, random state and history first and goes on from the saved step, to the very weights
    of an uninterrupted run; ``stop_after`` stops (and checkpoints) after that many steps.
    """
    if not isinstance(config, NextTokenConfig):
        raise ValueError(f"config must be a NextTokenConfig, got {type(config).__name__}")
    if not chats:
        raise ValueError("chats must hold at least one (prompt, completion) pair")
    encoded = encode_chats(tokenizer, chats, max_length=config.max_length)
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    optim = config.optim()
    optimizer, scheduler = optim.build(model.parameters(), steps=config.steps)
    model.train()
    batches = (indices for _, indices in shuffled_batches(len(encoded), config.batch_size, rng, across_epochs=True))
    settings = {**config.to_dict(), "chats": len(encoded)}
    history = History(config=settings)
    parts = dict(models={"model": model}, optimizers={"optimizer": optimizer}, schedulers={"scheduler": scheduler})
    if resume_from is not None:
        meta = restore_run(resume_from, **parts, meta=["step", "history"], settings=settings)
        history = History(meta["history"], config=settings)
        for _ in range(check_int("the checkpoint's step", meta["step"], minimum=0)):  # the batches already used
            next(batches)

    def step(index: int) -> dict:
        batch = [encoded[i] for i in next(batches)]
        input_ids, attention, labels = collate(batch, tokenizer.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optim.step(optimizer, loss, model.parameters())
        scheduler.step()
        return {"step": index, "loss": loss.item()}

    def save(directory) -> None:
        save_run(directory, len(history), **parts, meta={"step": len(history), "settings": settings,
                                                          "history": history.rows})

    run_steps(step, range(len(history), config.steps), history=history, panels=SFT_PANELS, title=desc,
              progress=progress, live=live, postfix=postfix_of({"loss": "loss"}), checkpoint_dir=checkpoint_dir,
              checkpoint_every=checkpoint_every, save=save, stop_after=stop_after)
    model.eval()
    return history
