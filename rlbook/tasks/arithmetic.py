"""Multi-digit addition: the book's first verifiable task.

Question ``"What is 345+278?"``, answer ``"623"``. Difficulty is one knob, ``digits``, the number of
digits of each operand (operands are drawn uniformly from the ``digits``-digit numbers; 0-9 when
``digits=1``). A second, ``first_digits``, gives the first operand a length of its own
(``ArithmeticTask(digits=3, first_digits=2)`` asks ``"What is 35+631?"``): a family one step
outside what a model trained on ``digits=3`` has seen, for testing what it does off its training
distribution (lesson 18).

The scratchpad solution writes the school algorithm one column per line, least significant first,
the carry shown as ``+1`` (after Nye et al. 2021, "Show Your Work: Scratchpads for Intermediate
Computation with Language Models", arXiv:2112.00114)::

    <think>5+8=13
    4+7+1=12
    3+2+1=6</think><answer>623</answer>

Simplified on purpose: a missing digit of a shorter operand is written as 0, and a final carry
gets no line of its own (it is the leading 1 of the answer). A character-level model learns this
layout from a few thousand examples, which is why it is so regular.
"""

from __future__ import annotations

import random

from datasets import Value

from rlbook._checks import check_int
from rlbook.tasks.base import Task, check_style, completion
from rlbook.tasks.verifiers import arithmetic_reward

# The operands are stored as int64 dataset columns, so they have at most 18 digits.
MAX_DIGITS = 18


def addition_steps(a: int, b: int) -> list[str]:
    """The scratchpad lines for ``a + b``: ``addition_steps(345, 278) == ["5+8=13", "4+7+1=12", "3+2+1=6"]``."""
    digits_a, digits_b = str(a)[::-1], str(b)[::-1]
    lines, carry = [], 0
    for column in range(max(len(digits_a), len(digits_b))):
        x = int(digits_a[column]) if column < len(digits_a) else 0
        y = int(digits_b[column]) if column < len(digits_b) else 0
        total = x + y + carry
        lines.append(f"{x}+{y}{'+1' if carry else ''}={total}")
        carry = total // 10
    return lines


class ArithmeticTask(Task):
    """Addition of two ``digits``-digit numbers, checked by exact string match of the sum."""

    name = "arithmetic"
    family_features = {"a": Value("int64"), "b": Value("int64")}
    reward_columns = ("answer",)

    def __init__(self, digits: int = 3, first_digits: int | None = None):
        self.digits = check_int("digits", digits, minimum=1)
        if digits > MAX_DIGITS:
            raise ValueError(f"digits must be <= {MAX_DIGITS} (operands are stored as int64), got {digits}")
        if first_digits is not None:
            check_int("first_digits", first_digits, minimum=1)
            if first_digits > MAX_DIGITS:
                raise ValueError(f"first_digits must be <= {MAX_DIGITS} (operands are stored as int64), "
                                 f"got {first_digits}")
        self.first_digits = first_digits

    @property
    def difficulty(self) -> dict:
        return {"digits": self.digits} if self.first_digits is None else \
            {"digits": self.digits, "first_digits": self.first_digits}

    def _draw(self, rng: random.Random) -> tuple[int, int]:
        first = self.digits if self.first_digits is None else self.first_digits
        return _operand(rng, first), _operand(rng, self.digits)

    def _split_key(self, problem: tuple[int, int]) -> str:
        smaller, larger = sorted(problem)
        return f"{smaller}+{larger}"

    def _row(self, problem: tuple[int, int]) -> dict:
        a, b = problem
        return {"question": f"What is {a}+{b}?", "answer": str(a + b), "a": a, "b": b}

    def solution(self, example: dict, *, style: str = "scratchpad") -> str:
        """``<think>…</think><answer>sum</answer>`` (scratchpad) or ``<answer>sum</answer>`` (direct)."""
        check_style(style)
        a, b = _operands(example)
        think = "\n".join(addition_steps(a, b)) if style == "scratchpad" else None
        return completion(think, str(a + b))

    def _correct(self, text: str, example: dict, strict: bool) -> float:
        return arithmetic_reward(text, example["answer"], strict=strict)


def _operand(rng: random.Random, digits: int) -> int:
    """A uniform ``digits``-digit number (0-9 for one digit)."""
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _operands(example) -> tuple[int, int]:
    if not isinstance(example, dict) or not all(_is_natural(example.get(key)) for key in ("a", "b")):
        raise ValueError("example must have non-negative int columns 'a' and 'b'")
    return int(example["a"]), int(example["b"])


def _is_natural(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
