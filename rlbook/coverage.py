"""Sampler or thinker: does RL widen what a model can solve, or only how often it solves it?

Yue et al. 2025 ("Does Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs Beyond
the Base Model?", arXiv:2504.13837) compare a base model and its RLVR-trained policy by pass@k for
k from 1 to a few hundred on the same problems. RL wins at k = 1, but the base model catches up as
k grows and often overtakes it: the problems the RL policy solves are, in the main, problems the
base model already solved with enough samples, and its correct answers are ones the base model
already gave high probability. ProRL (Liu et al. 2025, arXiv:2505.24864) answers that with longer
training, a KL penalty and reference resets, RL can reach problems the base model never solves.

The functions here turn the (problems × samples) 0/1 tables of ``rlbook.evaluation.sample_and_verify``
into the numbers of that debate:

- ``per_problem_pass_at_k`` and ``pass_at_k_curve``: Chen et al.'s unbiased pass@k
  (``rlbook.metrics.pass_at_k``) per problem, and its mean over problems for each k;
- ``crossover_k``: the first k at which the RL policy's curve no longer lies above the base's;
- ``coverage_split``: which problems each model solves at least once in its n samples;
- ``completion_logprob_sums``: the log-probability a model gives to chosen completions of a
  rollout (the base model's view of the RL policy's correct answers);
- ``seen_fraction``: how many of one model's answers are strings another model also wrote;
- ``plug_in_pass_at_k`` and ``expected_estimates``: the naive estimator 1 − (1 − c/n)^k, and the exact
  expectation of both estimators when the true solve rate is p, which shows the plug-in one's bias;
- ``one_coin_curve``: 1 − (1 − p̄)^k, the pass@k curve of a policy whose every problem is the same
  coin, and by Jensen's inequality across problems the highest curve any policy with mean pass@1 p̄
  can have, and ``one_coin_gap``, how far a policy lies below it (at k = 2, the variance of its rates);
- ``dispersion``: whether a model's per-problem solve rates spread wider than binomial noise;
- ``problems_behind``: the problems on which a policy's pass@1 is below the base's beyond sampling
  noise, each tested on its own;
- ``problems_lost``: the problems the base solves often that the policy never solves in its samples,
  against the count the base itself would lose (the per-problem signature of narrowing);
- ``mixed_group_share``: the share of GRPO groups of G samples with mixed rewards, the only groups with
  a gradient, estimated from a model's table (why RLVR cannot reinforce what the model never samples);
- ``kind_subtable``: a table restricted to one kind of sample (say, the ``<think>`` ones), the first m of
  that kind per problem, to ask how a policy that chose only that kind would score;
- ``majority_at_k``: the accuracy of a majority vote over k samples (self-consistency), the
  deployable counterpart of pass@k, which needs the verifier at test time;
- ``addition_cot_correct``: for addition, the correct samples whose working is right too (the
  chain-of-thought check behind CoT-pass@k, Wen et al. 2025, arXiv:2506.14245).

Simplified: "solves" means at least one of n samples is correct, so coverage is a lower bound that
grows with n; the papers use n up to 1024 or more, this book's lessons a few hundred at most.
"""

from __future__ import annotations

import math
import re
from statistics import NormalDist

import torch

from rlbook._checks import check_int
from rlbook.metrics import pass_at_k
from rlbook.reasoning import completion_kind, scratchpad_lines
from rlbook.rollout import Rollout, rollout_logprobs
from rlbook.tasks.arithmetic import addition_steps

__all__ = ["addition_cot_correct", "completion_logprob_sums", "coverage_split", "crossover_k", "dispersion",
           "between_sd_upper", "expected_estimates", "one_coin_curve", "one_coin_gap", "pass_at_k_curve", "per_problem_pass_at_k",
           "majority_at_k", "kind_subtable", "mixed_group_share",
           "plug_in_pass_at_k", "powers_of_two", "problems_behind", "problems_lost", "seen_fraction"]

_Z_975, _Z_80 = 1.959964, 0.841621  # standard normal quantiles: two-sided 5 %, 80 % power


