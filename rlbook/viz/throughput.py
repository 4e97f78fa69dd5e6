"""Figures and widgets for lesson 14: how many completions carry no gradient, and noise on advantages.

``plot_flat_groups`` draws the chance that a group of G completions has all-equal rewards (its
advantages are all zero, so the advantage filter can skip it) against the pass rate, with the
measured points of a run; ``flat_groups_widget`` makes G a knob. ``plot_advantage_noise`` shows a
batch's group advantages before and after Gaussian noise; ``advantage_noise_widget`` makes σ and
G knobs.

``plot_reward_per_work`` draws an ablation's runs against the update work they did (completions
trained on). ``plot_filter_sweep`` draws ``rlbook.throughput.filter_sweep``'s tables: what the
filter |A| ≤ tol drops and saves, how far it turns the gradient, and, under a noisy verifier, how
many mislabelled completions it keeps. The lesson's measurements (the flat-group probability, the
update's gradient and CPU time, the filter sweep, the equal-time table) are in ``rlbook.throughput``.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from rlbook._checks import check_int
from rlbook.advantages import group_advantages
from rlbook.shaping import add_advantage_noise
from rlbook.throughput import flat_group_probability

__all__ = [
    "plot_flat_groups",
    "flat_groups_widget",
    "plot_advantage_noise",
    "advantage_noise_widget",
    "plot_reward_per_work",
    "plot_filter_sweep",
]


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


def plot_filter_sweep(clean, noisy=None, *, group_size: int | None = None):
    """Three panels against the tolerance: the share of the batch dropped and the update time left
    (``clean``), the filtered gradient's cosine with the full one, and the share of kept completions
    that are mislabelled. ``clean`` is a ``filter_sweep`` table; ``noisy`` (optional) the
    concatenated tables of noisy-verifier sweeps with a ``flip_rate`` column, averaged over its other
    draws. With ``group_size`` G the x-axis is labelled in multiples of 1/G."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    axes[0].plot(clean["tol"], clean["dropped"], "o-", label="share dropped")
    axes[0].plot(clean["tol"], clean["update_time"], "s--", label="update time left (CPU)")
    axes[0].set(title="what the filter drops and saves", ylim=(0, 1.05))
    axes[1].plot(clean["tol"], clean["cosine"], "o-", color="black", label="correct rewards")
    if noisy is not None:
        for flip_rate, runs in noisy.groupby("flip_rate"):
            mean = runs.groupby("tol")[["cosine", "mislabelled_kept"]].mean()
            axes[1].plot(mean.index, mean["cosine"], "o-", label=f"{flip_rate:.0%} of rewards flipped")
            axes[2].plot(mean.index, mean["mislabelled_kept"], "o-", label=f"{flip_rate:.0%} flipped")
            axes[2].axhline(runs.groupby("draw")["flipped"].first().mean(), ls=":", lw=1,
                            color=axes[2].lines[-1].get_color())
    axes[1].set(title="cos(filtered gradient, full gradient)")
    axes[2].set(title="mislabelled share of the kept rows\n(dotted: of the whole batch)")
    for ax in axes:
        ax.set_xlabel("tol (drop |A| ≤ tol)")
        if group_size is not None:
            ticks = sorted(set(clean["tol"]))
            ax.set_xticks(ticks, [f"{round(t * group_size)}/{group_size}" if t * group_size >= 0.5 else "≈0"
                                  for t in ticks])
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
