"""Group advantages, GAE, REINFORCE++ batch normalisation (rlbook.advantages)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.advantages import batch_normalize, broadcast_to_tokens, gae, group_advantages

rewards_strategy = st.lists(st.floats(min_value=-5, max_value=5, allow_nan=False), min_size=2, max_size=6)


def test_grpo_worked_example_population_std():
    advantages = group_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0]), 4)
    sigma = math.sqrt(0.1875)  # population std of [1, 1, 1, 0] around μ = 0.75
    assert sigma == pytest.approx(0.4330, abs=1e-4)
    expected = torch.tensor([0.25, 0.25, 0.25, -0.75]) / sigma
    assert torch.allclose(advantages, expected, atol=1e-5)
    assert advantages[0].item() == pytest.approx(0.577, abs=1e-3)
    assert advantages[3].item() == pytest.approx(-1.732, abs=1e-3)


def test_grpo_worked_example_bessel_std():
    # Bessel: σ² = 0.1875 · 4/3 = 0.25, σ = 0.5.
    advantages = group_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0]), 4, unbiased_std=True)
    assert torch.allclose(advantages, torch.tensor([0.5, 0.5, 0.5, -1.5]), atol=1e-5)


def test_dr_grpo_and_rloo_worked_examples():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert torch.allclose(group_advantages(rewards, 4, "dr_grpo"), torch.tensor([0.25, 0.25, 0.25, -0.75]))
    # RLOO: 1 − mean(1, 1, 0) = 1/3 and 0 − 1 = −1.
    assert torch.allclose(group_advantages(rewards, 4, "rloo"), torch.tensor([1 / 3, 1 / 3, 1 / 3, -1.0]))


def test_groups_are_independent_and_contiguous():
    rewards = torch.tensor([1.0, 0.0, 5.0, 5.0, 2.0, 4.0])
    advantages = group_advantages(rewards, 2, "dr_grpo")
    assert torch.allclose(advantages, torch.tensor([0.5, -0.5, 0.0, 0.0, -1.0, 1.0]))


@pytest.mark.parametrize("method", ["grpo", "dr_grpo", "rloo"])
@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, -3.7])
def test_zero_variance_group_gives_exact_zeros(method, value):
    rewards = torch.tensor([value] * 4 + [0.0, 1.0, 0.0, 1.0])
    advantages = group_advantages(rewards, 4, method, unbiased_std=True)
    assert torch.equal(advantages[:4], torch.zeros(4))
    assert torch.isfinite(advantages).all() and advantages[4:].abs().sum() > 0


@settings(max_examples=40, deadline=None)
@given(rewards_strategy)
def test_rloo_is_g_over_g_minus_one_times_mean_baseline(rewards):
    rewards = torch.tensor(rewards, dtype=torch.float64)
    group = len(rewards)
    rloo = group_advantages(rewards, group, "rloo")
    mean_baseline = group_advantages(rewards, group, "dr_grpo")
    assert torch.allclose(rloo, group / (group - 1) * mean_baseline, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(rewards_strategy, st.floats(min_value=-10, max_value=10), st.floats(min_value=0.1, max_value=10))
def test_invariant_to_reward_shift_and_zscore_invariant_to_scale(rewards, shift, scale):
    rewards = torch.tensor(rewards, dtype=torch.float64)
    group = len(rewards)
    for method in ("grpo", "dr_grpo", "rloo"):
        assert torch.allclose(group_advantages(rewards + shift, group, method), group_advantages(rewards, group, method), atol=1e-6)
    scaled = group_advantages(rewards * scale, group, "grpo", eps=0.0)
    if float(rewards.max() - rewards.min()) > 1e-300:  # subnormal spreads lose their digits when scaled
        assert torch.allclose(scaled, group_advantages(rewards, group, "grpo", eps=0.0), atol=1e-6)


def test_a_spread_that_underflows_gives_zero_advantages_not_nan():
    rewards = torch.tensor([0.0, 5e-324], dtype=torch.float64)  # std underflows to 0
    assert torch.equal(group_advantages(rewards, 2, "grpo", eps=0.0), torch.zeros(2, dtype=torch.float64))


@settings(max_examples=30, deadline=None)
@given(rewards_strategy, st.randoms(use_true_random=False))
def test_permuting_a_group_permutes_its_advantages(rewards, rng):
    rewards = torch.tensor(rewards, dtype=torch.float64)
    order = list(range(len(rewards)))
    rng.shuffle(order)
    order = torch.tensor(order)
    for method in ("grpo", "dr_grpo", "rloo"):
        permuted = group_advantages(rewards[order], len(rewards), method)
        assert torch.allclose(permuted, group_advantages(rewards, len(rewards), method)[order], atol=1e-9)


def test_gae_lambda_zero_is_the_td_error():
    rewards, values = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.5, 1.0, 1.5])
    advantages, returns = gae(rewards, values, gamma=0.9, lam=0.0, last_value=2.0)
    next_values = torch.tensor([1.0, 1.5, 2.0])
    assert torch.allclose(advantages, rewards + 0.9 * next_values - values)
    assert torch.allclose(returns, advantages + values)


def test_gae_lambda_one_is_monte_carlo_return_minus_value():
    rewards, values = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.5, 1.0, 1.5])
    advantages, returns = gae(rewards, values, gamma=0.9, lam=1.0)
    mc_return = torch.tensor([1 + 0.9 * 0 + 0.81 * 2, 0 + 0.9 * 2, 2.0])
    assert torch.allclose(returns, mc_return)
    assert torch.allclose(advantages, mc_return - values)


def test_gae_hand_computed_intermediate_lambda():
    # γ = 1, λ = 0.5, V = 0: δ = r, A_2 = 2, A_1 = 0 + 0.5·2 = 1, A_0 = 1 + 0.5·1 = 1.5.
    advantages, _ = gae(torch.tensor([1.0, 0.0, 2.0]), torch.zeros(3), gamma=1.0, lam=0.5)
    assert torch.allclose(advantages, torch.tensor([1.5, 1.0, 2.0]))


def test_gae_batch_equals_rows_and_accepts_per_row_last_value():
    torch.manual_seed(0)
    rewards, values, last = torch.randn(3, 5), torch.randn(3, 5), torch.randn(3)
    advantages, returns = gae(rewards, values, 0.95, 0.9, last_value=last)
    for row in range(3):
        row_adv, row_ret = gae(rewards[row], values[row], 0.95, 0.9, last_value=last[row].item())
        assert torch.allclose(advantages[row], row_adv) and torch.allclose(returns[row], row_ret)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(0, 2**16))
def test_gae_appending_padding_changes_nothing(length, extra, seed):
    generator = torch.Generator().manual_seed(seed)
    rewards, values = torch.randn(1, length, generator=generator), torch.randn(1, length, generator=generator)
    advantages, returns = gae(rewards, values, 0.99, 0.95, mask=torch.ones(1, length))
    garbage = torch.randn(1, extra, generator=generator)
    mask = torch.cat([torch.ones(1, length), torch.zeros(1, extra)], dim=1)
    padded_adv, padded_ret = gae(torch.cat([rewards, garbage], 1), torch.cat([values, garbage], 1), 0.99, 0.95, mask=mask)
    assert torch.allclose(padded_adv[:, :length], advantages, atol=1e-6)
    assert torch.allclose(padded_ret[:, :length], returns, atol=1e-6)
    assert torch.equal(padded_adv[:, length:], torch.zeros(1, extra))


def test_batch_normalize_whitens_over_unmasked_tokens():
    advantages = torch.tensor([[1.0, 3.0, 100.0], [5.0, 7.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    normalized = batch_normalize(advantages, mask, eps=0.0)
    selected = normalized[mask.bool()]
    assert selected.mean().abs().item() < 1e-6
    assert selected.std(correction=0).item() == pytest.approx(1.0, abs=1e-6)
    assert normalized[0, 2].item() == 0.0
    assert torch.equal(batch_normalize(torch.full((4,), 2.5)), torch.zeros(4))


def test_broadcast_to_tokens_masks_padding():
    out = broadcast_to_tokens(torch.tensor([2.0, -1.0]), torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert torch.equal(out, torch.tensor([[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]))


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: group_advantages(torch.zeros(6), 4), "group_size"),
        (lambda: group_advantages(torch.zeros(4), 1), "group_size"),
        (lambda: group_advantages(torch.zeros(4), 2.0), "group_size"),
        (lambda: group_advantages(torch.tensor([1.0, float("nan")]), 2), "rewards"),
        (lambda: group_advantages(torch.tensor([1.0, float("inf")]), 2), "rewards"),
        (lambda: group_advantages(torch.zeros(2, 2), 2), "rewards"),
        (lambda: group_advantages(torch.tensor([True, False]), 2), "rewards"),
        (lambda: group_advantages(torch.zeros(4), 2, "ppo"), "method"),
        (lambda: gae(torch.zeros(3), torch.zeros(4), 0.9, 0.9), "values"),
        (lambda: gae(torch.zeros(3), torch.zeros(3), 1.5, 0.9), "gamma"),
        (lambda: gae(torch.zeros(3), torch.zeros(3), 0.9, -0.1), "lam"),
        (lambda: gae(torch.zeros(2, 3), torch.zeros(2, 3), 0.9, 0.9, last_value=torch.zeros(3)), "last_value"),
        (lambda: gae(torch.zeros(2, 3), torch.zeros(2, 3), 0.9, 0.9, mask=torch.zeros(2, 3)), "mask"),
        (lambda: batch_normalize(torch.zeros(2, 2), torch.zeros(2, 2)), "mask"),
        (lambda: broadcast_to_tokens(torch.zeros(3), torch.ones(2, 4)), "mask"),
    ],
)
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_dither_rewards_unflattens_groups_and_grpo_rescales_them():
    from rlbook.advantages import dither_rewards

    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0])  # a flat group, a varied one
    assert torch.equal(dither_rewards(rewards, 0.0), rewards)
    dithered = dither_rewards(rewards, 0.01, generator=torch.Generator().manual_seed(0))
    assert torch.equal(dithered, dither_rewards(rewards, 0.01, generator=torch.Generator().manual_seed(0)))
    dr = group_advantages(dithered, 4, "dr_grpo")
    assert 0 < dr[:4].abs().max() < 0.05 and dr[:4].sum().abs() < 1e-6  # small, centred in the group
    grpo = group_advantages(dithered, 4, "grpo")
    assert grpo[:4].pow(2).mean() == pytest.approx(1.0, abs=1e-3)  # σ-normalised: size 1 whatever σ is
    assert torch.allclose(grpo[4:], group_advantages(rewards, 4, "grpo")[4:], atol=0.05)
    with pytest.raises(ValueError, match="std"):
        dither_rewards(rewards, -1.0)
    with pytest.raises(ValueError, match="rewards"):
        dither_rewards(torch.ones(2, 2), 0.1)
