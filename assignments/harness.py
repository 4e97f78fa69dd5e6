"""Run a submission's hidden tests on a submission's definitions: the process ``grade.py`` starts in a sandbox.

    python -I harness.py < job.json        (one JSON result per test on stdout; anything printed goes to stderr)

The job (built by ``grade.py``: every function question of a submission in one, each training question in
one of its own) holds the master's setup code, the submission's extracted definitions
(``extract.py``: imports, functions, literals; never its top-level code), the master's training code for a
training question (re-run here with the submission's functions under the grader's seed), the tests, and for
a function question the master's solution, which ``hidden_cases.py`` compares the answer with on inputs
drawn from the course's seed (reported as the test ``hidden_cases``).
Each test is a function whose arguments name the answers it needs; an ``AssertionError``'s message is the
feedback. When a question fails and its known mistakes (``assignments/known_mistakes.json``, for a question the
book has no checker for) include one the answer behaves like, that mistake's message is reported too (the
test ``known_mistake``), so the feedback names the mistake rather than only what was expected.
This file is standalone: it runs where the grader's own files are hidden.
"""

import json
import os
import sys
import traceback


def _message(error: BaseException) -> str:
    if isinstance(error, AssertionError):
        return str(error) or "a hidden test failed"
    if isinstance(error, MemoryError):
        return "ran out of memory (the grader's memory limit): look for a huge tensor or a loop that keeps growing"
    if isinstance(error, NotImplementedError):
        return "Not attempted yet: replace the `raise NotImplementedError` with your answer."
    return f"{type(error).__name__}: {error}"


def _hidden_cases(question: dict, namespace: dict, reference: dict, seed: int) -> str | None:
    """What differs from the master's solution on the course's own cases (``hidden_cases.py``), or None."""
    import hidden_cases

    names = [name for test in question["tests"] for name in test["arguments"] if callable(reference.get(name))]
    try:
        return next(filter(None, (hidden_cases.check(name, namespace.get(name), reference[name], seed)
                                  for name in names)), None)
    except BaseException as error:  # noqa: BLE001 - any failure of the submission is a graded outcome
        return f"on a hidden case it raised {_message(error)}"


def _same_literal(got, wrong, tolerance: float) -> bool:
    """True when a literal answer equals a known wrong one: numbers (or lists of them) within ``tolerance``."""
    if isinstance(wrong, (list, tuple)):
        return (isinstance(got, (list, tuple)) and len(got) == len(wrong)
                and all(_same_literal(g, w, tolerance) for g, w in zip(got, wrong)))
    if isinstance(wrong, (int, float)) and not isinstance(wrong, bool):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and abs(got - wrong) <= tolerance
    return got == wrong


def _known_mistake(question: dict, namespace: dict, setup: dict, seed: int) -> str | None:
    """The message of the question's first known mistake that the answer behaves like, or None.

    A wrong function is the solution with one line edited (run on the course's hidden cases, where the answer
    must agree with it on every case); a wrong literal is compared with the answer's value.
    """
    import hidden_cases

    names = list(dict.fromkeys(name for test in question["tests"] for name in test["arguments"]))
    for mistake in question.get("mistakes", []):
        if "literal" in mistake:
            if any(_same_literal(namespace.get(name), mistake["literal"], mistake.get("tolerance", 0.0))
                   for name in names):
                return mistake["message"]
            continue
        wrong = dict(setup)
        exec(compile(mistake["definitions"], f"<known mistake {mistake['name']}>", "exec"), wrong)
        checked = [name for name in names if name in hidden_cases.CASES and callable(wrong.get(name))]
        try:
            if checked and all(callable(namespace.get(name))
                               and hidden_cases.check(name, namespace[name], wrong[name], seed) is None
                               for name in checked):
                return mistake["message"]
        except BaseException:  # noqa: BLE001 - an answer that raises is not this mistake
            continue
    return None


def run_job(job: dict, report) -> None:
    """Run one job's tests; ``report(question, test, passed, message)`` receives each result."""
    setup = {"__name__": "__submission__"}
    exec(compile(job["setup"], "<setup>", "exec"), setup)
    namespace = dict(setup)
    failure = None
    for label, code in (("your definitions", job["submission"]),
                        ("the grader's re-run of this training question with your functions", job["training"])):
        if failure is None and code:
            try:
                exec(compile(code, f"<{label}>", "exec"), namespace)
            except BaseException as error:  # noqa: BLE001
                traceback.print_exc()
                failure = f"{label} raised {_message(error)}"
    for question in job["questions"]:
        failed = False
        for test in question["tests"]:
            if failure is not None:
                report(question["name"], test["name"], False, failure)
                continue
            scope = {"__name__": "__hidden_test__"}
            exec(compile(test["source"], f"<{test['name']}>", "exec"), scope)
            try:
                scope[test["name"]](*(namespace.get(name) for name in test["arguments"]))
            except BaseException as error:  # noqa: BLE001
                traceback.print_exc()
                report(question["name"], test["name"], False, _message(error))
                failed = True
            else:
                report(question["name"], test["name"], True)
        if question["reference"] and failure is None:
            reference = dict(setup)
            exec(compile(question["reference"], "<reference>", "exec"), reference)
            differs = _hidden_cases(question, namespace, reference, job["seed"])
            report(question["name"], "hidden_cases", differs is None, differs or "")
            failed = failed or differs is not None
        if failed:
            named = _known_mistake(question, namespace, setup, job["seed"])
            if named:
                report(question["name"], "known_mistake", False, named)


def main() -> None:
    results = os.fdopen(os.dup(1), "w")  # the only channel back to the grader; prints go to stderr
    os.dup2(2, 1)
    job = json.loads(sys.stdin.read())
    nonce = job.pop("nonce")  # the grader keeps only lines that carry it: a forged line would have to find it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # autograde.py, beside this file

    def report(question: str, test: str, passed: bool, message: str = "") -> None:
        line = {"question": question, "test": test, "passed": passed, "message": message[:600], "nonce": nonce}
        results.write(json.dumps(line) + "\n")
        results.flush()

    run_job(job, report)
    results.close()


if __name__ == "__main__":
    main()
