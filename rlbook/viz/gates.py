"""Figures and widgets for lesson 13: SAPO's soft gate and CISPO's clipped IS weight vs PPO's hard clip.

Every method of the lesson multiplies A · ∇_θ log π_θ(y_t) by a coefficient w(r_t); the figures
draw w as ``rlbook.token_gradients.gradient_coefficient`` reads it off the library's own
``policy_loss`` by autograd, so the pictures show exactly the loss the trainers minimise. Every
function draws a new figure and returns it; end a notebook line with ``;``.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from rlbook._checks import as_float_tensor, check_positive
from rlbook._figures import COLUMN_IN
from rlbook.token_gradients import gradient_coefficient

__all__ = [
    "gate_weight",
    "half_weight_distance",
    "gate_readout",
    "plot_gate_weights",
    "gate_widget",
    "plot_token_coefficients",
]

COLOURS = {"importance sampling": "0.55", "ppo": "tab:blue", "sapo": "tab:orange", "cispo": "tab:green"}


def gate_weight(ratio, tau: float) -> torch.Tensor:
    """SAPO's gate weight g(r) = sech²(τ(r − 1)/2) = 4σ(τ(r−1))(1 − σ(τ(r−1))) at one temperature
    (Gao et al. 2025, arXiv:2511.20347: g is the derivative f'(r) of the gate f(r) = σ(τ(r − 1))·4/τ).

    A closed form for the readouts; the curves themselves come from ``policy_loss`` by autograd."""
    ratio = as_float_tensor("ratio", ratio).to(torch.float64)
    tau = check_positive("tau", tau)
    return torch.cosh(tau * (ratio - 1) / 2) ** -2


def half_weight_distance(tau: float) -> float:
    """|r − 1| at which SAPO's gate weight g falls to ½: sech²(τ·d/2) = ½ ⇔ d = 2·arcosh(√2)/τ ≈ 1.763/τ."""
    tau = check_positive("tau", tau)
    return 2 * math.acosh(math.sqrt(2)) / tau


def gate_readout(tau_pos: float = 1.0, tau_neg: float = 1.05, *, eps: float = 0.2) -> str:
    """One line per sign of A: SAPO's g at PPO's band edges 1 ± ε, at r = 2, and the r where g = ½."""
    eps = check_positive("eps", eps)
    lines = []
    for sign, tau in (("A > 0", tau_pos), ("A < 0", tau_neg)):
        edges = gate_weight(torch.tensor([1 - eps, 1 + eps, 2.0]), tau).tolist()
        half = half_weight_distance(tau)
        lines.append(f"{sign}, τ = {tau:.3g}: g(1±ε) = {edges[1]:.3f}, g(2) = {edges[2]:.3f}, "
                     f"g = ½ at |r − 1| = {half:.3g}")
    return "\n".join(lines)


def plot_gate_weights(tau_pos: float = 1.0, tau_neg: float = 1.05, *, eps: float = 0.2, cispo_eps_high: float = 4.0,
                      r_max: float = 6.0):
    """SAPO's gate and the gradient coefficient w(r) of PPO, SAPO and CISPO, for A > 0 and A < 0.

    Left: SAPO's gate weight w(r)/r = 4σ(τ(r−1))(1 − σ(τ(r−1))) for τ_pos and τ_neg, against PPO's
    hard 0/1, with a readout of g at PPO's band edges and the half-weight points (``gate_readout``).
    Middle and right: the coefficient w(r) itself for A > 0 and A < 0, with the plain
    importance-sampled gradient (w = r) dotted and CISPO's capped weight (cap 1 + ``cispo_eps_high``)
    drawn wide and pale underneath, so that where it coincides with PPO's w = r both stay visible.
    PPO's band edges 1 ± ε are dashed in every panel.
    """
    tau_pos, tau_neg = check_positive("tau_pos", tau_pos), check_positive("tau_neg", tau_neg)
    eps, cispo_eps_high = check_positive("eps", eps), check_positive("cispo_eps_high", cispo_eps_high)
    r_max = check_positive("r_max", r_max)
    ratio = torch.linspace(0.02, r_max, 400, dtype=torch.float64)
    knobs = {"ppo": {"eps_low": eps, "eps_high": eps}, "sapo": {"tau_pos": tau_pos, "tau_neg": tau_neg},
             "cispo": {"eps_high": cispo_eps_high}}
    fig, (ax_gate, *ax_signs) = plt.subplots(1, 3, figsize=(COLUMN_IN, 4.3))  # fits the book's column
    for sign, tau, style in ((+1, tau_pos, "-"), (-1, tau_neg, "--")):
        sapo = gradient_coefficient(ratio, sign, variant="sapo", **knobs["sapo"]) / ratio
        ppo = gradient_coefficient(ratio, sign, variant="ppo", **knobs["ppo"]) / ratio
        ax_gate.plot(ratio, sapo, style, color=COLOURS["sapo"], label=f"SAPO, A {'>' if sign > 0 else '<'} 0, τ = {tau:.3g}")
        ax_gate.plot(ratio, ppo, style, color=COLOURS["ppo"], lw=1, label=f"PPO, A {'>' if sign > 0 else '<'} 0")
    ax_gate.set(xlabel="ratio r", ylabel="w(r) / r", ylim=(-0.05, 1.1))
    ax_gate.set_title("gate weight g = w/r: 1 at r = 1,\nsmooth (SAPO) or hard (PPO)", fontsize=10)
    cap = 1 + cispo_eps_high
    for ax, sign in zip(ax_signs, (+1, -1)):
        ax.plot(ratio, gradient_coefficient(ratio, sign, variant="cispo", **knobs["cispo"]), color=COLOURS["cispo"],
                lw=5, alpha=0.4, solid_capstyle="butt", label=f"CISPO, weight capped at {cap:.3g}")
        ax.plot(ratio, ratio, ":", color=COLOURS["importance sampling"], label="importance sampling, w = r")
        for variant in ("ppo", "sapo"):
            coefficient = gradient_coefficient(ratio, sign, variant=variant, **knobs[variant])
            ax.plot(ratio, coefficient, color=COLOURS[variant], lw=1.4, label=variant.upper())
        ax.set(xlabel="ratio r", ylabel="gradient coefficient w(r)", ylim=(-0.1, r_max + 0.1))
        ax.set_title(f"A {'> 0' if sign > 0 else '< 0'}:\n∇J = w(r) · A · ∇log π", fontsize=10)
    for ax in (ax_gate, *ax_signs):
        ax.axvline(1, color="black", lw=0.6)
        for edge in (1 - eps, 1 + eps):
            ax.axvline(edge, color=COLOURS["ppo"], lw=0.7, ls=(0, (4, 3)), alpha=0.7)
        ax.grid(alpha=0.3)
    ax_gate.legend(fontsize=8, loc="upper right")
    for ax in ax_signs:
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout(rect=(0, 0.11, 1, 1))
    fig.text(0.01, 0.01, "SAPO's gate weight g:\n" + gate_readout(tau_pos, tau_neg, eps=eps), fontsize=8.5,
             family="monospace")
    return fig


def gate_widget(**kwargs):
    """SAPO's τ_pos and τ_neg, PPO's ε and CISPO's cap as knobs of ``plot_gate_weights`` (an
    ``ipywidgets.interact``); the left panel's readout gives g at 1 ± ε and the half-weight points."""
    import ipywidgets as widgets

    def draw(tau_pos, tau_neg, eps, cispo_cap):
        plot_gate_weights(tau_pos, tau_neg, eps=eps, cispo_eps_high=cispo_cap - 1, **kwargs)
        plt.show()

    return widgets.interact(
        draw,
        tau_pos=widgets.FloatLogSlider(value=1.0, base=2, min=-2, max=5, step=0.01, description="τ_pos",
                                       readout_format=".3g"),
        tau_neg=widgets.FloatLogSlider(value=1.05, base=2, min=-2, max=5, step=0.01, description="τ_neg",
                                       readout_format=".3g"),
        eps=widgets.FloatSlider(value=0.2, min=0.05, max=0.5, step=0.05, description="PPO's ε"),
        cispo_cap=widgets.FloatSlider(value=1.2, min=1.05, max=6.0, step=0.05, description="CISPO cap"),
    )


def _leading_digit(value: float) -> int:
    """The first significant digit of a positive number: 2 for 0.2, 20 and 2."""
    return int(round(value / 10 ** math.floor(math.log10(value)), 6)) if value > 0 else 0


def _plain_tick(value: float, *_) -> str:
    return f"{value:g}"


def plot_token_coefficients(ratio, advantages, coefficients: dict[str, torch.Tensor], *, eps: float = 0.2):
    """The real tokens of a batch: gradient coefficient w against ratio r, one panel per sign of A.

    ``ratio`` and ``advantages`` are 1-D over the tokens shown (A ≠ 0); ``coefficients`` maps a
    method to its w per token. Tokens a method gives exactly zero gradient are ringed; PPO's band
    edges 1 ± ``eps`` are dashed, so the rings can be seen to lie outside the band. A ring that holds
    several tokens at one ratio is marked ×n, so the legend's count can be read off the rings.
    """
    from matplotlib.ticker import FuncFormatter

    eps = check_positive("eps", eps)
    ratio = as_float_tensor("ratio", ratio, ndim=(1,)).numpy()
    advantages = as_float_tensor("advantages", advantages, ndim=(1,)).numpy()
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_IN, 3.6))
    for ax, positive in zip(axes, (True, False)):
        rows = advantages > 0 if positive else advantages < 0
        for name, coefficient in coefficients.items():
            values = as_float_tensor(name, coefficient, ndim=(1,)).numpy()[rows]
            zero = values == 0
            ax.scatter(ratio[rows][~zero], values[~zero], s=10, alpha=0.6, color=COLOURS.get(name),
                       label=f"{name.upper()}: {int(zero.sum())} tokens with zero gradient")
            ax.scatter(ratio[rows][zero], values[zero], s=60, facecolors="none", edgecolors=COLOURS.get(name))
            # tokens often share a ratio (the same token in several responses): say how many each ring holds
            ring_ratios, ring_counts = np.unique(np.round(np.log(ratio[rows][zero]), 1), return_counts=True)
            crowded = [(log_ratio, count) for log_ratio, count in zip(ring_ratios, ring_counts) if count > 1]
            for k, (log_ratio, count) in enumerate(crowded):  # staggered in height, so neighbours do not overprint
                ax.annotate(f"×{count}", (np.exp(log_ratio), 0.0), xytext=(0, 7 + 9 * (k % 3)),
                            textcoords="offset points", fontsize=7, ha="center", color=COLOURS.get(name))
        ax.set(xscale="log", xlabel="token ratio r_t (log scale)", ylabel="gradient coefficient w")
        ax.set_title(f"{int(rows.sum())} tokens with A {'> 0' if positive else '< 0'}", fontsize=10)
        ax.axvline(1, color="black", lw=0.6)
        for edge in (1 - eps, 1 + eps):
            ax.axvline(edge, color=COLOURS["ppo"], lw=0.8, ls=(0, (4, 3)))
        # the edge labels sit under the points (zorder 0.5), so a token at the band's edge stays visible
        label_box = dict(facecolor="white", alpha=0.6, lw=0, pad=1)
        ax.text(1 + eps, 0.97, f" 1 + ε = {1 + eps:g}", transform=ax.get_xaxis_transform(), fontsize=7, va="top",
                bbox=label_box, zorder=0.5)
        ax.text(1 - eps, 0.97, f"1 − ε = {1 - eps:g} ", transform=ax.get_xaxis_transform(), fontsize=7, va="top",
                ha="right", bbox=label_box, zorder=0.5)
        ax.xaxis.set_major_formatter(FuncFormatter(_plain_tick))  # 0.001, 0.5, 2 rather than 10⁻³, 5×10⁻¹
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda value, _: _plain_tick(value) if _leading_digit(value) in (2, 5)
                                                   else ""))
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7.5)
    fig.tight_layout()
    return fig



