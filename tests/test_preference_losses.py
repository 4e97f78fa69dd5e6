"""Unit and property tests for rlbook.losses.preference: DPO, IPO, KTO, SimPO, CPO, ORPO.

Worked examples are derived by hand in the comments, so a reader can check the arithmetic.
"""

import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.losses import (
    cpo_loss,
    dpo_implicit_rewards,
    dpo_loss,
    ipo_loss,
    kto_loss,
    kto_reference_point,
    orpo_log_odds_ratio,
    orpo_loss,
    reward_metrics,
    sequence_logps,
    simpo_implicit_rewards,
    simpo_loss,
)

LN2 = math.log(2)
FAST = settings(max_examples=30, deadline=None)

logp_values = st.floats(-50.0, 0.0, allow_nan=False)
betas = st.floats(0.01, 5.0)


@st.composite
def logp_batches(draw, count: int):
    """``count`` float64 (B,) tensors of sequence log-probs sharing one batch size."""
    size = draw(st.integers(1, 6))
    return [
        torch.tensor(draw(st.lists(logp_values, min_size=size, max_size=size)), dtype=torch.float64)
        for _ in range(count)
    ]


def t(*values):
    return torch.tensor(values, dtype=torch.float64)


# ----------------------------------------------------------------------------- DPO


@FAST
@given(logp_batches(2), betas, st.floats(0.0, 0.49))
def test_dpo_loss_is_ln2_when_policy_equals_reference(batch, beta, label_smoothing):
    chosen, rejected = batch
    loss = dpo_loss(chosen, rejected, chosen, rejected, beta, label_smoothing=label_smoothing)
    torch.testing.assert_close(loss, torch.full_like(chosen, LN2))


@FAST
@given(logp_batches(4), betas)
def test_dpo_gradient_weight_is_sigmoid_of_negative_scaled_margin(batch, beta):
    chosen, rejected, ref_chosen, ref_rejected = (x.clone().requires_grad_() for x in batch)
    dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta).sum().backward()
    margin = (chosen - ref_chosen) - (rejected - ref_rejected)
    weight = beta * torch.sigmoid(-beta * margin.detach())
    # ∂L/∂log π(y_w) = −β σ(−β h), and the other three follow from h's signs.
    torch.testing.assert_close(chosen.grad, -weight)
    torch.testing.assert_close(rejected.grad, weight)
    torch.testing.assert_close(ref_chosen.grad, weight)
    torch.testing.assert_close(ref_rejected.grad, -weight)


@FAST
@given(st.floats(-20, 20), st.floats(0.01, 20), betas)
def test_dpo_loss_decreases_as_the_margin_grows(margin, increase, beta):
    zeros = t(0.0)
    smaller = dpo_loss(t(margin), zeros, zeros, zeros, beta)
    larger = dpo_loss(t(margin + increase), zeros, zeros, zeros, beta)
    assert larger < smaller


@FAST
@given(logp_batches(4), betas)
def test_dpo_swapping_chosen_and_rejected_adds_the_scaled_margin(batch, beta):
    chosen, rejected, ref_chosen, ref_rejected = batch
    loss = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta)
    swapped = dpo_loss(rejected, chosen, ref_rejected, ref_chosen, beta)
    # −log σ(−z) − (−log σ(z)) = z, with z = β h.
    margin = (chosen - ref_chosen) - (rejected - ref_rejected)
    torch.testing.assert_close(swapped - loss, beta * margin)


def test_conservative_dpo_is_minimised_at_a_finite_margin():
    beta, eps = 0.5, 0.1
    best_margin = math.log((1 - eps) / eps) / beta  # where (1 − ε) σ(−βh) = ε σ(βh)
    margin = t(best_margin).requires_grad_()
    zeros = t(0.0)
    dpo_loss(margin, zeros, zeros, zeros, beta, label_smoothing=eps).sum().backward()
    assert abs(margin.grad.item()) < 1e-12


