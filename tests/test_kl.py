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


# ---- the estimators on a language model's own tokens (lesson 02, end of §4)

def test_tempered_token_log_ratios_at_temperature_one_is_zero_kl():
    from rlbook.probes import tempered_token_log_ratios
    from rlbook.models import load_model

    model, tokenizer = load_model("arith-tiny")
    model.eval()
    out = tempered_token_log_ratios(model, tokenizer, ["1+2=", "3+4="], temperature=1.0, max_new_tokens=8, seed=0)
    mask = out["mask"]
    assert mask.any()
    assert torch.allclose(out["logp"], out["ref_logp"], atol=1e-12)
    assert out["exact_kl"].abs().max() < 1e-12
    # logp is the sampler's own log-prob of each token
    assert torch.allclose(out["logp"][mask].float(), out["rollout"].logprobs[mask], atol=1e-4)


def test_tempered_token_log_ratios_sharpened_has_positive_exact_kl_and_k3_mean_one_ratio():
    from rlbook.probes import tempered_token_log_ratios
    from rlbook.models import load_model

    model, tokenizer = load_model("arith-tiny")
    model.eval()
    out = tempered_token_log_ratios(model, tokenizer, ["1+2=", "3+4=", "5+6="], temperature=0.5, max_new_tokens=8)
    mask = out["mask"]
    assert (out["exact_kl"][mask] >= 0).all() and out["exact_kl"][mask].sum() > 0
    assert (out["exact_kl"][~mask] == 0).all() and (out["logp"][~mask] == 0).all()
    with pytest.raises(ValueError, match="temperature"):
        tempered_token_log_ratios(model, tokenizer, ["1+2="], temperature=0.0)


def test_token_tail_summary_on_known_values():
    from rlbook.kl import token_tail_summary

    values = torch.cat([torch.zeros(99), torch.tensor([100.0])])
    tail = token_tail_summary(values, quantiles=(0.5,), top=0.01)
    assert tail["count"] == 100 and tail["mean"] == pytest.approx(1.0)
    assert tail["quantiles"][0.5] == 0.0 and tail["max"] == 100.0
    assert tail["top_share"] == pytest.approx(1.0)
    # one spike among 100 zeros: the definition, evaluated directly
    centred = values.double() - 1.0
    assert tail["excess_kurtosis"] == pytest.approx(float((centred**4).mean() / (centred**2).mean() ** 2 - 3))
    normal = token_tail_summary(torch.randn(200_000, generator=torch.Generator().manual_seed(0)))
    assert abs(normal["excess_kurtosis"]) < 0.1
    with pytest.raises(ValueError, match="top"):
        token_tail_summary(values, top=0.0)
    with pytest.raises(ValueError, match="values"):
        token_tail_summary(torch.ones(1))


def test_batch_means_below_counts_batches():
    from rlbook.kl import batch_means_below

    estimates = torch.tensor([[0.0, 0.0], [2.0, 2.0], [0.0, 5.0], [1.0, 1.0], [9.0, 9.0]])
    exact = torch.ones(5, 2)
    mask = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 1], [1, 1]])
    # batches of 2 rows: rows 0–1 (mean 1.0, not below 1), rows 2–3 (mean 2/3, below); row 4 dropped
    assert batch_means_below(estimates, exact, mask, rows_per_batch=2) == (1, 2)
    assert batch_means_below(estimates, exact, mask, rows_per_batch=1) == (2, 5)
    with pytest.raises(ValueError, match="rows_per_batch"):
        batch_means_below(estimates, exact, mask, rows_per_batch=6)
