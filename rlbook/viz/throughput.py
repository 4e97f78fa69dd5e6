"""Figures and widgets for lesson 14: how many completions carry no gradient, and noise on advantages.

``plot_flat_groups`` draws the chance that a group of G completions has all-equal rewards (its
advantages are all zero, so the advantage filter can skip it) against the pass rate, for i.i.d.
rewards or with the pass rate spread across prompts, with the measured points of a run;
``flat_groups_widget`` makes G and that spread knobs. ``plot_advantage_noise`` shows a batch's
group advantages before and after Gaussian noise; ``advantage_noise_widget`` makes σ, G and the
pass rate knobs.

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
from rlbook.advantages import dither_rewards, group_advantages
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


def plot_flat_groups(group_size: int = 4, *, measured=None, ax=None, between_prompt_share: float = 0.0):
    """P(flat group) against the batch's mean pass rate for G = 2, 4, 8, 16 (``group_size`` bold),
    with the measured (pass@1, fraction of flat groups) of each step of a run when ``measured`` is a
    frame with those columns. ``between_prompt_share`` ρ > 0 spreads the pass rate across prompts
    (``rlbook.throughput.flat_group_probability``); the bold G's i.i.d. curve (ρ = 0) is then drawn
    dashed beside it."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.2, 3.4))
    p = np.linspace(0, 1, 201)
    for g in sorted({2, 4, 8, 16, group_size}):
        bold = g == group_size
        line, = ax.plot(p, flat_group_probability(p, g, between_prompt_share=between_prompt_share),
                        lw=2.5 if bold else 1, alpha=1 if bold else 0.5,
                        label=f"G = {g}" + (" (this run)" if bold and measured is not None else ""))
        if bold and between_prompt_share > 0:
            ax.plot(p, flat_group_probability(p, g), ls="--", lw=1.5, color=line.get_color(),
                    label=f"G = {g}, i.i.d. (ρ = 0)")
    if measured is not None:
        ax.scatter(measured["pass@1"], measured["frac_zero_adv_groups"], s=14, color="black", alpha=0.6,
                   label="measured steps", zorder=3)
    spread = f", ρ = {between_prompt_share:.2f}" if between_prompt_share > 0 else " (i.i.d. rewards)"
    ax.set(xlabel="mean pass rate p", ylabel="P(all G rewards equal)", ylim=(0, 1.02),
           title=f"groups the advantage filter skips{spread}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax.figure


def flat_groups_widget(*, measured=None, group_size: int = 4):
    """G and the between-prompt share ρ of the reward variance as knobs of ``plot_flat_groups`` (an
    ``ipywidgets.interact``): ρ = 0 is the i.i.d. formula; moving ρ up shows how a spread of pass
    rates across prompts lifts the flat fraction at every mean pass rate. With ``measured`` (a run's
    history) its steps are drawn too, so ρ can be fitted to them by eye; ``group_size``: G at the start."""
    import ipywidgets as widgets

    def draw(group_size, between_prompt_share):
        plot_flat_groups(group_size, measured=measured, between_prompt_share=between_prompt_share)
        plt.show()

    return widgets.interact(
        draw,
        group_size=widgets.IntSlider(value=group_size, min=2, max=16, description="G"),
        between_prompt_share=widgets.FloatSlider(value=0.0, min=0.0, max=0.9, step=0.05,
                                                 description="spread ρ", readout_format=".2f"))


def plot_advantage_noise(sigma: float = 0.1, group_size: int = 4, *, pass_rate: float = 0.4, n_groups: int = 24,
                         seed: int = 0, noise_on: str = "advantages", method: str = "dr_grpo"):
    """Each completion's group advantage before and after noise of scale σ.

    ``noise_on="advantages"``: N(0, σ²) added to each advantage (``add_advantage_noise``, the trainer's
    knob). ``noise_on="rewards"``: ReDit's dithering (Wei et al. 2025, arXiv:2506.18631), the noise on
    the rewards before the group baseline (``dither_rewards``). ``method``: the advantage, "dr_grpo"
    (r − group mean) or "grpo" (divided by the group's σ too). Completions of flat groups (all rewards
    equal) sit at A = 0 before the noise: the filter drops them. Advantage noise gives them a random
    weight of size σ; dithered rewards under GRPO give them advantages of root-mean-square 1, whatever σ is.
    """
    if noise_on not in ("advantages", "rewards"):
        raise ValueError(f"noise_on must be 'advantages' or 'rewards', got {noise_on!r}")
    generator = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(n_groups * group_size, generator=generator) < pass_rate).float()
    advantages = group_advantages(rewards, group_size, method)
    if noise_on == "advantages":
        noisy = add_advantage_noise(advantages, sigma, generator=generator)
    else:
        noisy = group_advantages(dither_rewards(rewards, sigma, generator=generator), group_size, method)
    groups = rewards.view(n_groups, group_size)
    flat = (groups.max(dim=1).values == groups.min(dim=1).values).repeat_interleave(group_size).numpy()
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    rows = np.arange(rewards.numel())
    for mask, colour, label in ((~flat, "tab:blue", "varied group"), (flat, "tab:gray", "flat group (A = 0)")):
        ax.scatter(rows[mask], advantages.numpy()[mask], s=18, color=colour, label=f"{label}, before noise")
        ax.scatter(rows[mask], noisy.numpy()[mask], s=18, marker="x", color=colour, alpha=0.7, label="after noise")
    ax.axhline(0, color="black", lw=0.8)
    where = "advantages" if noise_on == "advantages" else "rewards (ReDit)"
    ax.set(xlabel="completion (groups contiguous)", ylabel="advantage",
           title=f"{method}, noise on the {where}: G = {group_size}, p = {pass_rate}, σ = {sigma}; "
                 f"{flat.mean():.0%} in flat groups")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7.5, ncol=2, loc="upper right", framealpha=0.6)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def advantage_noise_widget(*, pass_rate: float = 0.4, group_size: int = 4):
    """σ, G, the pass rate (starting at ``pass_rate``), where the noise goes and the advantage as knobs of
    ``plot_advantage_noise`` (an ``ipywidgets.interact``): near p = 0 or 1 most groups are flat, the
    regime late in training; noise on the rewards with GRPO's σ turns a flat group's zeros into
    advantages of size 1 however small σ is, while noise on the advantages gives them size σ."""
    import ipywidgets as widgets

    def draw(sigma, group_size, pass_rate, noise_on, method):
        plot_advantage_noise(sigma, group_size, pass_rate=pass_rate, noise_on=noise_on, method=method)
        plt.show()

    return widgets.interact(
        draw,
        sigma=widgets.FloatSlider(value=0.1, min=0.0, max=0.5, step=0.02, description="σ"),
        group_size=widgets.IntSlider(value=group_size, min=2, max=16, description="G"),
        pass_rate=widgets.FloatSlider(value=pass_rate, min=0.0, max=1.0, step=0.05, description="pass rate"),
        noise_on=widgets.ToggleButtons(options=[("on advantages", "advantages"), ("on rewards (ReDit)", "rewards")],
                                       value="advantages", description="noise"),
        method=widgets.ToggleButtons(options=[("Dr.GRPO", "dr_grpo"), ("GRPO (÷σ)", "grpo")], value="dr_grpo",
                                     description="advantage"))


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
    ax.set(xlabel="completions trained on (cumulative)", ylabel=metric, title=f"{metric} against update work")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax.figure


