"""Checkers for the exercises of lesson 18 (sampler or thinker).

``check_gap_se`` (the lesson's exercise): the reader writes ``my_gap_se(base_correct, policy_correct, k)
-> (gap, se)``, the policy's held-out pass@k minus the base's on the same problems and its standard
error clustered by problem (``rlbook.evidence.paired_pass_at_k_difference``). The checker runs it on fixed tables
where the usual mistakes give visibly different numbers, and names them: the gap the wrong way
round, the plug-in estimator, an SE that treats the P·n samples as independent (unclustered), an
SE that adds the two models' SEs as if they had been measured on different problems (unpaired),
the spread of the per-problem gaps returned for the SE of their mean, an SE of the within-problem
binomial noise only, a 95 % interval's half-width (1.96 × SE) returned for the SE, and the one-coin
curve of the pooled pass@1 (1 − (1 − p̄)^k, or pass@k of the pooled counts) in place of the mean of
the per-problem pass@k.

``check_lowest_curve`` (a short conceptual exercise on §3): five made-up models with the same pass@1
(``ONE_COIN_RATES``, none of them the lesson's worked examples); the reader names the one with the
lowest pass@k at k = 2 and at k = 1024. At k = 2 the gap below the one-coin curve is the variance of
the rates; as k → ∞ pass@k tends to the share of problems ever solved, but at a finite k a rate far
below 1/k acts like 0, so "support" alone does not answer k = 1024; the checker says which idea a
wrong answer missed.

``check_pass_at_k``: the reader writes ``my_pass_at_k(n, c, k) -> float``: the unbiased estimate of Chen et al. (2021,
arXiv:2107.03374, §2.1), 1 − C(n − c, k) / C(n, k), the chance that k of the n samples drawn without
replacement hold a correct one. The checker compares it with ``rlbook.metrics.pass_at_k`` on a few
(n, c, k), edge cases included, and when it differs names the likely mistake: the plug-in
1 − (1 − c/n)^k (biased low), the probability that all k fail instead of that one succeeds, c/n
for every k, counting k-subsets of the correct samples instead of the wrong ones, and the product of
the estimator started one factor early.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rlbook.coverage import plug_in_pass_at_k
from rlbook.evidence import paired_pass_at_k_difference
from rlbook.exercises.framework import FLOAT32_NUMBER_NOTE, FunctionExercise, _call, _failed, _not_attempted, _one_number, _run, _verdict, _within
from rlbook.metrics import pass_at_k, pass_at_k_per_prompt

__all__ = ["CASES", "GAP_CASES", "ONE_COIN_RATES", "check_gap_se", "check_lowest_curve", "check_pass_at_k",
           "gap_tables"]

# (n, c, k): typical cases where the plug-in estimate differs from the unbiased one, then the edges:
# no correct sample, fewer wrong samples than k, k = n, k = 1.
CASES = ((20, 5, 4), (256, 3, 64), (10, 1, 5), (8, 0, 4), (8, 6, 4), (16, 4, 16), (16, 4, 1))
TOLERANCE = 1e-9
# The gap is a mean of many pass@k terms: an answer computed in float32 (torch's default dtype) lands within
# about 1e-7 of it, so the gap is compared to 1e-6, not to TOLERANCE.
GAP_TOLERANCE = 1e-6


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


check_pass_at_k = FunctionExercise(
    "check_pass_at_k", what="pass@k function", cases=lambda: CASES, reference=pass_at_k, mistakes=_mistakes,
    label=lambda n, c, k: f"n={n}, c={c}, k={k}", checks=(_one_number(),), close=_within(TOLERANCE),
    wrong=lambda n, c, k: f"(n={n}, c={c}, k={k}) ",
    otherwise=lambda result, reference, n, c, k: f"n={n}, c={c}, k={k}: expected {float(reference):.6f}, got "
                                                 f"{float(result):.6f}",
    success=f"matches the unbiased estimator on {len(CASES)} cases, edges included",
    float32_success=f"matches the unbiased estimator on {len(CASES)} cases, edges included {FLOAT32_NUMBER_NOTE}",
    doc="""Check ``fn(n, c, k) -> float`` against ``rlbook.metrics.pass_at_k`` on ``CASES``.

    Prints a verdict naming the likely mistake; returns True / False, or None when ``fn`` is None or
    raises ``NotImplementedError`` (not attempted yet).
    """)


# ----------------------------------------------------------------------------------------------
# The lesson's exercise: the pass@k gap between two models on the same problems, and its SE

GAP_CASES = ((16, 0), (1, 1), (4, 2))  # (k, seed of the tables)
GAP_PROBLEMS, GAP_SAMPLES = 48, 32
# A right SE may divide by P or by P − 1 (sd with ddof 0 or 1): √(48/47) is 1.1 % apart; a bootstrap
# over problems adds Monte-Carlo noise of about 1/√(2B) (2 % at B = 1000, 5 % at B = 200), so 10 %
# accepts a bootstrap of B ≳ 500; every named mistake is off by a factor of 1.5 or more on these
# tables (tests/test_pass_at_k_exercise.py).
SE_RELATIVE_TOLERANCE = 0.10


def gap_tables(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed (48, 32) 0/1 tables of a base and a policy on the same problems: the base solves each
    problem at its own rate, the policy is better on the problems the base finds easy and worse on
    the hardest (so the two are correlated by problem, as real evaluations are)."""
    generator = torch.Generator().manual_seed(1000 + seed)
    base_rate = torch.rand(GAP_PROBLEMS, 1, generator=generator, dtype=torch.float64) * 0.5
    policy_rate = torch.where(base_rate > 0.12, 0.35 + base_rate, 0.3 * base_rate)
    draws = lambda rate: (torch.rand(GAP_PROBLEMS, GAP_SAMPLES, generator=generator, dtype=torch.float64) < rate)
    return draws(base_rate).int(), draws(policy_rate).int()


