"""Checker for the exercise of lesson 20 (the full R1 pipeline): stage 3's rejection filter.

The reader writes ``my_keep(samples, answer) -> str | None``: of one prompt's samples (a list of
completions of a three-digit addition whose correct sum is the string ``answer``), return the first
one that is right under the **strict** verifier and in R1's format (``<think>…</think><answer>…</answer>``),
or None when there is none — what DeepSeek-R1's stage 3 keeps (arXiv:2501.12948 §2.3.3: only correct
responses, with mixed languages, long paragraphs and code blocks filtered out; here the format check
stands for that readability filter). The checker compares it with ``rlbook.pipeline.keep_first`` on
sample lists chosen so that each common mistake returns a different completion, and names the one
it matches: the lax verifier (with or without the right format filter), ``is_well_formed`` (the
format reward's test) in place of ``is_r1_formatted``, no format filter, a substring test for ``<think>`` (or for
``</think><answer>``) or a ``startswith("<think>")`` test in place of the format filter, ``""`` for "none kept", the format filter without the accuracy one, the last right sample instead of the
first, a list instead of one completion, the answer block compared as a number (``int(block) == int(answer)``
keeps ``<answer>0623</answer>``, which the strict verifier rejects), and a whole-completion pattern that allows
no whitespace between the two blocks (a ``fullmatch`` of ``<think>.*</think><answer>.*</answer>``).

``check_gold_gain_split`` (the second exercise): the reader writes ``my_split(p0, q0, p1, q1) ->
(parsing, content)``, the midpoint split of a change of the mean gold reward G = U + p·(q − U) (U = −3,
a reply that is no review; p the share that parse, q their mean gold) into ΔG = Δp·(q̄ − U) + p̄·Δq
(``rlbook.pipeline.gold_gain_split``; the midpoint or Shapley split of a product). The checker compares
it on six (p0, q0, p1, q1), one with no review parsed before (q0 NaN) and one with none after (q1 NaN), and
names the mistakes: the two
parts swapped, a one-sided split (Δp weighted by the earlier q and Δq by the later p, or the other way
round: exact, but it depends on the order), the split without the interaction term (not exact), the
parsing term measured from 0 instead of from U, both parts taken at the later row (the interaction
counted twice), and NaN when nothing parsed in one of the rows.
"""

from __future__ import annotations

import math
import re

from rlbook.exercises.framework import _failed, _not_attempted, _run, _verdict
from rlbook.pipeline import gold_gain_split, is_r1_formatted, is_well_formed, keep_first
from rlbook.tasks import ArithmeticTask, arithmetic_reward
from rlbook.tasks.reviews import UNPARSABLE

__all__ = ["CASES", "SPLIT_CASES", "check_gold_gain_split", "check_keep_first", "reference_split"]

TASK = ArithmeticTask(digits=3)
RIGHT = "<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer>"
RIGHT_TOO = "<think>5+8=13\n4+7+1=12\n3+2+1=6\n</think><answer>623</answer>"
DIRECT_RIGHT = "<answer>623</answer>"
DIRECT_SPRAY = "<answer>623 624</answer>"  # lax-right only, and no working
WRONG_WORKED = "<think>5+8=13\n4+7+1=12\n3+2=5</think><answer>523</answer>"
SPRAY = "<think>5+8=13</think><answer>623 624</answer>"
TRAILING = "<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer> done"
PROSE_BETWEEN = "<think>5+8=13\n4+7+1=12\n3+2+1=6</think> so the sum is <answer>623</answer>"  # strict-right, not R1's format
UNCLOSED = "<think>5+8=13\n4+7+1=12\n3+2+1=6 <answer>623</answer>"  # strict-right, its <think> never closed
PREFIXED = "Sure: <think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer>"  # strict-right, text before <think>
SPACED = "<think>5+8=13\n4+7+1=12\n3+2+1=6</think>\n<answer>623</answer>"  # R1's format: whitespace between blocks
LEADING_ZERO = "<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>0623</answer>"  # R1's format, wrong under the strict verifier

