"""The exercise checkers' one framework: an exercise declared as data, and the plumbing every checker shares.

A function exercise is ``FunctionExercise(name, what=, cases=, reference=, mistakes=, success=, ...)``: the fixed
inputs it is checked on, the reference answer, the known mistakes (each a wrong answer computed on the
same inputs, with the feedback that names it), and the verdict for a right answer. ``exercise(fn)`` runs
the reader's ``fn`` on every case and prints one verdict:

- ``None`` passed, or the exercise's stub still raising ``NotImplementedError``: "not attempted", returns
  None (a notebook that has not been worked yet runs clean);
- ``fn`` raises, or returns something that is not a number or a tensor: the error, returns False;
- the answer matches the reference on every case: ✓ ``success``, returns True;
- otherwise the first known mistake it matches is named (✗ and its feedback), else what was expected
  and what came back; returns False.

By default each case is judged as soon as it has run. ``together=`` groups cases that are run first and
judged together, and ``across=True`` names a mistake only when it fits every case of its group: for an
exercise whose mistakes a single case cannot tell apart (PPO's min and max agree wherever the clip is
inactive; a window's boundary off by one shows at one length only). ``named=`` and ``otherwise=`` word the
message (with the numbers, or the count of wrong cases); ``_within(tolerance)`` and ``_one_number()`` are
the ``close`` and the ``check`` of an exercise whose answer is one number.

Checkers whose exercise does not fit that loop (a number to give, a gradient to take, a training run)
use the same plumbing below: ``_not_attempted`` for ``None``, ``_call`` to run the reader's function
(it returns the error ``NOT_ATTEMPTED`` for the stub; ``_run`` for an answer that is not a number), ``_failed`` to turn an error into the verdict,
``_verdict`` to print it, ``_close`` / ``_diagnose`` to compare and name a mistake.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable

import torch

__all__ = ["DTYPE", "TOLERANCE", "FLOAT32_TOLERANCE", "FLOAT32_NOTE", "FLOAT32_NUMBER_NOTE", "NOT_ATTEMPTED",
           "FunctionExercise"]

DTYPE = torch.float64
# Loose enough for an answer computed in float32 (a reader's `logits.float()`: about 1e-7 relative
# error), tight enough that every named mistake, which is off by a percent or more, is told apart.
TOLERANCE = dict(rtol=1e-5, atol=1e-7)
# A right formula computed in float32 (eps ≈ 1.2e-7, and k3 = (r − 1) − log r cancels) lands within this.
FLOAT32_TOLERANCE = dict(rtol=1e-4, atol=1e-6)
FLOAT32_NOTE = ("(to float32 precision only: your function computes in float32 — the inputs are float64, so "
                "keep their dtype, e.g. avoid torch.tensor(..., dtype=torch.float32) or .float())")
# The same note for an exercise whose inputs are plain numbers (counts, a weight): its answer is one number.
FLOAT32_NUMBER_NOTE = ("(to float32 precision only: your function computes in float32 — Python floats or float64 "
                       "keep full precision)")
# The error ``_call`` returns when the reader's function is still the stub raising NotImplementedError.
NOT_ATTEMPTED = "Not attempted yet: replace the `raise NotImplementedError` with your answer."


def _not_attempted(fn, name: str) -> bool:
    """True (and says so) when ``fn`` is None; a ValueError when it is not a function."""
    if fn is None:
        print(f"Nothing to check yet: replace None with your {name} and run this cell again.")
        return True
    if not callable(fn):
        raise ValueError(f"pass your {name} as a function, got {type(fn).__name__}")
    return False


def _run(fn, *args):
    """``(result, None)`` with the reader's result as it is, or ``(None, error message)``.

    For an answer that is not a number (a completion, a tuple of parts); ``_call`` is this, then a tensor.
    A function still raising ``NotImplementedError`` gives the error ``NOT_ATTEMPTED`` itself (pass it to
    ``_failed``).
    """
    try:
        return fn(*args), None
    except NotImplementedError:  # the exercise's stub, not yet replaced by an answer
        return None, NOT_ATTEMPTED
    except Exception as error:  # the reader's code: report any failure rather than crash the cell
        return None, f"your function raised {type(error).__name__}: {error}"


def _call(fn, *args):
    """``(result, None)`` with the reader's result as a tensor, or ``(None, error message)``.

    A number or a list is converted to a float64 tensor. A function still raising
    ``NotImplementedError`` gives the error ``NOT_ATTEMPTED`` itself (pass it to ``_failed``).
    """
    result, error = _run(fn, *args)
    if error:
        return None, error
    if not isinstance(result, torch.Tensor):
        try:
            result = torch.as_tensor(result, dtype=DTYPE)
        except (TypeError, ValueError, RuntimeError):
            return None, f"your function returned a {type(result).__name__}, expected a tensor or a number"
    return result, None


def _verdict(ok: bool, success: str, failure: str) -> bool:
    print(f"✓ {success}" if ok else f"✗ {failure}")
    return ok


def _failed(error: str, context: str = "") -> bool | None:
    """The verdict on an error from ``_call``: None and a note for the stub, else False and ``context + error``."""
    if error is NOT_ATTEMPTED:
        print(NOT_ATTEMPTED)
        return None
    return _verdict(False, "", context + error)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.to(DTYPE), b.to(DTYPE), **TOLERANCE)


def _close_in_float32(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` is ``b`` to float32 precision: the right formula, computed in single precision."""
    return a.shape == b.shape and torch.allclose(a.detach().to(DTYPE), b.detach().to(DTYPE), **FLOAT32_TOLERANCE)


