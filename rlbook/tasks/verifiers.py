"""Verifiers: turn any completion text into a reward in [0, 1].

The completion format every task shares (the R1-Zero style, DeepSeek-AI 2025)::

    <think>optional working</think><answer>final answer</answer>

A verifier never executes model output: answers are compared as strings or parsed by the bounded
parser in ``rlbook.tasks.expressions``. Every function here accepts any ``str``, however hostile,
and returns quickly, because the work is bounded:

* a completion longer than ``MAX_COMPLETION_CHARS`` gets reward 0 without being read further
  (far longer than any completion in the book; a runaway generation is treated as wrong);
* before that, only linear string scans in C run over the whole text (``count``, ``find``,
  ``rstrip``, one regular expression without nested repetition);
* an answer longer than ``MAX_ANSWER_CHARS`` is refused;
* an expression is parsed only within the bounds of ``rlbook.tasks.expressions``.

Two kinds of correctness check exist for each task, for the verifier-hacking lesson:

* **strict** reads only the single final ``<answer>`` block and checks it exactly;
* **lax** is the kind of check people write in a hurry, and each admits a named hack (see
  ``arithmetic_reward`` and ``countdown_reward``). Do not train with a lax verifier except to watch
  the policy find its hole.
"""

from __future__ import annotations

import numbers as numeric
import re
from collections import Counter
from fractions import Fraction

from rlbook.tasks.expressions import ExpressionError, evaluate, numbers_in, parse_expression

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
END_OF_TURN_MARKERS = ("<|im_end|>", "<|endoftext|>")

MAX_COMPLETION_CHARS = 32_768
MAX_ANSWER_CHARS = 1_024


def completion_text(completion) -> str:
    """The text of a completion given as a string or as a list of chat messages (TRL's format).

    Message contents are concatenated in order; a content given as a list of parts keeps its
    ``"text"`` parts. One end-of-turn marker at the very end (``<|im_end|>``, ``<|endoftext|>``),
    which a chat model emits to stop, is dropped so that it does not count as text after the
    answer.
    """
    if isinstance(completion, str):
        text = completion
    elif isinstance(completion, (list, tuple)):
        text = "".join(_message_text(message) for message in completion)
    else:
        raise ValueError(f"completion must be a str or a list of chat messages, got {type(completion).__name__}")
    stripped = text.rstrip()
    for marker in END_OF_TURN_MARKERS:
        if stripped.endswith(marker):
            return stripped[: -len(marker)]
    return text


def _message_text(message) -> str:
    if not isinstance(message, dict) or "content" not in message:
        raise ValueError(f"completion messages must be dicts with a 'content' key, got {message!r:.80}")
    content = message["content"]
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _check_text(text) -> str:
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return text


def extract_answer(text: str) -> str | None:
    """The content of the single final ``<answer>…</answer>`` block, or None.

    Strict on purpose: exactly one ``<answer>`` and one ``</answer>`` in the whole text, and nothing
    but whitespace after ``</answer>``. What comes before the block (a ``<think>`` block, or
    anything else) is not looked at here; ``format_reward`` judges it. The content is returned as
    written, surrounding whitespace included. Refused (None): texts over ``MAX_COMPLETION_CHARS``
    and answers over ``MAX_ANSWER_CHARS``.
    """
    text = _check_text(text)
    if len(text) > MAX_COMPLETION_CHARS:
        return None
    body = text.rstrip()
    if not body.endswith(ANSWER_CLOSE) or body.count(ANSWER_OPEN) != 1 or body.count(ANSWER_CLOSE) != 1:
        return None
    content = body[body.find(ANSWER_OPEN) + len(ANSWER_OPEN) : -len(ANSWER_CLOSE)]
    return content if len(content) <= MAX_ANSWER_CHARS else None


