"""The self-checking exercises of lessons 08 (group advantages) and 09 (RLOO) accept the right answer
and name the usual mistakes."""

import pytest
import torch

from rlbook.advantages import batch_normalize, group_advantages
from rlbook.exercises.baselines import check_rloo_advantages
from rlbook.exercises.grpo import check_group_advantages


def _grouped(fn):
    """fn(groups (n, G)) -> (n, G) as a reader's (rewards, G) -> (B,) function."""
    return lambda rewards, group_size: fn(rewards.view(-1, group_size)).reshape(-1)


def _centred(groups):
    return groups - groups.mean(1, keepdim=True)


def _flat(rewards, group_size):
    groups = rewards.view(-1, group_size)
    return (groups == groups[:, :1]).all(1).repeat_interleave(group_size)


def _interleaved_grpo(rewards, group_size):
    """A reader's slip: view(G, -1) and normalise along dim 0 (groups read as interleaved rows)."""
    columns = rewards.view(group_size, -1)
    std = columns.std(0, correction=0, keepdim=True)
    centred = columns - columns.mean(0, keepdim=True)
    return torch.where(std > 0, centred / std.clamp_min(1e-12), torch.zeros_like(columns)).reshape(-1)


@pytest.mark.parametrize("answer", [
    lambda r, g: group_advantages(r, g),
    _grouped(lambda x: _centred(x) / (x.std(1, correction=0, keepdim=True) + 1e-8)),
    _grouped(lambda x: _centred(x) / (x.std(1, correction=0, keepdim=True) + 1e-4)),
])
def test_group_advantages_accepts_right_answers(answer, capsys):
    assert check_group_advantages(answer) is True
    assert "match" in capsys.readouterr().out


@pytest.mark.parametrize("answer, phrase", [
    (_grouped(lambda x: _centred(x) / (x.std(1, keepdim=True) + 1e-8)), "Bessel"),
    (_grouped(lambda x: _centred(x) / x.std(1, correction=0, keepdim=True)), "zero-variance"),
    (_grouped(lambda x: torch.where(x.std(1, keepdim=True) > 0, _centred(x) / (x.std(1, correction=0, keepdim=True)
                                                                                 + 1e-8), 1.0)), "exactly 0"),
    (lambda r, g: batch_normalize(r), "whole batch"),
    (lambda r, g: (r - r.mean()) / r.std(), "whole batch"),
    (_grouped(_centred), "did not divide"),
    # groups read as interleaved rows: on the first batch this coincides with the whole-batch answer
    (lambda r, g: _interleaved_grpo(r, g), "`view(G, -1)`"),
    # the right rows, the wrong axis: μ and σ over dim 0 of view(-1, G)
    (_grouped(lambda x: (x - x.mean(0, keepdim=True)) / (x.std(0, correction=0, keepdim=True) + 1e-8)), "wrong axis"),
    # group mean, whole-batch σ: on the first batch it coincides with Bessel's σ
    (lambda r, g: torch.where(_flat(r, g), 0.0, _grouped(_centred)(r, g) / r.std(correction=0)), "whole batch's σ"),
    (lambda r, g: group_advantages(r, g, "rloo"), "RLOO"),
    (lambda r, g: -group_advantages(r, g), "sign"),
    (lambda r, g: torch.zeros(3), "one advantage per reward"),
    (lambda r, g: 1 / 0, "ZeroDivisionError"),
])
def test_group_advantages_names_the_mistake(answer, phrase, capsys):
    assert check_group_advantages(answer) is False
    assert phrase in capsys.readouterr().out


@pytest.mark.parametrize("answer, phrase", [
    (lambda r, g: group_advantages(r, g, "rloo"), "match"),
    (lambda r, g: group_advantages(r, g, "dr_grpo"), "(G − 1)/G"),
    (_grouped(lambda x: x - (x.sum(1, keepdim=True) - x) / x.shape[1]), "divided the others' sum by G"),
    (lambda r, g: r - (r.sum() - r) / (len(r) - 1), "same prompt"),
    (lambda r, g: group_advantages(r, g), "GRPO"),
])
def test_rloo_checker(answer, phrase, capsys):
    assert check_rloo_advantages(answer) is (phrase == "match")
    assert phrase in capsys.readouterr().out
