"""Self-checking exercises of lesson 04 (reward models): the Bradley–Terry loss, and the one-pool
best-of-n estimator.

``check_bradley_terry_loss(fn)`` runs the reader's ``fn(chosen_rewards, rejected_rewards)`` on a
few fixed batches, compares it with ``rlbook.losses.bradley_terry_loss`` and, when
it differs, names the usual mistake it matches (a temperature T in the loss among them). The rewards it
passes require grad, and a loss that no gradient can flow back through (``.item()``, ``float()``, NumPy)
is refused by name. It prints its verdict and returns True / False,
or None when the exercise is not attempted yet (``None``, or a function that raises
``NotImplementedError``).

``check_best_of_n_expectation(fn)`` runs ``fn(scores, values, n)`` on small pools and compares it with
``brute_force_best_of_n``, the mean over every n-subset of the pool (not with the library's closed
form), naming the usual slips: the ranks counted from the top, values sorted by themselves, the CDF
C(k, n) for the probability of rank k, C(k, n − 1), with-replacement weights, the mean of the top n
by score, and the large-N density n (k/N)^(n−1)/N of the winner's rank.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from rlbook.exercises.framework import DTYPE, FunctionExercise
from rlbook.losses.preference import bradley_terry_loss

__all__ = ["check_bradley_terry_loss", "check_best_of_n_expectation", "brute_force_best_of_n"]


def _cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Three fixed batches of (chosen, rejected) rewards, B = 5, margins of both signs; the third holds a
    margin of −800, where σ(Δr) underflows to 0 in float64 and e^{−Δr} overflows, so a naive
    −log σ(Δr) or log(1 + e^{−Δr}) is not finite (a margin of 35 let both pass)."""
    generator = torch.Generator().manual_seed(404)
    cases = [(2.0 * torch.randn(5, dtype=DTYPE, generator=generator), 2.0 * torch.randn(5, dtype=DTYPE, generator=generator))
             for _ in range(2)]
    cases.append((torch.tensor([-400.0, 0.5, -1.0, 2.0, 0.0], dtype=DTYPE),
                  torch.tensor([400.0, 0.0, 1.0, 2.5, 0.1], dtype=DTYPE)))
    return cases


LABELLER_T = 0.5  # the lesson's labeller (rlbook.tasks.reviews' default): a slip the checker names
_TEMPERATURE_HINT = ("the margin is {} the labeller's temperature T = 0.5: T belongs to the labels (how noisy the "
                     "labeller is), not to the loss. The reward model's loss is −log σ(r_chosen − r_rejected); the "
                     "model absorbs T into its own scale (at the optimum r = r*/T + c).")


def _differentiable(fn):
    """``fn`` called on rewards that require grad, so that the check below can see whether the loss is
    still connected to them (a loss turned into a Python float or a NumPy number cannot train a model)."""
    def called(chosen, rejected):
        return fn(chosen.requires_grad_(True), rejected.requires_grad_(True))
    return called


def _not_differentiable(result, reference, *case):
    if result.requires_grad:
        return None
    return ("the loss is not connected to the rewards (no gradient flows back): it was turned into a number "
            "(.item(), float(), NumPy) or detached. A reward model trains by backpropagating this loss, so "
            "return the tensor torch computed.")


def _mistakes(chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, tuple[torch.Tensor, str]]:
    margin = chosen - rejected
    return {
        "swapped": (-F.logsigmoid(-margin).mean(),
                    "chosen and rejected are swapped: the likelihood of the label is σ(r_chosen − r_rejected)."),
        "no_minus": (F.logsigmoid(margin).mean(),
                     "this is the log-likelihood itself; the loss to minimise is its negative."),
        "sum": (-F.logsigmoid(margin).sum(),
                "the loss sums over the pairs instead of averaging: divide by the batch size B."),
        "no_log": (-torch.sigmoid(margin).mean(),
                   "σ(Δr) was used without the log: maximum likelihood maximises log σ(Δr)."),
        "hinge": (torch.relu(1.0 - margin).mean(),
                  "this is a hinge (margin ranking) loss, not the Bradley–Terry likelihood."),
        "pointwise": (-(F.logsigmoid(chosen) + F.logsigmoid(-rejected)).mean(),
                      "this scores each response on its own (chosen as 'good', rejected as 'bad'), a pointwise "
                      "classifier; Bradley–Terry models the comparison: −log σ(r_chosen − r_rejected)."),
        "over_temperature": (-F.logsigmoid(margin / LABELLER_T).mean(), _TEMPERATURE_HINT.format("divided by")),
        "times_temperature": (-F.logsigmoid(margin * LABELLER_T).mean(), _TEMPERATURE_HINT.format("multiplied by")),
    }


def _finite_mistakes(chosen, rejected):
    # a mistake that overflows on a large margin is not a value an answer can be told apart by
    return {name: (value if torch.isfinite(value) else None, hint) for name, (value, hint) in _mistakes(chosen, rejected).items()}