def extract_answer_lax(text: str) -> str | None:
    """A forgiving extraction: the content of the last ``<answer>…</answer>`` block anywhere in the
    text, else the last non-empty line. None for texts over ``MAX_COMPLETION_CHARS``."""
    text = _check_text(text)
    if len(text) > MAX_COMPLETION_CHARS:
        return None
    close = text.rfind(ANSWER_CLOSE)
    open_ = text.rfind(ANSWER_OPEN, 0, close) if close >= 0 else -1
    if open_ >= 0:
        return text[open_ + len(ANSWER_OPEN) : close]
    lines = text.strip().rsplit("\n", 1)
    return lines[-1] if lines[-1] else None


def is_well_formed(text: str) -> bool:
    """True when ``text`` is ``[<think>…</think>] <answer>…</answer>`` and nothing else.

    Whitespace is allowed around and between the blocks; no tag may appear inside a block; there
    is exactly one answer block and at most one think block, in that order.
    """
    text = _check_text(text)
    if len(text) > MAX_COMPLETION_CHARS:
        return False
    body = text.strip()
    if not (_has_one_answer_block(body) and body.endswith(ANSWER_CLOSE)):
        return False
    answer_block = body[body.find(ANSWER_OPEN) :]
    no_tag_inside = THINK_OPEN not in answer_block and THINK_CLOSE not in answer_block
    return no_tag_inside and _only_think_block_before_answer(body)


def _has_one_answer_block(text: str) -> bool:
    one_of_each = text.count(ANSWER_OPEN) == 1 and text.count(ANSWER_CLOSE) == 1
    return one_of_each and text.find(ANSWER_OPEN) < text.find(ANSWER_CLOSE)


def _only_think_block_before_answer(text: str) -> bool:
    """An ``<answer>`` tag exists, and before the first one there is nothing but whitespace and
    at most one ``<think>…</think>`` block."""
    answer_start = text.find(ANSWER_OPEN)
    if answer_start < 0:
        return False
    before = text[:answer_start].strip()
    return before == "" or (
        before.startswith(THINK_OPEN)
        and before.endswith(THINK_CLOSE)
        and before.count(THINK_OPEN) == 1
        and before.count(THINK_CLOSE) == 1
    )


def format_reward(text: str, *, partial: bool = False) -> float:
    """1.0 for a well-formed completion (see ``is_well_formed``), else 0.0.

    With ``partial=True``, a shaped score: a quarter for each of (1) exactly one answer block,
    (2) the text ends with ``</answer>``, (3) nothing but an optional think block before the
    answer block, (4) well formed. The score is 1.0 exactly when the completion is well formed,
    so the shaping only helps a policy that has not found the format yet.
    """
    text = _check_text(text)
    if len(text) > MAX_COMPLETION_CHARS:
        return 0.0
    well_formed = is_well_formed(text)
    if not partial:
        return float(well_formed)
    checks = (
        _has_one_answer_block(text),
        text.rstrip().endswith(ANSWER_CLOSE),
        _only_think_block_before_answer(text),
        well_formed,
    )
    return sum(checks) / len(checks)


def arithmetic_reward(text: str, answer: str, *, strict: bool = True) -> float:
    """Correctness of an arithmetic completion against the expected decimal ``answer``.

    strict: the final answer block, stripped of whitespace, equals ``answer`` exactly. The expected
    answer is written canonically, so leading zeros ("0623"), signs, separators ("6,23") and
    decimals ("623.0") are wrong: the format is part of the task.

    lax: ``answer`` appears anywhere in the text as a maximal run of digits. The hack it admits:
    spray many numbers ("<answer>1 2 3 … 999</answer>") and one of them is right.
    """
    text = _check_text(text)
    _check_decimal_answer(answer)
    if strict:
        extracted = extract_answer(text)
        return float(extracted is not None and extracted.strip() == answer)
    return _appears_as_number(text, answer)


def _check_decimal_answer(answer) -> None:
    if not (isinstance(answer, str) and answer and all(c in "0123456789" for c in answer)):
        raise ValueError(f"answer must be a non-empty string of decimal digits, got {answer!r}")


