"""Figures and widgets for lesson 01: Monte Carlo policy gradients, baselines, a REINFORCE run.

Every function draws a new figure and returns it; end a notebook line with ``;`` so Jupyter shows
it once. ``gradient_spread_widget`` wraps ``plot_gradient_spread`` in ``ipywidgets.interact``.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter
import numpy as np
import torch

from rlbook._figures import COLUMN_IN, panel_grid
from rlbook.toys import (
    BASELINES,
    GaussianBandit,
    exact_gradient,
    exact_estimate_variance,
    exact_gradient_variance,
    reinforce_estimates,
    sample_batches,
    total_variance,
    unsampled_arm_push,
)

__all__ = [
    "BATCH_SIZES",
    "REWARD_OFFSETS",
    "plot_gradient_spread",
    "gradient_spread_widget",
    "plot_variance_vs_batch_size",
    "plot_bandit_learning",
    "plot_training_history",
    "plot_arm_histories",
]

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
BASELINE_COLOURS = {"none": "tab:red", "value": "tab:blue", "leave_one_out": "tab:green"}
_SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def _sub(k: int) -> str:
    """An arm index as a subscript: θ₂, π₁₀."""
    return str(k).translate(_SUBSCRIPT)


def _shifted(bandit: GaussianBandit, reward_offset: float) -> GaussianBandit:
    """The bandit with every arm's mean reward moved by ``reward_offset`` (∇J does not change)."""
    if not math.isfinite(reward_offset):
        raise ValueError(f"reward_offset must be a finite number, got {reward_offset!r}")
    if reward_offset == 0:
        return bandit
    return GaussianBandit(means=tuple(m + reward_offset for m in bandit.means), noise=bandit.noise)


