"""The entropy mechanism of policy-gradient RL: why a softmax policy's entropy falls, and the controls.

For a softmax policy π = softmax(z) over actions a, H(π) = −Σ_a π(a) log π(a) and

    ∂H/∂z_a = −π(a) · (log π(a) + H),

so a small change Δz of the logits changes the entropy by, to first order,

    ΔH ≈ Σ_a ∂H/∂z_a Δz_a = −Cov_{a∼π}(log π(a), Δz_a)

(the mean E_π[log π] = −H centres the first factor, which is why it is a covariance). The entropy
falls when the logits that rise are those of actions already likely. A policy-gradient step fixes
Δz (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models", arXiv:2505.22617, §3, for a tabular softmax):

- vanilla policy gradient on J = E_π[A]: ∂J/∂z_a = π(a)·A(a) (with E_π[A] = 0), so
  Δz = η·π·A and ΔH ≈ −η · Cov_π(log π(a), π(a)·A(a));
- natural policy gradient: Δz = η·A, and ΔH ≈ −η · Cov_π(log π(a), A(a)).

A confident action with a positive advantage, or a rare one with a negative advantage, lowers
the entropy; a rare action rewarded raises it.

Which covariance. The law holds state by state: at a state s (a prompt and the tokens so far) the
covariance is over the actions a ∼ π(·|s), centred on that state's own means, E_π[log π(·|s)] =
−H(s). A batch of completions gives one sampled token y_t per visited state s_t and one advantage
A_t, so two estimators are at hand:

- **per state** (``state_covariance``): (log π(y_t|s_t) + H(s_t))·A_t, centred on the state's own
  mean −H(s_t), which the full next-token distribution gives exactly. Given s_t its expectation is
  Cov_{a∼π(·|s_t)}(log π(a|s_t), A(s_t, a)) whatever baseline A_t carries (E_π[log π + H] = 0 at
  each state, so a constant in A drops out), so its mean over a batch estimates the law's term
  averaged over the visited states;
- **pooled** (``token_covariance``): (log π(y_t) − m_logp)·(A_t − m_A), centred on the batch's means
  over all its tokens. This is the quantity Cui et al.'s controls select tokens by (§4; the
  authors' code centres on the masked means of the micro-batch). Its mean is the per-state mean
  plus a between-state term −Cov_tokens(H(s_t), A_t) (and −m_A·mean(log π + H), 0 when the
  advantages average to 0): a batch where wrong completions pass through more uncertain states
  reads as a more positive covariance, although no state's own covariance changed.

Both are natural-PG forms. The vanilla form has its per-state estimate too
(``state_vanilla_covariance``): the first-order entropy change of the one-sample step Δz = η·A·(e_y − π).

The paper's two controls act on the tokens where it is
largest: **Clip-Cov** drops the gradient of a random share of the tokens whose covariance lies in
a band (1, 5) and that the PPO clip has not already stopped, and **KL-Cov** adds a KL penalty
(|log π_θ − log π_old| weighted by a coefficient) on the top share of tokens by covariance (§4 of
the paper). Clip-Cov reads the current log-probs, so it acts from the first, on-policy minibatch.
KL-Cov's penalty is 0 where π_θ = π_old: on the first minibatch its gradient coef·sign(log π_θ −
log π_old) is 0 when ``old_logp`` comes from the same forward pass, or a push of size coef in the
direction of round-off when it comes from another (the sampler's); it acts once π_θ has moved.

``rlbook.probes.entropy_step_change`` measures the law on a real update: the exact change of the
full-vocabulary token entropy at a batch's positions, beside the batch covariances that predict it.
This module is pure math on tensors (the losses' Clip-Cov and KL-Cov masks come from it); what runs a
model is in ``rlbook.probes``.

The paper also fits downstream reward against entropy across training, R ≈ −a·e^H + b (§2):
``fit_entropy_frontier`` fits it by least squares, reported as measured, never assumed.
"""

from __future__ import annotations

import math

import numpy as np

import torch

from rlbook._checks import as_float_tensor, check_same_shape

