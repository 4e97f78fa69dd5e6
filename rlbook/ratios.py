"""Importance ratios and the gates built on them.

Samples come from π_old (the policy that generated them); the loss is evaluated under π_θ. Each
method reweights the policy gradient by some function of the ratio π_θ/π_old, and the methods
differ in *which* ratio (token or sequence) and *what* they do when it strays from 1:

- token ratio r_t = π_θ(y_t)/π_old(y_t)                    (PPO, Schulman et al. 2017, arXiv:1707.06347)
- GSPO's sequence ratio s_i = (π_θ(y_i)/π_old(y_i))^{1/|y_i|}  (Zheng et al. 2025, arXiv:2507.18071)
- GMPO's geometric mean of log-clipped token ratios       (Zhao et al. 2025, arXiv:2507.20673)
- SAPO's soft gate f(r) = σ(τ(r − 1)) · 4/τ                (Gao et al. 2025, arXiv:2511.20347)
- CISPO's clipped, stop-gradient IS weight                (MiniMax 2025, arXiv:2506.13585)
- AReaL's decoupled behaviour weight π_prox/π_behav       (Fu et al. 2025, arXiv:2505.24298)

Inputs are per-token log-probs (B, T) with a 0/1 ``mask``; advantages are (B,) or (B, T).
"""

from __future__ import annotations

import torch

from rlbook._checks import as_float_tensor, check_positive, check_same_shape
from rlbook.aggregation import response_mask

__all__ = [
    "coefficient_disagreement",
    "token_ratio",
    "gspo_sequence_ratio",
    "gspo_token_ratio",
    "gmpo_sequence_ratio",
    "gmpo_token_weights",
    "sapo_gate",
    "cispo_weight",
    "decoupled_behaviour_weight",
]


def token_ratio(logp, old_logp) -> torch.Tensor:
    """r_t = π_θ(y_t)/π_old(y_t) = exp(logp − old_logp), per token (PPO, arXiv:1707.06347, §3)."""
    logp, old_logp = _check_pair(logp, old_logp)
    return torch.exp(logp - old_logp)


def gspo_sequence_ratio(logp, old_logp, mask) -> torch.Tensor:
    """GSPO's length-normalised sequence ratio, shape (B,) (Zheng et al. 2025, arXiv:2507.18071).

        s_i = (π_θ(y_i)/π_old(y_i))^{1/|y_i|} = exp( (1/|y_i|) Σ_t log r_t ),

    the geometric mean of the token ratios. It equals every r_t when all token ratios are equal.
    """
    logp, old_logp, mask = _check_tokens(logp, old_logp, mask)
    lengths = mask.sum(dim=1).clamp(min=1.0)
    return torch.exp(((logp - old_logp) * mask).sum(dim=1) / lengths)


def gspo_token_ratio(logp, old_logp, mask) -> torch.Tensor:
    """GSPO-token's ratio, shape (B, T) (Zheng et al. 2025, arXiv:2507.18071).

        s_{i,t} = sg[s_i] · π_θ(y_t) / sg[π_θ(y_t)]

    Its *value* is the sequence ratio s_i on every token, its *gradient* that of log π_θ(y_t) times
    s_i, so per-token advantages can be used. With A_{i,t} = A_i it gives GSPO's gradient exactly.
    """
    logp, old_logp, mask = _check_tokens(logp, old_logp, mask)
    sequence_ratio = gspo_sequence_ratio(logp, old_logp, mask).detach()
    return sequence_ratio.unsqueeze(1) * torch.exp(logp - logp.detach())


