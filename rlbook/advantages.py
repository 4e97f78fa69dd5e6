"""Advantages: how much better than expected each response (or token) was.

The policy gradient E[∇log π · A] keeps its expectation when any baseline b that does not depend
on the sampled action is subtracted from the return; a good baseline cuts the variance. The methods:

- **Group baselines** (no critic). For one prompt, G responses with rewards r_1..r_G, mean μ, std σ:

  - ``"grpo"``:    A_i = (r_i − μ) / (σ + ε)                 (Shao et al. 2024, arXiv:2402.03300, §4.1.2)
  - ``"dr_grpo"``: A_i = r_i − μ                              (Liu et al. 2025, arXiv:2503.20783: drop the std)
  - ``"rloo"``:    A_i = r_i − mean_{j≠i} r_j = G/(G−1) · (r_i − μ)
    (Ahmadian et al. 2024, arXiv:2402.14740; Kool et al. 2019)

- **GAE** with a critic (Schulman et al. 2015, arXiv:1506.02438, eq. 16).
- **REINFORCE++** global batch normalisation (Hu 2025, arXiv:2501.03262).
- **Reward dithering** before any of the group baselines: ``dither_rewards`` (ReDit, Wei et al. 2025,
  arXiv:2506.18631).

Zero-variance rule: a group whose G rewards are all equal carries no signal and gets advantage
exactly 0 under every method (never NaN, never round-off noise). Other groups divide by σ + ε with
ε = ``eps`` (default 1e-6), which only matters for near-constant groups. σ is the population std
(divide by G) unless ``unbiased_std=True`` (Bessel, divide by G − 1, as TRL does).
"""

from __future__ import annotations

import math

import torch

from rlbook._checks import as_float_tensor, check_choice, check_group_size, check_positive, check_same_shape
from rlbook.aggregation import response_mask

__all__ = [
    "difficulty_factor",
    "GROUP_METHODS",
    "group_advantages",
    "gae",
    "batch_normalize",
    "broadcast_to_tokens",
    "dither_rewards",
]

GROUP_METHODS = ("grpo", "dr_grpo", "rloo")


def group_advantages(rewards, group_size: int, method: str = "grpo", unbiased_std: bool = False, *, eps: float = 1e-6):
    """Group-relative advantages for B = n_prompts × G rewards, each prompt's G samples contiguous.

    Worked example (the lesson on GRPO): rewards [1, 1, 1, 0], G = 4 → μ = 0.75, population
    σ = √0.1875 ≈ 0.433, advantages ≈ [+0.577, +0.577, +0.577, −1.732]. With Bessel's std
    (σ ≈ 0.5): [+0.5, +0.5, +0.5, −1.5]. Returns a (B,) tensor.
    """
    rewards = as_float_tensor("rewards", rewards, ndim=(1,))
    check_choice("method", method, GROUP_METHODS)
    group_size = check_group_size("group_size", rewards.shape[0], group_size)
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 for a group baseline, got {group_size}")
    eps = check_positive("eps", eps, allow_zero=True)
    groups = rewards.view(-1, group_size)
    centred = groups - groups.mean(dim=1, keepdim=True)
    if method == "grpo":
        std = groups.std(dim=1, keepdim=True, correction=1 if unbiased_std else 0)
        advantages = centred / (std + eps)
        # with eps = 0, a spread that underflows to std = 0 (subnormal rewards) would divide by zero
        flat = (std + eps) == 0
    elif method == "dr_grpo":
        advantages = centred
    else:
        advantages = centred * group_size / (group_size - 1)
    constant = groups.max(dim=1, keepdim=True).values == groups.min(dim=1, keepdim=True).values
    if method == "grpo":
        constant = constant | flat
    return torch.where(constant, torch.zeros_like(advantages), advantages).reshape(-1)


