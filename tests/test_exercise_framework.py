"""rlbook.exercises.framework.FunctionExercise: each branch of the declared checker's verdict."""
import pytest
import torch

from rlbook.exercises.framework import NOT_ATTEMPTED, FunctionExercise

CASES = [(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), 2.0), (torch.tensor([-1.0, 0.5], dtype=torch.float64), 3.0)]

square_times = FunctionExercise(
    "square_times", what="scaled square", cases=lambda: CASES, reference=lambda x, c: c * x**2,
    mistakes=lambda x, c: {"no_square": (c * x, "you forgot the square"), "no_scale": (x**2, "you forgot c")},
    label=lambda x, c: f"c={c}", wrong="wrong — ",
    checks=(lambda result, reference, x, c: "one value per entry" if result.shape != x.shape else None,),
    float32_success="right, in float32", success="right on every case")


def test_right_answer_passes_with_the_success_line(capsys):
    assert square_times(lambda x, c: c * x * x) is True
    assert capsys.readouterr().out == "✓ right on every case\n"


def test_float32_answer_passes_with_its_own_line(capsys):
    assert square_times(lambda x, c: (c * x.float() ** 2 * (1 + 5e-5))) is True
    assert capsys.readouterr().out == "✓ right, in float32\n"


@pytest.mark.parametrize("fn, message", [
    (lambda x, c: c * x, "✗ wrong — you forgot the square\n"),
    (lambda x, c: x**2, "✗ wrong — you forgot c\n"),
    (lambda x, c: x.sum(), "✗ one value per entry\n"),
    (lambda x, c: x * 0, "✗ wrong — not the expected values: expected [2.0, 8.0, 18.0]…, got [0.0, 0.0, 0.0]…\n"),
    (lambda x, c: 1 / 0, "✗ c=2.0: your function raised ZeroDivisionError: division by zero\n"),
])
def test_a_wrong_answer_is_named_or_shown(fn, message, capsys):
    assert square_times(fn) is False
    assert capsys.readouterr().out == message


def test_a_later_case_can_fail_after_an_earlier_one_passes(capsys):
    assert square_times(lambda x, c: 2.0 * x**2) is False  # right for c = 2, not for c = 3
    assert "expected [3.0, 0.75]" in capsys.readouterr().out


def test_unattempted_and_bad_input(capsys):
    def stub(x, c):
        raise NotImplementedError

    assert square_times(stub) is None and capsys.readouterr().out == NOT_ATTEMPTED + "\n"
    assert square_times(None) is None and "Nothing to check yet" in capsys.readouterr().out
    with pytest.raises(ValueError, match="scaled square"):
        square_times("x**2")


def test_it_reads_like_the_function_it_replaces():
    assert square_times.__name__ == "square_times" and square_times.__module__ == __name__
    assert "scaled square" in square_times.__doc__
