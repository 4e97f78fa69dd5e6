"""Gradient facts checked by exact enumeration over a small softmax policy (no sampling, no tolerance games).

For a policy over a finite set, an expectation over samples is a finite sum Σ_x π(x) f(x), so
"the expected gradient of an estimator" is ∇ Σ_x sg[π(x)] f_θ(x): the sampling weights are not
differentiated, exactly as when the estimator is averaged over samples drawn from π.
"""

import pytest
import torch

from rlbook.kl import k1, k2, k3, k3_straight_through, kl_in_loss
from rlbook.losses import policy_loss, reinforce_surrogate

PI_REF = torch.tensor([0.05, 0.1, 0.2, 0.25, 0.4], dtype=torch.float64)
REWARD = torch.tensor([1.0, -0.5, 2.0, 0.0, 0.3], dtype=torch.float64)


def _theta():
    return torch.tensor([0.3, -1.2, 0.8, 0.1, -0.4], dtype=torch.float64, requires_grad=True)


def _grad(value, theta):
    (grad,) = torch.autograd.grad(value, theta)
    return grad


def _expected_estimator_gradient(estimator):
    """E_{x~π}[∇_θ k(x)] = ∇ Σ_x sg[π(x)] k(log π(x), log π_ref(x))."""
    theta = _theta()
    logp = torch.log_softmax(theta, dim=0)
    return _grad((logp.exp().detach() * estimator(logp, PI_REF.log())).sum(), theta)


def _reverse_kl_gradient():
    theta = _theta()
    pi = torch.softmax(theta, dim=0)
    return _grad((pi * (pi.log() - PI_REF.log())).sum(), theta)


def _forward_kl_gradient():
    theta = _theta()
    logp = torch.log_softmax(theta, dim=0)
    return _grad((PI_REF * (PI_REF.log() - logp)).sum(), theta)


def test_k1_has_zero_expected_gradient():
    assert torch.allclose(_expected_estimator_gradient(k1), torch.zeros(5, dtype=torch.float64), atol=1e-14)


def test_k2_gradient_is_the_reverse_kl_gradient():
    assert torch.allclose(_expected_estimator_gradient(k2), _reverse_kl_gradient(), atol=1e-14)


def test_k3_gradient_is_the_forward_kl_gradient_not_the_reverse():
    k3_grad = _expected_estimator_gradient(k3)
    assert torch.allclose(k3_grad, _forward_kl_gradient(), atol=1e-14)
    assert not torch.allclose(k3_grad, _reverse_kl_gradient(), atol=1e-3)


def test_k3_straight_through_gradient_is_the_reverse_kl_gradient():
    assert torch.allclose(_expected_estimator_gradient(k3_straight_through), _reverse_kl_gradient(), atol=1e-14)


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_importance_weighted_in_loss_kl_gives_the_reverse_kl_gradient(estimator):
    # TRL's use_bias_correction_kl: the term r · k with r = π_θ / sg[π_θ] (= 1 in value on-policy).
    theta = _theta()
    logp = torch.log_softmax(theta, dim=0)
    ratio = torch.exp(logp - logp.detach())
    term = kl_in_loss(logp, PI_REF.log(), beta=1.0, estimator=estimator, ratio=ratio)
    assert torch.allclose(_grad((logp.exp().detach() * term).sum(), theta), _reverse_kl_gradient(), atol=1e-14)


def test_k1_in_the_reward_gives_the_reverse_kl_gradient():
    # In-reward placement: the penalty is a number in the return, pushed through the score function.
    theta = _theta()
    logp = torch.log_softmax(theta, dim=0)
    penalty = k1(logp, PI_REF.log()).detach()
    expected = _grad((logp.exp().detach() * penalty * logp).sum(), theta)
    assert torch.allclose(expected, _reverse_kl_gradient(), atol=1e-14)


@pytest.mark.parametrize("baseline", [0.0, 0.7, -3.0])
def test_reinforce_expectation_is_the_true_gradient_with_any_baseline(baseline):
    theta = _theta()
    logp = torch.log_softmax(theta, dim=0)
    estimator = -reinforce_surrogate(logp, REWARD - baseline)  # A · log π, A detached
    true_gradient = _grad((torch.softmax(theta, dim=0) * REWARD).sum(), theta)
    assert torch.allclose(_grad((logp.exp().detach() * estimator).sum(), theta), true_gradient, atol=1e-14)


def _all_sequences():
    """A two-step autoregressive policy over vocab {0, 1, 2}; token 0 ends the response.

    Returns the 7 responses ([0], [1, a], [2, a]) as (B, 2) token log-probs with a mask, the
    parameters, and each response's probability.
    """
    theta_first = torch.tensor([0.2, -0.4, 0.9], dtype=torch.float64, requires_grad=True)
    theta_second = torch.tensor([[0.0, 0.5, -0.5], [1.0, -1.0, 0.3]], dtype=torch.float64, requires_grad=True)
    first, second = torch.log_softmax(theta_first, 0), torch.log_softmax(theta_second, 1)
    rows, masks = [torch.stack([first[0], torch.zeros((), dtype=torch.float64)])], [[1.0, 0.0]]
    for a in (1, 2):
        for b in range(3):
            rows.append(torch.stack([first[a], second[a - 1, b]]))
            masks.append([1.0, 1.0])
    logp, mask = torch.stack(rows), torch.tensor(masks)
    return logp, mask, (theta_first, theta_second), (logp * mask).sum(1).exp()


SEQUENCE_REWARD = torch.tensor([0.5, 1.0, 0.0, 2.0, -1.0, 0.25, 1.5], dtype=torch.float64)


def test_sequence_reinforce_through_policy_loss_is_the_exact_gradient_of_expected_reward():
    logp, mask, params, prob = _all_sequences()
    true_gradient = torch.autograd.grad(-(prob * SEQUENCE_REWARD).sum(), params, retain_graph=True)
    # policy_loss averages over B responses; weighting each advantage by B · π(y) turns that mean into E_π.
    weights = len(prob) * prob.detach() * SEQUENCE_REWARD
    loss, _ = policy_loss(logp, logp.detach(), weights, mask, variant="reinforce")
    estimated = torch.autograd.grad(loss, params)
    for got, want in zip(estimated, true_gradient):
        assert torch.allclose(got, want, atol=1e-12)


def test_grpo_token_mean_per_response_follows_a_length_weighted_gradient():
    # seq_mean_token_mean divides each response's gradient by its own length |y| (Dr.GRPO's point):
    # its expectation is E_π[R ∇log π(y) / |y|], not ∇ E_π[R] when lengths differ.
    logp, mask, params, prob = _all_sequences()
    weights = len(prob) * prob.detach() * SEQUENCE_REWARD
    loss, _ = policy_loss(logp, logp.detach(), weights, mask, variant="grpo")
    estimated = torch.autograd.grad(loss, params, retain_graph=True)
    lengths = mask.sum(1)
    length_weighted = torch.autograd.grad(-(prob.detach() * SEQUENCE_REWARD * prob.log() / lengths).sum(), params, retain_graph=True)
    true_gradient = torch.autograd.grad(-(prob * SEQUENCE_REWARD).sum(), params)
    for got, want in zip(estimated, length_weighted):
        assert torch.allclose(got, want, atol=1e-12)
    assert not all(torch.allclose(got, want, atol=1e-3) for got, want in zip(estimated, true_gradient))