def gae(rewards, values, gamma: float, lam: float, last_value=0.0, *, mask=None):
    """Generalised advantage estimation (Schulman et al. 2015, arXiv:1506.02438, eq. 16).

        δ_t = r_t + γ V_{t+1} − V_t,        A_t = δ_t + γλ A_{t+1},        returns_t = A_t + V_t,

    with V_T = ``last_value`` (0 for an episode that ended, V(s_T) for one that was cut off).
    λ = 0 gives the one-step TD error δ_t; λ = 1 gives the Monte Carlo return minus V_t.

    ``rewards`` and ``values`` are (T,) or (B, T); ``last_value`` a number or a (B,) tensor. With a
    (B, T) ``mask`` whose padding follows each response, rewards and values on padding are treated as
    0, so a response ends (V = 0) at its last token, and advantages and returns there are 0.
    Returns ``(advantages, returns)`` shaped like ``rewards``, detached (they are targets).
    """
    rewards = as_float_tensor("rewards", rewards, ndim=(1, 2))
    values = as_float_tensor("values", values, ndim=(1, 2))
    check_same_shape(rewards=rewards, values=values)
    gamma = _check_unit_interval("gamma", gamma)
    lam = _check_unit_interval("lam", lam)
    squeeze = rewards.dim() == 1
    if squeeze:
        rewards, values = rewards.unsqueeze(0), values.unsqueeze(0)
    if mask is None:
        mask = torch.ones_like(rewards)
    else:
        mask = response_mask(mask if not squeeze else torch.as_tensor(mask).unsqueeze(0)).to(rewards.dtype)
        check_same_shape(rewards=rewards, mask=mask)
    next_value = _as_last_value(last_value, rewards)
    rewards, values = rewards.detach() * mask, values.detach() * mask
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = (delta + gamma * lam * running) * mask[:, t]
        advantages[:, t] = running
        next_value = values[:, t]
    returns = (advantages + values) * mask
    if squeeze:
        return advantages[0], returns[0]
    return advantages, returns


def batch_normalize(advantages, mask=None, *, eps: float = 1e-8, unbiased_std: bool = False):
    """Whiten advantages over the whole batch: (A − mean) / (std + ε) (REINFORCE++, Hu 2025, arXiv:2501.03262).

    REINFORCE++ normalises token advantages with the global batch's mean and std, instead of a
    per-prompt group's. "REINFORCE++-baseline" first subtracts each group's mean
    (``group_advantages(..., method="dr_grpo")``) and then applies this. ``advantages`` is (B,) or
    (B, T); with a (B, T) ``mask`` the statistics use unmasked tokens only and padding returns 0.
    A batch whose advantages are all equal returns zeros.
    """
    advantages = as_float_tensor("advantages", advantages, ndim=(1, 2))
    eps = check_positive("eps", eps, allow_zero=True)
    if mask is None:
        mask = torch.ones_like(advantages)
    else:
        mask = torch.as_tensor(mask).to(advantages.dtype)
        check_same_shape(advantages=advantages, mask=mask)
        if advantages.dim() == 2:
            mask = response_mask(mask).to(advantages.dtype)
    selected = advantages[mask > 0]
    if selected.numel() == 0:
        raise ValueError("mask selects no tokens: every entry is 0")
    if selected.max() == selected.min():
        return torch.zeros_like(advantages)
    correction = 1 if unbiased_std and selected.numel() > 1 else 0
    normalized = (advantages - selected.mean()) / (selected.std(correction=correction) + eps)
    return normalized * mask


def broadcast_to_tokens(advantages, mask) -> torch.Tensor:
    """Give every token of response i its sequence advantage: A[i, t] = A_i · mask[i, t], shape (B, T)."""
    advantages = as_float_tensor("advantages", advantages, ndim=(1,))
    mask = response_mask(mask).to(advantages.dtype)
    if mask.shape[0] != advantages.shape[0]:
        expected = advantages.shape[0]
        raise ValueError(f"mask must have {expected} rows to match advantages, got shape {tuple(mask.shape)}")
    return advantages.unsqueeze(1) * mask


def _check_unit_interval(name: str, value) -> float:
    value = check_positive(name, value, allow_zero=True)
    if value > 1:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


