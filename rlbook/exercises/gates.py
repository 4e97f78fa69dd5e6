"""Checkers for the exercises of lesson 13 (SAPO and CISPO).

1. ``check_sapo_gate_weight``: the reader writes ``fn(ratio, advantages, tau_pos, tau_neg) -> g``, the
   weight SAPO's soft gate puts on the importance-sampled gradient r · A · ∇log π (Gao et al. 2025,
   arXiv:2511.20347, the derivative of the gate of eq. 5–6):

       g(r) = f'(r) = 4 σ(τ (r − 1)) (1 − σ(τ (r − 1))),   τ = τ_pos if A > 0 else τ_neg.

   (Lesson 13's notation: the full coefficient of A · ∇log π is w(r) = r · g(r).)
2. ``check_gate_limit``: ``fn(ratio, advantages) -> w``, SAPO's coefficient w(r) = r · g(r) in the limit
   τ → ∞, which is *not* PPO's clipped coefficient.
3. ``check_half_weight_temperature``: the τ at which g(1.2) = ½, SAPO's gate matched to PPO's band.
4. ``check_sign_flip_threshold``: the probability below which dropping CISPO's stop-gradient reverses
   a token's update (MiniMax 2025, arXiv:2506.13585, eq. 4: the weight is sg[r̂]).

The references are not second formulas: they are read off the library by autograd (the derivative of
``rlbook.ratios.sapo_gate``; ``policy_loss``'s coefficient at a huge τ; a root of the gate weight or of
the gradient found by bisection). When an answer differs the checker names the likely mistake.
"""

from __future__ import annotations

import math

import torch

from rlbook.exercises.framework import DTYPE, FunctionExercise, _verdict
from rlbook.ratios import sapo_gate
from rlbook.token_gradients import gradient_coefficient

__all__ = ["check_sapo_gate_weight", "reference_gate_weight", "check_gate_limit", "reference_gate_limit",
           "check_half_weight_temperature", "reference_half_weight_temperature", "check_sign_flip_threshold",
           "reference_sign_flip_threshold"]

CASES = [(1.0, 1.05), (2.0, 3.0), (0.5, 4.0)]


def reference_gate_weight(ratio, advantages, tau_pos, tau_neg) -> torch.Tensor:
    """df/dr of ``sapo_gate`` at each ratio, by autograd: the gate's weight on r · A · ∇log π."""
    ratio = ratio.detach().clone().requires_grad_(True)
    gate = sapo_gate(ratio, advantages, tau_pos=tau_pos, tau_neg=tau_neg)
    (weight,) = torch.autograd.grad(gate.sum(), ratio)
    return weight


def _inputs():
    # the last two tokens have A = 0: the library (and the paper's "A > 0" rule) gives them τ_neg
    ratio = torch.tensor([0.3, 0.8, 0.95, 1.0, 1.0, 1.1, 1.5, 2.5, 4.0, 1.6, 0.5], dtype=DTYPE)
    advantages = torch.tensor([1.0, -1.0, 0.5, 1.0, -2.0, -0.7, 1.2, -1.0, 1.0, 0.0, 0.0], dtype=DTYPE)
    return ratio, advantages


def _gate_mistakes(ratio, advantages, tau_pos, tau_neg):
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(DTYPE)
    swapped = torch.where(advantages > 0, tau_neg, tau_pos).to(DTYPE)
    sig = torch.sigmoid(tau * (ratio - 1))
    weight = 4 * sig * (1 - sig)
    no_shift = torch.sigmoid(tau * ratio)
    swapped_sig = torch.sigmoid(swapped * (ratio - 1))
    zero_sig = torch.sigmoid(torch.where(advantages >= 0, tau_pos, tau_neg).to(DTYPE) * (ratio - 1))
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
        "single_tau": (4 * torch.sigmoid(tau_pos * (ratio - 1)) * (1 - torch.sigmoid(tau_pos * (ratio - 1))),
                       "this uses τ_pos for every token, whatever the sign of its advantage: SAPO's temperature "
                       "depends on A, τ_pos where A > 0 and τ_neg where A ≤ 0."),
        "zero_advantage": (4 * zero_sig * (1 - zero_sig), "a token with A = 0 takes τ_neg, not τ_pos: the rule "
                           "is τ_pos where A > 0 and τ_neg otherwise (A ≥ 0 is the slip)."),
        "half_missing": (torch.cosh(tau * (ratio - 1)) ** -2, "this is sech²(τ(r − 1)), without the ½: "
                         "4σ(x)(1 − σ(x)) = sech²(x/2), so g(r) = sech²(τ(r − 1)/2)."),
    }


