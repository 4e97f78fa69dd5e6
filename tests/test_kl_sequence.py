"""The two-token toy of lesson 02: each placement's exact expected gradient and the fixed point it reaches."""

import pytest
import torch

from rlbook import kl_sequence as ks
from rlbook import toys
from rlbook.advantages import gae
from rlbook.kl import kl_estimate, kl_in_reward

TOY = ks.TwoTokenToy(ref_first=[0.5, 0.5], ref_second=[[0.6, 0.4], [0.05, 0.95]], rewards=[[1.0, 0.0], [1.0, 0.0]])
WIDE = ks.TwoTokenToy(ref_first=[0.2, 0.5, 0.3],
                      ref_second=[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]],
                      rewards=[[1.0, 0.5, 0.0], [1.0, 0.2, 0.0], [0.3, 0.0, 0.6]])
FIRST = torch.tensor([0.3, -0.4, 0.1], dtype=torch.float64)
SECOND = torch.tensor([[0.2, -0.1, 0.5], [1.0, 0.0, -1.0], [-0.3, 0.4, 0.0]], dtype=torch.float64)


def _sequence_objective_gradient(toy, first_logits, second_logits, beta):
    """∇ of J = E[R] − β KL over whole responses, by autograd through the exact sum."""
    first = first_logits.clone().requires_grad_(True)
    second = second_logits.clone().requires_grad_(True)
    logp = ks.sequence_log_probs(first, second)
    ref = toy.ref_first.log().unsqueeze(1) + toy.ref_second.log()
    objective = (logp.exp() * (toy.rewards - beta * (logp - ref))).sum()
    return torch.autograd.grad(objective, (first, second))


def _partial_gradient(toy, first_logits, second_logits, beta):
    """∇E[R] minus β Σ_t E_{y_<t}[∇_{θ_t} KL_t(y_<t)]: each token's own KL, its prefix's weight held fixed."""
    first = first_logits.clone().requires_grad_(True)
    second = second_logits.clone().requires_grad_(True)
    logp = ks.sequence_log_probs(first, second)
    lp1, lp2 = torch.log_softmax(first, 0), torch.log_softmax(second, 1)
    kl1 = (lp1.exp() * (lp1 - toy.ref_first.log())).sum()
    kl2 = (lp2.exp() * (lp2 - toy.ref_second.log())).sum(1)
    objective = (logp.exp() * toy.rewards).sum() - beta * (kl1 + (lp1.exp().detach() * kl2).sum())
    return torch.autograd.grad(objective, (first, second))


def _close(a, b, atol=1e-12):
    return all(torch.allclose(x, y, atol=atol) for x, y in zip(a, b))


def test_k1_in_the_reward_with_reward_to_go_is_the_sequence_gradient():
    for toy in (TOY, WIDE):
        first = FIRST[: toy.shape[0]]
        second = SECOND[: toy.shape[0], : toy.shape[1]]
        expected = _sequence_objective_gradient(toy, first, second, 0.3)
        assert _close(ks.sequence_placement_gradient(toy, first, second, beta=0.3, placement="k1_in_reward"), expected)


def test_the_whole_return_on_every_token_has_the_same_expectation():
    # Σ_t (Σ_t' r_t') ∇log π_t: the past rewards' terms average to zero, so reward-to-go only removes noise
    first_logits, second_logits = FIRST.clone().requires_grad_(True), SECOND.clone().requires_grad_(True)
    k1_count, k2_count = WIDE.shape
    y1, y2 = torch.arange(k1_count).repeat_interleave(k2_count), torch.arange(k2_count).repeat(k1_count)
    logp = torch.stack([torch.log_softmax(first_logits, 0)[y1], torch.log_softmax(second_logits, 1)[y1, y2]], 1)
    ref = torch.stack([WIDE.ref_first.log()[y1], WIDE.ref_second.log()[y1, y2]], 1)
    per_token = kl_in_reward(WIDE.rewards[y1, y2], kl_estimate(logp, ref, "k1"), 0.3, torch.ones_like(logp))
    whole = per_token.sum(1, keepdim=True)
    objective = (logp.sum(1).exp().detach().unsqueeze(1) * whole * logp).sum()
    gradient = torch.autograd.grad(objective, (first_logits, second_logits))
    assert _close(gradient, ks.sequence_placement_gradient(WIDE, FIRST, SECOND, beta=0.3, placement="k1_in_reward"))
    rewards_to_go, _ = gae(per_token, torch.zeros_like(per_token), 1.0, 1.0)
    assert torch.allclose(rewards_to_go[:, 0], per_token.sum(1)) and torch.allclose(rewards_to_go[:, 1], per_token[:, 1])


