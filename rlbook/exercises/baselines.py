"""Checker for the exercise of lesson 09 (baselines): the reader writes RLOO's leave-one-out advantages.

``check_rloo_advantages(fn)`` runs ``fn(rewards, group_size)`` on the batches of
``rlbook.exercises.grpo.GROUP_CASES`` and one of G = 2 (``RLOO_CASES``) and compares it with
``rlbook.advantages.group_advantages(rewards, G, "rloo")``: A_i = r_i − (1/(G−1)) Σ_{j≠i} r_j
(Kool et al. 2019; Ahmadian et al. 2024, arXiv:2402.14740), naming the likely mistake: the mean with the
sample itself, the others' sum over G, the whole batch, GRPO with either σ, the sign, RLOO divided by σ,
the baseline returned, a group size written into the code, groups read with ``view(G, -1)``, the
whole batch's mean (self included), the leave-one-out along the wrong axis, the whole group's sum (self
included) over G − 1; an answer that edits ``rewards`` in place is refused (in a trainer the rewards are
read again: logging, KL shaping). It returns True / False, or None when the exercise is not attempted yet
(``None``, or a function that raises ``NotImplementedError``).
"""

from __future__ import annotations

import torch

from rlbook.advantages import group_advantages
from rlbook.exercises.grpo import GROUP_CASES, advantage_exercise, _interleaved_advantages

__all__ = ["RLOO_CASES", "check_rloo_advantages"]


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


# GROUP_CASES with a case of G = 2 (where RLOO's advantage is r_i − r_j) before the G = 3 one: an answer with
# G = 4 written into it meets a batch that divides by 4 before one that does not, so it can be named.
RLOO_CASES = [*GROUP_CASES[:2], (torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0], dtype=torch.float64), 2),
              *GROUP_CASES[2:]]


def _rloo_exercise_mistakes(rewards: torch.Tensor, group_size: int) -> dict[str, tuple[torch.Tensor, str]]:
    """``_rloo_mistakes`` (shared with lesson 01's loss exercise, which names these three its own way) and more:
    GRPO with Bessel's σ, RLOO divided by the group's σ, the baseline returned for the advantage, a group size
    written into the code, groups read with ``view(G, -1)``, the whole batch's mean (self included), the
    leave-one-out along the wrong axis."""
    groups = rewards.view(-1, group_size)
    leave_one_out = group_advantages(rewards, group_size, "rloo").view(-1, group_size)
    over_sigma = [(leave_one_out / (groups.std(dim=1, keepdim=True, correction=c) + 1e-6)).reshape(-1) for c in (0, 1)]
    written_in = next((g for g in (4, 8, 2, 16) if g != group_size and rewards.numel() % g == 0), None)
    return {
        **_rloo_mistakes(rewards, group_size),
        "over_sigma": (over_sigma[0], "you divided RLOO's advantage by the group's σ (some libraries normalise it so): "
                                      "plain RLOO stops at r_i − the others' mean."),
        "over_sigma_bessel": (over_sigma[1], "you divided RLOO's advantage by the group's σ (Bessel's): plain RLOO "
                                             "stops at r_i − the others' mean."),
        "baseline": (((groups.sum(1, keepdim=True) - groups) / (group_size - 1)).reshape(-1),
                     "you returned the baseline b_i = Σ_{j≠i} r_j / (G − 1) itself: the advantage is r_i − b_i."),
        "written_in": (group_advantages(rewards, written_in, "rloo") if written_in else None,
                       f"these are RLOO's advantages for groups of {written_in}, but this batch has G = {group_size}: "
                       "use the `group_size` argument, not a number written into the code."),
        "grpo_bessel": (group_advantages(rewards, group_size, "grpo", unbiased_std=True),
                        "that is GRPO's (r − μ)/σ with Bessel's σ (torch's default `.std()`): RLOO neither includes "
                        "the sample in the mean nor divides by any σ."),
        "interleaved": (_interleaved_advantages(rewards, group_size, "rloo"),
                        "your groups are the wrong rows: each prompt's G samples are *contiguous* (rows 0…G−1 are "
                        "the first prompt), so reshape with `view(-1, G)`, not `view(G, -1)`."),
        "batch_mean": (rewards - rewards.mean(),
                       "you subtracted the mean of the whole batch, the sample itself and the other prompts included: "
                       "RLOO's baseline is the mean of the same prompt's *other* G − 1 samples (`rewards.view(-1, G)`)."),
        "self_over_g_minus_1": ((groups - groups.sum(1, keepdim=True) / (group_size - 1)).reshape(-1),
                                "you divided the whole group's sum by G − 1, the sample itself included: leave it "
                                "out of the sum too, b_i = (Σ_j r_j − r_i) / (G − 1)."),
        "columns": ((groups - (groups.sum(0, keepdim=True) - groups) / (groups.shape[0] - 1)).reshape(-1)
                    if groups.shape[0] > 1 else None,
                    "you left one out along the wrong axis: `view(-1, G)` puts one prompt per *row*, so the others' "
                    "sum is `sum(dim=1)`; `dim=0` compares the j-th samples of different prompts."),
    }


class ChangedItsInput(Exception):
    """Raised (and reported by the checker) when the reader's function edited ``rewards`` in place."""


def _leaves_rewards_alone(fn):
    """``fn``, called so that an in-place edit of ``rewards`` (``rewards -= …``) is an error, not a silent pass."""
    def call(rewards, group_size):
        before = rewards.clone()
        result = fn(rewards, group_size)
        if not torch.equal(rewards, before):
            raise ChangedItsInput("it changed `rewards` in place (e.g. `rewards -= …`); in a trainer the same "
                                  "rewards are read again (logging, KL shaping), so compute the advantages in a "
                                  "new tensor and leave `rewards` as it was")
        return result
    return call


check_rloo_advantages = advantage_exercise(
    "check_rloo_advantages", "leave-one-out advantages", "rloo", "RLOO's", _rloo_exercise_mistakes, cases=RLOO_CASES,
    adapt=_leaves_rewards_alone,
    doc="""Check a reader's ``fn(rewards, group_size) -> (B,) advantages`` against RLOO's, naming the mistake.

    Returns True when every case matches, False (printing what is wrong) otherwise, and None when
    the exercise is not attempted yet (``fn`` is None or raises ``NotImplementedError``).
    """)
