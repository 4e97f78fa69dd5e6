"""The checkers of lessons 01 and 02: they pass the reference, and name each classic mistake."""

import pytest
import torch

import rlbook.advantages
import rlbook.kl

from rlbook import toys
from rlbook.exercises import pg_kl
from rlbook.kl import k1, k2, k3, k3_straight_through


def _capture(capsys, checker, fn):
    result = checker(fn)
    return result, capsys.readouterr().out


def _log_softmax(t):
    return torch.log_softmax(t, dim=-1)


def _value(t, means):
    return (_log_softmax(t).exp() * means).sum()


def _stub(*args):
    raise NotImplementedError


def test_call_tells_the_stub_from_other_failures(capsys):
    assert pg_kl._call(_stub, 1.0) == (None, pg_kl.NOT_ATTEMPTED)
    assert pg_kl._failed(pg_kl.NOT_ATTEMPTED, "case 1: ") is None
    assert capsys.readouterr().out == pg_kl.NOT_ATTEMPTED + "\n"
    _, error = pg_kl._call(lambda x: x / 0, 1)
    assert error == "your function raised ZeroDivisionError: division by zero"
    assert pg_kl._failed(error, "case 1: ") is False
    assert capsys.readouterr().out == f"✗ case 1: {error}\n"
    # Only the stub's own exception counts as not attempted, not a message that mentions it.
    assert pg_kl._failed("your function raised ValueError: NotImplementedError") is False
    assert "✗" in capsys.readouterr().out


def test_reinforce_loss_reference_passes(capsys):
    result, out = _capture(capsys, pg_kl.check_reinforce_loss, pg_kl.reference_reinforce_loss)
    assert result is True and out.startswith("✓")


@pytest.mark.parametrize("wrong, words", [
    (lambda t, a, r, m: -((r - _value(t, m)) * _log_softmax(t)[a]).mean(), "not detached"),
    (lambda t, a, r, m: -(r * _log_softmax(t)[a]).mean(), "no baseline"),
    (lambda t, a, r, m: ((r - _value(t, m).detach()) * _log_softmax(t)[a]).mean(), "sign is flipped"),
    (lambda t, a, r, m: -((r - _value(t, m).detach()) * _log_softmax(t)[a]).sum(), "sums over the batch"),
    (lambda t, a, r, m: -((r - _value(t, m).detach()) * t[a]).mean(), "normaliser is missing"),
    (lambda t, a, r, m: -((r - _value(t, m)) * _log_softmax(t)[a]).sum(), "two mistakes: the baseline b(θ) was not"),
    (lambda t, a, r, m: (r * _log_softmax(t)[a]).mean(), "two mistakes: the sign is flipped"),
    (lambda t, a, r, m: -((r - _value(t, m).detach()) / r.std(correction=0) * _log_softmax(t)[a]).mean(),
     "population standard deviation"),
    (lambda t, a, r, m: -((r - m.mean()) * _log_softmax(t)[a]).mean(), "unweighted mean of the arms"),
    (lambda t, a, r, m: torch.tensor(0.0), "carries no gradient"),
    (lambda t, a, r, m: 1 / 0, "ZeroDivisionError"),
])
def test_reinforce_loss_mistakes_are_named(capsys, wrong, words):
    result, out = _capture(capsys, pg_kl.check_reinforce_loss, wrong)
    assert result is False and words in out


def _float32_reinforce_loss(logits, arms, rewards, means):
    logp = torch.log_softmax(logits.float(), dim=-1)
    baseline = (logp.exp() * means.float()).sum().detach()
    return -((rewards.float() - baseline) * logp[arms]).mean()


def test_reinforce_loss_computed_in_float32_passes(capsys):
    result, out = _capture(capsys, pg_kl.check_reinforce_loss, _float32_reinforce_loss)
    assert result is True and out.startswith("✓")


