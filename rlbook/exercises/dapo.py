"""Checker for the exercise of lesson 11 (DAPO): the soft overlong punishment.

The reader writes ``my_penalty(length, max_len, cache_len) -> float`` for one response length;
``check_soft_overlong_penalty`` compares it with ``rlbook.shaping.soft_overlong_penalty`` (Yu et
al. 2025, arXiv:2503.14476, eq. 13) on every length around the window and, when it differs,
names the likely mistake: the sign, a window boundary off by one, no floor at −1, the wrong
denominator.
"""

from __future__ import annotations

from rlbook.exercises.pg_kl import _call, _failed, _not_attempted, _verdict
from rlbook.shaping import soft_overlong_penalty

__all__ = ["CASES", "check_soft_overlong_penalty"]

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
        "no_floor": (lambda n: (safe - n) / max(cache_len, 1) if n > safe else 0.0,
                     "beyond L_max the penalty keeps falling: it is exactly −1 for every |y| > L_max"),
        "wrong_denominator": (lambda n: max(-1.0, (safe - n) / max_len) if n > safe else 0.0,
                              "the ramp divides by L_max; it divides by L_cache, so it reaches −1 exactly "
                              "at the end of the window"),
        "from_budget": (lambda n: (max_len - n) / max(cache_len, 1) if safe < n <= max_len else right(n),
                        "the ramp is measured from L_max; it starts at 0 at L_max − L_cache: "
                        "((L_max − L_cache) − |y|) / L_cache"),
    }


def check_soft_overlong_penalty(fn) -> bool | None:
    """Check ``fn(length, max_len, cache_len) -> float`` on lengths 0 … max_len + 5 for a few windows.

    Prints a verdict naming the likely mistake; returns True / False, or None when ``fn`` is None
    or raises ``NotImplementedError`` (not attempted yet).
    """
    if _not_attempted(fn, "penalty function"):
        return None
    for max_len, cache_len in CASES:
        lengths = range(0, max_len + 6)
        answers = []
        for length in lengths:
            result, error = _call(fn, length, max_len, cache_len)
            if error:
                return _failed(error, f"length={length}, max_len={max_len}, cache_len={cache_len}: ")
            if result.numel() != 1:
                return _verdict(False, "", f"return one number per length, got shape {tuple(result.shape)}")
            answers.append(float(result))
        expected = [soft_overlong_penalty(n, max_len, cache_len) for n in lengths]
        if all(abs(a - e) < TOLERANCE for a, e in zip(answers, expected)):
            continue
        for wrong, hint in _wrong_penalties(max_len, cache_len).values():
            if all(abs(a - wrong(n)) < TOLERANCE for a, n in zip(answers, lengths)):
                return _verdict(False, "", f"(max_len={max_len}, cache_len={cache_len}) {hint}")
        first = next(n for n, a, e in zip(lengths, answers, expected) if abs(a - e) >= TOLERANCE)
        return _verdict(False, "", f"max_len={max_len}, cache_len={cache_len}, length={first}: expected "
                                   f"{expected[first]:.4f}, got {answers[first]:.4f}")
    return _verdict(True, f"matches rlbook.shaping.soft_overlong_penalty on {len(CASES)} windows, every length", "")
