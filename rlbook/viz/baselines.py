"""Figures and widgets for lesson 09 (baselines): the variance and bias of each baseline's gradient.

The numbers come from ``rlbook.gradients.baseline_statistics`` (and ``sweep_group_sizes`` over G):
per-completion gradients of the output layer, grouped into G-sample estimates, compared with a
high-sample reference gradient.
``plot_baseline_comparison`` draws one group size; ``plot_variance_vs_group_size`` the sweep over G;
``group_size_widget`` puts G on a slider; ``formula_widget`` puts §6's completed formula
(``rlbook.gradients.heuristic_noise_ratios``) on sliders, with the measured ratios drawn over it. Bars of a variance are drawn on a linear axis from 0,
each labelled with its ratio to the no-baseline bar, so that a 10 % difference looks like one.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

__all__ = ["BASELINE_COLOURS", "as_table", "plot_baseline_comparison", "plot_noise_by_setting",
           "plot_variance_vs_group_size", "group_size_widget", "plot_formula_ratios", "formula_widget"]

_LABELS = {"relative_variance": "noise-to-signal  variance / ‖E ĝ‖²", "variance": "variance E‖ĝ − E ĝ‖²"}
BASELINE_COLOURS = {"none": "tab:red", "mean": "tab:gray", "rloo": "tab:green", "grpo": "tab:blue",
                    "value": "tab:orange", "critic": "tab:purple"}


def plot_baseline_comparison(statistics: dict[str, dict[str, float]], *, group_size: int | None = None,
                             ratio_errors: dict[str, float] | None = None, tick_labels: dict[str, str] | None = None):
    """Three panels over the baselines: the variance of the batch gradient (greyed, titled not comparable:
    estimators of different lengths have different variances for the same noise), its noise-to-signal
    (variance / ‖E ĝ‖², which a rescaling of the estimator does not change), and its scale along
    the reference gradient (1 = unbiased), with ±3 standard errors (``scale_se`` when present, else
    ``scale_noise``), the lessons' threshold.

    The two variance panels are linear from 0, each bar labelled with its ratio to ``none`` (when
    present): on a log axis cut above 0 a ±20 % difference would look like a factor of several.
    ``ratio_errors``: {baseline: SE of its noise-to-signal ratio to none} (``rlbook.gradients.noise_ratio``);
    the middle panel's bars stay the raw noise-to-signal, its labels read ×ratio ± SE and its error bars carry that
    SE, scaled to the bar (its title says so; the right panel's bars are ±3 SE of the scale).
    ``tick_labels``: {baseline: the x tick to show for it} (e.g. "grpo" → "GRPO adv. (summed)"); others keep their key."""
    if not statistics:
        raise ValueError("statistics must hold at least one baseline")
    names = list(statistics)
    colours = [BASELINE_COLOURS.get(name, "tab:olive") for name in names]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    axes[0].set_ylabel("E‖ĝ − E ĝ‖²", fontsize=9)
    axes[1].set_ylabel("variance / ‖E ĝ‖²", fontsize=9)
    axes[2].set_ylabel("scale along ∇J", fontsize=9)
    for ax, key, title, errors in ((axes[0], "variance", "raw variance E‖ĝ − E ĝ‖²\n(not comparable: the lengths differ)", None),
                                   (axes[1], "relative_variance", "noise-to-signal  variance / ‖E ĝ‖²", ratio_errors)):
        _ratio_bars(ax, names, [statistics[n][key] for n in names], colours, errors=errors)
        ax.set_title(title + ("\n(labels: ratio to none ± SE; error bars: that SE)" if errors else ""), fontsize=10)
    for patch in axes[0].patches:   # greyed: the raw variance is shown for completeness, not for comparison
        patch.set_alpha(0.35)
    scales = [statistics[n]["scale"] for n in names]
    noise = [3 * statistics[n].get("scale_se", statistics[n]["scale_noise"]) for n in names]
    axes[2].bar(names, scales, yerr=noise, capsize=3, color=colours)
    axes[2].axhline(1, color="black", lw=1, ls="--")
    axes[2].set_title("scale ⟨E ĝ, ∇J⟩ / ‖∇J‖², ±3 SE  (1 = unbiased)", fontsize=10)
    for ax in axes:
        ax.tick_params(axis="x", labelsize=9)
        ax.grid(axis="y", alpha=0.3)
        if tick_labels:
            ax.set_xticks(range(len(names)), [tick_labels.get(name, name) for name in names], rotation=30,
                          ha="right", rotation_mode="anchor", fontsize=8)
    if group_size is not None:
        fig.suptitle(f"one batch, groups of G = {group_size}", fontsize=10)
    fig.tight_layout()
    return fig


def _ratio_bars(ax, names, values, colours, *, errors=None):
    """Bars on a linear axis from 0, each labelled ×(its value / the ``none`` bar's) when ``none`` is drawn;
    with ``errors`` ({name: SE of that ratio}) the labels add ± SE and the bars carry it as an error bar."""
    reference = values[names.index("none")] if "none" in names else None
    yerr = None
    if errors and reference is not None:
        yerr = [errors.get(name, 0.0) * reference for name in names]
    bars = ax.bar(names, values, color=colours, yerr=yerr, capsize=2 if yerr else 0)
    top = max(value + (err if yerr else 0.0) for value, err in zip(values, yerr or [0.0] * len(values)))
    ax.set_ylim(0, (1.32 if errors else 1.22) * top)
    if reference is not None:
        labels = [f"×{value / reference:.2f}" + (f"\n±{errors[name]:.2f}" if errors and errors.get(name) else "")
                  for name, value in zip(names, values)]
        if errors:  # above each bar's error bar, in black, small enough not to run into its neighbours
            for bar, label, err in zip(bars, labels, yerr):
                ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height() + err), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom", fontsize=7, linespacing=0.95)
        else:
            ax.bar_label(bars, labels, fontsize=8, padding=1)


def plot_noise_by_setting(settings: dict[str, dict[str, dict[str, float]]], *, key: str = "relative_variance",
                          title: str | None = None, ratio_errors: dict[str, dict[str, float]] | None = None,
                          decimals: int = 1):
    """Grouped bars of ``key`` (default the noise-to-signal) for each baseline, one bar per setting,
    on a linear axis from 0; each bar of a later setting is labelled with its ratio to the same
    baseline's bar in the first setting, to ``decimals`` places.

    ``settings``: label → ``baseline_statistics`` output (e.g. the same batch with two reward
    definitions); baselines missing from a setting are left out of its bars. ``ratio_errors``: setting
    label → {baseline: SE of that ratio} (e.g. ``rlbook.gradients.noise_ratio``'s), printed as "± SE".
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
            errors = (ratio_errors or {}).get(label, {})
            ax.bar_label(bars, [f"×{statistics[name][key] / first[name][key]:.{decimals}f}"
                                + (f"\n± {errors[name]:.{decimals}f}" if name in errors else "")
                                if name in first else "" for name in shown], fontsize=8, padding=1)
    ax.set_xticks(range(len(names)), names)
    ax.set(ylim=(0, 1.15 * top), ylabel=_LABELS.get(key, key))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


_COINCIDE = "mean = RLOO exactly (same noise-to-signal);\nGRPO = RLOO at G = 2 (0/1 rewards, population σ)"


def plot_variance_vs_group_size(sweep: dict[int, dict[str, dict[str, float]]], *, key: str = "relative_variance",
                                highlight: int | None = None, ratios=None, predictions=None):
    """``key`` (default the noise-to-signal) of each baseline against G, on log-log axes; ``highlight``
    marks one G. "none" (an average of G independent terms) falls as 1/G by construction, so no 1/G guide
    is drawn over it; the curves that coincide by construction are named in a note.

    ``ratios``: {baseline: {G: (ratio, se)}}, each baseline's noise-to-signal over none's
    (``rlbook.gradients.noise_ratio``): drawn in a second panel with ±1 SE bars, beside ``predictions``
    ({label: {G: value}}, e.g. ``heuristic_noise_ratios``), drawn as crosses."""
    if not sweep:
        raise ValueError("sweep must hold at least one group size")
    sizes = sorted(sweep)
    fig, axes = plt.subplots(1, 2 if ratios else 1, figsize=(10.4, 3.9) if ratios else (5.4, 3.9), squeeze=False)
    ax = axes[0, 0]
    for name in sweep[sizes[0]]:
        values = [sweep[g][name][key] for g in sizes]
        style = "o--" if name == "mean" else "o-"  # mean and RLOO share their noise-to-signal: keep both visible
        ax.plot(sizes, values, style, color=BASELINE_COLOURS.get(name, "tab:olive"), label=name, ms=4)
    ax.set(xscale="log", yscale="log", xlabel="group size G (samples per prompt)", ylabel=_LABELS.get(key, key))
    ax.text(0.02, 0.02, _COINCIDE, transform=ax.transAxes, fontsize=8, va="bottom")
    panels = [ax]
    if ratios:
        right = axes[0, 1]
        for offset, (name, by_size) in enumerate(ratios.items()):
            shown = [g for g in sizes if g in by_size]
            shift = [g * 1.03 ** (offset - (len(ratios) - 1) / 2) for g in shown]  # side by side on the log axis
            right.errorbar(shift, [by_size[g][0] for g in shown], yerr=[by_size[g][1] for g in shown], fmt="o-",
                           ms=4, capsize=2, color=BASELINE_COLOURS.get(name, "tab:olive"), label=f"{name}, measured ± SE")
        for marker, (label, by_size) in zip("xPD", (predictions or {}).items()):
            shown = [g for g in sizes if g in by_size]
            right.plot(shown, [by_size[g] for g in shown], marker, ls=":", color="black", ms=6, label=label)
        right.axhline(1, color="tab:red", lw=1)
        right.set(xscale="log", xlabel="group size G (samples per prompt)",
                  ylabel="noise-to-signal / none's  (> 1: noisier)")
        panels.append(right)
    for panel in panels:
        if highlight is not None:
            panel.axvline(highlight, color="0.5", lw=1, ls="--")
        panel.minorticks_off()
        panel.set_xticks(sizes, [str(g) for g in sizes])
        panel.grid(alpha=0.3)
        panel.legend(fontsize=8.5)
    fig.tight_layout()
    return fig


def group_size_widget(sweep: dict[int, dict[str, dict[str, float]]], ratios=None, predictions=None):
    """A slider over the measured group sizes: the sweep with G marked, and the three panels at G.

    ``ratios`` and ``predictions`` as in ``plot_variance_vs_group_size``: with ``ratios`` the sweep gains its
    panel of ratios to no baseline (with ``predictions`` as crosses), and the noise-to-signal labels carry
    their SE."""
    import ipywidgets as widgets

    sizes = sorted(sweep)

    def draw(group_size):
        plot_variance_vs_group_size(sweep, highlight=group_size, ratios=ratios, predictions=predictions)
        errors = {name: by_size[group_size][1] for name, by_size in (ratios or {}).items() if group_size in by_size}
        plot_baseline_comparison(sweep[group_size], group_size=group_size, ratio_errors=errors or None)
        plt.show()

    return widgets.interact(draw, group_size=widgets.SelectionSlider(options=sizes, value=sizes[len(sizes) // 2]))


def plot_formula_ratios(success_rate: float, score_ratio: float, mean_share: float = 0.0, *, measured=None,
                        group_sizes=(2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64), ax=None):
    """§6's completed formula (``heuristic_noise_ratios``) against G: RLOO's and the value baseline's
    noise-to-signal over no baseline's at success rate p, score ratio S₀/S₁ and mean share m, the break-even
    G (the first G where RLOO drops below 1) marked. ``measured``: {baseline: {G: (ratio, se)}}, drawn over the
    curves with ±1 SE bars (only meaningful at the parameters they were measured at)."""
    from rlbook.gradients import heuristic_noise_ratios

    sizes = sorted(int(g) for g in group_sizes)
    formula = heuristic_noise_ratios(success_rate, score_ratio, sizes, mean_share=mean_share)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.9))
    ax.plot(sizes, [formula["rloo"][g] for g in sizes], "-", color=BASELINE_COLOURS["rloo"], label="RLOO, formula")
    ax.axhline(formula["value"], color=BASELINE_COLOURS["value"], ls="-", label="value V(x), formula")
    ax.axhline(1, color=BASELINE_COLOURS["none"], lw=1, label="none (= 1)")
    even = next((g for g in sizes if formula["rloo"][g] < 1), None)
    if even is not None:
        ax.axvline(even, color="0.5", ls="--", lw=1, label=f"RLOO below none from G = {even}")
    for name, by_size in (measured or {}).items():
        shown = sorted(by_size)
        ax.errorbar(shown, [by_size[g][0] for g in shown], yerr=[by_size[g][1] for g in shown], fmt="o", ms=5,
                    capsize=2, color=BASELINE_COLOURS.get(name, "tab:olive"), label=f"{name}, measured ± SE")
    ax.set(xscale="log", xlabel="group size G", ylabel="noise-to-signal / none's  (> 1: noisier)",
           title=f"p = {success_rate:.2f}, S0/S1 = {score_ratio:.2f}, m = {mean_share:.2f}")
    ax.minorticks_off()
    ticks = [g for g in sizes if g in (2, 4, 8, 16, 32, 64)]
    ax.set_xticks(ticks, [str(g) for g in ticks])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8.5)
    return ax


def formula_widget(success_rate: float, score_ratio: float, mean_share: float = 0.0, *, measured=None):
    """Sliders on p, S₀/S₁ (a log slider, 0.05 to 100: lesson 01's trained checkpoints reach about 65) and m for
    ``plot_formula_ratios``, starting at the measured values; the measured ratios are drawn only while the
    sliders sit at those values. m cannot exceed m_max = ``rlbook.gradients.max_mean_share`` = min(p, (1 − p)²
    S₀/S₁ / p) (a second moment is at least its mean's square; beyond it the formula gives impossible, even
    negative, ratios), so the third slider sets m as a fraction of m_max: every position is a possible m."""
    import ipywidgets as widgets

    from rlbook.gradients import max_mean_share

    fraction = float(mean_share) / max_mean_share(success_rate, score_ratio)
    if fraction > 1 + 1e-9:
        raise ValueError(f"mean_share {mean_share!r} exceeds max_mean_share = "
                         f"{max_mean_share(success_rate, score_ratio):.4g}")
    start = (round(float(success_rate), 2), round(float(score_ratio), 2), round(fraction, 2))

    def draw(p, score_ratio, share_of_max):
        at_start = all(abs(a - b) < 1e-9 for a, b in zip((p, score_ratio, share_of_max), start))
        m = float(mean_share) if at_start else share_of_max * max_mean_share(p, score_ratio)
        shown = measured if at_start else None
        plot_formula_ratios(p, score_ratio, m, measured=shown)
        plt.show()

    return widgets.interact(draw, p=widgets.FloatSlider(value=start[0], min=0.02, max=0.98, step=0.01),
                            score_ratio=widgets.FloatLogSlider(value=start[1], base=10, min=-1.3, max=2.0, step=0.01,
                                                               description="S0/S1"),
                            share_of_max=widgets.FloatSlider(value=start[2], min=0.0, max=1.0, step=0.01,
                                                             description="m / m_max"))


def as_table(statistics: dict[str, dict], columns=None):
    """The statistics as a pandas DataFrame, one row per baseline and one column per key of ``columns``
    (default: every number ``gradient_statistics`` returns before ``scale_se``), for display."""
    import pandas as pd

    columns = columns or ["variance", "relative_variance", "scale", "scale_noise", "cosine", "relative_bias",
                          "mean_noise"]
    return pd.DataFrame({name: {key: float(values[key]) for key in columns} for name, values in statistics.items()}).T
