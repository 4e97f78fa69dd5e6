"""Checkers for the exercises of lesson 12 (GSPO and GMPO).

``check_gmpo_log_clip(fn)`` checks GMPO's sequence ratio with its per-token, sign-dependent clip
in log space (Zhao et al. 2025, arXiv:2507.20673) against ``rlbook.ratios.gmpo_sequence_ratio``,
on batches with token log-ratios beyond both bounds and advantages of both signs, and names the
likely mistake (one side clipped for both signs, both sides clipped, the original oat-based script's sign flip
with asymmetric bounds, one ε on both sides, clipped tokens dropped, the clip in ratio space, the clip
after the mean, the arithmetic mean, log ρ_i returned, padding counted).

``check_gspo_sequence_ratio(fn)`` runs the reader's ``fn(logp, old_logp, mask) -> (B,)`` on fixed
batches whose padding holds garbage log-probs (as a real batch may), compares it with
``rlbook.ratios.gspo_sequence_ratio`` and, when it differs, names the likely mistake (log s_i returned,
one ratio for the whole batch, the arithmetic mean, no length normalisation, padding counted, ...). It prints its
verdict and returns True / False, or None when the exercise is not attempted yet (``fn`` is None or
raises ``NotImplementedError``). The plumbing is shared with lesson 01/02's checkers.
"""

from __future__ import annotations

import torch

from rlbook.exercises.framework import DTYPE, FunctionExercise, _close
from rlbook.ratios import gmpo_sequence_ratio, gspo_sequence_ratio

__all__ = ["check_gmpo_log_clip", "check_gspo_sequence_ratio"]


def _ratio_cases():
    """Three fixed (logp, old_logp, mask) batches: B = 4 rows of different lengths, T = 6, garbage in padding."""
    generator = torch.Generator().manual_seed(12)
    cases = []
    for lengths in ([6, 3, 1, 4], [2, 5, 6, 3], [4, 4, 1, 6]):
        old_logp = -torch.rand(4, 6, dtype=DTYPE, generator=generator) * 3
        logp = old_logp + 0.4 * torch.randn(4, 6, dtype=DTYPE, generator=generator)
        mask = (torch.arange(6).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).to(DTYPE)
        garbage = -5 * torch.rand(4, 6, dtype=DTYPE, generator=generator)
        logp = torch.where(mask > 0, logp, garbage)
        cases.append((logp, old_logp, mask))
    return cases


def _sequence_ratio_mistakes(logp, old_logp, mask):
    """The values of the usual wrong sequence ratios, each with the hint that names the mistake."""
    log_ratio = logp - old_logp
    lengths = mask.sum(dim=1)
    return {
        "no_length_normalisation": (torch.exp((log_ratio * mask).sum(dim=1)),
                                    "no length normalisation: this is the full product Π_t r_t = π_θ(y)/π_old(y), "
                                    "which explodes or vanishes with length; take its |y_i|-th root, "
                                    "exp((1/|y_i|) Σ_t log r_t)."),
        "arithmetic_mean": ((log_ratio.exp() * mask).sum(dim=1) / lengths,
                            "this is the arithmetic mean of the token ratios, (1/|y|) Σ_t r_t. GSPO uses the "
                            "geometric mean: average the log-ratios, then exponentiate."),
        "padding_included": (torch.exp(log_ratio.mean(dim=1)),
                             "padding was included: the mean runs over all T positions, garbage included. "
                             "Multiply the log-ratios by the mask and divide by |y_i| = mask.sum(1)."),
        "unmasked_sum": (torch.exp(log_ratio.sum(dim=1) / lengths),
                         "the log-ratios were summed without the mask: the padding's garbage log-probs entered the "
                         "sum, though the length |y_i| = mask.sum(1) is right. Multiply by the mask before summing."),
        "divided_by_width": (torch.exp((log_ratio * mask).sum(dim=1) / mask.shape[1]),
                             "the masked sum was divided by the padded width T, not by each row's length "
                             "|y_i| = mask.sum(1): short answers get a ratio too close to 1."),
        "inverted": (torch.exp(-(log_ratio * mask).sum(dim=1) / lengths),
                     "the ratio is upside down: it is π_θ/π_old, so log r_t = logp − old_logp."),
        "log_not_exp": ((log_ratio * mask).sum(dim=1) / lengths,
                        "this is log s_i, the mean token log-ratio: exponentiate it, s_i = exp((1/|y_i|) Σ_t log r_t)."),
        "one_for_the_batch": (torch.exp((log_ratio * mask).sum() / mask.sum()).expand(logp.shape[0]),
                              "this is one ratio for the whole batch (the log-ratios averaged over all its tokens): "
                              "average each row over its own |y_i| tokens, so every response gets its own s_i."),
    }


