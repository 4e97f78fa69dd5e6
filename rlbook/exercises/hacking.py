"""Checkers for the exercises of lesson 19 (verifier hacking): a strict verifier for a new answer
format, and GRPO's exact finite-group advantage scale c_G(p) (``check_advantage_scale``, at the end).

The format: the final answer is a non-negative fraction in lowest terms, written ``p/q`` (ASCII
digits, no sign, no leading zeros, no spaces, q ≥ 2), or the integer ``p`` when the value is
whole. It stands alone in the single final ``<answer>…</answer>`` block (surrounding whitespace
allowed), as ``rlbook.tasks.extract_answer`` reads it. The reader writes
``my_fraction_reward(text, expected) -> float`` (``expected`` a ``fractions.Fraction`` ≥ 0): 1.0
for a right answer in that format, else 0.0, for any string.

The checker runs it on right answers (all must get 1) and on a hostile corpus (all must get 0:
the hacks a lax check admits, strings written for an ``eval``, huge numbers, deep nesting, Unicode
digits…), with ``eval`` and ``exec`` switched off and a time bound on every call, and names every
hack the verifier admits, or the right answer an over-strict one refuses (long answers, large
denominators, newlines inside the block). ``reference_fraction_reward`` is a verifier that passes; so
is comparing the stripped answer with ``str(expected)``, the canonical form.
"""

from __future__ import annotations

import builtins
import math
import re
import time
from contextlib import contextmanager
from fractions import Fraction

from rlbook.exercises.framework import NOT_ATTEMPTED, _failed, _not_attempted, _verdict
from rlbook.exercises.framework import _run as _run_once
from rlbook.hacking import advantage_scale
from rlbook.tasks.verifiers import extract_answer

__all__ = ["RIGHT_ANSWERS", "HOSTILE_CORPUS", "reference_fraction_reward", "check_fraction_verifier",
           "SCALE_CASES", "SCALE_REL_TOL", "check_advantage_scale"]

MAX_SECONDS_PER_CALL = 0.25  # generous: a bounded verifier takes microseconds, a runaway one seconds
_FRACTION = re.compile(r"(0|[1-9][0-9]{0,17})(?:/([1-9][0-9]{0,17}))?")

# (completion, expected): every one must get 1.0.
RIGHT_ANSWERS = (
    ("<answer>3/4</answer>", Fraction(3, 4)),
    ("<think>6/8 = 3/4</think><answer>3/4</answer>", Fraction(3, 4)),
    ("<answer> 5/12 </answer>\n", Fraction(5, 12)),
    ("<answer>2</answer>", Fraction(2)),
    ("<answer>0</answer>", Fraction(0)),
    ("<answer>11/12</answer>", Fraction(11, 12)),
    ("<answer>123457/789</answer>", Fraction(123457, 789)),  # long, with a large denominator
    ("<answer>\n7/9\n</answer>", Fraction(7, 9)),  # newlines inside the block are whitespace
    ("<think>" + "1/2 + 1/4 = 3/4; " * 20 + "</think><answer>3/4</answer>", Fraction(3, 4)),
)