@pytest.mark.parametrize("wrong, words", [
    (lambda t, a, r, m: -((r - r.mean()) * _log_softmax(t)[a]).mean(), "mean of its rewards"),
    (lambda t, a, r, m: -((r - (r.sum() - r) / (len(r) - 1)) * _log_softmax(t)[a]).mean(), "mean of the other rewards"),
    (lambda t, a, r, m: -((r - m[a]) * _log_softmax(t)[a]).mean(), "each pulled arm's own mean"),
    (lambda t, a, r, m: -_value(t, m), "the exact objective"),
    (lambda t, a, r, m: -((r - m[a].mean()) * _log_softmax(t)[a]).mean(), "mean of the pulled arms' μ_a"),
    (lambda t, a, r, m: -((m[a] - _value(t, m).detach()) * _log_softmax(t)[a]).mean(), "Rao–Blackwellised"),
    (lambda t, a, r, m: -(m[a] * _log_softmax(t)[a]).mean(), "in place of the sampled reward"),
])
def test_reinforce_loss_baselines_estimated_the_wrong_way_are_named(capsys, wrong, words):
    result, out = _capture(capsys, pg_kl.check_reinforce_loss, wrong)
    assert result is False and words in out


@pytest.mark.parametrize("scale, words", [
    (lambda r: r.std(), "Bessel's correction"),                     # torch's default: divide by N − 1
    (lambda r: r.std() + 1e-4, "std(R) + ε"),                        # TRL's ε
    (lambda r: r.std(correction=0), "population σ"),
])
def test_reinforce_loss_grpo_normalisation_is_named(capsys, scale, words):
    def grpo(t, a, r, m):
        return -((r - r.mean()) / scale(r) * _log_softmax(t)[a]).mean()
    result, out = _capture(capsys, pg_kl.check_reinforce_loss, grpo)
    assert result is False and "GRPO's way" in out and words in out, out


def _reference_baseline(logits, means):
    return toys.optimal_constant_baseline(toys.GaussianBandit(tuple(means.tolist())), logits)


def test_optimal_baseline(capsys):
    assert _capture(capsys, pg_kl.check_optimal_baseline, _reference_baseline)[0] is True
    result, out = _capture(capsys, pg_kl.check_optimal_baseline, lambda l, m: (torch.softmax(l, -1) * m).sum())
    assert result is False and "value E[R]" in out
    result, out = _capture(capsys, pg_kl.check_optimal_baseline, lambda l, m: torch.zeros(2))
    assert result is False and "one number" in out


def test_optimal_baseline_in_float32_passes_and_the_pulled_coordinate_mistake_is_named(capsys):
    as_float32 = lambda l, m: torch.tensor(_reference_baseline(l, m), dtype=torch.float32)  # noqa: E731
    assert _capture(capsys, pg_kl.check_optimal_baseline, as_float32)[0] is True

    def pulled_coordinate_only(logits, means):
        probs = torch.softmax(logits, -1)
        weights = probs * (1 - probs) ** 2
        return (weights * means).sum() / weights.sum()

    result, out = _capture(capsys, pg_kl.check_optimal_baseline, pulled_coordinate_only)
    assert result is False and "(1 − π_a)²" in out


@pytest.mark.parametrize("wrong, words", [
    (lambda logp, ref: k3(ref, logp), "π_θ/π_ref"),
    (k1, "that is k1"),
    (k2, "that is k2"),
    (lambda logp, ref: torch.exp(ref - logp) - (ref - logp), "−1 is missing"),
    (lambda logp, ref: -k3(logp, ref), "sign is flipped"),
    (lambda logp, ref: k3(logp, ref).mean(), "one value per token"),
    (lambda logp, ref: k3(logp, ref) + 0.1, "not the expected values"),
])
def test_k3_mistakes_are_named(capsys, wrong, words):
    result, out = _capture(capsys, pg_kl.check_k3, wrong)
    assert result is False and words in out


def test_k3_reference_passes(capsys):
    assert _capture(capsys, pg_kl.check_k3, k3)[0] is True


