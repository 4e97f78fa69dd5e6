"""Tests of the checkers of lessons 14 (rlbook.exercises.throughput) and 15 (rlbook.exercises.async_rl):
a right answer passes, each typical mistake is named, an unattempted exercise is reported as such."""

from __future__ import annotations

import torch

from rlbook.exercises.async_rl import check_decoupled_loss
from rlbook.exercises.throughput import check_advantage_filter


def right_filter(rewards, group_size):
    groups = rewards.view(-1, group_size)
    return (groups.max(dim=1).values != groups.min(dim=1).values).repeat_interleave(group_size)


def test_advantage_filter_checker(capsys):
    assert check_advantage_filter(right_filter) is True
    cases = {
        "rewarded completions": lambda r, g: r > 0,
        "inverted": lambda r, g: ~right_filter(r, g),
        "nothing is dropped": lambda r, g: torch.ones_like(r, dtype=torch.bool),
        "one entry per group": lambda r, g: right_filter(r, g)[::g],
        "sum is 0 or G": lambda r, g: ((r.view(-1, g).sum(1) > 0) & (r.view(-1, g).sum(1) < g)).repeat_interleave(g),
    }
    for expected, wrong in cases.items():
        assert check_advantage_filter(wrong) is False
        assert expected in capsys.readouterr().out, expected


def decoupled(logp, prox, behaviour, advantages, eps):
    u = torch.exp(logp - prox)
    weight = torch.exp(prox - behaviour)
    return -weight * torch.minimum(u * advantages, u.clamp(1 - eps, 1 + eps) * advantages)


def test_decoupled_loss_checker(capsys):
    assert check_decoupled_loss(decoupled) is True
    assert "match" in capsys.readouterr().out

    def naive(logp, prox, behaviour, advantages, eps):
        r = torch.exp(logp - behaviour)
        return -torch.minimum(r * advantages, r.clamp(1 - eps, 1 + eps) * advantages)

    def detached_ratio(logp, prox, behaviour, advantages, eps):  # right values, wrong gradient
        u = torch.exp(logp - prox)
        weight = torch.exp(prox - behaviour)
        return -weight * torch.minimum(u.detach() * advantages, u.clamp(1 - eps, 1 + eps) * advantages)

    cases = {
        "naive objective": naive,
        "weight sg[π_prox/π_behav] is missing": lambda lp, p, b, a, e: decoupled(lp, p, p, a, e),
        "inverted": lambda lp, p, b, a, e: decoupled(lp, p, b, a, e) * torch.exp(2 * (b - p)),
        "sign is flipped": lambda *args: -decoupled(*args),
        "no gradient": lambda *args: decoupled(*args).detach(),
        "gradient is not": detached_ratio,
        "raised": lambda *args: 1 / 0,
    }
    for expected, wrong in cases.items():
        assert check_decoupled_loss(wrong) is False
        assert expected in capsys.readouterr().out, expected
