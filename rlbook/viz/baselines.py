"""Figures and widgets for lesson 09 (baselines): the variance and bias of each baseline's gradient.

The numbers come from ``rlbook.gradients.baseline_statistics`` (and ``sweep_group_sizes`` over G):
per-completion gradients of the output layer, grouped into G-sample estimates, compared with a
high-sample reference gradient.
``plot_baseline_comparison`` draws one group size; ``plot_variance_vs_group_size`` the sweep over G;
``group_size_widget`` puts G on a slider. Bars of a variance are drawn on a linear axis from 0,
each labelled with its ratio to the no-baseline bar, so that a 10 % difference looks like one.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

__all__ = ["BASELINE_COLOURS", "as_table", "plot_baseline_comparison", "plot_noise_by_setting",
           "plot_variance_vs_group_size", "group_size_widget"]

_LABELS = {"relative_variance": "noise-to-signal  variance / ‖E ĝ‖²", "variance": "variance E‖ĝ − E ĝ‖²"}
BASELINE_COLOURS = {"none": "tab:red", "mean": "tab:gray", "rloo": "tab:green", "grpo": "tab:blue",
                    "value": "tab:orange", "critic": "tab:purple"}


def plot_baseline_comparison(statistics: dict[str, dict[str, float]], *, group_size: int | None = None):
    """Three panels over the baselines: the variance of the batch gradient, its noise-to-signal
    (variance / ‖E ĝ‖², which a rescaling of the estimator does not change), and its scale along
    the reference gradient (1 = unbiased), with ±2 standard errors (``scale_noise``) from the finite sample.

    The two variance panels are linear from 0, each bar labelled with its ratio to ``none`` (when
    present): on a log axis cut above 0 a ±20 % difference would look like a factor of several."""
    if not statistics:
        raise ValueError("statistics must hold at least one baseline")
    names = list(statistics)
    colours = [BASELINE_COLOURS.get(name, "tab:olive") for name in names]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, key, title in ((axes[0], "variance", "variance E‖ĝ − E ĝ‖²"),
                           (axes[1], "relative_variance", "noise-to-signal  variance / ‖E ĝ‖²")):
        _ratio_bars(ax, names, [statistics[n][key] for n in names], colours)
        ax.set_title(title)
    scales = [statistics[n]["scale"] for n in names]
    noise = [2 * statistics[n]["scale_noise"] for n in names]
    axes[2].bar(names, scales, yerr=noise, capsize=3, color=colours)
    axes[2].axhline(1, color="black", lw=1, ls="--")
    axes[2].set(title="scale ⟨E ĝ, ∇J⟩ / ‖∇J‖²  (1 = unbiased)")
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    if group_size is not None:
        fig.suptitle(f"one batch, groups of G = {group_size}", fontsize=10)
    fig.tight_layout()
    return fig


def _ratio_bars(ax, names, values, colours):
    """Bars on a linear axis from 0, each labelled ×(its value / the ``none`` bar's) when ``none`` is drawn."""
    bars = ax.bar(names, values, color=colours)
    ax.set_ylim(0, 1.18 * max(values))
    if "none" in names:
        reference = values[names.index("none")]
        ax.bar_label(bars, [f"×{value / reference:.2f}" for value in values], fontsize=7, padding=1)


def plot_noise_by_setting(settings: dict[str, dict[str, dict[str, float]]], *, key: str = "relative_variance",
                          title: str | None = None):
    """Grouped bars of ``key`` (default the noise-to-signal) for each baseline, one bar per setting,
    on a linear axis from 0; each bar of a later setting is labelled with its ratio to the same
    baseline's bar in the first setting.

    ``settings``: label → ``baseline_statistics`` output (e.g. the same batch with two reward
    definitions); baselines missing from a setting are left out of its bars.
    """
    if not settings:
        raise ValueError("settings must hold at least one labelled set of statistics")
    names = list(dict.fromkeys(name for statistics in settings.values() for name in statistics))
    width = 0.8 / len(settings)
    first = next(iter(settings.values()))
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(names), 3.4))
    top = 0.0
    for j, (label, statistics) in enumerate(settings.items()):
        shown = [name for name in names if name in statistics]
        positions = [i + (j - (len(settings) - 1) / 2) * width for i, name in enumerate(names) if name in statistics]
        values = [statistics[name][key] for name in shown]
        top = max(top, *values)
        bars = ax.bar(positions, values, width, label=label, color=plt.get_cmap("tab10")(j), alpha=0.85)
        if j > 0:
            ax.bar_label(bars, [f"×{statistics[name][key] / first[name][key]:.1f}" if name in first else ""
                                for name in shown], fontsize=7, padding=1)
    ax.set_xticks(range(len(names)), names)
    ax.set(ylim=(0, 1.15 * top), ylabel=_LABELS.get(key, key))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_variance_vs_group_size(sweep: dict[int, dict[str, dict[str, float]]], *, key: str = "relative_variance",
                                highlight: int | None = None):
    """``key`` (default the noise-to-signal) of each baseline against G, on log-log axes, with the 1/G
    slope of an average of G independent samples for comparison; ``highlight`` marks one G."""
    if not sweep:
        raise ValueError("sweep must hold at least one group size")
    sizes = sorted(sweep)
    fig, ax = plt.subplots(figsize=(5.4, 3.8))
    for name in sweep[sizes[0]]:
        values = [sweep[g][name][key] for g in sizes]
        style = "o--" if name == "mean" else "o-"  # mean and RLOO share their noise-to-signal: keep both visible
        ax.plot(sizes, values, style, color=BASELINE_COLOURS.get(name, "tab:olive"), label=name, ms=4)
    first = sweep[sizes[0]]["none"][key] if "none" in sweep[sizes[0]] else None
    if first is not None:
        ax.plot(sizes, [first * sizes[0] / g for g in sizes], ":", color="black", lw=1, label="∝ 1/G")
    if highlight is not None:
        ax.axvline(highlight, color="0.5", lw=1, ls="--")
    ax.set(xscale="log", yscale="log", xlabel="group size G (samples per prompt)", ylabel=_LABELS.get(key, key))
    ax.minorticks_off()
    ax.set_xticks(sizes, [str(g) for g in sizes])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def group_size_widget(sweep: dict[int, dict[str, dict[str, float]]]):
    """A slider over the measured group sizes: the sweep with G marked, and the three panels at G."""
    import ipywidgets as widgets

    sizes = sorted(sweep)

    def draw(group_size):
        plot_variance_vs_group_size(sweep, highlight=group_size)
        plot_baseline_comparison(sweep[group_size], group_size=group_size)
        plt.show()

    return widgets.interact(draw, group_size=widgets.SelectionSlider(options=sizes, value=sizes[len(sizes) // 2]))


def as_table(statistics: dict[str, dict[str, float]]):
    """The statistics as a pandas DataFrame, one row per baseline (for display)."""
    import pandas as pd

    return pd.DataFrame(statistics).T[["variance", "relative_variance", "scale", "scale_noise", "cosine",
                                       "relative_bias", "mean_noise"]]
