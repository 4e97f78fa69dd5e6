"""Reward shaping and batch filters (rlbook.shaping)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.shaping import (
    add_advantage_noise,
    advantage_filter_mask,
    combine_rewards,
    dynamic_sampling_expected_samples,
    dynamic_sampling_mask,
    reward_only_groups,
    soft_overlong_penalty,
)


@pytest.mark.parametrize(
    "length, expected",
    [(0, 0.0), (10, 0.0), (16, 0.0), (17, -0.25), (18, -0.5), (20, -1.0), (21, -1.0), (500, -1.0)],
)
def test_soft_overlong_penalty_worked_example(length, expected):
    # L_max = 20, L_cache = 4: free up to 16 tokens, then a linear ramp to −1 at 20, then −1.
    value = soft_overlong_penalty(length, 20, 4)
    assert isinstance(value, float) and value == pytest.approx(expected)


def test_soft_overlong_penalty_on_a_tensor_and_without_a_cache():
    lengths = torch.tensor([5, 17, 19, 25])
    assert torch.allclose(soft_overlong_penalty(lengths, 20, 4), torch.tensor([0.0, -0.25, -0.75, -1.0]))
    assert torch.allclose(soft_overlong_penalty(torch.tensor([20, 21]), 20, 0), torch.tensor([0.0, -1.0]))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 100), st.integers(1, 60), st.integers(0, 60))
def test_soft_overlong_penalty_is_in_range_and_non_increasing(length, max_len, cache_len):
    cache_len = min(cache_len, max_len)
    here = soft_overlong_penalty(length, max_len, cache_len)
    assert -1.0 <= here <= 0.0
    assert soft_overlong_penalty(length + 1, max_len, cache_len) <= here


def test_combine_rewards_weighted_sum():
    total = combine_rewards({"correct": torch.tensor([1.0, 0.0]), "format": torch.tensor([1.0, 1.0])}, {"format": 0.1})
    assert torch.allclose(total, torch.tensor([1.1, 0.1]))


def test_dynamic_sampling_keeps_only_groups_with_varied_rewards():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    keep = dynamic_sampling_mask(rewards, 4)
    assert keep.tolist() == [True] * 4 + [False] * 8


def test_advantage_filter_mask_uses_a_tolerance():
    advantages = torch.tensor([0.0, 1e-9, -1e-3, 0.5])
    assert advantage_filter_mask(advantages).tolist() == [False, False, True, True]
    assert advantage_filter_mask(advantages, tol=0.0).tolist() == [False, True, True, True]


def test_advantage_noise_is_deterministic_with_a_generator():
    advantages = torch.tensor([0.5, -0.5, 0.0])
    first = add_advantage_noise(advantages, 0.1, generator=torch.Generator().manual_seed(7))
    again = add_advantage_noise(advantages, 0.1, generator=torch.Generator().manual_seed(7))
    other = add_advantage_noise(advantages, 0.1, generator=torch.Generator().manual_seed(8))
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert torch.equal(add_advantage_noise(advantages, 0.0), advantages)


def test_advantage_noise_has_the_requested_spread():
    noisy = add_advantage_noise(torch.zeros(20000), 0.3, generator=torch.Generator().manual_seed(0))
    assert noisy.std().item() == pytest.approx(0.3, rel=0.03)


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: soft_overlong_penalty(10, 20, 30), "cache_len"),
        (lambda: soft_overlong_penalty(10, 0, 0), "max_len"),
        (lambda: soft_overlong_penalty(10, 20.0, 4), "max_len"),
        (lambda: soft_overlong_penalty(-1, 20, 4), "length"),
        (lambda: soft_overlong_penalty(True, 20, 4), "length"),
        (lambda: soft_overlong_penalty(float("nan"), 20, 4), "length"),
        (lambda: combine_rewards({}), "components"),
        (lambda: combine_rewards({"a": torch.zeros(2), "b": torch.zeros(3)}), "components"),
        (lambda: combine_rewards({"a": torch.zeros(2)}, {"b": 1.0}), "weights"),
        (lambda: combine_rewards({"a": torch.tensor([float("nan")])}), "components"),
        (lambda: dynamic_sampling_mask(torch.zeros(5), 2), "group_size"),
        (lambda: dynamic_sampling_mask(torch.tensor([0.0, float("nan")]), 2), "rewards"),
        (lambda: advantage_filter_mask(torch.zeros(2), tol=-1.0), "tol"),
        (lambda: add_advantage_noise(torch.zeros(2), -0.1), "std"),
        (lambda: add_advantage_noise(torch.zeros(1, 2, 3), 0.1), "advantages"),
    ],
)
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_reward_only_groups_are_flat_in_correctness_but_not_in_reward():
    correct = torch.tensor([1.0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1])
    penalty = torch.tensor([0.0, -0.1, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0])
    only = reward_only_groups(correct + penalty, correct, 4)
    # all right with one penalised answer: kept on reward only; mixed: kept by both; all wrong with a
    # penalty: kept on reward only; all right, no penalty: flat for both
    assert only.tolist() == [True, False, True, False]
    with pytest.raises(ValueError, match="shape"):
        reward_only_groups(correct, correct[:8], 4)


def test_dynamic_sampling_expected_samples_edges_and_a_simulation():
    kwargs = dict(prompts_per_step=4, group_size=8, max_resample_rounds=4)
    assert dynamic_sampling_expected_samples(0.0, **kwargs) == pytest.approx(32)  # never flat: one round
    assert dynamic_sampling_expected_samples(1.0, **kwargs) == pytest.approx(5 * 32)  # always flat: every round
    assert dynamic_sampling_expected_samples(0.5, prompts_per_step=4, group_size=8,
                                             max_resample_rounds=0) == pytest.approx(32)
    # one prompt per step: rounds are a geometric variable truncated at 1 + extra rounds
    flat = 0.3
    expected_rounds = sum(flat ** r for r in range(3))  # P(round r+1 is drawn) = flat^r
    assert dynamic_sampling_expected_samples(flat, prompts_per_step=1, group_size=8,
                                             max_resample_rounds=2) == pytest.approx(8 * expected_rounds)
    generator = torch.Generator().manual_seed(0)
    flat, trials, total = 0.43, 20000, 0
    for _ in range(trials):
        kept, rounds = 0, 0
        while rounds < 5 and kept < 4:
            rounds += 1
            kept += int((torch.rand(4, generator=generator) >= flat).sum())
        total += 32 * rounds
    assert dynamic_sampling_expected_samples(flat, **kwargs) == pytest.approx(total / trials, rel=0.02)
