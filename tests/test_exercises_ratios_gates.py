"""The self-checking exercises of lessons 12 (GSPO's sequence ratio) and 13 (SAPO's gate weight)."""

import math

import pytest
import torch

from rlbook.exercises.gates import check_sapo_gate_weight, reference_gate_weight
from rlbook.exercises.ratios import check_gspo_sequence_ratio


def right_sequence_ratio(logp, old_logp, mask):
    return torch.exp(((logp - old_logp) * mask).sum(1) / mask.sum(1))


def right_gate_weight(ratio, advantages, tau_pos, tau_neg):
    tau = torch.where(advantages > 0, tau_pos, tau_neg)
    sig = torch.sigmoid(tau * (ratio - 1))
    return 4 * sig * (1 - sig)


def tau(a, tp, tn):
    return torch.where(a > 0, tp, tn)


WRONG_ANSWERS = [
    (check_gspo_sequence_ratio, lambda l, o, m: torch.exp(((l - o) * m).sum(1)), "no length normalisation"),
    (check_gspo_sequence_ratio, lambda l, o, m: ((l - o).exp() * m).sum(1) / m.sum(1), "arithmetic mean"),
    (check_gspo_sequence_ratio, lambda l, o, m: torch.exp((l - o).mean(1)), "padding was included"),
    (check_gspo_sequence_ratio, lambda l, o, m: torch.exp(((l - o) * m).sum(1) / m.shape[1]), "padded width"),
    (check_gspo_sequence_ratio, lambda l, o, m: torch.exp((l - o).sum(1) / m.sum(1)), "without the mask"),
    (check_gspo_sequence_ratio, lambda l, o, m: torch.exp(((o - l) * m).sum(1) / m.sum(1)), "upside down"),
    (check_gspo_sequence_ratio, lambda l, o, m: (l - o).exp(), "one ratio per sequence"),
    (check_gspo_sequence_ratio, lambda l, o, m: ((l - o) * m).sum(1) / m.sum(1), "this is log s_i"),
    (check_gspo_sequence_ratio, lambda l, o, m: torch.exp(((l - o) * m).sum() / m.sum()).expand(l.shape[0]),
     "one ratio for the whole batch"),
    (check_gspo_sequence_ratio, lambda l, o, m: torch.exp(((l - o) * m).sum() / m.sum()), "got one number"),
    (check_gspo_sequence_ratio, lambda l, o, m: 1 / 0, "ZeroDivisionError"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a, tp, tn) / 4, "factor 4"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a, tp, tn) * tau(a, tp, tn) / 4,
     "σ(τ(r − 1)) alone"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: torch.sigmoid(tau(a, tp, tn) * (r - 1)) * 4 / tau(a, tp, tn),
     "the gate f(r) itself"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a, tp, tn) * r, "g(r) · r = w(r)"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r + 1, a, tp, tn), "centred at r = 1"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a, tn, tp), "swapped"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: torch.cosh(tau(a, tp, tn) * (r - 1)) ** -2, "without the ½"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a + (a == 0), tp, tn), "A ≥ 0 is the slip"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a, tp, tp), "τ_pos for every token"),
]


@pytest.mark.parametrize("checker, fn, phrase", WRONG_ANSWERS)
def test_checkers_name_the_mistake(checker, fn, phrase, capsys):
    assert checker(fn) is False
    assert phrase in capsys.readouterr().out


@pytest.mark.parametrize("checker, right", [(check_gspo_sequence_ratio, right_sequence_ratio),
                                            (check_sapo_gate_weight, right_gate_weight)])
def test_checkers_accept_the_right_answer(checker, right, capsys):
    assert checker(right) is True


def test_the_sech_form_is_accepted(capsys):
    assert check_sapo_gate_weight(lambda r, a, tp, tn: torch.cosh(tau(a, tp, tn) * (r - 1) / 2) ** -2) is True


# --- lesson 13's exercises 2-4: SAPO's τ → ∞ limit, the half-weight τ, CISPO's sign flip -----------

from rlbook.exercises.gates import (check_gate_limit, check_half_weight_temperature,  # noqa: E402
                                   check_sign_flip_threshold, reference_half_weight_temperature,
                                   reference_sign_flip_threshold)


