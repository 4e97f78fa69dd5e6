"""Every checker in rlbook.exercises treats an unattempted exercise alike: a stub still raising
NotImplementedError gets a note and None (not a ✗ and False), after one call of the stub, not two.
A checker of an exercise that asks for a number (marked ``takes = "number"``) has no stub: its
unattempted form is None, and anything but a finite number is a ✗ that says so.
This is the one test of that path: each checker's own tests check its cases and its feedback."""

import importlib
import pkgutil

import pytest

import rlbook.exercises
from rlbook.exercises.framework import NOT_ATTEMPTED


def _modules():
    return [importlib.import_module(f"rlbook.exercises.{info.name}")
            for info in pkgutil.iter_modules(rlbook.exercises.__path__) if info.name != "framework"]


def _checkers(module):
    return [getattr(module, name) for name in dir(module)
            if name.startswith("check_") and getattr(getattr(module, name), "__module__", None) == module.__name__]


def _params(takes: str):
    return [pytest.param(checker, id=f"{module.__name__.rsplit('.', 1)[1]}.{checker.__name__}")
            for module in _modules() for checker in _checkers(module)
            if getattr(checker, "takes", "function") == takes]


CHECKERS, NUMBER_CHECKERS = _params("function"), _params("number")


def test_every_exercise_module_has_a_checker():
    assert all(_checkers(module) for module in _modules())
    assert len(CHECKERS) >= 21 and len(NUMBER_CHECKERS) >= 2


@pytest.mark.parametrize("checker", CHECKERS)
def test_a_stub_is_not_attempted(checker, capsys):
    calls = []

    def stub(*args):
        calls.append(args)
        raise NotImplementedError

    assert checker(stub) is None
    assert capsys.readouterr().out == NOT_ATTEMPTED + "\n"
    assert len(calls) == 1, "the checker should stop at its first call, not probe the stub beforehand"


@pytest.mark.parametrize("checker", CHECKERS)
def test_none_is_not_attempted_and_a_non_function_is_refused(checker, capsys):
    assert checker(None) is None
    assert "Nothing to check yet" in capsys.readouterr().out
    with pytest.raises(ValueError, match="function"):
        checker(3.0)


@pytest.mark.parametrize("checker", NUMBER_CHECKERS)
def test_a_number_exercise_left_at_none_is_not_attempted_and_a_non_number_fails(checker, capsys):
    assert checker(None) is None
    assert "Nothing to check yet" in capsys.readouterr().out
    for not_a_number in (lambda: 1.0, "8.8", float("nan"), True):
        assert checker(not_a_number) is False
        assert "as a number" in capsys.readouterr().out
