"""A Gradescope autograder for one assignment whose environment installs offline, and its per-submission run.

    python assignments/gradescope.py build a2_ppo [--seed 2026] [--out build/assignments/a2_ppo/gradescope]
    make gradescope ASSIGNMENT=a2_ppo SEED=2026          (the same)

``build`` writes ``autograder.zip`` in the layout Gradescope's autograder specification asks for
(``setup.sh`` and ``run_autograder`` at the root; Gradescope unpacks the zip into ``/autograder/source``,
puts the submission in ``/autograder/submission`` and reads ``/autograder/results/results.json``):

- ``wheels/``: a wheel of rlbook (which carries the zoo models the questions train: ``rlbook/zoo/models``)
  and a wheel of every package it needs, resolved with ``constraints.txt`` (the versions the book was run
  with) and torch's CPU build, ``torch==2.13.0+cpu`` (no CUDA: the CPU wheel is about 180 MB, the CUDA
  one and its libraries gigabytes, and grading needs no GPU). They are built once into
  ``build/gradescope-wheels/`` and reused;
- ``requirements.txt``: each of those wheels pinned (``name==version``);
- ``setup.sh``: makes a Python 3.11 virtual environment in ``/autograder/venv`` and installs
  ``requirements.txt`` with ``pip --no-index --find-links wheels``: no package registry at all. The only
  thing it may fetch is the interpreter, ``python3.11`` and ``python3.11-venv`` from the image's own apt
  archive (Ubuntu's), when the image lacks them: the wheels are built for CPython 3.11;
- ``run_autograder``: grades ``/autograder/submission/*.ipynb`` with ``grade.py`` (the same reading,
  screening, hidden tests and training re-runs as ``make grade``) and writes ``results.json``: one test per
  autograded question (its score, its points, its feedback), the total, and a line saying which questions
  are graded by hand;
- ``assignments/`` (the grader's files) and ``autograder/grading.json`` (the solution and hidden tests:
  the zip is the instructor's, never the students'), and ``course.json`` (the course's seed, the training
  size ``ci`` and the time limit).

``run`` is what ``run_autograder`` calls; ``--root`` (default ``/autograder``) lets a test run it locally.
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
WHEELHOUSE = ROOT / "build" / "gradescope-wheels"
TORCH_CPU = "torch==2.13.0+cpu"  # the CPU build of the torch that constraints.txt pins (2.13.0)
GRADER_FILES = ("grade.py", "extract.py", "sandbox.py", "harness.py", "hidden_cases.py", "gradescope.py",
                "masters/autograde.py")

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image. Every Python package is a wheel
# in /autograder/source/wheels (pinned in requirements.txt): pip is told --no-index, so no registry is used.
# The wheels are for CPython 3.11; only when the image lacks it is python3.11 installed from its apt archive.
set -euo pipefail
SOURCE=/autograder/source
if ! command -v python3.11 >/dev/null || ! python3.11 -c "import ensurepip, venv" 2>/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y python3.11 python3.11-venv
fi
python3.11 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --no-index --find-links "$SOURCE/wheels" -r "$SOURCE/requirements.txt"
/autograder/venv/bin/python -c "import rlbook, torch; print('rlbook ready, torch', torch.__version__)"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for each submission, in /autograder: it grades /autograder/submission/*.ipynb and
# writes /autograder/results/results.json. AUTOGRADER_ROOT and AUTOGRADER_PYTHON let a test run it elsewhere.
set -u
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
exec "$PYTHON" "$ROOT/source/assignments/gradescope.py" run --root "$ROOT"
"""


def _wheel_pin(path: pathlib.Path) -> str:
    """``name==version`` of a wheel file (PEP 427 names: ``{name}-{version}-...whl``)."""
    name, version = path.name.split("-")[:2]
    return f"{name.replace('_', '-')}=={version}"


