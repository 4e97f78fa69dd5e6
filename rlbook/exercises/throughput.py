"""Checker for the exercise of lesson 14 (throughput tricks): which completions the advantage filter keeps.

The reader writes ``keep(rewards, group_size)``: a (B,) bool mask, True for the completions whose
group advantage is not zero (the ones whose backward pass is worth its time). The reference is
``rlbook.shaping.advantage_filter_mask`` applied to ``rlbook.advantages.group_advantages``.
"""

from __future__ import annotations

import torch

from rlbook.advantages import group_advantages
from rlbook.exercises.pg_kl import _call, _failed, _not_attempted, _verdict
from rlbook.shaping import advantage_filter_mask

__all__ = ["check_advantage_filter"]

GROUP_SIZE = 4
# Groups of 4: all wrong, all right, varied, all equal to 0.5, varied with partial credit.
REWARDS = torch.tensor([0., 0., 0., 0., 1., 1., 1., 1., 1., 0., 0., 1., .5, .5, .5, .5, 0., .5, 1., 0.])


def check_advantage_filter(fn) -> bool | None:
    """Check ``fn(rewards, group_size) -> (B,) bool``: True where the completion's group advantage is non-zero."""
    if _not_attempted(fn, "mask of the completions to keep"):
        return None
    result, error = _call(fn, REWARDS.clone(), GROUP_SIZE)
    if error:
        return _failed(error)
    reference = advantage_filter_mask(group_advantages(REWARDS, GROUP_SIZE, "grpo"))
    if result.shape != reference.shape:
        hint = (" — one entry per group: the filter needs one per completion (repeat each group's verdict G times)"
                if result.numel() == reference.numel() // GROUP_SIZE else "")
        return _verdict(False, "", f"expected shape {tuple(reference.shape)}, got {tuple(result.shape)}{hint}")
    result = result.bool()
    if torch.equal(result, reference):
        return _verdict(True, f"keeps the {int(reference.sum())} of {reference.numel()} completions with A ≠ 0", "")
    mistakes = {
        "rewarded only": (REWARDS > 0, "you kept the rewarded completions: a wrong answer in a group with some right "
                                       "ones has A < 0 and carries gradient too; test whether the group is flat"),
        "inverted": (~reference, "inverted: these are the completions of flat groups, the ones to drop"),
        "everything": (torch.ones_like(reference), "nothing is dropped: a group whose rewards are all equal "
                                                   "(all 0, all 1, or all 0.5) has A = 0 for every member"),
        "sum test": (_sum_between(REWARDS), "a group of equal partial rewards (all 0.5) is flat too: test whether "
                                            "the rewards are all equal, not whether their sum is 0 or G"),
    }
    for candidate, hint in mistakes.values():
        if torch.equal(result, candidate):
            return _verdict(False, "", hint)
    return _verdict(False, "", f"expected {reference.int().tolist()}, got {result.int().tolist()}")


def _sum_between(rewards):
    """The mistake of testing 0 < Σ r < G (right for 0/1 rewards only)."""
    sums = rewards.view(-1, GROUP_SIZE).sum(dim=1)
    return ((sums > 0) & (sums < GROUP_SIZE)).repeat_interleave(GROUP_SIZE)
