"""Self-checking exercises of lesson 05 (rejection sampling): the exact best-of-n distribution, and the
KL of best-of-n under a 0/1 verifier.

``check_best_of_n_probabilities(fn)`` runs the reader's ``fn(probs, rewards, n)`` (outcomes with
distinct rewards; ``check_best_of_n_probabilities_with_ties`` the same with tied rewards) on fixed cases, compares it with
``rlbook.metrics.best_of_n_distribution`` and, when it differs, names the usual mistake
it matches. ``check_verifier_best_of_n_kl(fn)`` does the same for ``fn(p, n)``, the KL of best-of-n
from the policy on a prompt it solves with probability p, against the KL of two coins
(``rlbook.kl.bernoulli_kl`` at q = 1 − (1 − p)^n). Each prints its verdict and returns True / False, or
None when not attempted yet (``None``, or a function that raises ``NotImplementedError``).

The comparison is to a relative 1e-4: a right answer computed in float32 (about 1e-5 off at
n = 16) passes, and every named mistake is far further off than that on these cases.
"""

from __future__ import annotations

import torch

import math

from rlbook.exercises.framework import DTYPE, FunctionExercise, _one_number
from rlbook.kl import bernoulli_kl
from rlbook.metrics import best_of_n_distribution, best_of_n_kl
from rlbook.reasoning import mode_model_rounds

__all__ = ["check_best_of_n_probabilities", "check_best_of_n_probabilities_with_ties", "check_mode_share",
           "check_verifier_best_of_n_kl"]

TOLERANCE = dict(rtol=1e-4, atol=1e-7)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.to(DTYPE), b.to(DTYPE), **TOLERANCE)


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
    at_least = 1 - cdf + probs  # π(reward ≥ r(y)): the cumulative taken from the top down
    below = cdf - probs          # π(reward < r(y)): the cumulative without y itself
    continuous = n * probs * cdf ** (n - 1)
    return {
        "continuous": (continuous,
                       "n π(y) F(y)^(n−1) is the continuous approximation; with outcomes of finite probability "
                       "the winner is y with probability F(y)^n − (F(y) − π(y))^n."),
        "cdf": (cdf ** n, "F(y)^n is the probability that the winner's reward is *at most* r(y); subtract "
                          "(F(y) − π(y))^n, the probability that it is below."),
        "worst_of_n": (at_least ** n - (at_least - probs) ** n,
                       "this is the distribution of the *worst* of n: the cumulative was summed from the highest "
                       "reward down (outcomes sorted in descending order). The best of n is ≤ r(y) when all n "
                       "draws are, so F(y) = π(reward ≤ r(y)) is summed from the lowest reward up."),
        "reward_order": (best_of_n_distribution(probs, rewards, n)[order],
                         "these are the right probabilities, but listed in reward order: put each back at its "
                         "outcome's position in the input (scatter with the sorting permutation), since "
                         "rewards are not sorted."),
        "inverse_permutation": (best_of_n_distribution(probs, rewards, n)[order][order],
                                "the right numbers, un-sorted with the wrong permutation: indexing the sorted "
                                "results with the sorting permutation (answer[order]) sorts them a second time. "
                                "Scatter them back instead (answer[order] = in_sorted_order), which applies its "
                                "inverse."),
        "exactly_one": (n * probs * below ** (n - 1),
                        "n π(y) (F(y) − π(y))^(n−1) counts only the case of exactly one draw at y and the rest below; "
                        "the winner is also y when several of the n draws are y. All n draws ≤ r(y), less all below: "
                        "F(y)^n − (F(y) − π(y))^n."),
        "pi_times": (probs * cdf ** (n - 1),
                     "π(y) F(y)^(n−1) forgets that any of the n draws can be the winner (a factor ≈ n)."),
        "unsorted": (probs.cumsum(0) ** n - (probs.cumsum(0) - probs) ** n,
                     "the cumulative F must run over outcomes sorted by reward, not in the order given."),
        "strict_cdf": (below ** n - (below - probs) ** n,
                       "F(y) was taken as π(reward < r(y)), strictly below y; the winner's reward is at most r(y) "
                       "when all n draws are, so F(y) = π(reward ≤ r(y)) includes y itself."),
        "appears": (1 - (1 - probs) ** n,
                    "1 − (1 − π(y))^n is the probability that y is *among* the n draws, not that it wins: it must "
                    "also beat the others (these numbers do not even sum to 1). The winner is y when all n draws "
                    "score at most r(y) and not all score below: F(y)^n − (F(y) − π(y))^n."),
        "one_short": (cdf ** (n - 1) - (cdf - probs) ** (n - 1),
                      "the exponent is n − 1: this is the best of n − 1 draws (at n = 2, π itself). All n draws must "
                      "score at most r(y): F(y)^n − (F(y) − π(y))^n."),
        "continuous_normalised": (continuous / continuous.sum(),
                                  "renormalising n π(y) F(y)^(n−1) makes it sum to 1 but leaves it the continuous "
                                  "approximation; with outcomes of finite probability the exact answer is "
                                  "F(y)^n − (F(y) − π(y))^n, which sums to 1 by itself."),
    }


