"""Self-checking exercises of lesson 00 (the tour)."""

from __future__ import annotations

from rlbook.exercises.framework import _call, _failed, _not_attempted, _verdict
from rlbook.metrics import pass_at_k

CASES = [(16, 0, 1), (16, 3, 1), (16, 3, 8), (16, 15, 2), (10, 10, 5), (20, 5, 4), (8, 1, 8), (200, 17, 10)]


def check_pass_at_k(fn) -> bool | None:
    """Check a reader's ``fn(n, c, k)`` against the library's unbiased estimator, naming the likely mistake.

    Returns True when every case matches, False (printing what is wrong) otherwise, and None when
    the exercise is not attempted yet (``fn`` is None or raises ``NotImplementedError``).
    """
    if _not_attempted(fn, "pass@k estimator"):
        return None
    answers = []
    for n, c, k in CASES:
        result, error = _call(fn, n, c, k)
        if error:
            return _failed(error, f"pass@k(n={n}, c={c}, k={k}): ")
        if result.numel() != 1:
            return _verdict(False, "", f"pass@k(n={n}, c={c}, k={k}): return one number, got shape "
                                       f"{tuple(result.shape)}")
        answers.append(((n, c, k), float(result)))
    for (n, c, k), got in answers:
        want = pass_at_k(n, c, k)
        if abs(got - want) > 1e-9:
            plug_in = 1 - (1 - c / n) ** k
            if abs(got - plug_in) < 1e-9:
                hint = ("this is the plug-in estimate 1 − (1 − c/n)^k: it treats the n samples as if they "
                        "were drawn with replacement and is biased low; count the k-subsets with no "
                        "correct sample instead: 1 − C(n−c, k) / C(n, k)")
            elif abs(got - c / n) < 1e-9:
                hint = "this is pass@1 for every k: the estimate must grow with k"
            else:
                hint = "compare with 1 − C(n−c, k) / C(n, k); watch the case n − c < k, where it is exactly 1"
            print(f"pass@k(n={n}, c={c}, k={k}) should be {want:.6f}, got {got}: {hint}")
            return False
    print(f"Correct on all {len(CASES)} cases.")
    return True
