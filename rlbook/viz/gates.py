"""Figures and widgets for lesson 13: SAPO's soft gate and CISPO's clipped IS weight vs PPO's hard clip.

Every method of the lesson multiplies A · ∇_θ log π_θ(y_t) by a coefficient w(r_t); the figures
draw w as ``rlbook.token_gradients.gradient_coefficient`` reads it off the library's own
``policy_loss`` by autograd, so the pictures show exactly the loss the trainers minimise. Every
function draws a new figure and returns it; end a notebook line with ``;``.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from rlbook._checks import as_float_tensor, check_positive
from rlbook.token_gradients import gradient_coefficient

__all__ = [
    "plot_gate_weights",
    "gate_widget",
    "plot_token_coefficients",
]

COLOURS = {"importance sampling": "0.55", "ppo": "tab:blue", "sapo": "tab:orange", "cispo": "tab:green"}


def plot_gate_weights(tau_pos: float = 1.0, tau_neg: float = 1.05, *, eps: float = 0.2, cispo_eps_high: float = 4.0,
                      r_max: float = 6.0):
    """SAPO's gate and the gradient coefficient w(r) of PPO, SAPO and CISPO, for A > 0 and A < 0.

    Left: SAPO's gate weight w(r)/r = 4σ(τ(r−1))(1 − σ(τ(r−1))) for τ_pos and τ_neg, against PPO's
    hard 0/1. Middle and right: the coefficient w(r) itself for A > 0 and A < 0, with the plain
    importance-sampled gradient (w = r) dotted.
    """
    tau_pos, tau_neg = check_positive("tau_pos", tau_pos), check_positive("tau_neg", tau_neg)
    eps, cispo_eps_high = check_positive("eps", eps), check_positive("cispo_eps_high", cispo_eps_high)
    r_max = check_positive("r_max", r_max)
    ratio = torch.linspace(0.02, r_max, 400, dtype=torch.float64)
    knobs = {"ppo": {"eps_low": eps, "eps_high": eps}, "sapo": {"tau_pos": tau_pos, "tau_neg": tau_neg},
             "cispo": {"eps_high": cispo_eps_high}}
    fig, (ax_gate, *ax_signs) = plt.subplots(1, 3, figsize=(13, 3.6))
    for sign, tau, style in ((+1, tau_pos, "-"), (-1, tau_neg, "--")):
        sapo = gradient_coefficient(ratio, sign, variant="sapo", **knobs["sapo"]) / ratio
        ppo = gradient_coefficient(ratio, sign, variant="ppo", **knobs["ppo"]) / ratio
        ax_gate.plot(ratio, sapo, style, color=COLOURS["sapo"], label=f"SAPO, A {'>' if sign > 0 else '<'} 0, τ = {tau:.3g}")
        ax_gate.plot(ratio, ppo, style, color=COLOURS["ppo"], lw=1, label=f"PPO, A {'>' if sign > 0 else '<'} 0")
    ax_gate.set(xlabel="ratio r", ylabel="w(r) / r", ylim=(-0.05, 1.1))
    ax_gate.set_title("the gate: 1 at r = 1, then a smooth (SAPO) or hard (PPO) cut", fontsize=10)
    for ax, sign in zip(ax_signs, (+1, -1)):
        ax.plot(ratio, ratio, ":", color=COLOURS["importance sampling"], label="importance sampling, w = r")
        for variant in ("ppo", "sapo", "cispo"):
            coefficient = gradient_coefficient(ratio, sign, variant=variant, **knobs[variant])
            ax.plot(ratio, coefficient, color=COLOURS[variant], label=variant.upper())
        ax.set(xlabel="ratio r", ylabel="gradient coefficient w(r)", ylim=(-0.1, r_max + 0.1))
        ax.set_title(f"A {'> 0' if sign > 0 else '< 0'}:  ∇J = w(r) · A · ∇log π", fontsize=10)
    for ax in (ax_gate, *ax_signs):
        ax.axvline(1, color="black", lw=0.6)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7.5)
    fig.tight_layout()
    return fig


def gate_widget(**kwargs):
    """τ_pos and τ_neg of SAPO as knobs of ``plot_gate_weights`` (an ``ipywidgets.interact``)."""
    import ipywidgets as widgets

    def draw(tau_pos, tau_neg):
        plot_gate_weights(tau_pos, tau_neg, **kwargs)
        plt.show()

    return widgets.interact(
        draw,
        tau_pos=widgets.FloatLogSlider(value=1.0, base=2, min=-2, max=5, step=0.25, description="τ_pos"),
        tau_neg=widgets.FloatLogSlider(value=1.05, base=2, min=-2, max=5, step=0.25, description="τ_neg"),
    )


def plot_token_coefficients(ratio, advantages, coefficients: dict[str, torch.Tensor]):
    """The real tokens of a batch: gradient coefficient w against ratio r, one panel per sign of A.

    ``ratio`` and ``advantages`` are 1-D over the tokens shown (A ≠ 0); ``coefficients`` maps a
    method to its w per token. Tokens a method gives exactly zero gradient are ringed.
    """
    ratio = as_float_tensor("ratio", ratio, ndim=(1,)).numpy()
    advantages = as_float_tensor("advantages", advantages, ndim=(1,)).numpy()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, positive in zip(axes, (True, False)):
        rows = advantages > 0 if positive else advantages < 0
        for name, coefficient in coefficients.items():
            values = as_float_tensor(name, coefficient, ndim=(1,)).numpy()[rows]
            zero = values == 0
            ax.scatter(ratio[rows][~zero], values[~zero], s=10, alpha=0.6, color=COLOURS.get(name),
                       label=f"{name.upper()}: {int(zero.sum())} tokens with zero gradient")
            ax.scatter(ratio[rows][zero], values[zero], s=60, facecolors="none", edgecolors=COLOURS.get(name))
        ax.set(xscale="log", xlabel="token ratio r_t (log scale)", ylabel="gradient coefficient w")
        ax.set_title(f"{int(rows.sum())} tokens with A {'> 0' if positive else '< 0'}", fontsize=10)
        ax.axvline(1, color="black", lw=0.6)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7.5)
    fig.tight_layout()
    return fig