def _correct_table(name: str, correct) -> torch.Tensor:
    """``correct`` as a (problems, samples) bool tensor, checked."""
    correct = torch.as_tensor(correct)
    if correct.dim() != 2 or correct.numel() == 0:
        raise ValueError(f"{name} must be a non-empty (problems, samples) table, got shape {tuple(correct.shape)}")
    if not ((correct == 0) | (correct == 1)).all():
        raise ValueError(f"{name} must hold only 0/1 (or False/True) entries")
    return correct.bool()


def powers_of_two(n: int) -> list[int]:
    """1, 2, 4, … up to n, with n itself last when it is not a power of two: the k of a pass@k curve."""
    n = check_int("n", n, minimum=1)
    ks = [2 ** i for i in range(n.bit_length()) if 2 ** i <= n]
    return ks if ks[-1] == n else [*ks, n]


def per_problem_pass_at_k(correct, k: int) -> torch.Tensor:
    """(P,) float64: the unbiased pass@k (Chen et al. 2021, arXiv:2107.03374) of each problem from its
    row of the (P, n) 0/1 table ``correct``; 1 ≤ k ≤ n."""
    correct = _correct_table("correct", correct)
    n = correct.shape[1]
    k = check_int("k", k, minimum=1)
    if k > n:
        raise ValueError(f"k must be at most the samples per problem n={n}, got {k}")
    return torch.tensor([pass_at_k(n, int(c), k) for c in correct.sum(dim=1).tolist()], dtype=torch.float64)


def pass_at_k_curve(correct, ks, *, estimator: str = "unbiased") -> list[float]:
    """Mean pass@k over problems for each k in ``ks`` (each 1 ≤ k ≤ n), from the (P, n) table ``correct``.

    Each point averages ``per_problem_pass_at_k`` with ``math.fsum``, as ``rlbook.metrics.mean_pass_at_k``.
    ``estimator="plug_in"`` averages ``plug_in_pass_at_k`` instead (biased low; to measure that bias).
    """
    ks = list(ks)
    if not ks:
        raise ValueError("ks must hold at least one k")
    if estimator == "unbiased":
        return [math.fsum(per_problem_pass_at_k(correct, k).tolist()) / len(correct) for k in ks]
    if estimator != "plug_in":
        raise ValueError(f"estimator must be 'unbiased' or 'plug_in', got {estimator!r}")
    table = _correct_table("correct", correct)
    n, counts = table.shape[1], table.sum(dim=1).tolist()
    for k in ks:
        if not 1 <= check_int("k", k, minimum=1) <= n:
            raise ValueError(f"k must be at most the samples per problem n={n}, got {k}")
    return [math.fsum(plug_in_pass_at_k(n, int(c), k) for c in counts) / len(counts) for k in ks]


def crossover_k(ks, base_curve, policy_curve) -> int | None:
    """The first k in ``ks`` at which ``policy_curve`` is no longer above ``base_curve``; None if it
    stays above at every k.

    The curves are pass@k at the (increasing) ``ks``. When the policy is not above the base already
    at the first k, that k is returned: there is no range where the policy led.
    """
    ks, base_curve, policy_curve = list(ks), list(base_curve), list(policy_curve)
    if not ks or not len(ks) == len(base_curve) == len(policy_curve):
        raise ValueError(f"ks, base_curve and policy_curve must be non-empty and of one length, got "
                         f"{len(ks)}, {len(base_curve)}, {len(policy_curve)}")
    if any(b <= a for a, b in zip(ks, ks[1:])):
        raise ValueError(f"ks must be increasing, got {ks}")
    for k, base, policy in zip(ks, base_curve, policy_curve):
        if policy <= base:
            return k
    return None


