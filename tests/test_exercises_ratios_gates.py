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


def not_yet(*args):
    raise NotImplementedError


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
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a, tp, tn) * r, "w(r) · r"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r + 1, a, tp, tn), "centred at r = 1"),
    (check_sapo_gate_weight, lambda r, a, tp, tn: right_gate_weight(r, a, tn, tp), "swapped"),
]


@pytest.mark.parametrize("checker, fn, phrase", WRONG_ANSWERS)
def test_checkers_name_the_mistake(checker, fn, phrase, capsys):
    assert checker(fn) is False
    assert phrase in capsys.readouterr().out


@pytest.mark.parametrize("checker, right", [(check_gspo_sequence_ratio, right_sequence_ratio),
                                            (check_sapo_gate_weight, right_gate_weight)])
def test_checkers_accept_the_right_answer_and_wait_for_an_attempt(checker, right, capsys):
    assert checker(right) is True
    assert checker(not_yet) is None
    assert checker(None) is None
    out = capsys.readouterr().out
    assert "Not attempted" in out and "Nothing to check yet" in out


def test_reference_gate_weight_is_one_on_policy():
    ratio = torch.ones(3, dtype=torch.float64)
    weight = reference_gate_weight(ratio, torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64), 1.0, 5.0)
    assert torch.allclose(weight, torch.ones(3, dtype=torch.float64))