def _gap_mistakes(base, policy, k: int) -> dict[str, tuple[float | None, float | None, str]]:
    """name: (gap or None, se or None, hint) for each named mistake on these tables."""
    problems, n = base.shape
    d = np.asarray(pass_at_k_per_prompt(policy, k)) - np.asarray(pass_at_k_per_prompt(base, k))
    plug = np.array([plug_in_pass_at_k(n, int(c), k) for c in policy.sum(1).tolist()]) - \
        np.array([plug_in_pass_at_k(n, int(c), k) for c in base.sum(1).tolist()])
    se_of = lambda table: np.std(pass_at_k_per_prompt(table, k), ddof=1) / np.sqrt(problems)
    unclustered = [np.std(d, ddof=ddof) / np.sqrt(problems * n) for ddof in (0, 1)]
    if k == 1:  # the k = 1 form: every sample's paired difference treated as its own observation
        per_sample = (policy - base).double().flatten().numpy()
        unclustered += [np.std(per_sample, ddof=ddof) / np.sqrt(per_sample.size) for ddof in (0, 1)]
    unclustered_hint = ("an unclustered SE: it treats the P·n samples as independent observations (it divides by "
                        "√(P·n)): the samples of one problem share its difficulty, so the problems are the units — "
                        "take one paired gap per problem and its SE over the P problems (clustered by problem)")
    # Within-problem binomial noise only (the problems held fixed): at k = 1 the two-proportion SE
    # √(Σ_i [p̂_b(1 − p̂_b) + p̂_p(1 − p̂_p)]/n)/P, at k > 1 its delta-method form with the slope k(1 − p̂)^(k−1).
    rate_b, rate_p = base.double().mean(1).numpy(), policy.double().mean(1).numpy()
    within = lambda q, m: (k * (1 - q) ** (k - 1)) ** 2 * q * (1 - q) / m
    within_hint = ("an SE of the within-problem binomial noise only (p̂(1 − p̂)/n per problem): it holds these P "
                   "problems fixed, so it is the SE for *these* problems. The lesson's SE is about the population "
                   "the problems were drawn from, so it also carries how the gap varies from problem to problem: "
                   "take one paired gap per problem and the SE of their mean over the P problems (clustered by "
                   "problem)")
    mistakes = {"sign": (-d.mean(), None, "the gap is the wrong way round: policy minus base"),
                "plug_in": (plug.mean(), None, "the gap uses the plug-in 1 − (1 − c/n)^k, which is biased low; use "
                                               "Chen et al.'s unbiased pass@k per problem"),
                "unpaired": (None, float(np.hypot(se_of(policy), se_of(base))),
                             "an unpaired SE: it adds the two models' SEs as if they were measured on different "
                             "problems, √(se_base² + se_policy²); they share their problems, so pair them: the SE of "
                             "the per-problem differences"),
                "sd": (None, float(np.std(d, ddof=1)), "that is the spread (sd) of the per-problem gaps, not the "
                                                       "SE of their mean: divide by √P")}
    # The one-coin curve of §3 in place of pass@k: the pooled rate's 1 − (1 − p̄)^k, or Chen et al.'s estimator on
    # the pooled counts (all P·n samples as one problem); equal to the right gap at k = 1 only.
    one_coin_hint = ("that is the one-coin curve of the mean pass@1 (pass@k from the pooled rate or the pooled counts, "
                     "as if every problem were one coin): it is the highest pass@k that pass@1 allows (§3), not the "
                     "pass@k measured. pass@k is a mean over problems of each problem's own pass@k: take one paired "
                     "gap per problem")
    pooled_rate = lambda table: 1.0 - (1.0 - float(table.double().mean())) ** k
    pooled_counts = lambda table: pass_at_k(table.numel(), int(table.sum()), k)
    if k > 1:
        mistakes["one_coin_rate"] = (pooled_rate(policy) - pooled_rate(base), None, one_coin_hint)
        mistakes["one_coin_counts"] = (pooled_counts(policy) - pooled_counts(base), None, one_coin_hint)
    se_right = paired_pass_at_k_difference(policy, base, k)[1]
    mistakes["half_width"] = (None, 1.96 * se_right, "that is a 95 % interval's half-width (1.96 × SE, or 2 × SE), "
                                                     "not the SE: return the standard error itself")
    for i, value in enumerate(unclustered):
        mistakes[f"unclustered_{i}"] = (None, float(value), unclustered_hint)
    for i, m in enumerate((n, n - 1)):
        mistakes[f"within_{i}"] = (None, float(np.sqrt((within(rate_b, m) + within(rate_p, m)).sum()) / problems),
                                   within_hint)
    return mistakes


