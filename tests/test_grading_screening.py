"""Reading a submission without running it (assignments/extract.py) and the grader's screening (grade.py).

Fast: no process is started. Each test gives the code cells a hostile or unusual notebook would hold and
checks what the grader keeps, and why it refuses an answer before running anything.
"""

from __future__ import annotations

import pathlib
import runpy
from types import SimpleNamespace

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The grader's scripts as namespaces (run as files: assignments/ is not a package).
grade = SimpleNamespace(**runpy.run_path(str(ROOT / "assignments" / "grade.py")))
build = SimpleNamespace(**runpy.run_path(str(ROOT / "assignments" / "build.py")))
extract = grade.extract
A5 = build.grading_spec(build.MASTERS / "a5_rlvr_project.ipynb")
TRAINING = next(q for q in A5["questions"] if q["training"])
STUB = 'def pass_at_k(n, c, k):\n    """docstring"""\n    raise NotImplementedError'
ANSWER = "def pass_at_k(n, c, k):\n    return 1.0"


def test_the_last_answer_that_is_not_the_stub_counts_wherever_it_is():
    below = extract.parse([STUB, "print('unrelated')", ANSWER])
    above = extract.parse([ANSWER, STUB])  # the stub's cell run again below the answer does not erase it
    stub_only = extract.parse([STUB])
    assert "return 1.0" in below.source() and "return 1.0" in above.source()
    assert "pass_at_k" not in stub_only.definitions and "pass_at_k" in stub_only.stubs


def test_top_level_code_is_dropped_and_a_def_runs_nothing_when_defined():
    cells = ["import os\nos.chdir('/')\nimport autograde\nautograde.expect_checker = None",
             "%cd /tmp\n!rm -rf tests\nx = [1, 2]",
             "@patch_everything\ndef k3(a, b):\n    return a",
             "def k1(a, b=os.getcwd()):\n    return a",
             "def k2(a: print('annotated'), b) -> print('returns'):\n    return a - b",
             "class Sneaky:\n    import os; os.system('true')"]
    submission = extract.parse(cells)
    source = submission.source()
    assert "chdir" not in source and "expect_checker" not in source and "rm -rf" not in source
    assert "x = [1, 2]" in source and "print" not in source and "def k2(a, b):" in source
    assert {"k3", "k1", "Sneaky"} <= set(submission.assigned) and not {"k3", "k1", "Sneaky"} & set(submission.definitions)


def test_only_the_imports_the_kept_definitions_use_reach_the_grading_process():
    submission = extract.parse(["import torch\nimport torch.nn.functional as F\nfrom rlbook.models import load_model\n"
                                "from math import *\nimport numpy as np",
                                "def k3(logp, ref_logp):\n    return torch.exp(ref_logp - logp) - F.relu(logp) - 1",
                                "def unused(x):\n    return np.sqrt(x)"])
    every = submission.source()
    assert "import torch" in every and "as F" in every and "import numpy as np" in every  # unused() uses numpy
    assert "load_model" not in every  # no kept definition refers to it: its seconds of imports are not paid
    assert "from math import *" in every  # a star import binds names no one can list
    only_k3 = submission.source({"k3"})
    assert "numpy" not in only_k3 and "import torch" in only_k3 and "def unused" not in only_k3
    beside = submission.source({"k3"}, also_used=frozenset({"load_model"}))  # a training re-run's code calls it
    assert "from rlbook.models import load_model" in beside


def test_a_notebook_that_is_not_json_is_refused_with_its_name(tmp_path):
    (tmp_path / "broken.ipynb").write_text("{ not json")
    with pytest.raises(ValueError, match="broken.ipynb is not a readable .ipynb notebook"):
        extract.code_cells(tmp_path / "broken.ipynb")


def test_a_training_rerun_does_not_call_a_refused_or_library_function():
    computed = "curve_before = pass_at_k_curve()\ncurve_after = pass_at_k_curve()"
    library = extract.parse(["from rlbook.evaluation import pass_at_k", computed,
                             "def show_your_working_reward(c, e):\n    return 0.0"])
    outside = extract.parse([ANSWER, computed, "import os\ndef show_your_working_reward(c, e):\n"
                                               "    return float(os.path.exists(c))"])
    assert "re-run calls your pass_at_k" in grade._screen(TRAINING, A5, library)
    assert "rlbook.evaluation.pass_at_k" in grade._screen(TRAINING, A5, library)
    assert "re-run calls your show_your_working_reward" in grade._screen(TRAINING, A5, outside)
    fine = extract.parse([ANSWER, computed, "def show_your_working_reward(c, e):\n    return 0.0"])
    assert grade._screen(TRAINING, A5, fine) is None


def test_training_answers_typed_in_or_left_none_are_not_run():
    typed = extract.parse(["curve_before = {1: 0.2, 2: 0.3, 4: 0.4, 8: 0.5}\ncurve_after = {1: 0.6}"])
    untouched = extract.parse(["curve_before = curve_after = None"])
    recomputed_then_typed = extract.parse(["curve_before = f()\ncurve_after = f()", "curve_after = {1: 0.9}"])
    assert "typed in, not computed" in grade._screen(TRAINING, A5, typed)
    assert "Not attempted yet" in grade._screen(TRAINING, A5, untouched)
    assert "curve_after is typed in" in grade._screen(TRAINING, A5, recomputed_then_typed)
