"""Figures and widgets for lessons 06 (DPO) and 07 (the preference zoo).

Every ``plot_*`` function draws a new figure and returns it; end a notebook line with ``;`` so
Jupyter shows it once. The ``*_widget`` functions wrap a plotting function in
``ipywidgets.interact``. The losses drawn are the library's own (``rlbook.losses``), evaluated on
a grid of margins, so a picture can never disagree with the code that trains. The numbers come
from the library: the closed-form optimum from ``rlbook.toys.reverse_kl_optimum``, the loss curves
and the clause credit from ``rlbook.preference_analysis``.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from rlbook import losses
from rlbook._checks import check_positive
from rlbook._figures import COLUMN_IN, panel_grid
from rlbook.preference_analysis import clause_credit_by_position, clause_credit_table, pair_losses_vs_margin
from rlbook.tasks.reviews import MAX_CLAUSES
from rlbook.toys import reverse_kl_optimum

__all__ = [
    "LOSS_COLOURS",
    "plot_kl_regularised_optimum",
    "optimum_widget",
    "plot_dpo_loss_and_weight",
    "dpo_beta_widget",
    "plot_preference_history",
    "plot_clause_credit",
    "plot_credit_by_position",
    "plot_run_against_optimum",
    "plot_margin_histograms",
    "plot_losses_vs_margin",
    "losses_vs_margin_widget",
    "plot_kto_value",
    "kto_value_widget",
    "plot_margin_trajectories",
    "plot_reward_vs_kl",
]

LOSS_COLOURS = {"dpo": "tab:blue", "ipo": "tab:orange", "kto": "tab:green", "simpo": "tab:red",
                "orpo": "tab:purple", "cpo": "tab:brown"}


# ----------------------------------------------------------------------------- lesson 06: the closed form


def plot_kl_regularised_optimum(beta: float = 1.0, *, ref_probs=(0.35, 0.25, 0.2, 0.12, 0.08),
                                rewards=(0.0, 1.0, -1.0, 2.0, 0.5)):
    """Bars of π_ref and of π* ∝ π_ref exp(r/β) on five responses, with each response's reward.

    Large β keeps π* near π_ref; small β piles the mass on the best response. The title gives π*'s expected
    reward, its KL from π_ref, and its objective J(π*) = E[r] − β KL = β log Z beside the reference's J(π_ref) =
    E_π_ref[r] (Rafailov et al. 2023, arXiv:2305.18290, eq. 4; lesson 06 §1).
    """
    ref_probs = torch.as_tensor(ref_probs, dtype=torch.float64)
    rewards = torch.as_tensor(rewards, dtype=torch.float64)
    optimum = reverse_kl_optimum(ref_probs, rewards, beta=beta)
    kl = float((optimum * (optimum / ref_probs).log()).sum())
    x = np.arange(len(ref_probs))
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    ax.bar(x - 0.2, ref_probs.numpy(), width=0.4, color="0.6", label="π_ref")
    ax.bar(x + 0.2, optimum.numpy(), width=0.4, color="tab:blue", label=f"π* (β = {beta:.3g})")
    ax.set_xticks(x, [f"y{i + 1}\nr = {float(r):+.1f}" for i, r in enumerate(rewards)])
    ax.set_ylim(0, 1)
    ax.set_ylabel("probability")
    beta_log_z = beta * float(torch.logsumexp(ref_probs.log() + rewards / beta, 0))
    ax.set_title(f"π* ∝ π_ref · exp(r/β):  E_π*[r] = {float((optimum * rewards).sum()):.2f},  "
                 f"KL(π* ‖ π_ref) = {kl:.2f}\nJ(π*) = β log Z = {beta_log_z:.2f},  J(π_ref) = E_π_ref[r] = "
                 f"{float((ref_probs * rewards).sum()):.2f}", fontsize=10)
    ax.legend()
    fig.tight_layout()
    return fig


def optimum_widget():
    """β as a knob of ``plot_kl_regularised_optimum`` (an ``ipywidgets.interact``)."""
    import ipywidgets as widgets

    def draw(beta):
        plot_kl_regularised_optimum(beta)
        plt.show()

    return widgets.interact(draw, beta=widgets.FloatLogSlider(value=1.0, base=10, min=-1.5, max=1.5, step=0.05,
                                                               description="β"))


def plot_dpo_loss_and_weight(beta: float = 0.1, *, margin_range: float = 40.0, compare_betas=(0.05, 0.1, 0.5, 1.0),
                             margin: float | None = None):
    """DPO's loss −log σ(β h) and each pair's *relative* gradient weight σ(−β h), against the log-ratio margin h.

    h = log π(y_w)/π_ref(y_w) − log π(y_l)/π_ref(y_l). The loss is computed by
    ``rlbook.losses.dpo_loss`` and the weight by autograd through it (−∂L/∂h = β σ(−β h)), drawn
    divided by β: under Adam a constant factor in the gradient largely cancels, so what β sets is how
    the pull is shared among pairs, σ(−β h), which starts at ½ at h = 0 and has fallen to ¼ at
    h = ln 3/β (marked for the bold curve; named in the corner when it lies past the axis). One colour per β; the
    bold one is ``beta``. ``margin``: one pair's h, drawn as a point on the bold curves with its loss and its
    relative pull written beside it.
    """
    beta = check_positive("beta", beta)
    margin_range = check_positive("margin_range", margin_range)
    h = torch.linspace(-margin_range, margin_range, 801, dtype=torch.float64)
    fig, (ax_loss, ax_weight) = plt.subplots(1, 2, figsize=(11, 3.6))
    betas = sorted(set(compare_betas) | {beta})
    colours = plt.cm.viridis(np.linspace(0.0, 0.85, len(betas)))
    for b, colour in zip(betas, colours):
        loss, weight = _dpo_loss_and_weight(h, b)
        bold = b == beta
        style = dict(lw=2.6 if bold else 1.2, alpha=1.0 if bold else 0.75, color=colour)
        ax_loss.plot(h, loss, label=f"β = {b:g}", **style)
        ax_weight.plot(h, weight / b, label=f"β = {b:g}", **style)
    quarter = math.log(3) / beta
    if quarter <= margin_range:
        ax_weight.axvline(quarter, color="black", ls="--", lw=0.8)
        ax_weight.annotate(f"¼ at h = ln 3/β = {quarter:.3g}", (quarter, 0.25), xytext=(6, 10),
                           textcoords="offset points", fontsize=8.5)
    else:
        ax_weight.annotate(f"¼ at h = ln 3/β = {quarter:.3g} →\n(past the axis)", (0.98, 0.1), xycoords="axes fraction",
                           ha="right", fontsize=8.5)
    if margin is not None:
        point = torch.tensor([float(margin)], dtype=torch.float64)
        loss_at, weight_at = _dpo_loss_and_weight(point, beta)
        loss_at, pull_at = float(loss_at[0]), float(weight_at[0]) / beta
        ax_loss.plot([float(margin)], [loss_at], "o", color="tab:red", ms=8, zorder=5)
        ax_weight.plot([float(margin)], [pull_at], "o", color="tab:red", ms=8, zorder=5,
                       label=f"a pair at h = {float(margin):g}: loss {loss_at:.3f}, pull {pull_at:.3f}")
    ax_loss.axhline(math.log(2), color="black", ls=":", lw=1)
    ax_loss.annotate("ln 2 at h = 0 (π = π_ref)", (0, math.log(2)), xytext=(6, 12), textcoords="offset points",
                     fontsize=8.5)
    ax_loss.set_ylim(0, min(8.0, float(_dpo_loss_and_weight(h[:1], max(tuple(compare_betas) + (beta,)))[0][0]) + 0.5))
    ax_loss.set_xlabel("log-ratio margin h")
    ax_loss.set_ylabel("−log σ(β h)")
    ax_loss.set_title("the loss", fontsize=10)
    ax_loss.legend(fontsize=8)
    ax_weight.set_xlabel("log-ratio margin h")
    ax_weight.set_ylabel("relative weight σ(−β h) = −∂L/∂h ÷ β")
    ax_weight.set_ylim(0, 1.02)
    ax_weight.set_title("each pair's pull: large while the pair is mis-ordered", fontsize=10)
    ax_weight.legend(fontsize=8)
    for ax in (ax_loss, ax_weight):
        ax.axvline(0, color="black", lw=0.6)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _dpo_loss_and_weight(h: torch.Tensor, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """DPO's per-pair loss at margins ``h`` and −∂loss/∂h, through ``rlbook.losses.dpo_loss``."""
    h = h.clone().requires_grad_(True)
    zeros = torch.zeros_like(h)
    loss = losses.dpo_loss(h, zeros, zeros, zeros, beta)
    (grad,) = torch.autograd.grad(loss.sum(), h)
    return loss.detach().numpy(), (-grad).numpy()


