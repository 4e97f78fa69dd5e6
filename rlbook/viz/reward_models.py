"""Figures and widgets for lesson 04: the Bradley–Terry model, reward-model training, over-optimisation.

Every function draws a new figure and returns it; end a notebook line with ``;`` so Jupyter shows
it once. The two widgets wrap ``plot_bradley_terry`` and ``plot_best_of_n_winners`` in
``ipywidgets.interact``.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from rlbook.metrics import best_of_n_expectation
from rlbook.tasks.reviews import UNPARSABLE

__all__ = ["plot_bradley_terry", "bradley_terry_widget", "plot_reward_model_history", "plot_proxy_against_gold",
           "plot_overoptimisation", "plot_best_of_n_winners", "best_of_n_winners_widget"]

PROXY_COLOUR, GOLD_COLOUR, ORACLE_COLOUR = "tab:orange", "tab:blue", "tab:green"


def plot_bradley_terry(temperature: float = 0.5):
    """Left: the gold labeller's P(a ≻ b) = σ(Δgold / T) against the gold gap Δgold, at ``temperature``.
    Right: the reward model's loss −log σ(Δr) on one labelled pair (it only falls as Δr grows) and the size of its
    gradient σ(−Δr) against its margin Δr, and for the two marked gold gaps the loss averaged over the labeller's
    draws, whose minimum is the Bradley–Terry optimum Δr = Δgold / T (of r*/T + c(x)): a noisier labeller
    (larger T) makes a flatter reward model. A minimum past the axis (T below 1/6 for a gap of 1) is marked by
    an arrow at the edge with its value."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    gap = np.linspace(-4, 4, 401)
    fig, (ax_label, ax_loss) = plt.subplots(1, 2, figsize=(10, 3.4))
    for t, style in ((0.5, ":"), (2.0, "--")):
        if abs(t - temperature) < 1e-9:
            continue  # the solid curve is this one: no hidden reference line in the legend
        ax_label.plot(gap, 1 / (1 + np.exp(-gap / t)), color="grey", ls=style, lw=1, label=f"T = {t}")
    ax_label.plot(gap, 1 / (1 + np.exp(-gap / temperature)), color=GOLD_COLOUR, lw=2.2, label=f"T = {temperature:.2f}")
    for g in (1.0, 0.5):
        p = 1 / (1 + np.exp(-g / temperature))
        ax_label.plot([g], [p], "o", color=GOLD_COLOUR)
        ax_label.annotate(f"Δgold={g}: {p:.2f}", (g, p), textcoords="offset points", xytext=(8, -12), fontsize=8)
    ax_label.set(xlabel="gold(a) − gold(b)", ylabel="P(label says a ≻ b)", title="the labeller: Bradley–Terry")
    ax_label.legend(fontsize=8)
    margin = np.linspace(-6, 6, 401)
    ax_loss.plot(margin, np.logaddexp(0, -margin), color="black", lw=2, label="loss −log σ(Δr)")
    ax_loss.plot(margin, 1 / (1 + np.exp(margin)), color="tab:red", lw=1.5, label="|∂loss/∂Δr| = σ(−Δr)")
    ax_loss.axhline(np.log(2), color="grey", lw=0.8, ls=":")
    ax_loss.annotate("ln 2 at Δr = 0", (0, np.log(2)), textcoords="offset points", xytext=(6, 6), fontsize=8)
    for g, style in ((1.0, "--"), (0.5, "-.")):
        # One pair's loss only falls with Δr; the optimum is the minimum of the loss averaged over the labeller's
        # draws, −p log σ(Δr) − (1 − p) log σ(−Δr) with p = σ(Δgold / T), at Δr = Δgold / T.
        p = 1 / (1 + np.exp(-g / temperature))
        expected = p * np.logaddexp(0, -margin) + (1 - p) * np.logaddexp(0, margin)
        optimum = g / temperature
        ax_loss.plot(margin, expected, color=GOLD_COLOUR, ls=style, lw=1.2,
                     label=f"expected loss, Δgold = {g}: min at Δr = {optimum:.2f}")
        if optimum <= margin[-1]:
            ax_loss.plot([optimum], [p * np.logaddexp(0, -optimum) + (1 - p) * np.logaddexp(0, optimum)], "o",
                         color=GOLD_COLOUR)
        else:  # a small T puts the minimum past the axis: say so at the edge rather than drop the marker
            ax_loss.plot([margin[-1]], [expected[-1]], ">", color=GOLD_COLOUR)
            ax_loss.annotate(f"min at {optimum:.1f} →", (margin[-1], expected[-1]), textcoords="offset points",
                             xytext=(-6, 6), ha="right", fontsize=8, color=GOLD_COLOUR)
    ax_loss.set(xlabel="Δr = r(chosen) − r(rejected)", ylabel="loss (nats) and |gradient|", ylim=(0, 4),
                title=f"the reward model's loss (optimum Δr = {1 / temperature:.2f} Δgold)")
    ax_loss.legend(fontsize=8)
    fig.tight_layout()
    return fig


