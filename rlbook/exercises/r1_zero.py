"""Checkers for the exercises of lesson 17 (R1-Zero in miniature): the combined accuracy + format
reward, and the within term of the length decomposition.

The reader writes ``my_reward(text, answer, format_weight) -> float`` for an addition problem whose
correct sum is the string ``answer``: accuracy (1 when the single final ``<answer>`` block holds
exactly ``answer``, whitespace around it aside: the strict verifier) plus ``format_weight`` × format (1 for a well-formed
``[<think>…</think>]<answer>…</answer>``), as in DeepSeek-AI 2025 (arXiv:2501.12948, §2.2.2). The
checker compares it with ``rlbook.reasoning.r1_zero_reward`` on completions chosen so that each
common mistake gives a different number, and names the one it matches: the lax verifier, no
format term, the weight on the wrong term, format paid only to right answers, accuracy paid only
to well-formed answers, R1's think-required rule, the shaped (partial) format score, the last of
several answer blocks, one answer block anywhere (text after it ignored), a format pattern that
lets a lazy ``.*?`` swallow a second block, and a numeric comparison that lets "0623" be 623.

``check_within_term``: the reader writes ``my_within(before, after)``, the within term
Σ_k p'_k (ℓ'_k − ℓ_k) of ``rlbook.reasoning.length_decomposition`` between two profiles, a kind
absent on one side contributing nothing. Named: the other exact split (base shares), the whole
change, the mix term, and an absent kind's length read as 0.

``check_first_decision_push``: the reader writes ``my_push(p, scratchpad_advantage, scratchpad_length,
direct_length)``, GRPO's expected push on the logit of "open ``<think>``" under its 1/|o| normaliser,
p·Ā_s·[(1 − p)/ℓ_s + p/ℓ_d] (``rlbook.reasoning.first_decision_push``; Liu et al. 2025,
arXiv:2503.20783, §3, for the normaliser). Named: the direct answers' term left out, its sign
flipped (their advantage is negative, and so is ∂ log π/∂z for them), the probability p of each
kind left out, the two lengths swapped, and a constant normaliser (the mean length) in place of 1/|o|.
"""

from __future__ import annotations

import math
import re

from rlbook.exercises.framework import FLOAT32_NUMBER_NOTE, FunctionExercise, _one_number, _within
from rlbook.reasoning import KINDS, completion_kind, first_decision_push, length_decomposition, r1_zero_reward
from rlbook.tasks import ArithmeticTask, arithmetic_reward, format_reward
from rlbook.tasks.verifiers import extract_answer

__all__ = ["CASES", "FORMAT_WEIGHTS", "reference_reward", "check_r1_zero_reward", "PROFILE_PAIRS", "reference_within",
           "check_within_term", "PUSH_CASES", "check_first_decision_push"]

# (completion, answer): right with and without working, wrong, right but malformed (text before
# the answer block; two answer blocks; text after it), a spray that only the lax verifier accepts,
# a leading zero, and whitespace inside the block (ignored around the number).
CASES = (
    ("<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer>", "623"),
    ("<answer>623</answer>", "623"),
    ("<think>5+8=13\n4+7+1=12\n3+2=5</think><answer>523</answer>", "623"),
    ("<think>5+8=13</think> so <answer>623</answer>", "623"),
    ("<answer>6</answer><answer>623</answer>", "623"),
    ("<answer>623 624</answer>", "623"),
    ("<answer>623</answer> I think", "623"),
    ("<answer>0623</answer>", "623"),
    ("<answer> 623 </answer>", "623"),
)
ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.S)
LAZY_FORMAT = re.compile(r"\s*(<think>.*?</think>)?\s*<answer>.*?</answer>\s*", re.S)
FORMAT_WEIGHTS = (0.5, 0.2)
TOLERANCE = 1e-9
TASK = ArithmeticTask(digits=3)


def reference_reward(text: str, answer: str, format_weight: float) -> float:
    """strict accuracy + ``format_weight`` × format, from the library."""
    return r1_zero_reward(text, {"answer": answer}, TASK, format_weight=format_weight)


