"""Checkers whose answer is one number per case: NaN is never right, and a right formula computed in
float32 passes (with a note) where the checker compares to double precision.

Before they were declared on FunctionExercise, lesson 03's clipped objective, 17's reward and 00's pass@k
passed an answer of NaN (``abs(nan − x) > tol`` is False), 11's overlong penalty crashed on it, and 00's,
17's and 18's pass@k / reward rejected a float32 answer as "expected 0.718266, got 0.718266".
"""
import math

import pytest
import torch

from rlbook.exercises import dapo, pass_at_k, ppo, r1_zero, tour
from rlbook.metrics import pass_at_k as library_pass_at_k
from rlbook.shaping import soft_overlong_penalty

NAN = lambda *args: float("nan")  # noqa: E731


@pytest.mark.parametrize("check", [ppo.check_clipped_objective, r1_zero.check_r1_zero_reward, tour.check_pass_at_k,
                                   pass_at_k.check_pass_at_k, dapo.check_soft_overlong_penalty])
def test_nan_is_rejected(check, capsys):
    assert check(NAN) is False
    assert "nan" in capsys.readouterr().out


@pytest.mark.parametrize("check, right", [
    (tour.check_pass_at_k, library_pass_at_k),
    (pass_at_k.check_pass_at_k, library_pass_at_k),
    (r1_zero.check_r1_zero_reward, r1_zero.reference_reward),
])
def test_a_float32_answer_passes_with_its_note(check, right, capsys):
    in_float32 = lambda *args: torch.tensor(right(*args), dtype=torch.float32)  # noqa: E731
    assert check(in_float32) is True
    assert "to float32 precision only" in capsys.readouterr().out
    assert check(right) is True
    assert "float32" not in capsys.readouterr().out


def test_the_float32_allowance_does_not_pass_a_mistake(capsys):
    plug_in = lambda n, c, k: 1 - (1 - c / n) ** k  # noqa: E731
    assert tour.check_pass_at_k(plug_in) is False and "plug-in" in capsys.readouterr().out
    # in float32 it is still wrong (named only at full precision: the mistakes are compared to 1e-9)
    assert tour.check_pass_at_k(lambda *args: torch.tensor(plug_in(*args), dtype=torch.float32)) is False
    assert "should be 0.900000" in capsys.readouterr().out
    assert dapo.check_soft_overlong_penalty(lambda n, m, c: -soft_overlong_penalty(n, m, c)) is False
    assert "sign is flipped" in capsys.readouterr().out
    assert not math.isnan(r1_zero.reference_reward(*r1_zero.CASES[0], 0.5))
