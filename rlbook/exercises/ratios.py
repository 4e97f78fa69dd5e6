"""Checker for the exercise of lesson 12 (GSPO and GMPO): GSPO's length-normalised sequence ratio.

``check_gspo_sequence_ratio(fn)`` runs the reader's ``fn(logp, old_logp, mask) -> (B,)`` on fixed
batches whose padding holds garbage log-probs (as a real batch may), compares it with
``rlbook.ratios.gspo_sequence_ratio`` and, when it differs, names the likely mistake. It prints its
verdict and returns True / False, or None when the exercise is not attempted yet (``fn`` is None or
raises ``NotImplementedError``). The plumbing is shared with lesson 01/02's checkers.
"""

from __future__ import annotations

import torch

from rlbook.exercises.pg_kl import DTYPE, _call, _close, _diagnose, _failed, _not_attempted, _verdict
from rlbook.ratios import gspo_sequence_ratio

__all__ = ["check_gspo_sequence_ratio"]


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
        "divided_by_width": (torch.exp((log_ratio * mask).sum(dim=1) / mask.shape[1]),
                             "the masked sum was divided by the padded width T, not by each row's length "
                             "|y_i| = mask.sum(1): short answers get a ratio too close to 1."),
        "inverted": (torch.exp(-(log_ratio * mask).sum(dim=1) / lengths),
                     "the ratio is upside down: it is π_θ/π_old, so log r_t = logp − old_logp."),
    }


def check_gspo_sequence_ratio(fn) -> bool | None:
    """Check ``fn(logp, old_logp, mask) -> (B,)`` against GSPO's s_i = exp((1/|y_i|) Σ_t mask · (logp − old_logp))."""
    if _not_attempted(fn, "GSPO sequence ratio"):
        return None
    cases = _ratio_cases()
    for logp, old_logp, mask in cases:
        result, error = _call(fn, logp.clone(), old_logp.clone(), mask.clone())
        if error:
            return _failed(error)
        if result.dim() == 2:
            return _verdict(False, "", f"return one ratio per sequence, shape ({logp.shape[0]},); got "
                            f"{tuple(result.shape)} — per-token ratios must be averaged over each row")
        reference = gspo_sequence_ratio(logp, old_logp, mask)
        if not _close(result.detach(), reference):
            hint = _diagnose(result, reference, _sequence_ratio_mistakes(logp, old_logp, mask))
            return _verdict(False, "", f"wrong sequence ratio — {hint}")
    return _verdict(True, f"your sequence ratio matches GSPO's on all {len(cases)} test batches", "")
