"""KL estimators k1/k2/k3 and the two placements of a KL penalty (rlbook.kl)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.kl import k1, k2, k3, k3_straight_through, kl_estimate, kl_in_loss, kl_in_reward

finite_logps = st.floats(min_value=-8.0, max_value=0.0, allow_nan=False)


def test_worked_example_r_one_half():
    # π_θ(y) = 0.5, π_ref(y) = 0.25 → r = 0.5, log r = −ln 2.
    logp, ref_logp = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert k1(logp, ref_logp).item() == pytest.approx(math.log(2))
    assert k2(logp, ref_logp).item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert k3(logp, ref_logp).item() == pytest.approx(-0.5 + math.log(2))


def test_all_estimators_vanish_when_policies_agree():
    logp = torch.log(torch.tensor([[0.1, 0.7], [0.3, 0.9]]))
    for estimator in ("k1", "k2", "k3", "k3+"):
        assert torch.equal(kl_estimate(logp, logp, estimator), torch.zeros(2, 2))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(finite_logps, finite_logps), min_size=1, max_size=8))
def test_k2_and_k3_are_never_negative(pairs):
    logp = torch.tensor([a for a, _ in pairs], dtype=torch.float64)
    ref_logp = torch.tensor([b for _, b in pairs], dtype=torch.float64)
    assert (k2(logp, ref_logp) >= 0).all()
    assert (k3(logp, ref_logp) >= -1e-12).all()


def test_k1_and_k3_are_unbiased_and_k2_is_not_by_exact_enumeration():
    pi = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    ref = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    true_kl = (pi * (pi / ref).log()).sum()
    logp, ref_logp = pi.log(), ref.log()
    assert (pi * k1(logp, ref_logp)).sum().item() == pytest.approx(true_kl.item(), rel=1e-12)
    assert (pi * k3(logp, ref_logp)).sum().item() == pytest.approx(true_kl.item(), rel=1e-12)
    assert (pi * k2(logp, ref_logp)).sum().item() != pytest.approx(true_kl.item(), rel=1e-3)


def test_straight_through_has_k3_value_and_k2_gradient():
    logp = torch.tensor([-0.2, -1.5, -3.0], requires_grad=True)
    ref_logp = torch.tensor([-1.0, -0.5, -2.0])
    value = k3_straight_through(logp, ref_logp)
    assert torch.allclose(value, k3(logp, ref_logp))
    (grad_st,) = torch.autograd.grad(value.sum(), logp)
    (grad_k2,) = torch.autograd.grad(k2(logp, ref_logp).sum(), logp)
    assert torch.allclose(grad_st, grad_k2)


def test_kl_in_loss_scales_by_beta_and_optionally_by_the_ratio():
    logp, ref_logp = torch.tensor([[-0.5, -1.0]]), torch.tensor([[-1.0, -0.2]])
    assert torch.allclose(kl_in_loss(logp, ref_logp, beta=0.1), 0.1 * k3(logp, ref_logp))
    ratio = torch.tensor([[2.0, 0.5]])
    assert torch.allclose(kl_in_loss(logp, ref_logp, beta=0.1, estimator="k1", ratio=ratio), 0.1 * ratio * k1(logp, ref_logp))


def test_kl_in_reward_puts_sequence_reward_on_last_token_and_penalty_everywhere():
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    rewards = kl_in_reward(torch.tensor([1.0, 2.0]), kl, 0.5, mask)
    expected = torch.tensor([[-0.05, -0.10, 1.0 - 0.15], [-0.20, 2.0 - 0.25, 0.0]])
    assert torch.allclose(rewards, expected)


def test_kl_in_reward_accepts_per_token_rewards_and_detaches_the_kl():
    kl = torch.tensor([[0.2, 0.4]], requires_grad=True)
    token_rewards = torch.tensor([[1.0, 3.0]])
    rewards = kl_in_reward(token_rewards, kl, 1.0, torch.ones(1, 2))
    assert torch.allclose(rewards, torch.tensor([[0.8, 2.6]]))
    assert not rewards.requires_grad


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: k1(torch.zeros(2, 3), torch.zeros(3, 2)), "ref_logp"),
        (lambda: k3(torch.tensor([float("nan")]), torch.zeros(1)), "logp"),
        (lambda: k2(torch.zeros(2), torch.tensor([0.0, float("inf")])), "ref_logp"),
        (lambda: k1(torch.tensor([True]), torch.zeros(1)), "logp"),
        (lambda: kl_estimate(torch.zeros(1), torch.zeros(1), "k4"), "estimator"),
        (lambda: kl_in_loss(torch.zeros(1), torch.zeros(1), beta=-0.1), "beta"),
        (lambda: kl_in_reward(torch.zeros(3), torch.zeros(2, 2), 0.1, torch.ones(2, 2)), "rewards"),
        (lambda: kl_in_reward(torch.zeros(2), torch.zeros(2, 2), 0.1, torch.zeros(2, 2)), "mask"),
        (lambda: kl_in_reward(torch.zeros(2), torch.zeros(2, 2), 0.1, torch.ones(2, 3)), "mask"),
    ],
)
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_bernoulli_kl_is_the_kl_of_two_coins_with_zero_log_zero():
    from rlbook.kl import bernoulli_kl

    q, p = 0.9, 0.3
    assert float(bernoulli_kl(q, p)) == pytest.approx(q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p)))
    assert torch.equal(bernoulli_kl(torch.tensor([0.0, 1.0, 0.4]), torch.tensor([0.0, 1.0, 0.4])),
                       torch.zeros(3, dtype=torch.float64))
    assert float(bernoulli_kl(1.0, 0.25)) == pytest.approx(math.log(4))  # conditioning on success: log(1/p)
    assert math.isinf(float(bernoulli_kl(0.5, 0.0)))
    with pytest.raises(ValueError, match="probabilities"):
        bernoulli_kl(1.5, 0.5)
