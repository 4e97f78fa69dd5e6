"""Checker for the exercise of lesson 09 (baselines): the reader writes RLOO's leave-one-out advantages.

``check_rloo_advantages(fn)`` runs ``fn(rewards, group_size)`` on the batches of
``rlbook.exercises.grpo.GROUP_CASES`` and compares it with
``rlbook.advantages.group_advantages(rewards, G, "rloo")``: A_i = r_i − (1/(G−1)) Σ_{j≠i} r_j
(Kool et al. 2019; Ahmadian et al. 2024, arXiv:2402.14740), naming the likely mistake: the mean with the
sample itself, the others' sum over G, the whole batch, GRPO with either σ, the sign, groups read with
``view(G, -1)``, the leave-one-out along the wrong axis. It returns
True / False, or None when the exercise is not attempted yet (``None``, or a function that raises
``NotImplementedError``).
"""

from __future__ import annotations

import torch

from rlbook.advantages import group_advantages
from rlbook.exercises.grpo import advantage_exercise, _interleaved_advantages

__all__ = ["check_rloo_advantages"]


def _rloo_mistakes(rewards: torch.Tensor, group_size: int) -> dict[str, tuple[torch.Tensor, str]]:
    groups = rewards.view(-1, group_size)
    others = groups.sum(1, keepdim=True) - groups
    return {
        "mean": (group_advantages(rewards, group_size, "dr_grpo"),
                 "you subtracted the group mean *including* the sample itself: that is the mean baseline, "
                 "exactly (G − 1)/G times RLOO's advantage. Leave the sample out: b_i = Σ_{j≠i} r_j / (G − 1)."),
        "divide_by_g": ((groups - others / group_size).reshape(-1),
                        "you left the sample out but divided the others' sum by G: there are G − 1 others."),
        "batch": (rewards - (rewards.sum() - rewards) / (rewards.numel() - 1),
                  "you left one out of the whole batch: the baseline must come from the same prompt's other "
                  "G − 1 samples (`rewards.view(-1, G)`)."),
        "grpo": (group_advantages(rewards, group_size, "grpo"),
                 "that is GRPO's (r − μ)/σ: RLOO neither includes the sample in the mean nor divides by σ."),
        "sign": (-group_advantages(rewards, group_size, "rloo"),
                 "the sign is flipped: the advantage is r_i minus the others' mean."),
    }


def _rloo_exercise_mistakes(rewards: torch.Tensor, group_size: int) -> dict[str, tuple[torch.Tensor, str]]:
    """``_rloo_mistakes`` (shared with lesson 01's loss exercise, which names these three its own way) and three
    more: GRPO with Bessel's σ, groups read with ``view(G, -1)``, the leave-one-out along the wrong axis."""
    groups = rewards.view(-1, group_size)
    return {
        **_rloo_mistakes(rewards, group_size),
        "grpo_bessel": (group_advantages(rewards, group_size, "grpo", unbiased_std=True),
                        "that is GRPO's (r − μ)/σ with Bessel's σ (torch's default `.std()`): RLOO neither includes "
                        "the sample in the mean nor divides by any σ."),
        "interleaved": (_interleaved_advantages(rewards, group_size, "rloo"),
                        "your groups are the wrong rows: each prompt's G samples are *contiguous* (rows 0…G−1 are "
                        "the first prompt), so reshape with `view(-1, G)`, not `view(G, -1)`."),
        "columns": ((groups - (groups.sum(0, keepdim=True) - groups) / (groups.shape[0] - 1)).reshape(-1)
                    if groups.shape[0] > 1 else None,
                    "you left one out along the wrong axis: `view(-1, G)` puts one prompt per *row*, so the others' "
                    "sum is `sum(dim=1)`; `dim=0` compares the j-th samples of different prompts."),
    }


check_rloo_advantages = advantage_exercise(
    "check_rloo_advantages", "leave-one-out advantages", "rloo", "RLOO's", _rloo_exercise_mistakes,
    doc="""Check a reader's ``fn(rewards, group_size) -> (B,) advantages`` against RLOO's, naming the mistake.

    Returns True when every case matches, False (printing what is wrong) otherwise, and None when
    the exercise is not attempted yet (``fn`` is None or raises ``NotImplementedError``).
    """)