# (samples, answer): each list separates some of the mistakes from the reference.
CASES = (
    ([WRONG_WORKED, RIGHT, RIGHT_TOO], "623"),
    ([DIRECT_RIGHT, WRONG_WORKED, RIGHT], "623"),
    ([SPRAY, TRAILING, RIGHT_TOO], "623"),
    ([WRONG_WORKED, DIRECT_RIGHT], "623"),
    ([WRONG_WORKED, SPRAY], "623"),
    ([PROSE_BETWEEN, UNCLOSED, RIGHT], "623"),
    ([UNCLOSED, RIGHT_TOO], "623"),
    ([DIRECT_SPRAY, RIGHT], "623"),
    ([PREFIXED, SPACED, RIGHT], "623"),
    ([LEADING_ZERO, RIGHT], "623"),
    ([], "623"),
)


def _as_number(text):
    """The integer in ``text``'s last ``<answer>`` block, or None: the verifier a reader may write with ``int``."""
    blocks = re.findall(r"<answer>(.*?)</answer>", text, re.S)
    try:
        return int(blocks[-1]) if blocks else None
    except ValueError:
        return None


def _first(samples, keep):
    return next((s for s in samples if keep(s)), None)


def _mistakes(samples, answer) -> dict[str, tuple[object, str]]:
    strict = lambda s: arithmetic_reward(s, answer) == 1.0  # noqa: E731
    return {
        "lax": (_first(samples, lambda s: arithmetic_reward(s, answer, strict=False) == 1.0 and "<think>" in s),
                "that keeps answers only the lax verifier accepts (the sum anywhere in the text); use the strict "
                "verifier: the single final <answer> block, exactly"),
        "lax_no_format": (_first(samples, lambda s: arithmetic_reward(s, answer, strict=False) == 1.0),
                          "that uses the lax verifier (the sum anywhere in the answer, e.g. '623 624') and no format "
                          "filter: use the strict verifier (the single final <answer> block, exactly) and keep only "
                          "samples in R1's format (rlbook.pipeline.is_r1_formatted)"),
        "lax_formatted": (_first(samples, lambda s: arithmetic_reward(s, answer, strict=False) == 1.0 and is_r1_formatted(s)),
                          "that uses the lax verifier (the sum anywhere in the answer, e.g. '623 624'); the format "
                          "filter is right, but use the strict verifier: the single final <answer> block, exactly"),
        "well_formed": (_first(samples, lambda s: strict(s) and is_well_formed(s)),
                        "that uses is_well_formed, the format *reward's* test, which pays a bare <answer>…</answer> "
                        "too; stage 3 keeps only samples with the <think> working (rlbook.pipeline.is_r1_formatted)"),
        "no_format": (_first(samples, strict),
                      "that keeps a right answer without its <think> working; stage 3 keeps only samples in R1's "
                      "format (rlbook.pipeline.is_r1_formatted)"),
        "think_substring": (_first(samples, lambda s: strict(s) and "<think>" in s),
                            "that checks only that '<think>' appears somewhere: a completion with text between "
                            "</think> and <answer>, or a <think> never closed, passes that test; R1's format is the "
                            "whole completion <think>…</think><answer>…</answer> and nothing else "
                            "(rlbook.pipeline.is_r1_formatted)"),
        "think_prefix": (_first(samples, lambda s: strict(s) and s.strip().startswith("<think>")),
                         "that checks only that the completion starts with '<think>': one with text between </think> "
                         "and <answer>, or a <think> never closed, passes that test; R1's format is the whole "
                         "completion <think>…</think><answer>…</answer> and nothing else (rlbook.pipeline.is_r1_formatted)"),
        "adjacent_tags": (_first(samples, lambda s: strict(s) and "</think><answer>" in s),
                          "that tests for the substring '</think><answer>': it keeps a completion with text before "
                          "<think> ('Sure: <think>…') and drops one with a line break between the two blocks, which "
                          "R1's format allows; test the whole completion (rlbook.pipeline.is_r1_formatted)"),
        "int_compare": (_first(samples, lambda s: is_r1_formatted(s) and _as_number(s) == int(answer)),
                        "that compares the answer block as a number (int(block) == int(answer)), which keeps "
                        "'<answer>0623</answer>'; compare the block's text exactly: leading zeros (or a '+') are wrong "
                        "under the strict verifier (rlbook.tasks.arithmetic_reward)"),
        "no_whitespace": (_first(samples, lambda s: strict(s) and re.fullmatch(r"<think>.*</think><answer>.*</answer>", s, re.S)),
                          "that allows no whitespace between (or around) the blocks: R1's format allows a line break "
                          "between </think> and <answer> (rlbook.pipeline.is_r1_formatted); put \\s* between and "
                          "around the blocks of your pattern"),
        "no_accuracy": (_first(samples, is_r1_formatted),
                        "that keeps a well-formatted but wrong answer; the sample must also be right"),
        "last": (next((s for s in reversed(samples) if strict(s) and is_r1_formatted(s)), None),
                 "that keeps the last good sample; keep the first (any fixed rule works, but the book's is the first)"),
    }