def plot_filter_sweep(clean, noisy=None, *, group_size: int | None = None):
    """Three panels against the tolerance: the share of the batch dropped and the update time left
    (``clean``), the filtered gradient's cosine with the full one, and the share of kept completions
    that are mislabelled.

    ``clean`` is a ``filter_sweep`` table, or several concatenated with a ``batch`` column (then each
    point is the mean over batches, with a bar from the smallest to the largest). ``noisy``
    (optional) the concatenated tables of noisy-verifier sweeps with ``flip_rate`` and ``flipped``
    columns: its ``cosine`` (solid) and ``cosine_reference`` (dashed, against the clean gradient)
    and its ``mislabelled_kept``, averaged over its other draws. One batch's cosine mixes the
    filter's bias with sampling noise (``rlbook.throughput.expected_cosine`` separates them). With
    ``group_size`` G the x-axis is labelled in multiples of 1/G. The update time is the mean over the
    batches that were timed only; when those are fewer than all, their own dropped share is drawn beside it.
    Drawn at the book's column width."""
    fig, axes = plt.subplots(1, 3, figsize=(10.4, 3.6))
    by_tol = clean.groupby("tol")[["dropped", "update_time", "cosine"]]
    mean, low, high = by_tol.mean(), by_tol.min(), by_tol.max()
    several = "batch" in clean and clean["batch"].nunique() > 1
    axes[0].plot(mean.index, mean["dropped"], "o-", label="share dropped")
    if mean["update_time"].notna().any():  # timed batches only (filter_sweep's repeats=None leaves NaN)
        timed = clean.dropna(subset=["update_time"])
        timed_batches = timed["batch"].nunique() if "batch" in timed else 1
        axes[0].plot(mean.index, mean["update_time"], "s--", label="update CPU time left" + (
            f" ({timed_batches} of {clean['batch'].nunique()} batches)" if several else ""))
        if several and timed_batches < clean["batch"].nunique():  # the dropped share on the same batches
            same = timed.groupby("tol")["dropped"].mean()
            axes[0].plot(same.index, same, "o:", color=axes[0].lines[0].get_color(), alpha=0.6,
                         label=f"share dropped, same {timed_batches} batch" + ("es" if timed_batches > 1 else ""))
    axes[0].set(title="what the filter drops and saves", ylabel="share (dropped) · ratio (time)", ylim=(0, 1.05))
    axes[1].errorbar(mean.index, mean["cosine"], yerr=[mean["cosine"] - low["cosine"], high["cosine"] - mean["cosine"]]
                     if several else None, fmt="o-", color="black", capsize=3,
                     label="correct rewards" + (f"\n(mean of {clean['batch'].nunique()} batches; bar: min–max)"
                                                if several else ""))
    if noisy is not None:
        for flip_rate, runs in noisy.groupby("flip_rate"):
            mean_noisy = runs.groupby("tol")[["cosine", "cosine_reference", "mislabelled_kept"]].mean()
            line, = axes[1].plot(mean_noisy.index, mean_noisy["cosine"], "o-", label=f"{flip_rate:.0%} flipped")
            axes[1].plot(mean_noisy.index, mean_noisy["cosine_reference"], "o--", color=line.get_color(),
                         label=f"{flip_rate:.0%} flipped, vs clean")
            axes[2].plot(mean_noisy.index, mean_noisy["mislabelled_kept"], "o-", color=line.get_color(),
                         label=f"{flip_rate:.0%} flipped")
            axes[2].axhline(runs["flipped"].mean(), ls=":", lw=1, color=line.get_color())
    axes[1].set(title="cos(filtered gradient, full gradient)", ylabel="cosine")
    low_y, high_y = axes[1].get_ylim()
    axes[1].set_ylim(low_y - 0.8 * (high_y - low_y), high_y)  # room below the curves for the legend
    axes[2].set(title="mislabelled share of the kept rows\n(dotted: of the whole batch)", ylabel="share mislabelled")
    for ax in axes:
        ax.set_xlabel("tol (drop |A| ≤ tol)")
        if group_size is not None:
            ticks = sorted(set(clean["tol"]))
            ax.set_xticks(ticks, [f"{round(t * group_size)}/{group_size}" if t * group_size >= 0.5 else "≈0"
                                  for t in ticks])
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=6 if ax is axes[1] else 7, loc="lower left" if ax is axes[1] else "best")
    fig.tight_layout()
    return fig
