"""Checkers for the exercises of lesson 10 (Dr.GRPO): each token's weight under an aggregation mode,
and GRPO's per-question factor g_G(p) (``check_difficulty_factor``).

The reader writes ``my_token_weights(mask, mode, max_len)`` returning the (B, T) weights w with
loss = Σ w · ℓ, for the modes of ``rlbook.aggregation`` (GRPO's ``seq_mean_token_mean``, DAPO's
``token_mean``, Dr.GRPO's ``seq_mean_token_sum_norm``); ``check_token_weights`` compares it with
``rlbook.aggregation.token_weights`` and, when it differs, names the mode it was confused with or
the normaliser that went wrong.
"""

from __future__ import annotations

import math

import torch

from rlbook.advantages import difficulty_factor
from rlbook.aggregation import AGGREGATION_MODES, token_weights
from rlbook.exercises.framework import FunctionExercise, _close, _one_number

__all__ = ["EXERCISE_MODES", "check_token_weights", "check_difficulty_factor"]

EXERCISE_MODES = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")
MAX_LEN = 13
MODE_NAMES = {
    "seq_mean_token_mean": "GRPO's seq_mean_token_mean (1/(B·|o_i|): each response counts equally)",
    "token_mean": "DAPO's token_mean (1/Σ_j |o_j|: each token of the batch counts equally)",
    "seq_mean_token_sum": "seq_mean_token_sum (1/B: each response's tokens summed)",
    "seq_mean_token_sum_norm": "Dr.GRPO's seq_mean_token_sum_norm (1/(B·L), L the budget max_len)",
}