def gmpo_sequence_ratio(logp, old_logp, advantages, mask, *, eps_low: float = 0.4, eps_high: float = 0.4):
    """GMPO's clipped geometric-mean ratio, shape (B,) (Zhao et al. 2025, arXiv:2507.20673).

    Clipping happens per token and in log space, one-sided by the sign of the advantage (PPO's
    pessimism), *before* the geometric mean:

        ℓ_t = log r_t,   ℓ̃_t = clip(ℓ_t, −ε_low, ε_high),
        ℓ*_t = min(ℓ_t, ℓ̃_t) if A > 0 else max(ℓ_t, ℓ̃_t),
        ρ_i = exp( (1/|y_i|) Σ_t ℓ*_t ).

    GMPO's objective is A_i · ρ_i. The paper's default range is (e^{−0.4}, e^{0.4}).
    """
    logp, old_logp, mask = _check_tokens(logp, old_logp, mask)
    advantages = _sequence_advantages(advantages, logp.shape[0])
    eps_low = check_positive("eps_low", eps_low, allow_zero=True)
    eps_high = check_positive("eps_high", eps_high, allow_zero=True)
    log_ratio = logp - old_logp
    clipped = log_ratio.clamp(min=-eps_low, max=eps_high)
    positive = advantages.unsqueeze(1) > 0
    pessimistic = torch.where(positive, torch.minimum(log_ratio, clipped), torch.maximum(log_ratio, clipped))
    lengths = mask.sum(dim=1).clamp(min=1.0)
    return torch.exp((pessimistic * mask).sum(dim=1) / lengths)


def gmpo_token_weights(logp, old_logp, advantages, mask, *, eps_low: float = 0.4, eps_high: float = 0.4):
    """The weight each token's ∇log π gets in GMPO's gradient, shape (B, T) (Zhao et al. 2025, arXiv:2507.20673).

    With ρ_i = exp((1/|y_i|) Σ_t ℓ*_t) (``gmpo_sequence_ratio``) and ∂ℓ*_t/∂log π_θ(y_t) = 1 on a
    token whose log-ratio the pessimistic clip leaves alone and 0 on a clipped one,

        ∇_θ (A_i ρ_i) = A_i · (1/|y_i|) Σ_t w_{i,t} ∇_θ log π_θ(y_t),   w_{i,t} = ρ_i · 1[token t not clipped].

    GRPO's per-token weight is the token's *own* ratio r_t (where not clipped); GMPO's is the
    response's geometric-mean ratio ρ_i, the same on every unclipped token. A token is clipped when
    A_i > 0 and log r_t > ε_high, or A_i ≤ 0 and log r_t < −ε_low. Padding gets 0. Detached.
    """
    logp, old_logp, mask = _check_tokens(logp, old_logp, mask)
    advantages = _sequence_advantages(advantages, logp.shape[0])
    rho = gmpo_sequence_ratio(logp.detach(), old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high)
    log_ratio = (logp - old_logp).detach()
    positive = advantages.unsqueeze(1) > 0
    clipped = torch.where(positive, log_ratio > eps_high, log_ratio < -eps_low)
    return rho.unsqueeze(1) * (~clipped).to(logp.dtype) * mask


def sapo_gate(ratio, advantages, *, tau_pos: float = 1.0, tau_neg: float = 1.05) -> torch.Tensor:
    """SAPO's soft gate f(r) = σ(τ (r − 1)) · 4/τ (Gao et al. 2025, arXiv:2511.20347).

    τ = ``tau_pos`` where A > 0 and ``tau_neg`` otherwise (the paper sets τ_neg > τ_pos: negative
    updates decay faster). SAPO maximises f(r) · A in place of r · A. Since f'(r) = 4 σ(1 − σ),
    f'(1) = 1: on-policy SAPO's gradient is exactly the policy gradient, and it decays smoothly (no
    hard cut) as r leaves 1. ``advantages`` must broadcast against ``ratio``.
    """
    ratio = as_float_tensor("ratio", ratio)
    advantages = as_float_tensor("advantages", advantages)
    tau_pos = check_positive("tau_pos", tau_pos)
    tau_neg = check_positive("tau_neg", tau_neg)
    if advantages.dim() == 1 and ratio.dim() == 2:
        advantages = advantages.unsqueeze(1)
    _check_broadcast(ratio=ratio, advantages=advantages)
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(ratio.dtype)
    return torch.sigmoid(tau * (ratio - 1)) * 4 / tau


