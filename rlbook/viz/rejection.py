"""Figures and widgets for lesson 05: E[max of K], the best-of-n distribution and its KL, RS-SFT rounds.

Every function draws a new figure and returns it; end a notebook line with ``;`` so Jupyter shows
it once. ``best_of_n_toy_widget`` wraps ``plot_best_of_n_toy`` in ``ipywidgets.interact``.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.lines import Line2D

from rlbook.metrics import best_of_n_distribution, best_of_n_exact_kl, best_of_n_kl
from rlbook.toys import best_of_n_efficiency, toy_policy

__all__ = ["plot_expected_max", "plot_best_of_n_toy", "best_of_n_toy_widget", "plot_kl_against_bound",
           "plot_reward_kl_frontier", "plot_verifier_reward_kl", "plot_rejection_sampling_history"]


def plot_expected_max(ks, exact, *, monte_carlo: dict | None = None):
    """E[max of K standard normals] (exact, by quadrature) against √(2 log K), and their ratio.

    ``monte_carlo`` (optional) maps K to (mean, standard error) of a sampled estimate."""
    ks, exact = np.asarray(ks, dtype=float), np.asarray(exact, dtype=float)
    bound = np.sqrt(2 * np.log(ks))
    fine = np.logspace(0, np.log10(ks.max()), 400)  # the bound is a formula: drawn smooth, not through the grid
    fig, (ax, ax_ratio) = plt.subplots(1, 2, figsize=(10.5, 3.6))
    ax.plot(fine, np.sqrt(2 * np.log(fine)), "--", color="black", label="√(2 log K)")
    ax.plot(ks, exact, color="tab:blue", lw=2, label="E[max of K] (exact)")
    if monte_carlo:
        k_mc = sorted(monte_carlo)
        ax.errorbar(k_mc, [monte_carlo[k][0] for k in k_mc], yerr=[2 * monte_carlo[k][1] for k in k_mc], fmt="o",
                    color="tab:orange", ms=4, label="Monte Carlo (± 2 s.e., within the dots)")
    ax.set(xscale="log", xlabel="K", ylabel="reward (in σ above the mean)", title="best-of-K of N(0, 1) rewards")
    ax.legend(fontsize=8)
    ratio_at = ks > 1
    ax_ratio.plot(ks[ratio_at], exact[ratio_at] / bound[ratio_at], color="tab:blue")
    ax_ratio.axhline(1.0, color="black", ls="--", lw=0.8)
    ax_ratio.set(xscale="log", xlabel="K", ylabel="E[max] / √(2 log K)", ylim=(0.4, 1.05),
                 title="the bound is approached, slowly")
    fig.tight_layout()
    return fig


def plot_best_of_n_toy(n: int = 8, temperature: float = 1.0, *, num_outcomes: int = 30,
                       reward_levels: int | None = None, seed: int = 0):
    """π and the exact best-of-``n`` distribution on ``rlbook.toys.toy_policy``, outcomes sorted by reward;
    the title compares the exact KL with log n − (n − 1)/n, and says how much of the KL-regularised
    optimum's reward gain at that KL best-of-n gets (``rlbook.toys.best_of_n_efficiency``)."""
    probs, rewards = toy_policy(num_outcomes, temperature=temperature, reward_levels=reward_levels, seed=seed)
    best = best_of_n_distribution(probs, rewards, n)
    order = torch.sort(rewards, stable=True).indices
    x = np.arange(num_outcomes)
    fig, ax = plt.subplots(figsize=(9, 3.4))
    ax.bar(x - 0.2, probs[order].numpy(), 0.4, color="lightgrey", label="π")
    ax.bar(x + 0.2, best[order].numpy(), 0.4, color="tab:blue", label=f"best-of-{n}")
    ax.set_xticks(x, [f"{r:g}" for r in rewards[order].tolist()], fontsize=7)
    ties = "" if reward_levels is None else f", {reward_levels} reward levels (ties)"
    ratio = best_of_n_efficiency(probs, rewards, [n])["ratio"][0]
    frontier = ("n = 1 is π itself" if np.isnan(ratio) else
                f"best-of-{n} gets {ratio:.1%} of the reward gain π* ∝ π·exp(r/β) gets at the same KL")
    ax.set(xlabel="outcome, labelled by its reward (sorted)", ylabel="probability",
           title=f"T = {temperature:g}{ties}: exact KL = {best_of_n_exact_kl(probs, rewards, n):.3f} "
                 f"≤ log n − (n−1)/n = {best_of_n_kl(n):.3f}\n{frontier}")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def best_of_n_toy_widget(*, num_outcomes: int = 30, seed: int = 0, draws: int = 200):
    """n, the toy policy's temperature, the number of reward levels and the toy draw (its seed, 0 …
    ``draws`` − 1: the population the lesson's table summarises) as knobs of ``plot_best_of_n_toy``."""
    import ipywidgets as widgets

    def draw(n, temperature, reward_levels, toy_draw):
        plot_best_of_n_toy(n, temperature, num_outcomes=num_outcomes,
                           reward_levels=None if reward_levels == num_outcomes else reward_levels, seed=toy_draw)
        plt.show()  # shown in the widget's output and closed: one figure per change, none left open

    return widgets.interact(
        draw,
        n=widgets.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128], value=8, description="n"),
        temperature=widgets.FloatLogSlider(value=1.0, base=10, min=-1, max=1, step=0.05, description="T of π"),
        reward_levels=widgets.IntSlider(value=num_outcomes, min=2, max=num_outcomes, description="reward levels"),
        toy_draw=widgets.IntSlider(value=seed, min=0, max=max(draws - 1, seed), description="toy draw"),
    )


