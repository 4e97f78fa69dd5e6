"""Every known mistake (assignments/known_mistakes.json) is named in the feedback and loses exactly its question.

Each entry is a one-line edit of an assignment's solution. Here each edited solution is graded the way
``assignments/grade.py`` grades a submission (read by ``extract.py``, screened, its function questions put
in one job by ``grade._jobs``, the job run by ``harness.run_job``, scored by ``Grader._score``), but in this
process and without the sandbox, so that all of them (over a hundred) take seconds; the training questions
are left out (their re-runs are ``tests/test_assignments.py``'s, which also grades the ``end_to_end``
entries through the sandboxed grader). For each mistake: its question scores 0, every other function
question of the assignment scores full marks, and the question's feedback holds the mistake's words (the
checker's table hint, the verifier test's case, or the entry's own ``message``).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ASSIGNMENTS = ROOT / "assignments"
MISTAKES = json.loads((ASSIGNMENTS / "known_mistakes.json").read_text())["mistakes"]
SEED = 0


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"assignments_{name}", ASSIGNMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass needs its module registered
    spec.loader.exec_module(module)
    return module


# The harness imports hidden_cases.py beside it and the tests import autograde.py, as in the sandbox's folder.
for folder in (ASSIGNMENTS, ASSIGNMENTS / "masters"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
build, extract, grade, harness = (_module(name) for name in ("build", "extract", "grade", "harness"))
SPECS: dict[str, dict] = {}


def _spec(assignment: str) -> dict:
    if assignment not in SPECS:
        SPECS[assignment] = build.grading_spec(build.MASTERS / f"{assignment}.ipynb")
    return SPECS[assignment]


def _solution_cells(assignment: str) -> list[str]:
    return build.solution_cells(build.MASTERS / f"{assignment}.ipynb")


def _edited(cells: list[str], find: str, replace: str) -> list[str]:
    hits = [i for i, cell in enumerate(cells) if find in cell]
    assert len(hits) == 1 and cells[hits[0]].count(find) == 1, f"{find!r} must occur once in one code cell"
    return [cell.replace(find, replace) if i == hits[0] else cell for i, cell in enumerate(cells)]


def _grade_functions(assignment: str, cells: list[str], seed: int = SEED) -> dict:
    """The CSV row ``grade.py`` would give for the function questions (training questions left out)."""
    spec = _spec(assignment)
    questions = [q for q in spec["questions"] if not q["training"]]
    submission = extract.parse(cells)
    row = {"student": "edited", **{q["name"]: 0.0 for q in questions}}
    feedback, to_run = {}, []
    for question in questions:
        reason = grade._screen(question, spec, submission)
        if reason:
            feedback[question["name"]] = [reason]
        else:
            to_run.append(question)
    results = {}

    def report(question, test, passed, message=""):
        results[(question, test)] = {"question": question, "test": test, "passed": passed, "message": message}

    for job in grade._jobs(spec, to_run, submission, seed):
        harness.run_job(job, report)
    for question in to_run:
        grade.Grader._score(question, results, row, feedback)
    row["feedback"] = feedback
    return row


@pytest.mark.parametrize("assignment", build.master_names())
def test_the_solution_scores_every_function_question(assignment):
    row = _grade_functions(assignment, _solution_cells(assignment))
    points = {q["name"]: q["points"] for q in _spec(assignment)["questions"] if not q["training"]}
    assert {name: row[name] for name in points} == points, row["feedback"]


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m["name"] for m in MISTAKES])
def test_a_known_mistake_is_named_and_loses_exactly_its_question(mistake):
    assignment, question = mistake["assignment"], mistake["question"]
    row = _grade_functions(assignment, _edited(_solution_cells(assignment), mistake["find"], mistake["replace"]))
    points = {q["name"]: q["points"] for q in _spec(assignment)["questions"] if not q["training"]}
    assert row[question] == 0.0, (row, mistake["name"])
    assert {n: row[n] for n in points if n != question} == {n: p for n, p in points.items() if n != question}, row
    words = mistake.get("message") or mistake["feedback"]
    said = " | ".join(row["feedback"][question])
    assert words in said, f"{mistake['name']}: expected {words!r} in the feedback, got {said!r}"
    assert "expected [" not in said or "message" not in mistake, said


@pytest.mark.parametrize("mistake", [m for m in MISTAKES if "message" in m], ids=lambda m: m["name"])
def test_a_declared_mistake_is_named_on_another_courses_cases(mistake):
    """The declared mistakes are matched on the course's own hidden cases, whatever the seed."""
    assignment = mistake["assignment"]
    row = _grade_functions(assignment, _edited(_solution_cells(assignment), mistake["find"], mistake["replace"]),
                           seed=2026)
    assert row["feedback"][mistake["question"]] == [mistake["message"]]


def test_each_entry_names_one_message_and_a_question_the_assignment_has():
    for mistake in MISTAKES:
        assert ("message" in mistake) != ("feedback" in mistake), mistake["name"]
        questions = {q["name"] for q in _spec(mistake["assignment"])["questions"] if not q["training"]}
        assert mistake["question"] in questions, mistake["name"]
    names = [m["name"] for m in MISTAKES]
    assert len(names) == len(set(names)), "each known mistake has a name of its own"


def test_every_function_question_has_known_mistakes():
    """The plain mistakes are written down for every autograded function (or literal) question."""
    for assignment in build.master_names():
        for question in (q for q in _spec(assignment)["questions"] if not q["training"]):
            count = sum(m["question"] == question["name"] and m["assignment"] == assignment for m in MISTAKES)
            assert count >= 3, f"{assignment} {question['name']}: {count} known mistakes"


@pytest.mark.parametrize("before, after, words", [
    (0.05, 0.30, "lower than the untrained arith-base scores"),   # scored with the wrong settings
    (0.80, 0.85, "before trainer.train, on a freshly loaded model"),  # "before" measured on the trained model
    (0.30, 0.30, "measure pass1_after after trainer.train"),  # "after" measured on an untrained model
])
def test_a2_evaluation_hints_point_to_the_side_that_went_wrong(before, after, words):
    """A2's pass@1 hints say which evaluation to fix: too low a base score is the evaluation's settings, too
    high is a trained model measured as the base, no gain is "after" measured without the training."""
    (question,) = [q for q in _spec("a2_ppo")["questions"] if q["name"] == "q5_training"]
    (test,) = [t for t in question["tests"] if t["name"] == "test_ppo_gain"]
    scope = {}
    exec(test["source"], scope)
    with pytest.raises(AssertionError, match=words):
        scope["test_ppo_gain"](before, after)