def dpo_beta_widget():
    """β and one pair's margin h as knobs of ``plot_dpo_loss_and_weight`` (an ``ipywidgets.interact``): the pair's
    loss and relative pull σ(−β h) move along the bold curves as either changes."""
    import ipywidgets as widgets

    def draw(beta, margin):
        plot_dpo_loss_and_weight(beta, margin=margin)
        plt.show()

    return widgets.interact(draw, beta=widgets.FloatLogSlider(value=0.1, base=10, min=-2, max=0.5, step=0.05,
                                                               description="β"),
                            margin=widgets.FloatSlider(value=5.0, min=-20.0, max=20.0, step=0.5, description="pair's h"))


def plot_preference_history(history, *, title: str = "DPO on review-base", before: dict | None = None,
                            first_batch_tied: bool = False, bars: dict | None = None):
    """Four panels of a ``PreferenceTrainer`` run: loss (with ln 2), preference accuracy (train batch
    and held-out), implicit-reward margin, and the policy's sequence log-probs of chosen and rejected
    (train-batch means, faint, and the held-out means, which are always the same pairs); two by two, to fit the
    book's column.

    ``before``: the held-out evaluation of the reference, ``PreferenceTrainer.evaluate()`` before training
    (keys ``rewards/accuracies``, ``rewards/margins``, ``logps/chosen``, ``logps/rejected``); drawn as
    black stars at step −1, so the first held-out marker, after one update, is not mistaken for the start.
    ``first_batch_tied``: the first training batch is scored at π = π_ref, where every pair ties and counts
    as wrong; its accuracy of 0 is then left off the accuracy panel (the legend says so), so it is not
    read as a collapse below a coin.
    ``bars``: {label: accuracy} of trivial rankers on the held-out pairs (lesson 06: "prefer the parsable
    review", "prefer the shorter review"), drawn as dashed horizontal lines on the accuracy panel.
    """
    frame = history.to_pandas() if hasattr(history, "to_pandas") else history
    missing = [k for k in ("step", "loss", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected")
               if k not in frame]
    if missing:
        raise ValueError(f"history must hold a PreferenceTrainer's metrics; missing {missing}")
    evals = frame.dropna(subset=["eval/rewards/accuracies"]) if "eval/rewards/accuracies" in frame else None
    fig, axes = panel_grid(4, panel=(COLUMN_IN / 2, 3.0), min_width=4.0, title=True)
    axes[0].plot(frame["step"], frame["loss"], color="tab:blue", lw=1)
    axes[0].axhline(math.log(2), color="black", ls=":", lw=1, label="ln 2")
    axes[0].set_title("loss", fontsize=10)
    axes[0].legend(fontsize=8)
    accuracy_rows = frame.iloc[1:] if first_batch_tied else frame
    axes[1].plot(accuracy_rows["step"], accuracy_rows["rewards/accuracies"], color="0.6", lw=1,
                 label="train batch (step 0: all ties, not drawn)" if first_batch_tied else "train batch")
    if evals is not None:
        axes[1].plot(evals["step"], evals["eval/rewards/accuracies"], "o-", color="tab:green", label="held-out")
    for (label, level), colour in zip((bars or {}).items(), ("tab:purple", "tab:orange", "tab:brown", "tab:olive")):
        axes[1].axhline(level, color=colour, ls="--", lw=1, label=f"{label} {level:.3f}")
    axes[1].set_ylim(-0.02, 1.02)
    axes[1].set_title("preference accuracy", fontsize=10)
    axes[1].legend(fontsize=8)
    axes[2].plot(frame["step"], frame["rewards/margins"], color="0.6", lw=1, label="train batch")
    if evals is not None:
        axes[2].plot(evals["step"], evals["eval/rewards/margins"], "o-", color="tab:green", label="held-out")
    axes[2].set_title("implicit-reward margin β·h", fontsize=10)
    axes[2].legend(fontsize=8)
    has_eval_logps = evals is not None and "eval/logps/chosen" in frame
    faint = dict(lw=0.8, alpha=0.35) if has_eval_logps else dict(lw=1.2)
    axes[3].plot(frame["step"], frame["logps/chosen"], color="tab:blue", label="chosen, train batch", **faint)
    axes[3].plot(frame["step"], frame["logps/rejected"], color="tab:red", label="rejected, train batch", **faint)
    if has_eval_logps:
        axes[3].plot(evals["step"], evals["eval/logps/chosen"], "o-", color="tab:blue", label="chosen, held-out")
        axes[3].plot(evals["step"], evals["eval/logps/rejected"], "o-", color="tab:red", label="rejected, held-out")
    if before is not None:
        star = dict(marker="*", color="black", markersize=10, ls="none")
        if "rewards/accuracies" in before:   # a caller may leave it out (ties broken by round-off, lesson 06)
            axes[1].plot([-1], [before["rewards/accuracies"]], label="reference", **star)
        axes[2].plot([-1], [before["rewards/margins"]], label="reference", **star)
        axes[3].plot([-1, -1], [before["logps/chosen"], before["logps/rejected"]], label="reference", **star)
        for ax in axes[1:3]:
            ax.legend(fontsize=8)
    axes[3].set_title("policy log-probs log π(y|x) (means)", fontsize=10)
    axes[3].legend(fontsize=8)
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_clause_credit(credit: pd.DataFrame, *, title: str = "what the implicit reward learned, clause by clause"):
    """Mean clause credit (left) beside the gold reward's own term (right), by sentiment and kind of clause."""
    table = clause_credit_table(credit)
    kinds = list(table["credit"].columns)
    colours = {"first 3, new": "tab:blue", "repeat": "tab:orange", "past the limit": "tab:gray"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    width = 0.8 / max(len(kinds), 1)
    for ax, column, label in ((axes[0], "credit", "mean credit: β · Σ log π/π_ref over the clause"),
                              (axes[1], "gold", "the gold reward's term for the clause")):
        for k, kind in enumerate(kinds):
            xs = np.arange(len(table)) + (k - (len(kinds) - 1) / 2) * width
            ax.bar(xs, table[column][kind].to_numpy(), width, color=colours[kind], label=kind)
        ax.set_xticks(np.arange(len(table)), table.index)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_ylabel(label, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_title(title, fontsize=10)
    axes[1].set_title("what the labeller wanted", fontsize=10)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_credit_by_position(credit: pd.DataFrame, *, title: str = "clause credit by position"):
    """Mean credit of new clauses (lines) and of repeats (open markers) by position, one colour per
    sentiment (``rlbook.preference_analysis.clause_credit_by_position``), with a dotted line where the
    gold reward's length rule steps (between clause ``MAX_CLAUSES`` and the next). An even slope across
    that line, with no extra drop at it, is "shorter is better" rather than the rule; a repeat sitting on
    its sentiment's line is a repeat not discounted."""
    new, repeats = clause_credit_by_position(credit), clause_credit_by_position(credit, repeat=True)
    colours = {"positive": "tab:green", "neutral": "tab:gray", "negative": "tab:red"}
    fig, ax = plt.subplots(figsize=(COLUMN_IN * 0.85, 3.2))
    for sentiment, colour in colours.items():
        ax.plot(new.index, new[sentiment], "o-", color=colour, label=f"{sentiment}, new")
        if sentiment in repeats:
            ax.plot(repeats.index, repeats[sentiment], "o", mfc="none", color=colour, ms=8,
                    label=f"{sentiment}, repeat")
    ax.axvline(MAX_CLAUSES - 0.5, color="black", ls=":", lw=1, label="gold's length step")
    ax.set_xticks(range(int(new.index.max()) + 1))
    ax.set_xlabel("clause position (0 = the first clause, as in the tables)")
    ax.set_ylabel("mean credit β · Σ log π/π_ref", fontsize=9)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # beside the axes, off the lines
    fig.tight_layout()
    return fig


def plot_run_against_optimum(predicted, observed, *, title: str = "the run against the exact optimum, per pair",
                             xlabel: str = "π*'s change log π*/π_ref (nats)", ylabel: str = "the run's change (nats)"):
    """Per-pair scatter of what a run did to log π(y|x) against what the exact optimum π* asks for,
    log π*/π_ref = (r − β log Z)/β (``rlbook.preference_analysis.kl_optimum_log_ratio``; Rafailov et al. 2023,
    arXiv:2305.18290, eq. 4), with the least-squares line (its slope and offset in the legend) and y = x, where a
    run that reached π* would lie. Returns the figure."""
    x, y = np.asarray(predicted, dtype=float).reshape(-1), np.asarray(observed, dtype=float).reshape(-1)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"predicted and observed must be two equal-length arrays of at least 2, got {x.size} and {y.size}")
    slope, offset = np.polyfit(x, y, 1)
    fig, ax = plt.subplots(figsize=(COLUMN_IN * 0.7, 3.4))
    ax.scatter(x, y, s=10, alpha=0.4, color="tab:blue", label=f"{x.size} pairs")
    grid = np.linspace(x.min(), x.max(), 2)
    ax.plot(grid, slope * grid + offset, color="tab:red", lw=1.5, label=f"fit: {slope:.2f}·x {offset:+.2f}")
    ax.plot(grid, grid, color="black", ls="--", lw=1, label="y = x (the run at π*)")
    ax.axhline(0, color="0.5", lw=0.6)
    ax.axvline(0, color="0.5", lw=0.6)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_margin_histograms(margins: dict, *, target: float | None = None, bins: int = 40,
                           title: str = "per-pair log-ratio margin h on held-out pairs", separate: bool = False,
                           shared_axis: bool = False, bound: float | None = None,
                           target_label: str = "IPO target 1/(2τ)", predicted: dict | None = None,
                           legend_below: bool = False):
    """Histograms of per-pair margins, one per run (``{name: (N,) array}``), IPO's target dotted.

    ``target_label``: the dotted line's legend text (its value is appended). ``predicted``: per-pair
    margins a theory predicts for one run (``{name: (N,) array}``, lesson 07: IPO's win-rate targets,
    ``rlbook.preference_analysis.ipo_win_rate_targets``), drawn grey and filled in that run's panel.

    ``separate``: one panel per run, each with its own bins over its own range (so a run whose
    margins are small is not squeezed into a few bars by another's long tail); otherwise all runs
    share one panel and one set of bins. ``shared_axis`` (with ``separate``): the panels share one
    h-axis and one set of bins instead, so their ranges compare at a glance. ``bound``: a margin
    drawn dashed (lesson 07: 1/τ, the largest IPO's optimum allows). ``legend_below``: each panel's
    legend under its axes, off the bars, instead of in the upper right corner.
    """
    if not margins:
        raise ValueError("margins must map at least one run name to its per-pair margins")
    values = {name: np.asarray(v, dtype=float) for name, v in margins.items()}
    low = min(float(v.min()) for v in values.values())
    high = max(float(v.max()) for v in values.values())
    shared_edges = np.linspace(low, high, bins + 1)
    if separate:
        fig, axes = plt.subplots(1, len(values), figsize=(3.6 * len(values) + 0.6, 3.4), squeeze=False,
                                 sharex=shared_axis)
        axes = list(axes[0])
    else:
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        axes = [ax] * len(values)
    for ax, (name, v) in zip(axes, values.items()):
        own_edges = np.linspace(float(v.min()), float(v.max()), bins + 1)
        edges = own_edges if separate and not shared_axis else shared_edges
        if predicted and name in predicted:
            p = np.asarray(predicted[name], dtype=float)
            ax.hist(p, bins=edges, histtype="stepfilled", color="0.75", alpha=0.6,
                    label=f"predicted: median {np.median(p):.2f}")
        ax.hist(v, bins=edges, histtype="step", lw=1.8, color=LOSS_COLOURS.get(name.split()[0].lower()),
                label=f"{name}: median {np.median(v):.2f}")
    for ax in dict.fromkeys(axes):
        if target is not None:
            ax.axvline(target, color=LOSS_COLOURS["ipo"], ls=":", lw=1.2, label=f"{target_label} = {target:.3g}")
        if bound is not None:
            ax.axvline(bound, color="black", ls="--", lw=1.0, label=f"1/τ = {bound:.3g}")
        ax.axvline(0, color="black", lw=0.6)
        ax.set_xlabel("h = log π/π_ref (chosen) − log π/π_ref (rejected)" if not separate else "h (nats)")
        ax.set_ylabel("pairs")
        if legend_below:
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3), frameon=False)
        else:
            ax.legend(fontsize=8, loc="upper right")
    if separate:
        fig.suptitle(title, fontsize=10)
    else:
        axes[0].set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- lesson 07: the zoo