def _not_finite_or_shown(result, reference, *case):
    if not torch.isfinite(result):
        chosen, rejected = case
        if (chosen - rejected).abs().max() > 100:  # the third batch: the two ordinary ones (checked first) were right
            return ("right on the two ordinary batches, so the formula is right; but it is not finite at a margin "
                    "of −800, where σ(Δr) underflows to 0 or e^{−Δr} overflows: use F.logsigmoid (or F.softplus), "
                    "which is stable")
        return "the loss is not finite: use F.logsigmoid, which is stable"
    chosen, rejected = case
    if (chosen - rejected).abs().max() > 100 and result.item() < reference.item():
        # the third batch only: the formula was right on the ordinary ones, but the −800 margin's loss is capped
        return (f"right on the two ordinary batches, but at the margin of −800 the loss is capped ({result.item():.1f} "
                f"instead of {reference.item():.1f}): an ε inside the log, −log(σ(Δr) + ε), or a clamp of σ or Δr, "
                f"stops the loss at about −log ε; use F.logsigmoid (or F.softplus), which is exact and stable")
    return f"expected {reference.item():.6f}, got {result.item():.6f}"


check_bradley_terry_loss = FunctionExercise(
    "check_bradley_terry_loss", what="Bradley–Terry loss", cases=_cases, reference=bradley_terry_loss,
    mistakes=_finite_mistakes,
    checks=(lambda result, reference, *case: (f"the loss must be one number (mean over the pairs), got shape "
                                              f"{tuple(result.shape)}" if result.numel() != 1 else None),
            _not_differentiable),
    adapt=_differentiable,
    prepare=lambda result, *case: result.reshape(()).to(DTYPE) if result.numel() == 1 else result,
    otherwise=_not_finite_or_shown, success=f"Correct on all {len(_cases())} batches.",
    doc="""Check ``fn(chosen_rewards, rejected_rewards) -> scalar loss`` against the library's Bradley–Terry loss.""")

# ------------------------------------------------------------------ the one-pool best-of-n estimator