check_sapo_gate_weight = FunctionExercise(
    "check_sapo_gate_weight", what="SAPO gate weight",
    cases=lambda: [(*_inputs(), tau_pos, tau_neg) for tau_pos, tau_neg in CASES], reference=reference_gate_weight,
    mistakes=_gate_mistakes, prepare=lambda result, *case: result.detach(),
    wrong=lambda ratio, advantages, tau_pos, tau_neg: f"wrong gate weight at τ_pos = {tau_pos}, τ_neg = {tau_neg} — ",
    success=f"your gate weight matches SAPO's at all {len(CASES)} temperature settings",
    doc="""Check ``fn(ratio, advantages, tau_pos, tau_neg) -> (N,)`` against autograd's derivative of ``sapo_gate``.""")


# ----------------------------------------------------------------------------------------------
# Exercise 2: SAPO's coefficient as τ → ∞ is not PPO's

LIMIT_TAU = 1e4  # "τ → ∞": sech²(τ·|r − 1|/2) underflows to 0 for every tested r ≠ 1
LIMIT_RATIOS = (0.5, 0.7, 0.9, 1.0, 1.1, 1.5, 3.0)
PPO_EPS = 0.2


def reference_gate_limit(ratio, advantages) -> torch.Tensor:
    """SAPO's w(r) = r·g(r) at τ_pos = τ_neg = ``LIMIT_TAU``, read off ``policy_loss`` by autograd, per entry."""
    values = [gradient_coefficient(r.reshape(1), float(a), variant="sapo", tau_pos=LIMIT_TAU, tau_neg=LIMIT_TAU)
              for r, a in zip(ratio, advantages)]
    return torch.cat(values).to(DTYPE)


def _limit_inputs():
    ratio = torch.tensor(LIMIT_RATIOS * 2, dtype=DTYPE)
    advantages = torch.tensor([1.0] * len(LIMIT_RATIOS) + [-1.0] * len(LIMIT_RATIOS), dtype=DTYPE)
    return ratio, advantages


def _limit_mistakes(ratio, advantages):
    ppo = torch.cat([gradient_coefficient(r.reshape(1), float(a), variant="ppo", eps_low=PPO_EPS, eps_high=PPO_EPS)
                     for r, a in zip(ratio, advantages)]).to(DTYPE)
    inside = ((ratio - 1).abs() <= PPO_EPS + 1e-12).to(DTYPE)
    return {
        "ppo": (ppo, "this is PPO's clipped coefficient. SAPO's gate is symmetric in r − 1: as τ → ∞ it closes on "
                     "both sides of r = 1, including the side PPO keeps open (A > 0 with r < 1 − ε, A < 0 with "
                     "r > 1 + ε, where PPO's w = r restores or, for A < 0, grows without bound)."),
        "hard_band": (ratio * inside, "this is a hard symmetric band of width ε: SAPO has no ε — as τ grows its "
                      "half-weight points 1 ± 1.763/τ move in to r = 1, so in the limit only r = 1 keeps a gradient."),
        "plain_is": (ratio.clone(), "this is plain importance sampling, w = r (τ → 0, the gate fully open): as "
                     "τ → ∞ the gate g(r) = sech²(τ(r − 1)/2) goes to 0 for every r ≠ 1."),
        "gate_at_one": (torch.ones_like(ratio), "w does not stay 1: it is r·g(r), and g(r) → 0 for every r ≠ 1."),
        "all_zero": (torch.zeros_like(ratio), "not everywhere: at r = 1 the gate weight is g(1) = sech²(0) = 1 for "
                     "every τ, so on-policy SAPO keeps the full policy gradient, w(1) = 1, however large τ is."),
        "band_without_r": (inside.clone(), "this is the indicator of PPO's band, 1{|r − 1| ≤ ε}: SAPO has no ε, and "
                           "as τ → ∞ its gate closes on every r ≠ 1, so only r = 1 keeps w = 1."),
    }