# (name of the hack, completion, expected): every one must get 0.0.
HOSTILE_CORPUS = (
    ("answer spraying", "<answer>1/2 3/4 5/6</answer>", Fraction(3, 4)),
    ("answer spraying, the right answer first", "<answer>3/4 1/2</answer>", Fraction(3, 4)),
    ("answer spraying, the right answer last", "<answer>1/2 3/4</answer>", Fraction(3, 4)),
    ("answer spraying on separate lines", "<answer>\n1/2\n3/4\n</answer>", Fraction(3, 4)),
    ("two answer blocks", "<answer>1/2</answer><answer>3/4</answer>", Fraction(3, 4)),
    ("text after the answer block", "<answer>3/4</answer> or maybe 1/2", Fraction(3, 4)),
    ("no answer block", "the answer is 3/4", Fraction(3, 4)),
    ("answer outside the block", "<answer>1/2</answer>\n3/4", Fraction(3, 4)),
    ("fraction not in lowest terms", "<answer>6/8</answer>", Fraction(3, 4)),
    ("whole number written as a fraction", "<answer>4/2</answer>", Fraction(2)),
    ("denominator 1", "<answer>2/1</answer>", Fraction(2)),
    ("decimal", "<answer>0.75</answer>", Fraction(3, 4)),
    ("an expression, not a fraction", "<answer>3/(2+2)</answer>", Fraction(3, 4)),
    ("a Python expression for eval", "<answer>0.75 if 1 else 0</answer>", Fraction(3, 4)),
    ("parentheses", "<answer>(3/4)</answer>", Fraction(3, 4)),
    ("deep nesting", "<answer>" + "(" * 5000 + "3/4" + ")" * 5000 + "</answer>", Fraction(3, 4)),
    ("signs that cancel", "<answer>-3/-4</answer>", Fraction(3, 4)),
    ("a plus sign", "<answer>+3/4</answer>", Fraction(3, 4)),
    ("leading zeros", "<answer>03/04</answer>", Fraction(3, 4)),
    ("spaces inside", "<answer>3 / 4</answer>", Fraction(3, 4)),
    ("underscores in numbers", "<answer>1_1/1_2</answer>", Fraction(11, 12)),
    ("Unicode digits", "<answer>\u0663/\u0664</answer>", Fraction(3, 4)),
    ("an ASCII digit then Unicode digits", "<answer>1\u0663/14</answer>", Fraction(13, 14)),
    ("full-width digits", "<answer>\uff13/\uff14</answer>", Fraction(3, 4)),
    ("zero denominator", "<answer>3/0</answer>", Fraction(3, 4)),
    ("a huge unreduced fraction", "<answer>3" + "0" * 900 + "/4" + "0" * 900 + "</answer>", Fraction(3, 4)),
    ("a huge answer", "<answer>" + "9" * 100_000 + "</answer>", Fraction(3, 4)),
    ("a huge completion", "<answer>3/4</answer>" + " " * 40_000 + "x", Fraction(3, 4)),
    ("tags injected in the answer", "<answer><answer>3/4</answer></answer>", Fraction(3, 4)),
    ("an empty answer", "<answer></answer>", Fraction(0)),
)


def reference_fraction_reward(text: str, expected: Fraction) -> float:
    """1.0 when the single final answer block holds ``expected`` in lowest terms as ``p/q`` (or ``p``).

    Parses with one anchored regular expression over ASCII digits (at most 18 per number, so the
    work is bounded and the numbers are small), never with ``eval``, ``int`` on arbitrary text or
    ``Fraction`` on arbitrary text (both accept signs, underscores and Unicode digits).
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    if not isinstance(expected, Fraction) or expected < 0:
        raise ValueError(f"expected must be a non-negative Fraction, got {expected!r}")
    answer = extract_answer(text)
    match = _FRACTION.fullmatch(answer.strip()) if answer is not None else None
    if match is None:
        return 0.0
    numerator, denominator = int(match.group(1)), int(match.group(2) or 1)
    if match.group(2) is not None and (denominator < 2 or math.gcd(numerator, denominator) != 1):
        return 0.0  # "4/2", "2/1" and "6/8" are not in lowest terms
    return float(Fraction(numerator, denominator) == expected)


class _ExecutedModelOutput(BaseException):
    """Raised in place of ``eval`` / ``exec`` while the reader's verifier runs (a BaseException, so
    that a verifier's ``except Exception`` does not hide it)."""


@contextmanager
def _no_eval_or_exec(calls: list):
    """Switch ``eval`` and ``exec`` off; each attempt is recorded in ``calls`` and raises."""
    def refuse(*args, **kwargs):
        calls.append(args[:1])
        raise _ExecutedModelOutput

    saved = builtins.eval, builtins.exec
    builtins.eval, builtins.exec = refuse, refuse
    try:
        yield
    finally:
        builtins.eval, builtins.exec = saved