def _one_probability_per_outcome(result, reference, *case) -> str | None:
    if result.shape != reference.shape:
        return f"expected one probability per outcome, shape {tuple(reference.shape)}, got {tuple(result.shape)}"
    return None


def _largest_difference(result, reference, probs, rewards, n) -> str:
    deviation = (result - reference).abs().max().item()
    return (f"n = {n}: expected {[round(v, 6) for v in reference.tolist()]}, got "
            f"{[round(float(v), 6) for v in result.flatten().tolist()]} (largest difference {deviation:.2e}; the check "
            "allows a relative 1e-4)")


check_best_of_n_probabilities = FunctionExercise(
    "check_best_of_n_probabilities", what="best-of-n probabilities", cases=_cases, reference=best_of_n_distribution,
    mistakes=_mistakes, prepare=lambda result, *case: result.to(DTYPE), checks=(_one_probability_per_outcome,),
    close=_close, wrong=lambda probs, rewards, n: f"n = {n}: ", otherwise=_largest_difference,
    success=f"Correct on all {len(_cases())} cases.",
    doc="""Check ``fn(probs, rewards, n) -> (V,) probabilities`` of the best-of-n winner (distinct rewards).""")


# ------------------------------------------------------------------------------ the same, with tied rewards


def _tied_cases() -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """Fixed (probs, rewards, n) with tied rewards: seven outcomes on four reward levels, not sorted by reward."""
    generator = torch.Generator().manual_seed(506)
    cases = []
    for n, levels in ((3, [0.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0]), (8, [0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 2.0])):
        probs = torch.softmax(torch.randn(7, dtype=DTYPE, generator=generator), dim=0)
        rewards = torch.tensor(levels, dtype=DTYPE)[torch.randperm(7, generator=generator)]
        cases.append((probs, rewards, n))
    return cases


def _tie_mistakes(probs: torch.Tensor, rewards: torch.Tensor, n: int) -> dict[str, tuple[torch.Tensor, str]]:
    same = rewards.unsqueeze(0) == rewards.unsqueeze(1)                 # (V, V): outcomes on one level
    level_mass = (same * probs.unsqueeze(0)).sum(dim=1)                  # p_c of each outcome's level
    level_cdf = torch.stack([probs[rewards <= r].sum() for r in rewards])  # F(c), the level's cumulative
    level_wins = level_cdf ** n - (level_cdf - level_mass) ** n          # the level's chance to hold the winner
    first = torch.tensor([int(torch.nonzero(row)[0]) == i for i, row in enumerate(same)])
    order = rewards.argsort(stable=True)
    cdf = torch.empty_like(probs)
    cdf[order] = probs[order].cumsum(0)
    return {
        "tie_equal": (level_wins / same.sum(dim=1),
                      "the tied level's chance was shared equally among its outcomes; the first of the tied draws "
                      "wins, so each tied outcome gets it in proportion to π: π(y)/p_c · (F(c)^n − F(c⁻)^n)."),
        "tie_whole_level": (level_wins,
                            "every outcome of a tied level got the whole level's chance F(c)^n − F(c⁻)^n, so the "
                            "level is counted once per outcome and the answer sums to more than 1; share it among "
                            "the level's outcomes in proportion to π: π(y)/p_c · (F(c)^n − F(c⁻)^n)."),
        "tie_one": (torch.where(first, level_wins, torch.zeros_like(probs)),
                    "the whole tied level went to one of its outcomes; the first of the tied draws wins, and it is "
                    "each tied outcome in proportion to π: π(y)/p_c · (F(c)^n − F(c⁻)^n)."),
        "tie_sort_order": (cdf ** n - (cdf - probs) ** n,
                           "the sort broke the tie: a tied outcome sorted later was counted as beating the ones "
                           "sorted before it. Take the cumulative over whole reward levels, F(c) − F(c⁻) = p_c, and "
                           "share the level's chance in proportion to π: π(y)/p_c · (F(c)^n − F(c⁻)^n)."),
        "tie_own_mass": (level_cdf ** n - (level_cdf - probs) ** n,
                         "F(c)^n − (F(c) − π(y))^n takes away only y's own mass, as if y were alone on its level; "
                         "the level's chance is F(c)^n − F(c⁻)^n, shared in proportion to π: "
                         "π(y)/p_c · (F(c)^n − F(c⁻)^n)."),
    }


