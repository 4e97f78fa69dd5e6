"""Lesson 18's exercise: pass@k from c correct of n samples."""

import math

from rlbook.exercises.pass_at_k import check_pass_at_k


def correct(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_correct_answer_passes(capsys):
    assert check_pass_at_k(correct) is True
    assert "✓" in capsys.readouterr().out


def test_typical_mistakes_are_named(capsys):
    cases = {"plug-in": lambda n, c, k: 1 - (1 - c / n) ** k,
             "all k samples fail": lambda n, c, k: 1 - correct(n, c, k),
             "pass@1, whatever k is": lambda n, c, k: c / n,
             "*wrong* samples": lambda n, c, k: 1 - math.comb(c, k) / math.comb(n, k)}
    for phrase, fn in cases.items():
        assert check_pass_at_k(fn) is False
        assert phrase in capsys.readouterr().out


def test_errors_and_unknown_answers(capsys):
    assert check_pass_at_k(lambda n, c, k: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert check_pass_at_k(lambda n, c, k: 0.5) is False
    assert "expected" in capsys.readouterr().out
    assert check_pass_at_k(lambda n, c, k: [0.1, 0.2]) is False
