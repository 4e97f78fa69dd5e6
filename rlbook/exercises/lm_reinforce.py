"""Checker for lesson 01's language-model exercise: the REINFORCE loss of one training step.

The reader writes ``my_lm_reinforce_loss(logp, mask, rewards, group_size)``: from the (B, T) per-token
log-probabilities of B sampled responses (``rlbook.rollout.completion_logprobs``: right-padded, the
padding's entries are garbage), their (B, T) 0/1 ``mask``, and their (B,) verifier rewards in groups of
``group_size`` samples of one prompt (contiguous, as ``rlbook.rollout.sample`` returns them), the loss

    L = −(1/B) Σ_i sg[A_i] Σ_t mask[i, t] · logp[i, t],    A_i = R_i − (1/(G − 1)) Σ_{j≠i, same prompt} R_j,

the leave-one-out advantage (Kool et al. 2019; Ahmadian et al. 2024, arXiv:2402.14740) and the
``seq_mean_token_sum`` aggregation of ``rlbook.losses.policy_loss(..., variant="reinforce")``: each
response's token log-probs summed, which is log π(y | x) (Williams 1992's REINFORCE, with the reward
replaced by the advantage), and averaged over the B responses.

``check_lm_reinforce_loss`` compares the *gradient* of the reader's loss with respect to ``logp``
(a loss is defined up to a constant) with the reference's, −A_i · mask[i, t] / B, on fixed batches.
When they differ it tries every pairing of a usual advantage mistake (no baseline, the group mean
with the sample included, the whole batch as the group, groups read sample-major instead of
prompt-major, GRPO's σ — population or torch's default
Bessel std() —, …, from ``rlbook.exercises.baselines`` and here) with a usual aggregation mistake (a
per-response token mean — lesson 10's 1/|o| length bias —, DAPO's batch token mean, padding that leaks
in, no mean over responses, or one mistake inside each response combined with one over the batch) and
names the part, or the parts, that went wrong.
"""

from __future__ import annotations

import torch

from rlbook.advantages import group_advantages
from rlbook.aggregation import token_weights
from rlbook.exercises.baselines import _rloo_mistakes
from rlbook.exercises.framework import _close, _failed, _not_attempted, _verdict
from rlbook.exercises.grpo import _interleaved_advantages
from rlbook.exercises.pg_kl import _gradient_of_loss

__all__ = ["check_lm_reinforce_loss", "reference_lm_reinforce_loss"]

DTYPE = torch.float64
RIGHT = "right"


def _cases() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]]:
    """Fixed (logp, mask, rewards, G): responses of mixed lengths, 0/1 rewards, garbage in the padding.

    The third batch has flat groups (all 0, all 1), whose leave-one-out advantages are 0: a loss that skips
    them is right, one that then divides by the non-flat responses only is not.
    """
    generator = torch.Generator().manual_seed(101)
    cases = []
    for lengths, rewards, group_size in (((2, 5, 7, 3, 6, 1), (1.0, 0.0, 0.0, 1.0, 1.0, 0.0), 3),
                                         ((4, 7, 2, 5, 3, 6, 1, 7), (0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0), 4),
                                         ((3, 6, 2, 5, 4, 7, 1, 5, 2),
                                          (0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0), 3)):
        mask = (torch.arange(7).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).to(DTYPE)
        logp = -3 * torch.rand(len(lengths), 7, dtype=DTYPE, generator=generator) - 0.05
        logp = torch.where(mask.bool(), logp, torch.full_like(logp, -20.0))  # what padding may hold
        cases.append((logp, mask, torch.tensor(rewards, dtype=DTYPE), group_size))
    return cases


def reference_lm_reinforce_loss(logp, mask, rewards, group_size):
    """−(1/B) Σ_i sg[A_i] Σ_t mask[i, t] logp[i, t] with RLOO's A (``group_advantages(..., "rloo")``)."""
    advantages = group_advantages(rewards, group_size, "rloo").detach()
    return -(advantages.unsqueeze(1) * logp * mask).sum() / logp.shape[0]


def _advantage_variants(rewards: torch.Tensor, group_size: int) -> dict[str, tuple[torch.Tensor, str]]:
    """The right leave-one-out advantages and the usual wrong ones, each with the hint naming it."""
    variants = {RIGHT: (group_advantages(rewards, group_size, "rloo"), "")}
    variants["none"] = (rewards, "no baseline was subtracted (A = R): subtract the mean reward of the prompt's "
                                 "other G − 1 samples.")
    variants.update(_rloo_mistakes(rewards, group_size))
    for eps in (1e-6, 1e-4):  # torch's default std() divides by G − 1; ε = 1e-4 is TRL's
        variants[f"grpo_bessel_{eps:g}"] = (
            group_advantages(rewards, group_size, "grpo", unbiased_std=True, eps=eps),
            "that is GRPO's (r − μ)/σ with torch's default std(), Bessel's correction (divide by G − 1): RLOO "
            "neither includes the sample in the mean nor divides by σ.")
    # Groups read sample-major, rewards.view(G, -1): sample i joins the group of i mod (B/G), not i // G.
    n_groups = rewards.numel() // group_size
    variants["interleaved"] = (_interleaved_advantages(rewards, group_size, "rloo"),
                               "the groups are read the wrong way round (rewards.view(G, -1), which puts sample i "
                               "with samples i ± B/G): the G samples of one prompt are consecutive, so group with "
                               "rewards.view(-1, G), one row per prompt.")
    variants["group_size_swapped"] = (group_advantages(rewards, n_groups, "rloo"),
                                      "your groups hold B/G consecutive samples, not G (rewards.view(G, -1) with the "
                                      "leave-one-out taken along a row): group with rewards.view(-1, G), one row of G "
                                      "samples per prompt.")
    variants["batch_mean"] = (rewards - rewards.mean(),
                              "you subtracted the mean of the whole batch, the sample included: the baseline must "
                              "come from the same prompt's other G − 1 samples, not from every prompt's, and must "
                              "leave the sample out.")
    flat = (rewards.view(-1, group_size) == rewards.view(-1, group_size)[:, :1]).all(dim=1)
    if flat.any() and not flat.all():  # dropped the flat groups, then averaged over the responses left
        variants["flat_dropped"] = (variants[RIGHT][0] * flat.numel() / int((~flat).sum()),
                                    "you averaged over the responses of the non-flat groups only: a group whose "
                                    "rewards are all equal has A = 0 and adds nothing, but it still counts in B; "
                                    "divide by all B responses.")
    variants["sign"] = (-variants[RIGHT][0], "the sign is flipped: the loss is −A · log π, minimised, so that gradient "
                                             "descent on it is ascent on J.")
    return variants


