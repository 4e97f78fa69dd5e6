"""Metrics a training run logs and a lesson asserts on: pass@k, best-of-n KL, entropy, clip fractions."""

from __future__ import annotations

import math

import torch

from rlbook._checks import as_float_tensor, check_int, check_same_shape
from rlbook.aggregation import masked_mean, response_mask
from rlbook.kl import kl_estimate

__all__ = [
    "pass_at_k",
    "mean_pass_at_k",
    "best_of_n_kl",
    "entropy_from_logits",
    "clip_fractions",
    "approx_kl",
    "mean_length_by_correctness",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021, arXiv:2107.03374, eq. 1).

        pass@k = 1 − C(n − c, k) / C(n, k) = 1 − Π_{i = n−c+1}^{n} (1 − k / i)

    The product form avoids the huge binomials. c = 0 gives 0; n − c < k gives 1 (every draw of k
    samples contains a correct one).
    """
    n = check_int("n", n, minimum=1)
    c = check_int("c", c, minimum=0)
    k = check_int("k", k, minimum=1)
    if c > n:
        raise ValueError(f"c must be <= n={n}, got {c}")
    if k > n:
        raise ValueError(f"k must be <= n={n}, got {k}")
    if n - c < k:
        return 1.0
    all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        all_wrong *= 1.0 - k / i
    return 1.0 - all_wrong


def mean_pass_at_k(correct, k: int) -> float:
    """pass@k on a set of prompts: ``pass_at_k`` of each prompt, averaged over the prompts.

    ``correct`` is a (P, n) table of n samples for each of P prompts, 1 (or True) where a sample is
    correct; 1 ≤ k ≤ n. The average is taken with ``math.fsum``: exact, whatever the prompts' order.
    """
    correct = torch.as_tensor(correct)
    if correct.dim() != 2 or correct.numel() == 0:
        raise ValueError(f"correct must be a non-empty (prompts, samples) table, got shape {tuple(correct.shape)}")
    if not ((correct == 0) | (correct == 1)).all():
        raise ValueError("correct must hold only 0/1 (or False/True) entries")
    n = correct.shape[1]
    counts = correct.sum(dim=1).tolist()
    return math.fsum(pass_at_k(n, int(c), k) for c in counts) / len(counts)


def best_of_n_kl(n: int) -> float:
    """KL(π_best-of-n ‖ π) = log n − (n − 1)/n, the analytic formula for best-of-n sampling.

    The formula is the one used since Stiennon et al. (2020, arXiv:2009.01325); Beirami et al. (2024,
    "Theoretical guarantees on the best-of-n alignment policy", arXiv:2401.01879) prove it is an
    upper bound on the true KL, and study how loose it can be.
    """
    n = check_int("n", n, minimum=1)
    return math.log(n) - (n - 1) / n


def entropy_from_logits(logits) -> torch.Tensor:
    """Per-position entropy H = −Σ_v p_v log p_v of softmax(logits) over the last axis."""
    logits = as_float_tensor("logits", logits)
    if logits.dim() < 1 or logits.shape[-1] < 1:
        raise ValueError(f"logits must have a vocabulary axis last, got shape {tuple(logits.shape)}")
    log_probs = torch.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def clip_fractions(ratio, advantages, mask, *, eps_low: float, eps_high: float) -> dict[str, float]:
    """Fractions of unmasked tokens whose PPO gradient is clipped to zero.

    ``low``: r < 1 − ε_low with A < 0; ``high``: r > 1 + ε_high with A > 0 (the two regions where
    min(rA, clip(r)A) picks the constant clipped branch); ``total`` is their sum.
    """
    ratio = as_float_tensor("ratio", ratio, ndim=(2,))
    advantages = as_float_tensor("advantages", advantages, ndim=(1, 2))
    if advantages.dim() == 1:
        if advantages.shape[0] != ratio.shape[0]:
            expected = f"({ratio.shape[0]},) or {tuple(ratio.shape)}"
            raise ValueError(f"advantages must have shape {expected}, got {tuple(advantages.shape)}")
        advantages = advantages.unsqueeze(1).expand_as(ratio)
    check_same_shape(ratio=ratio, advantages=advantages)
    mask = response_mask(mask)
    low = ((ratio < 1 - eps_low) & (advantages < 0)).float()
    high = ((ratio > 1 + eps_high) & (advantages > 0)).float()
    low, high = masked_mean(low, mask).item(), masked_mean(high, mask).item()
    return {"low": low, "high": high, "total": low + high}


def approx_kl(logp, old_logp, mask, *, estimator: str = "k3") -> float:
    """Mean per-token estimate of KL(π_old ‖ π_θ) on tokens sampled from π_old (default k3).

    How far one update moved the policy; PPO implementations log it to stop an epoch early.
    The estimators take the *sampling* policy first, so the roles are (old_logp, logp).
    """
    kl = kl_estimate(torch.as_tensor(old_logp).detach(), torch.as_tensor(logp).detach(), estimator)
    return masked_mean(kl, response_mask(mask)).item()


def mean_length_by_correctness(lengths, correct) -> dict[str, float]:
    """Mean response length of correct and of incorrect responses (NaN where a class is empty).

    Dr.GRPO (Liu et al. 2025, arXiv:2503.20783) shows that 1/|o| normalisation lets *incorrect*
    responses grow long; this is the number that makes it visible.
    """
    lengths = as_float_tensor("lengths", lengths, ndim=(1,))
    correct = torch.as_tensor(correct)
    if correct.shape != lengths.shape:
        raise ValueError(f"correct must have shape {tuple(lengths.shape)}, got {tuple(correct.shape)}")
    correct = correct.bool()
    return {
        "correct": lengths[correct].mean().item() if correct.any() else math.nan,
        "incorrect": lengths[~correct].mean().item() if (~correct).any() else math.nan,
    }