def _ppo(r, a, eps=0.2):
    return torch.where(a > 0, torch.where(r > 1 + eps, 0 * r, r), torch.where(r < 1 - eps, 0 * r, r))


@pytest.mark.parametrize("right", [lambda r, a: (r == 1).double(), lambda r, a: torch.where(r == 1, r, 0 * r),
                                   lambda r, a: [1.0 if x == 1 else 0.0 for x in r.tolist()]])
def test_gate_limit_accepts_every_right_form(right, capsys):
    assert check_gate_limit(right) is True
    assert "not PPO" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, phrase", [
    (_ppo, "PPO's clipped coefficient"),
    (lambda r, a: r * ((r - 1).abs() <= 0.2).double(), "hard symmetric band"),
    (lambda r, a: r.clone(), "plain importance sampling"),
    (lambda r, a: torch.ones_like(r), "does not stay 1"),
    (lambda r, a: torch.zeros_like(r), "g(1) = sech²(0) = 1"),
    (lambda r, a: ((r - 1).abs() <= 0.2).double(), "indicator of PPO's band"),
    (lambda r, a: 1 / 0, "ZeroDivisionError"),
])
def test_gate_limit_names_the_mistake(wrong, phrase, capsys):
    assert check_gate_limit(wrong) is False
    assert phrase in capsys.readouterr().out


def test_numeric_references_are_the_closed_forms():
    assert reference_half_weight_temperature() == pytest.approx(10 * math.log(1 + math.sqrt(2)), rel=1e-6)
    assert reference_sign_flip_threshold() == pytest.approx(1 / math.e, rel=1e-6)


@pytest.mark.parametrize("answer, ok, phrase", [
    (8.81, True, "10·ln(1 + √2)"),
    (10 * math.log(1 + math.sqrt(2)), True, "10·ln(1 + √2)"),
    (4.407, False, "drops the ½"),
    (13.17, False, "sech(τ·0.1) = ½"),
    (math.log(8) / 0.2, False, "tail"),
    (6.931, False, "ln(2)/0.1"),
    (3.0, False, "solve sech²"),
    ("8.8", False, "as a number"),
])
def test_half_weight_temperature(answer, ok, phrase, capsys):
    assert check_half_weight_temperature(answer) is ok
    assert phrase in capsys.readouterr().out


@pytest.mark.parametrize("answer, ok, phrase", [
    (0.3679, True, "1/e"),
    (0.37, True, "1/e"),
    (0.36, False, "solve 1 + log π = 0"),
    (1 / math.e, True, "1/e"),
    (-1, False, "log p*"),
    (math.e, False, "that is e"),
    (1.0, False, "shrinks the update"),
    (0.5, False, "still points along A"),
    (0.1, False, "solve 1 + log π = 0"),
    (True, False, "as a number"),
])
def test_sign_flip_threshold(answer, ok, phrase, capsys):
    assert check_sign_flip_threshold(answer) is ok
    assert phrase in capsys.readouterr().out


@pytest.mark.parametrize("checker", [check_gate_limit, check_half_weight_temperature, check_sign_flip_threshold])
def test_unattempted_answers_return_none(checker, capsys):
    assert checker(None) is None
    assert "Nothing to check yet" in capsys.readouterr().out


def test_reference_gate_weight_is_one_on_policy():
    ratio = torch.ones(3, dtype=torch.float64)
    weight = reference_gate_weight(ratio, torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64), 1.0, 5.0)
    assert torch.allclose(weight, torch.ones(3, dtype=torch.float64))


# --- lesson 12's second exercise: GMPO's sign-dependent clip in log space --------------------

from rlbook.exercises.ratios import check_gmpo_log_clip  # noqa: E402


def _gmpo(per_token, mask):
    return torch.exp((per_token * mask).sum(1) / mask.sum(1))


def right_gmpo(logp, old_logp, advantages, mask, eps_low, eps_high):
    log_ratio = logp - old_logp
    clipped = log_ratio.clamp(-eps_low, eps_high)
    positive = advantages.unsqueeze(1) > 0
    return _gmpo(torch.where(positive, torch.minimum(log_ratio, clipped), torch.maximum(log_ratio, clipped)), mask)


