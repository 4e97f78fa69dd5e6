"""Figures and widgets for lesson 02: the KL estimators k1, k2, k3 and where a KL penalty goes.

Every function draws a new figure and returns it; end a notebook line with ``;`` so Jupyter shows
it once. ``kl_estimator_widget`` wraps ``plot_kl_estimator_histograms`` in ``ipywidgets.interact``.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from rlbook.toys import gaussian_kl, kl_estimator_table_exact, sample_kl_estimates

__all__ = [
    "ESTIMATOR_COLOURS",
    "plot_kl_estimator_histograms",
    "kl_estimator_widget",
    "plot_kl_estimator_table",
    "plot_expected_gradients",
    "plot_placement_outcomes",
]

ESTIMATOR_COLOURS = {"k1": "tab:red", "k2": "tab:orange", "k3": "tab:blue"}


def plot_kl_estimator_histograms(mu: float = 1.0, sigma: float = 1.0, *, n_samples: int = 20_000, seed: int = 0):
    """Histograms of per-sample k1, k2, k3 for π_θ = N(0, 1), π_ref = N(μ, σ²), with the true KL.

    Each panel marks the true KL(π_θ ‖ π_ref) (black) and the sample mean (dashed), and its title
    gives the measured bias/true and stdev/true. The x-range shows the 0.5–99.5% quantiles of
    all three estimators, so the panels share one scale.
    """
    true_kl = gaussian_kl(0.0, 1.0, mu, sigma)
    values = {name: v.numpy() for name, v in sample_kl_estimates(mu, sigma, n_samples=n_samples, seed=seed).items()}
    everything = np.concatenate(list(values.values()))
    low, high = np.quantile(everything, [0.005, 0.995])
    low, high = min(low, 0.0, true_kl), max(high, 1.5 * true_kl)
    bins = np.linspace(low, high, 80)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), sharex=True)
    for ax, (name, v) in zip(axes, values.items()):
        ax.hist(np.clip(v, low, high), bins=bins, color=ESTIMATOR_COLOURS[name], alpha=0.75)
        ax.axvline(true_kl, color="black", lw=2, label=f"true KL = {true_kl:.4g}")
        ax.axvline(v.mean(), color="black", ls="--", lw=1.2, label=f"sample mean = {v.mean():.4g}")
        ax.set_title(f"{name}: bias/true = {(v.mean() - true_kl) / true_kl:+.3f}, "
                     f"stdev/true = {v.std() / true_kl:.2f}", fontsize=9.5)
        ax.set_yticks([])
        ax.legend(fontsize=7.5, loc="upper right")
        ax.set_xlabel("per-sample value")
    fig.suptitle(f"x ~ π_θ = N(0, 1), π_ref = N({mu:.2f}, {sigma:.2f}²), {n_samples:,} samples "
                 "(values beyond the range are piled at its edges)", fontsize=10)
    fig.tight_layout()
    return fig


def kl_estimator_widget(*, n_samples: int = 20_000, seed: int = 0):
    """μ and σ of π_ref as knobs of ``plot_kl_estimator_histograms`` (an ``ipywidgets.interact``)."""
    import ipywidgets as widgets

    def draw(mu, sigma):
        plot_kl_estimator_histograms(mu, sigma, n_samples=n_samples, seed=seed)
        plt.show()  # inside the interact's output: ipywidgets' own flush misses matplotlib's "inline" backend

    return widgets.interact(
        draw,
        mu=widgets.FloatSlider(value=0.5, min=0.05, max=3.0, step=0.05, description="μ of π_ref"),
        sigma=widgets.FloatSlider(value=1.0, min=0.5, max=2.0, step=0.05, description="σ of π_ref"),
    )


def plot_kl_estimator_table(mus=None, *, measured: dict[float, dict] | None = None):
    """bias/true and stdev/true of k1, k2, k3 against μ (π_ref = N(μ, 1)), from the closed forms.

    ``measured`` (optional) maps μ to a Monte Carlo table (``kl_estimator_table_monte_carlo``),
    drawn as points on the curves.
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
    ax_bias.set_title("bias / true KL  (k1 and k3 lie on 0)", fontsize=10)
    ax_std.set_title("stdev / true KL", fontsize=10)
    ax_std.set_yscale("log")
    for ax in (ax_bias, ax_std):
        ax.set_xscale("log")
        ax.set_xlabel("μ  (π_θ = N(0, 1), π_ref = N(μ, 1))")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    if measured:
        ax_std.plot([], [], "o", color="white", mec="black", label="measured (points)")
        ax_std.legend(fontsize=8)
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
        markers={"∇ KL(π_θ ‖ π_ref)  (reverse)": reverse, "∇ KL(π_ref ‖ π_θ)  (forward)": forward})
    ax.axhline(0, color="0.5", lw=0.8)
    k = len(positions)
    ax.set_xticks(positions, [f"θ_{i}" for i in range(k)])
    ax.set_ylabel("gradient component")
    ax.set_title("Expected gradient of each estimator, by exact enumeration (E[∇k1] = 0: no red bars)", fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def plot_placement_outcomes(ref_probs, rewards, finals: dict[str, torch.Tensor], *,
                            reverse_optimum: torch.Tensor, forward_optimum: torch.Tensor):
    """Where each KL placement leads the policy: final π_θ per placement beside π_ref and the optima.

    ``finals`` maps a placement (``rlbook.toys.KL_PLACEMENTS``) to the policy that exact gradient
    ascent converged to.
    """
    series = {"π_ref": torch.as_tensor(ref_probs), **finals}
    colours = {"π_ref": "0.6", "k1_in_reward": "tab:purple", "k1_in_loss": "tab:red",
               "k2_in_loss": "tab:orange", "k3_in_loss": "tab:blue"}
    fig, ax = plt.subplots(figsize=(10.5, 3.8))
    positions = _bars_with_markers(ax, series, colours, markers={"argmax E[R] − β KL(π‖π_ref)": reverse_optimum,
                                                                 "argmax E[R] − β KL(π_ref‖π)": forward_optimum})
    labels = [f"x={i}\nR={float(r):g}" for i, r in enumerate(torch.as_tensor(rewards))]
    ax.set_xticks(positions, labels)
    ax.set_ylabel("probability")
    ax.set_title("The policy each placement of the KL penalty converges to (exact gradient ascent)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig



def _bars_with_markers(ax, series: dict, colours: dict, *, markers: dict):
    """Grouped bars, one group per index and one bar per entry of ``series`` (label → (K,) tensor);
    then the two ``markers`` (label → (K,) tensor) as a cross and a ring. Returns the positions."""
    positions = np.arange(len(next(iter(markers.values()))))
    width = 0.8 / len(series)
    for offset, (name, values) in enumerate(series.items()):
        ax.bar(positions + (offset - (len(series) - 1) / 2) * width, torch.as_tensor(values).numpy(), width,
               color=colours.get(name), label=name)
    (cross_label, cross), (ring_label, ring) = markers.items()
    ax.plot(positions, cross.numpy(), "kx", ms=10, mew=2, label=cross_label)
    ax.plot(positions, ring.numpy(), "o", mfc="none", mec="black", ms=11, mew=1.5, label=ring_label)
    return positions
