"""Lesson 00's checker accepts the unbiased pass@k estimator, names the usual mistakes, and tolerates a stub."""

import pytest

from rlbook.exercises.tour import check_pass_at_k
from rlbook.metrics import pass_at_k


def test_pass_at_k_accepts_the_estimator(capsys):
    assert check_pass_at_k(pass_at_k) is True
    assert "Correct on all" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, words", [
    (lambda n, c, k: 1 - (1 - c / n) ** k, "plug-in estimate"),
    (lambda n, c, k: c / n, "pass@1 for every k"),
    (lambda n, c, k: 0.5, "compare with"),
    (lambda n, c, k: None, "returned a NoneType"),
    (lambda n, c, k: [0.1, 0.2], "one number"),
    (lambda n, c, k: 1 / 0, "ZeroDivisionError"),
])
def test_pass_at_k_names_the_mistake(wrong, words, capsys):
    assert check_pass_at_k(wrong) is False
    assert words in capsys.readouterr().out