def plot_gradient_spread(bandit: GaussianBandit, logits, *, batch_size: int = 16, baseline: str = "none",
                         num_estimates: int = 300, dims: tuple[int, int] = (0, 1), seed: int = 0,
                         half_width: float | None = None, reference_baseline: str | None = None,
                         reward_offset: float = 0.0):
    """Scatter ``num_estimates`` REINFORCE estimates of ∇J around the exact gradient.

    Two coordinates ``dims`` = (i, j) of each estimate are drawn. The estimates from batches that
    never drew arm i are drawn hollow: their i-th coordinate is −π_i times the batch's mean advantage
    (``rlbook.toys.unsampled_arm_push``), so without a baseline they form a stripe left of zero, the
    share (1 − π_i)^N of all batches (the legend gives the count, its binomial SE and the exact
    share); a dashed line marks their exact mean push. With ``reference_baseline``, that baseline's
    estimates from the same batches are drawn faintly behind, for comparison. ``reward_offset`` c adds
    c to every arm's mean reward: ∇J is unchanged, and so are the value and leave-one-out estimates
    (their advantages do not see c), while the no-baseline estimate gains c · (1/N) Σ_i (e_{a_i} − π).
    The legend says how far the mean of the estimates lies from ∇J, in standard errors (sd/√M) per coordinate.
    The title gives the measured total variance over all K coordinates and over the two drawn, the exact
    one over all K (``rlbook.toys.exact_estimate_variance``) with, for a baseline, its cut against no
    baseline on the same bandit (exact none / exact this), and how many
    estimates fall outside the view when any do. The view is
    centred on the exact gradient with a fixed ``half_width`` (by default 3 standard deviations of the
    wider of the two coordinates of a 4-pull estimate without baseline and without offset), so that
    changing the batch size, the baseline or the offset changes only the cloud.
    """
    i, j = dims
    exact = exact_gradient(bandit, logits).numpy()
    if half_width is None:
        per_arm = exact_gradient_variance(bandit, logits, per_arm=True)
        half_width = 3 * math.sqrt(float(per_arm[[i, j]].max()) / 4)
    bandit = _shifted(bandit, float(reward_offset))
    arms, _ = sample_batches(bandit, logits, batch_size=batch_size, num_estimates=num_estimates, seed=seed)
    estimates = reinforce_estimates(bandit, logits, batch_size=batch_size, num_estimates=num_estimates,
                                    baseline=baseline, seed=seed)
    fig, ax = plt.subplots(figsize=(5.4, 5.8))
    if reference_baseline is not None:
        reference = reinforce_estimates(bandit, logits, batch_size=batch_size, num_estimates=num_estimates,
                                        baseline=reference_baseline, seed=seed)
        ax.scatter(reference[:, i], reference[:, j], s=9, color="0.82", zorder=0,
                   label=f"same batches, baseline={reference_baseline!r}")
    colour = BASELINE_COLOURS.get(baseline, "tab:gray")
    missed = (arms != i).all(dim=1).numpy()
    drawn = ~missed
    ax.scatter(estimates[drawn, i], estimates[drawn, j], s=9, alpha=0.45, color=colour,
               label=f"estimates ĝ (N={batch_size}) of batches that drew arm {i}")
    push = unsampled_arm_push(bandit, logits, i, batch_size=batch_size, baseline=baseline)
    share_se = math.sqrt(push["probability"] * (1 - push["probability"]) / num_estimates)
    ax.scatter(estimates[missed, i], estimates[missed, j], s=14, facecolors="none", edgecolors=colour, linewidths=0.8,
               label=f"batches that never drew arm {i}: {int(missed.sum())} of {num_estimates} = {missed.mean():.0%} "
                     f"(SE {share_se:.1%}; exact (1 − π{_sub(i)})^N = {push['probability']:.0%})")
    ax.axvline(push["mean_push"], color=colour, ls="--", lw=1, zorder=1,
               label=f"their exact mean push on θ{_sub(i)}: {push['mean_push']:+.3f}")
    mean = estimates.mean(dim=0).numpy()
    ax.scatter(*exact[[i, j]], marker="*", s=260, color="black", zorder=3, label="exact ∇J")
    ax.scatter(*mean[[i, j]], marker="+", s=160, color="white", linewidths=2.5, zorder=4)
    off = (mean - exact) / (estimates.std(dim=0).numpy() / math.sqrt(num_estimates))  # in standard errors
    ax.scatter(*mean[[i, j]], marker="+", s=120, color=colour, linewidths=1.5, zorder=5,
               label=f"mean of the estimates: {off[i]:+.1f} and {off[j]:+.1f} standard errors (sd/√M) from ∇J")
    ax.set_xlim(exact[i] - half_width, exact[i] + half_width)
    ax.set_ylim(exact[j] - half_width, exact[j] + half_width)
    ax.axhline(0, color="0.8", lw=0.8, zorder=0)
    ax.axvline(0, color="0.8", lw=0.8, zorder=0)
    ax.set_xlabel(f"estimated ∂J/∂θ{_sub(i)}")
    ax.set_ylabel(f"estimated ∂J/∂θ{_sub(j)}")
    offset = f", reward offset {reward_offset:+g}" if reward_offset else ""
    drawn_variance = total_variance(estimates[:, [i, j]])
    outside = int((np.abs(estimates[:, [i, j]].numpy() - exact[[i, j]]) > half_width).any(axis=1).sum())
    clipped = f"\n{outside} of {num_estimates} estimates lie outside this fixed view" if outside else ""
    exact_variance = exact_estimate_variance(bandit, logits, batch_size=batch_size, baseline=baseline)
    cut = "" if baseline == "none" else (
        f" = 1/{exact_estimate_variance(bandit, logits, batch_size=batch_size, baseline='none') / exact_variance:.2f}"
        " of none's")
    ax.set_title(f"baseline = {baseline!r}, batch size {batch_size}{offset}\n"
                 f"measured E‖ĝ − ∇J‖²: all {bandit.num_arms} coordinates {total_variance(estimates):.4f}, "
                 f"the two drawn {drawn_variance:.4f}\n"
                 f"exact, all {bandit.num_arms}: {exact_variance:.4f}{cut}{clipped}", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=8, framealpha=0.9, ncol=1)
    fig.tight_layout()
    return fig


REWARD_OFFSETS = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 4.0)


