"""Grade a folder of submitted notebooks into one CSV of scores and per-student feedback.

    python assignments/grade.py SUBMISSIONS/ --assignment a1_policy_gradient_kl --out scores.csv

Each ``SUBMISSIONS/*.ipynb`` (the student is the file's name) is graded by ``otter run`` (otter-grader,
no Docker, no network) with the assignment's ``autograder.zip`` from ``make assignments``, in a
fresh folder and a process of its own, under a wall-clock limit (``--timeout``, 180 s by default).
A submission that raises is graded on what ran (the autograder ignores errors and runs every hidden
test); one that runs past the limit, or that otter cannot read, scores 0 with the reason as its
feedback. Nothing a submission does stops the others from being graded.

The CSV has one row per student: ``student``, ``total``, ``possible``, one column per question,
and ``feedback`` (every failed test's message: the book's checkers name the likely mistake). The
same feedback is written to ``FEEDBACK/<student>.txt`` beside the CSV (``--feedback-dir``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile

DEFAULT_BUILD = pathlib.Path(__file__).resolve().parent.parent / "build" / "assignments"


def question_points(autograder: pathlib.Path) -> dict[str, float]:
    """Each autograded question's name and points, read from the autograder zip's test files."""
    points = {}
    with zipfile.ZipFile(autograder) as archive:
        for member in sorted(archive.namelist()):
            if member.startswith("tests/") and member.endswith(".py"):
                source = archive.read(member).decode()
                name = re.search(r'^name = "(.+)"$', source, re.M).group(1)
                points[name] = float(re.search(r"^points = ([\d.]+)$", source, re.M).group(1))
    if not points:
        raise ValueError(f"autograder {autograder} holds no tests")
    return points


def _run_otter(submission: pathlib.Path, autograder: pathlib.Path, timeout: float) -> tuple[dict | None, str]:
    """Run ``otter run`` on one submission in a scratch folder: (its results.json, or None, and why)."""
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        scratch = pathlib.Path(scratch)
        copy = scratch / "submission.ipynb"
        shutil.copy(submission, copy)
        otter = pathlib.Path(sys.executable).with_name("otter")
        command = [str(otter), "run", "--no-logo", "-a", str(autograder), "-o", str(scratch / "out"), str(copy)]
        (scratch / "out").mkdir()
        process = subprocess.Popen(command, cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        try:
            log, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the kernel otter started is in the same session
            process.communicate()
            return None, (f"the notebook did not finish within the {timeout:.0f} s limit (a cell that never "
                          "ends, or a training run far longer than asked): every question scored 0")
        results = scratch / "out" / "results.json"
        if not results.exists():
            last_line = log.strip().splitlines()[-1] if log.strip() else "no output"
            return None, f"the autograder could not grade this notebook (is it a valid .ipynb?): {last_line}"
        return json.loads(results.read_text()), ""


def grade_one(submission: pathlib.Path, autograder: pathlib.Path, timeout: float) -> dict:
    """One CSV row: the student's score on each question, the total, and the feedback of each failed test."""
    points = question_points(autograder)
    results, failure = _run_otter(submission, autograder, timeout)
    row = {"student": submission.stem, **{name: 0.0 for name in points}}
    feedback = [failure] if failure else []
    for test in (results or {}).get("tests", []):
        name = test.get("name")
        if name not in points:
            continue
        row[name] = float(test.get("score") or 0.0)
        if row[name] < points[name]:
            feedback.append(f"{name} ({row[name]:g}/{points[name]:g}): {_failure_text(test.get('output', ''))}")
    row["total"] = sum(row[name] for name in points)
    row["possible"] = sum(points.values())
    row["feedback"] = "\n".join(feedback) if feedback else "all autograded questions passed"
    return row


def _failure_text(output: str) -> str:
    """The messages of a question's failed tests, without otter's tracebacks and headers."""
    messages = re.findall(r"^\s*(?:AssertionError|\w+Error): (.*?)(?=\n\S|\n\s*\n|\Z)", output, re.M | re.S)
    if messages:
        return " | ".join(" ".join(m.split()) for m in messages)
    if "NameError" in output or "NoneType" in output:
        return "not answered (the variable or function the test needs is missing)"
    return " ".join(output.split())[-600:]


def grade_folder(submissions: pathlib.Path, autograder: pathlib.Path, out_csv: pathlib.Path, *,
                 timeout: float = 180.0, jobs: int = 1, feedback_dir: pathlib.Path | None = None) -> list[dict]:
    """Grade every ``*.ipynb`` in ``submissions`` and write ``out_csv`` (and one feedback file per student)."""
    if not submissions.is_dir():
        raise ValueError(f"submissions must be a folder of .ipynb files, got {submissions}")
    if not autograder.is_file():
        raise ValueError(f"autograder {autograder} not found: run `make assignments` first")
    if timeout <= 0 or jobs < 1:
        raise ValueError(f"timeout must be > 0 and jobs >= 1, got timeout={timeout}, jobs={jobs}")
    notebooks = sorted(submissions.glob("*.ipynb"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        rows = list(pool.map(lambda path: grade_one(path, autograder, timeout), notebooks))
    columns = ["student", "total", "possible", *question_points(autograder), "feedback"]
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    with open(out_csv, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    feedback_dir = feedback_dir or out_csv.with_suffix("")
    feedback_dir.mkdir(parents=True, exist_ok=True)
    for row in rows:
        (feedback_dir / f"{row['student']}.txt").write_text(
            f"{row['student']}: {row['total']:g} / {row['possible']:g} autograded points\n\n{row['feedback']}\n")
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=pathlib.Path, help="folder of submitted .ipynb files")
    parser.add_argument("--assignment", required=True, help="e.g. a1_policy_gradient_kl")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="CSV to write")
    parser.add_argument("--build", type=pathlib.Path, default=DEFAULT_BUILD, help="where `make assignments` built")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds allowed per submission")
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at once (one per core)")
    parser.add_argument("--feedback-dir", type=pathlib.Path, default=None,
                        help="one feedback file per student (default: the CSV's name without .csv)")
    args = parser.parse_args(argv)
    autograder = args.build / args.assignment / "autograder" / "autograder.zip"
    rows = grade_folder(args.submissions, autograder, args.out, timeout=args.timeout, jobs=args.jobs,
                        feedback_dir=args.feedback_dir)
    for row in rows:
        print(f"{row['student']}: {row['total']:g} / {row['possible']:g}")


if __name__ == "__main__":
    main()
