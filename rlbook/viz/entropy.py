"""Figures and widgets for lesson 16 (entropy collapse; Cui et al. 2025, arXiv:2505.22617).

- ``PRESETS``, ``softmax_step`` / ``plot_softmax_step`` / ``softmax_step_widget``: one exact
  policy-gradient step on a toy softmax (``rlbook.entropy.policy_gradient_logit_step``) with a
  positive advantage on one action: π before and after, the exact entropy change and the
  first-order prediction −Cov_π(log π, Δz) side by side;
- ``plot_first_order_error``: |exact − predicted| against the step size η (it shrinks like η²);
- ``plot_collapse``: a run's mean token entropy per step, the probability of one decision at the
  first position, and held-out pass@1 / pass@k at the probes;
- ``plot_token_entropy_histograms``: the per-token entropies of sampled completions, early vs late;
- ``plot_controls``: one bar per control run configuration (mean over seeds, each seed a dot) for
  each metric: final entropy, held-out pass@1 and pass@k; or, given a baseline, the paired
  differences from it seed by seed;
- ``plot_control_curves``: each control's batch entropy over training, mean over seeds and their range;
- ``plot_step_law``: the covariance law step by step on a real run (``rlbook.probes.entropy_step_change``
  per step): measured ΔH against the first-order prediction and against −Cov(log π, A), per state
  and pooled, and all over the steps;
- ``plot_frontier_along_run``: one run's held-out (entropy, pass@1) in step order, with the frontier
  fitted to its early probes only;
- ``plot_entropy_frontier`` / ``entropy_frontier_widget``: (entropy, reward) points of runs, the
  fitted frontier R = −a·e^H + b (``rlbook.entropy.fit_entropy_frontier``) and its r²; the widget
  chooses which controls, seeds and steps enter the fit.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from rlbook._checks import as_float_tensor, check_positive
from rlbook._figures import COLUMN_IN
from rlbook.entropy import entropy_change, fit_entropy_frontier, policy_gradient_logit_step, predicted_entropy_change

__all__ = ["PRESETS", "softmax_step", "plot_softmax_step", "softmax_step_widget", "plot_first_order_error",
           "plot_collapse", "plot_token_entropy_histograms", "plot_controls", "plot_control_curves", "plot_step_law",
           "plot_frontier_along_run", "plot_entropy_frontier", "entropy_frontier_widget"]

# Toy logits for the widget: a confident policy, a flat one, a two-way split.
PRESETS = {
    "confident": (3.0, 1.0, 0.5, 0.0, -1.0),
    "flat": (0.2, 0.1, 0.0, -0.1, -0.2),
    "two-way": (2.0, 1.8, -1.0, -1.5, -2.0),
}


def softmax_step(logits, action: int, lr: float, *, natural: bool = False, advantage: float = 1.0) -> dict:
    """One policy-gradient step with advantage ``advantage`` (default +1; −1 penalises) on ``action``
    and 0 elsewhere (centred under π by ``policy_gradient_logit_step``): the logit change, π before and
    after, the exact ΔH and the first-order prediction −Cov_π(log π, Δz)."""
    z = torch.as_tensor(logits, dtype=torch.float64)
    if z.dim() != 1 or z.numel() < 2:
        raise ValueError(f"logits must be a 1-D vector of at least 2 actions, got shape {tuple(z.shape)}")
    if not isinstance(action, (int, np.integer)) or not 0 <= action < z.numel():
        raise ValueError(f"action must be an index in [0, {z.numel()}), got {action!r}")
    if not np.isfinite(advantage) or advantage == 0:
        raise ValueError(f"advantage must be a finite non-zero number, got {advantage!r}")
    advantages = torch.zeros_like(z)
    advantages[action] = float(advantage)
    delta = policy_gradient_logit_step(z, advantages, lr, natural=natural)
    return {"delta": delta, "before": torch.softmax(z, 0), "after": torch.softmax(z + delta, 0),
            "exact": entropy_change(z, delta), "predicted": predicted_entropy_change(z, delta)}


def plot_softmax_step(preset: str = "confident", action: int = 0, lr: float = 1.0, *, natural: bool = False,
                      advantage: float = 1.0, ax=None):
    """Bars of π before and after one step that rewards (``advantage`` > 0) or penalises (< 0)
    ``action`` under the toy logits ``preset`` (a key of ``PRESETS``), titled with the exact ΔH and the
    covariance prediction."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    step = softmax_step(PRESETS[preset], action, lr, natural=natural, advantage=advantage)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.4))
    x = np.arange(len(PRESETS[preset]))
    ax.bar(x - 0.2, step["before"].numpy(), width=0.4, color="tab:gray", label="π before")
    ax.bar(x + 0.2, step["after"].numpy(), width=0.4, color="tab:blue", label="π after")
    ax.bar(action + 0.2, float(step["after"][action]), width=0.4, color="tab:orange",
           label="rewarded action" if advantage > 0 else "penalised action")
    change = step["after"] - step["before"]
    last = action == len(x) - 1  # keep the label inside the axes at the right edge
    ax.annotate(f"Δπ = {float(change[action]):+.4f}", (action + 0.2, float(step["after"][action])), xytext=(0, 4),
                textcoords="offset points", ha="right" if last else "center", fontsize=8, color="tab:orange")
    ax.set_xticks(x, [f"a{i}" for i in x])
    # every action's Δπ on its own scale, so a rare action's small move is visible beside the large ones
    inset = ax.inset_axes([0.62, 0.42, 0.35, 0.3])
    inset.bar(x, change.numpy(), color=["tab:orange" if i == action else "tab:blue" for i in x])
    inset.axhline(0, color="gray", lw=0.6)
    inset.set_xticks(x, [f"a{i}" for i in x], fontsize=6)
    inset.tick_params(axis="y", labelsize=6)
    inset.set_title("Δπ (own scale)", fontsize=7)
    kind = "natural η·A" if natural else "vanilla η·π·A"
    ax.set(ylim=(0, 1.05), ylabel="probability",
           title=f"{preset}, {'reward' if advantage > 0 else 'penalise'} a{action} (A = {advantage:+g}), {kind}, "
                 f"η = {lr:g}\n"
                 f"exact ΔH = {step['exact']:+.4f}   −Cov(log π, Δz) = {step['predicted']:+.4f} nats")
    ax.legend(fontsize=8, loc="upper center")
    return ax.figure


