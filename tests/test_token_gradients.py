"""rlbook.token_gradients: each token's gradient coefficient, read off the library's losses by autograd,
against the closed forms of PPO's clip, CISPO's capped weight and SAPO's gate."""

import numpy as np
import pytest
import torch

from rlbook.token_gradients import clipped_objective_curves, gradient_coefficient, token_loss_gradients


@pytest.mark.parametrize("advantage", [1.0, -0.5])
@pytest.mark.parametrize("knobs", [dict(eps_low=0.2, eps_high=0.2), dict(eps_low=0.1, eps_high=0.28),
                                   dict(eps_low=0.2, eps_high=0.2, dual_clip=3.0)])
def test_curves_match_the_closed_form(advantage, knobs):
    r, objective, slope = clipped_objective_curves(advantage, r_max=5.0, **knobs)
    low, high = 1 - knobs["eps_low"], 1 + knobs["eps_high"]
    expected = np.minimum(r * advantage, np.clip(r, low, high) * advantage)
    if knobs.get("dual_clip") and advantage < 0:
        expected = np.maximum(expected, knobs["dual_clip"] * advantage)
    np.testing.assert_allclose(objective, expected, atol=1e-12)
    # The slope is the objective's derivative: advantage where the gradient flows, 0 where clipped.
    flows = (r * advantage == expected) & ~np.isclose(r, low) & ~np.isclose(r, high)
    if knobs.get("dual_clip"):
        flows &= ~np.isclose(r, knobs["dual_clip"])
    np.testing.assert_allclose(slope[flows], advantage)
    assert (slope[~flows & ~np.isclose(r, low) & ~np.isclose(r, high)] == 0).all()


R = torch.tensor([0.5, 1.0, 1.5, 7.0], dtype=torch.float64)


@pytest.mark.parametrize("variant, sign, expected", [
    ("ppo", 1, [0.5, 1.0, 0.0, 0.0]),
    ("ppo", -1, [0.0, 1.0, 1.5, 7.0]),
    ("cispo", 1, [0.5, 1.0, 1.5, 5.0]),
    ("cispo", -1, [0.5, 1.0, 1.5, 5.0]),
])
def test_gradient_coefficient_matches_the_closed_forms(variant, sign, expected):
    got = gradient_coefficient(R, sign, variant=variant)
    assert torch.allclose(got, torch.tensor(expected, dtype=torch.float64), atol=1e-12)


def test_sapo_coefficient_is_r_times_sech_squared():
    for sign, tau in ((1, 2.0), (-1, 3.0)):
        got = gradient_coefficient(R, sign, variant="sapo", tau_pos=2.0, tau_neg=3.0)
        assert torch.allclose(got, R / torch.cosh(tau * (R - 1) / 2) ** 2, atol=1e-12)


def test_gradient_coefficient_validates():
    with pytest.raises(ValueError, match="ratio"):
        gradient_coefficient(torch.tensor([0.0, 1.0]), 1, variant="ppo")
    with pytest.raises(ValueError, match="advantage"):
        gradient_coefficient(R, 0, variant="ppo")


def test_token_loss_gradients_ignore_padding():
    logp = torch.log(torch.tensor([[0.5, 0.9, 0.3], [0.2, 0.4, 0.7]]))
    old = logp + torch.tensor([[0.0, -0.5, 0.0], [0.3, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    grads = token_loss_gradients(logp, old, torch.tensor([1.0, -1.0]), mask, variant="ppo")
    assert grads.shape == (2, 3) and grads[0, 2] == 0
    assert grads[0, 1] == 0  # r = e^0.5 > 1.2 with A > 0: clipped
    cispo = token_loss_gradients(logp, old, torch.tensor([1.0, -1.0]), mask, variant="cispo")
    assert (cispo[mask > 0] != 0).all()


def test_clipped_objective_curves_validate():
    with pytest.raises(ValueError, match="advantage"):
        clipped_objective_curves(0.0)