def plot_losses_vs_margin(beta: float = 0.1, tau: float = 0.1, gamma: float = 0.5, *, simpo_beta: float = 2.0,
                          margin_range: float = 20.0, label_smoothing: float = 0.0):
    """The zoo's losses against the margin (left) and the pull −∂L/∂margin (right).

    Where the pull reaches zero the margin stops moving: only IPO's does, at h = 1/(2τ); DPO's,
    SimPO's and ORPO's pull decays but never vanishes, so their margins keep growing; KTO's
    saturates on both sides. ``label_smoothing`` ε > 0 adds conservative DPO (``dpo_loss(...,
    label_smoothing=ε)``, Mitchell 2023), dashed in DPO's colour: its pull crosses zero at
    h* = (1/β) log((1 − ε)/ε), a finite target like IPO's, marked where it falls in the plotted range.
    """
    label_smoothing = float(label_smoothing)
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    h = torch.linspace(-margin_range, margin_range, 801, dtype=torch.float64)
    curves = pair_losses_vs_margin(h, beta=beta, tau=tau, gamma=gamma, simpo_beta=simpo_beta)
    names = {"dpo": f"DPO (β={beta:g})", "ipo": f"IPO (τ={tau:g})", "kto": f"KTO (β={beta:g}, z0=0)",
             "simpo": f"SimPO (β={simpo_beta:g}, γ={gamma:g})", "orpo": "ORPO odds-ratio term (λ = 1)"}
    fig, (ax_loss, ax_pull) = plt.subplots(1, 2, figsize=(12, 3.8))
    hs = h.numpy()
    for name, loss in curves.items():
        pull = -np.gradient(loss, hs)
        ax_loss.plot(hs, loss, color=LOSS_COLOURS[name], label=names[name])
        ax_pull.plot(hs, pull, color=LOSS_COLOURS[name], label=names[name])
    if label_smoothing > 0:
        zeros = torch.zeros_like(h)
        cdpo = losses.dpo_loss(h, zeros, zeros, zeros, beta, label_smoothing=label_smoothing).numpy()
        label = f"cDPO (β={beta:g}, ε={label_smoothing:g})"
        ax_loss.plot(hs, cdpo, color=LOSS_COLOURS["dpo"], ls="--", label=label)
        ax_pull.plot(hs, -np.gradient(cdpo, hs), color=LOSS_COLOURS["dpo"], ls="--", label=label)
        cdpo_target = math.log((1 - label_smoothing) / label_smoothing) / beta
        if cdpo_target < margin_range:
            ax_pull.plot([cdpo_target], [0.0], "o", color=LOSS_COLOURS["dpo"], ms=5)
    target = 1 / (2 * tau)
    for ax in (ax_loss, ax_pull):
        ax.axvline(target, color=LOSS_COLOURS["ipo"], ls=":", lw=1)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xlabel("margin: h (DPO, IPO, KTO), per-token log-prob margin (SimPO), log odds ratio (ORPO)",
                      fontsize=8)
        ax.grid(alpha=0.3)
    ax_loss.set_ylabel("loss of one pair")
    ax_pull.set_ylabel("pull −∂L/∂margin")
    if simpo_beta > 1.2:
        ax_pull.annotate(f"SimPO's pull rises to β = {simpo_beta:g}, off the scale", xy=(0.02, 0.95),
                         xycoords="axes fraction", fontsize=8, va="top", color=LOSS_COLOURS["simpo"])
    ax_loss.set_ylim(-0.1, 4)
    ax_loss.set_title(f"loss of one pair (IPO's target 1/(2τ) = {target:.3g} dotted)", fontsize=10)
    ax_pull.set_ylim(-0.6, 1.2)
    ax_pull.set_title("pull on the margin, −∂L/∂margin: zero means it stops", fontsize=10)
    ax_loss.legend(fontsize=8)
    fig.tight_layout()
    return fig


