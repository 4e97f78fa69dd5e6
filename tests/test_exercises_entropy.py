"""Lesson 16's exercise: the first-order entropy change of a natural policy-gradient step."""

import torch

from rlbook.exercises.entropy import check_entropy_change


def correct(logits, advantages, lr):
    log_p = torch.log_softmax(logits, 0)
    p = log_p.exp()
    return -lr * float((p * (log_p - (p * log_p).sum()) * (advantages - (p * advantages).sum())).sum())


def test_correct_answer_passes(capsys):
    assert check_entropy_change(correct) is True
    assert "✓" in capsys.readouterr().out


def test_typical_mistakes_are_named(capsys):
    def vanilla(z, a, lr):
        p = torch.softmax(z, 0)
        return correct(z, p * (a - (p * a).sum()), lr)

    def uncentred(z, a, lr):
        log_p = torch.log_softmax(z, 0)
        return -lr * float((log_p.exp() * log_p * a).sum())

    def uniform(z, a, lr):
        log_p = torch.log_softmax(z, 0)
        return -lr * float(((log_p - log_p.mean()) * (a - a.mean())).mean())

    cases = {"sign is flipped": lambda z, a, lr: -correct(z, a, lr), "vanilla step": vanilla,
             "not centred": uncentred, "uniform over actions": uniform,
             "η is missing": lambda z, a, lr: correct(z, a, lr) / lr}
    for phrase, fn in cases.items():
        assert check_entropy_change(fn) is False
        assert phrase in capsys.readouterr().out


def test_errors(capsys):
    assert check_entropy_change(lambda z, a, lr: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert check_entropy_change(lambda z, a, lr: z) is False


def test_the_exact_change_is_named_not_taken_for_the_prediction(capsys):
    from rlbook.entropy import entropy_change, policy_gradient_logit_step

    def exact(z, a, lr):
        return torch.tensor(entropy_change(z, policy_gradient_logit_step(z, a, lr, natural=True)))

    assert check_entropy_change(exact) is False
    assert "exact change" in capsys.readouterr().out
