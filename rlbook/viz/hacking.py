"""Figures and widgets for lesson 19 (verifier hacking).

- ``plot_strategy_advantage`` / ``strategy_advantage_widget``: GRPO's expected advantage
  (``rlbook.hacking.expected_group_advantage``) of an honest attempt and of a hack, against the
  share of hacks in the policy's samples, for given success rates of each;
- ``plot_pass_rates``: runs trained against a lax and a strict verifier, the lax pass rate and the
  strict accuracy of their training batches step by step (mean over seeds, each seed thin), one
  panel per verifier trained on;
- ``plot_hack_counts``: completions counted by hack type (``rlbook.hacking.HACK_TYPES``), one group
  of bars per run (or their shares, given each run's number of completions);
- ``plot_advantage_scale``: GRPO's scale c_G(p) (``rlbook.hacking.advantage_scale``) against the pass
  rate p for several group sizes, beside the large-group limit 1/√(p(1 − p)).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from rlbook.hacking import HACK_TYPES, advantage_scale, expected_group_advantage

__all__ = ["plot_strategy_advantage", "strategy_advantage_widget", "plot_pass_rates", "plot_hack_counts",
           "plot_advantage_scale"]

RATE_COLOURS = {"lax": "tab:red", "strict": "tab:blue"}


def plot_strategy_advantage(honest_success: float, hack_success: float, *, group_size: int | None = None, ax=None):
    """E[A | honest] and E[A | hack] against the hack's share of the policy's samples (0 to 1).

    ``group_size`` G gives GRPO's exact expectation for groups of G (``expected_group_advantage``);
    None its large-group limit. The dotted lines are the unit scale q_s − p, the expected push on a
    strategy's logit per unit share under any unbiased estimator, baseline or not (no division by the
    group's std): the same signs, GRPO only sets the scale.
    """
    expected_group_advantage([honest_success, hack_success], [0.5, 0.5], group_size)  # checks the inputs
    ax = ax or plt.subplots(figsize=(6.5, 3.8))[1]
    shares = np.linspace(0.005, 0.995, 199)
    curves = np.array([expected_group_advantage([honest_success, hack_success], [1 - w, w], group_size)
                       for w in shares])
    means = (1 - shares) * honest_success + shares * hack_success
    ax.plot(shares, curves[:, 0], color="tab:blue", label=f"honest attempt (passes {honest_success:.0%})")
    ax.plot(shares, curves[:, 1], color="tab:red", label=f"hack (passes {hack_success:.0%})")
    ax.plot(shares, honest_success - means, color="tab:blue", ls=":", lw=1)
    ax.plot(shares, hack_success - means, color="tab:red", ls=":", lw=1, label="dotted: unit scale, $q_s - p$")
    ax.axhline(0, color="grey", lw=0.8)
    groups = "large groups" if group_size is None else f"groups of {group_size}"
    ax.set(xlabel="share of hacks among the policy's samples", ylabel="expected advantage",
           title=f"who the policy gradient pays (GRPO, {groups}, sets the scale)")
    ax.legend(fontsize=8)
    return ax


def strategy_advantage_widget():
    """``plot_strategy_advantage`` with its two success rates and the group size as sliders."""
    import ipywidgets as widgets

    def draw(honest_success, hack_success, group_size):
        plot_strategy_advantage(honest_success, hack_success, group_size=group_size)
        plt.show()

    return widgets.interact(
        draw, honest_success=widgets.FloatSlider(value=0.3, min=0.0, max=1.0, step=0.05, description="honest passes"),
        hack_success=widgets.FloatSlider(value=0.9, min=0.0, max=1.0, step=0.05, description="hack passes"),
        group_size=widgets.Dropdown(options=[("4", 4), ("8", 8), ("16", 16), ("64", 64), ("limit", None)], value=8,
                                    description="group size"))


def plot_pass_rates(curves, *, window: int = 5, base_rate: float | None = None, base_strict: float | None = None,
                    axes=None):
    """One panel per verifier trained on: lax pass rate and strict accuracy of each step's batch.

    ``curves`` is a table (pandas) with columns ``trained_on`` ("lax" / "strict"), ``seed``, ``step``,
    ``lax`` and ``strict``; each line is a ``window``-step moving average, thin lines one per seed,
    thick their mean. ``base_rate`` and ``base_strict`` (optional) draw the base model's lax pass rate
    and its strict accuracy as dashed lines in their colours.
    """
    for column in ("trained_on", "seed", "step", "lax", "strict"):
        if column not in curves:
            raise ValueError(f"curves must have a column {column!r}")
    verifiers = list(dict.fromkeys(curves["trained_on"]))
    if axes is None:
        axes = plt.subplots(1, len(verifiers), figsize=(6 * len(verifiers), 3.6), sharey=True, squeeze=False)[1][0]
    for ax, verifier in zip(axes, verifiers):
        run = curves[curves["trained_on"] == verifier]
        for rate, colour in RATE_COLOURS.items():
            by_seed = run.pivot(index="step", columns="seed", values=rate).rolling(window, min_periods=1).mean()
            ax.plot(by_seed.index, by_seed.values, color=colour, lw=0.7, alpha=0.4)
            ax.plot(by_seed.index, by_seed.mean(axis=1), color=colour, lw=2,
                    label=f"{rate} {'pass rate' if rate == 'lax' else 'accuracy'}")
        if base_rate is not None:
            ax.axhline(base_rate, color=RATE_COLOURS["lax"], ls="--", lw=0.8, label="base model's lax pass rate")
        if base_strict is not None:
            ax.axhline(base_strict, color=RATE_COLOURS["strict"], ls="--", lw=0.8, label="base model's strict accuracy")
        ax.set(xlabel="step", ylabel=f"share of the batch ({window}-step mean)",
               title=f"trained on the {verifier} verifier (thin: each seed)")
        ax.legend(fontsize=8)
    return axes


def plot_strategy_training(runs, *, strategy: int = 1, axes=None):
    """Two panels over the steps of ``rlbook.hacking.train_strategies``: one strategy's share (the hack,
    ``strategy``) and the strict accuracy Σ_s π_s·true_rates[s].

    ``runs`` maps a label (the verifier that paid, e.g. "lax" or "strict") to a list of that
    function's results, one per seed: thin lines, one per seed, in the label's colour.
    """
    if not runs or any(not results for results in runs.values()):
        raise ValueError("runs must map each label to a non-empty list of train_strategies results")
    if axes is None:
        axes = plt.subplots(1, 2, figsize=(10, 3.4))[1]
    colours = {"lax": RATE_COLOURS["lax"], "strict": RATE_COLOURS["strict"]}
    for label, results in runs.items():
        colour = colours.get(label)
        for number, result in enumerate(results):
            axes[0].plot(result["shares"][:, strategy], color=colour, lw=0.8,
                         label=f"paid by the {label} verifier" if number == 0 else None)
            axes[1].plot(result["true"], color=colour, lw=0.8, label=f"paid by the {label} verifier" if number == 0 else None)
    start = next(iter(runs.values()))[0]["true"][0]
    axes[1].axhline(start, color="grey", ls="--", lw=0.8, label="at the start")
    axes[0].set(xlabel="step", ylabel="share of the policy", title="the hack's share (thin: each seed)")
    axes[1].set(xlabel="step", ylabel="strict accuracy", title="strict accuracy, Σ_s π_s · (strict pass rate of s)")
    for ax in axes:
        ax.legend(fontsize=8)
    return axes


def plot_hack_counts(counts, *, totals=None, ax=None):
    """Bars: how many completions of each run fall under each hack type.

    ``counts`` maps a run's label to a dict ``{hack type: count}`` (``rlbook.hacking.tally_hacks``);
    "honest" and "fail" are left out, so the bars are the completions that passed only the lax check;
    so is a hack no run has (the title says which were empty). ``totals`` (optional) maps each label
    to its number of completions: the bars are then shares of it, and the legend gives each n.
    """
    if not counts:
        raise ValueError("counts must name at least one run")
    hacks = [name for name in HACK_TYPES if name not in ("honest", "fail")
             and any(by_type.get(name, 0) for by_type in counts.values())] or ["padding"]
    ax = ax or plt.subplots(figsize=(8, 3.6))[1]
    width = 0.8 / len(counts)
    positions = np.arange(len(hacks))
    if totals is not None and (set(totals) != set(counts) or any(n <= 0 for n in totals.values())):
        raise ValueError("totals must give a positive number of completions for every run in counts")
    for i, (label, by_type) in enumerate(counts.items()):
        n = 1 if totals is None else totals[label]
        ax.bar(positions + i * width, [by_type.get(name, 0) / n for name in hacks], width,
               label=label if totals is None else f"{label} (n = {n})")
    ax.set_xticks(positions + 0.4 - width / 2, hacks, rotation=15)
    empty = [name for name in HACK_TYPES if name not in ("honest", "fail", *hacks)]
    ax.set(ylabel="completions" if totals is None else "share of the run's completions",
           title="completions that pass only the lax verifier, by hack"
           + (f"\n(none in any run: {', '.join(empty)})" if empty else ""))
    ax.legend(fontsize=8)
    return ax


def plot_advantage_scale(group_sizes=(2, 4, 8, 16, 64), *, ax=None):
    """GRPO's scale c_G(p) = E[A | r = 1] − E[A | r = 0] against the pass rate p, one line per group size.

    The dashed line is the large-group limit 1/√(p(1 − p)) (``rlbook.hacking.advantage_scale``
    with no group size); a finite group's scale stays below it and reaches √(G − 1) at p = 0 and 1.
    """
    if not group_sizes or any(not isinstance(G, int) or G < 2 for G in group_sizes):
        raise ValueError(f"group_sizes must be integers of at least 2, got {group_sizes!r}")
    ax = ax or plt.subplots(figsize=(6, 3.6))[1]
    rates = np.linspace(0.0, 1.0, 201)
    for G in group_sizes:
        ax.plot(rates, [advantage_scale(float(p), G) for p in rates], lw=1.5, label=f"G = {G}")
    inside = rates[(rates > 0.02) & (rates < 0.98)]
    ax.plot(inside, [advantage_scale(float(p)) for p in inside], color="black", ls="--", lw=1, label="limit 1/√(p(1 − p))")
    ax.set(xlabel="pass rate p of the prompt", ylabel="c_G(p)", ylim=(0, None),
           title="GRPO's scale: what a pass gets over a failure, in expectation")
    ax.legend(fontsize=8)
    return ax
