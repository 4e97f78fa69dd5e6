"""Self-checking exercise of lesson 05 (rejection sampling): the exact best-of-n distribution.

``check_best_of_n_probabilities(fn)`` runs the reader's ``fn(probs, rewards, n)`` (outcomes with
distinct rewards) on fixed cases, compares it with
``rlbook.metrics.best_of_n_distribution`` and, when it differs, names the usual mistake
it matches. It prints its verdict and returns True / False, or None when not attempted yet
(``None``, or a function that raises ``NotImplementedError``).
"""

from __future__ import annotations

import torch

from rlbook.exercises.pg_kl import DTYPE, _call, _close, _failed, _not_attempted, _verdict
from rlbook.metrics import best_of_n_distribution

__all__ = ["check_best_of_n_probabilities"]


def _cases() -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """Fixed (probs, rewards, n): six outcomes with distinct rewards, not sorted by reward."""
    generator = torch.Generator().manual_seed(505)
    cases = []
    for n in (2, 4, 16):
        probs = torch.softmax(1.5 * torch.randn(6, dtype=DTYPE, generator=generator), dim=0)
        rewards = torch.randperm(6, generator=generator).to(DTYPE)
        cases.append((probs, rewards, n))
    return cases


def _mistakes(probs: torch.Tensor, rewards: torch.Tensor, n: int) -> dict[str, tuple[torch.Tensor, str]]:
    order = rewards.argsort()
    cdf = torch.empty_like(probs)
    cdf[order] = probs[order].cumsum(0)
    below = cdf - probs
    return {
        "continuous": (n * probs * cdf ** (n - 1),
                       "n π(y) F(y)^(n−1) is the continuous approximation; with outcomes of finite probability "
                       "the winner is y with probability F(y)^n − (F(y) − π(y))^n."),
        "cdf": (cdf ** n, "F(y)^n is the probability that the winner's reward is *at most* r(y); subtract "
                          "(F(y) − π(y))^n, the probability that it is below."),
        "strict_cdf": (1 - (1 - cdf) ** n,
                       "1 − (1 − F(y))^n is about the *worst* of n (or the best-of-n of a reversed order); "
                       "the best of n is ≤ r when all n draws are."),
        "pi_times": (probs * cdf ** (n - 1),
                     "π(y) F(y)^(n−1) forgets that any of the n draws can be the winner (a factor ≈ n)."),
        "unsorted": (probs.cumsum(0) ** n - (probs.cumsum(0) - probs) ** n,
                     "the cumulative F must run over outcomes sorted by reward, not in the order given."),
    }


def check_best_of_n_probabilities(fn) -> bool | None:
    """Check ``fn(probs, rewards, n) -> (V,) probabilities`` of the best-of-n winner (distinct rewards)."""
    if _not_attempted(fn, "best-of-n probabilities"):
        return None
    for probs, rewards, n in _cases():
        result, error = _call(fn, probs.clone(), rewards.clone(), n)
        if error:
            return _failed(error)
        reference = best_of_n_distribution(probs, rewards, n)
        if result.shape != reference.shape:
            return _verdict(False, "", f"expected one probability per outcome, shape {tuple(reference.shape)}, "
                                       f"got {tuple(result.shape)}")
        if not _close(result.to(DTYPE), reference):
            for candidate, hint in _mistakes(probs, rewards, n).values():
                if _close(result.to(DTYPE), candidate):
                    return _verdict(False, "", f"n = {n}: {hint}")
            return _verdict(False, "", f"n = {n}: expected {[round(v, 4) for v in reference.tolist()]}, "
                                       f"got {[round(float(v), 4) for v in result.flatten().tolist()]}")
    return _verdict(True, f"Correct on all {len(_cases())} cases.", "")
