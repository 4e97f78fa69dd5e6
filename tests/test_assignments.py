"""The course assignments (assignments/): built by otter-grader, graded by assignments/grade.py.

One build and one grading pass per session: each assignment's folder holds its solution (the autograder
notebook), its untouched student version and its known mistakes marked ``end_to_end`` in
assignments/known_mistakes.json (each a one-line edit of the solution; tests/test_grading_mistakes.py grades
every entry in process, these also go through the sandboxed grader), and assignment 1's folder also a
notebook with a cell that raises and an answer cell deleted, and a file that is not a notebook; a notebook whose k3 never returns is graded alone
under a short limit. The tests then read the CSV rows: full marks for the solution (its training questions
re-run by the grader with the solution's functions), 0 for the student version, partial credit with the
mistake named for each known mistake (graded with its training answers left at None, so that only the
solutions' training runs are re-run), and a row, not a crash, for the rest. Hostile submissions are in
tests/test_grading_adversarial.py, the sandbox in tests/test_grading_sandbox.py.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import pathlib

import nbformat
import pytest

pytest.importorskip("otter", reason="otter-grader builds and grades the assignments")

ROOT = pathlib.Path(__file__).resolve().parent.parent
ASSIGNMENTS = ROOT / "assignments"
MISTAKES = [m for m in json.loads((ASSIGNMENTS / "known_mistakes.json").read_text())["mistakes"]
            if m.get("end_to_end")]
# Generous: the notebooks take well under a minute each at the CI size; the limit only catches a hang.
TIMEOUT_S = 300
# The never-ending notebook's two processes (its function questions, its training re-run) each spin until
# this limit stops them: it only has to be reached, so it is short (20 s cost the suite 40 s of a busy core).
LOOP_TIMEOUT_S = 10


# DPO's sign flipped in Q3, training answers kept: the grader's re-run of Q5 trains with this loss.
A3_FLIPPED_DPO = ("return -F.logsigmoid(beta * h)", "return -F.logsigmoid(-beta * h)")


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"assignments_{name}", ASSIGNMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build, grade = _module("build"), _module("grade")
NAMES = build.master_names()


def _edited(notebook: nbformat.NotebookNode, find: str, replace: str) -> nbformat.NotebookNode:
    """A copy of ``notebook`` with ``find`` replaced in the one code cell that holds it."""
    edited = nbformat.from_dict(json.loads(json.dumps(notebook)))
    cells = [cell for cell in edited.cells if cell.cell_type == "code" and find in cell.source]
    assert len(cells) == 1 and cells[0].source.count(find) == 1, f"{find!r} must occur once in one code cell"
    cells[0].source = cells[0].source.replace(find, replace)
    return edited


def _without_cell(notebook: nbformat.NotebookNode, holding: str) -> nbformat.NotebookNode:
    edited = nbformat.from_dict(json.loads(json.dumps(notebook)))
    edited.cells = [cell for cell in edited.cells if holding not in cell.source]
    assert len(edited.cells) == len(notebook.cells) - 1
    return edited


def _without_training(notebook: nbformat.NotebookNode, autograder: pathlib.Path) -> nbformat.NotebookNode:
    """``notebook`` with its training answers set back to None in a last cell: the grader then skips the
    training re-run (the known mistakes are in the functions; only the solutions' runs are re-run here)."""
    spec = grade.load_spec(autograder / "autograder")
    names = [n for q in spec["questions"] if q["training"] for n in grade.answer_names(q)]
    edited = nbformat.from_dict(json.loads(json.dumps(notebook)))
    edited.cells.append(nbformat.v4.new_code_cell("\n".join(f"{n} = None" for n in names)))
    return edited


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("built")
    for name in NAMES:
        build.build(name, out)
    return out


def _notebooks(out: pathlib.Path, name: str) -> tuple[nbformat.NotebookNode, nbformat.NotebookNode]:
    solution = nbformat.read(out / name / "autograder" / f"{name}.ipynb", as_version=4)
    student = nbformat.read(out / name / "student" / f"{name}.ipynb", as_version=4)
    return solution, student


def _rows(csv_path: pathlib.Path) -> dict[str, dict]:
    with open(csv_path, newline="") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def graded(built, tmp_path_factory) -> dict[str, dict[str, dict]]:
    """Every assignment's CSV rows by submission name (plus "loop": the notebook that never ends)."""
    results = {}
    for name in NAMES:
        folder = tmp_path_factory.mktemp(name)
        solution, student = _notebooks(built, name)
        nbformat.write(solution, folder / "solution.ipynb")
        nbformat.write(student, folder / "student.ipynb")
        for mistake in (m for m in MISTAKES if m["assignment"] == name):
            edited = _without_training(_edited(solution, mistake["find"], mistake["replace"]), built / name)
            nbformat.write(edited, folder / f"{mistake['name']}.ipynb")
        if name == "a3_preference":  # a wrong Q3 trained with: the re-run uses the student's dpo_loss
            nbformat.write(_edited(solution, *A3_FLIPPED_DPO), folder / "dpo_flipped_trained.ipynb")
        if name == NAMES[0]:
            broken = _edited(solution, "def k3(logp, ref_logp):", "raise RuntimeError('a cell that fails')\n"
                                                                   "def k3(logp, ref_logp):")
            nbformat.write(_without_cell(broken, "def optimal_baseline("), folder / "broken.ipynb")
            (folder / "not_a_notebook.ipynb").write_text("this is not JSON")
        grade.grade_folder(folder, built / name / "autograder", folder / "scores.csv",
                           timeout=TIMEOUT_S, jobs=2)
        results[name] = _rows(folder / "scores.csv")
    loop_folder = tmp_path_factory.mktemp("loop")
    _, student = _notebooks(built, NAMES[0])
    solution, _ = _notebooks(built, NAMES[0])
    nbformat.write(_edited(solution, "log_r = ref_logp - logp", "while True:\n        pass"), loop_folder / "loops.ipynb")
    grade.grade_folder(loop_folder, built / NAMES[0] / "autograder", loop_folder / "scores.csv",
                       timeout=LOOP_TIMEOUT_S)
    results["loop"] = _rows(loop_folder / "scores.csv")
    assert (loop_folder / "scores" / "loops.txt").exists(), "one feedback file per student beside the CSV"
    return results


def test_five_assignments_with_student_and_autograder_versions(built):
    assert len(NAMES) >= 5
    for name in NAMES:
        solution, student = _notebooks(built, name)
        assert (built / name / "autograder" / "grading.json").is_file()
        assert not (built / name / "autograder" / "autograder.zip").exists(), "otter's zip grades the unsafe way"
        student_code = "\n".join(cell.source for cell in student.cells if cell.cell_type == "code")
        assert "BEGIN SOLUTION" not in student_code and "NotImplementedError" in student_code
        assert "test_" not in student_code, "hidden tests must not ship to students"
        points = grade.question_points(built / name / "autograder")
        assert sum(points.values()) == 20, f"{name}: 20 autograded points, {points}"


@pytest.mark.parametrize("name", NAMES)
def test_solution_scores_full_marks(graded, name):
    row = graded[name]["solution"]
    assert float(row["total"]) == float(row["possible"]), row["feedback"]


@pytest.mark.parametrize("name", NAMES)
def test_untouched_student_version_scores_zero(graded, name):
    row = graded[name]["student"]
    assert float(row["total"]) == 0.0
    assert "Not attempted yet" in row["feedback"] or "not computed" in row["feedback"]


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m["name"] for m in MISTAKES])
def test_known_mistake_gets_partial_credit_and_is_named(graded, mistake):
    row = graded[mistake["assignment"]][mistake["name"]]
    assert 0.0 < float(row["total"]) < float(row["possible"]), row
    assert float(row[mistake["question"]]) == 0.0, row
    assert (mistake.get("message") or mistake["feedback"]) in row["feedback"], row["feedback"]