def test_dpo_worked_example():
    # chosen log-ratio −10 − (−12) = 2, rejected log-ratio −8 − (−7) = −1, so h = 3; β = 0.5:
    # loss = −log σ(1.5) = log(1 + e^−1.5) ≈ 0.20141.
    loss = dpo_loss(t(-10.0), t(-8.0), t(-12.0), t(-7.0), 0.5)
    torch.testing.assert_close(loss, t(math.log1p(math.exp(-1.5))))


# ----------------------------------------------------------------------------- IPO


@pytest.mark.parametrize("tau", [0.05, 0.5, 2.0])
def test_ipo_is_minimised_at_margin_one_over_two_tau(tau):
    margins = torch.linspace(-5, 15, 4001, dtype=torch.float64)
    zeros = torch.zeros_like(margins)
    losses = ipo_loss(margins, zeros, zeros, zeros, tau)
    target = 1 / (2 * tau)
    assert abs(margins[losses.argmin()].item() - target) <= (margins[1] - margins[0]).item()
    assert ipo_loss(t(target), t(0.0), t(0.0), t(0.0), tau).item() == pytest.approx(0.0, abs=1e-24)


def test_ipo_with_lengths_averages_each_log_ratio():
    # log-ratios 6 over 3 tokens and −2 over 4 tokens: h = 2 − (−0.5) = 2.5; τ = 0.25 → target 2.
    loss = ipo_loss(t(-4.0), t(-12.0), t(-10.0), t(-10.0), 0.25, chosen_lens=t(3.0), rejected_lens=t(4.0))
    torch.testing.assert_close(loss, t(0.25))


@FAST
@given(logp_batches(4), st.floats(0.05, 5.0))
def test_ipo_swap_changes_the_loss_by_four_h_times_target(batch, tau):
    chosen, rejected, ref_chosen, ref_rejected = batch
    margin = (chosen - ref_chosen) - (rejected - ref_rejected)
    loss = ipo_loss(chosen, rejected, ref_chosen, ref_rejected, tau)
    swapped = ipo_loss(rejected, chosen, ref_rejected, ref_chosen, tau)
    # (−h − c)² − (h − c)² = 4 h c with c = 1/(2τ).
    torch.testing.assert_close(swapped - loss, 4 * margin / (2 * tau))


# ----------------------------------------------------------------------------- KTO


def test_kto_at_zero_reference_point_and_zero_log_ratio_costs_half_the_weight():
    logps = t(-3.0, -3.0)
    loss = kto_loss(logps, logps, torch.tensor([True, False]), 0.0, 0.1, desirable_weight=2.0, undesirable_weight=0.5)
    torch.testing.assert_close(loss, t(1.0, 0.25))  # λ (1 − σ(0)) = λ / 2


def test_kto_reference_point_limits():
    logps, ref_logps = t(-2.0, -2.0), t(-3.0, -3.0)  # log-ratio r = 1 for both
    labels = torch.tensor([True, False])
    # z0 → ∞: nothing desirable clears the bar (loss λ_D), everything undesirable is below it (loss 0).
    high = kto_loss(logps, ref_logps, labels, 1e4, 1.0, desirable_weight=1.5, undesirable_weight=0.7)
    torch.testing.assert_close(high, t(1.5, 0.0))
    # A negative z0 is clamped to 0, as in the paper: r − z0 = 1 → λ_D(1 − σ(1)) and λ_U(1 − σ(−1)).
    negative = kto_loss(logps, ref_logps, labels, torch.tensor(-4.0), 1.0)
    zero = kto_loss(logps, ref_logps, labels, 0.0, 1.0)
    torch.testing.assert_close(negative, zero)
    sig1 = 1 / (1 + math.exp(-1))
    torch.testing.assert_close(zero, t(1 - sig1, sig1))


