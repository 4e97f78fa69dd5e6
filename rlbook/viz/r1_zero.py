"""Figures and widgets for lesson 17 (R1-Zero in miniature; DeepSeek-AI 2025, arXiv:2501.12948).

- ``plot_advantage_by_outcome`` / ``advantage_widget``: the mean GRPO advantage each outcome of a
  real batch gets (``rlbook.reasoning.mean_advantage_by_outcome``) under the accuracy and format
  weights and the format rule the reader picks;
- ``plot_twin_curves``: held-out accuracy, mean response length and scratchpad share at the probes
  of each run (one line per seed);
- ``plot_length_accuracy_path``: the probes in the (length, accuracy) plane, against the straight
  line the base model's profile predicts when only the scratchpad share moves;
- ``plot_length_decomposition``: each run's length change split into its mix and within terms
  (``rlbook.reasoning.length_decomposition``).
"""

from __future__ import annotations

import math
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np

from rlbook.reasoning import OUTCOMES, format_constant_in_every_group, mean_advantage_by_outcome, outcome_of

__all__ = ["plot_advantage_by_outcome", "advantage_widget", "plot_twin_curves", "plot_length_accuracy_path",
           "plot_length_decomposition"]

OUTCOME_COLOURS = ("tab:green", "tab:olive", "tab:blue", "tab:gray", "tab:red")


def plot_advantage_by_outcome(texts, correct, group_size: int, *, accuracy_weight: float = 1.0,
                              format_weight: float = 0.5, think_required: bool = False, ax=None,
                              ylim: tuple | None = None) -> dict:
    """Bars of the mean GRPO advantage of each outcome in the batch, each labelled with its number of
    completions (n); ``ylim`` fixes the y-axis (the widget's, so bars compare across slider positions).
    Returns the numbers drawn."""
    means = mean_advantage_by_outcome(texts, correct, group_size, accuracy_weight=accuracy_weight,
                                      format_weight=format_weight, think_required=think_required)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 3.4))
    values = [0.0 if math.isnan(means[o]) else means[o] for o in OUTCOMES]
    counts = Counter(outcome_of(t, bool(c)) for t, c in zip(texts, [float(c) for c in correct]))
    ax.bar(range(len(OUTCOMES)), values, color=OUTCOME_COLOURS)
    for i, name in enumerate(OUTCOMES):
        ax.text(i, values[i], "absent" if math.isnan(means[name]) else f"{values[i]:+.2f}\nn = {counts[name]}",
                ha="center", va="bottom" if values[i] >= 0 else "top", fontsize=9)
    if ylim is not None:
        ax.set_ylim(*ylim)
    else:  # room for the two-line labels above and below the bars
        ax.margins(y=0.3)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(OUTCOMES)), [o.replace(", ", "\n") for o in OUTCOMES], fontsize=9)
    ax.set(ylabel="mean GRPO advantage",
           title=f"reward = {accuracy_weight:g}·accuracy + {format_weight:g}·format"
                 f"{' (think required)' if think_required else ''}")
    if format_weight > 0 and format_constant_in_every_group(texts, group_size, think_required=think_required):
        ax.text(0.99, 0.97, "format is the same within every group:\nthe group mean cancels it", transform=ax.transAxes,
                ha="right", va="top", fontsize=8, color="tab:red")
    return means


def advantage_widget(texts, correct, group_size: int):
    """``plot_advantage_by_outcome`` on one batch, with sliders for the two weights and the format rule.

    It opens on R1's rule (format needs ``<think>``), where both sliders move the bars; under the
    book's rule a batch with no malformed completion gives every completion the format reward, the
    group mean cancels it, and the figure says so.
    """
    from ipywidgets import Checkbox, FloatSlider, interact

    def draw(accuracy_weight, format_weight, think_required):
        # a fixed axis: |A| ≤ √(G − 1) under GRPO's population σ (one completion against G − 1), with room for labels
        bound = math.sqrt(group_size - 1) + 0.8
        plot_advantage_by_outcome(texts, correct, group_size, accuracy_weight=accuracy_weight,
                                  format_weight=format_weight, think_required=think_required, ylim=(-bound, bound))
        plt.show()

    return interact(draw,
                    accuracy_weight=FloatSlider(value=1.0, min=0.0, max=2.0, step=0.1, description="w accuracy"),
                    format_weight=FloatSlider(value=0.5, min=0.0, max=2.0, step=0.1, description="w format"),
                    think_required=Checkbox(value=True, description="format needs <think>"))