def coverage_split(base_correct, policy_correct) -> dict[str, int]:
    """How many problems each model solves at least once in its samples, split four ways.

    Both tables are (P, n) 0/1 over the same P problems (n may differ). Returns counts
    ``both``, ``policy_only`` (solved by the policy, never by the base), ``base_only`` and ``neither``,
    and ``problems`` = P.
    """
    base_solved = _correct_table("base_correct", base_correct).any(dim=1)
    policy_solved = _correct_table("policy_correct", policy_correct).any(dim=1)
    if base_solved.shape != policy_solved.shape:
        raise ValueError(f"base_correct and policy_correct must cover the same problems, got "
                         f"{base_solved.numel()} and {policy_solved.numel()}")
    return {"both": int((base_solved & policy_solved).sum()), "policy_only": int((~base_solved & policy_solved).sum()),
            "base_only": int((base_solved & ~policy_solved).sum()),
            "neither": int((~base_solved & ~policy_solved).sum()), "problems": base_solved.numel()}


def completion_logprob_sums(model, rollout: Rollout, rows, *, batch_size: int | None = None) -> torch.Tensor:
    """log π(y | x) under ``model`` of the completions in ``rows`` of ``rollout``: the sum of their
    token log-probs (end-of-sequence token included), (len(rows),) float32.

    Scoring another model's samples this way is how Yue et al. (arXiv:2504.13837, their perplexity
    analysis) ask whether the RL policy's answers were already likely under the base model.
    """
    rows = torch.as_tensor(rows, dtype=torch.long)
    if rows.dim() != 1 or rows.numel() == 0:
        raise ValueError(f"rows must be a non-empty 1-D list of row indices, got shape {tuple(rows.shape)}")
    if int(rows.min()) < 0 or int(rows.max()) >= len(rollout):
        raise ValueError(f"rows must index the rollout's {len(rollout)} rows, got {int(rows.min())}..{int(rows.max())}")
    with torch.no_grad():
        return rollout_logprobs(model, rollout.select(rows), batch_size=batch_size).sum(dim=1)


def seen_fraction(texts, reference_texts) -> float:
    """The share of ``texts`` that also occur, character for character, among ``reference_texts``.

    Per problem, with the policy's correct answers as ``texts`` and the base model's samples as
    ``reference_texts``: how much of what RL produces the base model had already written.
    """
    texts = list(texts)
    if not texts:
        raise ValueError("texts must hold at least one string")
    seen = set(reference_texts)
    return sum(text in seen for text in texts) / len(texts)


def plug_in_pass_at_k(n: int, c: int, k: int) -> float:
    """The naive estimate 1 − (1 − c/n)^k: put the observed rate p̂ = c/n into 1 − (1 − p)^k.

    It is biased low for 1 < k ≤ n: (1 − p)^k is convex in p, so by Jensen's inequality
    E[(1 − p̂)^k] ≥ (1 − p)^k. Chen et al. (2021, arXiv:2107.03374, §2.1) point this out and use the
    unbiased ``rlbook.metrics.pass_at_k`` instead; it is here to measure that bias, not to be used.
    """
    n = check_int("n", n, minimum=1)
    c = check_int("c", c, minimum=0)
    k = check_int("k", k, minimum=1)
    if c > n:
        raise ValueError(f"c must be <= n={n}, got {c}")
    return 1.0 - (1.0 - c / n) ** k


