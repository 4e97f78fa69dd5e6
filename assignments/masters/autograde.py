"""What the assignments' hidden tests call: the book's checkers, with their verdict as the feedback.

A hidden test (an otter-grader test case) fails by raising ``AssertionError``; its message is what
the student reads in the grade report. ``expect_checker`` runs one of ``rlbook.exercises``'
checkers, which print a verdict naming the likely mistake, and turns a verdict other than ✓ into
that message. ``expect_between`` checks a measured number of a training run against a range that
every correct solution meets on every seed (the ranges are measured in ``assignments/README.md``).
"""

from __future__ import annotations

import contextlib
import io
import math


MISSING = ("not found: the cell that defines it did not run (it raised before reaching the definition, "
           "or it was deleted)")
NOT_ATTEMPTED = "Not attempted yet: replace the `raise NotImplementedError` with your answer."


def expect_checker(checker, answer) -> None:
    """Pass when ``checker(answer)`` returns True; otherwise fail with the checker's own verdict."""
    assert answer is not None, MISSING
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        verdict = checker(answer)
    feedback = printed.getvalue().strip()
    assert verdict is True, feedback or f"{checker.__name__} did not accept the answer"


def expect_between(name: str, value, low: float, high: float, hint: str = "", *, too_low: str = "",
                   too_high: str = "") -> None:
    """Pass when ``value`` is a finite number in [low, high]; otherwise say what was measured and why it matters.

    ``too_low`` and ``too_high`` are the hints for a value below ``low`` and above ``high`` (a number out of
    range on one side has other causes than on the other); ``hint`` is said on either side.
    """
    assert value is not None, f"{name} was not computed: run every cell of the question"
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise AssertionError(f"{name} must be a number, got {type(value).__name__}") from None
    assert math.isfinite(number), f"{name} is {number}: the run diverged or was not computed"
    why = " ".join(filter(None, (too_low if number < low else too_high, hint)))
    assert low <= number <= high, f"{name} = {number:.4g}, expected in [{low}, {high}]" + (f": {why}" if why else "")


def call_answer(answer, *args):
    """``answer(*args)``, failing with a plain message when the answer is missing or still the stub."""
    assert answer is not None, MISSING
    try:
        return answer(*args)
    except NotImplementedError:
        raise AssertionError(NOT_ATTEMPTED) from None