def _run(fn, text: str, expected: Fraction) -> tuple[float | None, str | None]:
    """``(reward, None)``, or ``(None, what went wrong)``; NOT_ATTEMPTED itself for the stub."""
    calls, start = [], time.perf_counter()
    try:
        with _no_eval_or_exec(calls):
            reward = fn(text, expected)
    except NotImplementedError:
        return None, NOT_ATTEMPTED
    except _ExecutedModelOutput:
        pass
    except Exception as error:  # the reader's code: any failure is a verdict, not a crash
        return None, f"it raised {type(error).__name__}: {error} (a verifier must return a reward for any string)"
    if calls:
        return None, "it called eval or exec: a verifier must never execute model output; parse it"
    seconds = time.perf_counter() - start
    if seconds > MAX_SECONDS_PER_CALL:
        return None, f"it took {seconds:.2f} s (bound the work: refuse long answers before parsing them)"
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or reward not in (0, 1):
        return None, f"return 0.0 or 1.0, got {reward!r}"
    return float(reward), None


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 60 else f"{text[:40]!r}… ({len(text)} characters)"


def check_fraction_verifier(fn) -> bool | None:
    """Check ``fn(text, expected) -> float`` on ``RIGHT_ANSWERS`` and ``HOSTILE_CORPUS``.

    Prints a verdict naming the first hack the verifier admits and listing the others it admits (or
    the first right answer it refuses);
    returns True / False, or None when ``fn`` is None or still raises ``NotImplementedError``.
    """
    if _not_attempted(fn, "fraction verifier"):
        return None
    for text, expected in RIGHT_ANSWERS:
        reward, error = _run(fn, text, expected)
        if error is NOT_ATTEMPTED:
            return _failed(error)
        if error or reward != 1.0:
            return _verdict(False, "", f"on the right answer {_shown(text)} (expected {expected}): "
                                       f"{error or f'reward {reward}, expected 1.0'}")
    admitted = []
    for name, text, expected in HOSTILE_CORPUS:
        reward, error = _run(fn, text, expected)
        if error:
            return _verdict(False, "", f"on {name} {_shown(text)}: {error}")
        if reward != 0.0:
            admitted.append((name, text, expected))
    if admitted:
        (name, text, expected), rest = admitted[0], admitted[1:]
        others = f"; it also admits {len(rest)} more: " + ", ".join(name for name, _, _ in rest) if rest else ""
        return _verdict(False, "", f"it admits a hack: {name}, {_shown(text)} gets reward 1 for {expected}{others}")
    return _verdict(True, f"passes {len(RIGHT_ANSWERS)} right answers and refuses all {len(HOSTILE_CORPUS)} "
                          "hostile completions, within the time bound, without eval", "")


# (p, G): the pass rate and the group size at which the reader's c_G(p) is compared with the library's.
# The ends come last, so that a slip inside (0, 1) is named first: p = 0 and p = 1, where every group
# is flat, are where conventions differ.
SCALE_CASES = ((0.074, 8), (0.04, 8), (0.3, 4), (0.5, 2), (0.9, 16), (0.01, 64), (0.0, 8), (1.0, 8), (0.0, 2))


# The relative tolerance of the comparison: wide enough for a std stabilised with an eps (as
# rlbook.advantages.group_advantages, eps = 1e-6, or TRL's 1e-4, shift c_G(p) by under 1e-3 at SCALE_CASES),
# narrow enough to tell every named slip apart (the nearest, K ~ Binomial(G, p), is off by over 1%).
SCALE_REL_TOL = 1e-3


def _scale_variant(p: float, G: int, *, others: int | None = None, bessel: bool = False) -> float:
    """c_G(p) computed with one of two common slips: K ~ Binomial(``others``, p) passes among the
    others instead of G − 1, or the sample (Bessel) std instead of the population std."""
    others = G - 1 if others is None else others
    total = 0.0
    for k in range(others + 1):
        weight = math.comb(others, k) * p ** k * (1 - p) ** (others - k)
        for mine in (1, 0):
            m = (k + mine) / G
            if 0 < m < 1:
                std = math.sqrt(m * (1 - m) * (G / (G - 1) if bessel else 1.0))
                total += weight * (mine - m) / std * (1 if mine else -1)
    return total


