"""Per-token estimators of KL(π_θ ‖ π_ref), and the two places a KL penalty can go.

Tokens are sampled from π_θ; ``logp`` = log π_θ(token), ``ref_logp`` = log π_ref(token), and
r = π_ref / π_θ = exp(ref_logp − logp). Schulman ("Approximating KL Divergence", blog note, 2020)
gives three single-sample estimators of KL(π_θ ‖ π_ref) = E_{π_θ}[−log r]:

- k1 = −log r               unbiased, high variance, can be negative;
- k2 = ½ (log r)²           biased (exact to second order as π_θ → π_ref), low variance, ≥ 0;
- k3 = (r − 1) − log r      unbiased (E[r] = 1) and ≥ 0: k1 plus a zero-mean control variate.

**Their values estimate the same KL; their gradients do not.** Used as a loss term on fresh samples
(on-policy, the sampling weights not differentiated), the expected gradients are

- E_π[∇k1] = E_π[∇log π_θ] = 0                                   (no pull toward π_ref at all);
- E_π[∇k2] = E_π[(log π_θ − log π_ref) ∇log π_θ] = ∇ KL(π_θ ‖ π_ref)   (the reverse KL);
- E_π[∇k3] = E_π[(1 − r) ∇log π_θ] = −Σ π_ref ∇log π_θ = ∇ KL(π_ref ‖ π_θ)  (the *forward* KL).

So GRPO's "k3 in the loss" (Shao et al. 2024, arXiv:2402.03300, §4.1) optimises the forward KL,
while "k1 in the reward" (Ziegler et al. 2019, arXiv:1909.08593; Ouyang et al. 2022,
arXiv:2203.02155) and "k2 in the loss" both give the reverse-KL gradient (K. Liu et al. 2025,
"Rethinking KL Regularization in RLHF: From Value Estimation to Gradient Optimization",
arXiv:2510.01555). All three identities need fresh samples: on tokens drawn from an older π_old
(later epochs on one batch) E_{π_old}[∇k1] = −∇ KL(π_old ‖ π_θ), and the importance ratio
π_θ/π_old (``kl_in_loss``'s ``ratio``) is what restores the reverse-KL gradient, for k1 and k3. verl's ``"k3+"`` / ``"low_var_kl+"``
straight-through estimator reports k3's value with k2's gradient (``k3_straight_through``); its
``"low_var_kl"`` is k3 with the log-ratio clamped to ±20 and the value to [−10, 10]. The lesson on KL
estimators checks every one of these gradient facts by exact enumeration (tests/test_gradient_identities.py).

These are per-token facts. On a response of several tokens a per-token term in the loss (k2, k3+, the
ratio-weighted k3) credits each token with its own KL only, a *partial* gradient of the sequence KL
(Tang & Munos 2025, "On a few pitfalls in KL divergence gradient estimation for RL", arXiv:2506.09477);
k1 in the reward, with each token credited its reward-to-go, also charges it the KL of the tokens
after it and gives the full gradient. ``rlbook.kl_sequence`` shows both on a two-token toy.
"""

from __future__ import annotations

import torch

from rlbook._checks import as_float_tensor, check_choice, check_positive, check_same_shape
from rlbook.aggregation import response_mask

__all__ = [
    "KL_ESTIMATORS",
    "bernoulli_kl",
    "k1",
    "k2",
    "k3",
    "k3_straight_through",
    "kl_estimate",
    "kl_in_loss",
    "kl_in_reward",
    "batch_means_below",
    "token_tail_summary",
]

KL_ESTIMATORS = ("k1", "k2", "k3", "k3+")


def bernoulli_kl(q, p) -> torch.Tensor:
    """KL(Bernoulli(q) ‖ Bernoulli(p)) = q log(q/p) + (1 − q) log((1 − q)/(1 − p)), elementwise, float64.

    The KL of two coins: of a policy and a reference that differ only in how often a 0/1 event happens
    (a verifier's "right", a scratchpad opened). 0 log 0 = 0, so q = p = 0 or 1 gives 0; a q the
    reference cannot reach (p = 0 < q) gives ∞. Rounding can leave −1e-17 at q = p: clamped at 0.
    """
    q, p = torch.as_tensor(q, dtype=torch.float64), torch.as_tensor(p, dtype=torch.float64)
    if ((q < 0) | (q > 1) | (p < 0) | (p > 1)).any() or not (torch.isfinite(q).all() and torch.isfinite(p).all()):
        raise ValueError("q and p must be probabilities in [0, 1]")
    kl = (torch.special.xlogy(q, q) - torch.special.xlogy(q, p)
          + torch.special.xlogy(1 - q, 1 - q) - torch.special.xlogy(1 - q, 1 - p))
    return kl.clamp(min=0.0)


