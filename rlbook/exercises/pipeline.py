"""Checker for the exercise of lesson 20 (the full R1 pipeline): stage 3's rejection filter.

The reader writes ``my_keep(samples, answer) -> str | None``: of one prompt's samples (a list of
completions of a three-digit addition whose correct sum is the string ``answer``), return the first
one that is right under the **strict** verifier and in R1's format (``<think>…</think><answer>…</answer>``),
or None when there is none — what DeepSeek-R1's stage 3 keeps (arXiv:2501.12948 §2.3.3: only correct
responses, with mixed languages, long paragraphs and code blocks filtered out; here the format check
stands for that readability filter). The checker compares it with ``rlbook.pipeline.keep_first`` on
sample lists chosen so that each common mistake returns a different completion, and names the one
it matches: the lax verifier (with or without the right format filter), ``is_well_formed`` (the
format reward's test) in place of ``is_r1_formatted``, no format filter, a substring test for ``<think>`` in place of the
format filter, the format filter without the accuracy one, the last right sample instead of the
first, a list instead of one completion.
"""

from __future__ import annotations

from rlbook.exercises.framework import _failed, _not_attempted, _run, _verdict
from rlbook.pipeline import is_r1_formatted, is_well_formed, keep_first
from rlbook.tasks import ArithmeticTask, arithmetic_reward

__all__ = ["CASES", "check_keep_first"]

TASK = ArithmeticTask(digits=3)
RIGHT = "<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer>"
RIGHT_TOO = "<think>5+8=13\n4+7+1=12\n3+2+1=6\n</think><answer>623</answer>"
DIRECT_RIGHT = "<answer>623</answer>"
WRONG_WORKED = "<think>5+8=13\n4+7+1=12\n3+2=5</think><answer>523</answer>"
SPRAY = "<think>5+8=13</think><answer>623 624</answer>"
TRAILING = "<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer> done"
PROSE_BETWEEN = "<think>5+8=13\n4+7+1=12\n3+2+1=6</think> so the sum is <answer>623</answer>"  # strict-right, not R1's format
UNCLOSED = "<think>5+8=13\n4+7+1=12\n3+2+1=6 <answer>623</answer>"  # strict-right, its <think> never closed

# (samples, answer): each list separates some of the mistakes from the reference.
CASES = (
    ([WRONG_WORKED, RIGHT, RIGHT_TOO], "623"),
    ([DIRECT_RIGHT, WRONG_WORKED, RIGHT], "623"),
    ([SPRAY, TRAILING, RIGHT_TOO], "623"),
    ([WRONG_WORKED, DIRECT_RIGHT], "623"),
    ([WRONG_WORKED, SPRAY], "623"),
    ([PROSE_BETWEEN, UNCLOSED, RIGHT], "623"),
    ([UNCLOSED, RIGHT_TOO], "623"),
    ([], "623"),
)


def _first(samples, keep):
    return next((s for s in samples if keep(s)), None)


def _mistakes(samples, answer) -> dict[str, tuple[object, str]]:
    strict = lambda s: arithmetic_reward(s, answer) == 1.0  # noqa: E731
    return {
        "lax": (_first(samples, lambda s: arithmetic_reward(s, answer, strict=False) == 1.0 and "<think>" in s),
                "that keeps answers only the lax verifier accepts (the sum anywhere in the text); use the strict "
                "verifier: the single final <answer> block, exactly"),
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
    for name, (_, hint) in _mistakes(*CASES[0]).items():
        if all(got == _mistakes(s, a)[name][0] for s, a, got in answers):
            return _verdict(False, "", hint)
    samples, answer, got = wrong[0]
    return _verdict(False, "", f"samples={samples!r}, answer={answer!r}: expected {reference_keep(samples, answer)!r}, "
                               f"got {got!r}")
