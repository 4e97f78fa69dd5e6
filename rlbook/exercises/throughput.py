"""Checkers for the exercises of lesson 14 (throughput tricks).

- ``check_advantage_filter`` (question 1): the reader writes ``keep(rewards, group_size)``, which
  completions the filter keeps;
- ``check_flat_extremes`` (question 3): ``extremes(group_size)``, where P(flat) is smallest, its value
  there, and a pass rate at which half the groups are flat;
- ``check_dropped_share`` (question 4): ``dropped(right_counts, group_size, tol)``, the share of the
  batch the filter with tolerance ``tol`` drops.

The references are the library's: ``rlbook.shaping.advantage_filter_mask`` of
``rlbook.advantages.group_advantages``, ``rlbook.throughput.flat_group_probability`` and
``rlbook.throughput.dropped_share``. Each checker runs the reader's function on a few cases, and
when it differs tries the usual mistakes: a mistake is named when the reader's answers match it on
every case (else on the first case that failed).
"""

from __future__ import annotations

import math

import torch

from rlbook.advantages import group_advantages
from rlbook.exercises.framework import FunctionExercise, _call, _failed, _not_attempted, _verdict
from rlbook.shaping import advantage_filter_mask
from rlbook.throughput import dropped_share, flat_group_probability

__all__ = ["check_advantage_filter", "check_flat_extremes", "check_dropped_share"]

GROUP_SIZE = 4
# Groups of 4: all wrong, all right, varied, all equal to 0.5, varied with partial credit.
REWARDS = torch.tensor([0., 0., 0., 0., 1., 1., 1., 1., 1., 0., 0., 1., .5, .5, .5, .5, 0., .5, 1., 0.])
# (rewards, group size) the filter is checked on, in this order. No member of a varied group sits
# exactly at its group's mean, so "the group's rewards vary" and "A ≠ 0" are the same test.
FILTER_CASES = [
    # groups of 3 whose batch mean, 0.5, is one flat group's reward: subtracting it tells itself apart
    (torch.tensor([0., 0., 0., 1., 1., 1., .5, .5, .5, 0., 1., 1., 1., 0., 0.]), 3),
    (REWARDS, GROUP_SIZE),
    # groups of 2 that vary while the interleaved "groups" (0th with 2nd, 1st with 3rd) are flat
    (torch.tensor([0., 1., 0., 1., 1., 1.]), 2),
    # flat groups whose float32 mean is not exactly their reward: 0.9·3/3 ≠ 0.9 in binary
    (torch.tensor([.9, .9, .9, 0., 1., 1., .45, .45, .45]), 3),
    # a group that varies only a little (|A| ≤ 0.033, variance 6e-4) still carries gradient: a wide tolerance drops it
    (torch.tensor([.5, .55, .5, 1., 1., 1., 0., 1., 0.]), 3),
    # the lesson's G = 8 with partial credit: flat groups beside a varied one, and a batch of one flat group, whose
    # float32 std, reduced as a single row, is 6e-8 rather than 0 (eight 0.9s, on the CPU kernels tested)
    (torch.tensor([.9] * 8 + [.1] * 8 + [0., 1., 1., 0., 1., 0., 0., 0.]), 8),
    (torch.tensor([.9] * 8), 8),
]


def _group_mean(rewards, group_size):
    return rewards.view(-1, group_size).mean(dim=1).repeat_interleave(group_size)


def _interleaved_columns(rewards, group_size):
    """``rewards.view(group_size, -1)``, read down its columns: every n-th completion taken as one group."""
    columns = rewards.view(group_size, -1)
    return (columns.max(dim=0).values != columns.min(dim=0).values).repeat(group_size)


def _interleaved_rows(rewards, group_size):
    """``rewards.view(group_size, -1)``, read along its rows: group_size "groups" of the wrong length."""
    rows = rewards.view(group_size, -1)
    return (rows.max(dim=1).values != rows.min(dim=1).values).repeat_interleave(rows.shape[1])


def _verdict_per_group(rewards, group_size):
    groups = rewards.view(-1, group_size)
    return groups.max(dim=1).values != groups.min(dim=1).values