def reference_keep(samples, answer):
    """``rlbook.pipeline.keep_first`` on an addition whose sum is ``answer``."""
    return keep_first(samples, {"answer": answer}, TASK)


def check_keep_first(fn) -> bool | None:
    """Check ``fn(samples, answer) -> str | None`` on ``CASES``.

    When it differs from the reference, the mistake it matches on every case is named. Prints a
    verdict; returns True / False, or None when ``fn`` is None or still raises ``NotImplementedError``.
    """
    if _not_attempted(fn, "rejection filter"):
        return None
    answers = []
    for samples, answer in CASES:
        got, error = _run(fn, list(samples), answer)
        if error:
            return _failed(error, f"on samples={samples!r}: ")
        if got is not None and not isinstance(got, str):
            return _verdict(False, "", f"return one completion (a str) or None, got {type(got).__name__}"
                                       f"{' — one sample, not a list of them' if isinstance(got, (list, tuple)) else ''}")
        answers.append((samples, answer, got))
    wrong = [(s, a, got) for s, a, got in answers if got != reference_keep(s, a)]
    if not wrong:
        return _verdict(True, f"keeps exactly what stage 3 keeps on {len(CASES)} sample lists", "")
    if all(got == "" and reference_keep(s, a) is None for s, a, got in wrong):
        return _verdict(False, "", "that returns an empty string when no sample passes; return None, so that a "
                                   "caller can tell 'nothing kept' from a kept completion")
    for name, (_, hint) in _mistakes(*CASES[0]).items():
        if all(got == _mistakes(s, a)[name][0] for s, a, got in answers):
            return _verdict(False, "", hint)
    samples, answer, got = wrong[0]
    return _verdict(False, "", f"samples={samples!r}, answer={answer!r}: expected {reference_keep(samples, answer)!r}, "
                               f"got {got!r}")


# ----------------------------------------------------------------------------------------------
# The second exercise: the split of stage 4's gold gain into "more reviews" and "better reviews"

U = UNPARSABLE  # the gold reward of a reply that is no review (−3)
# (p0, q0, p1, q1): this run's stage 3 → 4 (roughly), a big parsing gain, no review parsed before (q0 NaN),
# no change of the parse share, a parse share that falls while the reviews improve, and no review parsed after
# (q1 NaN: every reply stopped parsing, so the whole change is parsing)
SPLIT_CASES = ((0.70, -0.80, 0.65, 0.80), (0.20, -1.50, 0.90, 0.30), (0.0, float("nan"), 0.70, -0.80),
               (0.50, 0.20, 0.50, 1.00), (0.90, 0.50, 0.30, -1.00), (0.60, -0.50, 0.0, float("nan")))
EDGE_HINT = "with p0 = 0 (or p1 = 0) that row's q is NaN: take the whole change as parsing, q̄ the other row's q"
SPLIT_TOLERANCE = 1e-9


def reference_split(p0, q0, p1, q1) -> tuple[float, float]:
    """``rlbook.pipeline.gold_gain_split`` on two rows with these parse shares p and parsed means q:
    ``(parsing, content)``."""
    row = lambda p, q: {"gold preference": U + p * (0.0 if p == 0 else q - U), "reviews parsed": p, "gold of parsed": q}  # noqa: E731
    split = gold_gain_split(row(p0, q0), row(p1, q1))
    return split["parsing"], split["content"]