def softmax_step_widget():
    """``plot_softmax_step`` with its knobs (an ``ipywidgets.interact``)."""
    import ipywidgets as widgets

    def draw(preset, action, advantage, lr, natural):
        plot_softmax_step(preset, action, lr, natural=natural, advantage=advantage)
        plt.show()

    return widgets.interact(
        draw, preset=widgets.Dropdown(options=list(PRESETS), value="confident", description="logits"),
        action=widgets.IntSlider(value=0, min=0, max=len(PRESETS["confident"]) - 1, description="action"),
        advantage=widgets.Dropdown(options=[("+1 (reward)", 1.0), ("−1 (penalise)", -1.0)], value=1.0,
                                   description="advantage"),
        lr=widgets.FloatLogSlider(value=1.0, base=10, min=-2, max=1, step=0.1, description="η"),
        natural=widgets.Checkbox(value=False, description="natural PG (Δz = η·A)"))


def plot_first_order_error(logits, advantages, lrs, *, ax=None):
    """|exact ΔH − (−Cov(log π, Δz))| against η for vanilla and natural steps, log-log, with a
    slope-2 guide: the prediction is first order, so its error shrinks like η²."""
    lrs = [check_positive("lrs", float(lr)) for lr in lrs]
    if len(lrs) < 2:
        raise ValueError("lrs must hold at least 2 step sizes")
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.6))
    for natural, colour in ((False, "tab:blue"), (True, "tab:orange")):
        errors = []
        for lr in lrs:
            delta = policy_gradient_logit_step(logits, advantages, lr, natural=natural)
            errors.append(abs(entropy_change(logits, delta) - predicted_entropy_change(logits, delta)))
        ax.loglog(lrs, errors, "o-", color=colour, label="natural" if natural else "vanilla")
    guide = np.array(lrs)
    ax.loglog(guide, errors[0] * (guide / guide[0]) ** 2, "k--", lw=1, label="∝ η²")
    ax.set(xlabel="step size η", ylabel="|exact − first order| (nats)", title="The covariance is a first-order law")
    ax.legend(fontsize=8)
    return ax.figure