def _sum_between(rewards, group_size):
    """The mistake of testing 0 < Σ r < G (right for 0/1 rewards only)."""
    sums = rewards.view(-1, group_size).sum(dim=1)
    return ((sums > 0) & (sums < group_size)).repeat_interleave(group_size)


FILTER_MISTAKES = [
    (lambda r, g: r > 0, "you kept the rewarded completions: a wrong answer in a group with some right ones has A < 0 "
                         "and carries gradient too; test whether the group is flat"),
    (lambda r, g: ~advantage_filter_mask(group_advantages(r, g, "grpo")),
     "inverted: these are the completions of flat groups, the ones to drop"),
    (lambda r, g: torch.ones_like(r, dtype=torch.bool), "nothing is dropped: a group whose rewards are all equal "
                                                        "(all 0, all 1, or all 0.5) has A = 0 for every member"),
    (_sum_between, "a group of equal partial rewards (all 0.5) is flat too: test whether the rewards are all equal, "
                   "not whether their sum is 0 or G"),
    (lambda r, g: r - _group_mean(r, g) > 1e-6, "you kept only the positive advantages: a wrong answer in a varied "
                                                "group has A < 0, and its push down is as much gradient as a right "
                                                "answer's push up; keep |A| > 0"),
    (lambda r, g: (r - r.mean()).abs() > 1e-6, "you subtracted the batch's mean, not each group's own: the baseline "
                                               "of a completion is the mean of its own prompt's group "
                                               "(r.view(-1, group_size).mean(dim=1))"),
    (_interleaved_columns, "your groups are interleaved: the G completions of a prompt are contiguous, so reshape with "
                           "view(-1, group_size) (one row per prompt), not view(group_size, -1)"),
    (_interleaved_rows, "your groups are the wrong shape: view(group_size, -1) makes G rows of B/G completions; "
                        "a prompt's group is a row of view(-1, group_size)"),
    (lambda r, g: _verdict_per_group(r, g).repeat(g), "right verdicts, wrong order: .repeat(G) tiles the whole list "
                                                      "of group verdicts G times; .repeat_interleave(G) repeats each "
                                                      "group's verdict G times in place, one per completion"),
    (lambda r, g: (r.view(-1, g) > 0).any(dim=1).repeat_interleave(g),
     "you dropped only the all-wrong groups: an all-right group is flat too (every member's reward equals the mean, so "
     "A = 0) and teaches nothing either; drop every group whose rewards are all equal"),
    (lambda r, g: (r.view(-1, g).std(dim=1) > 0).repeat_interleave(g),
     "you tested std > 0: the std of equal floats need not be 0 in float32 (eight 0.9s can give 6e-8), so a flat "
     "partial-credit group survives; test max == min, or std > a small tolerance"),
    (lambda r, g: r - _group_mean(r, g) != 0, "you tested A != 0 exactly on floats: a flat group's computed mean can "
                                              "differ from its members by rounding (three 0.9s average to "
                                              "0.9 + 6e-8 in float32), so it survives; test max == min, or |A| > a "
                                              "small tolerance"),
]


def _wide_tolerance(result, reference, rewards, group_size) -> str | None:
    """Names a mask that is |A| > t for a t at or above the smallest non-zero |A|: any tolerance too wide."""
    size = (rewards.double() - _group_mean(rewards.double(), group_size)).abs()  # float64: a flat group's |A| is 0
    for tol in sorted(set(size[size > 1e-9].tolist())):
        if torch.equal(result, size > tol):
            return (f"your tolerance is too wide: you dropped completions with |A| up to {tol:.3g} "
                    f"{_filter_where(rewards, group_size)}; a group whose rewards differ a little (0.5, 0.55, 0.5) has "
                    "small but non-zero advantages and carries gradient; keep |A| > a tolerance near float rounding "
                    "(1e-6), or test max != min")
    return None


def _filter_reference(rewards, group_size):
    return advantage_filter_mask(group_advantages(rewards, group_size, "grpo"))


def _filter_where(rewards, group_size) -> str:
    return f"on rewards {rewards.tolist()} in groups of {group_size}"