def losses_vs_margin_widget():
    """β, τ, γ, SimPO's own β and cDPO's ε as knobs of ``plot_losses_vs_margin`` (an ``ipywidgets.interact``).

    The sliders start where lesson 07's static figure is drawn (β = 0.5 and τ = 0.25, the race's
    DPO, KTO and IPO settings; SimPO β = 2, γ = 0.5; ε = 0, no cDPO curve); SimPO's β and γ reach the
    race's 20 and 2.
    """
    import ipywidgets as widgets

    def draw(beta, tau, gamma, simpo_beta, label_smoothing):
        plot_losses_vs_margin(beta, tau, gamma, simpo_beta=simpo_beta, label_smoothing=label_smoothing)
        plt.show()

    return widgets.interact(
        draw,
        beta=widgets.FloatLogSlider(value=0.5, base=10, min=-2, max=0.5, step=0.05, description="β"),
        tau=widgets.FloatLogSlider(value=0.25, base=10, min=-1.5, max=0.5, step=0.05, description="τ (IPO)"),
        gamma=widgets.FloatSlider(value=0.5, min=0.0, max=3.0, step=0.1, description="γ (SimPO)"),
        simpo_beta=widgets.FloatLogSlider(value=2.0, base=10, min=0, max=1.5, step=0.05, description="β (SimPO)"),
        label_smoothing=widgets.FloatSlider(value=0.0, min=0.0, max=0.3, step=0.01, description="ε (cDPO)"),
    )