def cispo_weight(ratio, *, eps_low: float | None = None, eps_high: float = 4.0) -> torch.Tensor:
    """CISPO's IS weight sg[clip(r, 1 − ε_low, 1 + ε_high)] (MiniMax 2025, arXiv:2506.13585, eq. 5).

    CISPO maximises sg[r̂] · A · log π_θ (eq. 4): the clipped weight multiplies a REINFORCE term, so a
    token whose ratio is clipped still gets a gradient (PPO's clip zeroes it). It is truncated
    importance sampling, as in IMPALA's V-trace ρ̄ (Espeholt et al. 2018, arXiv:1802.01561), per token
    and without a correction term, so the gradient is biased toward π_old's (the report says so, §3.1).
    MiniMax-M1 sets no lower bound (``eps_low=None``) and tunes only ε_high.

    Two conventions for the cap. Here the weight is capped at **1 + eps_high**: the default
    eps_high = 4.0 caps it at 5, ScaleRL's ε_max = 5 (Khatri et al. 2025, arXiv:2510.13786). TRL's
    ``GRPOConfig(loss_type="cispo")`` clamps at ``epsilon_high`` itself (its recommended value, 5.0,
    is the cap), so the same setting is TRL ``epsilon_high`` = 1 + this ``eps_high``
    (``rlbook.scaling`` converts it).
    """
    ratio = as_float_tensor("ratio", ratio)
    eps_high = check_positive("eps_high", eps_high, allow_zero=True)
    low = None if eps_low is None else 1 - check_positive("eps_low", eps_low, allow_zero=True)
    return ratio.clamp(min=low, max=1 + eps_high).detach()


def decoupled_behaviour_weight(prox_logp, behaviour_logp, *, cap: float | None = None) -> torch.Tensor:
    """AReaL's behaviour weight w_t = π_prox(y_t)/π_behav(y_t), detached (Fu et al. 2025, arXiv:2505.24298).

    Asynchronous RL samples with a stale behaviour policy π_behav. The decoupled PPO objective
    E_{π_behav}[ w_t · min(u_t A, clip(u_t, 1 ± ε) A) ], u_t = π_θ/π_prox, corrects the staleness with
    the constant weight w_t and clips around the recent *proximal* policy π_prox instead of π_behav.
    With ``cap``, tokens whose weight exceeds it get weight 0 (dropped, as AReaL's
    ``behav_imp_weight_cap`` does). ``prox_logp`` plays the role of ``old_logp`` elsewhere.
    """
    prox_logp = as_float_tensor("prox_logp", prox_logp)
    behaviour_logp = as_float_tensor("behaviour_logp", behaviour_logp)
    check_same_shape(prox_logp=prox_logp, behaviour_logp=behaviour_logp)
    weight = torch.exp(prox_logp - behaviour_logp).detach()
    if cap is not None:
        cap = check_positive("cap", cap)
        weight = torch.where(weight > cap, torch.zeros_like(weight), weight)
    return weight


def _check_pair(logp, old_logp) -> tuple[torch.Tensor, torch.Tensor]:
    logp = as_float_tensor("logp", logp)
    old_logp = as_float_tensor("old_logp", old_logp)
    check_same_shape(logp=logp, old_logp=old_logp)
    return logp, old_logp.detach()


def _check_tokens(logp, old_logp, mask):
    """Check (B, T) log-probs and mask; return them with the mask as floats of logp's dtype."""
    logp = as_float_tensor("logp", logp, ndim=(2,))
    logp, old_logp = _check_pair(logp, old_logp)
    mask = response_mask(mask).to(logp.dtype)
    check_same_shape(logp=logp, mask=mask)
    return logp, old_logp, mask