def plot_collapse(entropy, probes, *, k: int = 8, decision: str = "P(<think> first)"):
    """A run in three panels: the mean token entropy of each step's batch (``entropy``, one per
    step), the probed decision's probability, and held-out pass@1 / pass@``k``.

    ``probes`` is a table (a DataFrame or dict of lists) with columns ``step``, ``decision``,
    ``pass@1`` and ``pass@k``; where it also has ``pass@1 SE`` / ``pass@k SE`` (standard errors), the
    pass@k panel draws them as ±1 SE bars.
    """
    entropy = as_float_tensor("entropy", entropy, ndim=(1,)).numpy()
    for column in ("step", "decision", "pass@1", f"pass@{k}"):
        if column not in probes:
            raise ValueError(f"probes must have a column {column!r}")
    fig, axes = plt.subplots(1, 3, figsize=(COLUMN_IN, 3.4))
    # the batch of update k + 1 is sampled by the policy after k updates: plotted at k, as the probes are
    axes[0].plot(np.arange(len(entropy)), entropy, color="tab:red")
    axes[0].set(xlabel="policy after step", ylabel="nats", title="batch token entropy", ylim=(0, None))
    steps = np.asarray(probes["step"])
    axes[1].plot(steps, np.asarray(probes["decision"]), "o-", color="tab:purple")
    axes[1].set(xlabel="policy after step", ylabel="probability, mean over held-out prompts", ylim=(0, 1.02),
                title=decision)
    for metric, marker in (("pass@1", "o-"), (f"pass@{k}", "s-")):
        se = np.asarray(probes[f"{metric} SE"], dtype=float) if f"{metric} SE" in probes else None
        axes[2].errorbar(steps, np.asarray(probes[metric], dtype=float), yerr=se, fmt=marker, capsize=2,
                         label=metric + (" (±1 SE)" if se is not None else ""))
    axes[2].set(xlabel="policy after step", ylabel="held-out pass@k, mean over prompts", ylim=(0, 1.02),
                title=f"held-out pass@1, pass@{k}")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_token_entropy_histograms(early, late, *, labels=("early", "late"), ax=None):
    """Histograms of per-token entropies (1-D, nats) of completions sampled early and late in a run."""
    early = as_float_tensor("early", early, ndim=(1,)).numpy()
    late = as_float_tensor("late", late, ndim=(1,)).numpy()
    if not len(early) or not len(late):
        raise ValueError("early and late must hold at least one token entropy each")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.4))
    top = max(early.max(), late.max(), 1e-3)
    bins = np.linspace(0, top, 30)
    for values, label, colour in ((early, labels[0], "tab:gray"), (late, labels[1], "tab:red")):
        ax.hist(values, bins=bins, alpha=0.55, color=colour, weights=np.full(len(values), 1 / len(values)),
                label=f"{label}: mean {values.mean():.3f}, {np.mean(values < 0.01):.0%} below 0.01")
    ax.set(xlabel="token entropy (nats)", ylabel="share of tokens", yscale="log",
           title="Per-token entropy of sampled completions")
    ax.legend(fontsize=8)
    return ax.figure


def plot_controls(runs, metrics=("entropy", "pass@1", "pass@8"), *, label: str = "control", units=None,
                  baseline=None, pair: str = "seed"):
    """One panel per metric: a bar per ``label`` value (the mean over its runs) and a dot per run.

    ``runs`` is a DataFrame with one row per run, a column ``label`` and one per metric; ``units``
    (optional) maps a metric to its y-axis label. With ``baseline`` (a ``label`` value), each panel
    shows instead the paired differences run − baseline run of the same ``pair`` value (e.g. seed):
    a dot per pair, the bar their mean, and a zero line — what a paired comparison tests.
    """
    for column in (label, *metrics, *((pair,) if baseline is not None else ())):
        if column not in runs:
            raise ValueError(f"runs must have a column {column!r}")
    units = dict(units or {})
    names = list(dict.fromkeys(runs[label]))
    if baseline is not None and baseline not in names:
        raise ValueError(f"baseline must be one of {names}, got {baseline!r}")
    shown = [name for name in names if name != baseline]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.3 * len(metrics), 3.6), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        if baseline is not None:
            table = runs.pivot(index=pair, columns=label, values=metric)
        for i, name in enumerate(shown):
            if baseline is None:
                values = np.asarray(runs.loc[runs[label] == name, metric], dtype=float)
            else:
                values = np.asarray(table[name] - table[baseline], dtype=float)
            colour = "tab:gray" if baseline is None and i == 0 else "tab:blue"
            ax.bar(i, values.mean(), color=colour, alpha=0.6)
            ax.scatter(np.full(len(values), i), values, color="black", s=12, zorder=3)
        ax.set_xticks(range(len(shown)), shown, rotation=40, ha="right", fontsize=8)
        if baseline is None:
            ax.set(title=metric, ylim=(0, None))
        else:
            ax.axhline(0, color="black", lw=0.8)
            ax.set(title=f"{metric}: {label} − {baseline}, per {pair}")
        if metric in units:
            ax.set_ylabel(units[metric] if baseline is None else f"difference, {units[metric]}")
    fig.tight_layout()
    return fig