def test_kto_reference_point_is_detached_clamped_mean():
    logps = t(-1.0, -3.0).requires_grad_()
    estimate = kto_reference_point(logps, t(-2.0, -3.0))
    assert estimate.item() == pytest.approx(0.5) and not estimate.requires_grad
    assert kto_reference_point(t(-5.0, -5.0), t(-1.0, -1.0)).item() == 0.0


def test_kto_no_gradient_flows_into_the_reference_point():
    z0 = torch.tensor(0.3, requires_grad=True)
    logps = t(-1.0, -2.0).requires_grad_()
    kto_loss(logps, t(-1.5, -1.5), torch.tensor([1, 0]), z0, 0.5).sum().backward()
    assert z0.grad is None
    assert logps.grad[0] < 0 < logps.grad[1]  # raise the desirable, lower the undesirable


@FAST
@given(st.floats(-10, 10), st.floats(0.01, 5), st.floats(0, 5), betas)
def test_kto_desirable_loss_falls_and_undesirable_loss_rises_with_the_log_ratio(ratio, step, z0, beta):
    def losses(r):
        logps = t(r, r)
        return kto_loss(logps, torch.zeros_like(logps), torch.tensor([True, False]), z0, beta)

    low, high = losses(ratio), losses(ratio + step)
    assert high[0] <= low[0] and high[1] >= low[1]


# ----------------------------------------------------------------------------- SimPO, CPO, ORPO


def test_simpo_worked_example():
    # Averages −6/3 = −2 and −12/4 = −3; β = 2, γ = 0.5:
    # z = 2·(−2 + 3) − 0.5 = 1.5, loss = log(1 + e^−1.5).
    loss = simpo_loss(t(-6.0), t(-12.0), t(3.0), t(4.0), 2.0, 0.5)
    torch.testing.assert_close(loss, t(math.log1p(math.exp(-1.5))))


def test_simpo_length_normalisation_can_reverse_the_sum_ordering():
    # By sums the rejected response is likelier (−4 > −10); per token the chosen one is (−1 > −2).
    # β = 1, γ = 0: z = −1 − (−2) = 1 → loss = log(1 + e^−1), below ln 2.
    loss = simpo_loss(t(-10.0), t(-4.0), t(10.0), t(2.0), 1.0, 0.0)
    torch.testing.assert_close(loss, t(math.log1p(math.exp(-1.0))))
    assert loss.item() < LN2


def test_cpo_worked_example():
    # −log σ(β (−2 − (−5))) with β = 1, plus α · 2/4 with α = 1: log(1 + e^−3) + 0.5.
    loss = cpo_loss(t(-2.0), t(-5.0), t(4.0), 1.0)
    torch.testing.assert_close(loss, t(math.log1p(math.exp(-3.0)) + 0.5))


def test_orpo_worked_example():
    # Average log-probs log ½ (3 tokens) and log ¼ (2 tokens): P_w = ½, odds 1; P_l = ¼, odds ⅓.
    # log OR = log 3, L_OR = −log σ(log 3) = −log ¾; L_SFT = −log ½; λ = 0.1.
    chosen, rejected = t(3 * math.log(0.5)), t(2 * math.log(0.25))
    torch.testing.assert_close(orpo_log_odds_ratio(chosen, rejected, t(3.0), t(2.0)), t(math.log(3)))
    loss = orpo_loss(chosen, rejected, t(3.0), t(2.0), lam=0.1)
    torch.testing.assert_close(loss, t(math.log(2) + 0.1 * math.log(4 / 3)))


@FAST
@given(logp_batches(2), st.integers(1, 30), st.integers(1, 30))
def test_orpo_log_odds_ratio_is_antisymmetric(batch, chosen_len, rejected_len):
    chosen, rejected = batch
    chosen_lens = torch.full_like(chosen, chosen_len)
    rejected_lens = torch.full_like(chosen, rejected_len)
    forward = orpo_log_odds_ratio(chosen - 1e-3, rejected - 1e-3, chosen_lens, rejected_lens)
    backward = orpo_log_odds_ratio(rejected - 1e-3, chosen - 1e-3, rejected_lens, chosen_lens)
    torch.testing.assert_close(forward, -backward)