def _sequence_advantages(advantages, batch: int) -> torch.Tensor:
    advantages = as_float_tensor("advantages", advantages, ndim=(1,))
    if advantages.shape[0] != batch:
        raise ValueError(f"advantages must have shape ({batch},), got {tuple(advantages.shape)}")
    return advantages


def _check_broadcast(**tensors: torch.Tensor) -> None:
    (name_a, a), (name_b, b) = tensors.items()
    try:
        torch.broadcast_shapes(a.shape, b.shape)
    except RuntimeError as err:
        message = f"{name_b} of shape {tuple(b.shape)} does not broadcast against {name_a} {tuple(a.shape)}"
        raise ValueError(message) from err


def coefficient_disagreement(ratio, advantages, mask, *, eps: float = 0.2, cap: float = 1.2, tau_pos: float = 1.0,
                             tau_neg: float = 1.05, tolerance: float = 0.05) -> dict[str, float]:
    """On which tokens would GRPO's clip, SAPO's gate and CISPO's cap give a different gradient?

    Every method's token gradient is w(r)·A·∇log π_θ (lesson 13); only the coefficient differs:

    - GRPO / PPO (Schulman et al. 2017, arXiv:1707.06347, eq. 7): w = r, but 0 when A > 0 and
      r > 1+ε, or A < 0 and r < 1−ε (the clip's flat side);
    - SAPO (Gao et al. 2025, arXiv:2511.20347, the soft gate): w = r·sech²(τ(r−1)/2), τ = τ_pos if
      A > 0 else τ_neg;
    - CISPO (MiniMax 2025, arXiv:2506.13585, eq. 4–5, no lower bound): w = min(r, cap).

    ``ratio``, ``advantages`` ((B, T), or (B,) per response) and ``mask`` are one minibatch's. Counted are
    the response tokens with A ≠ 0 (the ones with a gradient): ``coef_tokens``; those on which
    |w_CISPO − w_GRPO| > ``tolerance`` (``coef_cispo_differs``) and |w_SAPO − w_GRPO| > ``tolerance``
    (``coef_sapo_differs``), the tolerance a share of the on-policy weight w(1) = 1; and the gradient mass
    Σ|A| (``coef_mass``) and Σ|Δw|·|A| of each pair (``coef_cispo_mass_moved``, ``coef_sapo_mass_moved``).
    Counts, not shares, so that minibatches can be pooled (the on-policy first one has r = 1 and adds no
    disagreement). The weights are the three closed forms whatever loss the run trained with.
    """
    check_positive("eps", eps)
    check_positive("cap", cap)
    check_positive("tolerance", tolerance)
    ratio = as_float_tensor("ratio", ratio).detach()
    advantages = torch.as_tensor(advantages, dtype=ratio.dtype).detach()
    if advantages.dim() == 1 and ratio.dim() == 2:
        advantages = advantages.unsqueeze(1).expand_as(ratio)
    mask = response_mask(mask).to(torch.bool)
    check_same_shape(ratio=ratio, advantages=advantages, mask=mask)
    live = mask & (advantages != 0)
    positive = advantages > 0
    clipped = (positive & (ratio > 1 + eps)) | (~positive & (ratio < 1 - eps))
    w_grpo = torch.where(clipped, torch.zeros_like(ratio), ratio)
    tau = torch.where(positive, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    w_sapo = ratio / torch.cosh(tau * (ratio - 1) / 2) ** 2
    w_cispo = ratio.clamp(max=cap)
    size = advantages.abs()
    cispo_gap, sapo_gap = (w_cispo - w_grpo).abs(), (w_sapo - w_grpo).abs()
    return {"coef_tokens": float(live.sum()),
            "coef_cispo_differs": float((live & (cispo_gap > tolerance)).sum()),
            "coef_sapo_differs": float((live & (sapo_gap > tolerance)).sum()),
            "coef_mass": float((size * live).sum()),
            "coef_cispo_mass_moved": float((cispo_gap * size * live).sum()),
            "coef_sapo_mass_moved": float((sapo_gap * size * live).sum())}