def _close_relative(a: float, b: float) -> bool:
    return abs(a - b) <= SE_RELATIVE_TOLERANCE * abs(b) + 1e-12


def check_gap_se(fn) -> bool | None:
    """Check ``fn(base_correct, policy_correct, k) -> (gap, se)`` against ``rlbook.evidence.paired_pass_at_k_difference``
    on ``GAP_CASES``. The gap must match to 1e-6 (a float32 answer passes); the SE within 10 % (ddof 0 or 1, or a
    bootstrap over problems with B ≳ 500, pass). Prints a verdict naming the likely mistake (an SE that is wrong on
    one case without a name is reported only if no other case names one); returns True / False, or None when not
    attempted yet."""
    if _not_attempted(fn, "gap-and-SE function"):
        return None
    unnamed = None
    for k, seed in GAP_CASES:
        base, policy = gap_tables(seed)
        result, error = _call(fn, base.clone(), policy.clone(), k)
        if error:
            return _failed(error, f"k={k}: ")
        if result.numel() != 2:
            return _verdict(False, "", f"return two numbers, (gap, se); got shape {tuple(result.shape)}")
        gap, se = (float(v) for v in result.flatten())
        right_gap, right_se = paired_pass_at_k_difference(policy, base, k)
        mistakes = _gap_mistakes(base, policy, k)
        if abs(gap - right_gap) > GAP_TOLERANCE:
            for wrong_gap, _, hint in mistakes.values():
                if wrong_gap is not None and abs(gap - wrong_gap) < GAP_TOLERANCE:
                    return _verdict(False, "", f"(k={k}) {hint}")
            return _verdict(False, "", f"k={k}: expected the gap {right_gap:.9f}, got {gap:.9f}")
        if not _close_relative(se, right_se):
            named = sorted((abs(se - wrong_se) / wrong_se, hint) for _, wrong_se, hint in mistakes.values()
                           if wrong_se is not None and _close_relative(se, wrong_se))
            if named:  # the nearest named mistake: two of them lie 5 % apart at k = 1
                return _verdict(False, "", f"(k={k}) {named[0][1]}")
            bootstrap = (" (if you bootstrapped over problems: its Monte-Carlo noise is about 1/√(2B), so use B ≳ "
                         "1000 resamples of the problems)" if abs(se - right_se) <= 0.25 * right_se else "")
            unnamed = unnamed or (f"k={k}: the gap is right ({gap:+.4f}); expected its SE {right_se:.4f}, got "
                                  f"{se:.4f}{bootstrap}")
    if unnamed:
        return _verdict(False, "", unnamed)
    return _verdict(True, f"the gap and its problem-clustered SE match on {len(GAP_CASES)} cases (k = "
                          f"{', '.join(str(k) for k, _ in GAP_CASES)})", "")