def _one_ratio_per_sequence(result, reference, logp, *rest):
    if result.dim() == 0:
        return (f"return one ratio per sequence, shape ({logp.shape[0]},); got one number — a single ratio for the "
                "whole batch: average each row's log-ratios over its own |y_i| tokens")
    if result.dim() == 2:
        return (f"return one ratio per sequence, shape ({logp.shape[0]},); got {tuple(result.shape)} — per-token "
                "ratios must be averaged over each row")
    return None


check_gspo_sequence_ratio = FunctionExercise(
    "check_gspo_sequence_ratio", what="GSPO sequence ratio", cases=_ratio_cases, reference=gspo_sequence_ratio,
    mistakes=_sequence_ratio_mistakes, checks=(_one_ratio_per_sequence,), prepare=lambda result, *case: result.detach(),
    wrong="wrong sequence ratio — ",
    success=f"your sequence ratio matches GSPO's on all {len(_ratio_cases())} test batches",
    doc="""Check ``fn(logp, old_logp, mask) -> (B,)`` against GSPO's s_i = exp((1/|y_i|) Σ_t mask · (logp − old_logp)).""")


# ----------------------------------------------------------------------------------------------
# GMPO: the per-token, sign-dependent clip in log space

GMPO_BOUNDS = [(0.4, 0.4), (0.2, 0.3)]


def _gmpo_cases():
    """Fixed (logp, old_logp, advantages, mask): B = 6 rows, both signs of A, log-ratios beyond ±0.4."""
    generator = torch.Generator().manual_seed(20)
    lengths = torch.tensor([6, 4, 5, 2, 6, 3])
    old_logp = -torch.rand(6, 6, dtype=DTYPE, generator=generator) * 3
    logp = old_logp + 0.7 * torch.randn(6, 6, dtype=DTYPE, generator=generator)
    mask = (torch.arange(6).unsqueeze(0) < lengths.unsqueeze(1)).to(DTYPE)
    logp = torch.where(mask > 0, logp, -5 * torch.rand(6, 6, dtype=DTYPE, generator=generator))
    advantages = torch.tensor([1.2, -0.8, 0.5, -1.5, -0.3, 0.9], dtype=DTYPE)
    return logp, old_logp, advantages, mask


