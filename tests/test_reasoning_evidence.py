"""rlbook.reasoning.paired_ratio_difference, critic_fit and constant_critic_value_loss."""
import math

import numpy as np
import pytest
import torch

from rlbook.advantages import gae
from rlbook.evidence import ratio_se
from rlbook.losses.policy import value_loss
from rlbook.reasoning import constant_critic_value_loss, critic_fit, paired_ratio_difference


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


def _brute_force_constant_loss(lengths, rewards, lam, c):
    """The trainer's logged value_loss for V ≡ c: padded batch, reward on each response's last token,
    the library's gae (γ = 1) for the targets, value_loss's token mean."""
    T = max(lengths)
    mask = torch.zeros(len(lengths), T)
    token_rewards = torch.zeros(len(lengths), T)
    for i, (n, r) in enumerate(zip(lengths, rewards)):
        mask[i, :n] = 1
        token_rewards[i, n - 1] = r
    values = c * mask
    _, returns = gae(token_rewards, values, 1.0, lam, mask=mask)
    return float(value_loss(values, values, returns, mask))


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
def test_constant_critic_value_loss_matches_gae_brute_force(lam):
    lengths, rewards = [3, 7, 1, 5, 29, 7], [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    got = constant_critic_value_loss(lengths, rewards, lam)
    # the best constant: a grid of c through the library's gae never does better, and one point matches
    grid = [_brute_force_constant_loss(lengths, rewards, lam, c) for c in np.linspace(0, 1, 401)]
    assert got == pytest.approx(min(grid), rel=1e-3, abs=1e-9)
    assert min(grid) >= got - 1e-9
    if lam == 1.0:  # Monte Carlo returns: the token-weighted Bernoulli variance
        p = np.average(rewards, weights=lengths)
        assert got == pytest.approx(0.5 * p * (1 - p))


def test_critic_fit_with_lam_uses_the_constant_under_lambda_returns():
    row = {"value_loss": 0.01, "reward": 0.75, "length_correct": 20.0, "length_incorrect": 6.0}
    fit = critic_fit([row] * 3, lam=0.9)
    expected = constant_critic_value_loss([20] * 3 + [6], [1, 1, 1, 0], 0.9)  # 3 right answers to 1 wrong
    assert fit["constant"] == pytest.approx(expected)
    assert fit["constant"] < 0.5 * 0.75 * 0.25  # damped below the Monte Carlo constant's loss
    assert fit["ratio"] == pytest.approx(0.01 / expected)
    all_right = dict(row, reward=1.0, length_incorrect=math.nan)  # no wrong answer: no length for them
    assert critic_fit([all_right] * 3, lam=0.9)["constant"] == 0.0
    with pytest.raises(ValueError):
        constant_critic_value_loss([3, 0], [1, 0], 0.9)