def _one_verdict_per_completion(result, reference, rewards, group_size) -> str | None:
    if result.shape == reference.shape:
        return None
    hint = (" — one entry per group: the filter needs one per completion (repeat each group's verdict G times)"
            if result.numel() == reference.numel() // group_size else "")
    return f"expected shape {tuple(reference.shape)}, got {tuple(result.shape)}{hint}"


def _as_mask(result, *case) -> torch.Tensor:
    """A bool tensor, or 1/0 values, as the bool mask; anything else is left as it is for ``_a_mask`` to refuse."""
    return result.bool() if result.dtype == torch.bool or bool(((result == 0) | (result == 1)).all()) else result


def _a_mask(result, reference, rewards, group_size) -> str | None:
    if result.dtype == torch.bool:
        return None
    return ("return a mask, True/False (or 1/0) per completion, not the advantages themselves: `.bool()` of a float "
            f"tensor is True wherever it is not exactly 0, got values such as "
            f"{result[(result != 0) & (result != 1)][0].item():.3g}")


_KEPT = sum(int(_filter_reference(*case).sum()) for case in FILTER_CASES)
check_advantage_filter = FunctionExercise(
    "check_advantage_filter", what="mask of the completions to keep", cases=lambda: FILTER_CASES,
    reference=_filter_reference, partial=_wide_tolerance,
    mistakes=lambda rewards, group_size: {index: (mistake(rewards, group_size), hint)
                                          for index, (mistake, hint) in enumerate(FILTER_MISTAKES)},
    label=_filter_where, prepare=_as_mask, checks=(_one_verdict_per_completion, _a_mask),
    close=torch.equal,
    # a mistake that explains every batch, else one that explains the first batch that failed
    together=lambda *case: "all", across=True, or_first=True,
    otherwise=lambda result, reference, *case, **counts: (f"{_filter_where(*case)}: expected "
                                                          f"{reference.int().tolist()}, got {result.int().tolist()}"),
    success=f"keeps the {_KEPT} of {sum(r.numel() for r, _ in FILTER_CASES)} completions with A ≠ 0, over "
            f"{len(FILTER_CASES)} batches (flat partial-credit groups and float rounding included)",
    doc="""Check ``fn(rewards, group_size) -> (B,) bool``: True where the completion's group advantage is non-zero.""")


# ----------------------------------------------------------------------------------------------
# Question 3: where is P(flat) = p^G + (1 − p)^G smallest, and where is it one half?

EXTREME_GROUP_SIZES = (8, 4, 16)
PASS_RATE_TOLERANCE = 1e-3  # p^G = ½ (ignoring the (1 − p)^G term) lands within 3e-4 of the root for G ≥ 4


def check_flat_extremes(fn) -> bool | None:
    """Check ``fn(group_size) -> (p_min, flat_min, p_half)`` for G = 8, 4 and 16.

    ``p_min``: the pass rate at which P(flat) = p^G + (1 − p)^G is smallest; ``flat_min``: that
    smallest value; ``p_half``: a pass rate at which P(flat) = ½ (either of the two, p or 1 − p).
    """
    if _not_attempted(fn, "function of the group size"):
        return None
    for group_size in EXTREME_GROUP_SIZES:
        result, error = _call(fn, group_size)
        if error:
            return _failed(error, f"for G = {group_size}: ")
        if result.numel() != 3:
            return _verdict(False, "", f"return three numbers (p_min, flat_min, p_half), got {result.numel()}")
        p_min, flat_min, p_half = (float(v) for v in result.reshape(-1))
        expected_min = 2 * 0.5 ** group_size
        if abs(p_min - 0.5) > PASS_RATE_TOLERANCE:
            return _verdict(False, "", f"for G = {group_size} the smallest P(flat) is at p = 1/2, not {p_min:.4g}: the "
                                       "formula is the same under p ↔ 1 − p and convex, so its minimum is in the middle")
        if not math.isclose(flat_min, expected_min, rel_tol=1e-3):
            if math.isclose(flat_min, 0.5 ** group_size, rel_tol=1e-3):
                hint = (f"you counted one kind of flat group only: all right AND all wrong are flat, so at p = 1/2 "
                        f"it is 2 · (1/2)^{group_size} = {expected_min:.4g}")
            elif math.isclose(flat_min, 0.5, rel_tol=1e-3):
                hint = "0.5 is the pass rate p, not P(all G rewards equal) at that p"
            else:
                hint = f"expected P(flat) at p = 1/2 to be 2 · (1/2)^{group_size} = {expected_min:.4g}"
            return _verdict(False, "", f"for G = {group_size}, flat_min = {flat_min:.4g}: {hint}")
        if not 0 <= p_half <= 1:
            return _verdict(False, "", f"for G = {group_size}, p_half = {p_half:.4g} is not a pass rate in [0, 1]")
        roots = _half_flat_pass_rates(group_size)
        if min(abs(p_half - root) for root in roots) > PASS_RATE_TOLERANCE:
            value = flat_group_probability(p_half, group_size)
            return _verdict(False, "", f"for G = {group_size}, at p = {p_half:.4g} P(flat) = {value:.4g}, not 1/2: "
                                       f"solve p^{group_size} + (1 − p)^{group_size} = 1/2 (bisection on [1/2, 1] works)"
                                       f"; the roots are {roots[0]:.4f} and {roots[1]:.4f}")
    roots = _half_flat_pass_rates(8)
    return _verdict(True, f"for G = 8: smallest at p = 1/2, P(flat) = {2 * 0.5 ** 8:.4f}; half the groups are flat at "
                          f"p = {roots[0]:.3f} or {roots[1]:.3f} (the filter then skips half the completions)", "")


def _half_flat_pass_rates(group_size: int) -> tuple[float, float]:
    """The two pass rates with p^G + (1 − p)^G = ½, by bisection on [½, 1] (P(flat) rises there)."""
    low, high = 0.5, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if flat_group_probability(middle, group_size) < 0.5 else (low, middle)
    root = (low + high) / 2
    return 1 - root, root


# ----------------------------------------------------------------------------------------------
# Question 4: what share of a batch does |A| ≤ tol drop, from the counts of right answers alone?

DROPPED_CASES = [  # (right answers per group, G, tol)
    (torch.tensor([1, 7, 1, 7, 7, 1, 4, 0]), 8, 1 / 8),  # the question's batch: mostly 1 or 7 of 8 right
    (torch.tensor([0, 8, 3, 5, 2, 6, 4, 1]), 8, 2 / 8),
    (torch.tensor([0, 1, 2, 3, 4]), 4, 1e-6),           # the exact filter: only flat groups
    (torch.tensor([1, 3, 2, 4, 0, 2]), 4, 1 / 4),
    # GRPO's σ-scaled |A| of the 15 wrong answers of a 1-of-16 group is 0.26 ≤ 0.3, of the others' above it:
    # here GRPO's advantages drop more than the flat group alone, and fewer than Dr.GRPO's
    (torch.tensor([1, 4, 0, 8]), 16, 0.3),
]


def _dropped_mistakes(counts, group_size, tol):
    """(share, hint) for each common mistake on one case."""
    import numpy as np

    k = counts.numpy().astype(int)
    g, bar = group_size, tol * group_size + 1e-9
    flat = (k == 0) | (k == g)
    total = k.size * g
    return [
        (flat.sum() * g / total, "you dropped only the flat groups: with tol ≥ 1/G a lopsided group's majority has "
                                 "|A| ≤ tol too (k right of G: the wrong ones have |A| = k/G, the right ones (G − k)/G)"),
        (float(((g - k) * ((g - k) <= bar) + k * (k <= bar)).sum() / total),
         "you dropped the minority: in a group with k right answers the k right ones have |A| = (G − k)/G, large when "
         "k is small; it is the G − k wrong ones, with |A| = k/G, that a small tol drops"),
        (float(((g - k) * (k < bar - 2e-9) + k * ((g - k) < bar - 2e-9)).sum() / total),
         "the boundary: the filter keeps |A| > tol, so it drops |A| ≤ tol, equality included (k/G = tol is dropped)"),
        (float(((k <= bar) | ((g - k) <= bar)).mean()), "that is the share of groups touched, not of completions: "
                                                        "count the completions each group loses"),
        (float(np.where(flat, 0, (g - k) * (k <= bar) + k * ((g - k) <= bar)).sum() / total),
         "you left out the flat groups: all-right and all-wrong groups have |A| = 0 ≤ tol, so they go too"),
        (_grpo_dropped(k, g, tol),
         "you used GRPO's advantages (group_advantages' default method, 'grpo'), which divide by the group's σ: "
         "that rescales every |A| (a 1-of-8 group's seven wrong answers get 0.38, not 1/8), so these tolerances "
         "are Dr.GRPO's: pass method='dr_grpo', or use k/G and (G − k)/G"),
    ]


def _grpo_dropped(k, group_size, tol):
    """The share with |A| ≤ tol under GRPO's σ-normalised advantages (the library's default method)."""
    rewards = torch.tensor([[1.0] * int(c) + [0.0] * (group_size - int(c)) for c in k]).flatten()
    return float((group_advantages(rewards, group_size, "grpo").abs() <= tol).float().mean())


def check_dropped_share(fn) -> bool | None:
    """Check ``fn(right_counts, group_size, tol) -> share``: the share of completions with |A| ≤ tol.

    ``right_counts``: a (groups,) int tensor, the number of right answers (0/1 rewards) in each group;
    A is Dr.GRPO's r − group mean. The reference is ``rlbook.throughput.dropped_share``.
    """
    if _not_attempted(fn, "share-dropped function"):
        return None
    shares = []
    for counts, group_size, tol in DROPPED_CASES:
        result, error = _call(fn, counts.clone(), group_size, tol)
        where = f"for right answers {counts.tolist()} of {group_size}, tol = {tol:.4g}"
        if error:
            return _failed(error, f"{where}: ")
        if result.numel() != 1:
            return _verdict(False, "", f"{where}: return one number (a share of the batch), got {result.numel()}")
        shares.append(float(result))
    expected = [dropped_share(counts.numpy(), g, tol) for counts, g, tol in DROPPED_CASES]
    wrong = [i for i, (share, right) in enumerate(zip(shares, expected)) if not math.isclose(share, right, abs_tol=1e-6)]
    if not wrong:
        first, group_size, tol = DROPPED_CASES[0]
        return _verdict(True, f"e.g. {expected[0]:.0%} of the question's batch (right answers {first.tolist()} of "
                              f"{group_size}) at tol = 1/8", "")
    counts, group_size, tol = DROPPED_CASES[wrong[0]]
    where = f"for right answers {counts.tolist()} of {group_size}, tol = {tol:.4g}"
    if all(math.isclose(share, right * c.numel() * g, abs_tol=1e-6)
           for share, right, (c, g, _) in zip(shares, expected, DROPPED_CASES)):
        return _verdict(False, "", "return a share of the batch's completions (in [0, 1]), not a count")
    if all(math.isclose(share, right * g, abs_tol=1e-6) for share, right, (_, g, _) in zip(shares, expected, DROPPED_CASES)):
        return _verdict(False, "", "that is the completions dropped per group, on average: divide by G as well, for a "
                                   "share of the batch's completions")
    mistakes = [_dropped_mistakes(*case) for case in DROPPED_CASES]  # per case: [(share, hint), ...]
    hints = [hint for _, hint in mistakes[0]]
    for index, hint in enumerate(hints):  # a mistake that explains every case
        if all(math.isclose(share, case[index][0], abs_tol=1e-6) for share, case in zip(shares, mistakes)):
            return _verdict(False, "", hint)
    for share_of_mistake, hint in mistakes[wrong[0]]:  # else one that explains the first failure
        if math.isclose(shares[wrong[0]], share_of_mistake, abs_tol=1e-6):
            return _verdict(False, "", f"{where}: {hint}")
    return _verdict(False, "", f"{where}: expected {expected[wrong[0]]:.4f}, got {shares[wrong[0]]:.4f}")