check_gate_limit = FunctionExercise(
    "check_gate_limit",
    what="limit of SAPO's coefficient",
    cases=lambda: [_limit_inputs()],
    reference=reference_gate_limit,
    mistakes=_limit_mistakes,
    prepare=lambda result, *args: result.detach(),
    wrong="not SAPO's limit — ",
    success="right: as τ → ∞ SAPO keeps a gradient only at r = 1 (w = 1) and zeroes both sides. That is not PPO, "
            "which keeps w = r inside [1 − ε, 1 + ε] and on the side that pulls the ratio back (A > 0, r < 1 − ε; "
            "A < 0, r > 1 + ε). A finite τ ≈ 8.8 gives SAPO PPO's band width (exercise 3), but its gate stays "
            "symmetric",
    doc="""Check ``fn(ratio, advantages) -> w``: SAPO's gradient coefficient w(r) = r·g(r) as τ_pos = τ_neg → ∞,
per entry, against the library's at τ = ``LIMIT_TAU``. Names the likely mistake (PPO's coefficient,
a hard band of width ε, plain importance sampling).""")


# ----------------------------------------------------------------------------------------------
# Exercise 3: the temperature that halves the gate weight at PPO's edge r = 1.2

HALF_WEIGHT_RATIO = 1.2
HALF_WEIGHT_TOLERANCE = 0.005  # relative


def _bisect(function, low: float, high: float, *, steps: int = 60) -> float:
    """The root of ``function`` between ``low`` and ``high`` (opposite signs there), by bisection."""
    f_low = function(low)
    for _ in range(steps):
        middle = (low + high) / 2
        if (function(middle) > 0) == (f_low > 0):
            low, f_low = middle, function(middle)
        else:
            high = middle
    return (low + high) / 2


def _unanswered_or_not_a_number(value, what: str) -> tuple[bool, bool | None]:
    """``(True, verdict)`` when ``value`` is None (not attempted: verdict None) or not a finite number
    (verdict False, said so); ``(False, None)`` when it is a number to check."""
    if value is None:
        print(f"Nothing to check yet: replace None with your {what} and run this cell again.")
        return True, None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return True, _verdict(False, "", f"give the {what} as a number, got {value!r}")
    return False, None


def reference_half_weight_temperature(ratio: float = HALF_WEIGHT_RATIO) -> float:
    """τ at which autograd's derivative of ``sapo_gate`` (SAPO's gate weight g) at ``ratio`` is ½ (bisection)."""
    point = torch.tensor([ratio], dtype=DTYPE)
    advantage = torch.tensor([1.0], dtype=DTYPE)
    return _bisect(lambda tau: reference_gate_weight(point, advantage, tau, tau).item() - 0.5, 0.01, 1e3)