__all__ = [
    "softmax_entropy",
    "entropy_change",
    "predicted_entropy_change",
    "policy_gradient_logit_step",
    "token_covariance",
    "state_covariance",
    "state_vanilla_covariance",
    "clip_cov_band",
    "clip_cov_mask",
    "kl_cov_mask",
    "fit_entropy_frontier",
    "frontier_prediction_se",
    "fork_entropy_split",
]


def _logits(logits, name: str = "logits") -> torch.Tensor:
    z = as_float_tensor(name, logits).to(torch.float64)
    if z.dim() != 1 or z.numel() < 2:
        raise ValueError(f"{name} must be a 1-D tensor of at least 2 action logits, got shape {tuple(z.shape)}")
    return z


def softmax_entropy(logits) -> float:
    """H(softmax(logits)) in nats, for one 1-D vector of action logits."""
    log_p = torch.log_softmax(_logits(logits), dim=0)
    return float(-(log_p.exp() * log_p).sum())


def entropy_change(logits, delta) -> float:
    """The exact entropy change H(softmax(z + Δz)) − H(softmax(z))."""
    z, dz = _logits(logits), _logits(delta, "delta")
    check_same_shape(logits=z, delta=dz)
    return softmax_entropy(z + dz) - softmax_entropy(z)


def predicted_entropy_change(logits, delta) -> float:
    """The first-order change −Cov_{a∼π}(log π(a), Δz_a) of the entropy under the logit change ``delta``."""
    z, dz = _logits(logits), _logits(delta, "delta")
    check_same_shape(logits=z, delta=dz)
    log_p = torch.log_softmax(z, dim=0)
    p = log_p.exp()
    return float(-(p * (log_p - (p * log_p).sum()) * (dz - (p * dz).sum())).sum())


def policy_gradient_logit_step(logits, advantages, lr: float, *, natural: bool = False) -> torch.Tensor:
    """Δz of one exact policy-gradient step on a tabular softmax: η·π·A (vanilla) or η·A (natural).

    ``advantages`` A(a) are taken relative to their mean under π (A − E_π[A]), as the gradient of
    J = E_π[A] has it: ∂J/∂z_a = π(a)(A(a) − E_π[A]).
    """
    z, advantage = _logits(logits), _logits(advantages, "advantages")
    check_same_shape(logits=z, advantages=advantage)
    if not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a positive finite step size, got {lr}")
    p = torch.softmax(z, dim=0)
    centred = advantage - (p * advantage).sum()
    return lr * (centred if natural else p * centred)


def _per_token(advantages, logp: torch.Tensor) -> torch.Tensor:
    """``advantages`` (B,) per sequence or (B, C) per token, as (B, C) like ``logp``; detached."""
    advantages = as_float_tensor("advantages", advantages).detach()
    if advantages.dim() == 1:
        if advantages.shape[0] != logp.shape[0]:
            raise ValueError(f"advantages of shape (B,) must have B = {logp.shape[0]} rows, got {advantages.shape[0]}")
        advantages = advantages[:, None].expand_as(logp)
    check_same_shape(logp=logp, advantages=advantages)
    return advantages


def token_covariance(logp, advantages, mask) -> torch.Tensor:
    """Each token's centred product (log π(y_t) − m_logp)·(A_t − m_A), means over the masked tokens.

    ``logp`` (B, C) are the sampled tokens' log-probs, ``advantages`` (B,) per sequence or (B, C)
    per token, ``mask`` (B, C) the completion tokens. The masked mean of the result is the batch
    covariance between log-probability and advantage that drives the entropy down (Cui et al. 2025,
    §4); padding positions are 0. Detached: it selects tokens, it is not differentiated.
    """
    logp = as_float_tensor("logp", logp).detach()
    mask = as_float_tensor("mask", mask)
    check_same_shape(logp=logp, mask=mask)
    advantages = _per_token(advantages, logp)
    count = mask.sum()
    if count <= 0:
        raise ValueError("mask must mark at least one token")
    mean_logp = (logp * mask).sum() / count
    mean_advantage = (advantages * mask).sum() / count
    return (logp - mean_logp) * (advantages - mean_advantage) * mask


