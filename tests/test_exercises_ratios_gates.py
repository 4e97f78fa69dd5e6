"""The self-checking exercises of lessons 12 (GSPO's sequence ratio) and 13 (SAPO's gate weight)."""

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
    (check_gspo_sequence_ratio, lambda l, o, m: torch.exp(((o - l) * m).sum(1) / m.sum(1)), "upside down"),
    (check_gspo_sequence_ratio, lambda l, o, m: (l - o).exp(), "one ratio per sequence"),
    (check_gspo_sequence_ratio, lambda l, o, m: 1 / 0, "ZeroDivisionError"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a, tp, tn) / 4, "factor 4"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a, tp, tn) * tau(a, tp, tn) / 4,
     "σ(τ(r − 1)) alone"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: torch.sigmoid(tau(a, tp, tn) * (r - 1)) * 4 / tau(a, tp, tn),
     "the gate f(r) itself"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a, tp, tn) * r, "g(r) · r = w(r)"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r + 1, a, tp, tn), "centred at r = 1"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a, tn, tp), "swapped"),
]


@pytest.mark.parametrize("checker, fn, phrase", WRONG_ANSWERS)
def test_checkers_name_the_mistake(checker, fn, phrase, capsys):
    assert checker(fn) is False
    assert phrase in capsys.readouterr().out


@pytest.mark.parametrize("checker, right", [(check_gspo_sequence_ratio, right_sequence_ratio),
                                            (check_sapo_gate_weight, right_gate_weight)])
def test_checkers_accept_the_right_answer(checker, right, capsys):
    assert checker(right) is True


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


GMPO_WRONG = [
    (lambda l, o, a, m, el, eh: _gmpo(torch.minimum(l - o, (l - o).clamp(-el, eh)), m), "same side is clipped for both"),
    (lambda l, o, a, m, el, eh: _gmpo(torch.maximum(l - o, (l - o).clamp(-el, eh)), m), "same side is clipped for both"),
    (lambda l, o, a, m, el, eh: right_gmpo(l, o, -a, m, el, eh), "signs are swapped"),
    (lambda l, o, a, m, el, eh: _gmpo((l - o).clamp(-el, eh), m), "both sides are clipped"),
    (_ratio_space, "ratio space"),
    (lambda l, o, a, m, el, eh: right_gmpo(l, o, a, m, eh, el), "swapped: the log-ratio"),
    (lambda l, o, a, m, el, eh: _gmpo(l - o, m), "nothing is clipped"),
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
