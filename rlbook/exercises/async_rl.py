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
    """Log-probs where the current, proximal and behaviour policies are far enough apart for the clip to act,
    with three rows of positive and three of negative advantage, so that both sides of the clip are exercised."""
    generator = torch.Generator().manual_seed(15)
    behaviour = -torch.rand(6, 6, generator=generator, dtype=DTYPE) * 3
    prox = behaviour + torch.randn(6, 6, generator=generator, dtype=DTYPE) * 0.6
    logp = prox + torch.randn(6, 6, generator=generator, dtype=DTYPE) * 0.3
    signs = torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0, 1.0], dtype=DTYPE).view(6, 1)
    magnitudes = 0.2 + torch.rand(6, 1, generator=generator, dtype=DTYPE)
    advantages = (signs * magnitudes).expand(6, 6).clone()
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
    if result.shape != reference.shape:
        return _verdict(False, "", f"return the per-token loss, one value per token of shape {tuple(reference.shape)}, "
                                   f"not a reduction of it: got shape {tuple(result.shape)}")
    if not _close(result.detach(), reference):
        weight = decoupled_behaviour_weight(prox, behaviour)
        u = torch.exp(logp - prox)
        r = torch.exp(logp - behaviour)
        clipped_u = u.clamp(1 - EPS, 1 + EPS)
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
            "weight in one term": (-torch.minimum(weight * u * advantages, clipped_u * advantages),
                                   "the weight must multiply the whole min(…), both of its terms"),
            "weight in the clipped term": (-torch.minimum(u * advantages, weight * clipped_u * advantages),
                                           "the weight must multiply the whole min(…), both of its terms"),
            "min over the ratio": (-weight * advantages * torch.minimum(u, clipped_u),
                                   "min(u, clip(u))·A is not min(u·A, clip(u)·A): for A < 0 it picks the wrong branch; "
                                   "take the min of the two products"),
            "no clip": (-weight * u * advantages,
                        "there is no clip: the loss is −w·u·A; take min(u·A, clip(u, 1 − ε, 1 + ε)·A)"),
            "clipped term only": (-weight * clipped_u * advantages,
                                  "only the clipped term: the loss needs min(u·A, clip(u)·A), both terms"),
            "max": (-weight * torch.maximum(u * advantages, clipped_u * advantages),
                    "max instead of min: PPO's objective takes the pessimistic (smaller) of the two terms"),
            "weighted clip on r": (-weight * torch.minimum(r * advantages, r.clamp(1 - EPS, 1 + EPS) * advantages),
                                   "the clip acts on r = π_θ/π_behav, around the stale behaviour policy: clip "
                                   "u = π_θ/π_prox, the ratio to the policy at the start of the step"),
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