def _aggregation_variants(mask: torch.Tensor) -> dict[str, tuple[torch.Tensor, str]]:
    """The right token weights (mask / B) and the usual wrong ones, each with the hint naming it."""
    n_responses, width = mask.shape
    variants = {
        RIGHT: (token_weights(mask, "seq_mean_token_sum"), ""),
        "response_mean": (token_weights(mask, "seq_mean_token_mean"),
                          "each response's token terms were averaged (divided by its own length |o_i|, GRPO's "
                          "seq_mean_token_mean) instead of summed: the sum is log π(y | x), the mean is not, and "
                          "dividing by |o_i| brings in the length bias of lesson 10."),
        "batch_token_mean": (token_weights(mask, "token_mean"),
                             "the loss was divided by the number of real tokens in the batch (DAPO's token_mean): "
                             "sum each response's tokens, then average over the B responses."),
        "padding": (torch.ones_like(mask) / n_responses,
                    "padding tokens count: their log-probs are garbage; multiply by the mask before summing."),
        "grid_mean": (torch.ones_like(mask) / mask.numel(),
                      "you took .mean() over the whole (B, T) grid: padding counts, and dividing by B · T is not "
                      "log π(y): multiply by the mask, sum over t, then average over the B responses."),
        "masked_grid_mean": (mask / mask.numel(),
                             "you took .mean() of the masked (B, T) grid, which divides by the padded width T too: "
                             "sum over t, then divide by B only."),
        "no_batch_mean": (mask, "the loss sums over the B responses instead of averaging: divide by B."),
    }
    # Two aggregation mistakes at once: a wrong weight inside each response (its own length, or the padding)
    # combined with a wrong divisor over the batch (none, or the batch's real-token count).
    lengths = mask.sum(dim=1, keepdim=True).clamp(min=1)
    for row_name, rows in (("response_mean", mask / lengths), ("padding", torch.ones_like(mask))):
        for divisor_name, divisor in (("no_batch_mean", 1.0), ("batch_token_mean", mask.sum())):
            hints = [variants[name][1] for name in (row_name, divisor_name)]
            variants[f"{row_name}+{divisor_name}"] = (rows / divisor, "two mistakes: " + " And ".join(hints))
    return variants


def _gradient(loss_fn, logp, mask, rewards, group_size):
    """∇_logp of the reader's loss, or an error message."""
    return _gradient_of_loss(loss_fn, logp, mask.clone(), rewards.clone(), group_size, wrt="the logp")


def _diagnose(gradient, logp, mask, rewards, group_size) -> str:
    """Name the advantage mistake, the aggregation mistake, or both, that the gradient matches."""
    advantages = _advantage_variants(rewards, group_size)
    aggregations = _aggregation_variants(mask)
    for adv_name, (adv, adv_hint) in advantages.items():
        for agg_name, (weights, agg_hint) in aggregations.items():
            if (adv_name, agg_name) == (RIGHT, RIGHT):
                continue
            if _close(gradient, -adv.unsqueeze(1) * weights):
                hints = [hint for name, hint in ((adv_name, f"advantages: {adv_hint}"),
                                                 (agg_name, f"aggregation: {agg_hint}")) if name != RIGHT]
                return " ".join(hints)
    reference = -advantages[RIGHT][0].unsqueeze(1) * aggregations[RIGHT][0]
    return (f"not the expected gradient −A_i · mask / B: expected {reference[0].tolist()[:4]}… for the first response, "
            f"got {gradient[0].detach().tolist()[:4]}…")


def check_lm_reinforce_loss(loss_fn) -> bool | None:
    """Check ``loss_fn(logp, mask, rewards, group_size) -> scalar loss`` against the reference.

    Compares ∇_logp of the reader's loss with −A_i · mask[i, t] / B (RLOO's A_i) on three fixed batches
    (one with flat groups), naming the usual mistakes. Returns True / False, or None when not attempted yet.
    """
    if _not_attempted(loss_fn, "REINFORCE loss"):
        return None
    for logp, mask, rewards, group_size in _cases():
        gradient, error = _gradient(loss_fn, logp, mask, rewards, group_size)
        if error:
            return _failed(error)
        reference, _ = _gradient(reference_lm_reinforce_loss, logp, mask, rewards, group_size)
        if not _close(gradient, reference):
            hint = _diagnose(gradient, logp, mask, rewards, group_size)
            return _verdict(False, "", f"the gradient of your loss is wrong (G = {group_size}) — {hint}")
    return _verdict(True, "your loss has the reference gradient −A_i · mask / B on every test batch", "")