def _enumerate(weights):
    def gradient(logits, ref_probs, estimator):
        theta = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(theta, 0)
        w = {"detached": logp.exp().detach(), "live": logp.exp()}[weights]
        return torch.autograd.grad((w * estimator(logp, ref_probs.log())).sum(), theta)[0]
    return gradient


def test_expected_gradient(capsys):
    assert _capture(capsys, pg_kl.check_expected_gradient, _enumerate("detached"))[0] is True
    result, out = _capture(capsys, pg_kl.check_expected_gradient, _enumerate("live"))
    assert result is False and "wrong for k1" in out and "differentiated the sampling weights" in out


def test_k3_in_float32_passes(capsys):
    # Within the checkers' tolerance (rtol 1e-5) it passes outright; past it, within float32's, with a note.
    result, out = _capture(capsys, pg_kl.check_k3, lambda logp, ref: k3(logp.float(), ref.float()))
    assert result is True and out.startswith("✓"), out


def _sg(t):
    return t.detach()


def test_k3_straight_through_right_answers_pass(capsys):
    for right in (k3_straight_through,
                  lambda logp, ref: _sg(k3(logp, ref)) + k2(logp, ref) - _sg(k2(logp, ref)),
                  lambda logp, ref: _sg(k3(logp, ref)) + (k2(logp, ref) - _sg(k2(logp, ref))).float()):
        result, out = _capture(capsys, pg_kl.check_k3_straight_through, right)
        assert result is True and out.startswith("✓"), out
    result, out = _capture(capsys, pg_kl.check_k3_straight_through,
                           lambda logp, ref: k3_straight_through(logp.float(), ref.float()))
    assert result is True and out.startswith("✓"), out
    assert _capture(capsys, pg_kl.check_k3_straight_through, None)[0] is None


@pytest.mark.parametrize("wrong, words", [
    (k3, "plain k3"),
    (k2, "value is k2's"),
    (lambda logp, ref: _sg(k2(logp, ref)) + k3(logp, ref) - _sg(k3(logp, ref)), "swapped"),
    (lambda logp, ref: k3(logp, ref) + k2(logp, ref) - _sg(k2(logp, ref)), "k3 was not detached"),
    (lambda logp, ref: _sg(k3(logp, ref)) + k1(logp, ref) - _sg(k1(logp, ref)), "k1's"),
    (lambda logp, ref: _sg(k3(logp, ref)) - k2(logp, ref) + _sg(k2(logp, ref)), "wrong sign"),
    (lambda logp, ref: _sg(k3(logp, ref)), "carries no gradient"),
    (lambda logp, ref: _sg(k3(logp, ref)) + k2(logp, ref), "k3 + k2"),
    (lambda logp, ref: k3_straight_through(ref, logp), "upside down"),
    (lambda logp, ref: k3_straight_through(logp, ref).mean(), "one value per token"),
    (lambda logp, ref: k3_straight_through(logp, ref) + 0.1, "not the expected values"),
    (lambda logp, ref: _sg(k3(logp, ref)) + 2 * k2(logp, ref) - _sg(2 * k2(logp, ref)), "½ of k2"),
])
def test_k3_straight_through_mistakes_are_named(capsys, wrong, words):
    result, out = _capture(capsys, pg_kl.check_k3_straight_through, wrong)
    assert result is False and words in out, out


def _slip(slip):
    def gradient(logits, ref_probs, estimator):
        return pg_kl._enumerated_gradient(logits, ref_probs, estimator, weights="detached", slip=slip)
    return gradient


def _mean_over_x(logits, ref_probs, estimator):
    theta = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, 0)
    return torch.autograd.grad((logp.exp().detach() * estimator(logp, ref_probs.log())).mean(), theta)[0]


def _value_gradient_minus_score_term(logits, ref_probs, estimator):
    """The other right form: ∇E[k] − E[k ∇log π]."""
    theta = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, 0)
    values = estimator(logp, ref_probs.log())
    value_gradient = torch.autograd.grad((logp.exp() * values).sum(), theta, retain_graph=True)[0]
    score_term = torch.autograd.grad((logp.exp().detach() * values.detach() * logp).sum(), theta)[0]
    return value_gradient - score_term


