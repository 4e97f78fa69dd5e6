"""Checker for the exercise of lesson 15 (sync vs async): AReaL's decoupled per-token loss.

The reader writes ``loss(logp, prox_logp, behaviour_logp, advantages, eps)``, the per-token loss
(minimised) of the decoupled PPO objective (Fu et al. 2025, arXiv:2505.24298, eq. 5):

    ℓ_t = − sg[π_prox/π_behav] · min(u_t A_t, clip(u_t, 1 − ε, 1 + ε) A_t),   u_t = π_θ/π_prox.

The reference is ``rlbook.ratios.decoupled_behaviour_weight`` times
``rlbook.losses.clipped_surrogate``, what ``policy_loss(..., behaviour_logp=...)`` uses.
"""

from __future__ import annotations

import torch

from rlbook.exercises.framework import DTYPE, _call, _close, _diagnose, _failed, _not_attempted, _verdict
from rlbook.losses import clipped_surrogate
from rlbook.ratios import decoupled_behaviour_weight

__all__ = ["check_decoupled_loss"]

EPS = 0.2


def _inputs():
    """Log-probs where the current, proximal and behaviour policies are far enough apart for the clip to act."""
    generator = torch.Generator().manual_seed(15)
    behaviour = -torch.rand(4, 6, generator=generator, dtype=DTYPE) * 3
    prox = behaviour + torch.randn(4, 6, generator=generator, dtype=DTYPE) * 0.6
    logp = prox + torch.randn(4, 6, generator=generator, dtype=DTYPE) * 0.3
    advantages = torch.randn(4, 1, generator=generator, dtype=DTYPE).expand(4, 6).clone()
    return logp, prox, behaviour, advantages


def _reference(logp, prox, behaviour, advantages, eps=EPS):
    return decoupled_behaviour_weight(prox, behaviour) * clipped_surrogate(
        torch.exp(logp - prox), advantages, eps_low=eps, eps_high=eps)


def check_decoupled_loss(fn) -> bool | None:
    """Check ``fn(logp, prox_logp, behaviour_logp, advantages, eps) -> (B, T)`` per-token decoupled loss,
    its values and its gradient with respect to ``logp``."""
    if _not_attempted(fn, "decoupled per-token loss"):
        return None
    logp, prox, behaviour, advantages = _inputs()
    reader_logp = logp.clone().requires_grad_(True)
    result, error = _call(fn, reader_logp, prox.clone(), behaviour.clone(), advantages.clone(), EPS)
    if error:
        return _failed(error)
    reference = _reference(logp, prox, behaviour, advantages)
    if not _close(result.detach(), reference):
        weight = decoupled_behaviour_weight(prox, behaviour)
        u = torch.exp(logp - prox)
        mistakes = {
            "naive": (clipped_surrogate(torch.exp(logp - behaviour), advantages, eps_low=EPS, eps_high=EPS),
                      "this is the naive objective: the ratio π_θ/π_behav clipped around the stale behaviour policy; "
                      "clip u = π_θ/π_prox instead and weight by π_prox/π_behav"),
            "no weight": (clipped_surrogate(u, advantages, eps_low=EPS, eps_high=EPS),
                          "the behaviour weight sg[π_prox/π_behav] is missing: without it the stale samples are "
                          "not corrected"),
            "inverted weight": (decoupled_behaviour_weight(behaviour, prox) * clipped_surrogate(
                u, advantages, eps_low=EPS, eps_high=EPS), "the weight is inverted: it is π_prox/π_behav"),
            "sign": (-reference, "the sign is flipped: return the loss, the negative of the objective"),
            "weight in one term": (-torch.minimum(weight * u * advantages, u.clamp(1 - EPS, 1 + EPS) * advantages),
                                   "the weight must multiply the whole min(…), both of its terms"),
        }
        return _verdict(False, "", _diagnose(result.detach(), reference, mistakes))
    if not result.requires_grad:
        return _verdict(False, "", "the values are right but the loss has no gradient: do not detach logp")
    (grad,) = torch.autograd.grad(result.sum(), reader_logp)
    reference_logp = logp.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(_reference(reference_logp, prox, behaviour, advantages).sum(), reference_logp)
    if not _close(grad, expected):
        return _verdict(False, "", "the values are right but the gradient is not: the weight must be a constant "
                                   "(stop-gradient) and u = exp(logp − prox_logp) must carry the gradient")
    return _verdict(True, "the decoupled loss and its gradient match the library's", "")