def test_orpo_log1m_exp_is_accurate_for_very_likely_and_very_unlikely_responses():
    # Average log-probs −1e-8 (P ≈ 1) and −40 (P ≈ 4e-18): log odds ≈ −log(1e-8) and ≈ −40.
    log_or = orpo_log_odds_ratio(t(-1e-8), t(-40.0), t(1.0), t(1.0))
    assert torch.isfinite(log_or).all()
    torch.testing.assert_close(log_or, t(-math.log(1e-8) + 40.0), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- shapes and the helpers


@FAST
@given(logp_batches(4), betas)
def test_every_loss_returns_one_value_per_example(batch, beta):
    chosen, rejected, ref_chosen, ref_rejected = (x - 1e-3 for x in batch)
    lens = torch.ones_like(chosen) * 3
    losses = [
        dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta),
        ipo_loss(chosen, rejected, ref_chosen, ref_rejected, beta),
        ipo_loss(chosen, rejected, ref_chosen, ref_rejected, beta, chosen_lens=lens, rejected_lens=lens),
        kto_loss(chosen, ref_chosen, rejected > chosen, kto_reference_point(rejected, ref_rejected), beta),
        simpo_loss(chosen, rejected, lens, lens, beta, 0.5),
        cpo_loss(chosen, rejected, lens, beta),
        orpo_loss(chosen, rejected, lens, lens, lam=beta),
    ]
    for loss in losses:
        assert loss.shape == chosen.shape and torch.isfinite(loss).all()


def test_sequence_logps_sums_or_averages_the_masked_tokens():
    token_logps = torch.tensor([[-9.0, -1.0, -2.0, -7.0], [-5.0, -3.0, -9.0, -9.0]])
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 0]])
    torch.testing.assert_close(sequence_logps(token_logps, mask), torch.tensor([-3.0, -17.0]))
    torch.testing.assert_close(sequence_logps(token_logps, mask, average=True), torch.tensor([-1.5, -17.0 / 3]))


def test_implicit_rewards_and_metrics():
    chosen_rewards, rejected_rewards = dpo_implicit_rewards(
        t(-1.0, -4.0), t(-3.0, -2.0), t(-2.0, -4.0), t(-2.0, -2.0), 0.5
    )
    torch.testing.assert_close(chosen_rewards, t(0.5, 0.0))
    torch.testing.assert_close(rejected_rewards, t(-0.5, 0.0))
    metrics = reward_metrics(chosen_rewards, rejected_rewards)
    # The tie in the second pair counts as not preferred.
    assert metrics == pytest.approx(
        {"rewards/chosen": 0.25, "rewards/rejected": -0.25, "rewards/margins": 0.5, "rewards/accuracies": 0.5}
    )
    simpo_chosen, simpo_rejected = simpo_implicit_rewards(t(-6.0), t(-12.0), t(3.0), t(4.0), 2.0)
    torch.testing.assert_close((simpo_chosen, simpo_rejected), (t(-4.0), t(-6.0)))


def test_rewards_are_detached():
    chosen = t(-1.0).requires_grad_()
    rewards = dpo_implicit_rewards(chosen, t(-2.0), t(-1.0), t(-2.0), 0.1)
    assert not any(reward.requires_grad for reward in rewards)


# ----------------------------------------------------------------------------- bad input


GOOD = t(-1.0, -2.0)
LENS = t(2.0, 3.0)
NAN = t(-1.0, float("nan"))