def _as_last_value(last_value, rewards: torch.Tensor) -> torch.Tensor:
    """``last_value`` as a (B,) tensor: a number is broadcast to every row."""
    last_value = as_float_tensor("last_value", last_value, ndim=(0, 1)).to(rewards.dtype).detach()
    if last_value.dim() == 1 and last_value.shape[0] != rewards.shape[0]:
        expected = rewards.shape[0]
        raise ValueError(f"last_value must be a number or have shape ({expected},), got {tuple(last_value.shape)}")
    return last_value.expand(rewards.shape[0]).clone()


def dither_rewards(rewards, std: float, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """ReDit's reward dithering (Wei et al. 2025, arXiv:2506.18631): r̃_i = r_i + σ · ε_i, ε_i ~ N(0, 1).

    The noise goes on the discrete *rewards*, before the group baseline, so that a group whose G
    rewards are all equal no longer is: ``group_advantages(dither_rewards(r, σ), G, ...)`` gives it
    non-zero advantages, the group's own noise minus its mean (Dr.GRPO), or that divided by its
    σ (GRPO), which makes them of order 1 however small σ is. That is not the same as adding noise
    to the advantages (``rlbook.shaping.add_advantage_noise``), which is not centred per group and
    is not rescaled by σ. ReDit also uses uniform noise; Gaussian is one of its variants.
    ``std = 0`` returns the rewards unchanged; the same ``generator`` seed gives the same noise.
    """
    rewards = as_float_tensor("rewards", rewards, ndim=(1,))
    std = check_positive("std", std, allow_zero=True)
    noise = torch.randn(rewards.shape, generator=generator, dtype=rewards.dtype, device=rewards.device)
    return rewards + std * noise


def difficulty_factor(p: float, group_size: int, method: str = "grpo", *, unbiased_std: bool = False) -> float:
    """g_G(p) = E[Â_i | R_i = 1] − E[Â_i | R_i = 0] for a 0/1 reward, a question of solve rate ``p``.

    With a 0/1 reward, E[Â_i ∇log π(o_i)] = g_G(p) ∇p (lesson 10, §1): Â_i depends on o_i only through
    R_i, and the other G − 1 rewards are independent Binomial(G − 1, p) draws. So g sums, over the j
    correct among the others, C(G−1, j) p^j (1−p)^(G−1−j) times (Â of a right answer − Â of a wrong
    one) in a group with j (resp. j + 1) other right answers; a flat group's advantages are 0
    (``group_advantages``). Under Dr.GRPO (``method="dr_grpo"``) g = (G − 1)/G for
    every p; under GRPO (population σ, DeepSeekMath eq. 3 of Shao et al. 2024, arXiv:2402.03300) it grows
    as p leaves ½ (Liu et al. 2025, arXiv:2503.20783, §3.1, "question-level difficulty bias").
    """
    if not (isinstance(p, (int, float)) and 0 <= p <= 1):
        raise ValueError(f"p must be a solve rate in [0, 1], got {p!r}")
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 2:
        raise ValueError(f"group_size must be an int >= 2, got {group_size!r}")
    check_choice("method", method, GROUP_METHODS)
    g = group_size
    total = 0.0
    for j in range(g):
        chance = binomial_pmf(g - 1, j, p)
        if chance == 0.0:
            continue
        right = group_advantages(torch.tensor([1.0] * (j + 1) + [0.0] * (g - 1 - j)), g, method,
                                 unbiased_std=unbiased_std)[0]
        wrong = group_advantages(torch.tensor([0.0] + [1.0] * j + [0.0] * (g - 1 - j)), g, method,
                                 unbiased_std=unbiased_std)[0]
        total += chance * float(right - wrong)
    return total


def binomial_pmf(n: int, k: int, p: float) -> float:
    """P(K = k) for K ~ Binomial(n, p), in log space so that large n does not overflow a float."""
    if p in (0.0, 1.0):
        return float(k == (0 if p == 0.0 else n))
    return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    + k * math.log(p) + (n - k) * math.log1p(-p))