def _log_ratio(logp, ref_logp) -> torch.Tensor:
    """log r = ref_logp − logp, after checking both inputs."""
    logp = as_float_tensor("logp", logp)
    ref_logp = as_float_tensor("ref_logp", ref_logp)
    check_same_shape(logp=logp, ref_logp=ref_logp)
    return ref_logp - logp


def k1(logp, ref_logp) -> torch.Tensor:
    """k1 = −log r = log π_θ − log π_ref, per token (Schulman 2020). Expected gradient 0 on-policy."""
    return -_log_ratio(logp, ref_logp)


def k2(logp, ref_logp) -> torch.Tensor:
    """k2 = ½ (log r)², per token (Schulman 2020). Its expected gradient is ∇ KL(π_θ ‖ π_ref)."""
    return 0.5 * _log_ratio(logp, ref_logp) ** 2


def k3(logp, ref_logp) -> torch.Tensor:
    """k3 = (r − 1) − log r with r = π_ref/π_θ, per token (Schulman 2020).

    Unbiased and ≥ 0, but its expected gradient is ∇ KL(π_ref ‖ π_θ), the forward KL.
    """
    log_r = _log_ratio(logp, ref_logp)
    return torch.expm1(log_r) - log_r


def k3_straight_through(logp, ref_logp) -> torch.Tensor:
    """k3's value with k2's gradient: sg(k3) + k2 − sg(k2), where sg is stop-gradient (``detach``).

    This is verl's ``"k3+"`` (``"low_var_kl+"``): the logged number is the unbiased, non-negative k3,
    while the gradient is k2's, i.e. the reverse-KL gradient ∇ KL(π_θ ‖ π_ref) on-policy.
    """
    value = k3(logp, ref_logp)
    surrogate = k2(logp, ref_logp)
    return value.detach() + surrogate - surrogate.detach()


