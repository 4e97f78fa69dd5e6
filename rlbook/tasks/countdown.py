"""Countdown: combine the given numbers with + - * / to reach a target.

The numbers game of the TV show, used as a search-and-reasoning benchmark by Gandhi et al. 2024
("Stream of Search", arXiv:2404.03683) and as the task of TinyZero's small-scale R1-Zero
replication. Question ``"Using 3 5 7 make 22."``, answer ``"22"``; a correct completion is an
expression that uses every given number exactly once and equals the target::

    <think>3*5=15
    15+7=22</think><answer>3*5+7</answer>

How problems are made (simplified from the game so that every problem is solvable and a tiny
model can learn the layout): draw ``n_numbers`` numbers from 1..``max_number`` (repeats allowed),
then repeatedly combine two random entries of the pool with a random operator whose result is a
positive integer (subtraction only when it stays positive, division only when exact), until one
value is left. That value is the target, kept if it lies in ``min_target..max_target``; the
combination tree is the stored reference solution. The scratchpad lists the tree's operations,
innermost first.
"""

from __future__ import annotations

import random
from fractions import Fraction

from datasets import Sequence, Value

from rlbook._checks import check_int
from rlbook.tasks.base import Task, check_style, completion
from rlbook.tasks.expressions import MAX_LITERAL_DIGITS, apply_operator, parse_expression, render, steps
from rlbook.tasks.verifiers import countdown_reward

# Keeps every reference solution far inside the expression parser's bounds.
MAX_NUMBERS = 8


def _positive_integer_ops(a: int, b: int) -> list[str]:
    """The operators whose result ``a op b`` is a positive integer (given positive a, b)."""
    ops = ["+", "*"]
    if a > b:
        ops.append("-")
    if a % b == 0:
        ops.append("/")
    return ops


def _apply(op: str, a: int, b: int) -> int:
    """``a op b`` for integers; division is only ever chosen when it is exact."""
    return int(apply_operator(op, Fraction(a), Fraction(b)))


def random_expression(numbers: list[int], rng: random.Random) -> tuple[tuple, int]:
    """A random expression tree using each of ``numbers`` once, every intermediate a positive
    integer; returns ``(tree, value)``.

    For ``+`` and ``*`` a lone number goes to the right of a compound operand (``2+7+1`` rather
    than ``1+(2+7)``), which keeps the written solutions short.
    """
    pool = [(number, number) for number in numbers]  # (tree, value) pairs
    while len(pool) > 1:
        left, a = pool.pop(rng.randrange(len(pool)))
        right, b = pool.pop(rng.randrange(len(pool)))
        op = rng.choice(_positive_integer_ops(a, b))
        if op in "+*" and isinstance(left, int) and not isinstance(right, int):
            left, right = right, left
        pool.append(((op, left, right), _apply(op, a, b)))
    return pool[0]


class CountdownTask(Task):
    """Reach ``target`` from ``n_numbers`` numbers in 1..``max_number`` with + - * /."""

    name = "countdown"
    family_features = {"numbers": Sequence(Value("int64")), "target": Value("int64"), "reference": Value("string")}
    reward_columns = ("numbers", "target")

    def __init__(self, n_numbers: int = 3, max_number: int = 20, min_target: int = 1, max_target: int = 100):
        self.n_numbers = check_int("n_numbers", n_numbers, minimum=2)
        if n_numbers > MAX_NUMBERS:
            raise ValueError(f"n_numbers must be <= {MAX_NUMBERS}, got {n_numbers}")
        self.max_number = check_int("max_number", max_number, minimum=1)
        if max_number >= 10**MAX_LITERAL_DIGITS:
            raise ValueError(f"max_number must have at most {MAX_LITERAL_DIGITS} digits, got {max_number}")
        self.min_target = check_int("min_target", min_target, minimum=1)
        self.max_target = check_int("max_target", max_target, minimum=min_target)
        if max_target >= 2**63:
            raise ValueError(f"max_target must be < 2**63 (targets are stored as int64), got {max_target}")

    @property
    def difficulty(self) -> dict:
        return {
            "n_numbers": self.n_numbers,
            "max_number": self.max_number,
            "min_target": self.min_target,
            "max_target": self.max_target,
        }

    def _draw(self, rng: random.Random) -> tuple[list[int], tuple, int] | None:
        numbers = rng.choices(range(1, self.max_number + 1), k=self.n_numbers)
        tree, target = random_expression(numbers, rng)
        return (numbers, tree, target) if self.min_target <= target <= self.max_target else None

    def _split_key(self, problem: tuple[list[int], tuple, int]) -> str:
        numbers, _, target = problem
        return f"{' '.join(map(str, sorted(numbers)))}->{target}"

    def _row(self, problem: tuple[list[int], tuple, int]) -> dict:
        numbers, tree, target = problem
        return {
            "question": f"Using {' '.join(map(str, numbers))} make {target}.",
            "answer": str(target),
            "numbers": numbers,
            "target": target,
            "reference": render(tree),
        }

    def solution(self, example: dict, *, style: str = "scratchpad") -> str:
        """``<think>steps</think><answer>expression</answer>`` (scratchpad) or ``<answer>expression</answer>``
        (direct), from the example's stored ``reference`` expression."""
        check_style(style)
        reference = example.get("reference") if isinstance(example, dict) else None
        if not isinstance(reference, str):
            raise ValueError("example must have a 'reference' column holding the solution expression")
        think = "\n".join(steps(parse_expression(reference))) if style == "scratchpad" else None
        return completion(think, reference)

    def _correct(self, text: str, example: dict, strict: bool) -> float:
        return countdown_reward(text, example["numbers"], example["target"], strict=strict)
