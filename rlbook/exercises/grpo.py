"""Checkers for the exercises of lesson 08 (GRPO): the reader writes GRPO's group advantages, then its loss.

``check_group_advantages(fn)`` runs ``fn(rewards, group_size)`` on fixed batches (B = n_prompts × G
rewards, each prompt's G contiguous, one group with all rewards equal) and compares it with
``rlbook.advantages.group_advantages(rewards, G, "grpo")``: A_i = (r_i − μ) / σ with the population
σ (divide by G), and 0 for a zero-variance group. When the answer differs, it tries the usual
mistakes and names the one the answer matches. It returns True / False, or None when the exercise is
not attempted yet (``None``, or a function that raises ``NotImplementedError``).

``check_grpo_loss(fn)`` checks ``fn(logp, old_logp, ref_logp, advantages, mask, eps, beta)``, the loss
−J_GRPO of Shao et al. 2024 (arXiv:2402.03300), §4.1, eq. 3: PPO's clipped term per token, minus β·k3
per token (eq. 4), averaged over each response's own tokens (1/|o_i|) and then over the responses
(1/G). It compares the value *and* the gradient with respect to ``logp`` with ``rlbook.losses.policy_loss``
(``variant="grpo"``) on padded batches of unequal lengths, and names the usual mistakes: a whole-batch
token mean (DAPO's and PPO's average), no 1/|o_i|, a sum over the responses (no 1/G), padding counted in |o_i|, padding left in the
numerator (``per_token.sum(1) / mask.sum(1)`` without the mask) or in both (``per_token.mean()`` over
the padded tensor), no clip, max for min, lesson 03's dual clip, DAPO's asymmetric clip-higher (ε_high = 0.28),
an inverted ratio π_old/π_θ, the given advantages normalised again over the batch, the
KL's sign, the KL's direction, k1 for k3, the KL averaged outside the per-response mean, the KL weighted by
the ratio (β·r·k3: TRL's ``use_bias_correction_kl``, DeepSeek-V3.2's unbiased KL, a different objective
from eq. 3's), the KL not masked on padding, the log-ratio clipped instead of the ratio, a detached ratio
or KL, the objective returned for the loss, and hard-coded ε or β.
"""

from __future__ import annotations

import sys

import torch

from rlbook.advantages import batch_normalize, group_advantages
from rlbook.aggregation import aggregate
from rlbook.exercises.framework import FunctionExercise
from rlbook.kl import k1, k2, k3
from rlbook.losses import policy_loss

__all__ = ["check_group_advantages", "GROUP_CASES", "check_grpo_loss", "grpo_loss_cases"]

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


def _interleaved_advantages(rewards: torch.Tensor, group_size: int, estimator: str) -> torch.Tensor:
    """The mistake of reading groups with ``rewards.view(G, -1)`` (sample i grouped with i ± B/G, not with its
    neighbours): ``estimator``'s advantages of those groups, returned in the samples' own order."""
    interleaved = rewards.view(group_size, -1).T.reshape(-1)
    undo = torch.arange(rewards.numel()).view(group_size, -1).T.reshape(-1).argsort()
    return group_advantages(interleaved, group_size, estimator)[undo]