def test_expected_gradient_other_right_form_passes(capsys):
    assert _capture(capsys, pg_kl.check_expected_gradient, _value_gradient_minus_score_term)[0] is True


@pytest.mark.parametrize("wrong, words", [
    (_slip("unlogged_ref"), "passed ref_probs"),
    (_slip("swapped"), "arguments are swapped"),
    (_slip("wrt_probs"), "with respect to the probabilities"),
    (_slip("wrt_logp"), "with respect to log π"),
    (_mean_over_x, "averaged over the outcomes"),
    (lambda logits, ref_probs, estimator: -_enumerate("detached")(logits, ref_probs, estimator), "sign is flipped"),
])
def test_expected_gradient_slips_are_named(capsys, wrong, words):
    result, out = _capture(capsys, pg_kl.check_expected_gradient, wrong)
    assert result is False and words in out, out


def test_expected_gradient_names_a_wrong_shape_and_an_unweighted_mean(capsys):
    right = _enumerate("detached")
    result, out = _capture(capsys, pg_kl.check_expected_gradient,
                           lambda logits, ref_probs, estimator: right(logits, ref_probs, estimator).unsqueeze(0))
    assert result is False and "wrong shape" in out, out

    def unweighted_mean(logits, ref_probs, estimator):
        theta = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(theta, dim=0)
        return torch.autograd.grad(estimator(logp, ref_probs.log()).mean(), theta)[0]

    result, out = _capture(capsys, pg_kl.check_expected_gradient, unweighted_mean)
    assert result is False and "plain mean" in out, out
    result, out = _capture(capsys, pg_kl.check_expected_gradient,
                           lambda logits, ref_probs, estimator: right(logits.float(), ref_probs.float(), estimator))
    assert result is True, out


def test_reinforce_checker_names_std_normalised_advantages_and_a_stray_half(capsys):
    def loss(scale_by_std, factor):
        def fn(logits, arms, rewards, means):
            logp = torch.log_softmax(logits, dim=-1)
            advantage = rewards - (logp.exp() * means).sum().detach()
            if scale_by_std:
                advantage = advantage / rewards.std()
            return -factor * (advantage * logp[arms]).mean()
        return fn

    result, out = _capture(capsys, pg_kl.check_reinforce_loss, loss(True, 1.0))
    assert result is False and "standard deviation" in out, out
    result, out = _capture(capsys, pg_kl.check_reinforce_loss, loss(False, 0.5))
    assert result is False and "factor ½" in out, out
    assert _capture(capsys, pg_kl.check_reinforce_loss, loss(False, 1.0))[0] is True


def test_optimal_baseline_checker_names_the_per_coordinate_baseline(capsys):
    def per_coordinate(logits, means):
        probs = torch.softmax(logits, dim=-1)
        scores = torch.eye(len(probs), dtype=probs.dtype) - probs           # row a: e_a − π
        weights = probs[:, None] * scores ** 2                              # π_a (e_a − π)_k²
        return (weights * means[:, None]).sum(0) / weights.sum(0)

    result, out = _capture(capsys, pg_kl.check_optimal_baseline, per_coordinate)
    assert result is False and "per-coordinate" in out, out


def test_optimal_baseline_checker_names_the_arms_weighted_without_their_probability(capsys):
    def unweighted(logits, means):
        probs = torch.softmax(logits, -1)
        squared = 1 - 2 * probs + (probs ** 2).sum()
        return (means * squared).sum() / squared.sum()

    result, out = _capture(capsys, pg_kl.check_optimal_baseline, unweighted)
    assert result is False and "carries its probability π_a" in out