def _within(tolerance: float) -> Callable[[torch.Tensor, torch.Tensor], bool]:
    """A ``close`` for one-number answers: ``|result − expected| ≤ tolerance`` (NaN is never within)."""
    return lambda result, expected: abs(float(result) - float(expected)) <= tolerance


def _one_number(ask: str = "return one number", label: Callable[..., str] | None = None) -> Callable[..., str | None]:
    """A ``check`` that the answer is one number: else ``"{label}: {ask}, got shape (…)"`` (no label when None)."""
    def check(result, reference, *args) -> str | None:
        if result.numel() == 1:
            return None
        return f"{label(*args) + ': ' if label else ''}{ask}, got shape {tuple(result.shape)}"
    return check


def _as_tensor(value) -> torch.Tensor:
    """A reference or a mistake as a tensor: a tensor as it is (a float64 one, a bool mask), a number as float64."""
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value, dtype=DTYPE)


def _expected_got(result, reference) -> str:
    return (f"not the expected values: expected {reference.flatten()[:4].tolist()}…, "
            f"got {result.detach().flatten()[:4].tolist()}…")


def _diagnose(result, reference, mistakes: dict[str, tuple[torch.Tensor, str]]) -> str:
    """The hint of the first mistake ``result`` matches, or a generic message with the numbers."""
    for candidate, hint in mistakes.values():
        if candidate is not None and _close(result, _as_tensor(candidate)):
            return hint
    return _expected_got(result, reference)


def _no_label(*args) -> str:
    return ""


def _no_mistakes(*args) -> dict:
    return {}


