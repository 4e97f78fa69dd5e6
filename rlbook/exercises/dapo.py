"""Checkers for the exercises of lesson 11 (DAPO): the soft overlong punishment, and the decoupled clip.

``check_soft_overlong_penalty``: the reader writes ``my_penalty(length, max_len, cache_len) -> float``
for one response length; the checker compares it with ``rlbook.shaping.soft_overlong_penalty`` (Yu et
al. 2025, arXiv:2503.14476, eq. 13) on every length around the window and, when it differs,
names the likely mistake: the sign, a window boundary off by one, the whole ramp shifted by one
token, integer division, no floor at −1, the wrong denominator (L_max or L_cache − 1), the window put
after L_max instead of ending at it.

``check_clip_mask``: the reader writes ``my_clip_mask(ratio, advantages, eps_low, eps_high)``, True
for each token whose own gradient the decoupled clip of ``rlbook.losses.clipped_surrogate`` (DAPO
§3.1, "Clip-Higher") removes; the checker finds the truth with autograd and names the likely mistake:
one ε for both sides, the two ε swapped, the sign of A ignored, the clip put on the wrong side.
"""

from __future__ import annotations

import torch

from rlbook.exercises.framework import FunctionExercise, _one_number, _within
from rlbook.losses import clipped_surrogate
from rlbook.shaping import soft_overlong_penalty

__all__ = ["CASES", "CLIP_CASES", "check_soft_overlong_penalty", "clip_mask_reference", "check_clip_mask"]

CASES = ((20, 5), (64, 16), (12, 12), (30, 1))  # (max_len, cache_len)
# The library computes in float32 (−0.4 comes back as −0.4000000059604645); a reader's plain-Python
# answer is exact, so answers are compared to float32 precision.
TOLERANCE = 1e-6