def bradley_terry_widget():
    """The labeller's temperature T as a knob of ``plot_bradley_terry``."""
    import ipywidgets as widgets

    def draw(temperature):
        plot_bradley_terry(temperature)
        plt.show()  # shown in the widget's output and closed: one figure per change, none left open

    return widgets.interact(draw, temperature=widgets.FloatLogSlider(value=0.5, base=10, min=-1.3, max=0.7,
                                                                     step=0.05, description="T"))


def plot_reward_model_history(history, *, loss_floor: float | None = None, label_agreement: float | None = None,
                              margins: bool = False, smooth: int = 1, untrained: dict | None = None):
    """Training loss, batch accuracy and held-out accuracy of ``train_reward_model`` (a History or DataFrame).

    ``loss_floor``: the least loss the labels allow (``rlbook.metrics.bradley_terry_loss_floor``), drawn
    on the loss panel. ``label_agreement``: the share of training labels that agree with the gold order,
    drawn on the accuracy panel — the most a batch accuracy against noisy labels can reach in
    expectation, while held-out pairs are ordered by gold itself. ``margins``: a third panel with the
    mean margin r(chosen) − r(rejected) on the training batches and the held-out pairs. ``smooth``: the
    batch curves are drawn faint with a centred running mean over that many steps on top (1: raw only).

    The logged batch loss of step i is computed before that step's update, the held-out metrics of step i
    after it; the held-out points are therefore drawn at i + 1 (the updates done), so that both read as the
    model after that many updates. ``untrained``: the held-out ``accuracy`` (and ``margin``) of the model
    before any update (``pairwise_accuracy`` of the untrained model), drawn at 0 as an open marker."""
    frame = history.to_pandas() if hasattr(history, "to_pandas") else history
    if not (isinstance(smooth, int) and smooth >= 1):
        raise ValueError(f"smooth must be a positive int, got {smooth!r}")

    def batch_curve(ax, column, colour, label=None):
        if smooth == 1:
            ax.plot(frame["step"], frame[column], color=colour, alpha=0.6 if label else 1.0, label=label)
            return
        ax.plot(frame["step"], frame[column], color=colour, alpha=0.25, lw=0.8)
        running = frame[column].rolling(smooth, center=True, min_periods=1).mean()
        ax.plot(frame["step"], running, color=colour, lw=2,
                label=f"{label}, running mean of {smooth}" if label else f"running mean of {smooth}")

    fig, axes = plt.subplots(1, 3 if margins else 2, figsize=(13 if margins else 10, 3.2))
    ax_loss, ax_acc = axes[0], axes[1]
    batch_curve(ax_loss, "loss", "black")
    ax_loss.axhline(np.log(2), color="grey", ls=":", lw=1)
    if loss_floor is not None:
        ax_loss.axhline(loss_floor, color="tab:red", ls="--", lw=1)
        ax_loss.annotate(f"floor of the labels {loss_floor:.3f}", (frame["step"].iloc[0], loss_floor),
                         textcoords="offset points", xytext=(4, -11), fontsize=8, color="tab:red")
    ax_loss.set(xlabel="updates done", ylabel="Bradley–Terry loss", title="loss (ln 2 = a coin flip)")
    batch_curve(ax_acc, "accuracy", "grey", "training batch")
    if "eval/accuracy" in frame:
        held_out = frame.dropna(subset=["eval/accuracy"])
        ax_acc.plot(held_out["step"] + 1, held_out["eval/accuracy"], "o-", color=PROXY_COLOUR, label="held-out pairs")
    if untrained is not None:
        ax_acc.plot([0], [untrained["accuracy"]], "o", mfc="white", color=PROXY_COLOUR,
                    label=f"held-out, untrained ({untrained['accuracy']:.3f})")
    ax_acc.axhline(0.5, color="grey", ls=":", lw=1)
    if label_agreement is not None:
        ax_acc.axhline(label_agreement, color="tab:red", ls="--", lw=1,
                       label=f"training labels that agree with gold ({label_agreement:.3f})")
    ax_acc.set(xlabel="updates done", ylabel="pairwise accuracy", ylim=(0.3, 1.0), title="accuracy")
    ax_acc.legend(fontsize=8)
    if margins:
        ax_margin = axes[2]
        batch_curve(ax_margin, "margin", "grey", "training batch")
        if "eval/margin" in frame:
            held_out = frame.dropna(subset=["eval/margin"])
            ax_margin.plot(held_out["step"] + 1, held_out["eval/margin"], "o-", color=PROXY_COLOUR, label="held-out pairs")
        if untrained is not None and "margin" in untrained:
            ax_margin.plot([0], [untrained["margin"]], "o", mfc="white", color=PROXY_COLOUR)
        ax_margin.axhline(0, color="grey", ls=":", lw=1)
        ax_margin.set(xlabel="updates done", ylabel="mean r(chosen) − r(rejected)", title="margin")
        ax_margin.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_proxy_against_gold(proxy, gold, *, top: int = 50, kinds=None):
    """The proxy reward of every sample of a pool against its gold reward, one column per gold level.

    Points are jittered sideways; the ``top`` samples with the highest proxy reward (where best-of-n
    with a large n takes its winners) are ringed in red, with their gold levels counted in the title.
    ``kinds`` (one per sample, ``rlbook.tasks.reviews.unparsable_kind`` as a string): the texts cut off
    at the token budget and the malformed ones are drawn in their own colours (both sit at gold −3)."""
    proxy, gold = torch.as_tensor(proxy).flatten().double(), torch.as_tensor(gold).flatten().double()
    if proxy.shape != gold.shape:
        raise ValueError(f"proxy and gold must hold the same samples, got {tuple(proxy.shape)} and {tuple(gold.shape)}")
    kinds = None if kinds is None else np.asarray(kinds, dtype=str).reshape(-1)
    if kinds is not None and kinds.shape[0] != proxy.numel():
        raise ValueError(f"kinds must give one kind per sample ({proxy.numel()}), got {kinds.shape[0]}")
    top = min(int(top), proxy.numel())
    levels = torch.unique(gold)
    column = torch.searchsorted(levels, gold).numpy()
    jitter = np.random.default_rng(0).uniform(-0.3, 0.3, size=proxy.numel())
    fig, ax = plt.subplots(figsize=(9, 3.8))
    colours = np.full(proxy.numel(), PROXY_COLOUR, dtype=object)
    if kinds is not None:
        colours[kinds == "cut off"], colours[kinds == "malformed"] = "tab:grey", "tab:purple"
    ax.scatter(column + jitter, proxy.numpy(), s=3, alpha=0.25, c=list(colours), rasterized=True)
    if kinds is not None:
        for kind, colour in (("cut off", "tab:grey"), ("malformed", "tab:purple")):
            ax.scatter([], [], s=12, color=colour, label=f"unparsable: {kind} ({int((kinds == kind).sum())})")
    means = [proxy[gold == v].mean().item() for v in levels]
    ax.plot(np.arange(len(levels)), means, "k_", ms=18, mew=2, label="mean proxy per gold level")
    best = torch.argsort(proxy, descending=True, stable=True)[:top]
    ax.scatter(column[best] + jitter[best.numpy()], proxy[best].numpy(), s=22, facecolors="none", edgecolors="tab:red",
               label=f"the {top} highest proxy rewards")
    ax.set_xticks(np.arange(len(levels)), [f"{v:g}" for v in levels.tolist()], fontsize=8)
    counts = {v: int((gold[best] == v).sum()) for v in levels.tolist() if (gold[best] == v).any()}
    ax.set(xlabel="gold reward", ylabel="proxy reward (learned RM)",
           title="top by proxy, gold levels: " + ", ".join(f"{v:g}×{k}" for v, k in sorted(counts.items())))
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def plot_overoptimisation(curves: dict, *, fit: bool = True, downturn: dict | None = None,
                          proxy_scale: float | None = None, proxy_name: str | None = None,
                          max_gain: float | None = None):
    """Proxy and gold reward of best-of-n under the proxy, as gains over n = 1, against √KL (Gao et al. 2022).

    ``curves`` is ``rlbook.metrics.overoptimisation_curves``'s output.
    With ``fit`` the gold curve is fitted by Gao et al.'s best-of-n form d (α − β d), d = √KL
    (least squares), drawn dashed. The green curve is best-of-n under gold itself (no proxy).

    ``downturn`` (``rlbook.metrics.overoptimisation_downturn`` over several reward-model seeds on the
    same pool and ns): the gold curve drawn is then the seed mean, with its bootstrap band over the pools
    shaded and each seed's curve thin. ``proxy_scale``: the proxy gain is divided by it — the slope of
    the proxy on gold (a Bradley–Terry reward is r*/T + c in theory), so that it reads in gold units.
    ``proxy_name`` names the reward model whose proxy curve is drawn (e.g. one of several seeds), and
    ``max_gain`` draws the largest gold gain any policy can reach (best gold minus the n = 1 mean) as a
    horizontal line, so that a proxy curve in gold units is not read past it. The legend sits below the
    axes, so that it hides no curve and not that line's label."""
    d = curves["sqrt_kl"]
    fig, ax = plt.subplots(figsize=(7.5, 5.6))
    proxy_gain = curves["proxy"] - curves["proxy"][0]
    proxy_label = "proxy RM reward (what is optimised)"
    if proxy_scale is not None:
        if not proxy_scale > 0:
            raise ValueError(f"proxy_scale must be positive, got {proxy_scale!r}")
        proxy_gain = proxy_gain / proxy_scale
        proxy_label = f"proxy RM reward ÷ its slope on gold ({proxy_scale:.2f}): in gold units"
    if proxy_name:
        proxy_label = f"{proxy_label} ({proxy_name})"
    ax.plot(d, proxy_gain, "o-", color=PROXY_COLOUR, label=proxy_label)
    if max_gain is not None:
        ax.axhline(max_gain, color="grey", lw=0.8, ls="-.")
        ax.annotate(f"largest gold gain any policy can reach ({max_gain:.2f})", (0, max_gain),
                    textcoords="offset points", xytext=(4, 4), fontsize=8, color="grey")
    gold = curves["gold"]
    gold_label = "gold reward of the proxy's pick"
    if downturn is not None:
        if len(downturn["mean_curve"]) != len(d):
            raise ValueError(f"downturn has {len(downturn['mean_curve'])} points, curves {len(d)}: use the same ns")
        gold = downturn["mean_curve"]
        for seed_curve in downturn["curves"]:
            ax.plot(d, seed_curve - seed_curve[0], "-", color=GOLD_COLOUR, lw=0.7, alpha=0.35)
        lo, hi = downturn["band"]
        ax.fill_between(d, lo - gold[0], hi - gold[0], color=GOLD_COLOUR, alpha=0.18, lw=0)
        gold_label = (f"gold reward of the proxy's pick: mean of {len(downturn['curves'])} reward models (thin), "
                      f"{downturn['level']:.0%} band over pools")
    ax.plot(d, gold - gold[0], "o-", color=GOLD_COLOUR, label=gold_label)
    ax.plot(d, curves["gold_oracle"] - curves["gold_oracle"][0], ":", color=ORACLE_COLOUR,
            label="gold reward of best-of-n under gold itself")
    if fit:
        design = np.stack([d, -d ** 2], axis=1)
        (alpha, beta), *_ = np.linalg.lstsq(design, gold - gold[0], rcond=None)
        grid = np.linspace(0, d.max(), 100)
        ax.plot(grid, grid * (alpha - beta * grid), "--", color=GOLD_COLOUR, alpha=0.6,
                label=f"fit d(α − βd): α={alpha:.2f}, β={beta:.2f}")
    peak = int(np.argmax(gold))
    ax.axvline(d[peak], color=GOLD_COLOUR, lw=0.8, ls=":")
    ax.annotate(f"gold peaks at n = {curves['n'][peak]}", (d[peak], gold[peak] - gold[0]),
                textcoords="offset points", xytext=(-40, 12), fontsize=8)
    top = ax.secondary_xaxis("top", functions=(lambda x: x ** 2, lambda k: np.sqrt(np.maximum(k, 0))))
    top.set_xlabel("upper bound on KL(π_best-of-n ‖ π) (nats): log n − (n − 1)/n")
    ax.set(xlabel="d = √(KL bound),  KL ≤ log n − (n − 1)/n (Beirami et al. 2024)", ylabel="reward gain over n = 1",
           title="best-of-n against an imperfect reward model")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    fig.tight_layout()
    return fig


def plot_best_of_n_winners(proxy, gold, n: int, *, kinds=None):
    """The distribution of the gold reward of the best-of-``n`` winner, picked by the proxy and by gold.

    Probabilities are exact over the pool (``best_of_n_expectation`` of each level's indicator).
    ``kinds`` (optional, (P, N) like ``gold``): each sample's ``str(unparsable_kind(...))`` — "cut off",
    "malformed" or "None" (parsable); with it, each bar at the unparsable level is split into texts cut
    off at the token budget (hatched ``//``), texts that ended but do not parse (hatched ``xx``) and
    parsable reviews of that score (plain), so a change of the bar's make-up with ``n`` is visible."""
    proxy, gold = torch.as_tensor(proxy), torch.as_tensor(gold)
    levels = torch.unique(gold)
    x = np.arange(len(levels))
    fig, ax = plt.subplots(figsize=(9, 3.4))
    selections = ((None, -0.27, "lightgrey", "π (n = 1)"), (proxy, 0.0, PROXY_COLOUR, f"best-of-{n} by the proxy"),
                  (gold, 0.27, ORACLE_COLOUR, f"best-of-{n} by gold"))
    kinds = None if kinds is None else np.asarray(kinds).reshape(tuple(gold.shape))
    means = []
    for scores, offset, colour, label in selections:
        def share(indicator):
            indicator = torch.as_tensor(indicator).double()
            return indicator.mean().item() if scores is None else best_of_n_expectation(scores, indicator, n).mean().item()
        heights = [share(gold == v) for v in levels]
        means.append(float(np.dot(heights, levels.tolist())))
        ax.bar(x + offset, heights, 0.27, color=colour, label=label)
        if kinds is not None:
            bottom = 0.0
            for kind, hatch in (("cut off", "//"), ("malformed", "xx")):
                at_level = torch.from_numpy(kinds == kind) & (gold == UNPARSABLE)
                if at_level.any():
                    level = int((levels == UNPARSABLE).nonzero()[0, 0].item())
                    part = share(at_level)
                    ax.bar(x[level] + offset, part, 0.27, bottom=bottom, color=colour, edgecolor="black", lw=0.4, hatch=hatch)
                    bottom += part
    if kinds is not None:
        from matplotlib.patches import Patch
        handles, labels = ax.get_legend_handles_labels()
        handles += [Patch(facecolor="white", edgecolor="black", hatch="//"), Patch(facecolor="white", edgecolor="black", hatch="xx")]
        labels += ["  of which cut off at the budget", "  of which ended but malformed"]
        ax.legend(handles, labels, fontsize=8, loc="upper left")
    else:
        ax.legend(fontsize=8)
    ax.set_xticks(x, [f"{v:g}" for v in levels.tolist()], fontsize=8)
    ax.set(xlabel="gold reward of the winner", ylabel="probability", ylim=(0, 1),
           title=f"n = {n}: mean gold of the winner {means[1]:+.2f} (proxy picks) vs {means[2]:+.2f} (gold picks)")
    fig.tight_layout()
    return fig


def best_of_n_winners_widget(proxy, gold, *, kinds=None):
    """n (powers of two up to the pool size) as a knob of ``plot_best_of_n_winners`` (``kinds``: as there)."""
    import ipywidgets as widgets

    pool = torch.as_tensor(proxy).shape[1]
    options = [2 ** i for i in range(int(np.log2(pool)) + 1)]

    def draw(n):
        plot_best_of_n_winners(proxy, gold, n, kinds=kinds)
        plt.show()  # shown in the widget's output and closed: one figure per change, none left open

    return widgets.interact(draw, n=widgets.SelectionSlider(options=options, value=options[len(options) // 2],
                                                            description="n"))
