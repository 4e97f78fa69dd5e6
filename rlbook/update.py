"""The policy update: k minibatch steps of a policy-gradient loss on one rollout.

Every online method ends a step the same way. The rollout's rows are cut into minibatches (the
whole batch as one, or several passes over it in shuffled minibatches: PPO's "epochs",
DeepSeekMath's μ iterations), and for each minibatch

1. log π_θ of the sampled tokens is recomputed, with gradients (``rlbook.rollout.rollout_logprobs``);
2. the surrogate ``rlbook.losses.policy_loss`` compares it with ``old_logp``, the log-probs of the
   policy that sampled the batch: the first minibatch sees r = π_θ/π_old = 1, every later one a
   policy that has already moved, which is what the clip is for;
3. the gradient's norm is clipped to ``max_grad_norm`` and the optimizer steps.

``OnlineTrainer`` runs this every training step; lessons 08 and 10–13 run it on one batch to look
at what a few updates do to the ratios, the clip and the log-probs.
"""

from __future__ import annotations

import math

import torch

from rlbook._checks import check_int
from rlbook.losses import policy_loss
from rlbook.rollout import rollout_logprobs

__all__ = ["minibatch_plan", "optimizer_step", "policy_step", "policy_update"]


def minibatch_plan(rows: torch.Tensor, minibatch_size: int | None, *, epochs: int = 1,
                   generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """The minibatches of ``epochs`` passes over ``rows`` (row indices), in the order they are trained on.

    Each pass shuffles the rows afresh (with ``generator``) and cuts them into minibatches of
    ``minibatch_size`` (the last one may be smaller). When one minibatch holds every row
    (``minibatch_size`` None or ≥ the row count) the rows keep their order: each pass is one step
    on the whole batch.

    Kept apart from ``rlbook.trainers.data.shuffled_batches`` (the offline trainers' seeded sampler
    over a corpus, on ``random.Random``) on purpose: this shuffles a rollout's rows, a tensor, with
    a ``torch.Generator`` the online trainer seeds afresh at every step, and a finite plan of
    ``epochs`` passes is what PPO's update needs; sharing one generator would change every run's order.
    """
    check_int("epochs", epochs, minimum=1)
    size = rows.numel() if minibatch_size is None else check_int("minibatch_size", minibatch_size, minimum=1)
    plan = []
    for _ in range(epochs):
        order = rows[torch.randperm(rows.numel(), generator=generator)] if size < rows.numel() else rows
        plan.extend(order.split(size))
    return plan


def optimizer_step(optimizer, loss: torch.Tensor, parameters, max_grad_norm: float | None) -> float:
    """Backward, clip the gradient's norm to ``max_grad_norm`` (None: no clipping), step.

    Returns the gradient norm before clipping (over the ``parameters`` that got a gradient).
    """
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    parameters = [p for p in parameters if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(parameters, math.inf if max_grad_norm is None else max_grad_norm)
    optimizer.step()
    return norm.item()


def policy_step(model, optimizer, rollout, rows: torch.Tensor, advantages, *, old_logp=None,
                max_grad_norm: float | None = 1.0, temperature: float = 1.0, **loss_kwargs):
    """One optimizer step of ``policy_loss`` on the completions ``rows`` of ``rollout``.

    ``advantages`` ((b,) or (b, C)), ``old_logp`` (default: the rollout's own sampling log-probs
    of these rows) and any tensor among ``loss_kwargs`` (``ref_logp``, ``behaviour_logp``) belong
    to the b rows, in the order of ``rows``; the other ``loss_kwargs`` (variant, clip bounds,
    β, ...) go to ``policy_loss`` as they are. log π_θ is scored at ``temperature`` (the sampling
    temperature); the token entropies are passed on for an entropy bonus.

    Returns ``(metrics, entropy)``: ``policy_loss``'s metrics before the step plus ``loss`` and
    ``grad_norm``, and the (b, C) entropies of the rows' tokens (detached).
    """
    picked = rollout.select(rows)
    logp, entropy = rollout_logprobs(model, picked, temperature=temperature, return_entropy=True)
    old_logp = picked.logprobs if old_logp is None else old_logp
    loss, metrics = policy_loss(logp, old_logp, advantages, picked.completion_mask, entropy=entropy, **loss_kwargs)
    metrics["loss"] = loss.item()
    metrics["grad_norm"] = optimizer_step(optimizer, loss, model.parameters(), max_grad_norm)
    return metrics, entropy.detach()


def policy_update(model, optimizer, rollout, advantages, minibatches, *, old_logp=None, ref_logp=None,
                  max_grad_norm: float | None = 1.0, temperature: float = 1.0, **loss_kwargs) -> list[dict]:
    """``policy_step`` on each minibatch of row indices in ``minibatches`` (e.g. a ``minibatch_plan``), in turn.

    ``advantages`` ((B,) or (B, C)), ``old_logp`` (default: the rollout's sampling log-probs) and
    ``ref_logp`` (for an in-loss KL) are the whole rollout's; each step takes its rows. ``model`` is
    trained in place. Returns each step's metrics, measured before its optimizer step.
    """
    old_logp = rollout.logprobs if old_logp is None else old_logp
    steps = []
    for rows in minibatches:
        metrics, _ = policy_step(model, optimizer, rollout, rows, advantages[rows], old_logp=old_logp[rows],
                                 ref_logp=None if ref_logp is None else ref_logp[rows], max_grad_norm=max_grad_norm,
                                 temperature=temperature, **loss_kwargs)
        steps.append(metrics)
    return steps
