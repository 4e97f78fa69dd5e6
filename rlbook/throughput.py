"""What the advantage filter saves (lesson 14): how often a group carries no gradient, what skipping
it changes in the update, and what it saves in work and in wall time.

A group whose G rewards are all equal has all-zero advantages (``rlbook.advantages``), so its
completions add nothing to the policy gradient but their share of the loss's divisor.
``flat_group_probability`` gives how often that happens for i.i.d. binary rewards;
``update_gradient`` is the gradient of the Dr.GRPO loss (Liu et al. 2025, arXiv:2503.20783) over
chosen rows, so the update with and without the flat groups can be compared; ``update_seconds``
measures the CPU time of that update's forward and backward pass, the work the filter saves; and
``equal_time_table`` reads an ablation's runs at equal wall time. ``rlbook.viz.throughput`` draws them.

``filter_sweep`` widens the filter from exactly-zero advantages to |A| ≤ tol and measures, for each
tol, what share of the batch it drops, what that saves in update work, and how far the filtered
gradient turns away from the full one (its bias); ``flip_rewards`` is a noisy verifier to repeat
the sweep under.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from rlbook._checks import as_float_tensor, check_int, check_positive
from rlbook.losses import policy_loss
from rlbook.rollout import completion_logprobs

__all__ = ["equal_time_table", "filter_sweep", "flat_group_probability", "flip_rewards", "update_gradient",
           "update_seconds"]


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


def flip_rewards(rewards, fraction: float, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """A noisy verifier: each binary reward r ∈ {0, 1} flipped to 1 − r independently with probability ``fraction``.

    The symmetric label noise of a verifier that errs on ``fraction`` of its answers, both ways.
    Flips turn flat groups into varied ones (an all-wrong group with one false positive) and so
    change which completions any advantage filter keeps. The same ``generator`` seed gives the same flips.
    """
    rewards = as_float_tensor("rewards", rewards, ndim=(1,))
    if not bool(((rewards == 0) | (rewards == 1)).all()):
        raise ValueError("rewards must be binary (each 0 or 1)")
    fraction = check_positive("fraction", fraction, allow_zero=True)
    if fraction > 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    flips = torch.rand(rewards.shape, generator=generator, dtype=torch.float64) < fraction
    return torch.where(flips.to(rewards.device), 1 - rewards, rewards)


def filter_sweep(model, rollout, advantages, tols, *, max_len: int, reference=None, mislabelled=None,
                 repeats: int | None = 2):
    """What the filter |A| > tol keeps, saves and changes, for each tol in ``tols``: one row each.

    Columns: ``tol``; ``dropped`` (share of the B completions with |A| ≤ tol); ``update_time``
    (CPU time of the update over the kept rows over that over all rows, ``update_seconds``);
    ``cosine`` and ``norm_ratio`` of the filtered gradient g_tol = Σ_{|A_i|>tol} A_i ∇log π(y_i) / (K L)
    against the unfiltered one over all rows, g = Σ_i A_i ∇log π(y_i) / (B L) (``update_gradient``).
    For tol below the smallest non-zero |A| only exact zeros go, and g_tol = (B/K) g: cosine 1, no
    bias. Above it, completions that do carry gradient go too, and the cosine measures how far the
    expected update turns. With ``reference`` (a gradient vector, e.g. the clean-reward gradient
    when ``advantages`` come from a noisy verifier) a column ``cosine_reference`` compares g_tol with it too;
    with ``mislabelled`` (a (B,) bool mask of the rewards the verifier got wrong) a column
    ``mislabelled_kept`` gives the share of the kept completions that are mislabelled.
    ``repeats=None`` skips the timing (``update_time`` is then NaN).
    """
    import pandas as pd

    advantages = as_float_tensor("advantages", advantages, ndim=(1,))
    tols = [check_positive("tols", tol, allow_zero=True) for tol in tols]
    if not tols:
        raise ValueError("tols must hold at least one tolerance")
    if mislabelled is not None:
        mislabelled = torch.as_tensor(mislabelled)
        if mislabelled.dtype != torch.bool or mislabelled.shape != advantages.shape:
            raise ValueError(f"mislabelled must be a bool tensor of shape {tuple(advantages.shape)}")
    everything = torch.arange(advantages.shape[0])
    full = update_gradient(model, rollout, advantages, everything, max_len=max_len).double()
    kept = {tol: (advantages.abs() > tol).nonzero().squeeze(1) for tol in tols}
    timed = {"all": everything, **{tol: rows for tol, rows in kept.items() if rows.numel()}}
    seconds = (update_seconds(model, rollout, advantages, timed, max_len=max_len, repeats=repeats)
               if repeats is not None else {})
    rows = []
    for tol, keep in kept.items():
        row = {"tol": tol, "dropped": 1 - keep.numel() / advantages.shape[0], "update_time": math.nan,
               "cosine": math.nan, "norm_ratio": math.nan}
        if keep.numel():
            filtered = update_gradient(model, rollout, advantages, keep, max_len=max_len).double()
            row.update(update_time=seconds[tol] / seconds["all"] if seconds else math.nan,
                       cosine=_cosine(filtered, full), norm_ratio=(filtered.norm() / full.norm()).item())
        if reference is not None:
            row["cosine_reference"] = _cosine(filtered, reference.double()) if keep.numel() else math.nan
        if mislabelled is not None:
            row["mislabelled_kept"] = mislabelled[keep].float().mean().item() if keep.numel() else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


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


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a, b, dim=0).item()


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