def _wrong_penalties(max_len: int, cache_len: int) -> dict[str, tuple[callable, str]]:
    """The usual wrong penalties, each a function of the length, with the hint that names it."""
    safe = max_len - cache_len
    right = lambda n: soft_overlong_penalty(n, max_len, cache_len)  # noqa: E731
    return {
        "sign": (lambda n: -right(n), "the sign is flipped: the penalty is a punishment, 0 down to −1 (it is "
                                      "added to the reward)"),
        "late_start": (lambda n: 0.0 if n <= safe + 1 else right(n),
                       "the window starts one token late: the ramp begins right after L_max − L_cache, "
                       "so |y| = L_max − L_cache + 1 already gets −1/L_cache"),
        "early_start": (lambda n: right(n) if n != safe else -1 / max(cache_len, 1),
                        "the window starts one token early: |y| = L_max − L_cache itself is still safe (0)"),
        "ramp_late": (lambda n: max(-1.0, (safe + 1 - n) / max(cache_len, 1)) if safe < n <= max_len else right(n),
                      "the whole ramp is shifted one token late ((L_max − L_cache) + 1 − |y|): it must be "
                      "((L_max − L_cache) − |y|) / L_cache, so that |y| = L_max gets exactly −1"),
        "ramp_early": (lambda n: max(-1.0, (safe - 1 - n) / max(cache_len, 1)) if safe < n <= max_len else right(n),
                       "the whole ramp is shifted one token early ((L_max − L_cache) − 1 − |y|): it must be "
                       "((L_max − L_cache) − |y|) / L_cache, so that |y| = L_max − L_cache + 1 gets −1/L_cache"),
        "floor_division": (lambda n: max(-1.0, float((safe - n) // max(cache_len, 1))) if safe < n <= max_len
                           else right(n),
                           "integer division: (L_max − L_cache − |y|) // L_cache floors to −1 across the whole "
                           "window; divide with / so the ramp falls by 1/L_cache per token"),
        "denominator_minus_one": (lambda n: max(-1.0, (safe - n) / max(cache_len - 1, 1)) if safe < n <= max_len
                                  else right(n),
                                  "the ramp divides by L_cache − 1; it divides by L_cache, so it reaches −1 "
                                  "exactly at |y| = L_max"),
        "no_floor": (lambda n: (safe - n) / max(cache_len, 1) if n > safe else 0.0,
                     "beyond L_max the penalty keeps falling: it is exactly −1 for every |y| > L_max"),
        "wrong_denominator": (lambda n: max(-1.0, (safe - n) / max_len) if n > safe else 0.0,
                              "the ramp divides by L_max; it divides by L_cache, so it reaches −1 exactly "
                              "at the end of the window"),
        "from_budget": (lambda n: (max_len - n) / max(cache_len, 1) if safe < n <= max_len else right(n),
                        "the ramp is measured from L_max; it starts at 0 at L_max − L_cache: "
                        "((L_max − L_cache) − |y|) / L_cache"),
        "window_after_budget": (lambda n: max(-1.0, (max_len - n) / max(cache_len, 1)) if n > max_len else 0.0,
                                "the window is placed after L_max: L_max is the whole budget, cache included, "
                                "and the window is its last L_cache tokens, (L_max − L_cache, L_max]. DAPO's "
                                "'expected maximum length 16,384' plus the '4,096 cache' make L_max = 20,480"),
    }


def _length_cases():
    """(length, max_len, cache_len) for every length 0 … max_len + 5 of each window."""
    return [(length, max_len, cache_len) for max_len, cache_len in CASES for length in range(0, max_len + 6)]


check_soft_overlong_penalty = FunctionExercise(
    "check_soft_overlong_penalty", what="penalty function", cases=_length_cases, reference=soft_overlong_penalty,
    mistakes=lambda length, max_len, cache_len: {name: (wrong(length), hint) for name, (wrong, hint)
                                                 in _wrong_penalties(max_len, cache_len).items()},
    label=lambda length, max_len, cache_len: f"length={length}, max_len={max_len}, cache_len={cache_len}",
    checks=(_one_number("return one number per length"),), close=_within(TOLERANCE),
    # one window at a time: a mistake (a boundary off by one) is named when it fits every length of the window
    together=lambda length, max_len, cache_len: (max_len, cache_len), across=True,
    wrong=lambda length, max_len, cache_len: f"(max_len={max_len}, cache_len={cache_len}) ",
    otherwise=lambda result, reference, length, max_len, cache_len, **counts: (
        f"max_len={max_len}, cache_len={cache_len}, length={length}: expected {float(reference):.4f}, "
        f"got {float(result):.4f}"),
    success=f"matches rlbook.shaping.soft_overlong_penalty on {len(CASES)} windows, every length",
    doc="""Check ``fn(length, max_len, cache_len) -> float`` on lengths 0 … max_len + 5 for a few windows.

    Prints a verdict naming the likely mistake; returns True / False, or None when ``fn`` is None
    or raises ``NotImplementedError`` (not attempted yet).
    """)


# ----------------------------------------------------------------------------------------------
# The decoupled clip: which tokens lose their gradient

CLIP_CASES = ((0.2, 0.28), (0.1, 0.5), (0.3, 0.3))  # (eps_low, eps_high)


def _clip_inputs(eps_low: float, eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Ratios spread over (0.3, 2.0), none on a clip edge, each paired with A > 0 and with A < 0."""
    ratio = torch.linspace(0.3, 2.0, 69, dtype=torch.float64)
    edges = torch.tensor([1 - eps_low, 1 + eps_high], dtype=torch.float64)
    ratio = ratio[(ratio.unsqueeze(1) - edges).abs().min(dim=1).values > 1e-3]
    advantages = torch.tensor([1.0, -1.0, 2.5, -0.7], dtype=torch.float64)
    return ratio.repeat(len(advantages)), advantages.repeat_interleave(len(ratio))


def clip_mask_reference(ratio, advantages, eps_low: float, eps_high: float) -> torch.Tensor:
    """True where ``clipped_surrogate`` gives a token (A ≠ 0) no gradient: found with autograd, not a formula."""
    ratio = torch.as_tensor(ratio, dtype=torch.float64).detach().clone().requires_grad_(True)
    advantages = torch.as_tensor(advantages, dtype=torch.float64)
    if ratio.shape != advantages.shape:
        raise ValueError(f"ratio and advantages must have one shape, got {tuple(ratio.shape)} and "
                         f"{tuple(advantages.shape)}")
    (grad,) = torch.autograd.grad(clipped_surrogate(ratio, advantages, eps_low=eps_low, eps_high=eps_high).sum(),
                                  ratio)
    return (grad == 0) & (advantages != 0)


def _wrong_masks(ratio, advantages, eps_low: float, eps_high: float) -> dict[str, tuple[torch.Tensor, str]]:
    """The usual wrong masks, each with the hint that names it."""
    up, down = advantages > 0, advantages < 0

    def mask(low, high):
        return (up & (ratio > 1 + high)) | (down & (ratio < 1 - low))

    return {
        "symmetric": (mask(eps_low, eps_low), "both sides use ε_low: the upper edge is 1 + ε_high (that is "
                                              "the point of clip-higher)"),
        "symmetric_high": (mask(eps_high, eps_high), "both sides use ε_high: the lower edge is 1 − ε_low (DAPO "
                                                     "raises only the upper one)"),
        "swapped": (mask(eps_high, eps_low), "ε_low and ε_high are swapped: the lower edge is 1 − ε_low, the "
                                             "upper 1 + ε_high"),
        "no_sign": ((ratio > 1 + eps_high) | (ratio < 1 - eps_low),
                    "the sign of A is ignored: a token with A < 0 and r > 1 + ε_high keeps its gradient, "
                    "because min(rA, clip(r)A) picks the unclipped rA there (and likewise A > 0 below 1 − ε_low)"),
        "wrong_side": ((up & (ratio < 1 - eps_low)) | (down & (ratio > 1 + eps_high)),
                       "the clip is on the wrong side: an A > 0 token loses its gradient once it has risen past "
                       "1 + ε_high, an A < 0 token once it has fallen below 1 − ε_low"),
        "upper_only": (up & (ratio > 1 + eps_high), "only the upper clip is there: an A < 0 token whose ratio fell "
                                                   "below 1 − ε_low loses its gradient too"),
        "lower_only": (down & (ratio < 1 - eps_low), "only the lower clip is there: an A > 0 token whose ratio rose "
                                                    "past 1 + ε_high loses its gradient too"),
        "kept": ((up & (ratio <= 1 + eps_high)) | (down & (ratio >= 1 - eps_low)),
                 "the mask is inverted: True must mark the tokens that LOSE their gradient (the clipped ones), "
                 "not those that keep it"),
    }


def _clip_cases():
    return [(*_clip_inputs(eps_low, eps_high), eps_low, eps_high) for eps_low, eps_high in CLIP_CASES]


def _one_per_token(answer, expected, ratio, *rest):
    if tuple(answer.shape) != tuple(ratio.shape):
        return f"return one True/False per token, shape {tuple(ratio.shape)}; got shape {tuple(answer.shape)}"
    return None


def _first_wrong_token(answer, expected, ratio, advantages, eps_low, eps_high):
    first = int((answer != expected).nonzero()[0])
    return (f"eps_low={eps_low}, eps_high={eps_high}: at r = {float(ratio[first]):.3f}, "
            f"A = {float(advantages[first]):+.1f} the answer is {bool(answer[first])}, expected {bool(expected[first])}")


check_clip_mask = FunctionExercise(
    "check_clip_mask", what="clip-mask function", cases=_clip_cases, reference=clip_mask_reference,
    mistakes=_wrong_masks, label=lambda ratio, advantages, eps_low, eps_high: f"eps_low={eps_low}, eps_high={eps_high}",
    prepare=lambda result, *case: result.detach().to(torch.float64) != 0 if result.shape == case[0].shape else result,
    checks=(_one_per_token,), close=torch.equal,
    wrong=lambda ratio, advantages, eps_low, eps_high: f"(eps_low={eps_low}, eps_high={eps_high}) ",
    otherwise=_first_wrong_token,
    success=f"matches the gradient of rlbook.losses.clipped_surrogate on {len(CLIP_CASES)} (ε_low, ε_high) pairs, "
            "both signs of A",
    doc="""Check ``fn(ratio, advantages, eps_low, eps_high) -> bool tensor`` on a grid of ratios, both signs of
    A and a few (ε_low, ε_high); True means "the clip removed this token's gradient".

    Prints a verdict naming the likely mistake; returns True / False, or None when ``fn`` is None
    or raises ``NotImplementedError`` (not attempted yet).
    """)