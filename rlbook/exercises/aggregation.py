"""Checker for the exercise of lesson 10 (Dr.GRPO): each token's weight under an aggregation mode.

The reader writes ``my_token_weights(mask, mode, max_len)`` returning the (B, T) weights w with
loss = Σ w · ℓ, for the modes of ``rlbook.aggregation`` (GRPO's ``seq_mean_token_mean``, DAPO's
``token_mean``, Dr.GRPO's ``seq_mean_token_sum_norm``); ``check_token_weights`` compares it with
``rlbook.aggregation.token_weights`` and, when it differs, names the mode it was confused with or
the normaliser that went wrong.
"""

from __future__ import annotations

import torch

from rlbook.aggregation import AGGREGATION_MODES, token_weights
from rlbook.exercises.framework import FunctionExercise, _close

__all__ = ["EXERCISE_MODES", "check_token_weights"]

EXERCISE_MODES = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")
MAX_LEN = 12
MODE_NAMES = {
    "seq_mean_token_mean": "GRPO's seq_mean_token_mean (1/(B·|o_i|): each response counts equally)",
    "token_mean": "DAPO's token_mean (1/Σ_j |o_j|: each token of the batch counts equally)",
    "seq_mean_token_sum": "seq_mean_token_sum (1/B: each response's tokens summed)",
    "seq_mean_token_sum_norm": "Dr.GRPO's seq_mean_token_sum_norm (1/(B·L), L the budget max_len)",
}


def _masks() -> list[torch.Tensor]:
    """Fixed right-padded masks of responses of mixed lengths (B = 3 and B = 4, width T = 10)."""
    masks = []
    for lengths in ((2, 5, 10), (1, 7, 3, 9)):
        masks.append((torch.arange(10).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).double())
    return masks


def _mistakes(mask: torch.Tensor, mode: str) -> dict[str, tuple[torch.Tensor, str]]:
    """The weights of the usual wrong answers for ``mode``, each with the hint naming it."""
    n_seqs, width = mask.shape
    mistakes = {
        other: (token_weights(mask, other, max_len=MAX_LEN),
                f"for mode {mode!r} you returned the weights of {MODE_NAMES[other]}; "
                f"{mode!r} is {MODE_NAMES[mode]}")
        for other in AGGREGATION_MODES if other != mode
    }
    padded_width_hints = {
        "token_mean": "you divided by B·T, every slot of the padded batch: token_mean divides by the number of "
                      "real tokens Σ_j |o_j| (mask.sum()), so padding does not dilute the loss",
        "seq_mean_token_mean": "you divided by the padded width T of this batch (a mean over the token axis, "
                               "padding included): GRPO divides each response by its own length |o_i| "
                               "(mask.sum(1, keepdim=True)), then by B",
        "seq_mean_token_sum_norm": "you divided by the padded width T of this batch instead of the budget "
                                   "L = max_len: then padding changes the loss, and L must be a constant (Dr.GRPO)",
    }
    mistakes["padded_width"] = (mask / (n_seqs * width), padded_width_hints[mode])
    mistakes["no_batch"] = (
        token_weights(mask, mode, max_len=MAX_LEN) * (n_seqs if mode != "token_mean" else 1),
        "the weights are B times too large: average over the B responses too (divide by B)")
    mistakes["padding"] = (
        torch.ones_like(mask) / (n_seqs * width) if mode == "seq_mean_token_sum_norm" else
        (torch.ones_like(mask) / mask.numel() if mode == "token_mean" else None),
        "padding tokens got a weight: multiply by the mask so that padding counts for nothing")
    if mode == "token_mean":
        mistakes["also_batch"] = (
            token_weights(mask, mode, max_len=MAX_LEN) / n_seqs,
            "the weights are B times too small: token_mean divides by the batch's token count Σ_j |o_j| "
            "only; that count already spans the B responses, so do not divide by B as well")
    mistakes["negated"] = (
        -token_weights(mask, mode, max_len=MAX_LEN),
        "the weights have the wrong sign: they are positive (the sign of the push comes from the advantage "
        "inside the loss ℓ, not from the weight)")
    return mistakes


def _cases():
    return [(mask, mode, MAX_LEN) for mask in _masks() for mode in EXERCISE_MODES]


def _one_weight_per_token(result, reference, mask, mode, max_len):
    if result.shape != reference.shape:
        return (f"mode {mode!r}: expected shape {tuple(reference.shape)} (one weight per token), "
                f"got {tuple(result.shape)}")
    return None


def _padding_weighted(result, reference, mask, mode, max_len):
    if _close(result * mask, reference):
        return (f"mode {mode!r}: the weights of the real tokens are right, but padding tokens got a weight: "
                "multiply by the mask so that padding counts for nothing")
    return None


def _first_column(result, reference, mask, mode, max_len):
    lengths = mask.sum(1).long().tolist()
    return (f"mode {mode!r}, lengths {lengths}: expected the first column {reference[:, 0].tolist()}, "
            f"got {result.detach()[:, 0].tolist()}")


check_token_weights = FunctionExercise(
    "check_token_weights", what="token-weight function", cases=_cases,
    reference=lambda mask, mode, max_len: token_weights(mask, mode, max_len=max_len),
    mistakes=lambda mask, mode, max_len: _mistakes(mask, mode), label=lambda mask, mode, max_len: f"mode {mode!r}",
    checks=(_one_weight_per_token,), partial=_padding_weighted, otherwise=_first_column,
    success=f"all {len(EXERCISE_MODES)} modes match rlbook.aggregation.token_weights on batches of mixed lengths",
    doc="""Check ``fn(mask, mode, max_len) -> (B, T) weights`` for every mode of ``EXERCISE_MODES``.

    Compared with ``rlbook.aggregation.token_weights`` on two fixed batches of mixed lengths
    (float64, max_len = 12). Prints a verdict naming the likely mistake; returns True / False, or
    None when ``fn`` is None or raises ``NotImplementedError`` (not attempted yet).
    """)