def _scale_mistake(result: float, p: float, G: int) -> str:
    """Name the likely mistake behind a wrong c_G(p), or ''."""
    def close(value):  # 1e-4: a float64 answer against the library's σ + 1e-6 in float32 (3e-6 apart); slips are > 1 %
        return math.isfinite(value) and math.isclose(result, value, rel_tol=1e-4, abs_tol=1e-9)

    if p in (0.0, 1.0) and close(0.0):
        return (" — 0 is the expected *advantage* E[A] at p = 0 or 1 (every group is flat), not the scale. "
                "c_G(p) = E[A | r = 1] − E[A | r = 0] conditions on this sample's reward: at p = 0 the other "
                "G − 1 all fail, so a pass would be alone and get √(G − 1), a failure sits in a flat group and "
                "gets 0; the same sum over K ~ Binomial(G − 1, p) gives it, continuous in p")
    if 0 < p < 1 and close(advantage_scale(p)):
        return (" — that is the large-group limit 1/√(p(1 − p)); in a finite group a pass raises the group's "
                "mean to at least 1/G, which caps a lone pass's advantage at √(G − 1) (flat groups, which give 0, "
                "matter less), so sum over the K ~ Binomial(G − 1, p) passes among the other samples")
    if 0 < p < 1 and close(_scale_variant(p, G) * (1 - p)):
        return (" — that is E[A | r = 1] = c_G(p)(1 − p), a pass's expected advantage alone; the scale is the "
                "gap E[A | r = 1] − E[A | r = 0], and a failure's expected advantage is −c_G(p)·p")
    if close(_scale_variant(p, G, bessel=True)):
        return (" — that uses the sample std (divide by G − 1); GRPO's advantage here, like "
                "rlbook.advantages.group_advantages, uses the population std (divide by G)")
    if close(_scale_variant(p, G, others=G)):
        return (" — that draws K ~ Binomial(G, p) passes among the others; sample i is one of the G, so "
                "the others are G − 1")
    return ""


def check_advantage_scale(fn) -> bool | None:
    """Check ``fn(p, G) -> float``: c_G(p) = E[A | r = 1] − E[A | r = 0] for GRPO's advantage
    (r − mean)/std (population std; a flat group gets 0) with 0/1 rewards, pass rate ``p``, groups of
    ``G``, on ``SCALE_CASES`` against ``rlbook.hacking.advantage_scale``, to a relative
    ``SCALE_REL_TOL`` (1e-3: an eps added to the std, as in ``group_advantages``, passes).

    The convention at the ends: c_G(0) = c_G(1) = √(G − 1), the same sum over K ~ Binomial(G − 1, p)
    evaluated there (the limit of c_G(p) as p → 0 or 1): conditioned on r_i = 1 at p = 0, sample i is
    the group's lone pass; conditioned on r_i = 0 it sits in a flat group, advantage 0. The expected
    advantage c_G(p)·(q_s − p) is still 0 there, since every q_s is 0 (or 1). Names the wrong
    conventions (0, the expected advantage; an infinite or NaN scale, the large-group limit or 0/0)
    and the usual slips (the large-group limit inside (0, 1), Bessel's std, Binomial(G, p)).
    """
    if _not_attempted(fn, "advantage scale"):
        return None
    for p, G in SCALE_CASES:
        result, error = _run_once(fn, p, G)
        if error:
            return _failed(error, f"at p = {p}, G = {G}: ")
        if isinstance(result, bool) or not isinstance(result, (int, float)):
            return _verdict(False, "", f"at p = {p}, G = {G}: return one finite number, got {result!r}")
        if not math.isfinite(result):
            hint = (" — at p = 0 or 1 the large-group limit 1/√(p(1 − p)) is infinite and 0/0 is NaN; a finite "
                    "group's scale is finite: condition on this sample's reward and sum over the others"
                    if p in (0.0, 1.0) else "")
            return _verdict(False, "", f"at p = {p}, G = {G}: return one finite number, got {result!r}{hint}")
        expected = advantage_scale(p, G)
        if not math.isclose(result, expected, rel_tol=SCALE_REL_TOL, abs_tol=1e-9):
            return _verdict(False, "", f"at p = {p}, G = {G}: expected {expected:.6f}, got {result:.6f}"
                                       f"{_scale_mistake(result, p, G)}")
    return _verdict(True, f"c_G(p) right at all {len(SCALE_CASES)} cases, p = 0 and 1 included "
                          "(c_G = √(G − 1) there: a lone pass against a flat group)", "")
