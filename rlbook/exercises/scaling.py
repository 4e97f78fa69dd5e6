"""Checker for the exercise of lesson 21 (scaling up): the memory a full fine-tuning run needs per parameter.

The reader writes ``my_bytes_per_parameter(weight_bytes) -> int``: for full fine-tuning with Adam, the
bytes each trained parameter costs: its weight and its gradient at ``weight_bytes`` each, Adam's two fp32
moments (8), and, in mixed precision (Micikevicius et al. 2018, arXiv:1710.03740; ZeRO, Rajbhandari et al.
2020, arXiv:1910.02054, §3), an fp32 master copy of the weights (4). For bf16 that is 2 + 2 + 4 + 8 = 16;
for fp32 the weights are their own master copy, 4 + 4 + 8 = 16 (``rlbook.scaling.training_memory``
counts both so). The checker asks for bf16 and fp32 and names the likely mistake from the pair of
answers: the master copy forgotten in bf16 or counted twice in fp32, gradients in fp32, the weights left out.
"""

from __future__ import annotations

from rlbook.exercises.pg_kl import _not_attempted, _verdict
from rlbook.scaling import optimizer_bytes_per_parameter

__all__ = ["reference_bytes_per_parameter", "check_bytes_per_parameter"]

def reference_bytes_per_parameter(weight_bytes: int) -> int:
    """Weight + gradient at ``weight_bytes``, + Adam's fp32 moments and (below fp32) an fp32 master copy."""
    return 2 * weight_bytes + optimizer_bytes_per_parameter(weight_bytes)


# Likely mistakes, each as the answers it gives for (bf16 = 2, fp32 = 4) bytes per weight.
MASTER_TWICE = ("an fp32 master copy beside fp32 weights: fp32 weights are their own master copy, so fp32 "
                "training keeps 4 + 4 + 8 = 16 bytes (weight, gradient, Adam's m and v)")
MISTAKES = {
    (16, 20): MASTER_TWICE,
    (20, 20): MASTER_TWICE + "; and in bf16 the weight and gradient take 2 bytes each, not 4",
    (12, 16): "8 bytes of states in bf16 where there are 12: the fp32 master copy (or one of Adam's two moments) "
              "is missing — mixed precision keeps an fp32 copy of the weights and m, v in fp32, 4 bytes each",
    (14, 12): "one of weight or gradient is missing: both are held at the training width",
    (14, 16): "one of weight or gradient is missing: both are held at the training width",
    (18, 16): "the gradient is counted in fp32: in mixed precision it has the weights' width",
    (18, 20): "the gradient is counted in fp32: in mixed precision it has the weights' width",
    (12, 8): "only the optimizer states: the weights and gradients themselves also take memory",
    (12, 12): "only the optimizer states: the weights and gradients themselves also take memory",
    (8, 16): "Adam's moments at the weights' width: they and the master copy are fp32 whatever the weights are",
}


def check_bytes_per_parameter(fn) -> bool | None:
    """Check ``fn(weight_bytes) -> int`` for bf16/fp16 (2) and fp32 (4) weights; prints a verdict naming
    the likely mistake; returns True / False, or None when ``fn`` is None or raises NotImplementedError."""
    if _not_attempted(fn, "bytes-per-parameter function"):
        return None
    answers = []
    for weight_bytes in (2, 4):
        try:
            answers.append(fn(weight_bytes))
        except NotImplementedError:
            print("Not attempted yet: replace the `raise NotImplementedError` with your answer.")
            return None
        except Exception as error:  # the reader's code: report, don't crash the cell
            return _verdict(False, "", f"your function raised {type(error).__name__}: {error}")
    right = tuple(reference_bytes_per_parameter(w) for w in (2, 4))
    if tuple(answers) == right:
        return _verdict(True, "16 bytes per parameter in bf16 (2 + 2 + 4 master + 8 Adam) and in fp32 "
                              "(4 + 4 + 8: the weights are their own master copy)", "")
    hint = MISTAKES.get(tuple(answers))
    return _verdict(False, "", f"for weight_bytes 2 and 4 expected {right}, got {tuple(answers)}"
                               + (f" — {hint}" if hint else ""))
