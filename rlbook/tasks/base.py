"""What every verifiable task shares: datasets, splits, rewards, and the TRL reward function.

A family (``ArithmeticTask``, ``CountdownTask``) fills in five things:

* ``_draw(rng)`` draws one problem in the family's own form (a tuple), or None to reject the draw;
* ``_split_key(problem)`` names the problem up to symmetry (``a+b`` and ``b+a`` are one problem),
  so that the train/test assignment never puts a problem and its mirror on different sides;
* ``_row(problem)`` writes the dataset row: ``question``, ``answer`` and the family's columns
  (only for kept draws: most draws for the test split are rejected, so formatting waits);
* ``solution(example, style=...)`` writes the reference completion;
* ``_correct(text, example, strict)`` checks a completion's text.

Train and test are disjoint by construction: each problem's split is a stable hash of its key
(SHA-256, not Python's per-process salted ``hash``), so the assignment is the same on every
machine and in every run, and a problem is in the test split no matter how many rows are drawn.
Rows are drawn i.i.d. (with replacement) from a split, so a small problem space can repeat rows.
"""

from __future__ import annotations

import hashlib
import random

from datasets import Dataset, Features, Value

from rlbook._checks import check_choice, check_int
from rlbook.tasks.verifiers import completion_text

SPLITS = ("train", "test")
STYLES = ("scratchpad", "direct")
TEST_FRACTION = 0.2
# A family whose settings admit (almost) no problem in a split would loop forever; give up after
# this many rejected draws in a row and say which settings to change.
MAX_REJECTED_DRAWS = 20_000

# A system prompt for models that have not been taught the format (hub models); the shipped zoo
# models learn it from their SFT corpus and need none.
FORMAT_INSTRUCTION = (
    "Think step by step inside <think> and </think>, then give only the final answer inside "
    "<answer> and </answer>."
)

PROMPT_FEATURE = [{"role": Value("string"), "content": Value("string")}]


def split_of(key: str) -> str:
    """The split ("train" or "test") of the problem named ``key``: a stable hash decides."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:8], "big") < TEST_FRACTION * 2**64 else "train"


class Task:
    """A verifiable task family; subclasses set ``name`` and ``family_features``."""

    name: str = ""
    family_features: dict = {}  # the family's extra dataset columns and their types
    reward_columns: tuple[str, ...] = ("answer",)  # the columns ``reward`` reads from an example

    @property
    def difficulty(self) -> dict:
        """The difficulty settings, e.g. ``{"digits": 3}``: ``get_task(task.name, **task.difficulty)``
        rebuilds the task."""
        raise NotImplementedError

    def __repr__(self) -> str:
        settings = ", ".join(f"{key}={value!r}" for key, value in self.difficulty.items())
        return f"{type(self).__name__}({settings})"

    # --- data -------------------------------------------------------------------------------
    def dataset(self, n: int, *, seed: int = 0, split: str = "train", system_prompt: str | None = None) -> Dataset:
        """``n`` problems from ``split`` as a ``datasets.Dataset``, the same for the same ``seed``.

        Columns: ``prompt`` (the chat messages TRL expects: an optional system message, then
        ``{"role": "user", "content": question}``), ``question``, ``answer``, and the family's
        columns. A shorter dataset with the same seed is a prefix of a longer one.
        """
        n = check_int("n", n, minimum=0)
        seed = check_int("seed", seed)
        check_choice("split", split, SPLITS)
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"system_prompt must be a str or None, got {type(system_prompt).__name__}")
        rows = self._draw_rows(n, random.Random(seed), split)
        columns = {name: [row[name] for row in rows] for name in ("question", "answer", *self.family_features)}
        columns["prompt"] = [_prompt(row["question"], system_prompt) for row in rows]
        features = Features(
            {"prompt": PROMPT_FEATURE, "question": Value("string"), "answer": Value("string"), **self.family_features}
        )
        return Dataset.from_dict(columns, features=features)

    def _draw_rows(self, n: int, rng: random.Random, split: str) -> list[dict]:
        rows, rejected_in_a_row = [], 0
        while len(rows) < n:
            problem = self._draw(rng)
            if problem is not None and split_of(self._split_key(problem)) == split:
                rows.append(self._row(problem))
                rejected_in_a_row = 0
                continue
            rejected_in_a_row += 1
            if rejected_in_a_row > MAX_REJECTED_DRAWS:
                raise ValueError(
                    f"{self!r} could not draw a {split!r} problem in {MAX_REJECTED_DRAWS} tries; "
                    "widen the difficulty settings"
                )
        return rows

    def _draw(self, rng: random.Random) -> tuple | None:
        raise NotImplementedError

    def _split_key(self, problem: tuple) -> str:
        raise NotImplementedError

    def _row(self, problem: tuple) -> dict:
        raise NotImplementedError

    # --- reference completions --------------------------------------------------------------
    def solution(self, example: dict, *, style: str = "scratchpad") -> str:
        """The reference completion for ``example``: with its working ("scratchpad") or without
        ("direct")."""
        raise NotImplementedError

    # --- rewards ----------------------------------------------------------------------------
    def reward(self, completion, example: dict, *, strict: bool = True) -> float:
        """Correctness of ``completion`` (a string or a list of chat messages) in {0.0, 1.0}.

        ``strict=False`` selects the deliberately hackable verifier of the verifier-hacking lesson.
        """
        if not isinstance(strict, bool):
            raise ValueError(f"strict must be a bool, got {strict!r}")
        self._check_example(example)
        return self._correct(completion_text(completion), example, strict)

    def _check_example(self, example) -> None:
        if not isinstance(example, dict):
            raise ValueError(f"example must be a dict (a dataset row), got {type(example).__name__}")
        missing = [column for column in self.reward_columns if column not in example]
        if missing:
            raise ValueError(f"example must have the columns {list(self.reward_columns)}; missing {missing}")

    def _correct(self, text: str, example: dict, strict: bool) -> float:
        raise NotImplementedError

    def reward_fn(self, *, strict: bool = True):
        """A reward function in TRL's convention: ``f(prompts, completions, **columns) -> list[float]``.

        TRL passes every dataset column (except ``prompt``) as a list aligned with ``completions``;
        ``f`` reads the columns it needs and ignores the rest (``completion_ids``, ``trainer_state``…).
        """
        if not isinstance(strict, bool):
            raise ValueError(f"strict must be a bool, got {strict!r}")

        def reward_function(prompts=None, completions=None, **columns) -> list[float]:
            if completions is None:
                raise ValueError("completions must be given")
            examples = self._examples_from_columns(columns, len(completions))
            return [self.reward(c, e, strict=strict) for c, e in zip(completions, examples)]

        reward_function.__name__ = f"{self.name}_{'strict' if strict else 'lax'}_reward"
        return reward_function

    def _examples_from_columns(self, columns: dict, count: int) -> list[dict]:
        for column in self.reward_columns:
            values = columns.get(column)
            if values is None or len(values) != count:
                raise ValueError(f"column {column!r} must be given as a list with one entry per completion ({count})")
        return [{column: columns[column][i] for column in self.reward_columns} for i in range(count)]


def _prompt(question: str, system_prompt: str | None) -> list[dict]:
    system = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
    return system + [{"role": "user", "content": question}]


def check_style(style) -> str:
    """Raise unless ``style`` is "scratchpad" or "direct"."""
    return check_choice("style", style, STYLES)


def completion(think: str | None, answer: str) -> str:
    """Assemble ``<think>think</think><answer>answer</answer>`` (no think block when None)."""
    thinking = f"<think>{think}</think>" if think is not None else ""
    return f"{thinking}<answer>{answer}</answer>"