# Five made-up models, each a list of per-problem solve rates, all with pass@1 0.25 (lesson 18, §3), none of them
# the lesson's worked counterexamples. E solves every problem sometimes, yet it is lowest at k = 2 (the largest
# variance) and at k = 1024 too (its rates of 1e-4 give 1 − 0.9999^1024 ≈ 0.10 each: pass@1024 ≈ 0.32, below B's
# 0.5): support decides only as k → ∞.
ONE_COIN_RATES = {"A": (0.25, 0.25, 0.25, 0.25), "B": (0.6, 0.4, 0.0, 0.0), "C": (0.91, 0.03, 0.03, 0.03),
                  "D": (0.4, 0.3, 0.2, 0.1), "E": (0.9997, 0.0001, 0.0001, 0.0001)}
LOWEST_AT = (2, 1024)


def _mean_pass_at_k(rates, k: int) -> float:
    return float(np.mean([1.0 - (1.0 - p) ** k for p in rates]))


def check_lowest_curve(answer) -> bool | None:
    """Check ``answer = {2: name, 1024: name}``: which model of ``ONE_COIN_RATES`` has the lowest pass@k at
    k = 2 and at k = 1024 (true rates, no sampling). Prints a verdict naming the idea a wrong answer missed:
    at k = 2 the shortfall below the one-coin curve is the variance of the rates (``rlbook.coverage.one_coin_gap``);
    at large k pass@k tends to the share of problems with a rate above 0. Returns True / False, or None when not
    attempted yet."""
    if answer is None:
        print("Nothing to check yet: replace None with your answer, {2: ..., 1024: ...}, and run this cell again.")
        return None
    if callable(answer):  # a function returning the dict, as the other checkers take
        answer, error = _run(answer)
        if error:
            return _failed(error)
    if not isinstance(answer, dict):
        raise ValueError(f"answer must be a dict {{2: name, 1024: name}} or a function returning one, got {answer!r}")
    if set(answer) != set(LOWEST_AT):
        raise ValueError(f"answer must be a dict with the keys {LOWEST_AT}, each a model name from "
                         f"{sorted(ONE_COIN_RATES)}, got {answer!r}")
    curves = {name: {k: _mean_pass_at_k(rates, k) for k in LOWEST_AT} for name, rates in ONE_COIN_RATES.items()}
    variance = {name: float(np.var(rates)) for name, rates in ONE_COIN_RATES.items()}
    ever = {name: sum(p > 0 for p in rates) / len(rates) for name, rates in ONE_COIN_RATES.items()}
    for k in LOWEST_AT:
        name = str(answer[k]).strip().upper()
        if name not in ONE_COIN_RATES:
            raise ValueError(f"answer[{k}] must be one of {sorted(ONE_COIN_RATES)}, got {answer[k]!r}")
        right = min(curves, key=lambda m: curves[m][k])
        if name == right:
            continue
        if k == 2:
            why = (f"at k = 2 the shortfall below the one-coin curve 1 − (1 − p̄)² is exactly the variance of the rates; "
                   f"{right}'s is {variance[right]:.4f}, {name}'s {variance[name]:.4f}")
        elif ever[right] < ever[name]:
            why = (f"at large k pass@k tends to the share of problems solved with any probability above 0: "
                   f"{right} never solves {1 - ever[right]:.0%} of its problems, {name} solves "
                   f"{ever[name]:.0%} of them sometimes (variance no longer orders the curves)")
        else:
            tiny = min(p for p in ONE_COIN_RATES[right] if p > 0)
            why = (f"{right} solves every problem sometimes, so as k → ∞ it reaches {ever[right]:.0%}; but support is "
                   f"a k → ∞ statement, and k = {k} is finite: a rate of {tiny:g} gives 1 − (1 − {tiny:g})^{k} = "
                   f"{1 - (1 - tiny) ** k:.2f} (about k·p = {k * tiny:.2f} expected successes), so tiny rates act like "
                   f"zero here")
        return _verdict(False, "", f"k = {k}: the lowest is {right} (pass@{k} {curves[right][k]:.3f}), not {name} "
                                   f"({curves[name][k]:.3f}): {why}")
    return _verdict(True, f"lowest at k = 2: {answer[2]} (the largest variance); at k = 1024: {answer[1024]} (its "
                          "rates of 1e-4 act like zero at k = 1024, so it falls short even of B, which never solves half its "
                          "problems) — a "
                          "spread orders the curves at small k, support only as k → ∞, and a rate far below 1/k counts "
                          "as no support at that k", "")
