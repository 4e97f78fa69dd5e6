"""Addition asked the way a person asks a chat model: the real-LLM task of lesson 21.

Question ``"What is 7 + 34? Reply with only the number."``, answer ``"41"``. No ``<think>``/``<answer>``
format: a pretrained chat model (SmolLM2-135M-Instruct) has never seen the book's tags and, told to use
them, almost never closes them, so a format-checking verifier would give it nothing to learn from. The
reward is read the way the question asks to be answered: the **last integer in the reply** must be the
sum (``last_number_reward``), so "41", "The answer is 41." and "7 + 34 = 41" are right and "41 + 1 = 42"
is wrong.

Difficulty: each operand's number of digits is drawn uniformly from ``min_digits``..``max_digits``, then
the operand uniformly among the numbers with that many digits (0-9 for one digit). With the default 1..2
a quarter of the problems are one digit plus one digit (which SmolLM2 gets right about half the time at
T = 0.7), half mix a one- and a two-digit number, and a quarter are two plus two (rarely right): a spread
of difficulties, so a group of samples is often mixed (some right, some wrong) — the groups that give
GRPO a gradient.

Simplified on purpose: the reward ignores everything but the last integer, so a reply may ramble; and a
problem ``a + b`` and its mirror ``b + a`` are one problem for the train/test split (``Task``'s rule).
"""

from __future__ import annotations

import random

from datasets import Value

from rlbook._checks import check_int
from rlbook.tasks.base import Task, check_style
from rlbook.tasks.verifiers import last_number_reward

QUESTION = "What is {a} + {b}? Reply with only the number."
MAX_DIGITS = 18  # operands are stored as int64 dataset columns


class PlainAdditionTask(Task):
    """``a + b`` in plain words, operands of ``min_digits`` to ``max_digits`` digits, scored by the last
    integer of the reply."""

    name = "plain_addition"
    family_features = {"a": Value("int64"), "b": Value("int64")}
    reward_columns = ("answer",)

    def __init__(self, min_digits: int = 1, max_digits: int = 2):
        self.min_digits = check_int("min_digits", min_digits, minimum=1)
        self.max_digits = check_int("max_digits", max_digits, minimum=1)
        if max_digits > MAX_DIGITS:
            raise ValueError(f"max_digits must be <= {MAX_DIGITS} (operands are stored as int64), got {max_digits}")
        if max_digits < min_digits:
            raise ValueError(f"max_digits must be >= min_digits={min_digits}, got {max_digits}")

    @property
    def difficulty(self) -> dict:
        return {"min_digits": self.min_digits, "max_digits": self.max_digits}

    def _operand(self, rng: random.Random) -> int:
        digits = rng.randint(self.min_digits, self.max_digits)
        return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)

    def _draw(self, rng: random.Random) -> tuple[int, int]:
        return self._operand(rng), self._operand(rng)

    def _split_key(self, problem: tuple[int, int]) -> str:
        smaller, larger = sorted(problem)
        return f"{smaller}+{larger}"

    def _row(self, problem: tuple[int, int]) -> dict:
        a, b = problem
        return {"question": QUESTION.format(a=a, b=b), "answer": str(a + b), "a": a, "b": b}

    def solution(self, example: dict, *, style: str = "scratchpad") -> str:
        """A correct reply: ``"7 + 34 = 41"`` (scratchpad: the sum written out) or ``"41"`` (direct)."""
        check_style(style)
        a, b = (example.get(key) for key in ("a", "b")) if isinstance(example, dict) else (None, None)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (a, b)):
            raise ValueError("example must have non-negative int columns 'a' and 'b'")
        return f"{a} + {b} = {a + b}" if style == "scratchpad" else str(a + b)

    def _correct(self, text: str, example: dict, strict: bool) -> float:
        return last_number_reward(text, example["answer"], strict=strict)
