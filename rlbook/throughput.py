"""What the advantage filter saves (lesson 14): how often a group carries no gradient, what skipping
it changes in the update, and what it saves in work and in wall time.

A group whose G rewards are all equal has all-zero advantages (``rlbook.advantages``), so its
completions add nothing to the policy gradient but their share of the loss's divisor.
``flat_group_probability`` gives how often that happens for i.i.d. binary rewards;
``update_gradient`` is the gradient of the Dr.GRPO loss (Liu et al. 2025, arXiv:2503.20783) over
chosen rows, so the update with and without the flat groups can be compared; ``update_seconds``
measures the CPU time of that update's forward and backward pass, the work the filter saves; and
``equal_time_table`` reads an ablation's runs at equal wall time. ``rlbook.viz.throughput`` draws them.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from rlbook._checks import check_int
from rlbook.losses import policy_loss
from rlbook.rollout import completion_logprobs

__all__ = ["equal_time_table", "flat_group_probability", "update_gradient", "update_seconds"]


def flat_group_probability(pass_rate, group_size: int):
    """P(a group's G binary rewards are all equal) = p^G + (1 − p)^G, for i.i.d. rewards of mean p.

    An idealisation (in a real batch p varies from prompt to prompt, which makes flat groups more
    common than this), but it shows the two regimes where filtering pays: early, when most groups
    fail together, and late, when most succeed together.
    """
    group_size = check_int("group_size", group_size, minimum=1)
    p = np.asarray(pass_rate, dtype=float)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("pass_rate must lie in [0, 1]")
    value = p ** group_size + (1 - p) ** group_size
    return float(value) if value.ndim == 0 else value


def update_gradient(model, rollout, advantages, rows, *, max_len: int) -> torch.Tensor:
    """The gradient (one flat vector) of the Dr.GRPO loss of ``rollout``'s completions ``rows``.

    The loss is ``policy_loss(variant="dr_grpo")`` at the start of an update (π_θ = π_old, so the
    ratio is 1 and no clip acts): −Σ_i Σ_t A_i log π_θ(y_i,t) / (|rows| · L), L = ``max_len``.
    Its gradient is Σ_i A_i ∇log π_θ(y_i) / (|rows| · L): a completion with A_i = 0 adds nothing but
    its count to the divisor. ``advantages`` is (B,), one per completion; ``rows`` a (K,) index tensor.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad(set_to_none=True)
    _update_loss(model, rollout, advantages, rows, max_len).backward()
    gradient = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params])
    model.zero_grad(set_to_none=True)
    return gradient.detach().clone()


def update_seconds(model, rollout, advantages, row_sets: dict, *, max_len: int, repeats: int = 3) -> dict:
    """CPU seconds of one forward + backward pass of the Dr.GRPO loss over each set of rows (label → rows).

    The passes run on one thread and are timed with that thread's CPU clock (``time.thread_time``),
    so the result is the work itself: on a shared machine wall-clock time also counts the time spent
    waiting for a processor, which depends on everything else running. The sets are timed in turn,
    ``repeats`` rounds, and each keeps its fastest round. The thread count is restored afterwards.
    """
    repeats = check_int("repeats", repeats, minimum=1)
    best = {label: float("inf") for label in row_sets}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(repeats):
            for label, rows in row_sets.items():
                start = time.thread_time()
                _update_loss(model, rollout, advantages, rows, max_len).backward()
                best[label] = min(best[label], time.thread_time() - start)
                model.zero_grad(set_to_none=True)
    finally:
        torch.set_num_threads(threads)
    return best


def equal_time_table(frame, *, metric: str = "pass@1", window: int = 5):
    """Each run's ``metric`` at the wall time the fastest run needed for all its steps.

    ``frame`` is ``AblationResult.frame`` (columns label, seed, step, wall_time, ``metric``). The
    budget T is the smallest total wall time of any (label, seed) run; each run is read at the last
    step it finished by T: the steps done, and the mean ``metric`` over its last ``window`` of them.
    Returns one row per label (averaged over seeds), with T in ``budget_s``.
    """
    import pandas as pd

    check_int("window", window, minimum=1)
    runs = frame.groupby(["label", "seed"], sort=False)
    budget = runs["wall_time"].max().min()
    rows = []
    for (label, seed), run in runs:
        done = run[run["wall_time"] <= budget + 1e-9]
        rows.append({"label": label, "seed": seed, "steps_done": len(done),
                     f"{metric} (last {window})": done[metric].tail(window).mean(),
                     "seconds_per_step": run["step_time"].mean()})
    table = pd.DataFrame(rows).groupby("label", sort=False).mean(numeric_only=True).drop(columns="seed")
    return table.assign(budget_s=budget)


def _update_loss(model, rollout, advantages, rows, max_len):
    """The Dr.GRPO loss of ``rollout``'s completions ``rows``, its log-probs recomputed under ``model``."""
    rows = torch.as_tensor(rows, dtype=torch.long)
    if rows.dim() != 1 or rows.numel() == 0:
        raise ValueError("rows must be a non-empty 1-D index tensor")
    tensors = [t[rows] for t in (rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                 rollout.completion_mask)]
    logp = completion_logprobs(model, *tensors)
    loss, _ = policy_loss(logp, rollout.logprobs[rows], advantages[rows], tensors[3], variant="dr_grpo",
                          max_len=max_len)
    return loss
