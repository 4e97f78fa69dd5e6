"""Importance ratios and gates: token, GSPO, GMPO, SAPO, CISPO, AReaL (rlbook.ratios)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.ratios import (
    cispo_weight,
    decoupled_behaviour_weight,
    gmpo_sequence_ratio,
    gmpo_token_weights,
    gspo_sequence_ratio,
    gspo_token_ratio,
    sapo_gate,
    token_ratio,
)


def test_token_ratio_is_exp_of_log_difference_and_old_logp_carries_no_gradient():
    logp = torch.tensor([[math.log(0.6), math.log(0.2)]], requires_grad=True)
    old_logp = torch.tensor([[math.log(0.3), math.log(0.4)]], requires_grad=True)
    ratio = token_ratio(logp, old_logp)
    assert torch.allclose(ratio, torch.tensor([[2.0, 0.5]]))
    ratio.sum().backward()
    assert old_logp.grad is None and torch.allclose(logp.grad, ratio.detach())


def test_gspo_sequence_ratio_is_the_geometric_mean_over_unmasked_tokens():
    logp = torch.log(torch.tensor([[0.8, 0.1, 0.5]]))
    old_logp = torch.log(torch.tensor([[0.2, 0.4, 0.9]]))
    mask = torch.tensor([[1, 1, 0]])
    # token ratios 4 and 0.25 → geometric mean 1; the padded token is ignored.
    assert gspo_sequence_ratio(logp, old_logp, mask).item() == pytest.approx(1.0)


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=-1.0, max_value=1.0), st.integers(1, 6), st.integers(0, 3))
def test_gspo_ratio_equals_token_ratio_when_all_token_ratios_are_equal(log_r, length, padding):
    old_logp = -torch.rand(1, length + padding, dtype=torch.float64)
    logp = old_logp + log_r
    mask = torch.cat([torch.ones(1, length), torch.zeros(1, padding)], dim=1)
    assert gspo_sequence_ratio(logp, old_logp, mask).item() == pytest.approx(math.exp(log_r), rel=1e-9)


def test_gspo_token_ratio_has_sequence_value_and_per_token_gradient():
    logp = torch.tensor([[-0.5, -1.0, -2.0]], requires_grad=True)
    old_logp = torch.tensor([[-0.7, -0.9, -2.5]])
    mask = torch.ones(1, 3)
    ratio = gspo_token_ratio(logp, old_logp, mask)
    sequence = gspo_sequence_ratio(logp, old_logp, mask)
    assert torch.allclose(ratio, sequence.detach().expand(1, 3))
    ratio.sum().backward()  # d s_{i,t} / d logp_t = s_i
    assert torch.allclose(logp.grad, sequence.detach().expand(1, 3))


def test_gmpo_ratio_without_clipping_equals_gspo_ratio():
    logp = torch.tensor([[-0.5, -1.0, -2.0]])
    old_logp = logp + torch.tensor([[0.1, -0.2, 0.05]])
    mask = torch.ones(1, 3)
    for advantage in (1.0, -1.0):
        gmpo = gmpo_sequence_ratio(logp, old_logp, torch.tensor([advantage]), mask)
        assert torch.allclose(gmpo, gspo_sequence_ratio(logp, old_logp, mask))


def test_gmpo_clips_each_token_in_log_space_before_the_mean():
    old_logp = torch.zeros(2, 2)
    logp = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])  # token log-ratios +1 and −1
    mask = torch.ones(2, 2)
    advantages = torch.tensor([1.0, -1.0])
    ratio = gmpo_sequence_ratio(logp, old_logp, advantages, mask, eps_low=0.4, eps_high=0.4)
    # A > 0: log-ratio +1 clipped to 0.4; A < 0: −1 clipped to −0.4 → exp(±0.2).
    assert torch.allclose(ratio, torch.tensor([math.exp(0.2), math.exp(-0.2)]))
    # The pessimistic side is not clipped: A > 0 with log-ratio −1 keeps −1.
    unclipped = gmpo_sequence_ratio(-logp, old_logp, advantages, mask)
    assert torch.allclose(unclipped, torch.tensor([math.exp(-0.5), math.exp(0.5)]))


@pytest.mark.parametrize("tau", [0.5, 1.0, 1.05, 4.0])
def test_sapo_gate_has_gradient_one_on_policy(tau):
    ratio = torch.ones(3, requires_grad=True)
    gate = sapo_gate(ratio, torch.ones(3), tau_pos=tau, tau_neg=tau)
    assert torch.allclose(gate, torch.full((3,), 2 / tau))
    gate.sum().backward()
    assert torch.allclose(ratio.grad, torch.ones(3))


def test_sapo_gate_picks_temperature_by_advantage_sign_and_decays_smoothly():
    ratio = torch.tensor([1.5, 1.5, 1.5])
    gate = sapo_gate(ratio, torch.tensor([1.0, -1.0, 0.0]), tau_pos=1.0, tau_neg=2.0)
    assert gate[0].item() == pytest.approx(torch.sigmoid(torch.tensor(0.5)).item() * 4)
    assert gate[1].item() == pytest.approx(gate[2].item())
    assert gate[1].item() == pytest.approx(torch.sigmoid(torch.tensor(1.0)).item() * 2)
    far = torch.tensor([1.0, 2.0, 4.0, 8.0], requires_grad=True)
    sapo_gate(far, torch.ones(4)).sum().backward()
    assert (far.grad[1:] < far.grad[:-1]).all() and (far.grad > 0).all()


def test_cispo_weight_is_clipped_detached_and_has_no_lower_bound_by_default():
    ratio = torch.tensor([0.01, 1.0, 3.0, 9.0], requires_grad=True)
    weight = cispo_weight(ratio)
    assert torch.allclose(weight, torch.tensor([0.01, 1.0, 3.0, 5.0]))
    assert not weight.requires_grad
    both = cispo_weight(ratio, eps_low=0.2, eps_high=0.28)
    assert torch.allclose(both, torch.tensor([0.8, 1.0, 1.28, 1.28]))


def test_decoupled_behaviour_weight_and_cap():
    prox = torch.log(torch.tensor([0.5, 0.9, 0.2]))
    behaviour = torch.log(torch.tensor([0.25, 0.9, 0.02]))
    assert torch.allclose(decoupled_behaviour_weight(prox, behaviour), torch.tensor([2.0, 1.0, 10.0]))
    assert torch.allclose(decoupled_behaviour_weight(prox, behaviour, cap=5.0), torch.tensor([2.0, 1.0, 0.0]))


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: token_ratio(torch.zeros(2, 3), torch.zeros(2, 2)), "old_logp"),
        (lambda: token_ratio(torch.tensor([float("nan")]), torch.zeros(1)), "logp"),
        (lambda: gspo_sequence_ratio(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3)), "mask"),
        (lambda: gspo_sequence_ratio(torch.zeros(3), torch.zeros(3), torch.ones(3)), "logp"),
        (lambda: gmpo_sequence_ratio(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3)), "advantages"),
        (lambda: gmpo_sequence_ratio(torch.zeros(1, 3), torch.zeros(1, 3), torch.zeros(1), torch.ones(1, 3), eps_low=-1), "eps_low"),
        (lambda: sapo_gate(torch.ones(2, 3), torch.ones(4)), "advantages"),
        (lambda: sapo_gate(torch.ones(2), torch.ones(2), tau_neg=0.0), "tau_neg"),
        (lambda: cispo_weight(torch.ones(2), eps_high=-0.1), "eps_high"),
        (lambda: decoupled_behaviour_weight(torch.zeros(2), torch.zeros(3)), "behaviour_logp"),
        (lambda: decoupled_behaviour_weight(torch.zeros(2), torch.zeros(2), cap=0), "cap"),
    ],
)
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def _gmpo_batch():
    generator = torch.Generator().manual_seed(3)
    old_logp = -torch.rand(4, 6, dtype=torch.float64, generator=generator) * 2
    logp = old_logp + 0.5 * torch.randn(4, 6, dtype=torch.float64, generator=generator)
    mask = (torch.arange(6).unsqueeze(0) < torch.tensor([[6], [3], [5], [1]])).to(torch.float64)
    return logp, old_logp, torch.tensor([1.0, -0.5, 2.0, -1.5], dtype=torch.float64), mask


def test_gmpo_token_weights_match_autograd_of_the_gmpo_loss():
    from rlbook.token_gradients import token_loss_gradients

    logp, old_logp, advantages, mask = _gmpo_batch()
    for eps_low, eps_high in ((0.4, 0.4), (0.2, 0.3)):
        weights = gmpo_token_weights(logp, old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high)
        gradient = token_loss_gradients(logp, old_logp, advantages, mask, variant="gmpo",
                                        eps_low=eps_low, eps_high=eps_high)
        # loss = (1/B) Σ_i −A_i ρ_i  ⇒  ∂loss/∂log π_t = −A_i w_{i,t} / (B |y_i|)
        expected = -advantages.unsqueeze(1) * weights / (mask.shape[0] * mask.sum(1, keepdim=True))
        assert torch.allclose(gradient, expected, atol=1e-12)
        assert (weights[mask == 0] == 0).all()


def test_gmpo_token_weights_are_the_sequence_ratio_not_the_token_ratio():
    logp, old_logp, advantages, mask = _gmpo_batch()
    weights = gmpo_token_weights(logp, old_logp, advantages, mask)
    rho = gmpo_sequence_ratio(logp, old_logp, advantages, mask)
    log_ratio = logp - old_logp
    clipped = torch.where(advantages.unsqueeze(1) > 0, log_ratio > 0.4, log_ratio < -0.4) & (mask > 0)
    kept = (mask > 0) & ~clipped
    assert clipped.any() and kept.any()
    assert torch.allclose(weights[kept], rho.unsqueeze(1).expand_as(logp)[kept])
    assert (weights[clipped] == 0).all()
    assert not torch.allclose(weights[kept], log_ratio.exp()[kept])


def test_gmpo_token_weights_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="advantages"):
        gmpo_token_weights(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="eps_high"):
        gmpo_token_weights(torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1), torch.ones(1, 3), eps_high=-0.1)


def test_coefficient_disagreement_counts_both_sides_of_the_band():
    from rlbook.ratios import coefficient_disagreement
    # A > 0: r = 1 (all agree), 1.5 (GRPO 0, CISPO 1.2), 0.667 (inside GRPO's live side: all ≈ r)
    # A < 0: r = 1, 2 (GRPO 2, CISPO 1.2), 0.2 (GRPO 0, CISPO 0.2); a padded and an A = 0 row count nowhere
    ratio = torch.tensor([[1.0, 1.5, 2 / 3], [1.0, 2.0, 0.2], [3.0, 3.0, 3.0]])
    advantages = torch.tensor([1.0, -1.0, 0.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 1]])
    counts = coefficient_disagreement(ratio, advantages, mask, eps=0.2, cap=1.2)
    assert counts["coef_tokens"] == 6
    assert counts["coef_cispo_differs"] == 3
    assert counts["coef_mass"] == 6
    assert counts["coef_cispo_mass_moved"] == pytest.approx(1.2 + 0.8 + 0.2)
    # SAPO at τ ≈ 1 tracks w = r at r = 2/3 (|Δw| < 0.05) but not where GRPO's w is 0 or far from 1
    sapo_w = lambda r, tau: r / math.cosh(tau * (r - 1) / 2) ** 2
    assert abs(sapo_w(2 / 3, 1.0) - 2 / 3) < 0.05
    assert counts["coef_sapo_differs"] == 3
    masked = coefficient_disagreement(ratio, advantages, torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 0]]))
    assert masked["coef_tokens"] == 3 and masked["coef_cispo_differs"] == 1


def test_coefficient_disagreement_is_zero_on_policy():
    from rlbook.ratios import coefficient_disagreement
    counts = coefficient_disagreement(torch.ones(4, 5), torch.randn(4), torch.ones(4, 5))
    assert counts["coef_cispo_differs"] == counts["coef_sapo_differs"] == 0
    assert counts["coef_cispo_mass_moved"] == counts["coef_sapo_mass_moved"] == 0


def test_register_disagreement_variant_keeps_the_loss_and_logs_counts():
    from rlbook.losses import policy_loss
    from rlbook.losses.registry import unregister_policy_loss
    from rlbook.probes import register_disagreement_variant
    name = register_disagreement_variant("cispo", cap=1.2)
    try:
        logp = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.4, 0.4, 0.1]])).requires_grad_()
        old = torch.log(torch.tensor([[0.5, 0.2, 0.3], [0.4, 0.2, 0.5]]))
        advantages, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 3)
        plain, plain_metrics = policy_loss(logp, old, advantages, mask, variant="cispo", eps_high=0.2)
        loss, metrics = policy_loss(logp, old, advantages, mask, variant=name, eps_high=0.2)
        assert torch.equal(loss, plain) and metrics["clip_frac"] == plain_metrics["clip_frac"]
        assert metrics["coef_tokens"] == 6 and metrics["coef_cispo_differs"] == 3
        assert register_disagreement_variant("cispo", cap=1.2) == name  # a cell run twice
    finally:
        unregister_policy_loss(name)