def brute_force_best_of_n(scores: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    """E[value of the best-of-``n`` winner] from one pool of N samples by enumeration: the mean, over every
    one of the C(N, n) subsets of n distinct samples, of the value of the subset's highest-scoring member
    (ties to the earlier sample). ``scores`` and ``values`` are (N,) tensors. This is what the lesson's
    closed form Σ_k C(k − 1, n − 1) / C(N, n) · value_(k) must equal; it costs C(N, n) steps, so keep N small."""
    scores, values = torch.as_tensor(scores, dtype=DTYPE), torch.as_tensor(values, dtype=DTYPE)
    if scores.dim() != 1 or scores.shape != values.shape or not 1 <= n <= scores.numel():
        raise ValueError(f"scores and values must be (N,) tensors of one shape and 1 <= n <= N, got "
                         f"{tuple(scores.shape)}, {tuple(values.shape)}, n = {n}")
    winners = [max(subset, key=lambda i: (scores[i].item(), -i))
               for subset in itertools.combinations(range(scores.numel()), n)]
    return values[winners].mean()


def _pool_cases() -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """Pools of N = 7 and 9 distinct scores, values that do not follow the scores (a proxy picks, gold is
    averaged), and n from 1 to N."""
    generator = torch.Generator().manual_seed(405)
    cases = []
    for size, ns in ((7, (1, 2, 3, 7)), (9, (4, 6))):
        scores = torch.randperm(size, generator=generator).to(DTYPE) + 0.1 * torch.rand(size, dtype=DTYPE, generator=generator)
        values = torch.randn(size, dtype=DTYPE, generator=generator).round(decimals=2)
        cases += [(scores, values, n) for n in ns]
    return cases


def _weighted(values_by_rank: torch.Tensor, weights: list[float]) -> torch.Tensor:
    return (values_by_rank * torch.tensor(weights, dtype=DTYPE)).sum()


def _pool_mistakes(scores: torch.Tensor, values: torch.Tensor, n: int) -> dict[str, tuple[torch.Tensor, str]]:
    size = scores.numel()
    ranks = range(1, size + 1)
    ascending = values[torch.argsort(scores)]                       # value of the sample with the k-th lowest score
    total = math.comb(size, n)
    right = [math.comb(k - 1, n - 1) / total for k in ranks]
    return {
        "descending": (_weighted(values[torch.argsort(scores, descending=True)], right),
                       "the weight C(k − 1, n − 1)/C(N, n) belongs to the sample with the k-th *lowest* score (it wins "
                       "when the other n − 1 all rank below it); sorted from the top down, you computed the worst of n."),
        "sorted_values": (_weighted(torch.sort(values).values, right),
                          "the values were sorted by themselves: rank the samples by their *scores* (the proxy picks the "
                          "winner) and average the *values* (gold) in that order."),
        "cdf": (_weighted(ascending, [math.comb(k, n) / total for k in ranks]),
                "C(k, n)/C(N, n) is the probability that the winner ranks k-th or lower (a CDF); the probability that "
                "rank k wins is the difference C(k, n) − C(k − 1, n) = C(k − 1, n − 1), over C(N, n)."),
        "k_not_k_minus_one": (_weighted(ascending, [math.comb(k, n - 1) / total for k in ranks]),
                              "rank k wins when the other n − 1 members are among the k − 1 samples below it: "
                              "C(k − 1, n − 1), not C(k, n − 1) (which chooses them among k samples, the winner itself included)."),
        "ranks_not_order": (_weighted(values[torch.argsort(torch.argsort(scores))], right),
                            "argsort(argsort(scores)) gives each sample its *rank*, not the order to read the samples in: "
                            "indexing the values by it puts weight k on the wrong sample. Index the values by "
                            "argsort(scores) itself, so that position k holds the sample with the k-th lowest score."),
        "k_not_k_minus_one_renormalised": (
            _weighted(ascending, [math.comb(k, n - 1) / sum(math.comb(j, n - 1) for j in ranks) for k in ranks]),
            "C(k, n − 1), divided by its own sum so that the weights add up to 1, is still the wrong weight: rank k wins "
            "when the other n − 1 members are among the k − 1 samples below it, C(k − 1, n − 1), whose sum over k is "
            "C(N, n) with no renormalising needed."),
        "with_replacement": (_weighted(ascending, [(k / size) ** n - ((k - 1) / size) ** n for k in ranks]),
                             "these are the weights of n draws *with replacement* from the pool, (k/N)^n − ((k − 1)/N)^n: "
                             "the same sample can be drawn twice, which n fresh samples from the policy never are; "
                             "biased for best-of-n unless N ≫ n. Subsets of n distinct samples give C(k − 1, n − 1)/C(N, n)."),
        "unsorted": (_weighted(values, right),
                     "the weights C(k − 1, n − 1)/C(N, n) were applied to the samples in pool order: sort the samples by "
                     "their *scores* first, so that weight k goes to the sample with the k-th lowest score."),
        "argmax": (values[torch.argmax(scores)],
                   "this is the value of the top-scoring sample of the whole pool, best-of-N whatever n is: best-of-n "
                   "draws only n of the N samples, so every sample that can be the best of some n-subset has a weight."),
        "plain_mean": (values.mean(), "this is the mean of the pool, the value of best-of-1 whatever n is."),
        "top_n_mean": (values[torch.argsort(scores, descending=True)][:n].mean(),
                       "this is the mean of the n highest-scoring samples of the pool (top-n), not the expected value of "
                       "the one winner of a random n-subset: best-of-n draws n samples and keeps the best of *them*."),
        "continuous": (_weighted(ascending, [n * (k / size) ** (n - 1) / size for k in ranks]),
                       "n (k/N)^(n−1)/N is the large-N (continuous) density of the winner's rank, not the exact "
                       "probability for a finite pool: it does not even sum to 1. Count subsets: C(k − 1, n − 1)/C(N, n)."),
    }


def _pool_otherwise(result, reference, scores, values, n, *, wrong: int, of: int) -> str:
    """An unnamed wrong answer: the numbers of its first wrong case, as plain numbers."""
    return (f"{_pool_label(scores, values, n)}: expected {reference.item():.4f}, got {result.item():.4f} "
            f"(wrong on {wrong} of the {of} pools and n)")


def _pool_label(scores, values, n) -> str:
    return f"pool of N = {scores.numel()}, n = {n}"


check_best_of_n_expectation = FunctionExercise(
    "check_best_of_n_expectation", what="best-of-n estimator", cases=_pool_cases, reference=brute_force_best_of_n,
    mistakes=_pool_mistakes, label=_pool_label, wrong=lambda *case: f"{_pool_label(*case)}: ",
    # every pool and n judged together: a rule is named only when it fits every case (the argmax of the pool is
    # also the top-1 mean, and best-of-1 is the pool mean, so one case alone cannot tell them apart)
    together=lambda *case: "all", across=True, or_first=True, otherwise=_pool_otherwise,
    checks=(lambda result, reference, *case: (f"return one number (the expected value of the winner), got shape "
                                              f"{tuple(result.shape)}" if result.numel() != 1 else None),),
    prepare=lambda result, *case: result.reshape(()).to(DTYPE) if result.numel() == 1 else result,
    success=f"Equal to brute-force enumeration of every n-subset on all {len(_pool_cases())} pools and n.",
    doc="""Check ``fn(scores, values, n) -> E[value of the best-of-n winner]`` for one pool of N samples
    ((N,) tensors, distinct scores) against enumeration of all C(N, n) subsets, naming the usual slips.""")