def _raw_logits(exp_weights):
    """log π written as the raw logits θ (no log_softmax), weighted by π_θ or by exp(θ)."""
    def gradient(logits, ref_probs, estimator):
        theta = logits.clone().requires_grad_(True)
        weights = (theta.exp() if exp_weights else torch.softmax(theta, dim=0)).detach()
        return torch.autograd.grad((weights * estimator(theta, ref_probs.log())).sum(), theta)[0]
    return gradient


def test_expected_gradient_names_the_raw_logits_slip_apart_from_a_detached_log_pi(capsys):
    # For k1 both slips give π; the checker names the one that matches the answer on k2 and k3 as well.
    result, out = _capture(capsys, pg_kl.check_expected_gradient, _raw_logits(False))
    assert result is False and "raw logits θ as log π" in out and "exp(θ) are not π_θ" not in out, out
    result, out = _capture(capsys, pg_kl.check_expected_gradient, _raw_logits(True))
    assert result is False and "raw logits θ as log π" in out and "exp(θ) are not π_θ" in out, out
    result, out = _capture(capsys, pg_kl.check_expected_gradient, _slip("wrt_logp"))
    assert result is False and "with respect to log π" in out and "raw logits" not in out, out
    assert _capture(capsys, pg_kl.check_expected_gradient, _enumerate("detached"))[0] is True


def _later(kl):
    return kl.flip(1).cumsum(1).flip(1)


def test_kl_credit_right_answers_pass(capsys):
    assert _capture(capsys, pg_kl.check_kl_credit, pg_kl.reference_kl_credit)[0] is True
    by_hand = lambda rewards, kl, beta: rewards.unsqueeze(1) - beta * _later(kl)  # noqa: E731
    assert _capture(capsys, pg_kl.check_kl_credit, by_hand)[0] is True
    looped = lambda rewards, kl, beta: torch.stack(  # noqa: E731
        [rewards - beta * kl[:, t:].sum(1) for t in range(kl.shape[1])], dim=1)
    assert _capture(capsys, pg_kl.check_kl_credit, looped)[0] is True


@pytest.mark.parametrize("wrong, words", [
    (lambda r, kl, b: r.unsqueeze(1) - b * kl, "its own log-ratio only"),
    (lambda r, kl, b: (r.unsqueeze(1) - b * kl.sum(1, keepdim=True)).expand_as(kl), "whole response"),
    (lambda r, kl, b: r.unsqueeze(1) - b * (_later(kl) - kl), "own log-ratio is missing"),
    (lambda r, kl, b: r.unsqueeze(1) - b * kl.cumsum(1), "prefix sum"),
    (lambda r, kl, b: r.unsqueeze(1) + b * _later(kl), "wrong sign"),
    (lambda r, kl, b: -b * _later(kl), "reward R is missing"),
    (lambda r, kl, b: r.unsqueeze(1) - _later(kl), "β is missing"),
    (lambda r, kl, b: (r.unsqueeze(1) - b * _later(kl))[:, 0], "one credit per token"),
    (lambda r, kl, b: r.unsqueeze(1) - b * _later(kl) + 0.01, "not the expected values"),
])
def test_kl_credit_mistakes_are_named(capsys, wrong, words):
    result, out = _capture(capsys, pg_kl.check_kl_credit, wrong)
    assert result is False and words in out, out


def test_kl_credit_reference_is_the_sequence_toys_credit():
    # the credit kl_sequence's "k1_in_reward" placement uses: the same library calls, checked on a hand example
    rewards, kl = torch.tensor([1.0], dtype=torch.float64), torch.tensor([[0.2, -0.1, 0.4]], dtype=torch.float64)
    expected = torch.tensor([[1 - 0.5 * 0.5, 1 - 0.5 * 0.3, 1 - 0.5 * 0.4]], dtype=torch.float64)
    assert torch.allclose(pg_kl.reference_kl_credit(rewards, kl, 0.5), expected, atol=1e-12)


