"""Deterministic next-token training on (prompt, completion) chats, on the CPU.

One loop serves every zoo model (``rlbook.zoo.build`` pretrains them with it) and SFT
(``rlbook.trainers.sft``): the corpus is a list of (prompt, completion) texts in the chat
format, and the loss is the cross-entropy of the completion tokens only (the prompt is context).
The zoo's "base" models are therefore pretraining and instruction-following in one step: they have
only ever seen answers in the book's format, some of them wrong on purpose.

Simplified on purpose: no packing, no gradient accumulation, a fixed sequence cap; the corpora are
short chats, and on 2 CPU cores a plain AdamW loop with a cosine schedule (to 10 % of the peak,
after a linear warm-up; ``recorded_lr``) is what trains fastest.
Batches are drawn at random, not bucketed by length: bucketing saves padding, but it makes every
batch all-direct or all-scratchpad, and the arithmetic model then never learned to read the
operands (pass@1 ≈ 0 instead of ≈ 0.25 with the same budget, measured when the zoo was built).
"""

from __future__ import annotations

import math
import random

import torch
from tqdm.auto import tqdm

from rlbook._checks import check_int, check_positive
from rlbook.padding import stack_padded
from rlbook.update import optimizer_step
from rlbook.trainers.live import SFT_PANELS, live_plot


def encode_chats(tokenizer, chats: list[tuple[str, str]], *, max_length: int) -> list[tuple[list[int], int]]:
    """Token ids of ``prompt + completion + eos`` and where the completion starts, for each chat."""
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


def _shuffled_batches(n_items: int, batch_size: int, rng: random.Random):
    """Endless seeded batches of indices: each pass over the corpus in a fresh random order."""
    order: list[int] = []
    while True:
        if len(order) < batch_size:
            fresh = list(range(n_items))
            rng.shuffle(fresh)
            order += fresh
        yield order[:batch_size]
        del order[:batch_size]


def train_on_chats(model, tokenizer, chats: list[tuple[str, str]], *, steps: int, batch_size: int = 64,
                   lr: float = 3e-3, weight_decay: float = 0.01, warmup: int = 50, max_length: int = 256,
                   seed: int = 0, progress: bool = True, desc: str = "pretrain",
                   live: bool | None = None) -> list[float]:
    """Train ``model`` in place on ``chats`` for ``steps`` AdamW steps; returns the loss per step.

    ``desc`` labels the progress bar (``rlbook.trainers.sft`` passes "sft"); ``live``: draw the loss
    live under it (``rlbook.trainers.live``; None: in Jupyter when ``progress``).

    Batches are drawn by a seeded shuffle, so the same seed and corpus give the same weights.
    """
    check_int("steps", steps, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    check_positive("lr", lr)
    if not chats:
        raise ValueError("chats must hold at least one (prompt, completion) pair")
    encoded = encode_chats(tokenizer, chats, max_length=max_length)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    model.train()
    batches = _shuffled_batches(len(encoded), batch_size, rng)
    losses = []
    bar = tqdm(range(steps), desc=desc, disable=not progress)
    rows = []  # what the live plot draws
    plot = live_plot(rows, SFT_PANELS, live=live, progress=progress, title=desc)
    for step in bar:
        batch = [encoded[i] for i in next(batches)]
        input_ids, attention, labels = collate(batch, tokenizer.pad_token_id)
        for group in optimizer.param_groups:
            group["lr"] = recorded_lr(lr, step, steps=steps, warmup_steps=warmup)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer_step(optimizer, loss, model.parameters(), max_grad_norm=1.0)
        losses.append(loss.item())
        rows.append({"step": step, "loss": losses[-1]})
        plot.update()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    plot.finish()
    model.eval()
    return losses