def state_covariance(logp, entropy, advantages, mask) -> torch.Tensor:
    """Each token's per-state covariance estimate (log π(y_t|s_t) + H(s_t))·A_t; padding positions 0.

    ``logp`` (B, C) are the sampled tokens' log-probs, ``entropy`` (B, C) the entropy of the full
    next-token distribution at each position, ``advantages`` (B,) per sequence or (B, C) per token,
    ``mask`` (B, C) the completion tokens. Centred on the state's own mean E_{a∼π(·|s_t)}[log π(a|s_t)]
    = −H(s_t), not on a batch mean: given s_t its expectation over y_t ∼ π(·|s_t) is the covariance of
    the law, Cov_{a∼π(·|s_t)}(log π(a|s_t), A(s_t, a)) (Cui et al. 2025, arXiv:2505.22617, §3, natural
    policy gradient), and a baseline in A_t leaves it unbiased. ``token_covariance`` is the pooled
    estimator the controls use; the module docstring gives the exact relation between the two.
    """
    logp = as_float_tensor("logp", logp).detach()
    entropy = as_float_tensor("entropy", entropy).detach()
    mask = as_float_tensor("mask", mask)
    check_same_shape(logp=logp, entropy=entropy, mask=mask)
    advantages = _per_token(advantages, logp)
    if mask.sum() <= 0:
        raise ValueError("mask must mark at least one token")
    return (logp + entropy) * advantages * mask


def state_vanilla_covariance(logp, entropy, self_covariance, advantages, mask) -> torch.Tensor:
    """Each token's per-state *vanilla* estimate A_t·[π(y_t)(log π(y_t) + H(s_t)) − C(s_t)]; padding 0.

    ``self_covariance`` (B, C) is C(s_t) = Cov_{a∼π(·|s_t)}(log π(a), π(a)) = Σ_a π(a)²(log π(a) + H(s_t)),
    read from the full next-token distribution; the other inputs are ``state_covariance``'s. One
    sampled token y with advantage A moves a tabular softmax's logits by the score-function step
    Δz = η·A·(e_y − π), whose first-order entropy change is −η·Cov_π(log π, Δz/η) = −η·(this estimate);
    given s_t its expectation over y_t ∼ π is Cov_π(log π(a), π(a)·(A(a) − E_π A)), the vanilla-PG term
    of Cui et al. 2025 (arXiv:2505.22617, §3), centred on the state's own means as ``state_covariance``
    is for the natural one.
    """
    logp = as_float_tensor("logp", logp).detach()
    entropy = as_float_tensor("entropy", entropy).detach()
    self_covariance = as_float_tensor("self_covariance", self_covariance).detach()
    mask = as_float_tensor("mask", mask)
    check_same_shape(logp=logp, entropy=entropy, self_covariance=self_covariance, mask=mask)
    advantages = _per_token(advantages, logp)
    if mask.sum() <= 0:
        raise ValueError("mask must mark at least one token")
    return (logp.exp() * (logp + entropy) - self_covariance) * advantages * mask


def clip_cov_band(covariance, mask, *, low: float = 1.0, high: float = 5.0, already_clipped=None) -> torch.Tensor:
    """The tokens Clip-Cov may draw from: masked, covariance in the open band (``low``, ``high``), and
    not marked by ``already_clipped`` (None = none). When they number fewer than Clip-Cov's share of
    the tokens, it drops all of them and acts on less than its share."""
    covariance, mask = as_float_tensor("covariance", covariance), as_float_tensor("mask", mask)
    check_same_shape(covariance=covariance, mask=mask)
    if not low <= high:
        raise ValueError(f"low must be <= high, got low={low}, high={high}")
    in_band = (mask > 0) & (covariance > low) & (covariance < high)
    if already_clipped is not None:
        already_clipped = torch.as_tensor(already_clipped, dtype=torch.bool)
        check_same_shape(covariance=covariance, already_clipped=already_clipped)
        in_band = in_band & ~already_clipped
    return in_band