def plot_kl_against_bound(ns, measured: dict[str, list[float]], *, errors: dict | None = None,
                          ceilings: dict | None = None):
    """log n − (n − 1)/n against n, with each measured KL curve of ``measured`` (label → KL per n).

    ``errors`` (label → one standard error per n) draws a ± 2 s.e. band around that curve;
    ``ceilings`` (label → a number) a dotted line, in the curve's colour, at the most its KL can reach.
    The formula is drawn wide and dashed, so that a curve on top of it leaves it visible."""
    ns = np.asarray(ns)
    errors, ceilings = errors or {}, ceilings or {}
    unknown = (set(errors) | set(ceilings)) - set(measured)
    if unknown:
        raise ValueError(f"errors and ceilings must name curves of measured, got {sorted(unknown)}")
    fig, ax = plt.subplots(figsize=(7.5, 4))
    ax.plot(ns, [best_of_n_kl(int(n)) for n in ns], "--", color="black", lw=3, alpha=0.5, label="log n − (n − 1)/n",
            zorder=3)
    for label, values in measured.items():
        (line,) = ax.plot(ns, values, "o-", ms=4, label=label)
        if label in errors:
            low = np.asarray(values) - 2 * np.asarray(errors[label])
            high = np.asarray(values) + 2 * np.asarray(errors[label])
            ax.fill_between(ns, low, high, color=line.get_color(), alpha=0.2, lw=0)
        if label in ceilings:
            ax.axhline(ceilings[label], color=line.get_color(), ls=":", lw=1.5,
                       label=f"its ceiling, {ceilings[label]:.2f}")
    ax.set(xscale="log", xlabel="n", ylabel="KL(π_best-of-n ‖ π) (nats)", title="the best-of-n KL: formula vs exact")
    ax.set_xticks(ns, [str(int(n)) for n in ns])
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_reward_kl_frontier(frontier_kl, frontier_gain, ns, best_of_n_kl_values, best_of_n_gain):
    """Reward gain against KL from π_ref: the KL-regularised optimum swept over β (a curve, the frontier
    no policy can pass) and best-of-n for each n of ``ns`` (points, labelled by n)."""
    frontier_kl, frontier_gain = np.asarray(frontier_kl, dtype=float), np.asarray(frontier_gain, dtype=float)
    best_of_n_kl_values, best_of_n_gain = np.asarray(best_of_n_kl_values, dtype=float), np.asarray(best_of_n_gain,
                                                                                                    dtype=float)
    points_match = best_of_n_kl_values.shape == best_of_n_gain.shape == (len(ns),)
    if frontier_kl.shape != frontier_gain.shape or not points_match:
        raise ValueError("frontier_kl and frontier_gain, and ns, best_of_n_kl_values and best_of_n_gain, must match")
    fig, ax = plt.subplots(figsize=(7.5, 4))
    order = np.argsort(frontier_kl)
    ax.plot(frontier_kl[order], frontier_gain[order], color="tab:purple", lw=2,
            label="π* ∝ π_ref · exp(r/β), β swept (the optimum)")
    ax.plot(best_of_n_kl_values, best_of_n_gain, "o", color="tab:blue", label="best-of-n (exact)")
    span = max(float(np.ptp(frontier_kl)), 1e-12)
    below = True
    for index, (n, x, y) in enumerate(zip(ns, best_of_n_kl_values, best_of_n_gain)):
        crowded = index > 0 and abs(x - best_of_n_kl_values[index - 1]) < 0.08 * span
        below = not below if crowded else True  # a point close to the last one is labelled on the other side
        ax.annotate(f"n={n}", (x, y), textcoords="offset points", xytext=(5, -11) if below else (-8, 6), fontsize=8)
    ax.set(xlabel="KL(π ‖ π_ref) (nats)", ylabel=r"$E_\pi[r] - E_{\pi_\mathrm{ref}}[r]$",
           title="reward bought per nat: best-of-n against the KL-regularised optimum")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def seed_colour(seed) -> str:
    """The colour of one seed in every figure of the lesson (matplotlib's cycle, C0 for seed 0, …), so
    that a reader who learns "orange is seed 1" in one figure can read the next with it."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return f"C{int(seed) % 10}"


def plot_verifier_reward_kl(frontier_kl, frontier_success, ns, best_of_n_kl_values, best_of_n_success, *,
                            ceiling: tuple[float, float] | None = None, tuned: dict | None = None,
                            colours: dict | None = None, markers: dict | None = None):
    """Mean success against mean KL from the base over a set of prompts under a 0/1 verifier.

    The curve is the frontier of one shared β (``rlbook.toys.verifier_frontier``); the points (black)
    are best-of-n of the base for each n of ``ns`` (the success of its one answer, 1 − (1 − p)^n); ``ceiling`` (KL, success) marks π conditioned on
    success (n → ∞); ``tuned`` maps a label to (KL, its s.e., success, its s.e.) of a trained policy,
    drawn with ± 2 s.e. bars in both directions, in ``colours[label]`` (default: ``seed_colour`` of its
    position, the colours of ``plot_rejection_sampling_history``) and ``markers[label]`` (default a diamond),
    so that two recipes of one seed share its colour and differ in their marker."""
    frontier_kl, frontier_success = np.asarray(frontier_kl, dtype=float), np.asarray(frontier_success, dtype=float)
    best_of_n_kl_values = np.asarray(best_of_n_kl_values, dtype=float)
    best_of_n_success = np.asarray(best_of_n_success, dtype=float)
    if frontier_kl.shape != frontier_success.shape or not (best_of_n_kl_values.shape == best_of_n_success.shape
                                                            == (len(ns),)):
        raise ValueError("frontier_kl and frontier_success, and ns, best_of_n_kl_values and best_of_n_success, "
                         "must match")
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    order = np.argsort(frontier_kl)
    ax.plot(frontier_kl[order], frontier_success[order], color="tab:purple", lw=2,
            label="π* ∝ π_base · exp(r/β), one β for every prompt (the frontier)")
    ax.plot(best_of_n_kl_values, best_of_n_success, "o", color="black", ms=5, label="best-of-n of the base (plug-in p̂)")
    span, last = max(float(np.ptp(np.concatenate([frontier_kl, best_of_n_kl_values]))), 1e-12), -np.inf
    # tuned points (and their error bars) that an "n=" label must not cover
    occupied = [(kl, success) for kl, _, success, _ in (tuned or {}).values()]
    for n, x, y in zip(ns, best_of_n_kl_values, best_of_n_success):
        near_star = ceiling is not None and abs(x - ceiling[0]) < 0.06 * span
        near_tuned = any(abs(x - kx) < 0.12 * span and abs(y - ky) < 0.08 for kx, ky in occupied)
        if x - last > 0.04 * span:  # a point crowded onto the last labelled one stays unlabelled
            # a label next to the star would sit under it: put it to the left, above the point; one next to a
            # tuned point goes below-left, under the black point, where no tuned point sits
            offset = (-26, 5) if near_star else (-22, -14) if near_tuned else (4, -11)
            ax.annotate(f"n={n}", (x, y), textcoords="offset points", xytext=offset, fontsize=7)
            last = x
    if ceiling is not None:
        ax.plot(*ceiling, "*", ms=12, color="tab:purple", label="π_base conditioned on success (n → ∞)")
    colours = dict(colours or {})
    markers = dict(markers or {})
    for name, given in (("colours", colours), ("markers", markers)):
        if set(given) - set(tuned or {}):
            raise ValueError(f"{name} must name labels of tuned, got {sorted(set(given) - set(tuned or {}))}")
    handles, labels = ax.get_legend_handles_labels()
    for index, (label, (kl, kl_se, success, success_se)) in enumerate((tuned or {}).items()):
        colour, marker = colours.get(label, seed_colour(index)), markers.get(label, "D")
        ax.errorbar([kl], [success], xerr=[2 * kl_se], yerr=[2 * success_se], fmt=marker, ms=6, capsize=3, color=colour)
        if not label.startswith("_"):  # a marker-only handle, large enough to tell ◇ / ○ / □ apart
            handles.append(Line2D([], [], ls="none", marker=marker, ms=8, color=colour))
            labels.append(label)
    ax.set(xlabel="mean KL from the base (nats)", ylabel="mean success of one answer of each policy", ylim=(0, 1.05),
           title="under a 0/1 verifier: success bought per nat of KL\n(tuned policies: ± 2 s.e. in both directions)")
    ax.title.set_fontsize(10)
    # the legend sits under the axes, off the data, so that no point is hidden behind it
    ax.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    fig.set_size_inches(7.5, 4.2 + 0.22 * ((len(labels) + 1) // 2))
    fig.tight_layout()
    return fig


def plot_rejection_sampling_history(history):
    """Held-out pass@1 per round of ``rejection_sampling_finetune``, with the sampled and best-of-n rewards.

    ``history``: a ``History`` or a frame of its rows; with a ``seed`` column, one line per seed. Where
    the rows log ``eval/pass@1_se`` (the standard error clustered by prompt), pass@1 gets ± 2 s.e. bars."""
    frame = history.to_pandas() if hasattr(history, "to_pandas") else history
    runs = list(frame.groupby("seed")) if "seed" in frame else [(None, frame)]
    fig, (ax_pass, ax_reward) = plt.subplots(1, 2, figsize=(10, 3.8))
    for index, (seed, run) in enumerate(runs):
        shift = 0.06 * (index - (len(runs) - 1) / 2)  # side by side, so that the error bars do not overlap
        suffix = "" if seed is None else f" (seed {seed})"
        colour = seed_colour(index if seed is None else int(seed))   # one colour per seed, in every figure
        errors = 2 * run["eval/pass@1_se"].to_numpy(float) if "eval/pass@1_se" in run else None
        ax_pass.errorbar(run["round"].to_numpy(float) + shift, run["eval/pass@1"].to_numpy(float), yerr=errors, fmt="o-", lw=2, ms=4, capsize=3,
                         color=colour, label=f"held-out pass@1{suffix}")
        trained = run.dropna(subset=["sample_reward"])
        ax_reward.plot(trained["round"], trained["sample_reward"], "o--", color=colour, alpha=0.7,
                       label=f"mean sampled reward{suffix}")
        ax_reward.plot(trained["round"], trained["best_of_n_reward"], "s-", color=colour,
                       label=f"best-of-n reward{suffix}")
    bars = "\n(bars: ± 2 s.e., clustered by prompt)" if "eval/pass@1_se" in frame else ""
    ax_pass.set(xlabel="round (0 = before training)", ylabel="held-out pass@1", ylim=(0, 1),
                title="rejection-sampling SFT, round by round" + bars)
    ax_pass.title.set_fontsize(10)
    ax_pass.set_xticks(sorted(frame["round"].unique()))
    ax_pass.legend(fontsize=7, loc="lower right")
    ax_reward.set(xlabel="round (sampled before its SFT)", ylabel="training reward", ylim=(0, 1.05),
                  title="what each round distils\n(dashed: a plain sample; solid: the best of n)")
    ax_reward.title.set_fontsize(10)
    ax_reward.set_xticks(sorted(frame.dropna(subset=["sample_reward"])["round"].unique()))
    ax_reward.legend(fontsize=7, loc="lower right", ncol=1 if len(runs) < 2 else 2)
    fig.tight_layout()
    return fig