BAD_CALLS = {
    "shape mismatch": ("rejected_logps", lambda: dpo_loss(GOOD, t(-1.0), GOOD, GOOD, 0.1)),
    "per-token input": ("chosen_logps", lambda: dpo_loss(torch.zeros(2, 3), GOOD, GOOD, GOOD, 0.1)),
    "empty batch": ("chosen_logps", lambda: dpo_loss(t(), t(), t(), t(), 0.1)),
    "nan": ("ref_rejected_logps", lambda: dpo_loss(GOOD, GOOD, GOOD, NAN, 0.1)),
    "inf": ("ref_logps", lambda: kto_loss(GOOD, t(-1.0, float("inf")), [1, 0], 0.0, 0.1)),
    "bool dtype": ("chosen_logps", lambda: dpo_loss(torch.tensor([True, False]), GOOD, GOOD, GOOD, 0.1)),
    "string": ("rejected_logps", lambda: simpo_loss(GOOD, "low", LENS, LENS, 2.0, 0.5)),
    "zero beta": ("beta", lambda: dpo_loss(GOOD, GOOD, GOOD, GOOD, 0.0)),
    "negative beta": ("beta", lambda: simpo_loss(GOOD, GOOD, LENS, LENS, -1.0, 0.5)),
    "tensor beta": ("beta", lambda: cpo_loss(GOOD, GOOD, LENS, torch.tensor(0.1))),
    "zero tau": ("tau", lambda: ipo_loss(GOOD, GOOD, GOOD, GOOD, 0)),
    "one ipo length": ("rejected_lens", lambda: ipo_loss(GOOD, GOOD, GOOD, GOOD, 0.1, chosen_lens=LENS)),
    "zero length": ("chosen_lens", lambda: simpo_loss(GOOD, GOOD, t(0.0, 3.0), LENS, 2.0, 0.5)),
    "negative length": ("rejected_lens", lambda: orpo_loss(GOOD, GOOD, LENS, t(2.0, -1.0))),
    "length shape": ("chosen_lens", lambda: cpo_loss(GOOD, GOOD, t(2.0), 0.1)),
    "negative gamma": ("gamma", lambda: simpo_loss(GOOD, GOOD, LENS, LENS, 2.0, -0.5)),
    "smoothing too big": ("label_smoothing", lambda: dpo_loss(GOOD, GOOD, GOOD, GOOD, 0.1, label_smoothing=0.5)),
    "label not 0/1": ("is_desirable", lambda: kto_loss(GOOD, GOOD, [1, 2], 0.0, 0.1)),
    "label shape": ("is_desirable", lambda: kto_loss(GOOD, GOOD, [1], 0.0, 0.1)),
    "z0 not scalar": ("reference_point", lambda: kto_loss(GOOD, GOOD, [1, 0], t(0.1, 0.2), 0.1)),
    "z0 nan": ("reference_point", lambda: kto_loss(GOOD, GOOD, [1, 0], float("nan"), 0.1)),
    "negative weight": ("undesirable_weight", lambda: kto_loss(GOOD, GOOD, [1, 0], 0.0, 0.1, undesirable_weight=-1)),
    "positive orpo logp": ("chosen_logps", lambda: orpo_loss(t(0.5, -1.0), GOOD, LENS, LENS)),
    "negative lam": ("lam", lambda: orpo_loss(GOOD, GOOD, LENS, LENS, lam=-0.1)),
    "mask values": ("mask", lambda: sequence_logps(torch.zeros(2, 3), torch.full((2, 3), 2))),
    "empty row average": ("mask", lambda: sequence_logps(torch.zeros(2, 2), [[1, 1], [0, 0]], average=True)),
    "reward shape": ("rejected_rewards", lambda: reward_metrics(GOOD, t(1.0))),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_input_raises_value_error_naming_the_argument(case):
    argument, call = BAD_CALLS[case]
    with pytest.raises(ValueError, match=rf"\b{re.escape(argument)}\b"):
        call()


def test_per_token_input_error_points_to_sequence_logps():
    with pytest.raises(ValueError, match="sequence_logps"):
        dpo_loss(torch.zeros(2, 3), GOOD, GOOD, GOOD, 0.1)