check_best_of_n_probabilities_with_ties = FunctionExercise(
    "check_best_of_n_probabilities_with_ties", what="best-of-n probabilities with ties", cases=_tied_cases,
    reference=best_of_n_distribution, mistakes=_tie_mistakes, prepare=lambda result, *case: result.to(DTYPE),
    checks=(_one_probability_per_outcome,), close=_close, wrong=lambda probs, rewards, n: f"n = {n} (tied rewards): ",
    otherwise=_largest_difference, success=f"Correct on all {len(_tied_cases())} cases with tied rewards.",
    doc="""Check ``fn(probs, rewards, n) -> (V,) probabilities`` of the best-of-n winner when rewards tie (the first
    of the tied draws wins, so a level's chance is shared in proportion to π).""")


# ------------------------------------------------------------------------------ the KL under a verifier

# (p, n): together the cases tell every named mistake apart; n = 1 (KL 0) checks the edge
VERIFIER_CASES = ((0.05, 4), (0.3, 8), (0.6, 2), (0.3, 1))


def _verifier_kl(p: float, n: int) -> float:
    return float(bernoulli_kl(1 - (1 - p) ** n, p))


def _verifier_mistakes(p: float, n: int) -> dict[str, tuple[float, str]]:
    q = 1 - (1 - p) ** n

    def coins(right, base):
        return float(bernoulli_kl(right, base))

    return {
        "formula": (best_of_n_kl(n), "log n − (n − 1)/n is the formula for a reward with no ties, and only an upper "
                                     "bound; with a 0/1 verifier best-of-n only moves mass between the right and the "
                                     "wrong answers, so its KL is that of two coins, q = 1 − (1 − p)^n against p."),
        "ceiling": (math.log(1 / p), "log(1/p) is the limit n → ∞ (π conditioned on success); at a finite n the winner "
                                     "is right with probability q = 1 − (1 − p)^n, not 1."),
        "one_term": (q * math.log(q / p), "only the right answers' term is there: the wrong ones, probability 1 − q "
                                          "under best-of-n and 1 − p under π, add (1 − q) log((1 − q)/(1 − p))."),
        "reverse": (coins(p, q), "this is KL(π ‖ π_n), the other direction; best-of-n's KL is measured from the "
                                 "policy it samples: KL(π_n ‖ π), with π_n's probabilities in front of the logs."),
        "linear_q": (coins(min(1.0, n * p), p), "q ≈ n p holds only while n p is small; the winner is right unless "
                                                "all n draws are wrong: q = 1 − (1 − p)^n."),
        "all_right": (coins(p ** n, p), "p^n is the chance that all n draws are right; the best of n is right when "
                                        "at least one is: q = 1 − (1 − p)^n."),
        "not_all_right": (coins(1 - p ** n, p), "1 − p^n is the chance that not all n draws are right; the best of n "
                                                "is right when at least one is, i.e. unless all n are wrong: "
                                                "q = 1 − (1 − p)^n."),
        "smaller_bound": (min(best_of_n_kl(n), math.log(1 / p)),
                          "the smaller of the two bounds, log n − (n − 1)/n and log(1/p), is still a bound, not the "
                          "KL: the winner is right with probability q = 1 − (1 − p)^n, and the KL is that of two "
                          "coins, q against p."),
        "flipped_wrong_log": (q * math.log(q / p) + (1 - q) * math.log((1 - p) / (1 - q)),
                              "the wrong answers' log is upside down: their term is (1 − q) log((1 − q)/(1 − p)), "
                              "best-of-n's probability over π's, as in the right answers' term."),
        "log10": (_verifier_kl(p, n) / math.log(10), "this is the right KL with log base 10; the lesson measures KL in "
                                                     "nats, with the natural log."),
        "bits": (_verifier_kl(p, n) / math.log(2), "this is the right KL in bits (log base 2); the lesson measures KL "
                                                   "in nats, with the natural log."),
    }


def _named_crash(fn):
    """``fn``, with a hint added to an error it raises at n = 1 when its answers elsewhere fit q = 1 − (1 − p)^(n − 1)
    (the exponent off by one: q = 0 at n = 1, and a log of 0)."""

    def called(p, n):
        try:
            return fn(p, n)
        except NotImplementedError:
            raise
        except Exception as error:
            if n == 1 and _off_by_one(fn):
                raise type(error)(f"{error}. At n = 1 your q is 0: with q = 1 − (1 − p)^(n − 1) the exponent is one "
                                  "short; the best of n draws is wrong only if all n are, q = 1 − (1 − p)^n") from error
            raise

    return called