def plot_control_curves(histories, *, column: str = "entropy", label: str = "control", controls=None, ax=None,
                        ylabel: str = "mean token entropy of the batch (nats)"):
    """One line per ``label`` value: ``column`` at each training step, the mean over its seeds, with
    the band from the lowest to the highest seed (Cui et al. 2025's picture of a control: the entropy
    curve over training, with and without it).

    ``histories`` is a DataFrame (or a list of them) with columns ``label``, ``seed``, ``step`` and
    ``column``; ``controls`` chooses and orders the lines (default: all, in order of appearance).
    """
    import pandas as pd

    table = pd.concat(histories, ignore_index=True) if isinstance(histories, (list, tuple)) else histories
    for name in (label, "seed", "step", column):
        if name not in table:
            raise ValueError(f"histories must have a column {name!r}")
    names = list(dict.fromkeys(table[label]))
    chosen = names if controls is None else list(controls)
    unknown = [name for name in chosen if name not in names]
    if unknown:
        raise ValueError(f"controls must be among {names}, got {unknown}")
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4))
    colours = plt.get_cmap("tab10")
    for i, name in enumerate(chosen):
        by_step = table[table[label] == name].groupby("step")[column]
        steps = np.asarray(by_step.mean().index, dtype=float)
        colour = "black" if i == 0 else colours(i % 10)
        ax.plot(steps, by_step.mean().to_numpy(), color=colour, lw=2 if i == 0 else 1.3,
                label=f"{name} ({table.loc[table[label] == name, 'seed'].nunique()} seeds)")
        ax.fill_between(steps, by_step.min().to_numpy(), by_step.max().to_numpy(), color=colour, alpha=0.12)
    ax.set(xlabel="training step", ylabel=ylabel, ylim=(0, None),
           title=f"{column} over training: mean over seeds, band from lowest to highest seed")
    ax.legend(fontsize=7, ncol=2)
    return ax.figure