def _gmpo_mistakes(logp, old_logp, advantages, mask, eps_low, eps_high):
    """The values of the usual wrong GMPO ratios, each with the hint that names the mistake."""
    log_ratio = logp - old_logp
    lengths = mask.sum(dim=1)
    positive = advantages.unsqueeze(1) > 0
    clipped = log_ratio.clamp(-eps_low, eps_high)

    def geometric(per_token):
        return torch.exp((per_token * mask).sum(dim=1) / lengths)

    def pessimistic(value, bounded, where):
        """min(value, bounded) where ``where`` (A > 0), max(value, bounded) elsewhere."""
        return torch.where(where, torch.minimum(value, bounded), torch.maximum(value, bounded))

    ratio = log_ratio.exp()
    ratio_space = pessimistic(ratio, ratio.clamp(1 - eps_low, 1 + eps_high), positive)
    right = pessimistic(log_ratio, clipped, positive)
    sign_flip = pessimistic(log_ratio, torch.where(positive, clipped, log_ratio.clamp(-eps_high, eps_low)), positive)
    clipped_token = torch.where(positive, log_ratio > eps_high, log_ratio < -eps_low)
    mean_log = (log_ratio * mask).sum(dim=1) / lengths
    after_mean = pessimistic(mean_log, mean_log.clamp(-eps_low, eps_high), advantages > 0)
    return {
        "min_for_both": (geometric(torch.minimum(log_ratio, clipped)),
                         "the same side is clipped for both signs of A: min(ℓ, clip(ℓ)) is right for A > 0, but "
                         "for A ≤ 0 the pessimistic choice is max(ℓ, clip(ℓ)) — a negative advantage loses the "
                         "tokens whose ratio fell below e^{−ε_low}, not those that rose."),
        "max_for_both": (geometric(torch.maximum(log_ratio, clipped)),
                         "the same side is clipped for both signs of A: max(ℓ, clip(ℓ)) is right for A ≤ 0, but "
                         "for A > 0 the pessimistic choice is min(ℓ, clip(ℓ)) — a positive advantage loses the "
                         "tokens whose ratio rose above e^{ε_high}."),
        "signs_swapped": (geometric(pessimistic(log_ratio, clipped, ~positive)),
                          "the signs are swapped: use min(ℓ, clip(ℓ)) where A > 0 and max(ℓ, clip(ℓ)) where "
                          "A ≤ 0 (PPO's pessimism: keep whichever is worse for the objective A · ρ)."),
        "both_sides": (geometric(clipped),
                       "both sides are clipped for every token: clip(ℓ, −ε_low, ε_high) alone is not pessimistic. "
                       "For A > 0 a token whose ratio fell keeps its (worse) log-ratio: take min(ℓ, clip(ℓ)); "
                       "for A ≤ 0, max(ℓ, clip(ℓ))."),
        "sign_flip": (geometric(sign_flip),
                      "right where A > 0 and at symmetric bounds, but a row with A ≤ 0 is clipped to [−ε_high, ε_low] "
                      "(numerically the same as using ε_high on both sides). "
                      "That is what the sign-flip trick of GMPO's original oat-based script (callsys/GMPO) does "
                      "(multiply ℓ by sgn A, clamp to [−ε_low, ε_high], take the min, flip back); that script only uses a "
                      "symmetric range, where the two agree (verl's geo_mean loss clamps before the flip and matches the "
                      "paper). This book follows the paper's formula: clip(ℓ, −ε_low, ε_high) for both signs, then min "
                      "for A > 0 and max for A ≤ 0."),
        "drop_clipped": (geometric(torch.where(clipped_token, torch.zeros_like(log_ratio), right)),
                         "the clipped tokens were dropped from the mean (their log-ratio set to 0): a clipped token "
                         "keeps its clipped value, −ε_low or ε_high, in the mean; it loses only its gradient."),
        "times_advantage": (advantages * geometric(right),
                            "this is A_i · ρ_i, the objective: return ρ_i alone, the clipped geometric mean."),
        "ratio_space": (geometric(ratio_space.log()),
                        "the clip is in ratio space, r_t to [1 − ε_low, 1 + ε_high]: GMPO clips the log-ratio, "
                        "log r_t to [−ε_low, ε_high], i.e. r_t to [e^{−ε_low}, e^{ε_high}]."),
        "bounds_swapped": (geometric(pessimistic(log_ratio, log_ratio.clamp(-eps_high, eps_low), positive)),
                           "ε_low and ε_high are swapped: the log-ratio is clipped to [−ε_low, ε_high]."),
        "eps_low_both_sides": (geometric(pessimistic(log_ratio, log_ratio.clamp(-eps_low, eps_low), positive)),
                               "ε_low is used on both sides: the upper bound of the log-ratio is ε_high, so clip to "
                               "[−ε_low, ε_high] (they differ here: ε_low = %g, ε_high = %g)." % (eps_low, eps_high)),
        "log_returned": ((right * mask).sum(dim=1) / lengths,
                         "this is log ρ_i, the mean of the clipped log-ratios: exponentiate it to get ρ_i."),
        "no_clip": (geometric(log_ratio),
                    "nothing is clipped: this is GSPO's s_i, the plain geometric mean. GMPO clips each token's "
                    "log-ratio (pessimistically, by the sign of A) before averaging."),
        "clip_after_mean": (after_mean.exp(),
                            "the clip is applied after the mean, to the sequence's log-ratio (GSPO's way): GMPO clips "
                            "each token's log-ratio first, so one clipped token leaves the others' gradient intact."),
        "arithmetic_mean": (((right.exp() * mask).sum(dim=1) / lengths),
                            "this is the arithmetic mean of the clipped token ratios: average the clipped "
                            "log-ratios, then exponentiate (the geometric mean)."),
        "padding_included": (torch.exp(right.mean(dim=1)),
                             "padding was included: average the clipped log-ratios over each row's |y_i| = mask.sum(1) "
                             "tokens only."),
    }


def _gmpo_inputs():
    return [(*_gmpo_cases(), eps_low, eps_high) for eps_low, eps_high in GMPO_BOUNDS]


def _gmpo_shape(result, reference, logp, *rest):
    if result.shape != (logp.shape[0],):
        return f"return one ratio per sequence, shape ({logp.shape[0]},); got {tuple(result.shape)}"
    return None


check_gmpo_log_clip = FunctionExercise(
    "check_gmpo_log_clip", what="GMPO ratio", cases=_gmpo_inputs,
    reference=lambda logp, old_logp, advantages, mask, eps_low, eps_high: gmpo_sequence_ratio(
        logp, old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high),
    mistakes=_gmpo_mistakes, checks=(_gmpo_shape,), prepare=lambda result, *case: result.detach(),
    wrong=lambda *case: f"wrong GMPO ratio at ε_low = {case[-2]}, ε_high = {case[-1]} — ",
    success=f"your GMPO ratio matches the library's at both clip ranges {GMPO_BOUNDS}",
    doc="""Check ``fn(logp, old_logp, advantages, mask, eps_low, eps_high) -> (B,)`` against GMPO's ρ_i.""")