def gradient_spread_widget(bandit: GaussianBandit, logits, *, dims: tuple[int, int] = (0, 1),
                           num_estimates: int = 300, seed: int = 0):
    """Batch size, baseline and a reward offset as knobs of ``plot_gradient_spread`` (``ipywidgets.interact``).

    With a baseline chosen, the no-baseline estimates of the same batches are drawn faintly behind.
    The reward offset c moves every arm's mean by c: the no-baseline cloud grows with |J + c| while
    the baselines' clouds stay where they are (their advantages do not see c); at c ≈ −J no baseline
    is nearly the value baseline. The view stays the one of offset 0, so a large offset can carry the
    no-baseline cloud out of the frame — the point.
    """
    import ipywidgets as widgets

    per_arm = exact_gradient_variance(bandit, logits, per_arm=True)
    half_width = 3 * math.sqrt(float(per_arm[list(dims)].max()) / 4)  # the view of offset 0, kept for every c

    def draw(batch_size, baseline, reward_offset):
        if baseline == "leave_one_out" and batch_size < 2:  # a reader can set this: say why, not a traceback
            fig, ax = plt.subplots(figsize=(5.4, 5.8))
            ax.text(0.5, 0.5, f"batch size {batch_size}, reward offset {reward_offset:+g}:\n"
                    "the leave-one-out baseline averages the other pulls\nof the batch: "
                    "it needs batch size ≥ 2", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
        else:
            plot_gradient_spread(bandit, logits, batch_size=batch_size, baseline=baseline, dims=dims,
                                 num_estimates=num_estimates, seed=seed, half_width=half_width,
                                 reference_baseline=None if baseline == "none" else "none",
                                 reward_offset=reward_offset)
        plt.show()  # inside the interact's output: ipywidgets' own flush misses matplotlib's "inline" backend

    return widgets.interact(
        draw,
        batch_size=widgets.SelectionSlider(options=BATCH_SIZES, value=4, description="batch size"),
        baseline=widgets.Dropdown(options=BASELINES, value="none", description="baseline"),
        reward_offset=widgets.SelectionSlider(options=REWARD_OFFSETS, value=0.0, description="reward offset"),
    )


def plot_variance_vs_batch_size(measured: dict[str, list[float]], batch_sizes, *,
                                exact_one_pull: dict[str, float] | None = None,
                                exact: dict[str, list[float]] | None = None):
    """Log-log plot of the measured total variance against batch size, one line per baseline.

    ``measured[baseline]`` holds one variance per entry of ``batch_sizes``. The exact variances are
    drawn as lines: ``exact[baseline]`` one per batch size (e.g. ``rlbook.toys.exact_estimate_variance``,
    which covers the leave-one-out baseline too), or ``exact_one_pull[baseline]``, the variance of a
    one-pull estimate, drawn as variance / N (a constant baseline).
    """
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    sizes = np.asarray(batch_sizes, dtype=float)
    for baseline, variances in measured.items():
        colour = BASELINE_COLOURS.get(baseline, None)
        ax.plot(sizes, variances, "o", color=colour, label=f"measured, baseline={baseline!r}")
        if exact and baseline in exact:
            ax.plot(sizes, np.asarray(exact[baseline], dtype=float), "-", color=colour, alpha=0.6, lw=1.2,
                    label=f"exact, baseline={baseline!r}")
        elif exact_one_pull and baseline in exact_one_pull:
            ax.plot(sizes, exact_one_pull[baseline] / sizes, "-", color=colour, alpha=0.6, lw=1.2,
                    label=f"exact / N, baseline={baseline!r}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size N (pulls per gradient estimate)")
    ax.set_ylabel("total variance E‖ĝ − ∇J‖²")
    ax.set_title("Variance falls as 1/N; a baseline lowers the whole line", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_bandit_learning(histories: dict[str, torch.Tensor], *, best: float | None = None):
    """Expected reward J(θ_t) of REINFORCE runs: the mean over runs and the 10–90% band.

    ``histories[baseline]`` is (num_runs, steps + 1), as returned by ``rlbook.toys.train_bandit``.
    """
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for baseline, history in histories.items():
        values = history.numpy()
        steps = np.arange(values.shape[1])
        colour = BASELINE_COLOURS.get(baseline, None)
        ax.plot(steps, values.mean(0), color=colour, label=f"baseline={baseline!r} (mean of {values.shape[0]} runs)")
        low, high = np.quantile(values, [0.1, 0.9], axis=0)
        ax.fill_between(steps, low, high, color=colour, alpha=0.15, lw=0)
    if best is not None:
        ax.axhline(best, color="black", ls=":", lw=1, label="best arm's mean reward")
    ax.fill_between([], [], [], color="0.5", alpha=0.3, lw=0, label="shaded: 10–90 % quantiles of the runs")
    ax.set_xlabel("REINFORCE step")
    ax.set_ylabel("expected reward J(θ)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_training_history(history, keys=None, *, title: str | None = None, ncols: int | None = None,
                          labels=None, titles=None, log_y=(), steps=None, ylabels=None):
    """One panel per metric of one or several training runs, against the step.

    ``history``: a dict mapping a metric name to its value at every step (equal-length lists), or a
    list of such dicts, one per run (e.g. per seed), drawn in one colour per run and named by
    ``labels`` (default "run 0", "run 1", …) in the first panel's legend. ``keys``: the panels, in
    order; an entry may be a tuple of metric names drawn in one panel (solid, dashed, dotted), e.g. one
    metric measured on two kinds of sample. ``titles``: one title per panel (default: its metric names).
    ``ncols``: panels per row (default: rows that fit the book's column, ``rlbook._figures.panel_grid``:
    seven metrics are two rows, 4 + 3; ``figure.axes[i]`` is panel ``i``'s). ``log_y``: metric names whose panel gets a
    logarithmic y-axis (a ratio that spikes at one step). ``steps``: the x values (default 0, 1, …; pass
    the history's ``step`` column to number them as the trainer does, from 1). ``ylabels``: one y-axis
    label per panel (default none; the titles name the metric).
    """
    runs = [history] if isinstance(history, dict) else list(history)
    if not runs or not all(isinstance(run, dict) for run in runs):
        raise ValueError("history must be a dict of metric -> values, or a non-empty list of such dicts")
    panels = [tuple(key) if isinstance(key, (tuple, list)) else (key,) for key in (keys or runs[0])]
    for index, run in enumerate(runs):
        missing = [name for panel in panels for name in panel if name not in run]
        if missing:
            where = "" if len(runs) == 1 else f" (run {index})"
            raise ValueError(f"history{where} has no metric {missing}; it has {sorted(run)}")
    labels = list(labels) if labels is not None else [f"run {index}" for index in range(len(runs))]
    if len(labels) != len(runs):
        raise ValueError(f"labels must name each of the {len(runs)} runs, got {len(labels)}")
    titles = list(titles) if titles is not None else [" / ".join(panel) for panel in panels]
    if len(titles) != len(panels):
        raise ValueError(f"titles must give one title per panel ({len(panels)}), got {len(titles)}")
    ylabels = list(ylabels) if ylabels is not None else [None] * len(panels)
    if len(ylabels) != len(panels):
        raise ValueError(f"ylabels must give one label per panel ({len(panels)}), got {len(ylabels)}")
    if ncols is None:  # rows that fit the book's column (seven metrics: 4 + 3)
        fig, axes = panel_grid(len(panels), panel=(3.4, 2.7), title=bool(title))
    else:
        if not isinstance(ncols, int) or isinstance(ncols, bool) or ncols < 1:
            raise ValueError(f"ncols must be a positive int, got {ncols!r}")
        ncols = min(ncols, len(panels))
        nrows = math.ceil(len(panels) / ncols)
        width = min(3.4 if ncols > 2 else 4.3, COLUMN_IN / ncols)  # the row fits the book's column
        fig, grid = plt.subplots(nrows, ncols, figsize=(width * ncols, 3.0 * nrows), squeeze=False)
        axes = list(grid.flat)
        for spare in axes[len(panels):]:  # so that figure.axes[i] is panel i
            fig.delaxes(spare)
        axes = axes[:len(panels)]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ("-", "--", ":")
    for number, (ax, panel, panel_title, ylabel) in enumerate(zip(axes, panels, titles, ylabels)):
        for index, run in enumerate(runs):
            for name, style in zip(panel, styles):
                values = run[name]
                x = list(range(len(values))) if steps is None else list(steps)
                if len(x) != len(values):
                    raise ValueError(f"steps has {len(x)} entries but {name!r} has {len(values)} values")
                ax.plot(x, values, ls=style, marker="o", ms=2.5, lw=1.2,
                        color=colours[index % len(colours)])
        handles = [Line2D([], [], color="0.3", ls=style, label=name) for name, style in zip(panel, styles)
                   ] if len(panel) > 1 else []
        if len(runs) > 1 and number == 0:
            handles += [Line2D([], [], color=colours[index % len(colours)], label=label)
                        for index, label in enumerate(labels)]
        if handles:
            ax.legend(handles=handles, fontsize=7)
        ax.set_title(panel_title, fontsize=10)
        if any(name in log_y for name in panel):
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ScalarFormatter())      # 2, 5, 10 rather than 2×10⁰
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("step")
        if ylabel:
            ax.set_ylabel(ylabel, fontsize=9)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_baseline_factor(checkpoints: dict[str, dict], *, group_size: int):
    """The measured variance cut of a leave-one-out baseline against the 0/1 heuristic, one point per checkpoint.

    ``checkpoints[label]`` holds ``p`` (the pass rate p̄), ``factor`` (variance without a baseline / with, as
    lesson 01's probe measures it) and ``SE`` (its standard error). The heuristic 1/(1 − p̄) is for the value
    baseline; it is drawn times (G − 1)/G, the leave-one-out estimate's factor in groups of ``group_size`` = G
    (lesson 09). Log y axis; the dotted line at 1 is "no cut". A row that also holds ``predicted`` (the
    heuristic with the score sizes of right and wrong answers put in, ``heuristic_noise_ratios``) gets it as
    an open diamond.
    """
    if not checkpoints:
        raise ValueError("checkpoints must hold at least one checkpoint")
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 2:
        raise ValueError(f"group_size must be an int ≥ 2, got {group_size!r}")
    for label, row in checkpoints.items():
        missing = {"p", "factor", "SE"} - set(row)
        if missing:
            raise ValueError(f"checkpoint {label!r} lacks {sorted(missing)}")
    shrink = (group_size - 1) / group_size
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    p = np.linspace(0.0, 0.95, 200)
    ax.plot(p, shrink / (1 - p), "-", color="0.5", lw=1.2, label=f"heuristic 1/(1 − p̄) × {group_size - 1}/{group_size}")
    for i, (label, row) in enumerate(checkpoints.items()):
        colour = f"C{i}"
        ax.errorbar(row["p"], row["factor"], yerr=row["SE"], fmt="o", color=colour, capsize=3,
                    label=f"{label}: measured ± SE")
        ax.plot(row["p"], shrink / (1 - row["p"]), "x", color=colour)
        if "predicted" in row:
            ax.plot(row["p"], row["predicted"], "D", mfc="none", color=colour, ms=7)
    if any("predicted" in row for row in checkpoints.values()):
        ax.plot([], [], "D", mfc="none", color="0.3", label="heuristic with ‖s‖² of right / wrong put in")
    ax.axhline(1.0, color="black", ls=":", lw=1, label="no cut (factor 1)")
    ax.set_yscale("log")
    ax.set_xlabel("pass rate p̄ of the checkpoint's probe samples")
    ax.set_ylabel("variance without / with the baseline")
    ax.set_title("The baseline's measured cut (dots) against the heuristic (×)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_arm_histories(arms: dict, keys, *, titles=None, labels=None, held_out=None, ylabels=None):
    """Two training arms over the same seeds, one panel per metric: colour per arm, each seed a thin line,
    the mean over seeds a thick one (six lines of one width were hard to tell apart).

    ``arms``: arm name -> a list of per-seed histories (dicts of metric -> value at every step), the i-th
    history of every arm being seed i. ``keys``: the metrics drawn, one panel each; ``titles`` one per panel;
    ``labels`` the seeds' names. ``held_out``: arm name -> (values, standard errors), one per seed, drawn as a
    last panel with the seed on the x axis (e.g. the held-out pass@1 after training). ``ylabels``: one y-axis
    label per metric panel (default none), and the held-out panel's is "held-out pass@1".
    """
    if not arms or any(not runs for runs in arms.values()):
        raise ValueError("arms must map at least one arm name to a non-empty list of histories")
    n_seeds = {len(runs) for runs in arms.values()}
    if len(n_seeds) != 1:
        raise ValueError(f"every arm must hold the same number of seeds, got {sorted(n_seeds)}")
    n_seeds = n_seeds.pop()
    keys = list(keys)
    for arm, runs in arms.items():
        for run in runs:
            missing = [key for key in keys if key not in run]
            if missing:
                raise ValueError(f"a history of arm {arm!r} has no metric {missing}")
    titles = list(titles) if titles is not None else list(keys)
    if len(titles) != len(keys):
        raise ValueError(f"titles must give one title per panel ({len(keys)}), got {len(titles)}")
    ylabels = list(ylabels) if ylabels is not None else [None] * len(keys)
    if len(ylabels) != len(keys):
        raise ValueError(f"ylabels must give one label per panel ({len(keys)}), got {len(ylabels)}")
    labels = list(labels) if labels is not None else [f"seed {i}" for i in range(n_seeds)]
    if len(labels) != n_seeds:
        raise ValueError(f"labels must name each of the {n_seeds} seeds, got {len(labels)}")
    if held_out is not None and (set(held_out) != set(arms)
                                 or any(len(v) != n_seeds or len(e) != n_seeds for v, e in held_out.values())):
        raise ValueError("held_out must give every arm (values, SEs) with one entry per seed")
    n_panels = len(keys) + (held_out is not None)
    fig, axes = plt.subplots(1, n_panels, figsize=(min(3.6, COLUMN_IN / n_panels) * n_panels, 3.0), squeeze=False)
    axes = list(axes.flat)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    arm_colour = {arm: colours[index % len(colours)] for index, arm in enumerate(arms)}
    for ax, key, panel_title, ylabel in zip(axes, keys, titles, ylabels):
        for arm, runs in arms.items():
            for run in runs:
                ax.plot(range(len(run[key])), run[key], lw=0.7, alpha=0.45, color=arm_colour[arm])
            steps = min(len(run[key]) for run in runs)
            mean = np.mean([np.asarray(run[key][:steps], dtype=float) for run in runs], axis=0)
            ax.plot(range(steps), mean, lw=2.2, color=arm_colour[arm])
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel("step")
        if ylabel:
            ax.set_ylabel(ylabel, fontsize=9)
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=arm_colour[arm], lw=2.2, label=f"{arm}, mean of {n_seeds} seeds") for arm in arms]
    handles += [Line2D([], [], color="0.4", lw=0.7, alpha=0.6, label="one seed (" + ", ".join(labels) + ")")]
    axes[0].legend(handles=handles, fontsize=7)
    if held_out is not None:
        ax = axes[-1]
        markers = ("o", "s", "^", "D")
        for offset, ((arm, (values, errors)), marker) in enumerate(zip(held_out.items(), markers)):
            for index, (value, error) in enumerate(zip(values, errors)):
                ax.errorbar(index + 0.15 * (offset - (len(held_out) - 1) / 2), value, yerr=error, fmt=marker,
                            color=arm_colour[arm], capsize=3)
        ax.legend(handles=[Line2D([], [], color=arm_colour[arm], marker=m, ls="none", label=arm)
                           for arm, m in zip(held_out, markers)], fontsize=7)
        ax.set_xticks(range(n_seeds), labels)
        ax.set_xlabel("training seed")
        ax.set_ylabel("held-out pass@1", fontsize=9)
        ax.set_title("held-out pass@1 after training ± SE", fontsize=10)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