@dataclass(frozen=True)
class FunctionExercise:
    """A checker for "write this function", declared as data; call it with the reader's function.

    - name: the checker's name (``check_...``), as the module binds it.
    - what: the function's name in the messages ("your {what}").
    - cases: a function returning the inputs, one tuple of arguments per case (fixed: seeded, or literal).
    - reference: ``reference(*args)``, the right answer (a tensor or a number).
    - mistakes: ``mistakes(*args)`` → {name: (wrong answer, feedback naming it)}, tried in order.
    - success: the ✓ line when every case matches.
    - label: ``label(*args)``, what a failure's message starts with to say which case failed ("" for one).
    - wrong: what a named mistake's or an unnamed wrong answer's message starts with (or ``wrong(*args)``).
    - close: ``close(result, expected)``, the comparison (default ``_close``: float64, ``TOLERANCE``).
    - checks: extra ``check(result, reference, *args)`` → a failure message or None, tried in order
      before the comparison (a shape, NaN in a flat group): what a wrong answer's *form* says.
    - partial: ``partial(result, reference, *args)`` → a message or None, tried after the comparison fails
      and before the mistakes (part of the answer right: say which part).
    - otherwise: ``otherwise(result, reference, *args)`` → the message when no mistake matches.
    - float32_success: when set, an answer right only to float32 precision passes with this ✓ line.
    - prepare: ``prepare(result, *args)`` → the result as compared (e.g. detached, flattened, float64).
    - doc: the checker's docstring (its ``__doc__``, as a function's would be).
    - module: the module that declares it (default: the one whose code builds it; a factory passes its caller's).
    - adapt: ``adapt(fn)`` → the function actually called (e.g. one that keeps the first of a returned pair);
      the reader's own errors, the stub's included, are still caught around it.
    - named: ``named(hint, result, reference, *args)`` → the message for a named mistake (default: ``wrong + hint``),
      for a message that shows the numbers as well as the hint.
    - together: ``together(*args)`` → a key; consecutive cases with the same key form a group, and every case
      of a group is run (its errors and ``checks`` reported in order) before any is compared. Default: each case
      is its own group. A group is judged on its first wrong case (``partial``, mistakes, ``otherwise``).
    - across: with ``together``, a mistake is named only when its answers match the reader's on every case of
      the group (a None candidate never matches), as for a rule that a single case cannot tell apart; in
      this mode ``otherwise`` also gets ``wrong=`` (how many cases of the group are wrong) and ``of=`` (its size).
    - or_first: with ``across``, when no mistake fits every case, the first that fits the first wrong case.
    - marks: the marks that start the ✓ line and a wrong answer's message (an error's stays ✗).
    """

    name: str
    what: str
    cases: Callable[[], Iterable[tuple]]
    reference: Callable[..., Any]
    success: str
    mistakes: Callable[..., dict[str, tuple[Any, str]]] = _no_mistakes
    label: Callable[..., str] = _no_label
    wrong: str | Callable[..., str] = ""
    close: Callable[[torch.Tensor, torch.Tensor], bool] = _close
    checks: tuple = field(default=())
    partial: Callable[..., str | None] | None = None
    otherwise: Callable[..., str] | None = None
    float32_success: str | None = None
    prepare: Callable[..., torch.Tensor] | None = None
    doc: str = ""
    module: str | None = None
    adapt: Callable[[Callable], Callable] | None = None
    named: Callable[..., str] | None = None
    together: Callable[..., Hashable] | None = None
    across: bool = False
    or_first: bool = False
    marks: tuple[str, str] = ("✓ ", "✗ ")

    def __post_init__(self):
        # Read like the function it replaces: its name, its docstring, and the module that declares it
        # (the caller's, as collections.namedtuple finds it).
        object.__setattr__(self, "__name__", self.name)
        object.__setattr__(self, "__doc__", self.doc or f"Check the reader's {self.what}: {self.success}")
        object.__setattr__(self, "__module__", self.module or sys._getframe(2).f_globals.get("__name__", __name__))

    def __call__(self, fn) -> bool | None:
        if _not_attempted(fn, self.what):
            return None
        call = self.adapt(fn) if self.adapt is not None else fn
        float32_only = False
        for group in self._groups():
            outcomes = []
            for args in group:
                # cloned, so that an in-place edit by the reader's function cannot change the case
                called = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
                result, error = _call(call, *called)
                if error:
                    label = self.label(*args)
                    return _failed(error, f"{label}: " if label else "")
                if self.prepare is not None:
                    result = self.prepare(result, *args)
                reference = _as_tensor(self.reference(*args))
                for check in self.checks:
                    message = check(result, reference, *args)
                    if message:
                        return _verdict(False, "", message)
                outcomes.append((result, reference, args))
            wrong = []
            for outcome in outcomes:
                result, reference, _ = outcome
                if self.close(result, reference):
                    continue
                if self.float32_success is not None and _close_in_float32(result, reference):
                    float32_only = True
                    continue
                wrong.append(outcome)
            if wrong:
                print(f"{self.marks[1]}{self._judge(outcomes, wrong)}")
                return False
        print(f"{self.marks[0]}{self.float32_success if float32_only else self.success}")
        return True

    def _groups(self) -> Iterable[list[tuple]]:
        """The cases in the order given, split into the groups that ``together`` declares (one case each by default)."""
        groups, key = [], object()
        for args in self.cases():
            new_key = self.together(*args) if self.together is not None else object()
            if not groups or new_key != key:
                groups.append([])
            groups[-1].append(args)
            key = new_key
        return groups

    def _matches(self, result, mistakes: dict) -> str | None:
        """The hint of the first of ``mistakes`` that ``result`` matches (a None candidate never does)."""
        return next((hint for candidate, hint in mistakes.values()
                     if candidate is not None and self.close(result, _as_tensor(candidate))), None)

    def _judge(self, outcomes: list[tuple], wrong: list[tuple]) -> str:
        """The message for a group with a wrong case: ``partial``, a named mistake, or ``otherwise``."""
        result, reference, args = wrong[0]
        message = self.partial(result, reference, *args) if self.partial is not None else None
        if message:
            return message
        prefix = self.wrong(*args) if callable(self.wrong) else self.wrong
        if self.across:  # the first mistake whose answers match the reader's on every case of the group
            candidates = [self.mistakes(*case) for _, _, case in outcomes]
            hint = next((hint for name, (_, hint) in candidates[0].items()
                         if all(c[name][0] is not None and self.close(r, _as_tensor(c[name][0]))
                                for (r, _, _), c in zip(outcomes, candidates))), None)
            if hint is None and self.or_first:
                first = next(i for i, outcome in enumerate(outcomes) if outcome is wrong[0])
                hint = self._matches(result, candidates[first])
        else:  # the first mistake that matches the first wrong case
            hint = self._matches(result, self.mistakes(*args))
        if hint is not None:
            return self.named(hint, result, reference, *args) if self.named is not None else prefix + hint
        if self.otherwise is None:
            return prefix + _expected_got(result, reference)
        extra = dict(wrong=len(wrong), of=len(outcomes)) if self.across else {}
        return self.otherwise(result, reference, *args, **extra)