def kl_estimate(logp, ref_logp, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL(π_θ ‖ π_ref) estimate with ``estimator`` in {"k1", "k2", "k3", "k3+"}."""
    check_choice("estimator", estimator, KL_ESTIMATORS)
    functions = {"k1": k1, "k2": k2, "k3": k3, "k3+": k3_straight_through}
    return functions[estimator](logp, ref_logp)


def kl_in_loss(logp, ref_logp, *, beta: float, estimator: str = "k3", ratio=None) -> torch.Tensor:
    """The in-loss placement: the per-token term β · k to *add* to the per-token policy loss.

    GRPO (Shao et al. 2024, arXiv:2402.03300, §4.1) adds β · k3 per token before averaging. With
    ``ratio`` = π_θ/π_old (differentiable), the term becomes β · ratio · k, the importance-weighted
    KL of DeepSeek-V3.2 (arXiv:2512.02556) that TRL applies when ``use_bias_correction_kl=True`` (the
    field's default in ``trl.GRPOConfig`` of TRL 1.16.0, read from the installed package; other
    versions may differ; TRL's ``beta`` itself defaults to 0.0, no KL term at all): on-policy its expected
    gradient is ∇ E_π[k], the reverse-KL gradient for k1 and k3. Over a sequence each of these is the
    partial gradient Σ_t E[∇_θ KL_t(prefix)], blind to the KL a token causes later (module docstring).
    """
    beta = check_positive("beta", beta, allow_zero=True)
    kl = kl_estimate(logp, ref_logp, estimator)
    if ratio is not None:
        ratio = as_float_tensor("ratio", ratio)
        check_same_shape(logp=kl, ratio=ratio)
        kl = ratio * kl
    return beta * kl


def kl_in_reward(rewards, kl, beta: float, mask) -> torch.Tensor:
    """The in-reward placement: per-token rewards r[i, t] = −β · kl[i, t] (+ the reward on the last token).

    Ziegler et al. (2019, arXiv:1909.08593) and InstructGPT (Ouyang et al. 2022,
    arXiv:2203.02155) subtract β · log(π_θ/π_ref) from the reward. Placed here the KL is a
    number, not a loss: ``kl`` is detached, and the policy gradient then carries it as part of the
    return. With k1 this is the unbiased reverse-KL gradient.

    ``rewards`` is either (B,) sequence rewards, added to each response's last unmasked token, or
    (B, T) per-token rewards. ``kl`` and ``mask`` are (B, T); padding receives 0.
    """
    beta = check_positive("beta", beta, allow_zero=True)
    kl = as_float_tensor("kl", kl, ndim=(2,)).detach()
    mask = response_mask(mask).to(kl.dtype)
    check_same_shape(kl=kl, mask=mask)
    rewards = as_float_tensor("rewards", rewards, ndim=(1, 2)).to(kl.dtype)
    if rewards.dim() == 1:
        if rewards.shape[0] != kl.shape[0]:
            raise ValueError(f"rewards must have shape ({kl.shape[0]},) to match kl, got {tuple(rewards.shape)}")
        rewards = _place_on_last_token(rewards, mask)
    check_same_shape(kl=kl, rewards=rewards)
    return (rewards - beta * kl) * mask


def _place_on_last_token(sequence_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A (B, T) grid that is zero except for each row's reward at its last unmasked position."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask > 0, positions, torch.full_like(positions, -1)).max(dim=1).values
    grid = torch.zeros_like(mask)
    has_tokens = last >= 0
    grid[has_tokens, last[has_tokens]] = sequence_rewards[has_tokens]
    return grid


# ----------------------------------------------------------------------------------------------
# The estimators on a language model's own tokens


def token_tail_summary(values, *, quantiles=(0.5, 0.9, 0.99, 0.999), top: float = 0.01) -> dict:
    """How heavy a per-token distribution's right tail is: quantiles, max, and the top tokens' share of the sum.

    ``values`` is a 1-D tensor (one entry per token). Returns ``count``, ``mean``, ``quantiles`` (a dict
    q → value), ``max``, ``top_share`` = the share of Σ values carried by the largest ⌈top · count⌉ entries
    (meaningful for non-negative values such as k3 or r), and ``excess_kurtosis`` = E[(x − x̄)⁴]/Var² − 3
    (0 for a normal; a sample value, itself dominated by the largest entries).
    """
    values = as_float_tensor("values", values, ndim=(1,)).double()
    if values.numel() < 2:
        raise ValueError(f"values must hold at least 2 entries, got {values.numel()}")
    if not 0 < top <= 1:
        raise ValueError(f"top must be in (0, 1], got {top}")
    ordered = values.sort(descending=True).values
    kept = max(1, int(torch.ceil(torch.tensor(top * values.numel())).item()))
    centred = values - values.mean()
    variance = (centred**2).mean()
    levels = torch.tensor(quantiles, dtype=values.dtype)
    return {"count": values.numel(), "mean": float(values.mean()),
            "quantiles": dict(zip(quantiles, torch.quantile(values, levels).tolist())),
            "max": float(ordered[0]), "top_share": float(ordered[:kept].sum() / values.sum()),
            "excess_kurtosis": float((centred**4).mean() / variance**2 - 3)}


def batch_means_below(estimates, exact, mask, *, rows_per_batch: int) -> tuple[int, int]:
    """In how many batches the per-token mean of ``estimates`` falls below the mean of ``exact``.

    ``estimates``, ``exact`` (B, C) and ``mask`` (B, C) are cut into consecutive batches of
    ``rows_per_batch`` rows (a trailing partial batch is dropped); in each, both are averaged over the
    masked tokens, as a trainer logs a batch's KL. Returns (batches below, batches).
    """
    estimates = as_float_tensor("estimates", estimates, ndim=(2,))
    exact = as_float_tensor("exact", exact, ndim=(2,))
    mask = response_mask(mask).to(estimates.dtype)
    check_same_shape(estimates=estimates, exact=exact, mask=mask)
    if not isinstance(rows_per_batch, int) or not 1 <= rows_per_batch <= estimates.shape[0]:
        raise ValueError(f"rows_per_batch must be an int from 1 to {estimates.shape[0]}, got {rows_per_batch!r}")
    batches = estimates.shape[0] // rows_per_batch
    below = 0
    for b in range(batches):
        rows = slice(b * rows_per_batch, (b + 1) * rows_per_batch)
        tokens = mask[rows].sum()
        if tokens == 0:
            raise ValueError(f"batch {b} has no masked tokens")
        below += bool((estimates[rows] * mask[rows]).sum() < (exact[rows] * mask[rows]).sum())
    return below, batches
