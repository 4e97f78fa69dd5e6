"""Figures and the widget of lesson 20 (the full R1 pipeline, and distillation).

- ``plot_rlvr_curves``: held-out pass@1 and R1-format share against RL step, for RL after a cold
  start and RL straight from the base (R1-Zero), each seed a line;
- ``plot_stage_table``: the stage-by-stage table as three panels (pass@1 with pass@k, format share,
  the review gold reward);
- ``plot_rs_yield`` / ``rs_yield_widget``: rejection sampling's yield — the expected share of prompts
  that keep a sample when n are drawn (the unbiased pass@n of the keepable table), and each prompt's
  chance of being kept, prompts sorted by difficulty; the widget's slider is n;
- ``plot_distillation``: the small model's held-out pass@1 over RL steps against the same model
  after SFT on the big policy's outputs.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from rlbook._figures import COLUMN_IN
from rlbook.coverage import pass_at_k_curve, per_problem_pass_at_k

__all__ = ["plot_distillation", "plot_rlvr_curves", "plot_rs_yield", "plot_stage_table", "rs_yield_widget"]

RUN_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red")


def _check_columns(name: str, frame, columns) -> None:
    missing = [c for c in columns if c not in getattr(frame, "columns", ())]
    if missing:
        raise ValueError(f"{name} must be a DataFrame with columns {list(columns)}; missing {missing}")


def plot_rlvr_curves(curves, *, axes=None):
    """``curves``: a DataFrame with columns run, seed, step, pass@1, format; one colour per run."""
    _check_columns("curves", curves, ("run", "seed", "step", "pass@1", "format"))
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    for color, (run, rows) in zip(RUN_COLORS, curves.groupby("run", sort=False)):
        for i, (seed, seed_rows) in enumerate(rows.groupby("seed")):
            label = run if i == 0 else None
            for ax, column in zip(axes, ("pass@1", "format")):
                ax.plot(seed_rows["step"], seed_rows[column], "-o", ms=3, color=color, alpha=0.85, label=label)
    axes[0].set(xlabel="RL step", ylabel="held-out pass@1", ylim=(0, 1), title="accuracy")
    axes[1].set(xlabel="RL step", ylabel="share in R1's format", ylim=(0, 1.02), title="<think>…</think><answer>…</answer>")
    axes[0].legend(loc="lower right")
    for ax in axes:
        ax.grid(alpha=0.3)
    return axes


def plot_stage_table(table, *, k: int = 8, axes=None):
    """``table``: a DataFrame indexed by stage with columns pass@1, pass@{k}, format and gold preference."""
    _check_columns("table", table, ("pass@1", f"pass@{k}", "format", "gold preference"))
    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(COLUMN_IN, 0.5 * len(table) + 1.8), sharey=True)
    y = np.arange(len(table))[::-1]
    axes[0].barh(y, table["pass@1"], color="tab:blue")
    axes[0].plot(table[f"pass@{k}"], y, "k|", ms=14, mew=2)
    axes[0].set(xlim=(0, 1.02), xlabel="held-out addition", title=f"accuracy (bar: pass@1, tick: pass@{k})")
    axes[1].barh(y, table["format"], color="tab:green")
    axes[1].set(xlim=(0, 1), xlabel="share in R1's format", title="format adherence")
    gold = table["gold preference"]
    axes[2].barh(y, gold, color=["tab:purple" if g > -2.999 else "lightgray" for g in gold])
    axes[2].axvline(-3.0, color="gray", lw=1, ls=":")
    axes[2].set(xlabel="mean gold reward of its reviews (−3: none parses)", title="preference (general)")
    axes[0].set_yticks(y, table.index)
    for ax in axes:
        ax.grid(axis="x", alpha=0.3)
    return axes


def plot_rs_yield(keepable, n: int, *, axes=None):
    """The yield of rejection sampling with ``n`` samples per prompt, from the (P, N) 0/1 table
    ``keepable`` (N ≥ n samples per prompt; 1 where the filter would keep that sample)."""
    keepable = np.asarray(keepable, dtype=float)
    if keepable.ndim != 2 or keepable.size == 0:
        raise ValueError(f"keepable must be a non-empty (prompts, samples) table, got shape {keepable.shape}")
    total = keepable.shape[1]
    if not 1 <= int(n) <= total:
        raise ValueError(f"n must be in 1..{total} (the samples per prompt of keepable), got {n}")
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(13, 3.6), gridspec_kw={"width_ratios": [1, 1.6]})
    ns = np.arange(1, total + 1)
    curve = pass_at_k_curve(keepable, ns.tolist())
    axes[0].plot(ns, curve, "-o", ms=3, color="tab:blue")
    axes[0].plot([n], [curve[n - 1]], "o", ms=9, color="tab:red")
    axes[0].set(xlabel="samples per prompt n", ylabel="expected share of prompts kept", ylim=(0, 1.02),
                title=f"n = {n}: {curve[n - 1]:.0%} of prompts keep a sample")
    axes[0].grid(alpha=0.3)
    difficulty = keepable.mean(axis=1)
    order = np.argsort(difficulty, kind="stable")
    kept = per_problem_pass_at_k(keepable, int(n)).numpy()[order]
    axes[1].bar(np.arange(len(order)), kept, width=1.0, color="tab:blue", alpha=0.8, label=f"P(kept) at n = {n}")
    axes[1].plot(np.arange(len(order)), difficulty[order], color="black", lw=1, label="keepable share of one sample")
    axes[1].set(xlabel="prompts, hardest first", ylabel="probability", ylim=(0, 1.02),
                title="who is left out: the prompts the policy rarely solves")
    axes[1].legend(loc="lower right", fontsize=8)
    return axes


def rs_yield_widget(keepable):
    """``plot_rs_yield`` with a slider for n (1 … the samples per prompt of ``keepable``)."""
    import ipywidgets as widgets

    total = int(np.asarray(keepable).shape[1])

    def draw(n):
        plot_rs_yield(keepable, n)
        plt.show()

    return widgets.interact(draw, n=widgets.IntSlider(value=1, min=1, max=total, description="n"))


def plot_distillation(rl_curves, distilled: dict, *, base: float | None = None, ax=None):
    """``rl_curves``: a DataFrame with columns seed, step, pass@1 (RL on the small model); ``distilled``:
    ``{seed: pass@1}`` of the small model after SFT on the big policy's outputs; ``base``: its pass@1
    before either."""
    _check_columns("rl_curves", rl_curves, ("seed", "step", "pass@1"))
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.8))
    for i, (seed, rows) in enumerate(rl_curves.groupby("seed")):
        color = RUN_COLORS[i % len(RUN_COLORS)]
        ax.plot(rows["step"], rows["pass@1"], "-o", ms=3, color=color, label=f"RL on the small model, seed {seed}")
        if seed in distilled:
            ax.axhline(distilled[seed], color=color, ls="--", label=f"distilled (SFT on the teacher), seed {seed}")
    if base is not None:
        ax.axhline(base, color="gray", ls=":", label="small model before either")
    ax.set(xlabel="RL step on the small model", ylabel="held-out pass@1", ylim=(0, 1))
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    return ax