def clip_cov_mask(covariance, mask, *, fraction: float = 2e-4, low: float = 1.0, high: float = 5.0,
                  generator: torch.Generator | None = None, already_clipped=None) -> torch.Tensor:
    """Clip-Cov's selection: ⌊``fraction`` × the masked tokens⌋ (at least one), drawn at random among
    those whose covariance lies in the open band (``low``, ``high``) and that ``already_clipped`` (the
    tokens the PPO clip already stopped; None = none) does not mark. True = drop the gradient.

    Defaults are the paper's (r = 2e-4, ω_low = 1, ω_high = 5; Cui et al. 2025, §4), and so is the
    rule: the authors' code (PRIME-RL/Entropy-Mechanism-of-RL, ``compute_policy_loss_clip_cov``)
    skips clipped tokens, whose gradient is already zero, so that every drop removes a live gradient.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    covariance, mask = as_float_tensor("covariance", covariance), as_float_tensor("mask", mask)
    in_band = clip_cov_band(covariance, mask, low=low, high=high, already_clipped=already_clipped)
    candidates = in_band.flatten().nonzero().squeeze(1)
    chosen = torch.zeros(covariance.numel(), dtype=torch.bool)
    if fraction > 0 and candidates.numel():
        count = min(candidates.numel(), max(1, math.floor(fraction * int((mask > 0).sum()))))
        pick = torch.randperm(candidates.numel(), generator=generator)[:count]
        chosen[candidates[pick]] = True
    return chosen.view_as(covariance)


def kl_cov_mask(covariance, mask, *, fraction: float = 2e-3) -> torch.Tensor:
    """KL-Cov's selection: the top ⌊``fraction`` × the masked tokens⌋ by covariance (at least one when
    ``fraction`` > 0), which get a KL penalty (True = penalised; Cui et al. 2025, §4,
    k = 2e-3 by default there). Floor, as Clip-Cov's count and as the authors' code
    (``max(1, int(n · k))`` in ``compute_policy_loss_kl_cov``)."""
    covariance, mask = as_float_tensor("covariance", covariance), as_float_tensor("mask", mask)
    check_same_shape(covariance=covariance, mask=mask)
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    chosen = torch.zeros(covariance.numel(), dtype=torch.bool)
    valid = (mask > 0).flatten()
    total = int(valid.sum())
    if fraction > 0 and total:
        count = max(1, math.floor(fraction * total))
        scores = covariance.flatten().masked_fill(~valid, -math.inf)
        chosen[scores.topk(count).indices] = True
    return chosen.view_as(covariance)


def fork_entropy_split(probabilities, fork) -> dict[str, torch.Tensor]:
    """Split the entropy of each row of ``probabilities`` (N, V) at a named fork: the tokens ``fork``
    (e.g. the ids of ``<think>`` and ``<answer>``) against all the others. Per row, with m the mass
    outside the fork, q = π(·|fork) the distribution within it and o = π(·|outside), the chain rule of
    entropy (Cover & Thomas, *Elements of Information Theory*, Thm 2.2.1, grouping) gives exactly

        H(π) = H_b(m) + (1 − m)·H(q) + m·H(o),    H_b(m) = −m log m − (1 − m) log(1 − m).

    Returns (N,) float64 tensors: ``entropy`` H(π); ``outside`` m; ``within`` H(q), the entropy of the
    fork read as a choice among its own tokens (for two tokens the binary entropy of the first's share);
    ``which_side`` H_b(m); ``outside_entropy`` H(o) (0 where m = 0). Concavity bounds the mean of a
    two-token ``within`` by the binary entropy of the mean share (≤ ln 2); mass outside the fork adds to
    H(π) on top of it.
    """
    p = as_float_tensor("probabilities", probabilities).to(torch.float64)
    if p.dim() != 2:
        raise ValueError(f"probabilities must be (N, V), got shape {tuple(p.shape)}")
    if (p < 0).any() or not torch.allclose(p.sum(1), torch.ones(p.shape[0], dtype=torch.float64), atol=1e-6):
        raise ValueError("probabilities must be non-negative rows that sum to 1")
    ids = torch.as_tensor(fork, dtype=torch.long).flatten()
    if ids.numel() < 2 or ids.unique().numel() != ids.numel() or (ids < 0).any() or (ids >= p.shape[1]).any():
        raise ValueError(f"fork must name at least two distinct token ids below {p.shape[1]}, got {ids.tolist()}")

    def plogp(x):
        return torch.where(x > 0, x * x.clamp_min(1e-300).log(), torch.zeros_like(x))

    inside = torch.zeros(p.shape[1], dtype=torch.bool)
    inside[ids] = True
    m = p[:, ~inside].sum(1).clamp(0.0, 1.0)
    q = p[:, inside] / (1 - m).clamp_min(1e-300)[:, None]
    o = p[:, ~inside] / m.clamp_min(1e-300)[:, None]
    return {"entropy": -plogp(p).sum(1), "outside": m, "within": -plogp(q).sum(1),
            "which_side": -plogp(m) - plogp(1 - m), "outside_entropy": torch.where(m > 0, -plogp(o).sum(1), 0.0)}


def _frontier_points(entropy, reward) -> tuple[torch.Tensor, torch.Tensor]:
    """(entropy, reward) as flat float64 tensors of one length, at least 3 points (a pandas column is copied, as
    its array may be read-only)."""
    entropy, reward = (x if isinstance(x, torch.Tensor) else torch.tensor(np.array(x, dtype=np.float64))
                       for x in (entropy, reward))
    h = as_float_tensor("entropy", entropy).to(torch.float64).flatten()
    r = as_float_tensor("reward", reward).to(torch.float64).flatten()
    check_same_shape(entropy=h, reward=r)
    if h.numel() < 3:
        raise ValueError(f"entropy and reward need at least 3 points to fit two coefficients, got {h.numel()}")
    return h, r


def fit_entropy_frontier(entropy, reward) -> dict[str, float]:
    """Least-squares fit of R = −a·e^H + b over paired (entropy, reward) points (Cui et al. 2025, §2).

    Returns ``a``, ``b``, the predicted reward at zero entropy ``ceiling`` = b − a, and ``r2``, the
    fraction of the reward's variance the fit explains (0 when the reward does not vary).
    """
    h, r = _frontier_points(entropy, reward)
    design = torch.stack([-h.exp(), torch.ones_like(h)], dim=1)
    solution = torch.linalg.lstsq(design, r[:, None]).solution.squeeze(1)
    a, b = float(solution[0]), float(solution[1])
    residual = float(((design @ solution - r) ** 2).sum())
    spread = float(((r - r.mean()) ** 2).sum())
    return {"a": a, "b": b, "ceiling": b - a, "r2": 1.0 - residual / spread if spread > 0 else 0.0}


def frontier_prediction_se(entropy, reward, at_entropy) -> torch.Tensor:
    """Standard error of predicting a *new* point's reward at ``at_entropy`` from the fit of R = −a·e^H + b to
    (entropy, reward) (``fit_entropy_frontier``): the ordinary least-squares prediction SE
    s·√(1 + x₀ᵀ(XᵀX)⁻¹x₀), with x₀ = (−e^{H₀}, 1) and s² = RSS / (n − 2) the residual variance (any textbook
    on linear regression, e.g. Seber & Lee, *Linear Regression Analysis*, §5.3). It counts both the fitted
    curve's own uncertainty (large when H₀ lies outside the fitted range) and the points' scatter about it,
    which already holds their sampling noise. Needs at least 3 points.
    """
    h, r = _frontier_points(entropy, reward)
    at = as_float_tensor("at_entropy", torch.tensor(np.array(at_entropy, dtype=np.float64))
                         if not isinstance(at_entropy, torch.Tensor) else at_entropy).to(torch.float64).flatten()
    design = torch.stack([-h.exp(), torch.ones_like(h)], dim=1)
    solution = torch.linalg.lstsq(design, r[:, None]).solution.squeeze(1)
    variance = float(((design @ solution - r) ** 2).sum()) / (h.numel() - 2)
    new = torch.stack([-at.exp(), torch.ones_like(at)], dim=1)
    leverage = (new @ torch.linalg.inv(design.T @ design) * new).sum(1)
    return (variance * (1.0 + leverage)).sqrt()