def expected_estimates(p: float, n: int, k: int) -> dict[str, float]:
    """Exact expectations, over c ~ Binomial(n, p), of the unbiased and the plug-in pass@k estimates.

    Returns ``{"true": 1 − (1 − p)^k, "unbiased": E[pass_at_k(n, c, k)], "plug_in": E[plug_in_pass_at_k(n, c, k)]}``
    (sums over the n + 1 values of c, no sampling).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p}")
    n = check_int("n", n, minimum=1)
    k = check_int("k", k, minimum=1)
    if k > n:
        raise ValueError(f"k must be <= n={n}, got {k}")
    weights = [math.comb(n, c) * p ** c * (1 - p) ** (n - c) for c in range(n + 1)]
    return {"true": 1.0 - (1.0 - p) ** k,
            "unbiased": math.fsum(w * pass_at_k(n, c, k) for c, w in enumerate(weights)),
            "plug_in": math.fsum(w * plug_in_pass_at_k(n, c, k) for c, w in enumerate(weights))}


def one_coin_curve(pass_at_1: float, ks) -> list[float]:
    """1 − (1 − p̄)^k for each k in ``ks``: pass@k of a policy that solves every problem with the same
    probability p̄ = ``pass_at_1``, and the highest mean pass@k any policy with mean pass@1 p̄ can have.

    Jensen's inequality across problems: (1 − p)^k is convex in p, so for per-problem rates p_i with
    mean p̄, mean_i (1 − p_i)^k ≥ (1 − p̄)^k, i.e. mean pass@k = 1 − mean_i (1 − p_i)^k ≤ 1 − (1 − p̄)^k,
    with equality at k ≥ 2 only when every p_i = p̄. It is the inequality that makes the plug-in
    estimator biased (Chen et al. 2021, arXiv:2107.03374, §2.1), applied across problems instead of
    across draws. How far a curve lies below its one-coin curve is ``one_coin_gap``: at k = 2 exactly
    the variance of the per-problem rates, at larger k a measure that weights the problems with p_i
    near 0 ever more heavily. So a spread index (a variance) and the large-k ranking can disagree: of
    two policies with the same pass@1 the one with the smaller variance need *not* lead at every k
    (rates {0.5, 0.5, 0, 0} against {0.97, 0.01, 0.01, 0.01}: the first has the smaller variance and
    pass@∞ 0.5, the second 1.0). What does hold: a policy *on* its one-coin curve is passed at no k by
    one with a lower pass@1 (its curve is the highest that pass@1 allows); one policy leads another
    at every k when its rates are more even in the convex (majorisation) order, not merely in
    variance; and as k → ∞ pass@k tends to the share of problems with p_i > 0, a support quantity.
    """
    if isinstance(pass_at_1, bool) or not isinstance(pass_at_1, (int, float)) or not 0.0 <= pass_at_1 <= 1.0:
        raise ValueError(f"pass_at_1 must be a probability in [0, 1], got {pass_at_1!r}")
    ks = [check_int("ks", k, minimum=1) for k in ks]
    if not ks:
        raise ValueError("ks must hold at least one k")
    return [1.0 - (1.0 - float(pass_at_1)) ** k for k in ks]


def one_coin_gap(rates, ks) -> list[float]:
    """(1 − p̄)^k − mean_i (1 − p_i)^k for each k in ``ks``: how far the pass@k of a policy with
    per-problem solve rates ``rates`` (true rates p_i, or estimates) lies below its one-coin curve
    ``one_coin_curve(p̄, ks)``; never negative (Jensen).

    At k = 1 it is 0; at k = 2 it is exactly the variance of the rates (ddof 0), since
    mean(1 − p)² − (1 − p̄)² = Var(1 − p) = Var p. At larger k the weight (1 − p)^k falls fastest
    for the easy problems, so the gap is set more and more by the problems with p_i near 0 and
    tends to the share of problems with p_i = 0 (for p̄ > 0).
    """
    rates = torch.as_tensor(rates, dtype=torch.float64).flatten()
    if rates.numel() == 0 or not ((rates >= 0) & (rates <= 1)).all():
        raise ValueError("rates must be a non-empty set of probabilities in [0, 1]")
    ks = list(ks)  # read once: one_coin_curve checks the ks, and a generator would be spent by it
    curve = one_coin_curve(float(rates.mean()), ks)
    return [max(0.0, float((1.0 - rates).pow(k).mean()) - (1.0 - c)) for k, c in zip(ks, curve)]


def _chi2_quantile_over_dof(z: float, dof: int) -> float:
    """χ²_dof's quantile at the normal quantile z, divided by dof: Wilson & Hilferty's cube-root
    approximation (E. B. Wilson and M. M. Hilferty, "The distribution of chi-square", PNAS 17(12), 1931),
    (1 − 2/(9ν) + z √(2/(9ν)))³, within about 0.1 % of the exact value at ν ≥ 30."""
    a = 2.0 / (9.0 * dof)
    return (1.0 - a + z * math.sqrt(a)) ** 3


def dispersion(correct) -> dict[str, float]:
    """Are a model's per-problem solve rates one coin? Their spread against binomial noise.

    ``correct``: a (P, n) 0/1 table, P ≥ 2 problems × n ≥ 2 samples. With p̂_i = c_i / n and p̄ their
    mean: if every problem had the same rate, the p̂_i would differ by binomial noise alone, variance
    p̄(1 − p̄)/n. The index D = s² / (p̄(1 − p̄)/n) (s² the variance of the p̂_i, ddof 1) times P − 1 is
    then χ² with P − 1 degrees of freedom: the binomial index-of-dispersion test (W. G. Cochran,
    "Some methods for strengthening the common χ² tests", Biometrics 10(4), 1954).

    Returns ``pass_at_1`` (p̄), ``sd`` (s), ``binomial_sd`` (√(p̄(1 − p̄)/n)), ``index`` (D; NaN when
    p̄ is 0 or 1), ``low`` and ``high`` (D's central 95 % range if every problem were one coin, by
    Wilson–Hilferty), ``between_sd`` (the spread of the true rates this implies:
    √(max(0, s² − p̄(1 − p̄)/n) · n/(n − 1)), since Var(p̂_i) = τ²(1 − 1/n) + p̄(1 − p̄)/n for true rates
    of sd τ) and ``detectable_sd``: the spread τ the test detects with about 80 % power, where
    D's expectation 1 + τ²(n − 1)/(p̄(1 − p̄)) stands 0.84 of its null sd √(2/(P − 1)) (scaled) above
    ``high`` (a normal approximation).
    """
    table = _correct_table("correct", correct).double()
    problems, n = table.shape
    if problems < 2 or n < 2:
        raise ValueError(f"correct must have at least 2 problems and 2 samples each, got shape {tuple(table.shape)}")
    rates = table.mean(dim=1)
    mean, variance = float(rates.mean()), float(rates.var(unbiased=True))
    noise = mean * (1.0 - mean) / n
    dof = problems - 1
    low, high = _chi2_quantile_over_dof(-_Z_975, dof), _chi2_quantile_over_dof(_Z_975, dof)
    expected_at_power = high / max(1e-12, 1.0 - _Z_80 * math.sqrt(2.0 / dof))
    return {"pass_at_1": mean, "sd": math.sqrt(variance), "binomial_sd": math.sqrt(noise),
            "index": variance / noise if noise > 0 else math.nan, "low": low, "high": high,
            "between_sd": math.sqrt(max(0.0, variance - noise) * n / (n - 1)),
            "detectable_sd": math.sqrt(max(0.0, expected_at_power - 1.0) * mean * (1.0 - mean) / (n - 1))}


def between_sd_upper(correct, *, confidence: float = 0.95) -> float:
    """A one-sided upper confidence bound on τ, the sd of a model's true per-problem solve rates.

    ``correct``: a (P, n) 0/1 table, as in ``dispersion``. The variance s² of the observed rates p̂_i
    (ddof 1) estimates Var(p̂_i) = τ²(1 − 1/n) + p̄(1 − p̄)/n, and (P − 1)s²/Var(p̂_i) is about χ² with
    P − 1 degrees of freedom (Cochran 1954, the index-of-dispersion test of ``dispersion``). So
    s² / q, with q the χ²'s lower (1 − ``confidence``) quantile over its degrees of freedom
    (Wilson–Hilferty), bounds Var(p̂_i) from above, and removing the binomial part gives the bound
    √(max(0, s²/q − p̄(1 − p̄)/n) · n/(n − 1)). A bound, not a test: "one coin" is never shown, only
    how uneven the problems can be and still give this table.
    """
    table = _correct_table("correct", correct).double()
    problems, n = table.shape
    if problems < 2 or n < 2:
        raise ValueError(f"correct must have at least 2 problems and 2 samples each, got shape {tuple(table.shape)}")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence!r}")
    rates = table.mean(dim=1)
    mean, variance = float(rates.mean()), float(rates.var(unbiased=True))
    lower = _chi2_quantile_over_dof(-NormalDist().inv_cdf(confidence), problems - 1)
    return math.sqrt(max(0.0, variance / lower - mean * (1.0 - mean) / n) * n / (n - 1))


def problems_behind(base_correct, policy_correct, *, alpha: float = 0.05) -> list[int]:
    """The problems on which the policy's pass@1 is below the base's beyond sampling noise.

    Both tables are (P, n) 0/1 over the same P problems (n may differ). Each problem is tested on its
    own with the two-proportion z-test, z = (p̂_base − p̂_policy) / √(p̄(1 − p̄)(1/n_base + 1/n_policy)),
    p̄ the pooled rate, one-sided at level ``alpha`` / P (Bonferroni over the P problems, so that the
    chance of naming any problem when the policy is nowhere worse is at most ``alpha``). Returns their
    indices.
    """
    base = _correct_table("base_correct", base_correct).double()
    policy = _correct_table("policy_correct", policy_correct).double()
    if base.shape[0] != policy.shape[0]:
        raise ValueError(f"base_correct and policy_correct must cover the same problems, got {base.shape[0]} and "
                         f"{policy.shape[0]}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    n_base, n_policy = base.shape[1], policy.shape[1]
    p_base, p_policy = base.mean(dim=1), policy.mean(dim=1)
    pooled = (base.sum(dim=1) + policy.sum(dim=1)) / (n_base + n_policy)
    se = torch.sqrt(pooled * (1 - pooled) * (1 / n_base + 1 / n_policy))
    bar = NormalDist().inv_cdf(1.0 - alpha / base.shape[0])
    behind = (se > 0) & (p_base - p_policy > bar * se)
    return behind.nonzero().flatten().tolist()


def problems_lost(base_correct, policy_correct, *, min_base_rate: float = 0.25, alpha: float = 0.05) -> dict:
    """The per-problem signature of narrowing: problems the base solves often that the policy never
    solves in its m samples, against the count the base itself would lose.

    ``base_correct`` (P, n) and ``policy_correct`` (P, m) are 0/1 tables over the same P problems. The
    base's samples are split in two halves so that choosing the problems and predicting them use
    independent samples (choosing and predicting with the same ones would favour problems whose rate
    was overestimated): a problem is *chosen* when its share right in the first ⌊n/2⌋ samples is at
    least ``min_base_rate``; in the other h = n − ⌊n/2⌋ samples (h ≥ m needed), with c right, the
    chance that m fresh base samples are all wrong, (1 − p)^m, has the unbiased estimate
    C(h − c, m) / C(h, m) (the complement of Chen et al.'s pass@m, arXiv:2107.03374, eq. 1).

    If on every chosen problem the policy were right at least as often as the base, the number of
    chosen problems it never solves would be at most a sum of independent coins with those chances:
    ``expected`` is their sum, ``tail`` the probability (Poisson-binomial, computed exactly, with the
    estimated chances taken as true) that such a sum reaches the observed ``lost``. Returns ``chosen``,
    ``lost``, ``expected``, ``sd`` (the null count's standard deviation), ``tail``, and ``flagged_from``:
    the smallest count whose tail is at most ``alpha``, what the check needs to see before it says
    "more than the base itself would lose" (a policy that gains on most problems and loses a few
    stays below it: the check is blind to narrowing on fewer problems than that).
    """
    base = _correct_table("base_correct", base_correct)
    policy = _correct_table("policy_correct", policy_correct)
    if base.shape[0] != policy.shape[0]:
        raise ValueError(f"base_correct and policy_correct must cover the same problems, got {base.shape[0]} and "
                         f"{policy.shape[0]}")
    if isinstance(min_base_rate, bool) or not isinstance(min_base_rate, (int, float)) or not 0.0 < min_base_rate <= 1.0:
        raise ValueError(f"min_base_rate must be in (0, 1], got {min_base_rate!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    n, m = base.shape[1], policy.shape[1]
    first = n // 2
    if first < 1 or n - first < m:
        raise ValueError(f"base_correct needs at least 2 m samples per problem (half to choose, half to predict), got "
                         f"n = {n} for m = {m}")
    chosen = base[:, :first].double().mean(dim=1) >= min_base_rate
    held = n - first
    chances = [math.comb(held - c, m) / math.comb(held, m) for c in base[:, first:].sum(dim=1)[chosen].tolist()]
    lost = int((~policy[chosen].any(dim=1)).sum())
    counts = [1.0]                                   # the Poisson-binomial distribution, one coin at a time
    for chance in chances:
        counts = [a * (1 - chance) + b * chance for a, b in zip([*counts, 0.0], [0.0, *counts])]
    tails = [min(1.0, math.fsum(counts[count:])) for count in range(len(counts))]
    flagged = next((count for count, tail in enumerate(tails) if tail <= alpha), None)
    return {"chosen": int(chosen.sum()), "lost": lost, "expected": math.fsum(chances),
            "sd": math.sqrt(math.fsum(c * (1 - c) for c in chances)), "tail": tails[lost], "flagged_from": flagged}


def mixed_group_share(correct, group_size: int) -> float:
    """The expected share of GRPO groups of ``group_size`` samples whose rewards are not all equal.

    GRPO's advantage is each reward minus its group's mean, over the group's sd (Shao et al. 2024,
    "DeepSeekMath", arXiv:2402.03300, §4.1.2, eq. 3's Â_{i,t} = (r_i − mean r) / std r): a group all
    right or all wrong has every advantage 0 and gives no gradient. For a problem solved with
    probability p a group of G is mixed with chance 1 − (1 − p)^G − p^G. From a (P, n) 0/1 table
    ``correct`` with c_i of n right, 1 − C(n − c_i, G)/C(n, G) − C(c_i, G)/C(n, G) estimates it without
    bias (the same U-statistic as Chen et al.'s pass@k, arXiv:2107.03374, eq. 1); the mean over the P
    problems is returned. 1 ≤ G ≤ n.
    """
    table = _correct_table("correct", correct)
    n = table.shape[1]
    g = check_int("group_size", group_size, minimum=1)
    if g > n:
        raise ValueError(f"group_size must be at most the samples per problem n={n}, got {g}")
    total = math.comb(n, g)
    return math.fsum(1.0 - (math.comb(n - c, g) + math.comb(c, g)) / total
                     for c in table.sum(dim=1).tolist()) / table.shape[0]


def kind_subtable(correct, keep) -> torch.Tensor:
    """(P, m) bool: for each problem, the first m of its samples where ``keep`` is true, m the fewest
    any problem has.

    ``correct`` and ``keep`` are (P, n) 0/1 tables of the same samples (``keep``, say, "this sample
    opened with <think>"). The samples of one kind are i.i.d. draws from the model conditioned on that
    kind, so the result is a table of that conditional model, on which ``pass_at_k_curve`` and
    ``dispersion`` apply unchanged: how a policy that always chose that kind, and was otherwise the
    model, would score. Raises if some problem has no sample of that kind.
    """
    table = _correct_table("correct", correct)
    keep = _correct_table("keep", keep)
    if keep.shape != table.shape:
        raise ValueError(f"keep must have correct's shape {tuple(table.shape)}, got {tuple(keep.shape)}")
    m = int(keep.sum(dim=1).min())
    if m == 0:
        raise ValueError("some problem has no sample with keep true")
    return torch.stack([row[mask][:m] for row, mask in zip(table, keep)])


def majority_at_k(answers, references, k: int) -> torch.Tensor:
    """(P,) float64: each problem's accuracy of a majority vote over k of its samples (maj@k), exactly.

    The vote that self-consistency takes (Wang et al. 2023, "Self-Consistency Improves Chain of Thought
    Reasoning in Language Models", arXiv:2203.11171, §2): draw k answers, return the most frequent.
    Unlike pass@k, which asks a verifier whether any of the k is right, it needs no reference answer at
    test time. ``answers``: P lists of n ≥ k extracted answers (str, or None for a sample with no
    answer, which does not vote); ``references``: the P right answers. A tie between the most-voted
    answers is broken uniformly at random; k samples with no answer at all score 0.

    The estimate averages the vote's accuracy over all C(n, k) subsets of the n samples, the same
    U-statistic as Chen et al.'s unbiased pass@k (arXiv:2107.03374, eq. 1): unbiased for a vote over k
    fresh samples. It is counted, not enumerated: for j right answers among the k, the other answers'
    counts must each be at most j, and the subsets that do so are summed group by group, tracking how
    many answers tie with the right one at j (the vote is then right with chance 1/(1 + ties)).
    """
    k = check_int("k", k, minimum=1)
    answers, references = list(answers), list(references)
    if not answers or len(answers) != len(references):
        raise ValueError(f"answers and references must be non-empty and of one length, got {len(answers)} and "
                         f"{len(references)}")
    accuracy = []
    for row, reference in zip(answers, references):
        row = list(row)
        if len(row) < k:
            raise ValueError(f"answers must hold at least k = {k} samples per problem, got {len(row)}")
        if any(a is not None and not isinstance(a, str) for a in [*row, reference]) or reference is None:
            raise ValueError("answers must be str or None and references str")
        right = sum(a == reference for a in row)
        silent = sum(a is None for a in row)
        others = [row.count(a) for a in dict.fromkeys(a for a in row if a is not None and a != reference)]
        favourable = 0.0
        for j in range(1, min(k, right) + 1):
            ways = {(0, 0): 1}                       # (samples taken from wrong answers, answers tied at j) → subsets
            for size in others:
                grown = {}
                for (used, ties), count in ways.items():
                    for c in range(0, min(size, j, k - j - used) + 1):
                        key = (used + c, ties + (c == j))
                        grown[key] = grown.get(key, 0) + count * math.comb(size, c)
                ways = grown
            favourable += math.comb(right, j) * sum(count * math.comb(silent, k - j - used) / (1 + ties)
                                                    for (used, ties), count in ways.items())
        accuracy.append(favourable / math.comb(len(row), k))
    return torch.tensor(accuracy, dtype=torch.float64)


def addition_cot_correct(texts, operands, correct) -> torch.Tensor:
    """(P, n) bool: the correct samples of additions whose working is right too.

    CoT-pass@k (Wen et al. 2025, "Reinforcement Learning with Verifiable Rewards Implicitly
    Incentivizes Correct Reasoning in Base LLMs", arXiv:2506.14245) counts a sample only when both its
    chain of thought and its final answer are right: a verifier that reads only the answer also credits
    right answers reached by wrong working. For addition the working can be checked exactly, with no
    judge: a sample counts when it is correct (``correct``, the (P, n) 0/1 table), well formed with a
    ``<think>`` block, and that block has one line per column of the school algorithm
    (``rlbook.tasks.addition_steps``: the column's two digits, a missing digit written 0, then +1 for a
    carry, = their sum), each line adding those numbers to that sum. A stray extra "+" (``0++8=8``, a
    slip the zoo models make on operands of unequal length) is read past, since it changes no number; a
    wrong digit, carry or sum is not. A direct answer has no working to check and never counts.
    ``texts``: the P·n completions, problem-major (n per problem); ``operands``: P pairs (a, b).
    """
    table = _correct_table("correct", correct)
    problems, n = table.shape
    texts, operands = list(texts), list(operands)
    if len(texts) != problems * n:
        raise ValueError(f"texts must hold the {problems} × {n} = {problems * n} completions of correct, "
                         f"got {len(texts)}")
    if len(operands) != problems or not all(isinstance(pair, (tuple, list)) and len(pair) == 2 for pair in operands):
        raise ValueError(f"operands must hold one (a, b) pair per problem ({problems}), got {len(operands)} entries")
    steps = [[_column_numbers(line) for line in addition_steps(int(a), int(b))] for a, b in operands]
    result = torch.zeros(problems, n, dtype=torch.bool)
    for p, j in table.nonzero().tolist():
        text = texts[p * n + j]
        result[p, j] = completion_kind(text) == "scratchpad" and \
            [_column_numbers(line) for line in scratchpad_lines(text)] == steps[p]
    return result


_COLUMN = re.compile(r"[0-9]+(?:\+[0-9]*)*=[0-9]+")


def _column_numbers(line: str) -> tuple[tuple[int, ...], int] | None:
    """A column line's terms and sum, ``"4+7+1=12" -> ((4, 7, 1), 12)``, empty terms (a stray "+") read
    past; None for a line of any other shape."""
    if _COLUMN.fullmatch(line) is None:
        return None
    left, total = line.split("=")
    return tuple(int(term) for term in left.split("+") if term), int(total)