def _appears_as_number(text: str, answer: str) -> float:
    """1.0 when ``answer`` is a maximal run of digits somewhere in ``text`` (the lax check)."""
    if len(text) > MAX_COMPLETION_CHARS:
        return 0.0
    return float(re.search(rf"(?<![0-9]){answer}(?![0-9])", text) is not None)


_INTEGER = re.compile(r"-?[0-9]+")


def last_integer(text: str) -> str | None:
    """The last integer written in ``text``: a maximal run of ASCII digits, with a ``-`` just before it
    kept as its sign; leading zeros dropped ("007" → "7"). None when there is none, for texts over
    ``MAX_COMPLETION_CHARS``, and for a run of digits over ``MAX_ANSWER_CHARS``."""
    text = _check_text(text)
    if len(text) > MAX_COMPLETION_CHARS:
        return None
    last = None
    for last in _INTEGER.finditer(text):
        pass
    if last is None or len(last.group()) > MAX_ANSWER_CHARS:
        return None
    sign, digits = ("-", last.group()[1:]) if last.group().startswith("-") else ("", last.group())
    digits = digits.lstrip("0") or "0"
    return "0" if digits == "0" else sign + digits


def last_number_reward(text: str, answer: str, *, strict: bool = True) -> float:
    """Correctness of a plain-text reply (no answer tags) against the expected decimal ``answer``.

    strict: the last integer in the reply (``last_integer``) equals ``answer``: "41", "The sum is 41."
    and "7 + 34 = 41" are right for 41; "41 + 1 = 42", "-41", "41.5" (its last integer is 5) and
    "4,1" are wrong. Leading zeros are forgiven ("041"). What a person would accept from a chat model
    told "Reply with only the number", and a reward a pretrained model earns without being taught a
    format.

    lax: ``answer`` appears anywhere in the text as a maximal run of digits (as ``arithmetic_reward``'s
    lax check). The hack it admits: list many numbers and one of them is right.
    """
    text = _check_text(text)
    _check_decimal_answer(answer)
    if not strict:
        return _appears_as_number(text, answer)
    return float(last_integer(text) == (answer.lstrip("0") or "0"))


def countdown_reward(text: str, numbers, target, *, strict: bool = True) -> float:
    """Correctness of a Countdown completion: an expression over ``numbers`` equal to ``target``.

    strict: the final answer block parses as an expression (integers, ``+ - * /``, parentheses,
    whitespace; see ``rlbook.tasks.expressions``), uses exactly the given numbers, each as often as
    given (the multisets are equal), and its exact rational value equals ``target``. Division by
    zero, a syntax error or an exceeded bound gives 0.

    lax: the last answer block anywhere (else the last line) is any expression whose value is the
    target, whichever numbers it uses. The hack it admits: answer with the target itself
    ("<answer>22</answer>").
    """
    text = _check_text(text)
    numbers, target = _checked_countdown_problem(numbers, target)
    candidate = extract_answer(text) if strict else extract_answer_lax(text)
    if candidate is None:
        return 0.0
    try:
        tree = parse_expression(candidate)
        value = evaluate(tree)
    except (ExpressionError, ZeroDivisionError):
        return 0.0
    if value != Fraction(target):
        return 0.0
    if strict and Counter(numbers_in(tree)) != Counter(numbers):
        return 0.0
    return 1.0


def _checked_countdown_problem(numbers, target) -> tuple[list[int], int]:
    """Accept Python or NumPy integers (a dataset may hand either) and return Python ints."""
    if not isinstance(numbers, (list, tuple)) or not all(_is_integer(n) for n in numbers):
        raise ValueError(f"numbers must be a list of ints, got {numbers!r:.80}")
    if not _is_integer(target):
        raise ValueError(f"target must be an int, got {target!r:.80}")
    return [int(n) for n in numbers], int(target)


def _is_integer(value) -> bool:
    return isinstance(value, numeric.Integral) and not isinstance(value, bool)