@pytest.mark.parametrize("placement", ["k1_own_token", "k2_in_loss", "k3+_in_loss", "k3_ratio_in_loss"])
def test_per_token_placements_give_the_partial_gradient(placement):
    expected = _partial_gradient(WIDE, FIRST, SECOND, 0.3)
    assert _close(ks.sequence_placement_gradient(WIDE, FIRST, SECOND, beta=0.3, placement=placement), expected)
    full = _sequence_objective_gradient(WIDE, FIRST, SECOND, 0.3)
    assert (full[0] - expected[0]).abs().max() > 1e-3      # the first token misses its continuation's KL …
    assert torch.allclose(full[1], expected[1], atol=1e-12)  # … the last token has no continuation


def test_k3_in_the_loss_follows_the_forward_kl_at_every_prefix():
    first, second = FIRST.clone().requires_grad_(True), SECOND.clone().requires_grad_(True)
    lp1, lp2 = torch.log_softmax(first, 0), torch.log_softmax(second, 1)
    forward1 = (WIDE.ref_first * (WIDE.ref_first.log() - lp1)).sum()
    forward2 = (WIDE.ref_second * (WIDE.ref_second.log() - lp2)).sum(1)
    logp = ks.sequence_log_probs(first, second)
    objective = (logp.exp() * WIDE.rewards).sum() - 0.3 * (forward1 + (lp1.exp().detach() * forward2).sum())
    expected = torch.autograd.grad(objective, (first, second))
    assert _close(ks.sequence_placement_gradient(WIDE, FIRST, SECOND, beta=0.3, placement="k3_in_loss"), expected)


@pytest.mark.parametrize("placement, target", [
    ("k1_in_reward", ks.sequence_tilt), ("k2_in_loss", ks.per_token_tilt), ("k3+_in_loss", ks.per_token_tilt),
    ("k3_ratio_in_loss", ks.per_token_tilt), ("k1_own_token", ks.per_token_tilt),
    ("k3_in_loss", ks.per_token_forward_optimum),
])
def test_ascent_converges_to_the_closed_form(placement, target):
    first, second = ks.sequence_ascent(TOY, beta=0.25, placement=placement, steps=800, lr=4.0)
    expected_first, expected_second = target(TOY, beta=0.25)
    assert torch.allclose(first, expected_first, atol=1e-7) and torch.allclose(second, expected_second, atol=1e-7)


def test_closed_forms():
    beta = 0.4
    tilt_first, tilt_second = ks.sequence_tilt(WIDE, beta=beta)
    joint = tilt_first.unsqueeze(1) * tilt_second
    exact = WIDE.ref_first.unsqueeze(1) * WIDE.ref_second * torch.exp(WIDE.rewards / beta)
    assert torch.allclose(joint, exact / exact.sum(), atol=1e-14)  # π*(y) ∝ π_ref(y) e^{R(y)/β}
    # the tilt maximises J: both partial fixed points do worse on the sequence objective
    best = ks.sequence_objective(WIDE, tilt_first, tilt_second, beta=beta)
    for partial in (ks.per_token_tilt, ks.per_token_forward_optimum):
        assert ks.sequence_objective(WIDE, *partial(WIDE, beta=beta), beta=beta) < best
    # the per-token tilt has the tilt's conditionals, and reweights each first token by e^{KL₂(y₁)}
    partial_first, partial_second = ks.per_token_tilt(WIDE, beta=beta)
    assert torch.allclose(partial_second, tilt_second, atol=1e-14)
    kl2 = (tilt_second * (tilt_second.log() - WIDE.ref_second.log())).sum(1)
    shift = partial_first.log() - tilt_first.log() - kl2
    assert torch.allclose(shift, shift[0].expand_as(shift), atol=1e-12)
    # k3's conditionals are forward-KL optima of each prefix
    _, forward_second = ks.per_token_forward_optimum(WIDE, beta=beta)
    assert torch.allclose(forward_second[1], toys.forward_kl_optimum(WIDE.ref_second[1], WIDE.rewards[1], beta=beta))


def test_kl_and_reward_of_a_policy():
    first, second = TOY.ref_first, TOY.ref_second
    assert ks.sequence_kl(TOY, first, second) == pytest.approx(0.0, abs=1e-15)
    assert ks.sequence_reward(TOY, first, second) == pytest.approx(0.5 * 0.6 + 0.5 * 0.05)
    other_first, other_second = torch.tensor([0.9, 0.1]), torch.tensor([[0.99, 0.01], [0.7, 0.3]])
    joint = other_first.double().unsqueeze(1) * other_second.double()
    ref = TOY.ref_first.unsqueeze(1) * TOY.ref_second
    assert ks.sequence_kl(TOY, other_first, other_second) == pytest.approx(float((joint * (joint / ref).log()).sum()))


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="ref_first"):
        ks.TwoTokenToy(ref_first=[0.5, 0.6], ref_second=[[0.5, 0.5], [0.5, 0.5]], rewards=[[0, 0], [0, 0]])
    with pytest.raises(ValueError, match="ref_second"):
        ks.TwoTokenToy(ref_first=[0.5, 0.5], ref_second=[[0.5, 0.5]], rewards=[[0, 0]])
    with pytest.raises(ValueError, match="rewards"):
        ks.TwoTokenToy(ref_first=[0.5, 0.5], ref_second=[[0.5, 0.5], [0.5, 0.5]], rewards=[[0, 0, 0], [0, 0, 0]])
    with pytest.raises(ValueError, match="placement"):
        ks.sequence_placement_gradient(TOY, TOY.ref_first.log(), TOY.ref_second.log(), beta=0.1, placement="k4")
    with pytest.raises(ValueError, match="first_logits"):
        ks.sequence_placement_gradient(TOY, FIRST, SECOND, beta=0.1, placement="k2_in_loss")
    with pytest.raises(ValueError, match="beta"):
        ks.sequence_tilt(TOY, beta=0.0)
    with pytest.raises(ValueError, match="first_probs"):
        ks.sequence_kl(TOY, torch.tensor([1.0]), TOY.ref_second)


