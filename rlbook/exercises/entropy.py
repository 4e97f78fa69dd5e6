"""Checker for the exercise of lesson 16 (entropy collapse): the first-order entropy change of a
natural policy-gradient step on a softmax.

The reader writes ``my_entropy_change(logits, advantages, lr) -> float``: for π = softmax(z) and the
natural step Δz = η·(A − E_π[A]), the first-order change of the entropy,
ΔH ≈ −η·Cov_{a∼π}(log π(a), A(a)) (Cui et al. 2025, arXiv:2505.22617, §3). The checker
compares it with ``rlbook.entropy.predicted_entropy_change`` of
``rlbook.entropy.policy_gradient_logit_step(..., natural=True)`` on a few policies (with advantages
whose mean under π is not 0) and, when it differs, names the likely mistake: the sign, the vanilla
weighting π·A, no centring, a uniform average over actions instead of one under π, η left out, or
the exact change H(softmax(z + Δz)) − H(softmax(z)) in place of its first-order prediction.
"""

from __future__ import annotations

import torch

from rlbook.entropy import entropy_change, policy_gradient_logit_step, predicted_entropy_change
from rlbook.exercises.framework import FunctionExercise

__all__ = ["CASES", "reference_entropy_change", "check_entropy_change"]

# (logits, advantages, lr); the advantages' mean under π is not 0, so forgetting to centre shows.
CASES = (
    ((2.0, 0.5, 0.0, -1.0), (1.0, 0.0, 0.0, 0.0), 0.5),
    ((0.0, 1.0, -0.5, 0.3, 2.0), (0.0, 0.0, 1.0, 1.0, 0.0), 0.1),
    ((1.5, -0.5, 0.2), (2.0, -1.0, 0.5), 1.0),
)
TOLERANCE = 1e-6


def reference_entropy_change(logits, advantages, lr: float) -> float:
    """−Cov_π(log π, Δz) for the natural step Δz = η·(A − E_π[A]), from the library."""
    delta = policy_gradient_logit_step(logits, advantages, lr, natural=True)
    return predicted_entropy_change(logits, delta)


def _mistakes(logits, advantages, lr: float) -> dict[str, tuple[float, str]]:
    z = torch.as_tensor(logits, dtype=torch.float64)
    a = torch.as_tensor(advantages, dtype=torch.float64)
    log_p = torch.log_softmax(z, 0)
    p = log_p.exp()
    right = reference_entropy_change(logits, advantages, lr)
    vanilla = predicted_entropy_change(logits, policy_gradient_logit_step(logits, advantages, lr))
    uniform = -lr * float(((log_p - log_p.mean()) * (a - a.mean())).mean())
    exact = entropy_change(logits, policy_gradient_logit_step(logits, advantages, lr, natural=True))
    return {
        "sign": (-right, "the sign is flipped: ΔH ≈ −η·Cov(log π, A); rewarding a likely action lowers the entropy"),
        "vanilla": (vanilla, "that is the vanilla step Δz = η·π·A; the natural step moves each logit by η·A itself"),
        "uncentred": (-lr * float((p * log_p * a).sum()), "not centred: a covariance subtracts the means "
                                                           "(E_π[log π] = −H and E_π[A]) before taking E_π[·]"),
        "uniform": (uniform, "the means and the average are uniform over actions; they are expectations under π"),
        "no_lr": (right / lr, "η is missing: the change is proportional to the step size"),
        "exact": (exact, f"that is the exact change H(softmax(z + Δz)) − H(softmax(z)) = {exact:.6f}; the "
                         f"exercise asks for its first-order prediction −η·Cov_π(log π, A) = {right:.6f}, "
                         "which differs from it at order η²"),
    }


def _cases():
    return [(torch.tensor(logits, dtype=torch.float64), torch.tensor(advantages, dtype=torch.float64), lr)
            for logits, advantages, lr in CASES]


def _where(z, a, lr) -> str:
    return f"logits={tuple(z.tolist())}, advantages={tuple(a.tolist())}, lr={lr}"


check_entropy_change = FunctionExercise(
    "check_entropy_change",
    what="entropy-change function",
    cases=_cases,
    reference=reference_entropy_change,
    mistakes=_mistakes,
    label=_where,
    checks=(lambda result, reference, *case: (f"return one number, got shape {tuple(result.shape)}"
                                              if result.numel() != 1 else None),),
    close=lambda result, expected: abs(float(result) - float(expected)) < TOLERANCE,
    wrong=lambda *case: f"({_where(*case)}) ",
    otherwise=lambda result, reference, *case: (f"{_where(*case)}: expected {float(reference):.6f}, "
                                                f"got {float(result):.6f}"),
    success=f"matches −η·Cov_π(log π, A) on {len(CASES)} policies",
    doc="""Check ``fn(logits, advantages, lr) -> float`` (1-D float64 tensors and a float) on ``CASES``.

    Prints a verdict naming the likely mistake; returns True / False, or None when ``fn`` is None
    or raises ``NotImplementedError`` (not attempted yet).
    """)
