"""rlbook.exercises.framework.FunctionExercise: each branch of the declared checker's verdict."""
import pytest
import torch

from rlbook.exercises.framework import NOT_ATTEMPTED, FunctionExercise, _one_number, _within

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


# Declared as groups: cases run together, a mistake named only when it fits every case of its group.
NUMBER_CASES = [(1.0, "a"), (2.0, "a"), (3.0, "b"), (-1.0, "b")]

doubled = FunctionExercise(
    "doubled", what="doubling", cases=lambda: NUMBER_CASES, reference=lambda x, group: 2 * x,
    mistakes=lambda x, group: {"square": (x * x, "you squared it"), "plus_two": (x + 2, "you added two")},
    label=lambda x, group: f"x={x}", checks=(_one_number(label=lambda x, group: f"x={x}"),), close=_within(1e-9),
    together=lambda x, group: group, across=True, wrong=lambda x, group: f"(group {group}) ",
    otherwise=lambda result, reference, x, group, wrong, of: f"{wrong} of {of} wrong, first x={x}",
    success="doubles every number")


def test_a_group_names_a_mistake_only_when_it_fits_every_case(capsys):
    # x + 2 equals 2x at x = 2 only: across group "a" it is told by x = 1
    assert doubled(lambda x, group: x + 2) is False
    assert capsys.readouterr().out == "✗ (group a) you added two\n"
    # right on group a, squared on group b (x² = 2x nowhere there): named for group b
    assert doubled(lambda x, group: 2 * x if group == "a" else x * x) is False
    assert capsys.readouterr().out == "✗ (group b) you squared it\n"
    # squared on x = 3 only: no mistake fits the whole group, so the counts are given
    assert doubled(lambda x, group: x * x if x == 3.0 else 2 * x) is False
    assert capsys.readouterr().out == "✗ 1 of 2 wrong, first x=3.0\n"


def test_a_group_runs_every_case_before_judging(capsys):
    # wrong on x = 1 but raising on x = 2 of the same group: the error is reported first
    assert doubled(lambda x, group: 0.0 if x == 1.0 else 1 / 0) is False
    assert capsys.readouterr().out == "✗ x=2.0: your function raised ZeroDivisionError: division by zero\n"
    assert doubled(lambda x, group: [x, x]) is False
    assert capsys.readouterr().out == "✗ x=1.0: return one number, got shape (2,)\n"


def test_nan_is_never_within_tolerance(capsys):
    assert doubled(lambda x, group: float("nan")) is False
    assert capsys.readouterr().out == "✗ 2 of 2 wrong, first x=1.0\n"
    assert doubled(lambda x, group: 2 * x) is True and capsys.readouterr().out == "✓ doubles every number\n"


def _doubling_in_one_group(**options) -> FunctionExercise:
    """The doubling exercise with one mistake (the square), all its cases run as one group."""
    return FunctionExercise(
        "doubling", what="doubling", cases=lambda: NUMBER_CASES, reference=lambda x, group: 2 * x,
        mistakes=lambda x, group: {"square": (x * x, "you squared it")}, close=_within(1e-9),
        together=lambda *case: "all", **options)


def test_named_and_marks_shape_the_message(capsys):
    plain = _doubling_in_one_group(
        named=lambda hint, result, reference, x, group: f"x={x}: {float(reference)} not {float(result)}, {hint}",
        marks=("", ""), success="Correct.")
    # each case on its own (across=False): the first wrong case is diagnosed, x = 1 where x² ≠ 2x
    assert plain(lambda x, group: x * x) is False
    assert capsys.readouterr().out == "x=1.0: 2.0 not 1.0, you squared it\n"
    assert plain(lambda x, group: 2 * x) is True and capsys.readouterr().out == "Correct.\n"


def test_or_first_names_the_mistake_of_the_first_wrong_case(capsys):
    either = _doubling_in_one_group(across=True, or_first=True, success="doubles every number")
    # squared on x = 1 only: no mistake fits all four cases, but the square fits the first wrong one
    assert either(lambda x, group: x * x if x == 1.0 else 2 * x) is False
    assert capsys.readouterr().out == "✗ you squared it\n"
    assert either(lambda x, group: 0.0) is False
    assert capsys.readouterr().out == "✗ not the expected values: expected [2.0]…, got [0.0]…\n"


def test_run_returns_the_answer_as_it_is_or_the_error():
    from rlbook.exercises.framework import _run

    def stub(text):
        raise NotImplementedError

    assert _run(lambda text: (text, 1), "a") == (("a", 1), None)
    assert _run(stub, "a") == (None, NOT_ATTEMPTED)
    assert _run(lambda text: int(text), "a")[1].startswith("your function raised ValueError: invalid literal")