def _ratio_space(l, o, a, m, el, eh):
    r = (l - o).exp()
    c = r.clamp(1 - el, 1 + eh)
    return _gmpo(torch.where(a.unsqueeze(1) > 0, torch.minimum(r, c), torch.maximum(r, c)).log(), m)


def _after_mean(l, o, a, m, el, eh):
    mean = ((l - o) * m).sum(1) / m.sum(1)
    c = mean.clamp(-el, eh)
    return torch.where(a > 0, torch.minimum(mean, c), torch.maximum(mean, c)).exp()


def _right_tokens(l, o, a, el, eh):
    lr = l - o
    c = lr.clamp(-el, eh)
    return torch.where(a.unsqueeze(1) > 0, torch.minimum(lr, c), torch.maximum(lr, c))


def sign_flip_gmpo(logp, old_logp, advantages, mask, eps_low, eps_high):
    """GMPO's official code (callsys/GMPO): flip ℓ by sgn A, clamp to [−ε_low, ε_high], min, flip back."""
    sign = torch.sign(advantages).unsqueeze(1)
    flipped = sign * (logp - old_logp)
    return _gmpo(sign * torch.minimum(flipped, flipped.clamp(-eps_low, eps_high)), mask)


GMPO_WRONG = [
    (lambda l, o, a, m, el, eh: _gmpo(torch.minimum(l - o, (l - o).clamp(-el, eh)), m), "same side is clipped for both"),
    (lambda l, o, a, m, el, eh: _gmpo(torch.maximum(l - o, (l - o).clamp(-el, eh)), m), "same side is clipped for both"),
    (lambda l, o, a, m, el, eh: right_gmpo(l, o, -a, m, el, eh), "signs are swapped"),
    (lambda l, o, a, m, el, eh: _gmpo((l - o).clamp(-el, eh), m), "both sides are clipped"),
    (_ratio_space, "ratio space"),
    (lambda l, o, a, m, el, eh: right_gmpo(l, o, a, m, eh, el), "swapped: the log-ratio"),
    (lambda l, o, a, m, el, eh: right_gmpo(l, o, a, m, el, el), "ε_low is used on both sides"),
    (lambda l, o, a, m, el, eh: right_gmpo(l, o, a, m, eh, eh), "the same as using ε_high on both sides"),
    (lambda l, o, a, m, el, eh: right_gmpo(l, o, a, m, el, eh).log(), "this is log ρ_i"),
    (lambda l, o, a, m, el, eh: _gmpo(l - o, m), "nothing is clipped"),
    (lambda l, o, a, m, el, eh: sign_flip_gmpo(l, o, a, m, el, eh), "sign-flip trick"),
    (lambda l, o, a, m, el, eh: _gmpo(torch.where(
        torch.where(a.unsqueeze(1) > 0, (l - o) > eh, (l - o) < -el), torch.zeros_like(l), l - o), m), "dropped from the mean"),
    (lambda l, o, a, m, el, eh: a * right_gmpo(l, o, a, m, el, eh), "A_i · ρ_i"),
    (_after_mean, "after the mean"),
    (lambda l, o, a, m, el, eh: (_right_tokens(l, o, a, el, eh).exp() * m).sum(1) / m.sum(1), "arithmetic mean"),
    (lambda l, o, a, m, el, eh: _right_tokens(l, o, a, el, eh).mean(1).exp(), "padding was included"),
    (lambda l, o, a, m, el, eh: _right_tokens(l, o, a, el, eh), "one ratio per sequence"),
    (lambda l, o, a, m, el, eh: 1 / 0, "ZeroDivisionError"),
]


@pytest.mark.parametrize("fn, phrase", GMPO_WRONG)
def test_gmpo_checker_names_the_mistake(fn, phrase, capsys):
    assert check_gmpo_log_clip(fn) is False
    assert phrase in capsys.readouterr().out


def test_gmpo_checker_accepts_the_right_answer(capsys):
    assert check_gmpo_log_clip(right_gmpo) is True
