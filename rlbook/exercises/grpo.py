"""Checker for the exercise of lesson 08 (GRPO): the reader writes GRPO's group advantages.

``check_group_advantages(fn)`` runs ``fn(rewards, group_size)`` on fixed batches (B = n_prompts × G
rewards, each prompt's G contiguous, one group with all rewards equal) and compares it with
``rlbook.advantages.group_advantages(rewards, G, "grpo")``: A_i = (r_i − μ) / σ with the population
σ (divide by G), and 0 for a zero-variance group. When the answer differs, it tries the usual
mistakes and names the one the answer matches. It returns True / False, or None when the exercise is
not attempted yet (``None``, or a function that raises ``NotImplementedError``).
"""

from __future__ import annotations

import sys

import torch

from rlbook.advantages import batch_normalize, group_advantages
from rlbook.exercises.framework import FunctionExercise

__all__ = ["check_group_advantages", "GROUP_CASES"]

DTYPE = torch.float64
# (rewards, G): binary groups, a flat group (all right), a flat group of zeros, graded rewards.
GROUP_CASES = [
    (torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0], dtype=DTYPE), 4),
    (torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0], dtype=DTYPE), 4),
    (torch.tensor([0.5, 2.0, 1.0, 0.0, 0.0, 0.0, 3.0, 1.0, 1.0], dtype=DTYPE), 3),
]