def plot_step_law(steps, *, covariances=("state_cov", "natural_cov")):
    """Three panels from a table with one row per training step (``entropy_step_change``'s keys):
    measured ΔH against the first-order law with the step's own Δz (the line y = x); measured ΔH
    against −covariance, one panel (and x-scale) for each of ``covariances`` (known before the step; the
    law's scale η is unknown, so no line; default the per-state estimate and the pooled batch one, each
    with its Pearson r, coloured by step, the first step labelled); and below them all over the steps
    (the covariances on their own axis)."""
    covariances = list(covariances)
    if not covariances:
        raise ValueError("covariances must name at least one column")
    for column in ("measured", "first_order", *covariances):
        if column not in steps:
            raise ValueError(f"steps must have a column {column!r}")
    measured = np.asarray(steps["measured"], dtype=float)
    first_order = np.asarray(steps["first_order"], dtype=float)
    number = np.arange(len(measured))  # step 0, 1, ...: the rows of the table
    # The scatters side by side, one per covariance on its own x-scale (their ranges differ tenfold), and the
    # steps below them at the column's full width (rlbook._figures).
    top = ["law", *covariances]
    bottom = ["steps"] * (len(top) - len(top) // 2) + ["covs"] * (len(top) // 2) if len(top) > 2 else ["steps", "covs"]
    fig, panels = plt.subplot_mosaic([top, bottom], figsize=(COLUMN_IN, 6.6))
    axes = [panels["law"], *(panels[c] for c in covariances), panels["steps"]]
    reach = max(np.abs(measured).max(), np.abs(first_order).max(), 1e-6) * 1.1
    axes[0].plot([-reach, reach], [-reach, reach], "k--", lw=1, label="y = x")
    axes[0].scatter(first_order, measured, c=number, cmap="viridis", s=22)
    axes[0].set(xlabel="first order −Cov_π(log π, Δz)", ylabel="measured ΔH (nats)",
                title=f"own Δz: r = {_pearson(first_order, measured):+.2f}")
    axes[0].legend(fontsize=8)
    markers, colours = ("o", "^", "s", "v"), ("tab:green", "tab:purple", "tab:brown", "tab:olive")
    for i, column in enumerate(covariances):
        predicted = -np.asarray(steps[column], dtype=float)
        ax = axes[1 + i]
        ax.scatter(predicted, measured, marker=markers[i % 4], c=number, cmap="viridis", s=22,
                   edgecolors=colours[i % 4])
        ax.annotate("first step", (predicted[0], measured[0]), fontsize=7, xytext=(4, -8), textcoords="offset points")
        ax.axhline(0, color="gray", lw=0.8)
        ax.axvline(0, color="gray", lw=0.8)
        ax.set(xlabel=f"−{column} (before the step)", ylabel="measured ΔH (nats)",
               title=f"r = {_pearson(predicted, measured):+.2f}")
    steps_ax = axes[-1]
    steps_ax.plot(number, measured, "o-", color="tab:red", label="measured ΔH")
    steps_ax.plot(number, first_order, "s--", color="tab:blue", label="first order")
    steps_ax.axhline(0, color="gray", lw=0.8)
    steps_ax.set(xlabel="step", ylabel="nats", title="over the steps (scatter colour: step)")
    steps_ax.legend(fontsize=8, loc="lower right")
    # each covariance on its own y-axis (their ranges differ tenfold), so each one's variation shows
    cov_ax, lines = panels["covs"], []
    for i, column in enumerate(covariances):
        ax = cov_ax if i == 0 else cov_ax.twinx()
        if i > 1:
            ax.spines["right"].set_position(("axes", 1 + 0.18 * (i - 1)))
        lines += ax.plot(number, -np.asarray(steps[column], dtype=float), marker=markers[i % 4], ls=":",
                         color=colours[i % 4], label=f"−{column}")
        ax.set_ylabel(f"−{column}", color=colours[i % 4])
        ax.tick_params(axis="y", colors=colours[i % 4])
    cov_ax.axhline(0, color="gray", lw=0.8)
    cov_ax.set(xlabel="step", title="the covariances, each on its own axis")
    cov_ax.legend(lines, [line.get_label() for line in lines], fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def plot_frontier_along_run(probes, *, fit_steps: int, ax=None):
    """One run's held-out (entropy, pass@1) at its probes, joined in step order and coloured by step,
    with the frontier R = −a·e^H + b (``rlbook.entropy.fit_entropy_frontier``) fitted to the first
    ``fit_steps`` probes only and drawn over the whole entropy range: Cui et al.'s use of it, fit early
    and read the rest off the curve. ``probes``: a table with ``step``, ``entropy``, ``pass@1`` and,
    optionally, ``se`` (error bars). Returns the figure."""
    for column in ("step", "entropy", "pass@1"):
        if column not in probes:
            raise ValueError(f"probes must have a column {column!r}")
    if not 3 <= fit_steps <= len(probes):
        raise ValueError(f"fit_steps must be between 3 and the {len(probes)} probes, got {fit_steps}")
    h = np.asarray(probes["entropy"], dtype=float)
    r = np.asarray(probes["pass@1"], dtype=float)
    step = np.asarray(probes["step"], dtype=float)
    if ax is None:
        _, ax = plt.subplots(figsize=(COLUMN_IN * 0.75, 4.0))
    ax.plot(h, r, "-", color="lightgray", lw=1, zorder=1)
    if "se" in probes:
        ax.errorbar(h, r, yerr=np.asarray(probes["se"], dtype=float), fmt="none", ecolor="gray", lw=0.8, zorder=1)
    dots = ax.scatter(h, r, c=step, cmap="viridis", s=30, zorder=2)
    ax.scatter(h[:fit_steps], r[:fit_steps], s=90, facecolors="none", edgecolors="black", zorder=3,
               label=f"fitted: the first {fit_steps} probes")
    fit = fit_entropy_frontier(h[:fit_steps], r[:fit_steps])
    grid = np.linspace(min(h.min(), 0.0), h.max(), 100)
    ax.plot(grid, -fit["a"] * np.exp(grid) + fit["b"], "k--", lw=1.2, label="R = −a·e^H + b (early fit)")
    ax.set(xlabel="held-out mean token entropy H (nats)", ylabel="held-out pass@1",
           title=f"along one run: early fit a = {fit['a']:.2f}, b = {fit['b']:.2f}, ceiling b − a = {fit['ceiling']:.2f}")
    ax.figure.colorbar(dots, ax=ax, label="step")
    ax.legend(fontsize=8)
    return ax.figure


def _pearson(x, y) -> float:
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def plot_entropy_frontier(points, *, controls=None, seed="all", from_step: int = 1, ax=None):
    """(entropy, reward) points and the frontier R = −a·e^H + b fitted to them, r² in the title.

    ``points`` is a table (DataFrame) with columns ``control``, ``seed``, ``step``, ``entropy`` and
    ``reward``. Only the rows of ``controls`` (default: all), of ``seed`` ("all" or one seed) and
    of steps ≥ ``from_step`` enter the fit; with fewer than 3 points there is no fit.
    """
    for column in ("control", "seed", "step", "entropy", "reward"):
        if column not in points:
            raise ValueError(f"points must have a column {column!r}")
    names = list(dict.fromkeys(points["control"]))
    chosen = names if controls is None else list(controls)
    unknown = [name for name in chosen if name not in names]
    if unknown:
        raise ValueError(f"controls must be among {names}, got {unknown}")
    keep = points["control"].isin(chosen) & (points["step"] >= from_step)
    if seed != "all":
        keep &= points["seed"] == seed
    selected = points[keep]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    colours = plt.get_cmap("tab10")
    for i, name in enumerate(names):
        rows = selected[selected["control"] == name]
        if len(rows):
            ax.scatter(rows["entropy"], rows["reward"], s=18, color=colours(i % 10), label=name)
    title = f"{len(selected)} points"
    if len(selected) >= 3:
        fit = fit_entropy_frontier(np.array(selected["entropy"], dtype=float), np.array(selected["reward"], dtype=float))
        grid = np.linspace(selected["entropy"].min(), selected["entropy"].max(), 100)
        ax.plot(grid, -fit["a"] * np.exp(grid) + fit["b"], "k-", lw=1.5, label="R = −a·e^H + b")
        title += f": a = {fit['a']:.3f}, b = {fit['b']:.3f}, r² = {fit['r2']:.2f}"
    else:
        title += ": too few to fit (need 3)"
    ax.set(xlabel="entropy H (nats)", ylabel="reward", title=title)
    if len(selected):
        ax.legend(fontsize=7, loc="best")
    return ax.figure


def entropy_frontier_widget(points, *, off=()):
    """``plot_entropy_frontier`` with its knobs: the seed, the first step kept, and a checkbox per control,
    ticked except for the controls named in ``off`` (e.g. runs whose entropies are on another scale)."""
    import ipywidgets as widgets

    for column in ("control", "seed", "step"):
        if column not in points:
            raise ValueError(f"points must have a column {column!r}")
    names = list(dict.fromkeys(points["control"]))
    unknown = [name for name in off if name not in names]
    if unknown:
        raise ValueError(f"off must name controls among {names}, got {unknown}")
    boxes = {f"control_{i}": widgets.Checkbox(value=name not in off, description=name) for i, name in enumerate(names)}

    def draw(seed, from_step, **included):
        chosen = [name for (key, name) in zip(boxes, names) if included[key]]
        plot_entropy_frontier(points, controls=chosen, seed=seed, from_step=from_step)
        plt.show()

    seeds = ["all", *sorted(set(points["seed"].tolist()))]
    steps = points["step"]
    return widgets.interact(
        draw, seed=widgets.Dropdown(options=seeds, value="all", description="seed"),
        from_step=widgets.IntSlider(value=int(steps.min()), min=int(steps.min()), max=int(steps.max()),
                                    description="from step"),
        **boxes)
