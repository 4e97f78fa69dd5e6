"""The gradient each token gets from a policy loss, read off the library's own loss by autograd.

Every online method's per-token gradient has the same shape,

    ∇_θ J = Σ_t  w(r_t) · A · ∇_θ log π_θ(y_t),

and differs only in the coefficient w(r): r for the plain importance-sampled gradient, r or 0 for
PPO's clip (Schulman et al. 2017, arXiv:1707.06347), r · 4σ(1 − σ) for SAPO's gate (Gao et al.
2025, arXiv:2511.20347) and min(r, 1 + ε_high) for CISPO (MiniMax 2025, arXiv:2506.13585).
Nothing here re-derives any of them: each function differentiates ``rlbook.losses.policy_loss``
(or evaluates ``clipped_surrogate``), so lessons 03 and 13 measure exactly the loss the trainers
minimise, and ``rlbook.viz.ppo`` and ``rlbook.viz.gates`` draw these numbers.
"""

from __future__ import annotations

import torch

from rlbook._checks import as_float_tensor, check_positive
from rlbook.losses import clipped_surrogate, policy_loss

__all__ = ["clipped_objective_curves", "gradient_coefficient", "token_loss_gradients"]


def token_loss_gradients(logp, old_logp, advantages, mask, *, variant: str, **knobs) -> torch.Tensor:
    """∂ loss / ∂ log π_θ(y_t) for every token, (B, T): the gradient of ``policy_loss`` per token.

    The gradient of the loss with respect to θ is Σ_t (∂loss/∂log π_t) ∇_θ log π_t, so a token
    whose entry is exactly 0 contributes nothing to the update. ``knobs`` go to ``policy_loss``.
    """
    logp = as_float_tensor("logp", logp, ndim=(2,)).detach().clone().requires_grad_(True)
    loss, _ = policy_loss(logp, old_logp, advantages, mask, variant=variant, **knobs)
    (gradient,) = torch.autograd.grad(loss, logp)
    return gradient


def gradient_coefficient(ratio, advantage: float, *, variant: str, **knobs) -> torch.Tensor:
    """w(r) in ∇J = w(r) · A · ∇log π for one token with ratio r and advantage ``advantage``.

    Each ratio is a one-token completion with log π_old = 0 and log π_θ = log r; with token-mean
    aggregation over N such tokens, ∂loss/∂log π_t = −w(r_t) A / N, which is solved for w.
    """
    ratio = as_float_tensor("ratio", ratio, ndim=(1,)).to(torch.float64)
    if (ratio <= 0).any():
        raise ValueError("ratio must be positive")
    if not isinstance(advantage, (int, float)) or advantage == 0:
        raise ValueError(f"advantage must be a non-zero number, got {advantage!r}")
    logp = ratio.log().unsqueeze(1)
    advantages = torch.full((ratio.shape[0],), float(advantage), dtype=torch.float64)
    gradient = token_loss_gradients(logp, torch.zeros_like(logp), advantages, torch.ones_like(logp),
                                    variant=variant, aggregation="token_mean", **knobs)
    return -gradient.squeeze(1) * ratio.shape[0] / advantage


def clipped_objective_curves(advantage: float = 1.0, *, eps_low: float = 0.2, eps_high: float = 0.2,
                             dual_clip: float | None = None, r_max: float = 3.0, points: int = 601):
    """The PPO objective J(r) = −(per-token loss) and its slope dJ/dr for one token with advantage A.

    Returns ``(r, objective, slope)`` as float64 numpy arrays over r in (0, r_max]. The objective
    is ``−clipped_surrogate(r, A)``; the slope is dJ/dr = w(r) · A / r, with w from
    ``gradient_coefficient`` (autograd through ``policy_loss(variant="ppo")``; the chain rule
    through log r gives the 1/r). A slope of exactly 0 means the clip has cut that token's gradient.
    """
    advantage = float(as_float_tensor("advantage", advantage, ndim=(0,)))
    if advantage == 0:
        raise ValueError("advantage must be non-zero (with A = 0 the objective is flat everywhere)")
    r_max = check_positive("r_max", r_max)
    ratio = torch.linspace(r_max / points, r_max, points, dtype=torch.float64)
    knobs = dict(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip)
    objective = -clipped_surrogate(ratio, torch.full_like(ratio, advantage), **knobs)
    slope = gradient_coefficient(ratio, advantage, variant="ppo", **knobs) * advantage / ratio
    return ratio.numpy(), objective.numpy(), slope.numpy()