def test_each_assignment_has_two_known_mistakes():
    for name in NAMES:
        assert sum(m["assignment"] == name for m in MISTAKES) >= 2, name


def test_a_cell_that_raises_costs_nothing_its_definitions_are_graded(graded):
    row = graded[NAMES[0]]["broken"]  # k3's cell raises before defining k3: the grader reads, not runs, cells
    assert float(row["q4_k3"]) == 3.0 and float(row["q6_training"]) == 5.0, row


def test_a_deleted_cell_costs_only_its_question(graded):
    row = graded[NAMES[0]]["broken"]  # the same notebook also lost the cell of Q3's answer
    assert float(row["q3_optimal_baseline"]) == 0.0 and float(row["total"]) == float(row["possible"]) - 3.0, row
    assert "optimal_baseline not found" in row["feedback"]


def test_a_file_that_is_not_a_notebook_scores_zero_with_a_reason(graded):
    row = graded[NAMES[0]]["not_a_notebook"]
    assert float(row["total"]) == 0.0 and "could not read this notebook" in row["feedback"]


def test_a_function_that_never_returns_is_stopped_and_its_question_scored_zero(graded):
    row = graded["loop"]["loops"]
    assert float(row["q4_k3"]) == 0.0 and f"within the {LOOP_TIMEOUT_S} s limit" in row["feedback"], row
    assert float(row["total"]) < float(row["possible"]) - 5.0, row  # the training re-run calls k3 too


def test_grade_folder_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="submissions"):
        grade.grade_folder(tmp_path / "missing", tmp_path / "a.zip", tmp_path / "out.csv")
    with pytest.raises(ValueError, match="autograder"):
        grade.grade_folder(tmp_path, tmp_path / "a.zip", tmp_path / "out.csv")
    with pytest.raises(ValueError, match="name must be one of"):
        build.build("no_such_assignment", tmp_path)


def test_a3_a_wrong_dpo_loss_costs_the_dpo_training_points_and_says_why(graded):
    """A3's Q5 trains with the student's Q3 and Q4 (PreferenceTrainer's loss_fn): DPO with its sign flipped
    starts at ln 2 (h = 0) but trains the rejected completions up, so its held-out accuracy fails, and the
    feedback points at the student's dpo_loss; IPO, right, keeps its points."""
    row = graded["a3_preference"]["dpo_flipped_trained"]
    assert float(row["q3_dpo_loss"]) == 0.0, row
    assert float(row["q5_training"]) == 7.0 - 3.0, row
    assert "dpo_accuracy (held-out)" in row["feedback"] and "your dpo_loss (Q3)" in row["feedback"], row["feedback"]
