"""Figures and widgets for lesson 10 (Dr.GRPO): the weight each aggregation mode gives each token.

``rlbook.aggregation.token_weights`` says how much token t of response i counts in the loss
Σ w[i, t] · ℓ[i, t]. These functions draw it for a batch of responses of mixed lengths:

- ``plot_token_weights``: one panel per mode, one row per response, one cell per token, coloured
  by its weight, with each response's total weight Σ_t w[i, t] written beside its row;
- ``plot_length_bias``: the per-token weight a response gets as a function of its own length,
  which is where GRPO's 1/|o| length bias (Liu et al. 2025, arXiv:2503.20783, §3.1) shows;
- ``token_weights_widget``: the lengths and the budget L as sliders over ``plot_token_weights``;
- ``plot_push_by_length``: on a real batch (``rlbook.probes.one_step_logprob_change``), how much one
  gradient step under each mode lowers the per-token log-probability of each wrong answer, by its length;
- ``plot_length_toy``: the expected length of right and wrong answers over the steps of
  ``rlbook.toys.length_bias_toy``, one line per configuration, the min-max over seeds as a band.

Every function draws a new figure and returns it; end a notebook line with ``;`` so Jupyter shows
it once.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.colors import LogNorm, Normalize
import numpy as np
import pandas as pd
import torch

from rlbook._checks import check_int
from rlbook.aggregation import AGGREGATION_MODES, token_weights

__all__ = ["MODE_LABELS", "lengths_mask", "token_weight_table", "plot_token_weights", "plot_length_bias",
           "token_weights_widget", "length_toy_widget", "plot_push_by_length", "plot_length_toy"]

MODE_LABELS = {
    "seq_mean_token_mean": "GRPO: 1/(B·|o_i|)",
    "token_mean": "DAPO: 1/Σ_j |o_j|",
    "seq_mean_token_sum": "sum: 1/B",
    "seq_mean_token_sum_norm": "Dr.GRPO: 1/(B·L)",
}


def lengths_mask(lengths, width: int | None = None) -> torch.Tensor:
    """The (B, width) 0/1 response mask of responses with the given lengths (right-padded)."""
    lengths = [check_int("lengths", int(n), minimum=1) for n in lengths]
    if not lengths:
        raise ValueError("lengths must hold at least one length")
    width = max(lengths) if width is None else check_int("width", width, minimum=max(lengths))
    return (torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).float()


def token_weight_table(lengths, *, max_len: int) -> pd.DataFrame:
    """One row per response: its length, and under each mode its per-token and total weight.

    ``max_len`` is Dr.GRPO's constant L (the generation budget); it must be ≥ the longest length.
    """
    max_len = check_int("max_len", max_len, minimum=1)
    mask = lengths_mask(lengths)
    if mask.shape[1] > max_len:
        raise ValueError(f"max_len must be >= the longest length {mask.shape[1]}, got {max_len}")
    table = pd.DataFrame({"length": mask.sum(1).long().numpy()})
    for mode in AGGREGATION_MODES:
        weights = token_weights(mask, mode, max_len=max_len)
        table[f"{mode} per token"] = weights[:, 0].numpy()
        table[f"{mode} total"] = weights.sum(1).numpy()
    return table


def plot_token_weights(lengths=(4, 10, 24, 48), *, max_len: int = 64, modes=AGGREGATION_MODES,
                       log_scale: bool = False, colour_range: tuple | None = None):
    """Each token's weight under each mode for responses of ``lengths``: one panel per mode.

    Cells are tokens (grey: padding, weight 0); the colour scale is shared by all panels, so
    a darker cell is a token that moves the model more. Each row is labelled with the response's
    total weight Σ_t w; under GRPO's mode every row totals 1/B whatever its length.
    ``log_scale=True`` draws the colour on a log scale with a colourbar, so weights that differ by
    a few times (GRPO's rows; DAPO against Dr.GRPO) get distinct colours; the default is linear.
    ``colour_range=(low, high)`` fixes the colour scale's ends (a widget passes one, so that a colour means
    the same weight in every redraw); the default spans this figure's own weights.
    """
    if not isinstance(log_scale, bool):
        raise ValueError(f"log_scale must be True or False, got {log_scale!r}")
    modes = list(modes)
    for mode in modes:
        if mode not in AGGREGATION_MODES:
            raise ValueError(f"modes must be drawn from {AGGREGATION_MODES}, got {mode!r}")
    table = token_weight_table(lengths, max_len=max_len)
    mask = lengths_mask(lengths, width=max_len)
    weights = {mode: token_weights(mask, mode, max_len=max_len).numpy() for mode in modes}
    top = max(w.max() for w in weights.values())
    bottom = min(w[mask.numpy() > 0].min() for w in weights.values())
    if colour_range is not None:
        if len(colour_range) != 2 or not 0 < colour_range[0] < colour_range[1]:
            raise ValueError(f"colour_range must be (low, high) with 0 < low < high, got {colour_range!r}")
        bottom, top = (float(v) for v in colour_range)
    if log_scale:
        norm = LogNorm(vmin=bottom, vmax=top)
    else:
        norm = Normalize(vmin=0, vmax=top)
    fig, axes = plt.subplots(len(modes), 1, figsize=(9, 1.0 + 0.42 * len(table) * len(modes)), squeeze=False)
    for ax, mode in zip(axes[:, 0], modes):
        shown = np.ma.masked_where(mask.numpy() == 0, weights[mode])
        cmap = plt.get_cmap("viridis_r").copy()
        cmap.set_bad("0.92")
        image = ax.imshow(shown, aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
        ax.set_yticks(range(len(table)))
        ax.set_yticklabels([f"|o|={n}  Σw={t:.3f}" for n, t in zip(table["length"], table[f"{mode} total"])],
                           fontsize=8)
        ax.set_xticks([])
        ax.set_title(f"{MODE_LABELS[mode]}   (per-token weight of row 1: {weights[mode][0, 0]:.4f})",
                     fontsize=9.5, loc="left")
    axes[-1, 0].set_xlabel(f"token position (budget L = {max_len}; grey = padding)")
    fig.tight_layout()
    if log_scale:
        fig.colorbar(image, ax=list(axes[:, 0]), label="weight of one token (log scale)", fraction=0.03, pad=0.02)
    return fig


def plot_length_bias(*, max_len: int = 64, batch_lengths=(8, 16, 32), ax=None):
    """The per-token weight (× B) of one response against its own length |o|, for each mode.

    The response sits in a batch with others of ``batch_lengths``. GRPO's 1/|o| falls with length:
    a long wrong answer (A < 0) has each of its tokens pushed down less than a short one
    (Liu et al. 2025, arXiv:2503.20783). Dr.GRPO's 1/L and the plain sum are flat; DAPO's token
    mean is flat within a batch and only shifts with the batch's total length.
    """
    max_len = check_int("max_len", max_len, minimum=2)
    others = [check_int("batch_lengths", int(n), minimum=1) for n in batch_lengths]
    if any(n > max_len for n in others):
        raise ValueError(f"batch_lengths must be <= max_len={max_len}, got {others}")
    lengths = np.arange(1, max_len + 1)
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.6, 3.4))
    n_seqs = len(others) + 1
    for mode in AGGREGATION_MODES:
        per_token = [float(token_weights(lengths_mask([n, *others], width=max_len), mode, max_len=max_len)[0, 0])
                     for n in lengths]
        ax.plot(lengths, n_seqs * np.array(per_token), label=MODE_LABELS[mode], lw=2)
    ax.set(xlabel="length |o| of the response", ylabel="B × weight of each of its tokens", yscale="log",
           title=f"how hard each token of one response is pushed (B = {n_seqs})")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return ax.figure


def token_weights_widget(*, max_len: int = 64):
    """Four response lengths and the budget L as sliders over ``plot_token_weights`` (log colour scale).

    The budget never falls below the longest length a slider allows, as a generator's budget bounds
    every response it returns, so no length is ever cut to fit. The colour range is fixed over all
    redraws: from Dr.GRPO's smallest weight 1/(B·4·max_len) (the largest budget) to 1/B (a response of one
    token under GRPO), so a colour means the same weight whatever the sliders say.
    """
    import ipywidgets as widgets

    max_len = check_int("max_len", max_len, minimum=2)

    n_responses = 4
    colour_range = (1 / (n_responses * 4 * max_len), 1 / n_responses)

    def draw(length_1, length_2, length_3, length_4, budget):
        plot_token_weights([length_1, length_2, length_3, length_4], max_len=budget, log_scale=True,
                           colour_range=colour_range)
        plt.show()

    sliders = {f"length_{i + 1}": widgets.IntSlider(value=min(v, max_len), min=1, max=max_len, description=f"|o_{i + 1}|")
               for i, v in enumerate((4, 10, 24, 48))}
    budget = widgets.IntSlider(value=max_len, min=max_len, max=4 * max_len, step=8, description="budget L")
    return widgets.interact(draw, **sliders, budget=budget)


def length_toy_widget(*, steps: int = 100, seed: int = 0):
    """``rlbook.toys.length_bias_toy`` under 1/|o| and under 1/L side by side, one seed, with its knobs as controls.

    Controls: the advantage (GRPO's σ or Dr.GRPO's plain centring), the optimizer (Adam, or plain
    SGD: then the drift's speed is the gradient's own, and a tiny bias moves almost nothing at
    Adam's learning rate), the learning rate, the cap ``max_len`` and the starting P(correct).
    """
    import ipywidgets as widgets
    from rlbook.toys import length_bias_toy

    steps = check_int("steps", steps, minimum=1)

    def draw(advantage, optimizer, lr, max_len, p_correct):
        runs = {label: [length_bias_toy(mode, advantage, steps=steps, lr=lr, max_len=max_len, p_correct=p_correct,
                                        seed=seed, optimizer=optimizer)]
                for label, mode in (("1/|o| (GRPO's normaliser)", "seq_mean_token_mean"),
                                    ("1/L (Dr.GRPO's)", "seq_mean_token_sum_norm"))}
        plot_length_toy(runs, max_len=max_len)
        plt.show()

    return widgets.interact(
        draw,
        advantage=widgets.Dropdown(options=[("σ (GRPO)", "grpo"), ("no σ (Dr.GRPO)", "dr_grpo")], value="grpo",
                                   description="advantage"),
        optimizer=widgets.Dropdown(options=["adam", "sgd"], value="adam", description="optimizer"),
        lr=widgets.FloatLogSlider(value=0.05, base=10, min=-3, max=2, step=0.1, description="lr",
                                  continuous_update=False),
        max_len=widgets.IntSlider(value=64, min=16, max=128, step=16, description="cap max_len",
                                  continuous_update=False),
        p_correct=widgets.FloatSlider(value=0.3, min=0.1, max=0.9, step=0.1, description="P(correct)₀",
                                      continuous_update=False))


def plot_push_by_length(lengths, changes: dict, selected, *, ax=None):
    """Scatter of the per-token log-prob change of the ``selected`` completions against their length.

    ``changes`` maps a mode to its (B,) changes (``rlbook.probes.one_step_logprob_change``); one colour per mode,
    with each mode's mean change in the short and the long half (split at the median length).
    """
    lengths = torch.as_tensor(lengths).float()
    selected = torch.as_tensor(selected, dtype=torch.bool)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.6))
    median = lengths[selected].median()
    rng = np.random.default_rng(0)
    for k, (mode, change) in enumerate(changes.items()):
        change = torch.as_tensor(change).float()
        x = lengths[selected].numpy() + rng.uniform(-0.3, 0.3, int(selected.sum())) + 0.35 * (k - 0.5)
        points = ax.scatter(x, change[selected].numpy(), s=10, alpha=0.6, label=MODE_LABELS.get(mode, mode))
        for half in (lengths <= median, lengths > median):
            rows = selected & half
            if rows.any():
                span = lengths[rows]
                ax.hlines(change[rows].mean().item(), span.min().item(), span.max().item(), color=points.get_facecolor()[0],
                          lw=2.5)
    ax.axhline(0, color="black", lw=0.6)
    ax.set(xlabel="length |o| of the wrong answer", ylabel="per-token change of log π after one step",
           title="one step on a real batch: how hard each wrong answer is pushed down")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax.figure


def plot_length_toy(curves: dict, *, keys=("length_incorrect", "length_correct", "p_correct"),
                    max_len: int | None = None):
    """One panel per key of ``rlbook.toys.length_bias_toy``'s output against the step.

    ``curves``: label → list of that function's outputs, one per seed; each label is drawn as the
    mean over seeds with the min-max over seeds as a band. ``max_len``: the toy's cap on |o|, drawn
    as a dashed line on the length panels (an expected length near it is set by the cap).
    """
    if not curves or not all(isinstance(runs, (list, tuple)) and runs for runs in curves.values()):
        raise ValueError("curves must map each label to a non-empty list of length_bias_toy outputs")
    if max_len is not None:
        max_len = check_int("max_len", max_len, minimum=3)
    keys = tuple(keys)
    missing = [key for key in keys if any(key not in run for runs in curves.values() for run in runs)]
    if missing:
        raise ValueError(f"keys {missing} are not in every run; length_bias_toy returns "
                         "'p_correct', 'length_correct', 'length_incorrect', 'capped_correct', 'capped_incorrect'")
    titles = {"length_incorrect": "a wrong answer's expected length", "length_correct": "a right answer's expected length",
              "p_correct": "P(correct)", "capped_incorrect": "P(a wrong answer reaches the cap)",
              "capped_correct": "P(a right answer reaches the cap)"}
    ylabels = {"length_incorrect": "E|o| (tokens)", "length_correct": "E|o| (tokens)", "p_correct": "probability",
               "capped_incorrect": "probability", "capped_correct": "probability"}
    fig, axes = plt.subplots(1, len(keys), figsize=(3.45 * len(keys), 3.3), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for label, runs in curves.items():
            stacked = np.stack([np.asarray(run[key], dtype=float) for run in runs])
            steps = np.arange(stacked.shape[1])
            line, = ax.plot(steps, stacked.mean(0), label=label)
            if len(runs) > 1:
                ax.fill_between(steps, stacked.min(0), stacked.max(0), color=line.get_color(), alpha=0.2)
        if max_len is not None and key.startswith("length"):
            ax.axhline(max_len, color="black", ls="--", lw=1)
            ax.annotate(f"cap |o| = {max_len}", (0, max_len), xytext=(2, -11), textcoords="offset points", fontsize=9)
            ax.set_ylim(0, max_len * 1.08)
        ax.set(xlabel="step", ylabel=ylabels.get(key, key), title=titles.get(key, key))
        ax.title.set_fontsize(10)
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=9, frameon=False)
    return fig