def _mistakes(text: str, answer: str, w: float) -> dict[str, tuple[float, str]]:
    accuracy = arithmetic_reward(text, answer)
    formatted = format_reward(text)
    blocks = ANSWER_BLOCK.findall(text)
    return {
        "lax": (arithmetic_reward(text, answer, strict=False) + w * formatted,
                "that is the lax verifier (the answer anywhere in the text); accuracy reads only the single final "
                "<answer> block, exactly"),
        "no_format": (accuracy, "the format term is missing: add format_weight × format_reward(text)"),
        "swapped": (w * accuracy + formatted, "the weight is on the wrong term: accuracy + format_weight × format"),
        "format_if_right": (accuracy * (1 + w), "format is paid only to right answers; it is its own term, "
                                                "earned by any well-formed completion"),
        "format_if_right_formed": (accuracy * (1 + w * formatted),
                                   "format is paid only to right answers; it is its own term, earned by any "
                                   "well-formed completion, right or wrong"),
        "accuracy_if_formed": (accuracy * formatted + w * formatted,
                               "accuracy is paid only to well-formed answers; the strict verifier reads the final "
                               "answer block whatever comes before it, and format is scored separately"),
        "think_required": (accuracy + w * float(completion_kind(text) == "scratchpad"),
                           "that format rule requires <think> (R1's template); this exercise uses the book's "
                           "format_reward, where a direct answer is well formed"),
        "partial": (accuracy + w * format_reward(text, partial=True),
                    "that is the shaped (partial) format score; use the 0/1 format_reward"),
        "last_block": (float(bool(blocks) and blocks[-1].strip() == answer) + w * formatted,
                       "accuracy reads the last of several <answer> blocks; with two blocks there is no single final "
                       "answer, and the strict verifier gives 0"),
        "any_single_block": (float(len(blocks) == 1 and blocks[0].strip() == answer) + w * formatted,
                             "accuracy ignores text after the answer block; the block must end the completion "
                             "(only whitespace may follow)"),
        "lazy_format": (accuracy + w * float(LAZY_FORMAT.fullmatch(text) is not None),
                        "the format check lets .*? run across '</answer><answer>': two answer blocks are not well "
                        "formed (count the tags, or forbid a tag inside a block)"),
        "numeric": (float(bool(_numeric_match(text, answer))) + w * formatted,
                    "the answer is compared as a number; it must be the text exactly, so '0623' is not '623'"),
    }


def _numeric_match(text: str, answer: str) -> bool:
    content = extract_answer(text)
    try:
        return content is not None and int(content.strip()) == int(answer)
    except ValueError:
        return False


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


# (before, after) profiles ({kind: {"share", "length"}}): the base → a trained policy; a kind that
# appears only after training (malformed); a kind that vanishes (direct) while another grows.
PROFILE_PAIRS = (
    ({"scratchpad": {"share": 0.25, "length": 29.5}, "direct": {"share": 0.75, "length": 6.6},
      "malformed": {"share": 0.0, "length": math.nan}},
     {"scratchpad": {"share": 0.9, "length": 31.0}, "direct": {"share": 0.1, "length": 6.0},
      "malformed": {"share": 0.0, "length": math.nan}}),
    ({"scratchpad": {"share": 0.5, "length": 30.0}, "direct": {"share": 0.5, "length": 7.0},
      "malformed": {"share": 0.0, "length": math.nan}},
     {"scratchpad": {"share": 0.6, "length": 28.0}, "direct": {"share": 0.2, "length": 8.0},
      "malformed": {"share": 0.2, "length": 60.0}}),
    ({"scratchpad": {"share": 0.2, "length": 25.0}, "direct": {"share": 0.7, "length": 6.0},
      "malformed": {"share": 0.1, "length": 50.0}},
     {"scratchpad": {"share": 0.95, "length": 27.0}, "direct": {"share": 0.0, "length": math.nan},
      "malformed": {"share": 0.05, "length": 40.0}}),
)


def reference_within(before: dict, after: dict) -> float:
    """The within term of ``rlbook.reasoning.length_decomposition``."""
    return length_decomposition(before, after)["within"]


def _terms(before: dict, after: dict, *, absent_as_zero: bool = False) -> dict[str, float]:
    sums = dict.fromkeys(("base_shares", "mix", "change", "zero_within"), 0.0)
    for kind in KINDS:
        p, p_new = before[kind]["share"], after[kind]["share"]
        length, length_new = before[kind]["length"], after[kind]["length"]
        zero, zero_new = (0.0 if p == 0 else length), (0.0 if p_new == 0 else length_new)
        sums["zero_within"] += p_new * (zero_new - zero)
        sums["change"] += p_new * zero_new - p * zero
        length, length_new = (length_new if p == 0 else length), (length if p_new == 0 else length_new)
        if p == 0 and p_new == 0:
            continue
        sums["base_shares"] += p * (length_new - length)
        sums["mix"] += (p_new - p) * length
    return sums


def _within_mistakes(before: dict, after: dict) -> dict[str, tuple[float, str]]:
    sums = _terms(before, after)
    return {
        "base_shares": (sums["base_shares"], "the length change is weighted by the base's shares p_k: that is the other "
                                             "exact split (its mix priced at the trained lengths); here the mix is priced "
                                             "at the base's lengths, so within uses the trained shares p'_k"),
        "change": (sums["change"], "that is the whole change L' − L; the within term is only each kind's own change "
                                   "of length, weighted by its trained share"),
        "mix": (sums["mix"], "that is the mix term Σ (p'_k − p_k) ℓ_k; the within term is Σ p'_k (ℓ'_k − ℓ_k)"),
        "absent_as_zero": (sums["zero_within"], "a kind absent on one side has no length (NaN), not length 0: it "
                                                "contributes nothing to within (its whole effect is mix)"),
    }


