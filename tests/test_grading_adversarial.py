"""Hostile and unusual submissions to assignment 4, graded by assignments/grade.py as an instructor would.

Every submission here is built from the student version (stubs, the training cell left as None, so no
training run is needed) or from the solution's answers, and graded in one pass (one build, two jobs). Each
test reads that submission's CSV row: the right answers score wherever they are written and whatever the
notebook's kernel name or working directory; a submission that patches the grader's checkers, rewrites its
tests, types in training results, calls the library's reference or reaches for other files scores nothing
for it, with feedback that says why; and what one submission tries does not change another's grade.

Under the old grader (``otter run`` executing the notebook) the patching submission scored 20/20, the
answers below the stubs 9/20, the chdir and foreign-kernel notebooks 0/20, the typed-in results and the
reference alias full marks: each test below fails there.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import pathlib

import nbformat
import pytest

pytest.importorskip("otter", reason="otter-grader builds the student version")
# One build and one grading pass: 38 s of CPU; 60 s on an idle 2-core machine, 150 s at load average 10.
pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parent.parent
ASSIGNMENT = "a4_grpo_family"
FUNCTION_POINTS = 13.0  # q2 (2) + q3 (4) + q4 (4) + q5 (3): every autograded point but the training run's 7


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"assignments_{name}", ROOT / "assignments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _copy(notebook):
    return nbformat.from_dict(json.loads(json.dumps(notebook)))


def _with_cells(notebook, sources: list[str], *, first: bool = False):
    edited = _copy(notebook)
    cells = [nbformat.v4.new_code_cell(source) for source in sources]
    edited.cells = [*cells, *edited.cells] if first else [*edited.cells, *cells]
    return edited


def _answer_cells(solution) -> list[str]:
    """The solution's answer cells (functions and the worked example), as a student would type them below."""
    marks = ("worked_advantages = [", "def group_advantages(", "def token_weights(", "def clip_mask(")
    return [cell.source for cell in solution.cells if cell.cell_type == "code" and cell.source.startswith(marks)]


PATCHES = '''
import glob, os, pathlib
import autograde
autograde.expect_checker = lambda *args, **kwargs: None
autograde.expect_between = lambda *args, **kwargs: None
import rlbook.exercises.grpo, rlbook.exercises.aggregation, rlbook.exercises.dapo
rlbook.exercises.grpo.check_group_advantages = lambda fn: True
rlbook.exercises.aggregation.check_token_weights = lambda fn: True
rlbook.exercises.dapo.check_clip_mask = lambda fn: True
for path in glob.glob("tests/*.py") + glob.glob("/autograder/source/tests/*.py"):
    pathlib.Path(path).write_text("OK_FORMAT = False\\nname = 'x'\\npoints = 4\\ntest_cases = []\\n")
import otter.execute
'''