def test_expected_gradient_names_the_reference_weighting_and_hints_at_enumeration(capsys):
    def reference_weighted(logits, ref_probs, estimator):
        theta = logits.clone().requires_grad_(True)
        values = estimator(torch.log_softmax(theta, 0), ref_probs.log())
        return torch.autograd.grad((ref_probs * values).sum(), theta)[0]

    result, out = _capture(capsys, pg_kl.check_expected_gradient, reference_weighted)
    assert result is False and "π_ref(x)" in out, out

    def sampled(logits, ref_probs, estimator):  # a Monte Carlo estimate, not the enumeration
        theta = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(theta, 0)
        x = torch.multinomial(logp.exp().detach(), 200, replacement=True, generator=torch.Generator().manual_seed(0))
        return torch.autograd.grad(estimator(logp[x], ref_probs.log()[x]).mean(), theta)[0]

    result, out = _capture(capsys, pg_kl.check_expected_gradient, sampled)
    assert result is False and "by enumeration" in out, out



def test_expected_gradient_names_probabilities_as_log_probabilities_and_squared_weights(capsys):
    def probs_as_logp(logits, ref_probs, estimator):
        theta = logits.clone().requires_grad_(True)
        probs = torch.softmax(theta, 0)
        return torch.autograd.grad((probs.detach() * estimator(probs, ref_probs.log())).sum(), theta)[0]

    def squared(logits, ref_probs, estimator):
        theta = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(theta, 0)
        return torch.autograd.grad((logp.exp().detach() ** 2 * estimator(logp, ref_probs.log())).sum(), theta)[0]

    for wrong, words in ((probs_as_logp, "probabilities π (softmax)"), (squared, "twice")):
        result, out = _capture(capsys, pg_kl.check_expected_gradient, wrong)
        assert result is False and words in out and "by enumeration" not in out, out


@pytest.mark.parametrize("wrong, words", [
    (lambda r, kl, b: rlbook.kl.kl_in_reward(r, kl, b, torch.ones_like(kl)), "shaped rewards"),
    (lambda r, kl, b: -b * _later(kl) + torch.nn.functional.pad(r.unsqueeze(1), (kl.shape[1] - 1, 0)),
     "last token only"),
])
def test_kl_credit_names_the_shaped_rewards_and_a_reward_on_the_last_token_only(capsys, wrong, words):
    result, out = _capture(capsys, pg_kl.check_kl_credit, wrong)
    assert result is False and words in out, out


@pytest.mark.parametrize("wrong, words", [
    (lambda r, kl, b: r.unsqueeze(1) - b * _later(kl) / kl.shape[1], "divided by the length T"),
    (lambda r, kl, b: rlbook.advantages.gae(rlbook.kl.kl_in_reward(r, kl, b, torch.ones_like(kl)),
                                            torch.zeros_like(kl), 0.99, 1.0)[0], "γ = 0.99"),
])
def test_kl_credit_names_a_per_length_sum_and_a_discount(capsys, wrong, words):
    result, out = _capture(capsys, pg_kl.check_kl_credit, wrong)
    assert result is False and words in out, out


@pytest.mark.parametrize("gamma", [0.98, 0.9, 0.7])
def test_kl_credit_fits_any_discount(capsys, gamma):
    # Not only a listed γ: the checker fits γ from the answer's last two tokens and names it.
    wrong = lambda r, kl, b: rlbook.advantages.gae(rlbook.kl.kl_in_reward(r, kl, b, torch.ones_like(kl)),  # noqa: E731
                                                   torch.zeros_like(kl), gamma, 1.0)[0]
    result, out = _capture(capsys, pg_kl.check_kl_credit, wrong)
    assert result is False and f"γ = {gamma:g}" in out and "undiscounted" in out, out


def test_kl_credit_names_the_mean_of_the_future(capsys):
    wrong = lambda r, kl, b: r.unsqueeze(1) - b * _later(kl) / torch.arange(kl.shape[1], 0, -1, dtype=kl.dtype)  # noqa: E731
    result, out = _capture(capsys, pg_kl.check_kl_credit, wrong)
    assert result is False and "mean" in out and "γ" not in out, out