def _off_by_one(fn) -> bool:
    """Whether ``fn`` matches the KL with q = 1 − (1 − p)^(n − 1) on the cases with n ≥ 2."""
    try:
        return all(math.isclose(float(fn(p, n)), float(bernoulli_kl(1 - (1 - p) ** (n - 1), p)), rel_tol=1e-4, abs_tol=1e-7)
                   for p, n in VERIFIER_CASES if n >= 2)
    except Exception:
        return False


def _verifier_otherwise(value: float, expected: float, p: float, n: int) -> str:
    if value < -1e-9:
        return (f"p = {p}, n = {n}: got {value:.6f}, but a KL is never negative: a log's argument is upside down "
                "(log(p/q) for log(q/p)), or a term is missing")
    return f"p = {p}, n = {n}: expected {expected:.6f} nats, got {value:.6f}"


check_verifier_best_of_n_kl = FunctionExercise(
    "check_verifier_best_of_n_kl", what="verifier KL", cases=lambda: VERIFIER_CASES, reference=_verifier_kl,
    mistakes=_verifier_mistakes, checks=(_one_number("expected one number (the KL in nats)"),),
    close=lambda result, expected: math.isclose(float(result), float(expected), rel_tol=1e-4, abs_tol=1e-7),
    together=lambda p, n: "all", across=True, wrong=lambda p, n: f"p = {p}, n = {n}: ", adapt=_named_crash,
    otherwise=lambda result, reference, p, n, **counts: _verifier_otherwise(float(result), float(reference), p, n),
    success=f"Correct on all {len(VERIFIER_CASES)} cases.",
    doc="""Check ``fn(p, n) -> KL(π_n ‖ π)`` in nats for best-of-n under a 0/1 verifier with success rate p.

    A wrong answer is named by the mistake that matches it on *every* case, not on the first alone:
    near q = 1 (p = 0.05, n = 4) q = 1 − p^n and the ceiling log(1/p) agree to 1e-5, and only the
    other cases tell them apart.""")


# ------------------------------------------------------------------------------ one round of the mode model (§3)

# (q, a_s, a_d): the run's base (lesson 05 §3), a case where the mode is not the better one, and a rare mode
MODE_CASES = ((0.274, 0.923, 0.046), (0.35, 0.3, 0.6), (0.1, 0.9, 0.2))


def _mode_share(q: float, a_s: float, a_d: float) -> float:
    return mode_model_rounds(q, a_s, a_d, 1)["share"][1]


def _mode_mistakes(q: float, a_s: float, a_d: float) -> dict[str, tuple[float, str]]:
    right_in, right_out = q * a_s, (1 - q) * a_d
    return {
        "unnormalised": (right_in, "q·a_s is P(in the mode and right); the kept data are the right answers only, so "
                                   "divide by P(right) = q·a_s + (1 − q)·a_d (Bayes' rule)."),
        "pass_at_1": (right_in + right_out, "q·a_s + (1 − q)·a_d is the policy's pass@1, P(right); the next share is "
                                            "P(in the mode | right) = q·a_s / (q·a_s + (1 − q)·a_d)."),
        "other_mode": (right_out / (right_in + right_out), "this is the share of the *other* mode among right answers; "
                                                          "the mode's own is q·a_s / (q·a_s + (1 − q)·a_d)."),
        "odds": (right_in / right_out, "q·a_s / ((1 − q)·a_d) are the odds of the mode among right answers, not its "
                                       "share: the share is odds / (1 + odds)."),
        "accuracy_only": (a_s / (a_s + a_d), "a_s / (a_s + a_d) leaves out how often the policy opens the mode now: "
                                             "weight each mode's accuracy by its share, q·a_s / (q·a_s + (1 − q)·a_d)."),
    }


check_mode_share = FunctionExercise(
    "check_mode_share", what="mode share", cases=lambda: MODE_CASES, reference=_mode_share, mistakes=_mode_mistakes,
    checks=(_one_number("expected one number (the share after one round)"),),
    close=lambda result, expected: math.isclose(float(result), float(expected), rel_tol=1e-4, abs_tol=1e-7),
    wrong=lambda q, a_s, a_d: f"q = {q}, a_s = {a_s}, a_d = {a_d}: ",
    otherwise=lambda result, reference, q, a_s, a_d, **counts: (
        f"q = {q}, a_s = {a_s}, a_d = {a_d}: expected {float(reference):.6f}, got {float(result):.6f}"),
    success=f"Correct on all {len(MODE_CASES)} cases.",
    doc="""Check ``fn(q, a_s, a_d) -> float``: the mode model's share in the mode after one round of rejection-sampling
    SFT (``rlbook.reasoning.mode_model_rounds``), from the share q and the accuracies in and out of the mode.""")