def _masks() -> list[torch.Tensor]:
    """Fixed right-padded masks of responses of mixed lengths (B = 3 and B = 4, width T = 11).

    T (11), the longest response (10 and 9), the budget MAX_LEN (13) and MAX_LEN − 1 (12) all differ, so
    that dividing by any one of them in place of another is told apart."""
    masks = []
    for lengths in ((2, 5, 10), (1, 7, 3, 9)):
        masks.append((torch.arange(11).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).double())
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
    mistakes["padded_width"] = (mask / (n_seqs * width), f"for mode {mode!r} {padded_width_hints[mode]}")
    if mode == "seq_mean_token_sum_norm":
        mistakes["budget_minus_one"] = (
            mask / (n_seqs * (MAX_LEN - 1)),
            f"for mode {mode!r} you divided by L − 1 = {MAX_LEN - 1}: Dr.GRPO divides by the budget L = max_len itself")
    if mode == "token_mean":
        mistakes["per_row_count"] = (
            mask / mask.sum(1, keepdim=True),
            f"for mode {mode!r} you divided each response by its own length |o_i| (and not by B): token_mean divides "
            "every token by the same number, the batch's token count Σ_j |o_j| (mask.sum())")
    if mode == "seq_mean_token_sum_norm":
        longest = int(mask.sum(1).max())
        mistakes["longest"] = (
            mask / (n_seqs * longest),
            f"for mode {mode!r} you divided by the longest response of this batch, max_j |o_j| = {longest}, "
            f"instead of the budget L = max_len: the longest response changes from batch to batch (and "
            f"with the policy), so the normaliser would again depend on the lengths; Dr.GRPO's L is a constant")
    mistakes["no_batch"] = (
        token_weights(mask, mode, max_len=MAX_LEN) * (n_seqs if mode != "token_mean" else 1),
        f"for mode {mode!r} the weights are B times too large: average over the B responses too (divide by B)")
    mistakes["padding"] = (
        torch.ones_like(mask) / (n_seqs * width) if mode == "seq_mean_token_sum_norm" else
        (torch.ones_like(mask) / mask.numel() if mode == "token_mean" else None),
        f"for mode {mode!r} padding tokens got a weight: multiply by the mask so that padding counts for nothing")
    if mode == "token_mean":
        mistakes["also_batch"] = (
            token_weights(mask, mode, max_len=MAX_LEN) / n_seqs,
            f"for mode {mode!r} the weights are B times too small: token_mean divides by the batch's token count Σ_j |o_j| "
            "only; that count already spans the B responses, so do not divide by B as well")
    mistakes["negated"] = (
        -token_weights(mask, mode, max_len=MAX_LEN),
        f"for mode {mode!r} the weights have the wrong sign: they are positive (the sign of the push comes from the advantage "
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


# ----------------------------------------------------------------------------------------------
# g_G(p): the factor GRPO's σ puts on a question's own policy gradient ∇p


_FACTOR_CASES = ((0.05, 8), (0.5, 8), (0.25, 4), (0.125, 16))


def _advantage(k: int, g: int, correct: bool) -> float:
    """GRPO's advantage (population σ) of a right (``correct``) or wrong answer in a group with k of g right;
    a flat group's is 0 (``group_advantages``)."""
    if k <= 0 or k >= g:
        return 0.0
    rate = k / g
    sigma = math.sqrt(rate * (1 - rate))
    return (1 - rate) / sigma if correct else -rate / sigma


def _factor_with_counts(p, g, right_count, wrong_count) -> float:
    """Σ_j Binomial(g − 1, p)(j) · (Â of a right answer in a group of ``right_count(j)`` right − Â of a wrong one in a
    group of ``wrong_count(j)`` right): the exact g_G(p) with j + 1 and j; the other pairs are the off-by-one slips."""
    return sum(math.comb(g - 1, j) * p ** j * (1 - p) ** (g - 1 - j)
               * (_advantage(right_count(j), g, True) - _advantage(wrong_count(j), g, False)) for j in range(g))


def _factor_mistakes(p, group_size):
    g = group_size
    off_by_one = ("the group's count of right answers is off by one: with j of the other G − 1 right, a right "
                  "answer's group has j + 1 right and a wrong answer's group has j; ")
    return {
        "same_j": (_factor_with_counts(p, g, lambda j: j, lambda j: j),
                   off_by_one + "you used j for both (the right answer left out of its own group's count)"),
        "same_j_plus_1": (_factor_with_counts(p, g, lambda j: j + 1, lambda j: j + 1),
                          off_by_one + "you used j + 1 for both (the wrong answer counted as right)"),
        "swapped": (_factor_with_counts(p, g, lambda j: j, lambda j: j + 1),
                    off_by_one + "you swapped them (j for the right answer's group, j + 1 for the wrong one's)"),
        "dr_grpo": (difficulty_factor(p, g, "dr_grpo"),
                    "that is Dr.GRPO's factor (G − 1)/G, the same for every question: GRPO divides each group's "
                    "advantages by that group's σ, so the factor depends on p"),
        "one_over_sigma": (1 / math.sqrt(p * (1 - p)),
                           "that is 1/σ of one realised group with exactly p·G right answers: a question of solve "
                           "rate p produces groups of every k, so average over the j right answers among the other "
                           "G − 1 (Binomial(G − 1, p)), flat groups giving 0"),
        "bessel": (difficulty_factor(p, g, "grpo", unbiased_std=True),
                   "you used the Bessel-corrected σ (divide by G − 1); the lesson's table and the library's default "
                   "use the population σ (divide by G)"),
        "all_G": (sum(math.comb(g, k) * p ** k * (1 - p) ** (g - k) * (2 * math.sqrt(k / g * (1 - k / g)) if 0 < k < g else 0)
                      for k in range(g + 1)),
                  "you averaged a whole group's Σ|Â|/G over k ~ Binomial(G, p): the factor conditions on one "
                  "response's reward, R_i = 1 against R_i = 0, with only the other G − 1 rewards random"),
    }


def _not_nan(result, reference, p, group_size):
    if bool(torch.isnan(result).any()):
        return (f"p = {p}, G = {group_size}: got nan. A flat group (all right or all wrong, σ = 0) gives 0/0: its "
                "advantages are 0 (group_advantages), so leave the j = 0 term of a wrong answer and the j = G − 1 term "
                "of a right answer at 0 instead of dividing by σ")
    return None


check_difficulty_factor = FunctionExercise(
    "check_difficulty_factor", what="difficulty factor", cases=lambda: list(_FACTOR_CASES),
    reference=lambda p, group_size: difficulty_factor(p, group_size, "grpo"),
    mistakes=_factor_mistakes, label=lambda p, group_size: f"p = {p}, G = {group_size}",
    wrong=lambda p, group_size: f"p = {p}, G = {group_size}: ",
    checks=(_one_number("return one number, g_G(p)", label=lambda p, group_size: f"p = {p}, G = {group_size}"),
            _not_nan),
    close=lambda result, expected: abs(float(result) - float(expected)) <= 1e-4 * max(1.0, abs(float(expected))),
    otherwise=lambda result, reference, p, group_size: (
        f"p = {p}, G = {group_size}: expected g = {float(reference):.4f}, got {float(result):.4f}"),
    success=f"g_G(p) matches on all {len(_FACTOR_CASES)} (p, G) pairs, e.g. "
            f"g_8(0.05) = {difficulty_factor(0.05, 8):.3f} against g_8(0.5) = {difficulty_factor(0.5, 8):.3f}",
    doc="""Check ``fn(p, group_size) -> g``, GRPO's factor E[Â | R=1] − E[Â | R=0] on a question's ∇p.

    Compared with ``difficulty_factor`` on four fixed (p, G) pairs; names the usual slips (Dr.GRPO's
    constant factor, one group's 1/σ, Bessel's σ, a whole-group average, the j / j + 1 off-by-one, the
    0/0 of a flat group). Returns True / False, or None
    when ``fn`` is None or raises ``NotImplementedError`` (not attempted yet).
    """)
