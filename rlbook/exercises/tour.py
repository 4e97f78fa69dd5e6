"""Self-checking exercises of lesson 00 (the tour)."""

from __future__ import annotations

from rlbook.exercises.framework import FLOAT32_NUMBER_NOTE, FunctionExercise, _one_number, _within
from rlbook.metrics import pass_at_k

CASES = [(16, 0, 1), (16, 3, 1), (16, 3, 8), (16, 15, 2), (10, 10, 5), (20, 5, 4), (8, 1, 8), (200, 17, 10)]


PLUG_IN_HINT = ("this is the plug-in estimate 1 − (1 − c/n)^k: it treats the n samples as if they were drawn "
                "with replacement and is biased low; count the k-subsets with no correct sample instead: "
                "1 − C(n−c, k) / C(n, k)")


def _where(n: int, c: int, k: int) -> str:
    return f"pass@k(n={n}, c={c}, k={k})"


def _message(hint: str, result, reference, n: int, c: int, k: int) -> str:
    return f"{_where(n, c, k)} should be {float(reference):.6f}, got {float(result)}: {hint}"


check_pass_at_k = FunctionExercise(
    "check_pass_at_k", what="pass@k estimator", cases=lambda: CASES, reference=pass_at_k,
    mistakes=lambda n, c, k: {"plug_in": (1 - (1 - c / n) ** k, PLUG_IN_HINT),
                              "pass_at_1": (c / n, "this is pass@1 for every k: the estimate must grow with k")},
    label=_where, checks=(_one_number(label=_where),), close=_within(1e-9),
    together=lambda *case: "all",  # every case runs (errors first) before the first wrong one is diagnosed
    named=_message,
    otherwise=lambda result, reference, *case: _message(
        "compare with 1 − C(n−c, k) / C(n, k); watch the case n − c < k, where it is exactly 1", result, reference,
        *case),
    marks=("", ""), success=f"Correct on all {len(CASES)} cases.",
    float32_success=f"Correct on all {len(CASES)} cases {FLOAT32_NUMBER_NOTE}.",
    doc="""Check a reader's ``fn(n, c, k)`` against the library's unbiased estimator, naming the likely mistake.

    Returns True when every case matches, False (printing what is wrong) otherwise, and None when
    the exercise is not attempted yet (``fn`` is None or raises ``NotImplementedError``).
    """)
