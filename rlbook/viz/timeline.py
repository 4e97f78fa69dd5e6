"""Figures and widgets for lesson 15: Gantt charts of generation and training, sync vs async.

A timeline is a list of entries ``{"phase": "generate" | "train", "start": s, "end": s, "version": v}``
— what ``AsyncTrainer.timeline`` records for a real run, and what
``rlbook.timeline.pipeline_schedule`` computes for an ideal one (``rlbook.timeline`` reads
them: busy fractions, overlap, durations). ``plot_timelines`` draws one Gantt panel per timeline
(a lane for the generator, one for the learner), bars coloured by the policy version that sampled
or produced them. ``schedule_widget`` turns η and the spread of
generation times into knobs of ``plot_schedule``. ``plot_stale_token_weights`` shows the gradient
weight a stale token gets from the naive and the decoupled objective (knobs: ε and the cap).
``plot_behaviour_weight_spread`` draws the measured per-batch variance of the behaviour weights
π_prox/π_behav against η, and ``plot_held_out`` the learner's held-out evaluations during the runs.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from rlbook.losses import clipped_surrogate
from rlbook.ratios import decoupled_behaviour_weight
from rlbook.timeline import LANES, busy_fraction, check_timeline, example_durations, pipeline_schedule

__all__ = ["plot_timelines", "plot_schedule", "schedule_widget", "plot_stale_token_weights",
           "stale_token_weights_widget", "plot_behaviour_weight_spread", "plot_held_out"]


def plot_timelines(timelines: dict, *, axes=None):
    """One Gantt panel per labelled timeline (label → list of entries), sharing the time axis.

    Each panel has two lanes, generator and learner; a bar's colour is its policy version (a
    generation bar: the version that sampled; a training bar: the version it produced, minus one,
    i.e. the version it started from), so a stale batch is a generation bar whose colour is older
    than the training bar that uses it. One continuous colour scale spans every version drawn, and
    a colour bar beside the panels reads it.
    """
    if not isinstance(timelines, dict) or not timelines:
        raise ValueError("timelines must be a non-empty dict of label -> list of timeline entries")
    for timeline in timelines.values():
        check_timeline(timeline)
    if axes is None:
        fig, axes = plt.subplots(len(timelines), 1, figsize=(10, 1.25 + 1.1 * len(timelines)), sharex=True,
                                 squeeze=False)
        axes = axes[:, 0]
    else:
        axes = np.atleast_1d(axes)
        fig = axes[0].figure

    def version_of(entry):
        return entry["version"] - (1 if entry["phase"] == "train" else 0)

    versions = [version_of(e) for timeline in timelines.values() for e in timeline]
    scale = plt.Normalize(min(versions), max(max(versions), min(versions) + 1))
    colours = plt.get_cmap("viridis")
    for ax, (label, timeline) in zip(axes, timelines.items()):
        origin = min(e["start"] for e in timeline)
        for entry in timeline:
            ax.barh(LANES.index(entry["phase"]), entry["end"] - entry["start"], left=entry["start"] - origin,
                    height=0.7, color=colours(scale(version_of(entry))), edgecolor="black", lw=0.5)
        busy = busy_fraction(timeline)
        ax.set_yticks([0, 1], ["generator", "learner"])
        ax.set_ylim(-0.6, 1.6)
        ax.invert_yaxis()
        ax.set_title(f"{label}: {busy['span']:.2f} s; generator busy {busy['generate']:.0%}, "
                     f"learner busy {busy['train']:.0%}", fontsize=9.5)
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("time (s)")
    fig.tight_layout()
    bar = fig.colorbar(plt.cm.ScalarMappable(norm=scale, cmap=colours), ax=list(axes), pad=0.01, fraction=0.03)
    bar.set_label("policy version", fontsize=8)
    return fig


def plot_schedule(staleness=1, spread: float = 0.5, *, steps: int = 8, train_seconds: float = 1.0, seed: int = 0):
    """The ideal Gantt charts of the same rounds synchronously (η = 0) and with each bound in ``staleness``
    (one η or several, e.g. ``(1, 2)`` to compare two bounds on the same rounds)."""
    bounds = [staleness] if isinstance(staleness, int) else list(staleness)
    generate, train = example_durations(steps, spread=spread, train_seconds=train_seconds, seed=seed)
    timelines = {"synchronous (η = 0)": pipeline_schedule(generate, train, 0)}
    for bound in bounds:
        if bound > 0:
            timelines[f"asynchronous, η = {bound}"] = pipeline_schedule(generate, train, bound)
    return plot_timelines(timelines)


def schedule_widget(*, steps: int = 8, seed: int = 0):
    """The spread of generation times, the training time and a second bound η as knobs of ``plot_schedule``,
    which draws the same rounds synchronously, with η = 1 and with the chosen η (an ``ipywidgets.interact``)."""
    import ipywidgets as widgets

    def draw(staleness, spread, train_seconds):
        plot_schedule((1, staleness), spread, steps=steps, train_seconds=train_seconds, seed=seed)
        plt.show()

    return widgets.interact(
        draw,
        staleness=widgets.IntSlider(value=2, min=2, max=4, description="second η"),
        spread=widgets.FloatSlider(value=0.5, min=0.0, max=2.0, step=0.1, description="length spread"),
        train_seconds=widgets.FloatSlider(value=1.0, min=0.2, max=3.0, step=0.1, description="train s/step"))


def plot_stale_token_weights(eps: float = 0.2, cap: float | None = 5.0):
    """Gradient weight of one stale token at the start of a step, against r = π_θ/π_behav.

    At the start of a step π_θ = π_prox, so the token's ratio to the behaviour policy is
    r = π_prox/π_behav. Its gradient is (weight) · A · ∇log π_θ with weight, from
    ``rlbook.losses.policy_loss``:

    - naive (clip r around 1): r where the unclipped branch of the min is active (A > 0: r ≤ 1 + ε;
      A < 0: r ≥ 1 − ε), else 0;
    - decoupled (clip u = π_θ/π_prox = 1, weight w = r): r for every token, 0 where r > cap.

    The importance weight r itself is what an unbiased correction would use (dashed).
    """
    ratios = torch.logspace(-1.3, 1.3, 400, dtype=torch.float64)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.3), sharey=True)
    for ax, sign in zip(axes, (1.0, -1.0)):
        advantages = torch.full_like(ratios, sign)
        naive_ratio = ratios.clone().requires_grad_(True)
        clipped_surrogate(naive_ratio, advantages, eps_low=eps, eps_high=eps).sum().backward()
        naive = (-naive_ratio.grad * sign * ratios).numpy()  # d loss / d log π_θ = r · d loss / d r
        weight = decoupled_behaviour_weight(torch.zeros_like(ratios), -ratios.log(), cap=cap).numpy()
        ax.plot(ratios, ratios, color="gray", ls="--", lw=1, label="importance weight r")
        ax.plot(ratios, naive, color="tab:red", lw=2, label=f"naive (clip r to 1 ± {eps:g})")
        ax.plot(ratios, weight, color="tab:blue", lw=2, ls=(0, (4, 2)),
                label="decoupled (weight r" + (f", dropped above {cap:g})" if cap else ")"))
        ax.set(xscale="log", xlabel="r = π_prox / π_behav (how stale the token is)",
               title=f"A {'> 0' if sign > 0 else '< 0'}: gradient weight at the start of a step")
        ax.set_ylim(-0.2, min(12.0, 1.2 * float(ratios.max())))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("weight of A · ∇log π_θ")
    axes[1].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def stale_token_weights_widget():
    """ε and the behaviour-weight cap as knobs of ``plot_stale_token_weights`` (an ``ipywidgets.interact``); the
    cap runs from 1 (``AsyncConfig`` allows no less: a fresh token has weight 1) to 10, or none."""
    import ipywidgets as widgets

    def draw(eps, cap):
        plot_stale_token_weights(eps, cap if cap > 0 else None)
        plt.show()

    return widgets.interact(
        draw,
        eps=widgets.FloatSlider(value=0.2, min=0.05, max=0.5, step=0.05, description="ε"),
        cap=widgets.SelectionSlider(options=[("none", 0.0)] + [(f"{c:g}", c) for c in np.arange(1.0, 10.5, 0.5)],
                                    value=5.0, description="cap"))


def plot_behaviour_weight_spread(frame, *, ax=None):
    """Per-batch variance of the behaviour weights against η, one dot per (step, seed), median marked.

    ``frame`` has columns ``eta`` and ``behaviour_weight_var`` (one row per step trained at full
    staleness, ``AsyncTrainer``'s history); the y-axis is logarithmic, since a few tokens with a
    large weight make some batches' variance orders of magnitude above the rest.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 3.4))
    etas = sorted(frame["eta"].unique())
    for position, eta in enumerate(etas):
        values = frame.loc[frame["eta"] == eta, "behaviour_weight_var"].to_numpy()
        jitter = np.linspace(-0.15, 0.15, len(values))
        ax.scatter(position + jitter, values, s=12, alpha=0.6, color="tab:blue")
        ax.plot([position - 0.25, position + 0.25], [np.median(values)] * 2, color="black", lw=2)
    ax.set_xticks(range(len(etas)), [f"η = {eta}" for eta in etas])
    ax.set(yscale="log", ylabel="variance of π_prox/π_behav over tokens",
           title="behaviour-weight spread per batch (bar: median)")
    ax.grid(alpha=0.3, which="both")
    return ax.figure


def plot_held_out(frame, metrics=("pass@1", "length_mean"), *, x: str = "step", xlabel: str | None = None,
                  axes=None):
    """Held-out evaluations of each run's current policy against ``x``: mean over seeds, min-max band.

    ``frame`` has columns ``label``, ``seed``, ``step``, ``x`` and the ``metrics`` (e.g. the keys of
    ``rlbook.ablation.held_out_samples``); with ``x`` other than "step" (an ideal wall-clock time, say)
    each point sits at the mean over seeds of its ``x``. The first panel's legend says what line and band are.
    """
    if axes is None:
        _, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.2), squeeze=False)
        axes = axes[0]
    for ax, metric in zip(axes, metrics):
        for label, runs in frame.groupby("label", sort=False):
            by_step = runs.groupby("step")
            xs = by_step[x].mean().to_numpy()
            line, = ax.plot(xs, by_step[metric].mean().to_numpy(), "o-", label=label)
            if runs["seed"].nunique() > 1:
                ax.fill_between(xs, by_step[metric].min().to_numpy(), by_step[metric].max().to_numpy(),
                                color=line.get_color(), alpha=0.2)
        ax.set(xlabel=xlabel or x, title=f"held-out {metric}, current policy")
        ax.grid(alpha=0.3)
    seeds = frame["seed"].nunique()
    axes[0].legend(fontsize=8, title_fontsize=7,
                   title=f"line: mean of {seeds} seeds\nband: lowest to highest seed" if seeds > 1 else None)
    return axes[0].figure
