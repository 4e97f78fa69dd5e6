"""Figures and widgets for lesson 14: how many completions carry no gradient, and noise on advantages.

``plot_flat_groups`` draws the chance that a group of G completions has all-equal rewards (its
advantages are all zero, so the advantage filter can skip it) against the pass rate, with the
measured points of a run; ``flat_groups_widget`` makes G a knob. ``plot_advantage_noise`` shows a
batch's group advantages before and after Gaussian noise; ``advantage_noise_widget`` makes σ and
G knobs.

Two measurements on a real batch back the lesson's claims: ``update_gradient`` is the gradient of
the Dr.GRPO loss over chosen rows (so the lesson can compare the update with and without the
flat groups), and ``update_seconds`` measures the CPU time of that update's forward and backward
pass, the work the filter saves. ``equal_time_table`` and ``plot_reward_per_work`` read an ablation's
runs at equal wall time and against the update work they did (completions trained on).
"""

from __future__ import annotations

import time

import matplotlib.pyplot as plt
import numpy as np
import torch

from rlbook._checks import check_int
from rlbook.advantages import group_advantages
from rlbook.losses import policy_loss
from rlbook.rollout import completion_logprobs
from rlbook.shaping import add_advantage_noise

__all__ = [
    "flat_group_probability",
    "plot_flat_groups",
    "flat_groups_widget",
    "plot_advantage_noise",
    "advantage_noise_widget",
    "update_gradient",
    "update_seconds",
    "equal_time_table",
    "plot_reward_per_work",
]


def flat_group_probability(pass_rate, group_size: int):
    """P(a group's G binary rewards are all equal) = p^G + (1 − p)^G, for i.i.d. rewards of mean p.

    An idealisation (in a real batch p varies from prompt to prompt, which makes flat groups more
    common than this), but it shows the two regimes where filtering pays: early, when most groups
    fail together, and late, when most succeed together.
    """
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    p = np.asarray(pass_rate, dtype=float)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("pass_rate must lie in [0, 1]")
    value = p ** group_size + (1 - p) ** group_size
    return float(value) if value.ndim == 0 else value


def plot_flat_groups(group_size: int = 4, *, measured=None, ax=None):
    """P(flat group) against the pass rate for G = 2, 4, 8, 16 (``group_size`` bold), with the
    measured (pass@1, fraction of flat groups) of each step of a run when ``measured`` is a frame
    with those columns."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.2, 3.4))
    p = np.linspace(0, 1, 201)
    for g in sorted({2, 4, 8, 16, group_size}):
        bold = g == group_size
        ax.plot(p, flat_group_probability(p, g), lw=2.5 if bold else 1, alpha=1 if bold else 0.5,
                label=f"G = {g}" + (" (this run)" if bold and measured is not None else ""))
    if measured is not None:
        ax.scatter(measured["pass@1"], measured["frac_zero_adv_groups"], s=14, color="black", alpha=0.6,
                   label="measured steps", zorder=3)
    ax.set(xlabel="pass rate p", ylabel="P(all G rewards equal)", ylim=(0, 1.02),
           title="groups the advantage filter skips")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax.figure


def flat_groups_widget(*, measured=None):
    """G as a knob of ``plot_flat_groups`` (an ``ipywidgets.interact``)."""
    import ipywidgets as widgets

    def draw(group_size):
        plot_flat_groups(group_size, measured=measured)
        plt.show()

    return widgets.interact(draw, group_size=widgets.IntSlider(value=4, min=2, max=16, description="G"))


def plot_advantage_noise(sigma: float = 0.1, group_size: int = 4, *, pass_rate: float = 0.4, n_groups: int = 24,
                         seed: int = 0):
    """Each completion's Dr.GRPO advantage (r − group mean) before and after adding N(0, σ²) noise.

    Completions of flat groups (all rewards equal) sit at A = 0 before the noise: the filter drops
    them; the noise gives them a random weight of either sign, whose mean is zero.
    """
    generator = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(n_groups * group_size, generator=generator) < pass_rate).float()
    advantages = group_advantages(rewards, group_size, "dr_grpo")
    noisy = add_advantage_noise(advantages, sigma, generator=generator)
    groups = rewards.view(n_groups, group_size)
    flat = (groups.max(dim=1).values == groups.min(dim=1).values).repeat_interleave(group_size).numpy()
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    rows = np.arange(rewards.numel())
    for mask, colour, label in ((~flat, "tab:blue", "varied group"), (flat, "tab:gray", "flat group (A = 0)")):
        ax.scatter(rows[mask], advantages.numpy()[mask], s=18, color=colour, label=f"{label}, before noise")
        ax.scatter(rows[mask], noisy.numpy()[mask], s=18, marker="x", color=colour, alpha=0.7, label="after noise")
    ax.axhline(0, color="black", lw=0.8)
    ax.set(xlabel="completion (groups contiguous)", ylabel="advantage",
           title=f"G = {group_size}, p = {pass_rate}, σ = {sigma}: {flat.mean():.0%} of completions in flat groups")
    ax.legend(fontsize=7.5, ncol=2, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def advantage_noise_widget(*, pass_rate: float = 0.4):
    """σ and G as knobs of ``plot_advantage_noise`` (an ``ipywidgets.interact``)."""
    import ipywidgets as widgets

    def draw(sigma, group_size):
        plot_advantage_noise(sigma, group_size, pass_rate=pass_rate)
        plt.show()

    return widgets.interact(
        draw,
        sigma=widgets.FloatSlider(value=0.1, min=0.0, max=0.5, step=0.02, description="σ"),
        group_size=widgets.IntSlider(value=4, min=2, max=16, description="G"))


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


def plot_reward_per_work(frame, *, metric: str = "pass@1", smooth: int = 3, ax=None):
    """``metric`` against the completions trained on so far (the backward passes paid for), one line per label.

    ``frame`` is ``AblationResult.frame``; each label's curve is the mean over seeds of a trailing
    ``smooth``-step average, against the mean over seeds of the cumulative ``trained_samples``.
    Unlike wall time, this axis does not depend on what else the machine was doing.
    """
    check_int("smooth", smooth, minimum=1)
    if ax is None:
        _, ax = plt.subplots(figsize=(4.6, 3.2))
    for label, runs in frame.groupby("label", sort=False):
        per_seed = [(run["trained_samples"].cumsum().to_numpy(),
                     run[metric].rolling(smooth, min_periods=1).mean().to_numpy())
                    for _, run in runs.groupby("seed", sort=False)]
        length = min(len(work) for work, _ in per_seed)
        work = np.mean([w[:length] for w, _ in per_seed], axis=0)
        ax.plot(work, np.mean([v[:length] for _, v in per_seed], axis=0), label=label)
    ax.set(xlabel="completions trained on (cumulative)", title=f"{metric} against update work")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax.figure


def _update_loss(model, rollout, advantages, rows, max_len):
    rows = torch.as_tensor(rows, dtype=torch.long)
    if rows.dim() != 1 or rows.numel() == 0:
        raise ValueError("rows must be a non-empty 1-D index tensor")
    tensors = [t[rows] for t in (rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                 rollout.completion_mask)]
    logp = completion_logprobs(model, *tensors)
    loss, _ = policy_loss(logp, rollout.logprobs[rows], advantages[rows], tensors[3], variant="dr_grpo",
                          max_len=max_len)
    return loss
