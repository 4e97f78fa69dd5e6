"""The Gradescope autograder (assignments/gradescope.py): the files Gradescope needs, an offline install, and a
run_autograder that grades a submission into Gradescope's results.json.

The zip is built here with rlbook's wheel only (the full wheelhouse, torch's CPU wheel included, is about
400 MB and is built by ``make gradescope``); ``run_autograder`` is then run from the unpacked zip with this
checkout's Python standing in for the venv that ``setup.sh`` makes, on the solution of assignment 3 with its
training answers left at None (so only its function questions are graded: the training re-runs are
tests/test_assignments.py's).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import zipfile

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ASSIGNMENT = "a3_preference"
# Gradescope's results.json (autograder specification, "Output format"): the fields this grader writes.
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"assignments_{name}", ROOT / "assignments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gradescope, build = _module("gradescope"), _module("build")


@pytest.fixture(scope="module")
def autograder(tmp_path_factory) -> pathlib.Path:
    return gradescope.build(ASSIGNMENT, tmp_path_factory.mktemp("gradescope"), seed=5, wheels=[])


def test_the_zip_has_what_gradescope_needs_at_its_root(autograder):
    with zipfile.ZipFile(autograder) as archive:
        names = set(archive.namelist())
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
        requirements = archive.read("requirements.txt").decode().split()
        setup = archive.read("setup.sh").decode()
        course = json.loads(archive.read("course.json"))
        (wheel,) = [name for name in names if name.startswith("wheels/rlbook-")]
        with archive.open(wheel) as handle, zipfile.ZipFile(handle) as rlbook_wheel:
            packaged = set(rlbook_wheel.namelist())
    assert {"setup.sh", "run_autograder", "requirements.txt", "autograder/grading.json"} <= names
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111, "both scripts must be executable"
    assert {f"assignments/{name}" for name in gradescope.GRADER_FILES} <= names
    assert requirements[0] == "rlbook==0.1.0" and all("==" in pin for pin in requirements)
    assert "--no-index" in setup and "--find-links" in setup and "-r \"$SOURCE/requirements.txt\"" in setup
    assert course == {"assignment": ASSIGNMENT, "seed": 5, "size": "ci", "timeout_s": 600.0}
    # The zoo models the assignment's questions load travel inside rlbook's wheel.
    assert "rlbook/zoo/models/review-base/model.safetensors" in packaged
    assert "rlbook/zoo/models/arith-base/model.safetensors" in packaged


def test_every_pinned_requirement_needs_a_wheel_in_the_zip(tmp_path):
    wheels = [tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
              tmp_path / "huggingface_hub-2.4.0-py3-none-any.whl"]
    assert gradescope.missing_wheels(["torch==2.13.0+cpu", "huggingface-hub==2.4.0"], wheels) == []
    assert gradescope.missing_wheels(["numpy==2.0.0", "torch==2.13.0+cpu"], wheels) == ["numpy==2.0.0"]
    assert gradescope.TORCH_CPU.endswith("+cpu"), "the autograder installs torch's CPU build, never CUDA's"


def test_build_rejects_an_unknown_assignment(tmp_path):
    with pytest.raises(ValueError, match="assignment must be one of"):
        gradescope.build("no_such_assignment", tmp_path, wheels=[])


def _submission(folder: pathlib.Path) -> None:
    """The assignment's solution with its training answers set back to None (its function questions only)."""
    cells = build.solution_cells(build.MASTERS / f"{ASSIGNMENT}.ipynb")
    spec = build.grading_spec(build.MASTERS / f"{ASSIGNMENT}.ipynb")
    names = [n for q in spec["questions"] if q["training"] for t in q["tests"] for n in t["arguments"]]
    cells.append("\n".join(f"{name} = None" for name in dict.fromkeys(names)))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    notebook.metadata["kernelspec"] = {"name": "a-students-own-kernel", "display_name": "mine", "language": "python"}
    folder.mkdir(parents=True)
    nbformat.write(notebook, folder / "my_homework.ipynb")


def test_run_autograder_grades_a_submission_into_gradescopes_results_json(autograder, tmp_path):
    root = tmp_path / "autograder"
    with zipfile.ZipFile(autograder) as archive:
        archive.extractall(root / "source")
    _submission(root / "submission")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable}
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((root / "results" / "results.json").read_text())
    spec = json.loads((root / "source" / "autograder" / "grading.json").read_text())
    tests = {test["name"]: test for test in results["tests"]}
    assert set(tests) == {q["name"] for q in spec["questions"]}
    for test in results["tests"]:
        assert isinstance(test["score"], float) and isinstance(test["max_score"], float), test
        assert 0 <= test["score"] <= test["max_score"] and isinstance(test["output"], str), test
        assert test["visibility"] in VISIBILITY and test["status"] in {"passed", "failed"}, test
    assert sum(test["max_score"] for test in results["tests"]) == 20.0
    assert results["score"] == sum(test["score"] for test in results["tests"])
    functions = [q for q in spec["questions"] if not q["training"]]
    assert all(tests[q["name"]]["score"] == q["points"] for q in functions), results
    (training,) = [q["name"] for q in spec["questions"] if q["training"]]
    assert tests[training]["score"] == 0.0 and "never computed" in tests[training]["output"], tests[training]
    assert "graded by hand" in results["output"] and results["stdout_visibility"] == "hidden"


def test_run_autograder_without_a_notebook_scores_zero_and_says_why(autograder, tmp_path):
    root = tmp_path / "autograder"
    with zipfile.ZipFile(autograder) as archive:
        archive.extractall(root / "source")
    (root / "submission").mkdir()
    (root / "submission" / "answers.py").write_text("print('not a notebook')\n")
    outcome = gradescope.run(root)
    assert outcome["score"] == 0.0 and "No .ipynb" in outcome["output"]
    assert json.loads((root / "results" / "results.json").read_text()) == outcome