CHAIN_REF = torch.tensor([0.40, 0.25, 0.20, 0.10, 0.05], dtype=torch.float64)
CHAIN_LOGITS = torch.tensor([0.0, 0.5, -0.3, 0.8, -1.0], dtype=torch.float64)


@pytest.mark.parametrize("credit", ks.CHAIN_CREDITS)
@pytest.mark.parametrize("length", [1, 2, 4])
def test_chain_closed_form_matches_the_enumeration_through_the_trainers_functions(credit, length):
    exact = ks.chain_gradient_moments(CHAIN_LOGITS, CHAIN_REF, length=length, credit=credit)
    brute = ks.chain_gradient_moments_enumerated(CHAIN_LOGITS, CHAIN_REF, length=length, credit=credit)
    assert abs(exact["variance"] - brute["variance"]) < 1e-10 * max(1.0, brute["variance"])
    assert _close(exact["mean"], brute["mean"], atol=1e-12)


def test_chain_reverse_credits_share_one_mean_and_part_in_noise():
    reverse = toys.kl_gradient(CHAIN_LOGITS, CHAIN_REF, "reverse")
    forward = toys.kl_gradient(CHAIN_LOGITS, CHAIN_REF, "forward")
    moments = {c: ks.chain_gradient_moments(CHAIN_LOGITS, CHAIN_REF, length=8, credit=c) for c in ks.CHAIN_CREDITS}
    for credit in ("reward_to_go", "reward_to_go_critic", "own_token"):
        assert _close(moments[credit]["mean"], 8 * reverse)     # T · ∇KL: no prefix dependence, no partial-gradient bias
    assert _close(moments["k3_in_loss"]["mean"], 8 * forward)
    variance = {c: m["variance"] for c, m in moments.items()}
    assert variance["reward_to_go"] > variance["reward_to_go_critic"] > variance["own_token"]
    # one token: reward-to-go is k1 in the reward, the same per-sample gradient as k2 in the loss (§6)
    one = {c: ks.chain_gradient_moments(CHAIN_LOGITS, CHAIN_REF, length=1, credit=c)["variance"] for c in ks.CHAIN_CREDITS}
    assert abs(one["reward_to_go"] - one["own_token"]) < 1e-14
    # growth: per-token losses linear in T, reward-to-go cubic, with the critic quadratic
    grow = {c: ks.chain_gradient_moments(CHAIN_LOGITS, CHAIN_REF, length=400, credit=c)["variance"]
               / ks.chain_gradient_moments(CHAIN_LOGITS, CHAIN_REF, length=200, credit=c)["variance"] for c in ks.CHAIN_CREDITS}
    assert abs(grow["own_token"] - 2) < 1e-9 and abs(grow["k3_in_loss"] - 2) < 1e-9
    assert 3.9 < grow["reward_to_go_critic"] < 4.1 and 7.5 < grow["reward_to_go"] < 8.1
    # the whole response's return on every token: the same mean, one token like reward-to-go, and noisier
    assert _close(moments["sequence_return"]["mean"], 8 * reverse)
    assert abs(one["sequence_return"] - one["reward_to_go"]) < 1e-14
    assert variance["sequence_return"] > variance["reward_to_go"]


def test_chain_bad_input_is_named():
    with pytest.raises(ValueError, match="credit"):
        ks.chain_gradient_moments(CHAIN_LOGITS, CHAIN_REF, length=2, credit="k4")
    with pytest.raises(ValueError, match="length"):
        ks.chain_gradient_moments(CHAIN_LOGITS, CHAIN_REF, length=0, credit="own_token")
    with pytest.raises(ValueError, match="logits"):
        ks.chain_gradient_moments(CHAIN_LOGITS[:3], CHAIN_REF, length=2, credit="own_token")
    with pytest.raises(ValueError, match="ref_probs"):
        ks.chain_gradient_moments(CHAIN_LOGITS, CHAIN_REF * 2, length=2, credit="own_token")
    with pytest.raises(ValueError, match="length"):
        ks.chain_gradient_moments_enumerated(CHAIN_LOGITS, CHAIN_REF, length=9, credit="own_token")
