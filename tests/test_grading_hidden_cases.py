"""The course's hidden cases (assignments/hidden_cases.py): drawn from the seed, right for the solutions, strict.

Read from the masters directly (no build, no grading): every function question has cases (the verifier of
A5 has its own explicit hidden tests), the master's solution passes them on any seed, a slightly wrong
answer fails them, and two seeds draw different cases.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"assignments_{name}", ROOT / "assignments" / f"{name}.py")
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


build, hidden_cases = _module("build"), _module("hidden_cases")
OWN_TESTS = {"show_your_working_reward"}  # A5's verifier: its hidden test lists its own hostile inputs


def _references() -> dict:
    """{answer name: the master's solution function}, every function question of every assignment."""
    functions = {}
    for name in build.master_names():
        spec = build.grading_spec(build.MASTERS / f"{name}.ipynb")
        for question in spec["questions"]:
            if question["reference"]:
                namespace = {}
                exec("import re, torch\nimport torch.nn.functional as F\n" + question["reference"], namespace)
                functions.update({n: namespace[n] for t in question["tests"] for n in t["arguments"]})
    return functions


REFERENCES = _references()


def test_every_function_question_has_course_cases_and_no_case_is_stale():
    assert set(REFERENCES) - OWN_TESTS == set(hidden_cases.CASES)


def _off(result):
    """A slightly wrong answer: a mask with one entry flipped, a number or tensor 1 % off."""
    if isinstance(result, tuple):
        result = result[0]
    if isinstance(result, torch.Tensor) and result.dtype == torch.bool:
        flipped = result.clone().reshape(-1)
        flipped[0] = ~flipped[0]
        return flipped.reshape(result.shape)
    return result * 1.01 + 1e-3


@pytest.mark.parametrize("name", sorted(hidden_cases.CASES))
def test_the_solution_passes_and_a_slightly_wrong_answer_fails(name):
    reference = REFERENCES[name]
    assert hidden_cases.check(name, reference, reference, seed=2026) is None
    message = hidden_cases.check(name, lambda *args: _off(reference(*args)), reference, seed=2026)
    assert message is not None and message.startswith("on a hidden case"), message


def test_two_seeds_draw_different_cases():
    for name, draw in hidden_cases.CASES.items():
        first = draw(torch.Generator().manual_seed(1))
        second = draw(torch.Generator().manual_seed(2))
        assert repr(first) != repr(second), name


def test_group_advantages_with_an_epsilon_on_sigma_pass_as_the_public_checker_lets_them():
    """σ + 1e-4 (TRL's ε) passes lesson 08's checker; the course's cases must not take the question back."""
    def with_epsilon(rewards, group_size):
        groups = rewards.view(-1, group_size)
        centred = groups - groups.mean(dim=1, keepdim=True)
        return (centred / (groups.std(dim=1, correction=0, keepdim=True) + 1e-4)).reshape(-1)

    assert hidden_cases.check("group_advantages", with_epsilon, REFERENCES["group_advantages"], seed=2026) is None
