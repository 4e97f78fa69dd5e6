"""rlbook.reasoning.paired_ratio_difference and critic_fit."""
import math

import numpy as np
import pytest

from rlbook.evidence import ratio_se
from rlbook.reasoning import critic_fit, paired_ratio_difference


def test_paired_ratio_difference_point_and_limits():
    rng = np.random.default_rng(0)
    y = rng.integers(1, 9, size=200).astype(float)
    x_b = rng.binomial(y.astype(int), 0.9).astype(float)
    x_a = rng.binomial(y.astype(int), 0.8).astype(float)
    diff, se = paired_ratio_difference(x_a, y, x_b, y)
    assert diff == pytest.approx(x_a.sum() / y.sum() - x_b.sum() / y.sum())
    # independent errors: the paired SE matches the two ratio SEs combined in quadrature
    _, se_a = ratio_se(x_a, y)
    _, se_b = ratio_se(x_b, y)
    assert se == pytest.approx(math.hypot(se_a, se_b), rel=0.25)
    # identical runs: no difference and no error
    assert paired_ratio_difference(x_a, y, x_a, y) == (0.0, 0.0)


def test_paired_ratio_difference_sees_pairing():
    rng = np.random.default_rng(1)
    y = np.full(300, 8.0)
    p = rng.uniform(0.2, 1.0, size=300)  # per-cluster difficulty shared by both runs
    x_b = rng.binomial(8, p).astype(float)
    x_a = np.clip(x_b - rng.binomial(1, 0.3, size=300), 0, None)
    _, se = paired_ratio_difference(x_a, y, x_b, y)
    _, se_a = ratio_se(x_a, y)
    _, se_b = ratio_se(x_b, y)
    assert se < 0.5 * math.hypot(se_a, se_b)


def test_paired_ratio_difference_rejects_bad_input():
    with pytest.raises(ValueError):
        paired_ratio_difference([1, 2], [1, 2], [1], [1])
    with pytest.raises(ValueError):
        paired_ratio_difference([1, 2], [0, 0], [1, 2], [1, 2])


def test_critic_fit():
    history = [{"value_loss": 0.2, "reward": 0.5}] * 3 + [{"value_loss": 0.05, "reward": 0.8}] * 3
    fit = critic_fit(history)
    assert fit["first"] == pytest.approx(0.2) and fit["last"] == pytest.approx(0.05)
    assert fit["constant"] == pytest.approx(0.5 * 0.8 * 0.2)
    assert fit["ratio"] == pytest.approx(0.05 / 0.08)
    with pytest.raises(ValueError):
        critic_fit([{"reward": 0.5}] * 3)
    with pytest.raises(ValueError):
        critic_fit(history[:2])