def _no_nan(result, reference, before, after) -> str | None:
    if math.isnan(float(result.reshape(-1)[0])):
        return ("your within term is NaN: a kind absent on one side (share 0, length NaN) must contribute "
                "nothing; skip it, or take its length from the other side")
    return None


def _pair_label(before: dict, after: dict) -> str:
    def shares(side):
        return ", ".join(f"{k} {side[k]['share']:g}" for k in KINDS)
    return f"before ({shares(before)}) → after ({shares(after)})"


check_within_term = FunctionExercise(
    "check_within_term", what="within term",
    cases=lambda: list(PROFILE_PAIRS), reference=reference_within, mistakes=_within_mistakes, label=_pair_label,
    checks=(_one_number(label=_pair_label), _no_nan), close=_within(1e-6),
    together=lambda *case: "all", across=True, or_first=True,
    otherwise=lambda result, reference, *case, **counts: (f"{_pair_label(*case)}: expected {float(reference):.4f}, "
                                                          f"got {float(result):.4f}"),
    success=f"matches length_decomposition's within term on {len(PROFILE_PAIRS)} pairs of profiles",
    doc="""Check ``fn(before, after) -> float``, the within term Σ_k p'_k (ℓ'_k − ℓ_k), on ``PROFILE_PAIRS``.

    When it differs from the reference, the mistake whose numbers it matches on every pair is
    named. Prints a verdict; returns True / False, or None when ``fn`` is None or raises
    ``NotImplementedError`` (not attempted yet).
    """)


# (p, Ā_s, ℓ_s, ℓ_d): the base's share and lengths (about those of arith-base), and three others
PUSH_CASES = ((0.258, 0.8, 29.5, 6.6), (0.5, 1.2, 30.0, 7.0), (0.9, 0.3, 28.0, 6.0), (0.1, 2.0, 25.0, 8.0))


def _push_mistakes(p: float, advantage: float, scratchpad_length: float, direct_length: float) -> dict:
    mean_length = p * scratchpad_length + (1 - p) * direct_length
    return {
        "scratchpad_only": (p * advantage * (1 - p) / scratchpad_length,
                            "that is the scratchpads' part alone: the direct answers push z too, since their mean "
                            "advantage Ā_d = −p·Ā_s/(1 − p) is set by the group mean"),
        "direct_sign": (p * advantage * ((1 - p) / scratchpad_length - p / direct_length),
                        "the direct answers' term has the wrong sign: their advantage is negative and their "
                        "∂ log π/∂z = −p is negative too, so it adds to the push"),
        "no_share": (advantage * ((1 - p) / scratchpad_length + p / direct_length),
                     "each kind is drawn with its probability (p and 1 − p): the expected push carries a factor p"),
        "lengths_swapped": (p * advantage * ((1 - p) / direct_length + p / scratchpad_length),
                            "the lengths are swapped: a scratchpad's first token is weighed by 1/ℓ_s, a direct "
                            "answer's by 1/ℓ_d"),
        "constant": (p * advantage / mean_length,
                     "that is the push under a constant normaliser L (here the mean length): under GRPO's 1/|o| "
                     "each kind's first token is weighed by its own length"),
    }


def _push_label(p: float, advantage: float, scratchpad_length: float, direct_length: float) -> str:
    return f"p = {p:g}, Ā_s = {advantage:g}, ℓ_s = {scratchpad_length:g}, ℓ_d = {direct_length:g}"


check_first_decision_push = FunctionExercise(
    "check_first_decision_push", what="push",
    cases=lambda: list(PUSH_CASES), reference=lambda *case: first_decision_push(*case), mistakes=_push_mistakes,
    label=_push_label, checks=(_one_number(label=_push_label),), close=_within(1e-9),
    together=lambda *case: "all", across=True, or_first=True,
    otherwise=lambda result, reference, *case, **counts: (f"{_push_label(*case)}: expected {float(reference):.6f}, "
                                                          f"got {float(result):.6f}"),
    success=f"matches first_decision_push (GRPO's 1/|o|) on {len(PUSH_CASES)} cases",
    doc="""Check ``fn(p, scratchpad_advantage, scratchpad_length, direct_length) -> float``, GRPO's expected
    first-token push p·Ā_s·[(1 − p)/ℓ_s + p/ℓ_d], on ``PUSH_CASES``.

    When it differs from the reference, the mistake whose numbers it matches on every case is named.
    Prints a verdict; returns True / False, or None when ``fn`` is None or raises
    ``NotImplementedError`` (not attempted yet).
    """)
