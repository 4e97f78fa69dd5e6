"""Figures and widgets for lesson 14: how many completions carry no gradient, and noise on advantages.

``plot_flat_groups`` draws the chance that a group of G completions has all-equal rewards (its
advantages are all zero, so the advantage filter can skip it) against the pass rate, with the
measured points of a run; ``flat_groups_widget`` makes G a knob. ``plot_advantage_noise`` shows a
batch's group advantages before and after Gaussian noise; ``advantage_noise_widget`` makes σ and
G knobs.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from rlbook.advantages import group_advantages
from rlbook.shaping import add_advantage_noise

__all__ = [
    "flat_group_probability",
    "plot_flat_groups",
    "flat_groups_widget",
    "plot_advantage_noise",
    "advantage_noise_widget",
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
