"""Checker for the exercise of lesson 18 (sampler or thinker): pass@k from c correct of n samples.

The reader writes ``my_pass_at_k(n, c, k) -> float``: the unbiased estimate of Chen et al. (2021,
arXiv:2107.03374, §2.1), 1 − C(n − c, k) / C(n, k), the chance that k of the n samples drawn without
replacement hold a correct one. The checker compares it with ``rlbook.metrics.pass_at_k`` on a few
(n, c, k), edge cases included, and when it differs names the likely mistake: the plug-in
1 − (1 − c/n)^k (biased low), the probability that all k fail instead of that one succeeds, c/n
for every k, counting k-subsets of the correct samples instead of the wrong ones, and the product of
the estimator started one factor early.
"""

from __future__ import annotations

import math

from rlbook.coverage import plug_in_pass_at_k
from rlbook.exercises.pg_kl import _call, _failed, _not_attempted, _verdict
from rlbook.metrics import pass_at_k

__all__ = ["CASES", "check_pass_at_k"]

# (n, c, k): typical cases where the plug-in estimate differs from the unbiased one, then the edges:
# no correct sample, fewer wrong samples than k, k = n, k = 1.
CASES = ((20, 5, 4), (256, 3, 64), (10, 1, 5), (8, 0, 4), (8, 6, 4), (16, 4, 16), (16, 4, 1))
TOLERANCE = 1e-9


def _mistakes(n: int, c: int, k: int) -> dict[str, tuple[float, str]]:
    right = pass_at_k(n, c, k)
    return {
        "plug_in": (plug_in_pass_at_k(n, c, k), "that is the plug-in 1 − (1 − c/n)^k: it treats the draws as with "
                                                "replacement, and by Jensen it is biased low; count the k-subsets "
                                                "of the n samples instead: 1 − C(n − c, k)/C(n, k)"),
        "complement": (1.0 - right, "that is the probability that all k samples fail, C(n − c, k)/C(n, k); "
                                    "pass@k is 1 minus it"),
        "pass_at_1": (c / n, "that is c/n, pass@1, whatever k is: pass@k grows with k"),
        "correct_subsets": (1.0 - math.comb(c, k) / math.comb(n, k),
                            "the subsets to count are those of the n − c *wrong* samples (every one of the k fails), "
                            "not of the c correct ones"),
        "extra_factor": (1.0 - math.prod(1.0 - k / i for i in range(n - c, n + 1)) if n - c > 0 else None,
                         "off by one in the product: C(n − c, k)/C(n, k) = Π_{i=n−c+1}^{n} (1 − k/i), starting at "
                         "i = n − c + 1, not n − c"),
    }


def check_pass_at_k(fn) -> bool | None:
    """Check ``fn(n, c, k) -> float`` against ``rlbook.metrics.pass_at_k`` on ``CASES``.

    Prints a verdict naming the likely mistake; returns True / False, or None when ``fn`` is None or
    raises ``NotImplementedError`` (not attempted yet).
    """
    if _not_attempted(fn, "pass@k function"):
        return None
    for n, c, k in CASES:
        result, error = _call(fn, n, c, k)
        if error:
            return _failed(error, f"n={n}, c={c}, k={k}: ")
        if result.numel() != 1:
            return _verdict(False, "", f"return one number, got shape {tuple(result.shape)}")
        answer, right = float(result), pass_at_k(n, c, k)
        if abs(answer - right) < TOLERANCE:
            continue
        for wrong, hint in _mistakes(n, c, k).values():
            if wrong is not None and abs(answer - wrong) < TOLERANCE:
                return _verdict(False, "", f"(n={n}, c={c}, k={k}) {hint}")
        return _verdict(False, "", f"n={n}, c={c}, k={k}: expected {right:.6f}, got {answer:.6f}")
    return _verdict(True, f"matches the unbiased estimator on {len(CASES)} cases, edges included", "")
