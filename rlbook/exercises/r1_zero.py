"""Checker for the exercise of lesson 17 (R1-Zero in miniature): the combined accuracy + format reward.

The reader writes ``my_reward(text, answer, format_weight) -> float`` for an addition problem whose
correct sum is the string ``answer``: accuracy (1 when the single final ``<answer>`` block holds
exactly ``answer``, the strict verifier) plus ``format_weight`` × format (1 for a well-formed
``[<think>…</think>]<answer>…</answer>``), as in DeepSeek-AI 2025 (arXiv:2501.12948, §2.2.2). The
checker compares it with ``rlbook.reasoning.r1_zero_reward`` on completions chosen so that each
common mistake gives a different number, and names the one it matches: the lax verifier, no
format term, the weight on the wrong term, format paid only to right answers, accuracy paid only
to well-formed answers, R1's think-required rule, the shaped (partial) format score.
"""

from __future__ import annotations

from rlbook.exercises.framework import FLOAT32_NUMBER_NOTE, FunctionExercise, _one_number, _within
from rlbook.reasoning import completion_kind, r1_zero_reward
from rlbook.tasks import ArithmeticTask, arithmetic_reward, format_reward

__all__ = ["CASES", "FORMAT_WEIGHTS", "reference_reward", "check_r1_zero_reward"]

# (completion, answer): right with and without working, wrong, right but malformed (text after
# the answer block; two answer blocks), and a spray that only the lax verifier accepts.
CASES = (
    ("<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer>", "623"),
    ("<answer>623</answer>", "623"),
    ("<think>5+8=13\n4+7+1=12\n3+2=5</think><answer>523</answer>", "623"),
    ("<think>5+8=13</think> so <answer>623</answer>", "623"),
    ("<answer>6</answer><answer>623</answer>", "623"),
    ("<answer>623 624</answer>", "623"),
)
FORMAT_WEIGHTS = (0.5, 0.2)
TOLERANCE = 1e-9
TASK = ArithmeticTask(digits=3)


def reference_reward(text: str, answer: str, format_weight: float) -> float:
    """strict accuracy + ``format_weight`` × format, from the library."""
    return r1_zero_reward(text, {"answer": answer}, TASK, format_weight=format_weight)


def _mistakes(text: str, answer: str, w: float) -> dict[str, tuple[float, str]]:
    accuracy = arithmetic_reward(text, answer)
    formatted = format_reward(text)
    return {
        "lax": (arithmetic_reward(text, answer, strict=False) + w * formatted,
                "that is the lax verifier (the answer anywhere in the text); accuracy reads only the single final "
                "<answer> block, exactly"),
        "no_format": (accuracy, "the format term is missing: add format_weight × format_reward(text)"),
        "swapped": (w * accuracy + formatted, "the weight is on the wrong term: accuracy + format_weight × format"),
        "format_if_right": (accuracy * (1 + w), "format is paid only to right answers; it is its own term, "
                                                "earned by any well-formed completion"),
        "accuracy_if_formed": (accuracy * formatted + w * formatted,
                               "accuracy is paid only to well-formed answers; the strict verifier reads the final "
                               "answer block whatever comes before it, and format is scored separately"),
        "think_required": (accuracy + w * float(completion_kind(text) == "scratchpad"),
                           "that format rule requires <think> (R1's template); this exercise uses the book's "
                           "format_reward, where a direct answer is well formed"),
        "partial": (accuracy + w * format_reward(text, partial=True),
                    "that is the shaped (partial) format score; use the 0/1 format_reward"),
    }


def _where(text: str, answer: str, w: float) -> str:
    return f"text={text!r}, answer={answer!r}, format_weight={w}"


check_r1_zero_reward = FunctionExercise(
    "check_r1_zero_reward", what="reward function",
    cases=lambda: [(text, answer, w) for w in FORMAT_WEIGHTS for text, answer in CASES],
    reference=reference_reward, mistakes=_mistakes, label=_where, checks=(_one_number(label=_where),),
    close=_within(TOLERANCE),
    # a mistake is named when it gives the reader's number on every completion and weight
    together=lambda *case: "all", across=True,
    otherwise=lambda result, reference, *case, **counts: (f"{_where(*case)}: expected {float(reference):.3f}, "
                                                          f"got {float(result):.3f}"),
    success=f"matches accuracy + w × format on {len(CASES)} completions × {len(FORMAT_WEIGHTS)} weights",
    float32_success=f"matches accuracy + w × format on {len(CASES)} completions × {len(FORMAT_WEIGHTS)} weights "
                    f"{FLOAT32_NUMBER_NOTE}",
    doc="""Check ``fn(text, answer, format_weight) -> float`` on ``CASES`` × ``FORMAT_WEIGHTS``.

    When it differs from the reference, the mistake whose numbers it matches on every case is
    named. Prints a verdict; returns True / False, or None when ``fn`` is None or raises
    ``NotImplementedError`` (not attempted yet).
    """)
