"""Checker for the exercise of lesson 13 (SAPO and CISPO): SAPO's gate weight.

The reader writes ``fn(ratio, advantages, tau_pos, tau_neg) -> g``, the weight SAPO's soft gate
puts on the importance-sampled gradient r · A · ∇log π (Gao et al. 2025, arXiv:2511.20347):

    g(r) = f'(r) = 4 σ(τ (r − 1)) (1 − σ(τ (r − 1))),   τ = τ_pos if A > 0 else τ_neg.

(Lesson 13's notation: the full coefficient of A · ∇log π is w(r) = r · g(r).)

The reference is not a second formula: it is autograd's derivative of the library's
``rlbook.ratios.sapo_gate``. When the answer differs the checker names the likely mistake.
"""

from __future__ import annotations

import torch

from rlbook.exercises.pg_kl import DTYPE, _call, _close, _diagnose, _failed, _not_attempted, _verdict
from rlbook.ratios import sapo_gate

__all__ = ["check_sapo_gate_weight", "reference_gate_weight"]

CASES = [(1.0, 1.05), (2.0, 3.0), (0.5, 4.0)]


def reference_gate_weight(ratio, advantages, tau_pos, tau_neg) -> torch.Tensor:
    """df/dr of ``sapo_gate`` at each ratio, by autograd: the gate's weight on r · A · ∇log π."""
    ratio = ratio.detach().clone().requires_grad_(True)
    gate = sapo_gate(ratio, advantages, tau_pos=tau_pos, tau_neg=tau_neg)
    (weight,) = torch.autograd.grad(gate.sum(), ratio)
    return weight


def _inputs():
    ratio = torch.tensor([0.3, 0.8, 0.95, 1.0, 1.0, 1.1, 1.5, 2.5, 4.0], dtype=DTYPE)
    advantages = torch.tensor([1.0, -1.0, 0.5, 1.0, -2.0, -0.7, 1.2, -1.0, 1.0], dtype=DTYPE)
    return ratio, advantages


def _gate_mistakes(ratio, advantages, tau_pos, tau_neg):
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(DTYPE)
    swapped = torch.where(advantages > 0, tau_neg, tau_pos).to(DTYPE)
    sig = torch.sigmoid(tau * (ratio - 1))
    weight = 4 * sig * (1 - sig)
    no_shift = torch.sigmoid(tau * ratio)
    swapped_sig = torch.sigmoid(swapped * (ratio - 1))
    return {
        "no_four": (sig * (1 - sig), "the factor 4 is missing: σ(1 − σ) is 1/4 at r = 1, and SAPO's 4/τ "
                    "normalisation is there to make the weight exactly 1 on-policy."),
        "raw_derivative": (tau * sig * (1 - sig), "this is the derivative of σ(τ(r − 1)) alone, τ σ(1 − σ): the "
                           "gate is σ(τ(r − 1)) · 4/τ, and the 4/τ makes the weight 4 σ(1 − σ), 1 at r = 1 for any τ."),
        "gate_value": (sig * 4 / tau, "this is the gate f(r) itself (2/τ at r = 1); the weight on the gradient is "
                       "its derivative f'(r)."),
        "times_ratio": (weight * ratio, "this is g(r) · r = w(r), the full coefficient of A · ∇log π; the gate "
                        "weight g(r) is the factor on the importance-sampled gradient r · A · ∇log π, without the r."),
        "no_shift": (4 * no_shift * (1 - no_shift), "the sigmoid must be centred at r = 1: σ(τ (r − 1)), not σ(τ r)."),
        "swapped_tau": (4 * swapped_sig * (1 - swapped_sig), "τ_pos and τ_neg are swapped: τ_pos applies where "
                        "A > 0, τ_neg where A ≤ 0."),
    }


def check_sapo_gate_weight(fn) -> bool | None:
    """Check ``fn(ratio, advantages, tau_pos, tau_neg) -> (N,)`` against autograd's derivative of ``sapo_gate``."""
    if _not_attempted(fn, "SAPO gate weight"):
        return None
    ratio, advantages = _inputs()
    for tau_pos, tau_neg in CASES:
        result, error = _call(fn, ratio.clone(), advantages.clone(), tau_pos, tau_neg)
        if error:
            return _failed(error)
        reference = reference_gate_weight(ratio, advantages, tau_pos, tau_neg)
        if not _close(result.detach(), reference):
            hint = _diagnose(result, reference, _gate_mistakes(ratio, advantages, tau_pos, tau_neg))
            return _verdict(False, "", f"wrong gate weight at τ_pos = {tau_pos}, τ_neg = {tau_neg} — {hint}")
    return _verdict(True, f"your gate weight matches SAPO's at all {len(CASES)} temperature settings", "")