def _split_mistakes(p0, q0, p1, q1) -> dict[str, tuple[tuple[float, float], str]]:
    a, b = (q1 if p0 == 0 else q0), (q0 if p1 == 0 else q1)  # q where nothing parsed: the other row's
    dp, dq = p1 - p0, b - a
    parsing, content = reference_split(p0, q0, p1, q1)
    return {
        "swapped": ((content, parsing), "the two parts are swapped: return (parsing, content), parsing first"),
        "earlier_weights": ((dp * (a - U), p1 * dq),
                            "that split is exact but one-sided: it weights Δp by the earlier q and Δq by the later p, "
                            "so the parts depend on which change is counted first; the midpoint split weights each by "
                            "the two rows' mean: Δp·(q̄ − U) and p̄·Δq"),
        "later_weights": ((dp * (b - U), p0 * dq),
                          "that split is exact but one-sided: it weights Δp by the later q and Δq by the earlier p; "
                          "the midpoint split weights each by the two rows' mean: Δp·(q̄ − U) and p̄·Δq"),
        "no_interaction": ((dp * (a - U), p0 * dq),
                           "the two parts do not add up to the change: both are taken at the earlier row, so the "
                           "interaction Δp·Δq is lost; write the change of G = U + p·(q − U) out exactly, and share "
                           "the interaction between the two parts so that neither order is favoured"),
        "later_row": ((dp * (b - U), p1 * dq),
                      "the two parts do not add up to the change: both are taken at the later row, so the "
                      "interaction Δp·Δq is counted twice; write the change of G = U + p·(q − U) out exactly, and "
                      "share the interaction between the two parts so that neither order is favoured"),
        "from_zero": ((dp * (a + b) / 2, (p0 + p1) / 2 * dq),
                      "the parsing term measures q from 0; a reply that does not parse scores U = −3, so one more "
                      "parsed reply adds q − U: Δp·(q̄ − U)"),
    }


def _same(got, want) -> bool:
    return all(math.isclose(g, w, rel_tol=SPLIT_TOLERANCE, abs_tol=SPLIT_TOLERANCE) for g, w in zip(got, want))


def check_gold_gain_split(fn) -> bool | None:
    """Check ``fn(p0, q0, p1, q1) -> (parsing, content)`` against ``rlbook.pipeline.gold_gain_split`` on
    ``SPLIT_CASES``.

    Names the mistake it matches on every case; prints a verdict and returns True / False, or None
    when ``fn`` is None or still raises ``NotImplementedError``.
    """
    if _not_attempted(fn, "gain split"):
        return None
    answers = []
    for case in SPLIT_CASES:
        got, error = _run(fn, *case)
        if error:
            return _failed(error, f"on (p0, q0, p1, q1) = {case}: ")
        try:
            got = tuple(float(x) for x in got)
        except (TypeError, ValueError):
            return _verdict(False, "", f"return two numbers (parsing, content), got {got!r}")
        if len(got) != 2:
            return _verdict(False, "", f"return two numbers (parsing, content), got {len(got)}")
        answers.append((case, got))
    wrong = [(case, got) for case, got in answers if not _same(got, reference_split(*case))]
    if not wrong:
        return _verdict(True, f"splits the gain as gold_gain_split does on {len(SPLIT_CASES)} cases, "
                              "no review parsed before or after included (and the answer on paper: the two orders' parts "
                              "differ by the interaction Δp·Δq, which the midpoint split shares half and half)", "")
    if all(any(math.isnan(x) for x in got) for _, got in wrong) and all(case[0] == 0 or case[2] == 0 for case, _ in wrong):
        return _verdict(False, "", "NaN when no review parsed before (p0 = 0) or after (p1 = 0): that row's q has no "
                                   "value (nothing to average); take the whole change as parsing, with q̄ the other row's q")
    # a mistake is named when it fits every case the answer gives numbers for (a NaN on the edge case is a second slip)
    finite = [(case, got) for case, got in answers if not any(math.isnan(x) for x in got)]
    for name, (_, hint) in _split_mistakes(*SPLIT_CASES[0]).items():
        if all(_same(got, _split_mistakes(*case)[name][0]) for case, got in finite):
            edge = f" (and {EDGE_HINT})" if len(finite) < len(answers) else ""
            return _verdict(False, "", hint + edge)
    case, got = wrong[0]
    parts = "parsing" if not math.isclose(got[0], reference_split(*case)[0], abs_tol=SPLIT_TOLERANCE) else "content"
    return _verdict(False, "", f"(p0, q0, p1, q1) = {case}: expected {reference_split(*case)}, got {got} "
                               f"(the {parts} part differs)")
