"""Self-checking exercise of lesson 04 (reward models): the Bradley–Terry loss.

``check_bradley_terry_loss(fn)`` runs the reader's ``fn(chosen_rewards, rejected_rewards)`` on a
few fixed batches, compares it with ``rlbook.losses.bradley_terry_loss`` and, when
it differs, names the usual mistake it matches (a temperature T in the loss among them). The rewards it
passes require grad, and a loss that no gradient can flow back through (``.item()``, ``float()``, NumPy)
is refused by name. It prints its verdict and returns True / False,
or None when the exercise is not attempted yet (``None``, or a function that raises
``NotImplementedError``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlbook.exercises.framework import DTYPE, FunctionExercise
from rlbook.losses.preference import bradley_terry_loss

__all__ = ["check_bradley_terry_loss"]


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