def _close(result: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal up to the ε a reader may add to σ (1e-8 … 1e-4)."""
    return result.shape == expected.shape and bool(torch.allclose(result, expected, rtol=1e-3, atol=1e-3))


def _group_mistakes(rewards: torch.Tensor, group_size: int) -> dict[str, tuple[torch.Tensor, str]]:
    """The usual wrong answers for this batch, each with the hint that names it."""
    groups = rewards.view(-1, group_size)
    interleaved = rewards.view(group_size, -1).T.reshape(-1)  # groups read as rows 0, n, 2n, … by mistake
    undo = torch.arange(rewards.numel()).view(group_size, -1).T.reshape(-1).argsort()
    return {
        "bessel": (group_advantages(rewards, group_size, "grpo", unbiased_std=True),
                   "you used Bessel's std (divide by G − 1, torch's default `.std()`). GRPO here uses the "
                   "population std (divide by G, `.std(correction=0)`): for [1, 1, 1, 0] σ ≈ 0.433, not 0.5, "
                   "and the advantages are +0.577 / −1.732, not +0.5 / −1.5."),
        "batch": (batch_normalize(rewards),
                  "you normalised over the whole batch instead of within each group: μ and σ must be each "
                  "prompt's own, from its G samples (`rewards.view(-1, G)`), so an easy prompt and a hard "
                  "one are not compared with each other."),
        "group_mean_batch_std": (torch.where(_flat_rows(rewards, group_size), torch.zeros_like(rewards),
                                             (groups - groups.mean(1, keepdim=True)).reshape(-1)
                                             / rewards.std(correction=0)),
                                 "you subtracted each group's mean but divided by the whole batch's σ (TRL's "
                                 "`scale_rewards=\"batch\"`); GRPO here divides by each group's own σ."),
        "batch_bessel": (batch_normalize(rewards, unbiased_std=True),
                         "you normalised over the whole batch (with Bessel's std) instead of within each group "
                         "of G: reshape to (n_prompts, G) and take μ and σ along the group."),
        "no_std": (group_advantages(rewards, group_size, "dr_grpo"),
                   "you subtracted the group mean but did not divide by the group's σ (that is Dr.GRPO's "
                   "advantage, lesson 10)."),
        "rloo": (group_advantages(rewards, group_size, "rloo"),
                 "that is RLOO's leave-one-out advantage, not GRPO's (r − μ) / σ."),
        "sign": (-group_advantages(rewards, group_size, "grpo"),
                 "the sign is flipped: a reward above the group mean must get a positive advantage."),
        "not_centred": (torch.where(groups.std(1, correction=0, keepdim=True) > 0,
                                    groups / groups.std(1, correction=0, keepdim=True).clamp_min(1e-12),
                                    torch.zeros_like(groups)).reshape(-1),
                        "the group mean was not subtracted: A = (r − μ) / σ."),
        "rows_of_n": (group_advantages(rewards, rewards.numel() // group_size, "grpo"),
                      "your groups are the wrong rows: `view(G, -1)` makes G rows of n_prompts rewards each; each "
                      "prompt's G samples are *contiguous*, so reshape with `view(-1, G)` (one row per prompt)."),
        "columns": (torch.where(groups.std(0, correction=0, keepdim=True) > 0,
                                (groups - groups.mean(0, keepdim=True))
                                / groups.std(0, correction=0, keepdim=True).clamp_min(1e-12),
                                torch.zeros_like(groups)).reshape(-1),
                    "you took μ and σ along the wrong axis: `view(-1, G)` puts one prompt per *row*, so the "
                    "group statistics are `mean(dim=1)` and `std(dim=1, correction=0)`; `dim=0` compares the "
                    "j-th samples of different prompts with each other."),
        "interleaved": (group_advantages(interleaved, group_size, "grpo")[undo],
                        "your groups are the wrong rows: each prompt's G samples are *contiguous* "
                        "(rows 0…G−1 are the first prompt), so reshape with `view(-1, G)`, not `view(G, -1)`."),
    }


def _flat_rows(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    groups = rewards.view(-1, group_size)
    return (groups == groups[:, :1]).all(1).repeat_interleave(group_size)


def _as_advantages(result, rewards, group_size):
    return result.detach().to(DTYPE).reshape(-1)


def _not_these_advantages(whose: str):
    """The message for an unnamed wrong answer: ``whose`` advantages for this batch, expected and got."""
    def otherwise(result, expected, rewards, group_size, **_counts):
        return (f"not {whose} advantages for rewards {rewards.tolist()} (G = {group_size}): "
                f"expected {[round(v, 3) for v in expected.tolist()]}, got {[round(v, 3) for v in result.tolist()]}")
    return otherwise


def _one_per_reward(result, reference, rewards, group_size):
    if result.shape != rewards.shape:
        return f"return one advantage per reward, shape {tuple(rewards.shape)}; got {tuple(result.shape)}"
    return None


def _finite(result, reference, rewards, group_size):
    if torch.isfinite(result).all():
        return None
    flat = _flat_rows(rewards, group_size)
    where = "in a group whose rewards are all equal" if not torch.isfinite(result[flat]).all() else ""
    return (f"your advantages contain NaN or inf {where}: a zero-variance group has σ = 0, and 0 / 0 is NaN. "
            "Give such a group advantage 0 (it carries no signal), or divide by σ + ε.")


def _varied_groups_right(result, reference, rewards, group_size):
    varied = ~_flat_rows(rewards, group_size)
    if _close(result[varied], reference[varied]):
        return ("the varied groups are right, but a zero-variance group (all rewards equal) must get advantage "
                "exactly 0: it carries no signal.")
    return None


def advantage_exercise(name: str, what: str, method: str, whose: str, mistakes, *, checks=(), partial=None,
                       across: bool = False, doc: str = "") -> FunctionExercise:
    """The checker of an exercise that writes ``fn(rewards, group_size) -> (B,) advantages`` for ``method``
    (``rlbook.advantages.group_advantages``'s name), run on ``GROUP_CASES``; one advantage per reward is
    checked first, then ``checks``, the comparison, ``partial`` and the ``mistakes``. With ``across``, all
    cases are judged together and a mistake is named only when it fits every case (some mistakes coincide
    on one batch: on the first, every interleaved group and the whole batch share μ = σ = 0.5)."""
    return FunctionExercise(
        name, what=what, cases=lambda: GROUP_CASES,
        reference=lambda rewards, group_size: group_advantages(rewards, group_size, method),
        mistakes=mistakes, prepare=_as_advantages, checks=(_one_per_reward, *checks), close=_close, partial=partial,
        together=(lambda *case: "all") if across else None, across=across,
        otherwise=_not_these_advantages(whose), success=f"your {what} match rlbook's on all {len(GROUP_CASES)} batches",
        doc=doc, module=sys._getframe(1).f_globals["__name__"])


check_group_advantages = advantage_exercise(
    "check_group_advantages", "group advantages", "grpo", "GRPO's", _group_mistakes, checks=(_finite,),
    partial=_varied_groups_right, across=True,
    doc="""Check a reader's ``fn(rewards, group_size) -> (B,) advantages`` against GRPO's, naming the mistake.

    Returns True when every case matches, False (printing what is wrong) otherwise, and None when
    the exercise is not attempted yet (``fn`` is None or raises ``NotImplementedError``).
    """)
