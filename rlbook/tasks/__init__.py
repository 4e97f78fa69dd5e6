"""Verifiable tasks and their verifiers: the reward side of RL with verifiable rewards (RLVR).

Usage::

    from rlbook.tasks import get_task
    task = get_task("arithmetic", digits=3)
    data = task.dataset(1000, seed=0, split="train")    # a datasets.Dataset, TRL-ready
    text = task.solution(data[0])                       # "<think>…</think><answer>…</answer>"
    task.reward(text, data[0])                          # 1.0
    reward = task.reward_fn()                           # for trl.GRPOTrainer(reward_funcs=[reward])

Modules: ``base`` (datasets, splits, the reward plumbing), ``arithmetic`` and ``countdown`` (the
families), ``verifiers`` (answer extraction, format and correctness rewards, strict and lax),
``expressions`` (the bounded parser that reads Countdown answers without ``eval``), ``plain_addition``
(addition asked in plain words, for a pretrained chat model: no answer tags, the last number scored), and
``reviews`` (the preference domain: film reviews with a hidden gold labeller).
"""

from __future__ import annotations

from rlbook._checks import check_choice
from rlbook.tasks.arithmetic import ArithmeticTask, addition_steps
from rlbook.tasks.base import FORMAT_INSTRUCTION, Task, split_of
from rlbook.tasks.countdown import CountdownTask
from rlbook.tasks.plain_addition import PlainAdditionTask, reply_breakdown
from rlbook.tasks.reviews import ReviewTask, gold_preference, gold_reward, preference_pairs
from rlbook.tasks.verifiers import (
    arithmetic_reward,
    completion_text,
    countdown_reward,
    extract_answer,
    extract_answer_lax,
    format_reward,
    is_well_formed,
    last_integer,
    last_number_reward,
)

TASKS = {"arithmetic": ArithmeticTask, "countdown": CountdownTask, "plain_addition": PlainAdditionTask}


def get_task(name: str, **difficulty) -> Task:
    """The task family ``name`` ("arithmetic", "countdown" or "plain_addition") at the given difficulty settings."""
    check_choice("name", name, TASKS)
    return TASKS[name](**difficulty)


__all__ = [
    "ArithmeticTask",
    "CountdownTask",
    "PlainAdditionTask",
    "ReviewTask",
    "FORMAT_INSTRUCTION",
    "TASKS",
    "Task",
    "addition_steps",
    "arithmetic_reward",
    "completion_text",
    "countdown_reward",
    "extract_answer",
    "extract_answer_lax",
    "format_reward",
    "get_task",
    "gold_preference",
    "gold_reward",
    "is_well_formed",
    "last_integer",
    "last_number_reward",
    "reply_breakdown",
    "preference_pairs",
    "split_of",
]