TYPED_RESULTS = '''results = {"grpo": ({"pass@1": 0.25, "length_mean": 20.0}, {"pass@1": 0.55, "length_mean": 30.0}),
           "dr_grpo": ({"pass@1": 0.25, "length_mean": 20.0}, {"pass@1": 0.45, "length_mean": 28.0})}'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """{submission name: CSV row}, plus the folders, for one grading pass of every submission below."""
    build, grade = _module("build"), _module("grade")
    out = tmp_path_factory.mktemp("built")
    build.build(ASSIGNMENT, out)
    solution = nbformat.read(out / ASSIGNMENT / "autograder" / f"{ASSIGNMENT}.ipynb", as_version=4)
    student = nbformat.read(out / ASSIGNMENT / "student" / f"{ASSIGNMENT}.ipynb", as_version=4)
    folder = tmp_path_factory.mktemp("submissions")
    answers = _answer_cells(solution)
    assert len(answers) == 4
    below = _with_cells(student, answers)
    foreign = _with_cells(below, ["import os\nos.chdir('/')\nos.makedirs('/tmp/elsewhere', exist_ok=True)"], first=True)
    foreign.metadata["kernelspec"] = {"name": "my-own-env", "display_name": "My env", "language": "python"}
    secret = folder / "secret.pt"
    victim = folder / "zz_victim.ipynb"
    right_clip_mask = "    return (advantages > 0) & (ratio > 1 + eps_high) | (advantages < 0) & (ratio < 1 - eps_low)"
    submissions = {
        "stubs_with_patches": _with_cells(student, [PATCHES], first=True),
        "typed_in_results": _with_cells(student, [TYPED_RESULTS]),
        "chdir_and_foreign_kernel": foreign,  # the right answers, written below the stubs
        "zz_victim": below,  # the same answers: graded after the attacker, from its own unchanged file
        "outside": _with_cells(student, [  # nothing here runs: each answer is refused by reading it
            "from rlbook.advantages import group_advantages",
            "import os\ndef token_weights(mask, mode, max_len):\n    assert os.environ.get('GRADER_SECRET')\n"
            "    return mask",
            f"def clip_mask(ratio, advantages, eps_low, eps_high):\n    open({str(victim)!r}, 'w').write('x')\n"
            + right_clip_mask]),
        "attacker": _with_cells(below, [
            "def group_advantages(rewards, group_size):\n    hoard = [bytearray(2**28) for _ in range(64)]\n"
            "    return rewards * len(hoard)",
            "from rlbook.aggregation import token_weights as library_weights\n"
            "def token_weights(mask, mode, max_len):\n    return library_weights(mask, mode, max_len=max_len)",
            "def clip_mask(ratio, advantages, eps_low, eps_high):\n"
            f"    torch.save(torch.zeros(1), {str(victim)!r})\n    torch.load({str(secret)!r})\n" + right_clip_mask]),
        "public_cases_only": _with_cells(below, [
            "def group_advantages(rewards, group_size):\n"
            "    if group_size not in (3, 4):\n        return torch.zeros_like(rewards)\n"
            "    groups = rewards.view(-1, group_size)\n"
            "    std = groups.std(dim=1, correction=0, keepdim=True)\n"
            "    centred = groups - groups.mean(dim=1, keepdim=True)\n"
            "    return torch.where(std > 0, centred / std.clamp_min(1e-12), torch.zeros_like(centred)).reshape(-1)"]),
    }
    for name, notebook in submissions.items():
        nbformat.write(notebook, folder / f"{name}.ipynb")
    import torch

    torch.save(torch.ones(1), secret)
    victim_bytes = victim.read_bytes()
    scores = tmp_path_factory.mktemp("out") / "scores.csv"
    rows = grade.grade_folder(folder, out / ASSIGNMENT / "autograder", scores, timeout=240, jobs=2, memory_gb=4,
                              size="ci", late_days={"zz_victim": 1.5}, late_penalty=0.2)
    by_name = {row["student"]: row for row in rows}
    return {"rows": by_name, "victim_unchanged": victim.read_bytes() == victim_bytes,
            "isolated": grade.sandbox.isolation_warning() is None, "autograder": out / ASSIGNMENT / "autograder",
            "folder": folder, "scores": scores}


def test_patching_the_checkers_and_rewriting_the_tests_earns_nothing(graded):
    row = graded["rows"]["stubs_with_patches"]
    assert row["total"] == 0.0 and "Not attempted yet" in row["feedback"], row


def test_typed_in_training_results_earn_nothing(graded):
    row = graded["rows"]["typed_in_results"]
    assert row["q6_training"] == 0.0 and "typed in, not computed" in row["feedback"], row


def test_answers_below_the_stubs_in_a_notebook_that_changes_directory_and_kernel_score(graded):
    row = graded["rows"]["chdir_and_foreign_kernel"]
    assert row["total"] == FUNCTION_POINTS, row["feedback"]
    assert "q6_training (0/7): Not attempted yet" in row["feedback"]


def test_calling_or_importing_the_library_reference_earns_nothing_and_says_so(graded):
    imports, calls = graded["rows"]["outside"], graded["rows"]["attacker"]
    assert imports["q3_group_advantages"] == 0.0 and "rlbook.advantages.group_advantages" in imports["feedback"]
    assert calls["q4_token_weights"] == 0.0
    assert "reference implementation (rlbook.aggregation.token_weights)" in calls["feedback"]


def test_an_answer_right_only_on_the_public_cases_fails_the_course_cases(graded):
    row = graded["rows"]["public_cases_only"]
    assert row["q3_group_advantages"] == 0.0 and row["total"] == FUNCTION_POINTS - 4, row
    assert "hidden case" in row["feedback"]


def test_an_answer_that_reaches_for_files_or_the_environment_is_not_run(graded):
    row = graded["rows"]["outside"]
    assert row["total"] == 0.0, row
    assert "clip_mask uses `open`" in row["feedback"], row["feedback"]
    assert "token_weights uses `os`" in row["feedback"], row["feedback"]


def test_one_submission_cannot_read_or_write_anothers_files(graded):
    if not graded["isolated"]:
        pytest.skip("needs root, unshare and setpriv for the sandbox user")
    attacker = graded["rows"]["attacker"]
    assert attacker["q5_clip_mask"] == 0.0 and "Error" in attacker["feedback"], attacker
    assert graded["victim_unchanged"], "the attacker rewrote another student's notebook"
    assert graded["rows"]["zz_victim"]["total"] == FUNCTION_POINTS


def test_a_submission_that_fills_memory_loses_only_that_question(graded):
    row = graded["rows"]["attacker"]
    assert row["q3_group_advantages"] == 0.0 and row["q2_worked_example"] == 2.0, row
    assert "memory" in row["feedback"].lower(), row["feedback"]


def test_feedback_is_also_a_small_html_page_per_student(graded):
    page = (graded["scores"].with_suffix("") / "outside.html").read_text()
    assert "<h1>outside: 0 / 20 autograded points</h1>" in page and "clip_mask uses `open`" in page


def test_hand_graded_points_are_exported_entered_and_merged(graded, tmp_path):
    manual = _module("manual")
    sheet = manual.export(graded["folder"], graded["autograder"], tmp_path / "manual")
    with open(sheet, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["student"] for row in rows] == sorted(graded["rows"]) and "q1_derivation (max 4)" in rows[0]
    assert "_Type your answer here" in (tmp_path / "manual" / "outside.md").read_text()
    for row in rows:
        row.update({"q1_derivation (max 4)": "3", "q7_written (max 6)": "5.5", "comment": "clear"})
    with open(sheet, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    merged = {row["student"]: row for row in manual.merge(graded["scores"], sheet, graded["autograder"],
                                                          tmp_path / "final.csv")}
    victim = merged["zz_victim"]
    assert victim["grand_total"] == pytest.approx((FUNCTION_POINTS + 8.5) * 0.6), victim  # 1.5 days late
    assert merged["attacker"]["grand_total"] == float(graded["rows"]["attacker"]["total"]) + 8.5
    assert victim["grand_possible"] == 30.0
    rows[0]["q7_written (max 6)"] = "9"
    with open(sheet, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(ValueError, match=rf"{rows[0]['student']}'s q7_written must be in \[0, 6\]"):
        manual.merge(graded["scores"], sheet, graded["autograder"], tmp_path / "final.csv")


def test_late_submissions_lose_the_stated_fraction_per_day_started(graded, tmp_path):
    victim, other = graded["rows"]["zz_victim"], graded["rows"]["attacker"]
    assert victim["late_factor"] == pytest.approx(0.6) and victim["total_after_late"] == pytest.approx(0.6 * 13)
    assert other["days_late"] == 0.0 and other["total_after_late"] == other["total"]
    grade = _module("grade")
    (tmp_path / "late.csv").write_text("student,days_late\nann,2\nbob,-1\n")
    with pytest.raises(ValueError, match="days_late must be >= 0, not for bob"):
        grade.read_late_days(tmp_path / "late.csv")
    with pytest.raises(ValueError, match="late_penalty"):
        grade.grade_folder(tmp_path, tmp_path, tmp_path / "x.csv", late_penalty=2)