def plot_seed_pairs(values, baseline: str, *, ylabel: str = "held-out pass@1"):
    """One dot per seed for each configuration, joined by a line to the baseline's run with the same seed.

    ``values`` is a DataFrame, one row per configuration (``baseline`` among them) and one column per
    seed. Each other configuration gets a pair of columns (baseline, it); a seed's line slopes down
    where that configuration ended below the baseline's run with the same seed. Lines that cross
    show a pairing that does not hold (the seed's two runs do not rise and fall together).
    """
    import pandas as pd

    if not isinstance(values, pd.DataFrame) or baseline not in values.index:
        raise ValueError(f"values must be a DataFrame with a row {baseline!r}")
    others = [label for label in values.index if label != baseline]
    if not others:
        raise ValueError("values needs at least one configuration besides the baseline")
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 3.4))
    seed_colours = plt.get_cmap("tab10")
    ticks, tick_labels = [], []
    for k, label in enumerate(others):
        left, right = 3 * k, 3 * k + 1
        for s, column in enumerate(values.columns):
            pair = [float(values.loc[baseline, column]), float(values.loc[label, column])]
            ax.plot([left, right], pair, "-o", color=seed_colours(s % 10), ms=4, lw=1,
                    label=str(column) if k == 0 else None)
        ticks += [left, right]
        tick_labels += [baseline, label]
    ax.set_xticks(ticks, tick_labels, fontsize=8, rotation=30, ha="right")
    ax.set(ylabel=ylabel, xlabel="configuration, next to the baseline's runs with the same seeds")
    ax.set_title(f"each seed against {baseline}'s run with the same seed", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7.5, loc="lower left")
    fig.tight_layout()
    return fig