def build_rlbook_wheel(folder: pathlib.Path) -> pathlib.Path:
    """A wheel of this checkout's rlbook (the zoo models inside it, as package data)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("rlbook-*.whl"):
        old.unlink()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(folder), str(ROOT)], check=True)
    (wheel,) = folder.glob("rlbook-*.whl")
    return wheel


def build_wheelhouse(rlbook_wheel: pathlib.Path, folder: pathlib.Path = WHEELHOUSE) -> list[pathlib.Path]:
    """Every wheel rlbook needs, resolved with constraints.txt and torch's CPU build (built once, then reused)."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / "constraints.txt"
    constraints = (ROOT / "constraints.txt").read_text()
    if not (stamp.is_file() and stamp.read_text() == constraints and any(folder.glob("torch-*.whl"))):
        for old in folder.glob("*.whl"):
            old.unlink()
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(folder), "-c",
                        str(ROOT / "constraints.txt"), TORCH_CPU, str(rlbook_wheel)], check=True)
        stamp.write_text(constraints)
    return sorted(path for path in folder.glob("*.whl") if not path.name.startswith("rlbook-"))


def missing_wheels(requirements: list[str], wheels: list[pathlib.Path]) -> list[str]:
    """The pinned requirements that no wheel in ``wheels`` provides (names compared as PEP 503 normalises)."""
    def key(pin: str) -> str:
        name, version = pin.split("==")
        return f"{re.sub(r'[-_.]+', '-', name).lower()}=={version}"
    have = {key(_wheel_pin(path)) for path in wheels}
    return [pin for pin in requirements if key(pin) not in have]


def _assignments_build():
    """``assignments/build.py``, loaded from its path under its own name.

    A plain ``import build`` would return whichever ``build`` the process imported first (the book's
    ``book/build.py`` when the book's tests ran earlier in the same worker, or PyPI's ``build``).
    """
    import importlib.util  # noqa: PLC0415

    name = "rlbook_assignments_build"
    if name not in sys.modules:
        sys.path.insert(0, str(HERE))  # build.py imports its neighbours
        spec = importlib.util.spec_from_file_location(name, HERE / "build.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def build(assignment: str, out: pathlib.Path, *, seed: int = 0, size: str = "ci", timeout: float = 600.0,
          wheels: list[pathlib.Path] | None = None) -> pathlib.Path:
    """Write ``out/autograder.zip`` for ``assignment``; returns its path.

    ``wheels`` (the dependency wheels) defaults to the full wheelhouse (``build_wheelhouse``); a test may pass
    fewer to build quickly, and the zip then installs only with those.
    """
    assignments_build = _assignments_build()
    if assignment not in assignments_build.master_names():
        raise ValueError(f"assignment must be one of {assignments_build.master_names()}, got {assignment!r}")
    if size not in ("ci", "full") or not timeout > 0:
        raise ValueError(f"size must be 'ci' or 'full' and timeout > 0, got size={size!r}, timeout={timeout}")
    out.mkdir(parents=True, exist_ok=True)
    rlbook_wheel = build_rlbook_wheel(out / "rlbook-wheel")
    wheels = build_wheelhouse(rlbook_wheel) if wheels is None else list(wheels)
    requirements = [_wheel_pin(rlbook_wheel), *sorted({_wheel_pin(path) for path in wheels})]
    spec = assignments_build.grading_spec(assignments_build.MASTERS / f"{assignment}.ipynb")
    course = {"assignment": assignment, "seed": seed, "size": size, "timeout_s": timeout}
    target = out / "autograder.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text, mode in (("setup.sh", SETUP_SH, 0o755), ("run_autograder", RUN_AUTOGRADER, 0o755),
                                 ("requirements.txt", "\n".join(requirements) + "\n", 0o644),
                                 ("course.json", json.dumps(course, indent=1) + "\n", 0o644),
                                 ("autograder/grading.json", json.dumps(spec, indent=1, ensure_ascii=False), 0o644)):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, text)
        for relative in GRADER_FILES:
            archive.write(HERE / relative, f"assignments/{relative}")
        for wheel in [rlbook_wheel, *wheels]:
            archive.write(wheel, f"wheels/{wheel.name}", compress_type=zipfile.ZIP_STORED)
    return target