def _group_mistakes(rewards: torch.Tensor, group_size: int) -> dict[str, tuple[torch.Tensor, str]]:
    """The usual wrong answers for this batch, each with the hint that names it."""
    groups = rewards.view(-1, group_size)
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
        "batch_mean_group_std": (torch.where(_flat_rows(rewards, group_size), torch.zeros_like(rewards),
                                             ((groups - rewards.mean())
                                              / groups.std(1, correction=0, keepdim=True).clamp_min(1e-12)).reshape(-1)),
                                 "you divided by each group's σ but subtracted the whole batch's mean: μ must be each "
                                 "prompt's own too, `groups.mean(dim=1, keepdim=True)`, or an easy prompt's answers all "
                                 "get pushed up and a hard one's all down."),
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
        "interleaved": (_interleaved_advantages(rewards, group_size, "grpo"),
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
    return _eps_too_large(result, reference, rewards, group_size)


def _eps_too_large(result, reference, rewards, group_size):
    """Named when each varied group's advantages are the right ones shrunk by one factor in (0.9, 1) and the flat
    groups are 0: the answer divides by σ + ε (or √(var + ε)) with an ε too large to be a guard against 0 / 0."""
    varied = ~_flat_rows(rewards, group_size)
    if not torch.allclose(result[~varied], torch.zeros_like(result[~varied]), atol=1e-6):
        return None
    nonzero = varied & (reference.abs() > 1e-9)
    shrink = torch.ones_like(reference)
    shrink[nonzero] = result[nonzero] / reference[nonzero]
    per_group = shrink.view(-1, group_size)
    if not (torch.allclose(per_group, per_group[:, :1], rtol=0, atol=1e-6) and (shrink > 0.9).all()
            and (shrink[nonzero] < 1).all()):
        return None
    return (f"your advantages are the right ones shrunk by up to {1 - float(shrink.min()):.2%}: your ε is too "
            "large. It is there only to keep 0 / 0 away from a flat group, so it must not move σ: keep it at "
            "1e-8 to 1e-6 (this checker allows up to 1e-4), or give a flat group 0 directly.")


def advantage_exercise(name: str, what: str, method: str, whose: str, mistakes, *, checks=(), partial=None,
                       across: bool = False, doc: str = "", cases=None, adapt=None) -> FunctionExercise:
    """The checker of an exercise that writes ``fn(rewards, group_size) -> (B,) advantages`` for ``method``
    (``rlbook.advantages.group_advantages``'s name), run on ``cases`` (default ``GROUP_CASES``); one advantage per reward is
    checked first, then ``checks``, the comparison, ``partial`` and the ``mistakes``. With ``across``, all
    cases are judged together and a mistake is named only when it fits every case (some mistakes coincide
    on one batch: on the first, every interleaved group and the whole batch share μ = σ = 0.5). ``adapt``:
    ``FunctionExercise``'s (the function actually called, e.g. one that checks the input was left alone)."""
    cases = GROUP_CASES if cases is None else cases
    return FunctionExercise(
        name, what=what, cases=lambda: cases,
        reference=lambda rewards, group_size: group_advantages(rewards, group_size, method),
        mistakes=mistakes, prepare=_as_advantages, checks=(_one_per_reward, *checks), close=_close, partial=partial,
        together=(lambda *case: "all") if across else None, across=across, adapt=adapt,
        otherwise=_not_these_advantages(whose), success=f"your {what} match rlbook's on all {len(cases)} batches",
        doc=doc, module=sys._getframe(1).f_globals["__name__"])


check_group_advantages = advantage_exercise(
    "check_group_advantages", "group advantages", "grpo", "GRPO's", _group_mistakes, checks=(_finite,),
    partial=_varied_groups_right, across=True,
    doc="""Check a reader's ``fn(rewards, group_size) -> (B,) advantages`` against GRPO's, naming the mistake.

    Returns True when every case matches, False (printing what is wrong) otherwise, and None when
    the exercise is not attempted yet (``fn`` is None or raises ``NotImplementedError``).
    """)


# ----------------------------------------------------------------------------------------------
# GRPO's loss, eq. 3: −(1/G) Σ_i (1/|o_i|) Σ_t [min(r A_i, clip(r, 1 ± ε) A_i) − β k3]

# (lengths, advantages, ε, β): responses of unequal lengths, so every averaging differs; advantages of both
# signs and a zero; the second batch changes ε and β, so a hard-coded 0.2 or 0.04 shows.
LOSS_SETTINGS = (((7, 3, 5, 2), (1.2, -0.8, 0.0, -1.5), 0.2, 0.04),
                 ((4, 8, 1, 6, 8), (0.6, -1.1, 1.7, -0.4, 0.9), 0.1, 0.3))


def grpo_loss_cases() -> list[tuple]:
    """The checker's inputs ``(logp, old_logp, ref_logp, advantages, mask, eps, beta)``, float64 (seeded).

    Ratios π_θ/π_old spread over (0.5, 1.6), past both clip bounds, and one token of each batch's most negative
    response at r ≈ 4.5, past the c = 3 of a dual clip (lesson 03), which eq. 3 does not have; π_ref away from
    π_θ on both sides; padded positions (mask 0) hold finite junk, as a real batch's padding does.
    """
    generator = torch.Generator().manual_seed(8)
    cases = []
    for lengths, advantages, eps, beta in LOSS_SETTINGS:
        shape = (len(lengths), max(lengths))
        mask = (torch.arange(shape[1]) < torch.tensor(lengths)[:, None]).to(DTYPE)
        old_logp = -0.1 - 2.5 * torch.rand(shape, generator=generator, dtype=DTYPE)
        log_ratio = torch.empty(shape, dtype=DTYPE).uniform_(-0.7, 0.47, generator=generator)
        logp = (old_logp + log_ratio).clamp(max=-0.01)
        ref_logp = logp + torch.empty(shape, dtype=DTYPE).uniform_(-1.0, 1.0, generator=generator)
        junk = mask == 0
        logp[junk], old_logp[junk], ref_logp[junk] = 0.5, -3.0, -6.0
        row = advantages.index(min(advantages))  # one token of the most negative response far above 1 + ε:
        old_logp[row, 0], logp[row, 0] = -2.5, -2.5 + 1.5  # r = e^1.5 ≈ 4.5 > 3, where a dual clip (c = 3) acts
        cases.append((logp, old_logp, ref_logp, torch.tensor(advantages, dtype=DTYPE), mask, eps, beta))
    return cases


def _reference_grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    loss, _ = policy_loss(logp, old_logp, advantages, mask, variant="grpo", eps_low=eps, eps_high=eps,
                          ref_logp=ref_logp, beta=beta, kl_estimator="k3")
    return loss


def _value_and_gradient(loss_fn):
    """``loss_fn`` as a function returning [loss, ∂loss/∂logp (flattened)]: the checker compares both.

    A result that is not one number is returned as it is (the shape check names it); a loss with no
    gradient to ``logp`` gets a NaN gradient (the gradient check names it)."""
    def both(logp, *rest):
        logp = logp.detach().clone().requires_grad_(True)
        loss = loss_fn(logp, *rest)
        if not isinstance(loss, torch.Tensor):
            loss = torch.as_tensor(loss, dtype=DTYPE)
        if loss.numel() != 1:
            return loss.detach()
        gradient = None
        if loss.requires_grad:
            (gradient,) = torch.autograd.grad(loss.reshape(()), logp, allow_unused=True)
        if gradient is None:
            gradient = torch.full_like(logp, float("nan"))
        return torch.cat([loss.detach().reshape(1).to(DTYPE), gradient.detach().reshape(-1).to(DTYPE)])
    return both


def _terms(logp, old_logp, advantages, eps):
    """The per-token pieces the mistakes recombine: ratio, A per token, the clipped ratio."""
    ratio = torch.exp(logp - old_logp)
    token_advantages = advantages[:, None].expand_as(logp)
    return ratio, token_advantages, ratio.clamp(1 - eps, 1 + eps)


# the averages a reader may take, as rlbook.aggregation's modes: eq. 3's, the whole batch's token mean, no 1/|o_i|
AVERAGES = {"response": "seq_mean_token_mean", "token": "token_mean", "sum": "seq_mean_token_sum"}


def _grpo_loss_variant(*, clip="min", kl="k3", kl_sign=1.0, average="response", kl_average="inside",
                       kl_weighted=False, detach_ratio=False, detach_kl=False, eps=None, beta=None, sign=1.0,
                       eps_high=None, invert_ratio=False, renormalise=None):
    """A wrong GRPO loss that differs from eq. 3 in the named choices (the defaults are eq. 3 itself).

    ``clip="log"`` clips the log-ratio to [−ε, ε] (so r to [e^−ε, e^ε]); ``clip="dual"`` adds lesson 03's dual clip
    (Ye et al. 2020, c = 3: max(min(r·A, clip(r)·A), 3·A) where A < 0); ``average="responses_summed"`` sums the
    responses' token means instead of averaging them (no 1/G); ``average="unmasked"`` sums each
    row's padded positions too, over its own length; ``average="positions"`` is one mean over every
    position of the padded (B, T) tensor; ``kl_weighted`` multiplies k3 by
    the ratio r (TRL's ``use_bias_correction_kl``); ``kl_average="unmasked"`` adds the KL's mean over every
    position of the padded row, padding included. ``eps_high`` clips the ratio to [1 − ε, 1 + eps_high] (DAPO's
    asymmetric clip-higher, Yu et al. 2025, eq. 8–10, ε_high = 0.28); ``invert_ratio`` uses π_old/π_θ;
    ``renormalise`` ("population" or "bessel") whitens the given advantages again over the batch."""
    def loss_fn(logp, old_logp, ref_logp, advantages, mask, case_eps, case_beta):
        eps_used = case_eps if eps is None else eps
        beta_used = case_beta if beta is None else beta
        if renormalise is not None:
            advantages = (advantages - advantages.mean()) / advantages.std(correction=int(renormalise == "bessel"))
        live = logp.detach() if detach_ratio else logp
        if invert_ratio:
            ratio, a, clipped = _terms(old_logp, live, advantages, eps_used)
        else:
            ratio, a, clipped = _terms(live, old_logp, advantages, eps_used)
        if eps_high is not None:
            clipped = ratio.clamp(1 - eps_used, 1 + eps_high)
        if clip == "log":
            clipped = (logp - old_logp).clamp(-eps_used, eps_used).exp()
        pessimistic = torch.minimum(ratio * a, clipped * a)
        surrogate = {"min": pessimistic, "max": torch.maximum(ratio * a, clipped * a),
                     "dual": torch.where(a < 0, torch.maximum(pessimistic, 3.0 * a), pessimistic),
                     "none": ratio * a, "factored": torch.minimum(ratio, clipped) * a,
                     "log": torch.minimum(ratio * a, clipped * a)}[clip]
        kl_logp = logp.detach() if detach_kl else logp
        penalty = {"k3": k3(kl_logp, ref_logp), "k1": k1(kl_logp, ref_logp), "k2": k2(kl_logp, ref_logp),
                   "reversed": k3(ref_logp, kl_logp), "old": k3(old_logp, ref_logp)}[kl]
        penalty = beta_used * kl_sign * penalty * (ratio if kl_weighted else 1.0)
        if kl_average == "inside":
            per_token, outside = -(surrogate - penalty), 0.0
        elif kl_average == "unmasked":  # each response's KL averaged over the padded row, padding included
            per_token, outside = -surrogate, penalty.mean(1).mean()
        else:  # the KL as a whole-batch token mean, added after the per-response average
            per_token, outside = -surrogate, aggregate(penalty, mask, "token_mean")
        if average == "padded":  # each response's tokens divided by the padded width T, not its own length
            total = (per_token * mask).sum(1).div(mask.shape[1]).mean()
        elif average == "unmasked":  # the numerator not masked: the padding's junk enters, over |o_i|
            total = (per_token.sum(1) / mask.sum(1)).mean()
        elif average == "positions":  # one mean over the padded tensor, padding in numerator and denominator
            total = per_token.mean()
        elif average == "responses_summed":  # each response's token mean, summed over the responses (no 1/G)
            total = aggregate(per_token, mask, AVERAGES["response"]) * mask.shape[0]
        else:
            total = aggregate(per_token, mask, AVERAGES[average])
        return sign * (total + outside)
    return loss_fn


_RENORMALISED = ("you normalised the advantages again over the batch: they arrive as GRPO's group advantages "
                 "already, so use them as given.")

GRPO_LOSS_MISTAKES = {
    "token_mean": (_grpo_loss_variant(average="token"),
                   "you averaged over all the batch's tokens at once (Σ_i Σ_t / Σ_i |o_i|: DAPO's token-level "
                   "loss, and PPO's): eq. 3 averages each response over its own tokens (1/|o_i|), then the "
                   "responses (1/G), so every response counts equally however long it is."),
    "token_sum": (_grpo_loss_variant(average="sum"),
                  "you summed each response's tokens without dividing by its length |o_i|: eq. 3 takes "
                  "(1/|o_i|) Σ_t, a mean over the response's own tokens."),
    "responses_summed": (_grpo_loss_variant(average="responses_summed"),
                         "you summed over the responses instead of averaging them: eq. 3 takes (1/G) Σ_i, a mean "
                         "over the responses (here over all B responses of the batch: `.mean()`, not `.sum()`), so "
                         "the loss does not grow with the batch."),
    "padded_length": (_grpo_loss_variant(average="padded"),
                      "each response is divided by the padded width T, not by its own length |o_i| = mask.sum(1): "
                      "padding must not count in a response's length."),
    "numerator_unmasked": (_grpo_loss_variant(average="unmasked"),
                           "the padding's values entered the sum: per_token.sum(1) / mask.sum(1) divides by the "
                           "right length but adds the padded positions' junk. Multiply by the mask first: "
                           "(per_token * mask).sum(1) / mask.sum(1)."),
    "padded_mean": (_grpo_loss_variant(average="positions"),
                    "you took one mean over the whole padded (B, T) tensor: the padding's junk enters the sum and "
                    "its positions the count. Mask the tokens, average each response over its own |o_i| = "
                    "mask.sum(1) tokens, then average the responses."),
    "no_clip": (_grpo_loss_variant(clip="none"),
                "there is no clip: the surrogate is min(r·A, clip(r, 1 − ε, 1 + ε)·A), not r·A."),
    "max": (_grpo_loss_variant(clip="max"),
            "you took the max of r·A and clip(r)·A: eq. 3 takes the MIN, the pessimistic term."),
    "dual_clip": (_grpo_loss_variant(clip="dual"),
                  "you added lesson 03's dual clip, max(·, c·A) for A < 0 (Ye et al. 2020): eq. 3 has none, so a "
                  "token with A < 0 and a ratio far above 1 + ε keeps its full r·A (here r ≈ 4.5 on one token)."),
    "factored": (_grpo_loss_variant(clip="factored"),
                 "you factored A out of the min, min(r, clip(r))·A: right for A > 0 only; for A < 0 the order "
                 "flips. Take the min over the products r·A and clip(r)·A."),
    "clip_higher": (_grpo_loss_variant(eps_high=0.28),
                    "your clip is asymmetric, clip(r, 1 − ε, 1 + 0.28): that is DAPO's clip-higher (lesson 11). "
                    "Eq. 3 clips both sides at the same ε: clip(r, 1 − eps, 1 + eps)."),
    "inverted_ratio": (_grpo_loss_variant(invert_ratio=True),
                       "your ratio is inverted: r = π_θ/π_old = exp(logp − old_logp), not exp(old_logp − logp)."),
    **{f"renormalised_{std}": (_grpo_loss_variant(renormalise=std), _RENORMALISED)
       for std in ("population", "bessel")},
    "kl_sign": (_grpo_loss_variant(kl_sign=-1.0),
                "the KL term has the wrong sign: J subtracts β·k3, so the loss −J adds it (a policy far from "
                "π_ref must cost more, not less)."),
    "kl_reversed": (_grpo_loss_variant(kl="reversed"),
                    "the KL term is k3 with π_θ and π_ref swapped: eq. 4's estimator is "
                    "π_ref/π_θ − log(π_ref/π_θ) − 1, with r = exp(ref_logp − logp)."),
    "k1": (_grpo_loss_variant(kl="k1"),
           "the KL term is log π_θ − log π_ref (k1): eq. 4 uses k3 = π_ref/π_θ − log(π_ref/π_θ) − 1, which is "
           "never negative."),
    "k2": (_grpo_loss_variant(kl="k2"),
           "the KL term is ½(log π_θ − log π_ref)² (k2, lesson 02's low-variance estimator): eq. 4 uses "
           "k3 = π_ref/π_θ − log(π_ref/π_θ) − 1. Their values are close near π_θ = π_ref, their gradients differ."),
    "kl_of_old": (_grpo_loss_variant(kl="old"),
                  "the KL term uses old_logp: it is the KL of the policy being trained, π_θ (logp), to π_ref, "
                  "so its gradient pulls π_θ back toward the reference."),
    "no_kl": (_grpo_loss_variant(kl_sign=0.0),
              "the KL term is missing: add β·k3 to each token's loss (β = beta)."),
    "kl_outside": (_grpo_loss_variant(kl_average="outside"),
                   "you added the KL as one token mean over the whole batch: eq. 3 puts −β·k3 inside the sum, "
                   "so it is averaged per response (1/|o_i|) like the clipped term."),
    "kl_importance_weighted": (_grpo_loss_variant(kl_weighted=True),
                               "you weighted the KL by the ratio, β·r·k3 with r = π_θ/π_old: that is TRL's "
                               "use_bias_correction_kl (DeepSeek-V3.2's), whose gradient follows the reverse KL "
                               "(§1 of the lesson). Eq. 3, DeepSeekMath's and this exercise's, adds β·k3 without "
                               "the ratio."),
    "kl_unmasked": (_grpo_loss_variant(kl_average="unmasked"),
                    "the KL term is averaged over every position of a padded row, padding included: multiply "
                    "β·k3 by the mask and average it over the response's own |o_i| tokens, like the clipped term."),
    "log_ratio_clipped": (_grpo_loss_variant(clip="log"),
                          "you clipped the log-ratio to [−ε, ε] (so r to [e^−ε, e^ε]): eq. 3 clips the ratio "
                          "itself, clip(r, 1 − ε, 1 + ε)."),
    "detached_ratio": (_grpo_loss_variant(detach_ratio=True),
                       "the value is right but the ratio has no gradient: r = exp(logp − old_logp) must be "
                       "computed from logp itself (only old_logp is a constant), or the surrogate does nothing."),
    "detached_kl": (_grpo_loss_variant(detach_kl=True),
                    "the value is right but the KL term has no gradient: compute k3 from logp, not a detached copy."),
    "objective": (_grpo_loss_variant(sign=-1.0),
                  "you returned the objective J: the optimizer minimises, so return the loss −J."),
    "fixed_eps": (_grpo_loss_variant(eps=0.2),
                  "the clip ignores the eps it is given (it uses 0.2): use clip(r, 1 − eps, 1 + eps)."),
    "fixed_beta": (_grpo_loss_variant(beta=0.04),
                   "the KL term ignores the beta it is given (it uses 0.04): β is an argument."),
}


def _one_loss(result, reference, *case):
    if result.shape != reference.shape:
        return f"return the loss as one number (a scalar tensor averaged over the batch); got shape {tuple(result.shape)}"
    if torch.isnan(result[1:]).all() and torch.isfinite(result[:1]).all():
        right = bool(torch.allclose(result[:1], reference[:1], rtol=1e-5, atol=1e-7))
        return (("the value is right, but " if right else "") + "no gradient reaches logp: build the loss from logp "
                "with torch operations (not .item(), .detach() or numpy), so the optimizer can follow it.")
    return None


def _not_the_grpo_loss(result, reference, *case, wrong, of):
    value_right = bool(torch.allclose(result[:1], reference[:1], rtol=1e-5, atol=1e-7))
    where = f"wrong on {wrong} of {of} batches: "
    if value_right:
        return where + "the loss's value is right but its gradient with respect to logp is not."
    return where + f"expected the loss {float(reference[0]):.6f}, got {float(result[0]):.6f}."


check_grpo_loss = FunctionExercise(
    "check_grpo_loss", what="GRPO loss", cases=grpo_loss_cases,
    reference=_value_and_gradient(_reference_grpo_loss),
    adapt=_value_and_gradient,
    mistakes=lambda *case: {name: (_value_and_gradient(wrong)(*case), hint)
                            for name, (wrong, hint) in GRPO_LOSS_MISTAKES.items()},
    checks=(_one_loss,), together=lambda *case: "all", across=True, otherwise=_not_the_grpo_loss,
    float32_success=f"your GRPO loss matches policy_loss(variant='grpo') on all {len(LOSS_SETTINGS)} batches, value "
                    "and gradient, but only to float32 precision",
    success=f"your GRPO loss matches policy_loss(variant='grpo') on all {len(LOSS_SETTINGS)} padded batches of "
            "unequal lengths, value and gradient, at two settings of ε and β",
    doc="""Check ``fn(logp, old_logp, ref_logp, advantages, mask, eps, beta) -> loss``, GRPO's loss −J (eq. 3).

    ``logp``, ``old_logp``, ``ref_logp`` and ``mask`` are (B, T) (right-padded; mask 1 on response
    tokens), ``advantages`` is (B,), one per response. Compared with ``rlbook.losses.policy_loss(...,
    variant="grpo", eps_low=eps, eps_high=eps, ref_logp=ref_logp, beta=beta, kl_estimator="k3")``: the
    value and its gradient with respect to ``logp``. Returns True / False (naming the mistake), or None
    when not attempted yet.
    """)