def check_half_weight_temperature(tau) -> bool | None:
    """Check the reader's number: the τ for which SAPO's gate weight g(1.2) = ½, within 0.5 %. Names the
    likely slip (the ½ inside sech² dropped, sech instead of sech², the exponential tail used)."""
    done, verdict = _unanswered_or_not_a_number(tau, "value of τ")
    if done:
        return verdict
    right = reference_half_weight_temperature()
    d = HALF_WEIGHT_RATIO - 1
    slips = {
        "sech²(τ·0.2) = ½ drops the ½ inside the sech²: g = sech²(τ(r − 1)/2), so solve sech²(τ·0.1) = ½":
            math.acosh(math.sqrt(2)) / d,
        "this solves sech(τ·0.1) = ½, not sech²(τ·0.1) = ½: cosh(τ·0.1) = √2, not 2": math.acosh(2) / (d / 2),
        "this uses the tail 4e^(−τ|r − 1|) = ½, which only holds far from r = 1; solve sech²(τ·0.1) = ½ exactly":
            math.log(8) / d,
        "this is ln(2)/0.1: solve cosh(τ·0.1) = √2, i.e. τ·0.1 = arcosh(√2) = ln(1 + √2)": math.log(2) / (d / 2),
    }
    if abs(tau - right) <= HALF_WEIGHT_TOLERANCE * right:
        return _verdict(True, f"τ = {right:.3f} = 10·ln(1 + √2): at τ ≈ 8.8 SAPO's gate weight halves at PPO's edge "
                              f"r = 1.2, against 0.990 at the paper's τ = 1", "")
    for hint, value in slips.items():
        if abs(tau - value) <= HALF_WEIGHT_TOLERANCE * value:
            return _verdict(False, "", f"expected ≈ {right:.3f}, got {tau:.4g} — {hint}")
    return _verdict(False, "", f"expected ≈ {right:.3f}, got {tau:.4g}: solve sech²(τ · 0.1) = ½ for τ")


# ----------------------------------------------------------------------------------------------
# Exercise 4: without CISPO's stop-gradient, which tokens are pushed the wrong way?

SIGN_FLIP_TOLERANCE = 0.01  # relative: 1/e = 0.3679, so the two-figure answer 0.37 (0.57 % off) is accepted


def reference_sign_flip_threshold() -> float:
    """The probability p* at which ∂(r·A·log π)/∂log π (no stop-gradient, on-policy r = 1, A = 1) changes
    sign, by autograd and bisection: below p* the token's update runs against its advantage."""

    def derivative(probability: float) -> float:
        logp = torch.tensor(math.log(probability), dtype=DTYPE, requires_grad=True)
        ratio = torch.exp(logp - logp.detach())  # π_θ/π_old with π_old = π_θ's value: 1, with a gradient
        (gradient,) = torch.autograd.grad(ratio * 1.0 * logp, logp)
        return gradient.item()

    return _bisect(derivative, 1e-6, 1.0 - 1e-9)


def check_sign_flip_threshold(probability) -> bool | None:
    """Check the reader's number p*: without CISPO's stop-gradient, ∇(r A log π) = r A ∇log π (1 + log π),
    which points against A for tokens with π_θ(y_t) < p*. Within 1 % (so 0.37 passes); names the likely slip."""
    done, verdict = _unanswered_or_not_a_number(probability, "threshold probability")
    if done:
        return verdict
    right = reference_sign_flip_threshold()
    if abs(probability - right) <= SIGN_FLIP_TOLERANCE * right:
        return _verdict(True, f"p* = 1/e = {right:.4f}: without the stop-gradient every token the policy gives less "
                              "than 37 % is pushed against its advantage — most of the informative, uncertain tokens", "")
    if abs(probability - (-1.0)) <= 1e-6:
        hint = "−1 is log p*, the threshold on log π; the question asks for the probability"
    elif abs(probability - math.e) <= SIGN_FLIP_TOLERANCE * math.e:
        hint = "that is e; the factor 1 + log π is 0 where log π = −1, i.e. at π = 1/e (a probability is below 1)"
    elif abs(probability - 1.0) <= 1e-6:
        hint = ("1 + log π is below 1 for every π < 1, which shrinks the update; it reverses it only where it is "
                "negative")
    elif abs(probability - 0.5) <= 1e-6:
        hint = "1 + log 0.5 = 0.31 > 0: at π = ½ the update still points along A; solve 1 + log π = 0"
    else:
        hint = "solve 1 + log π = 0 for π"
    return _verdict(False, "", f"expected ≈ {right:.4f}, got {probability:.4g} — {hint}")


# These two exercises ask for a number, not a function: their unattempted form is None, and anything but a
# finite number is a ✗ that says so (tests/test_exercises_not_attempted.py reads this mark).
check_half_weight_temperature.takes = check_sign_flip_threshold.takes = "number"
