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
from rlbook.tasks.verifiers import last_integer, last_number_reward

__all__ = ["PlainAdditionTask", "reply_breakdown"]

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


def reply_breakdown(texts, examples, *, n_samples: int, truncated=None) -> dict[str, list[list[float]]]:
    """What a plain-addition reply got right, part by part: three (prompts × ``n_samples``) 0/1 tables.

    - ``"right"``: the reward, ``last_number_reward`` strict: the *last* integer of the reply is the sum.
    - ``"sum written"``: the sum appears anywhere in the reply as a number (the lax check), whatever
      follows it. "182 ⏎ ⏎ I added 182 to 61" for 121 + 61 has the sum written but is
      not right; so the gap between the two is what a policy gains by *ending* on its answer. (A sum equal
      to an operand, as in 7 + 0, counts as written whenever the question is repeated.)
    - ``"stopped"``: the reply ended (end-of-sequence) within the token budget: ``truncated`` is the
      rollout's (B,) flags; without them the table is left out.
    - ``"answer given"``: the reply *ends on an attempted sum*: its last integer (the one the reward reads)
      is the sum or any number other than the two operands. "7 + 34 = 40" gave an answer (a wrong one);
      "Title: 7 + 34" and a reply with no integer did not. Right implies given, so right / given is
      P(right | an answer was given): how well the policy adds when it commits to a sum, apart from how
      often it commits to one. Only when every example has int operands ``a`` and ``b``.

    ``texts``: ``n_samples`` replies per example, the groups contiguous (a ``Rollout``'s order);
    ``examples``: rows with an ``answer``. Lesson 21 uses it to split a gain in pass@1 into more sums
    written and more replies that end on the sum. The first is not by itself better adding: a policy that
    answers (within the budget, in the form "a + b = c") more often also writes the sum more often, which
    the rates conditional on ``"stopped"`` help to separate.
    """
    check_int("n_samples", n_samples, minimum=1)
    texts, examples = list(texts), [dict(row) for row in examples]
    if len(texts) != len(examples) * n_samples:
        raise ValueError(f"texts must hold n_samples={n_samples} replies per example: {len(examples)} examples, "
                         f"got {len(texts)} texts")
    flags = None
    if truncated is not None:
        flags = [bool(flag) for flag in truncated]
        if len(flags) != len(texts):
            raise ValueError(f"truncated must have one flag per text ({len(texts)}), got {len(flags)}")

    def table(score) -> list[list[float]]:
        return [[score(i * n_samples + j, row) for j in range(n_samples)] for i, row in enumerate(examples)]

    result = {"right": table(lambda k, row: last_number_reward(texts[k], row["answer"], strict=True)),
              "sum written": table(lambda k, row: last_number_reward(texts[k], row["answer"], strict=False))}
    if flags is not None:
        result["stopped"] = table(lambda k, row: float(not flags[k]))
    if all(isinstance(row.get(key), int) for row in examples for key in ("a", "b")):

        def answer_given(k, row) -> float:
            last = last_integer(texts[k])
            return float(last is not None and (last == (row["answer"].lstrip("0") or "0")
                                               or last not in (str(row["a"]), str(row["b"]))))

        result["answer given"] = table(answer_given)
    return result