def plot_twin_curves(probes, *, label: str = "seed"):
    """Three panels over training steps: held-out ``accuracy``, mean ``length`` (tokens) and
    ``scratchpad`` share, one line per value of ``label``. ``probes``: a DataFrame with ``step``,
    ``label`` and those three columns."""
    missing = {"step", label, "accuracy", "length", "scratchpad"} - set(probes.columns)
    if missing:
        raise ValueError(f"probes must have the columns step, {label}, accuracy, length, scratchpad; missing {missing}")
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.4))
    panels = (("accuracy", "held-out accuracy (pass@1)"), ("length", "mean response length (tokens)"),
              ("scratchpad", "share of answers with <think>"))
    for ax, (column, title) in zip(axes, panels):
        for value, run in probes.groupby(label, sort=False):
            ax.plot(run["step"], run[column], "o-", label=f"{label} {value}")
        ax.set(xlabel="training step", title=title)
        ax.grid(alpha=0.3)
    axes[0].legend()
    return fig


def plot_length_accuracy_path(probes, base_profile: dict, *, label: str = "seed", line_se: float | None = None,
                              ax=None, direct_se: float | None = None):
    """The probes as points (length, accuracy), and the line the base's profile predicts when only
    the scratchpad share p moves: length = ℓ_d + p(ℓ_s − ℓ_d), accuracy = a_d + p(a_s − a_d), with its
    ends (all direct, all scratchpad) marked. ``line_se``: the standard error of the base's scratchpad
    accuracy a_s, drawn as a band of ± p · ``line_se`` around the line (its uncertainty at share p);
    with ``direct_se`` (the SE of the direct answers' accuracy a_d) the band is
    ± √((p · line_se)² + ((1 − p) · direct_se)²), both ends' uncertainty (taken as independent)."""
    scratch, direct = base_profile["scratchpad"], base_profile["direct"]
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    shares = np.linspace(0, 1, 50)
    lengths = direct["length"] + shares * (scratch["length"] - direct["length"])
    accuracy = direct["accuracy"] + shares * (scratch["accuracy"] - direct["accuracy"])
    ax.plot(lengths, accuracy, "k--", label="only the scratchpad share moves")
    if line_se is not None:
        band = shares * line_se if direct_se is None else np.hypot(shares * line_se, (1 - shares) * direct_se)
        ax.fill_between(lengths, accuracy - band, accuracy + band, color="gray", alpha=0.25,
                        label=("± p · SE of the base's scratchpad accuracy" if direct_se is None else
                               "± SE of the line (the base's accuracy of each kind)"))
    ax.plot([lengths[0], lengths[-1]], [accuracy[0], accuracy[-1]], "ks", ms=6)
    ax.annotate("all direct", (lengths[0], accuracy[0]), xytext=(6, -2), textcoords="offset points", fontsize=8)
    ax.annotate("all scratchpad", (lengths[-1], accuracy[-1]), xytext=(-6, 8), textcoords="offset points",
                fontsize=8, ha="right")
    for value, run in probes.groupby(label, sort=False):
        ax.plot(run["length"], run["accuracy"], "o-", ms=4, label=f"{label} {value}")
    ax.set(xlabel="mean response length (tokens)", ylabel="held-out accuracy", title="accuracy against length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return ax


def plot_length_decomposition(decompositions: dict, ax=None):
    """Stacked bars: for each run (key), its length change's ``mix`` and ``within`` terms."""
    if not decompositions:
        raise ValueError("decompositions must name at least one run")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.4))
    names = list(decompositions)
    x = np.arange(len(names))
    mix = [decompositions[n]["mix"] for n in names]
    within = [decompositions[n]["within"] for n in names]
    ax.bar(x, mix, color="tab:blue", label="mix: more of the longer kind (the scratchpad)")
    # a positive within term stacked on the mix; a negative one drawn below zero, where it subtracts
    ax.bar(x, within, bottom=[m if w >= 0 else 0.0 for m, w in zip(mix, within)], color="tab:orange",
           label="within: each kind's own change")
    for i, (m, w) in enumerate(zip(mix, within)):
        ax.text(i, m + max(w, 0), f"mix {m:+.1f}\nwithin {w:+.1f}", ha="center", va="bottom", fontsize=8)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, names, fontsize=9)
    top = max(m + max(w, 0) for m, w in zip(mix, within))
    # headroom above the bars for their labels and, above those, the legend in one row
    # and room below zero for a negative within term (at least a twentieth of the height, so it shows)
    bottom = min(0.0, *within, *(m for m in mix))
    ax.set_ylim(bottom - (0.05 * max(top, 0) if min(within) < 0 else 0.0), max(top, 0) * 1.5 + 1e-9)
    ax.set(ylabel="change of mean length (tokens)", title="where the length growth comes from")
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    return ax