def _question_feedback(feedback: str, questions: list[str]) -> dict[str, str]:
    """Each question's reasons from grade.py's feedback lines (``name (got/points): reasons``)."""
    found = {}
    for line in feedback.splitlines():
        for name in questions:
            if line.startswith(f"{name} ("):
                found[name] = line.split("): ", 1)[-1]
    return found


def results(row: dict, spec: dict, elapsed: float) -> dict:
    """Gradescope's results.json for one graded row: one test per autograded question, and the total."""
    questions = [q["name"] for q in spec["questions"]]
    reasons = _question_feedback(row["feedback"], questions)
    tests = [{"name": name, "number": str(i), "score": float(row[name]), "max_score": q["points"],
              "status": "passed" if float(row[name]) == q["points"] else "failed",
              "output": reasons.get(name, "passed"), "visibility": "visible"}
             for i, (name, q) in enumerate(((q["name"], q) for q in spec["questions"]), start=1)]
    manual = spec.get("manual", [])
    hand = (f" {sum(q['points'] for q in manual):g} more points are graded by hand "
            f"({', '.join(q['name'] for q in manual)}).") if manual else ""
    notebook = row["feedback"] if row["feedback"].startswith("the grader could not read") else ""
    return {"score": float(row["total"]), "execution_time": round(elapsed),
            "output": f"Autograded: {float(row['total']):g} / {float(row['possible']):g} points.{hand} {notebook}".strip(),
            "stdout_visibility": "hidden", "tests": tests}


def run(root: pathlib.Path) -> dict:
    """Grade the submission under ``root/submission`` and write ``root/results/results.json``."""
    source = root / "source"
    sys.path.insert(0, str(source / "assignments"))
    import grade  # noqa: PLC0415 - the copy in the zip

    course = json.loads((source / "course.json").read_text())
    spec = json.loads((source / "autograder" / "grading.json").read_text())
    (root / "results").mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    notebooks = sorted((root / "submission").rglob("*.ipynb"))
    if not notebooks:
        outcome = {"score": 0.0, "output": "No .ipynb file was submitted: upload your notebook.",
                   "stdout_visibility": "hidden", "tests": []}
    else:
        with tempfile.TemporaryDirectory(prefix="gradescope-") as scratch:
            folder = pathlib.Path(scratch) / "submissions"
            folder.mkdir()
            shutil.copy(notebooks[0], folder / "submission.ipynb")
            out = pathlib.Path(scratch) / "out" / "scores.csv"
            grade.grade_folder(folder, source / "autograder", out, timeout=course["timeout_s"], seed=course["seed"],
                               size=course["size"])
            with open(out, newline="") as handle:
                (row,) = list(csv.DictReader(handle))
        outcome = results(row, spec, time.monotonic() - start)
        if len(notebooks) > 1:
            outcome["output"] += f" Several notebooks were submitted; {notebooks[0].name} was graded."
    (root / "results" / "results.json").write_text(json.dumps(outcome, indent=1, ensure_ascii=False))
    return outcome


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="write the assignment's autograder.zip")
    make.add_argument("assignment", help="e.g. a2_ppo")
    make.add_argument("--seed", type=int, default=0, help="the course's seed (keep it private)")
    make.add_argument("--size", default="ci", choices=("ci", "full"), help="the training re-runs' size")
    make.add_argument("--timeout", type=float, default=600.0, help="seconds per test process")
    make.add_argument("--out", type=pathlib.Path, default=None,
                      help="folder for autograder.zip (default build/assignments/NAME/gradescope)")
    grade_one = commands.add_parser("run", help="grade /autograder/submission (what run_autograder calls)")
    grade_one.add_argument("--root", type=pathlib.Path, default=pathlib.Path("/autograder"))
    args = parser.parse_args(argv)
    if args.command == "build":
        out = args.out or ROOT / "build" / "assignments" / args.assignment / "gradescope"
        target = build(args.assignment, out, seed=args.seed, size=args.size, timeout=args.timeout)
        print(f"{target} ({target.stat().st_size / 2**20:.0f} MB)")
    else:
        outcome = run(args.root)
        print(f"{outcome['score']:g} points")


if __name__ == "__main__":
    main()