def plot_kto_value(beta: float = 0.5, reference_point: float = 0.0, *, desirable_weight: float = 1.0,
                   undesirable_weight: float = 1.0, reward_range: float = 15.0, axis_centre: float = 0.0):
    """KTO's per-example loss (left) and its pull −∂L/∂r (right) against the implicit reward r = log π/π_ref.

    One curve for a desirable response and one for an undesirable one, both through
    ``rlbook.losses.kto_loss`` (the pull by autograd), with the reference point z0 dotted. A
    desirable response is pushed up past z0, an undesirable one down below it; the pull peaks at
    r = z0 (λβ/4) and fades on *both* sides, so examples far from z0 — well learned, or hopelessly
    wrong — stop pulling.

    The r-axis runs over ``axis_centre`` ± ``reward_range`` whatever z0 is, so moving z0 slides both
    curves along it (the curves depend on r − z0 only).
    """
    beta = check_positive("beta", beta)
    reward_range = check_positive("reward_range", reward_range)
    r = torch.linspace(axis_centre - reward_range, axis_centre + reward_range, 601,
                       dtype=torch.float64).requires_grad_(True)
    z0 = torch.tensor(float(reference_point), dtype=torch.float64)
    fig, (ax_loss, ax_pull) = plt.subplots(1, 2, figsize=(11, 3.6))
    kinds = (("desirable", 1.0, "tab:green", desirable_weight), ("undesirable", 0.0, "tab:red", undesirable_weight))
    for label, flag, colour, weight in kinds:
        loss = losses.kto_loss(r, torch.zeros_like(r), torch.full_like(r, flag), z0, beta,
                               desirable_weight=desirable_weight, undesirable_weight=undesirable_weight)
        (grad,) = torch.autograd.grad(loss.sum(), r)
        xs = r.detach().numpy()
        ax_loss.plot(xs, loss.detach().numpy(), color=colour, label=f"{label} (λ = {weight:g})")
        ax_pull.plot(xs, (-grad).numpy(), color=colour, label=f"{label}: pushed {'up' if flag else 'down'}")
    for ax in (ax_loss, ax_pull):
        ax.axvline(float(z0), color="black", ls=":", lw=1)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xlabel("implicit reward r = log π(y|x) − log π_ref(y|x)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_loss.set_ylabel("loss of one example, λ − v")
    ax_pull.set_ylabel("pull −∂L/∂r")
    ax_loss.set_title(f"KTO loss λ − v  (β = {beta:g}, reference point z0 = {float(z0):g} dotted)", fontsize=10)
    ax_pull.set_title("pull on r, −∂L/∂r: largest at z0, fading on both sides", fontsize=10)
    fig.tight_layout()
    return fig


def kto_value_widget():
    """β, the reference point z0 and the undesirable weight λ_U as knobs of ``plot_kto_value``.

    The r-axis stays at −15 … 15 as z0 moves, so the curves visibly slide with it.
    """
    import ipywidgets as widgets

    def draw(beta, reference_point, undesirable_weight):
        plot_kto_value(beta, reference_point, undesirable_weight=undesirable_weight)
        plt.show()

    return widgets.interact(
        draw,
        beta=widgets.FloatLogSlider(value=0.5, base=10, min=-1.5, max=0.5, step=0.05, description="β"),
        reference_point=widgets.FloatSlider(value=0.0, min=0.0, max=8.0, step=0.5, description="z0"),
        undesirable_weight=widgets.FloatSlider(value=1.0, min=0.25, max=3.0, step=0.25, description="λ_U"),
    )


def plot_margin_trajectories(margins: dict, *, target: float | None = None, xlabel: str = "step",
                             title: str = "log-ratio margin h during training", log_steps: bool = False,
                             target_label: str = "IPO target 1/(2τ)", predicted: float | None = None,
                             predicted_label: str = "predicted", legend_outside: bool = False):
    """Margin curves, one per loss (``{name: (steps,) array}``), with IPO's target 1/(2τ) dotted.

    A name is a loss ("DPO") or a loss and a variant ("DPO, Adam"): each curve takes its loss's colour, and
    a variant's curve is dashed (a loss's second variant dash-dotted, its third dotted), so two runs of one
    loss are told apart by line style, not by a colour that would be another loss's. ``log_steps``: a
    logarithmic step axis, on which a margin growing like (1/β) log t is a straight line. ``target_label``:
    the dotted line's legend text (its value is appended); ``predicted``: a second level, drawn grey and
    dash-dotted with ``predicted_label`` (lesson 07: the mean of IPO's win-rate targets).
    ``legend_outside``: the legend to the right of the axes, off the curves.
    """
    if not margins:
        raise ValueError("margins must map at least one loss name to its margin curve")
    fig, ax = plt.subplots(figsize=(9.5 if legend_outside else 7.5, 3.6))
    variants: dict[str, int] = {}
    for name, values in margins.items():
        values = np.asarray(values, dtype=float)
        loss = name.split(",")[0].strip().lower()
        if loss == name.strip().lower():
            style = "-"
        else:
            style = ("--", "-.", ":")[variants.get(loss, 0) % 3]
            variants[loss] = variants.get(loss, 0) + 1
        ax.plot(np.arange(1, len(values) + 1), values, color=LOSS_COLOURS.get(loss, None), ls=style, label=name)
    if target is not None:
        ax.axhline(target, color=LOSS_COLOURS["ipo"], ls=":", lw=1.2, label=f"{target_label} = {target:.3g}")
    if predicted is not None:
        ax.axhline(predicted, color="0.45", ls="-.", lw=1.2, label=f"{predicted_label} = {predicted:.3g}")
    if log_steps:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel + (" (log scale)" if log_steps else ""))
    ax.set_ylabel("h = log π/π_ref (chosen − rejected)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if legend_outside:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_reward_vs_kl(points: pd.DataFrame, *, reference: tuple[float, float] | None = None,
                      title: str = "gold reward of what each policy writes against its KL to the reference"):
    """Each trained policy as one point: its KL(π ‖ π_ref) on its own samples against the gold reward of
    those samples, with ±1 s.e. bars both ways — the axes of the reward–KL frontier on which preference
    methods are compared (Rafailov et al. 2023, arXiv:2305.18290, Fig. 2; Gao et al. 2023, arXiv:2210.10760).

    ``points``: a table with columns ``loss``, ``seed``, ``kl``, ``kl s.e.``, ``gold reward`` and
    ``gold s.e.`` (lesson 07: ``rlbook.preference_analysis.sampled_kl``'s summary per policy). A loss
    takes its colour (``LOSS_COLOURS``, grey for any other), a seed its marker. ``reference``: the
    starting policy's (KL, gold reward), drawn as a black star. Returns the figure.
    """
    for column in ("loss", "seed", "kl", "kl s.e.", "gold reward", "gold s.e."):
        if column not in points:
            raise ValueError(f"points must have a column {column!r}")
    if not len(points):
        raise ValueError("points must hold at least one policy")
    markers = ("o", "s", "^", "D", "v")
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    labelled = set()
    for _, row in points.iterrows():
        loss = str(row["loss"])
        colour = LOSS_COLOURS.get(loss.lower(), "0.5")
        seed = int(row["seed"])
        label = loss if loss not in labelled else None
        labelled.add(loss)
        ax.errorbar(row["kl"], row["gold reward"], xerr=row["kl s.e."], yerr=row["gold s.e."], fmt=markers[seed % 5],
                    color=colour, ms=6, capsize=2, lw=1, label=label)
    if reference is not None:
        ax.plot(*reference, marker="*", color="black", ms=12, ls="none", label="reference")
    seeds = sorted(set(int(s) for s in points["seed"]))
    ax.set_xlabel("KL(π ‖ π_ref) on the policy's own samples (nats)")
    ax.set_ylabel("gold reward of its samples")
    ax.set_title(title + ("" if len(seeds) < 2 else "\n(marker = seed: " + ", ".join(
        f"{s} {markers[s % 5]}" for s in seeds) + ")"), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig
