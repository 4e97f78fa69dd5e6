"""Figures and widgets for lesson 02: the KL estimators k1, k2, k3 and where a KL penalty goes.

Every function draws a new figure and returns it; end a notebook line with ``;`` so Jupyter shows
it once. ``kl_estimator_widget`` wraps ``plot_kl_estimator_histograms`` in ``ipywidgets.interact``, and
``optima_beta_widget`` wraps ``plot_optima_at_beta`` (§6–§7's optima, with β as the knob).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from rlbook.toys import (
    forward_kl_optimum,
    k1_k3_spread_crossover,
    kl_estimator_table_any_sigma,
    kl_estimator_table_exact,
    ratio_survival,
    reverse_kl,
    reverse_kl_optimum,
    sample_kl_estimates,
)

__all__ = [
    "ESTIMATOR_COLOURS",
    "plot_kl_estimator_histograms",
    "kl_estimator_widget",
    "WIDGET_SAMPLE_SIZES",
    "plot_kl_estimator_table",
    "plot_ratio_survival",
    "plot_batch_mean_spread",
    "plot_expected_gradients",
    "plot_placement_outcomes",
    "plot_sequence_placements",
    "plot_optima_at_beta",
    "optima_beta_widget",
    "plot_kl_gradient_variance",
    "plot_token_tails",
]

ESTIMATOR_COLOURS = {"k1": "tab:red", "k2": "tab:orange", "k3": "tab:blue"}


def plot_kl_estimator_histograms(mu: float = 1.0, sigma: float = 1.0, *, n_samples: int = 20_000, seed: int = 0):
    """Histograms of per-sample k1, k2, k3 for π_θ = N(0, 1), π_ref = N(μ, σ²), with the true KL.

    Each panel marks the true KL(π_θ ‖ π_ref) (black) and the sample mean (dashed). Its title gives
    the measured bias/true ± one standard error (the sample stdev over √n: a single sample's bias is
    noise until it clears a few of these; "SE undefined" where the exact variance is infinite) and stdev/true, beside the exact ones (``kl_estimator_table_any_sigma``):
    where they part, the sample has missed the rare draws that carry the variance (k3 far from
    π_ref, or σ² ≥ 2, where k3's exact stdev is infinite). Each panel's x-range shows the 0.5–99.5% quantiles
    of its own estimator (with 0 and 1.5× the true KL), so the panels have different scales; the draws beyond it
    are counted in a grey, hatched bar stacked on each edge bin, so that the pile is not read as part of the
    distribution; its legend entry gives the share of the sample variance those draws carry.
    """
    exact = kl_estimator_table_any_sigma(mu, sigma)
    true_kl = exact["true_kl"]["value"]
    values = {name: v.numpy() for name, v in sample_kl_estimates(mu, sigma, n_samples=n_samples, seed=seed).items()}
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, (name, v) in zip(axes, values.items()):
        low, high = np.quantile(v, [0.005, 0.995])  # each panel its own range: k1's cloud and k3's pile differ in scale
        low, high = min(low, 0.0, true_kl), max(high, 1.5 * true_kl)
        bins = np.linspace(low, high, 80)
        width = bins[1] - bins[0]
        counts, _, _ = ax.hist(v[(v >= low) & (v <= high)], bins=bins, color=ESTIMATOR_COLOURS[name], alpha=0.75)
        beyond = {"below": (int((v < low).sum()), bins[0], counts[0]), "above": (int((v > high).sum()), bins[-2], counts[-1])}
        labelled = False
        outside = (v < low) | (v > high)
        squares = (v - v.mean()) ** 2  # the share of the sample variance the draws beyond the range carry
        carried = float(squares[outside].sum() / squares.sum())
        for count, left, base in beyond.values():
            if count:
                ax.bar(left, count, width, bottom=base, align="edge", color="0.8", edgecolor="0.35", hatch="////",
                       lw=0.5, label=None if labelled else f"beyond the range: {int(outside.sum()):,} "
                                                           f"({carried:.0%} of the variance)")
                labelled = True
        ax.axvline(true_kl, color="black", lw=2, label=f"true KL = {true_kl:.4g}")
        ax.axvline(v.mean(), color="black", ls="--", lw=1.2, label=f"sample mean = {v.mean():.4g}")
        exact_stdev = exact[name]["stdev/true"]
        bias_se = v.std() / np.sqrt(len(v)) / true_kl  # one standard error of the sample mean, over the KL
        # with an infinite variance the sample stdev over √n estimates nothing: no ± is printed
        spread = "SE undefined" if exact_stdev == float("inf") else f"± {bias_se:.3f}"
        ax.set_title(f"{name}: bias/true = {(v.mean() - true_kl) / true_kl:+.3f} {spread} "
                     f"(exact {exact[name]['bias/true']:+.3f})\n"
                     f"stdev/true = {v.std() / true_kl:.2f} (exact {'∞' if exact_stdev == float('inf') else f'{exact_stdev:.2f}'})",
                     fontsize=9)
        ax.set_ylabel("count of draws", fontsize=8)
        ax.set_ylim(top=1.6 * counts.max())  # headroom: the legend sits above the histogram, not on it
        ax.legend(fontsize=7.5, loc="upper right")
        ax.set_xlabel("per-sample value")
    fig.suptitle(f"x ~ π_θ = N(0, 1), π_ref = N({mu:.2f}, {sigma:.2f}²), r = π_ref(x)/π_θ(x), {n_samples:,} samples, "
                 f"seed {seed} (grey hatched: draws beyond the range, stacked on the edge bin)", fontsize=10)
    fig.tight_layout()
    return fig


WIDGET_SAMPLE_SIZES = (2_000, 20_000, 200_000)
STYLE_NAMES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}


def kl_estimator_widget(*, n_samples: int = 20_000, seed: int = 0):
    """μ and σ of π_ref, the number of draws and the seed of the sample, as knobs of
    ``plot_kl_estimator_histograms`` (an ``ipywidgets.interact``). The seed shows which numbers are
    stable and which are not: with σ² ≥ 2, k3's sample stdev and its batch mean jump from seed to
    seed. The number of draws (``WIDGET_SAMPLE_SIZES``, and ``n_samples``) shows which settle: with a
    finite variance the sample stdev settles on the exact one as the draws grow; with σ² ≥ 2, k3's
    keeps growing, because ever rarer, ever larger draws keep arriving."""
    import ipywidgets as widgets

    def draw(mu, sigma, n, seed):
        plot_kl_estimator_histograms(mu, sigma, n_samples=n, seed=seed)
        plt.show()  # inside the interact's output: ipywidgets' own flush misses matplotlib's "inline" backend

    sizes = sorted({*WIDGET_SAMPLE_SIZES, int(n_samples)})
    return widgets.interact(
        draw,
        mu=widgets.FloatSlider(value=0.5, min=0.05, max=3.0, step=0.05, description="μ of π_ref"),
        sigma=widgets.FloatSlider(value=1.0, min=0.5, max=2.0, step=0.05, description="σ of π_ref"),
        n=widgets.SelectionSlider(options=[(f"{size:,}", size) for size in sizes], value=int(n_samples),
                                  description="draws"),
        seed=widgets.IntSlider(value=seed, min=0, max=19, description="seed"),
    )


def plot_ratio_survival(mu: float = 0.5, sigmas=(1.0, 1.3, 2.0), *, n_samples: int = 200_000, seed: int = 0):
    """The tail of r = π_ref/π_θ on log–log axes: P(r > t) against t, one colour per width σ of π_ref.

    Solid: the exact survival (``rlbook.toys.ratio_survival``); dots: the share of ``n_samples`` draws
    (x ~ N(0, 1), seed ``seed``) with r > t, down to one draw in n. For σ > 1 a dashed guide of slope −α,
    α = σ²/(σ² − 1), is drawn through the exact curve's last point: a power-law tail is a straight line
    here, and α ≤ 2 (σ² ≥ 2) is the tail whose E[r²], hence k3's variance, is infinite. At σ = 1 the tail
    is log-normal and bends down, lighter than any power.
    """
    thresholds = np.logspace(0, 5, 101)[1:]
    colours = ("tab:green", "tab:orange", "tab:red", "tab:purple")
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    for sigma, colour in zip(sigmas, colours):
        exact = ratio_survival(mu, sigma, thresholds).numpy()
        log_r = -sample_kl_estimates(mu, sigma, n_samples=n_samples, seed=seed)["k1"].numpy()
        sampled = (log_r[None, :] > np.log(thresholds)[:, None]).mean(1)
        alpha = sigma**2 / (sigma**2 - 1) if sigma > 1 else float("inf")
        label = f"σ = {sigma:g}" + (f" (α = {alpha:.2f})" if sigma > 1 else " (log-normal tail)")
        shown = exact > 1e-12
        ax.loglog(thresholds[shown], exact[shown], color=colour, lw=2, label=label)
        hit = sampled > 0
        ax.loglog(thresholds[hit][::4], sampled[hit][::4], "o", color=colour, ms=3.5, alpha=0.7)
        if sigma > 1:
            anchor = int(np.argmin(np.abs(np.log(exact[shown]) - np.log(10 / n_samples))))
            ax.loglog(thresholds, exact[anchor] * (thresholds / thresholds[anchor]) ** -alpha, "--", color=colour, lw=1,
                      label=f"slope −{alpha:.2f}")
    ax.axhline(1 / n_samples, color="0.5", lw=0.8, ls=":")
    ax.annotate(f"one draw in {n_samples:,}", (thresholds[0], 1 / n_samples), xytext=(2, 3), textcoords="offset points",
                fontsize=8, color="0.3")
    ax.set_ylim(0.1 / n_samples, 1.0)
    ax.set_xlabel("t")
    ax.set_ylabel("P(r > t), r = π_ref / π_θ")
    ax.set_title(f"x ~ π_θ = N(0, 1), π_ref = N({mu:g}, σ²): the ratio's tail (solid: exact; dots: "
                 f"{n_samples:,} draws, seed {seed})", fontsize=9)
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    fig.tight_layout()
    return fig


def plot_kl_estimator_table(mus=None, *, measured: dict[float, dict] | None = None):
    """bias/true and stdev/true of k1, k2, k3 against μ (π_ref = N(μ, 1)), from the closed forms.

    ``measured`` (optional) maps μ to a Monte Carlo table (``kl_estimator_table_monte_carlo``),
    drawn as points on the curves. A dotted line marks ``k1_k3_spread_crossover``, beyond which k3
    spreads more than k1.
    """
    mus = np.geomspace(0.05, 3.0, 120) if mus is None else np.asarray(mus, dtype=float)
    tables = [kl_estimator_table_exact(float(mu)) for mu in mus]
    fig, (ax_bias, ax_std) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, colour in ESTIMATOR_COLOURS.items():
        ax_bias.plot(mus, [t[name]["bias/true"] for t in tables], color=colour, label=name)
        ax_std.plot(mus, [t[name]["stdev/true"] for t in tables], color=colour, label=name)
        for mu, table in (measured or {}).items():
            ax_bias.plot(mu, table[name]["bias/true"], "o", color=colour, ms=6, mec="black")
            ax_std.plot(mu, table[name]["stdev/true"], "o", color=colour, ms=6, mec="black")
    crossover = k1_k3_spread_crossover()
    ax_std.axvline(crossover, color="0.3", ls=":", lw=1.2, label=f"μ = {crossover:.2f}: k3 spreads more than k1 beyond")
    ax_bias.set_title("bias  (k1 and k3 lie on 0)", fontsize=10)
    ax_std.set_title("standard deviation", fontsize=10)
    ax_bias.set_ylabel("bias / true KL")
    ax_std.set_ylabel("stdev / true KL")
    ax_std.set_yscale("log")
    highest = max(t[name]["stdev/true"] for t in tables for name in ESTIMATOR_COLOURS)
    ax_std.set_ylim(top=15 * highest)  # room above the curves for the legend
    for ax in (ax_bias, ax_std):
        ax.set_xscale("log")
        ax.set_xlabel("μ  (π_θ = N(0, 1), π_ref = N(μ, 1))")
        ax.grid(True, which="both", alpha=0.3)
        if measured:
            ax.plot([], [], "o", color="white", mec="black", label="measured (points)")
        ax.legend(fontsize=8, loc="upper left" if ax is ax_bias else "upper right")
    fig.tight_layout()
    return fig


def plot_batch_mean_spread(spread: dict[float, dict], *, histogram_sigma: float | None = None,
                           histogram_size: int | None = None, mu: float | None = None):
    """k1's and k3's batch means as the batch grows (``rlbook.toys.k3_batch_mean_spread``, one result per σ).

    Left: the interquartile range of the batch means over the true KL against the batch size n, on
    log–log axes, with ±2 bootstrap SE as bars, per estimator (colour) and σ of π_ref (line style); two
    guides through k1's and k3's first point at the largest σ have the slopes −1/2 (a finite-variance
    mean) and 1/α − 1 (the stable law of index α = σ²/(σ² − 1), −1/4 at σ = 2; Gnedenko & Kolmogorov
    1954). Right: histograms of the batch means over the true KL at ``histogram_size`` draws and
    ``histogram_sigma`` (default: the middle size, the largest σ), with the true KL at 1 and each
    estimator's median dashed: k3's mass sits left of 1, its tail far right. ``mu`` (optional), the μ
    the spread was measured at, is written into the title.
    """
    if not spread:
        raise ValueError("spread must map at least one σ to a k3_batch_mean_spread result")
    sigmas = sorted(spread, reverse=True)
    histogram_sigma = sigmas[0] if histogram_sigma is None else histogram_sigma
    if histogram_sigma not in spread:
        raise ValueError(f"histogram_sigma must be one of {sigmas}, got {histogram_sigma}")
    sizes = sorted(spread[histogram_sigma])
    histogram_size = sizes[len(sizes) // 2] if histogram_size is None else histogram_size
    if histogram_size not in spread[histogram_sigma]:
        raise ValueError(f"histogram_size must be one of {sizes}, got {histogram_size}")
    fig, (ax_iqr, ax_hist) = plt.subplots(1, 2, figsize=(11.5, 3.9))
    styles = ["-", "--", ":", "-."]
    for sigma, style in zip(sigmas, styles):
        ns = np.array(sorted(spread[sigma]), dtype=float)
        for name in ("k1", "k3"):
            rows = [spread[sigma][int(n)][name] for n in ns]
            iqr = np.array([row["iqr/true"] for row in rows])
            se = np.array([row["log_iqr_se"] for row in rows])
            ax_iqr.errorbar(ns, iqr, yerr=[iqr * (1 - np.exp(-2 * se)), iqr * (np.exp(2 * se) - 1)], ls=style,
                            marker="o", ms=4, capsize=3, color=ESTIMATOR_COLOURS[name],
                            label=f"{name}, σ = {sigma:g} ({STYLE_NAMES.get(style, style)})")
    widest = sigmas[0]
    ns = np.array(sorted(spread[widest]), dtype=float)
    guides = {"k1": (-0.5, "slope −1/2 (finite variance)")}
    if widest**2 > 2:
        alpha = widest**2 / (widest**2 - 1)
        guides["k3"] = (1 / alpha - 1, f"slope 1/α − 1 = −{1 - 1 / alpha:.2f} (α = {alpha:.2f})")
    for name, (slope, label) in guides.items():
        start = spread[widest][int(ns[0])][name]["iqr/true"]
        ax_iqr.plot(ns, start * (ns / ns[0]) ** slope, color="0.3", lw=1, ls=(0, (1, 1)) if name == "k1" else (0, (5, 2)),
                    label=label)
    ax_iqr.set_xscale("log")
    ax_iqr.set_yscale("log")
    ax_iqr.set_xlabel("draws per batch, n")
    ax_iqr.set_ylabel("IQR of the batch means / true KL")
    ax_iqr.set_title("How the spread of a batch mean shrinks (bars: ±2 bootstrap SE)", fontsize=10)
    ax_iqr.grid(True, which="both", alpha=0.3)
    ax_iqr.legend(fontsize=8, loc="lower left", handlelength=4)  # long handles so dashed reads apart from solid
    results = spread[histogram_sigma][histogram_size]
    values = {name: np.asarray(results[name]["means/true"]) for name in ("k1", "k3")}
    everything = np.concatenate(list(values.values()))
    low, high = np.quantile(everything, [0.0, 0.98])
    bins = np.linspace(min(low, 0.5), max(high, 1.5), 60)
    clipped = 0
    for name, v in values.items():
        clipped += int((v > bins[-1]).sum())
        shown = np.clip(v, bins[0], bins[-1])
        ax_hist.hist(shown, bins=bins, color=ESTIMATOR_COLOURS[name], alpha=0.55,
                     label=f"{name}: {np.mean(v < 1):.0%} of batches below the KL")
        ax_hist.axvline(np.median(v), color=ESTIMATOR_COLOURS[name], ls="--", lw=1.2)
    ax_hist.axvline(1.0, color="black", lw=2, label="true KL")
    ax_hist.set_ylabel("batches")
    ax_hist.set_xlabel(f"batch mean / true KL (the last bin also holds the {clipped} beyond it)")
    ax_hist.set_title(f"{len(values['k1'])} batch means of {histogram_size:,} draws, σ = {histogram_sigma:g} "
                      "(dashed: medians)", fontsize=10)
    ax_hist.legend(fontsize=7.5, loc="upper right")
    fig.suptitle(f"x ~ π_θ = N(0, 1), π_ref = N({'μ' if mu is None else f'{mu:g}'}, σ²), r = π_ref/π_θ: k1 and k3 averaged over batches",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_expected_gradients(gradients: dict[str, torch.Tensor], *, reverse: torch.Tensor, forward: torch.Tensor):
    """Bars of E[∇k] for each estimator, per logit, with ∇KL(π‖π_ref) and ∇KL(π_ref‖π) as markers.

    ``gradients`` maps "k1", "k2", "k3" to their exact expected gradients (K,).
    """
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    positions = _bars_with_markers(
        ax, {f"E[∇{name}]": gradient for name, gradient in gradients.items()},
        {f"E[∇{name}]": colour for name, colour in ESTIMATOR_COLOURS.items()},
        markers={"∇ KL(π_θ ‖ π_ref)  (reverse)": (reverse, ["E[∇k2]"]),
                 "∇ KL(π_ref ‖ π_θ)  (forward)": (forward, ["E[∇k3]"])})
    ax.axhline(0, color="0.5", lw=0.8)
    k = len(positions)
    ax.set_xticks(positions, [f"θ_{i}" for i in range(k)])
    ax.set_xlabel("logit θ_x of outcome x")
    ax.set_ylabel("gradient component")
    ax.set_title("Expected gradient of each estimator, by exact enumeration (E[∇k1] = 0: no red bars)", fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def plot_placement_outcomes(ref_probs, rewards, finals: dict[str, torch.Tensor], *,
                            reverse_optimum: torch.Tensor, forward_optimum: torch.Tensor, beta: float | None = None):
    """Where each KL placement leads the policy: final π_θ per placement beside π_ref and the optima.

    ``finals`` maps a placement (``rlbook.toys.KL_PLACEMENTS``) to the policy that exact gradient
    ascent converged to. The reverse-KL optimum (×) is drawn over the bars of the placements whose
    gradient is the reverse-KL one (k1 in the reward, k2 and k3+ in the loss), the forward-KL
    optimum (○) over k3 in the loss, so each marker sits on the bar it predicts. ``beta`` (optional), the
    penalty's weight the runs used, is written into the title.
    """
    series = {"π_ref": torch.as_tensor(ref_probs), **finals}
    colours = {"π_ref": "0.6", "k1_in_reward": "tab:purple", "k1_in_loss": "tab:red",
               "k2_in_loss": "tab:orange", "k3_in_loss": "tab:blue", "k3+_in_loss": "tab:green"}
    reverse_placements = [name for name in ("k1_in_reward", "k2_in_loss", "k3+_in_loss") if name in finals]
    forward_placements = [name for name in ("k3_in_loss",) if name in finals]
    fig, ax = plt.subplots(figsize=(10.5, 3.8))
    positions = _bars_with_markers(ax, series, colours, markers={
        "argmax E[R] − β KL(π‖π_ref)": (reverse_optimum, reverse_placements),
        "argmax E[R] − β KL(π_ref‖π)": (forward_optimum, forward_placements)})
    labels = [f"x={i}\nR={float(r):g}" for i, r in enumerate(torch.as_tensor(rewards))]
    ax.set_xticks(positions, labels)
    ax.set_xlabel("outcome x and its reward R")
    ax.set_ylabel("probability")
    ax.set_title("The policy each placement of the KL penalty converges to (exact gradient ascent"
                 + ("" if beta is None else f", β = {beta:g}") + ")", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def plot_sequence_placements(finals: dict[str, tuple[torch.Tensor, torch.Tensor]], *, reference, tilt, per_token,
                             first_names, second_names, second_index: int = 0, forward_each_prefix=None):
    """Where each placement leads a two-token policy (``rlbook.kl_sequence``): π(y₁) for every first
    token, then π(y₂ = ``second_names[second_index]`` | y₁) for every prefix, per placement.

    ``finals`` maps a placement to (π(y₁), π(y₂ | y₁)); ``reference``, ``tilt`` and ``per_token`` are
    the same pair for π_ref, the sequence tilt (×, over k1 in the reward) and the per-token tilt (○, over
    the placements whose expected gradient is the partial one); ``forward_each_prefix`` (optional), the
    forward-KL optimum of every prefix (◇, over k3 in the loss, ``rlbook.kl_sequence.per_token_forward_optimum``).
    """
    def flatten(pair):
        first, second = (torch.as_tensor(t) for t in pair)
        return torch.cat([first, second[:, second_index]])

    series = {"π_ref": flatten(reference), **{name: flatten(pair) for name, pair in finals.items()}}
    colours = {"π_ref": "0.6", "k1_in_reward": "tab:purple", "k1_own_token": "tab:pink", "k2_in_loss": "tab:orange",
               "k3+_in_loss": "tab:green", "k3_ratio_in_loss": "tab:olive", "k3_in_loss": "tab:blue"}
    partial = [name for name in ("k1_own_token", "k2_in_loss", "k3+_in_loss", "k3_ratio_in_loss") if name in finals]
    fig, ax = plt.subplots(figsize=(10.5, 3.8))
    positions = _bars_with_markers(ax, series, colours, markers={
        "sequence tilt  π_ref(y)·e^{R(y)/β}/Z": (flatten(tilt), [n for n in ("k1_in_reward",) if n in finals]),
        "per-token tilt  (first token ∝ π_ref·e^{V/β})": (flatten(per_token), partial),
        **({} if forward_each_prefix is None else {"forward-KL optimum of each prefix": (
            flatten(forward_each_prefix), [n for n in ("k3_in_loss",) if n in finals])})})
    shown = second_names[second_index]
    labels = [f"π(y₁ = {name})" for name in first_names] + [f"π(y₂ = {shown} | {name})" for name in first_names]
    ax.set_xticks(positions, labels)
    ax.axvline(len(first_names) - 0.5, color="0.5", lw=0.8)
    ax.set_ylabel("probability")
    ax.set_title("Two tokens: the policy each placement converges to (exact gradient ascent)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def plot_optima_at_beta(ref_probs, rewards, toy, *, beta: float):
    """§6's and §7's closed-form optima at one β, side by side, with what separates them in the titles.

    Left, one token (``ref_probs``, ``rewards``): π_ref, the tilt π_ref·e^{R/β}/Z (where k1 in the reward,
    k2, k3+ and ρk3 in the loss converge: ``rlbook.toys.reverse_kl_optimum``) and the forward-KL optimum
    βπ_ref/(λ − R) (k3 in the loss: ``forward_kl_optimum``); the title gives the reverse KL each would log,
    the forward optimum's excess over the tilt's, and the total variation between the two.
    Right, the two-token ``toy`` (``rlbook.kl_sequence.TwoTokenToy``): π(y₁) and π(y₂ = first option | y₁)
    for π_ref, the sequence tilt (k1 in the reward, credited forward), the per-token tilt (every per-token
    reverse-KL term) and the forward-KL optimum of each prefix (k3 in the loss); the title gives each one's
    E[R] − β·KL(π‖π_ref), the objective the penalty is meant to serve, and π(y₁ = the second option,
    "hard" in the lesson) with the per-token tilt's multiple of the sequence tilt's. Every number is closed form.
    """
    from rlbook import kl_sequence

    if not beta > 0:
        raise ValueError(f"beta must be positive, got {beta!r}")
    ref_probs = torch.as_tensor(ref_probs, dtype=torch.float64)
    rewards = torch.as_tensor(rewards, dtype=torch.float64)
    tilt = reverse_kl_optimum(ref_probs, rewards, beta=beta)
    forward = forward_kl_optimum(ref_probs, rewards, beta=beta)
    logged = {name: float(reverse_kl(p.log(), ref_probs)) for name, p in (("tilt", tilt), ("forward", forward))}
    tv = 0.5 * float((tilt - forward).abs().sum())
    pairs = {"sequence tilt": kl_sequence.sequence_tilt(toy, beta=beta),
             "per-token tilt": kl_sequence.per_token_tilt(toy, beta=beta),
             "forward, each prefix": kl_sequence.per_token_forward_optimum(toy, beta=beta)}
    scores = {name: kl_sequence.sequence_objective(toy, *pair, beta=beta) for name, pair in pairs.items()}

    def flatten(pair):
        first, second = (torch.as_tensor(t) for t in pair)
        return torch.cat([first, second[:, 0]])

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.9), gridspec_kw={"width_ratios": (5, 4)})
    one = {"π_ref": ref_probs, "tilt (k1 in reward, k2, k3+, ρk3)": tilt, "forward optimum (k3 in loss)": forward}
    _grouped_bars(left, one, ("0.6", "tab:purple", "tab:blue"))
    left.set_xticks(np.arange(len(rewards)), [f"x={i}\nR={float(r):g}" for i, r in enumerate(rewards)])
    left.set_ylabel("probability")
    left.set_title(f"one token, β = {beta:.3g}: logged KL(π‖π_ref) {logged['tilt']:.3f} (tilt) vs "
                   f"{logged['forward']:.3f} ({logged['forward'] / logged['tilt'] - 1:+.0%});\n"
                   f"total variation between them {tv:.3f}", fontsize=9)
    left.legend(fontsize=7.5, loc="upper left")
    two = {"π_ref": flatten((toy.ref_first, toy.ref_second)), **{name: flatten(pair) for name, pair in pairs.items()}}
    _grouped_bars(right, two, ("0.6", "tab:purple", "tab:orange", "tab:blue"))
    right.set_xticks(np.arange(4), ["π(y₁ = easy)", "π(y₁ = hard)", "π(right | easy)", "π(right | hard)"], fontsize=8)
    right.axvline(1.5, color="0.5", lw=0.8)
    right.set_ylim(0, 1.18)
    hard = {name: float(torch.as_tensor(pair[0])[1]) for name, pair in pairs.items()}
    right.set_title("two tokens: E[R] − β·KL  " + " / ".join(f"{scores[n]:.3f}" for n in pairs)
                    + "\n(sequence tilt / per-token tilt / forward, each prefix); π(hard) "
                    + " / ".join(f"{hard[n]:.3f}" for n in pairs)
                    + f" (per-token ×{hard['per-token tilt'] / hard['sequence tilt']:.1f})", fontsize=9)
    right.legend(fontsize=7.5, loc="upper left", ncol=2)
    fig.tight_layout()
    return fig


def optima_beta_widget(ref_probs, rewards, toy, *, beta: float = 0.25):
    """β (log scale, 0.05 to 8) as the knob of ``plot_optima_at_beta``: how far the tilt and k3-in-the-loss's
    forward-KL optimum part, and the per-token tilt from the sequence tilt, as the penalty's price moves."""
    import ipywidgets as widgets

    def draw(beta):
        plot_optima_at_beta(ref_probs, rewards, toy, beta=beta)
        plt.show()  # inside the interact's output: ipywidgets' own flush misses matplotlib's "inline" backend

    return widgets.interact(draw, beta=widgets.FloatLogSlider(value=beta, base=10, min=np.log10(0.05), max=np.log10(8.0),
                                                              step=0.01, description="β"))


def _grouped_bars(ax, series: dict, colours):
    """One group of bars per index, one bar per entry of ``series`` (label → (K,) tensor), in ``colours``."""
    width = 0.8 / len(series)
    positions = np.arange(len(next(iter(series.values()))))
    for i, ((name, values), colour) in enumerate(zip(series.items(), colours)):
        ax.bar(positions + (i - (len(series) - 1) / 2) * width, torch.as_tensor(values).numpy(), width,
               color=colour, label=name)


def plot_kl_gradient_variance(lengths, variances: dict[str, dict[str, list[float]]], *, labels: dict[str, str],
                              colours: dict[str, str] | None = None):
    """Variance of one response's KL gradient against the length T, log–log, one panel per policy.

    ``variances`` maps a panel title (a policy) to {credit: variance at each of ``lengths``}, as
    ``rlbook.kl_sequence.chain_gradient_moments`` returns them; ``labels`` names each credit. Dotted
    guides of slope 1, 2 and 3 start from the smallest curve's first point, so a credit's growth in T
    (T, T², T³) reads off as the guide it runs beside. ``colours`` (credit → matplotlib colour, optional)
    lets a lesson keep one colour per placement across its figures; unnamed credits take the default cycle.
    """
    colours = colours or {}
    lengths = np.asarray(lengths, dtype=float)
    if lengths.ndim != 1 or len(lengths) < 2 or (lengths <= 0).any():
        raise ValueError(f"lengths must be at least two positive numbers, got {lengths!r}")
    if not variances:
        raise ValueError("variances must map at least one policy to its credits' variances")
    fig, axes = plt.subplots(1, len(variances), figsize=(5.0 * len(variances), 3.6), squeeze=False)
    for ax, (title, by_credit) in zip(axes[0], variances.items()):
        for credit, values in by_credit.items():
            values = np.asarray(values, dtype=float)
            if values.shape != lengths.shape:
                raise ValueError(f"variances[{title!r}][{credit!r}] must have one value per length, got {values.shape}")
            ax.loglog(lengths, values, marker="o", markersize=3, label=labels.get(credit, credit), color=colours.get(credit))
        start = min(float(np.asarray(v, dtype=float)[0]) for v in by_credit.values())
        for power in (1, 2, 3):
            ax.loglog(lengths, start * (lengths / lengths[0]) ** power, ":", color="0.35", linewidth=1.0)
            ax.annotate(f"guide ∝ T{'' if power == 1 else '²³'[power - 2]}",
                        (lengths[-1], start * (lengths[-1] / lengths[0]) ** power), xytext=(-6, -2),
                        textcoords="offset points", fontsize=9.5, color="0.2", ha="right", va="top",  # below the end: not clipped
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("response length T (tokens)")
        ax.set_ylabel("variance of one response's KL gradient")
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def _bars_with_markers(ax, series: dict, colours: dict, *, markers: dict):
    """Grouped bars, one group per index and one bar per entry of ``series`` (label → (K,) tensor);
    then the ``markers`` (label → ((K,) tensor, [names of the series it predicts]), at most three) as a
    cross, a ring and a diamond, drawn over each bar they predict. Returns the group positions."""
    if len(markers) > 3:
        raise ValueError(f"markers must name at most three predictions (cross, ring, diamond), got {len(markers)}")
    positions = np.arange(len(next(iter(series.values()))))
    width = 0.8 / len(series)
    offsets = {name: (i - (len(series) - 1) / 2) * width for i, name in enumerate(series)}
    for name, values in series.items():
        ax.bar(positions + offsets[name], torch.as_tensor(values).numpy(), width, color=colours.get(name), label=name)
    for (label, (values, predicted)), style in zip(markers.items(), (
            dict(marker="x", color="black", ms=10, mew=2),
            dict(marker="o", mfc="none", mec="black", ms=11, mew=1.5),
            dict(marker="D", mfc="none", mec="black", ms=9, mew=1.5))):
        for i, name in enumerate(predicted):
            ax.plot(positions + offsets[name], torch.as_tensor(values).numpy(), ls="none",
                    label=label if i == 0 else None, **style)
    return positions


def plot_token_tails(log_ratio, exact_kl, *, description: str = ""):
    """k3 over a language model's sampled tokens: its per-token histogram, and who carries its sum.

    ``log_ratio`` = log r = ref_logp − logp and ``exact_kl`` (the exact KL at the token's position) are
    1-D tensors, one entry per sampled token (``rlbook.probes.tempered_token_log_ratios``, masked).
    Left: the histogram of k3 = r − 1 − log r on log-spaced bins (log counts; values below the 0.1 %
    quantile are counted in the first bin), with its median, its mean
    and the mean exact KL as vertical lines. Right: the share of the total carried by the largest
    tokens, against the fraction of tokens taken (largest first, log x), for k3 and for the exact
    per-position KL of the same tokens: the KL both estimate, and how concentrated each is.
    """
    log_ratio = torch.as_tensor(log_ratio, dtype=torch.float64)
    exact_kl = torch.as_tensor(exact_kl, dtype=torch.float64)
    k3_values = (torch.expm1(log_ratio) - log_ratio).numpy()
    exact = exact_kl.numpy()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.9))
    floor = max(float(np.quantile(k3_values, 0.001)), 1e-12)
    bins = np.logspace(np.log10(floor), np.log10(k3_values.max() * 1.05), 61)
    left.hist(np.clip(k3_values, floor, None), bins=bins, color="tab:blue", alpha=0.75)
    left.set_xscale("log")
    left.set_yscale("log")
    for value, style, label in ((np.median(k3_values), ":", "median of k3"), (k3_values.mean(), "-", "mean of k3"),
                                (exact.mean(), "--", "mean exact KL")):
        left.axvline(value, color="k", ls=style, lw=1.2, label=f"{label} {value:.3g}")
    left.set_xlabel("k3 = r − 1 − log r of one token (nats, log scale)")
    left.set_ylabel("tokens (log scale)")
    left.set_title("k3 per sampled token", fontsize=9)
    left.legend(fontsize=8, loc="upper right")
    fraction = np.arange(1, k3_values.size + 1) / k3_values.size
    for values, colour, label in ((k3_values, "tab:blue", "k3 (the sampled estimate)"),
                                  (exact, "tab:gray", "exact KL at the token's position")):
        ordered = np.sort(values)[::-1]
        right.plot(fraction, np.cumsum(ordered) / ordered.sum(), color=colour, lw=2, label=label)
    right.axvline(0.01, color="0.5", ls=":", lw=1)
    right.set_xscale("log")
    right.set_ylim(0, 1.02)
    right.set_xlabel("fraction of tokens, largest first (log scale)")
    right.set_ylabel("share of the sum over all tokens")
    right.set_title("who carries the sum", fontsize=9)
    right.legend(fontsize=8, loc="lower right")
    if description:
        fig.suptitle(description, fontsize=9)
    fig.tight_layout()
    return fig
