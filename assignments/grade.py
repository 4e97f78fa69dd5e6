"""Grade a folder of submitted notebooks into one CSV of scores and per-student feedback.

    python assignments/grade.py SUBMISSIONS/ --assignment a1_policy_gradient_kl --out scores.csv [--seed N]

Each ``SUBMISSIONS/*.ipynb`` (the student is the file's name) is graded with the assignment's
``grading.json`` from ``make assignments``, in three steps that nothing in the submission can fake:

1. **Read, not run.** ``extract.py`` parses the code cells (any cell, any kernel name) and keeps the
   submission's imports, definitions (the last one that is not the stub) and literal values; none of its
   top-level code runs, so a cell that changes directory, patches a checker or rewrites a file does nothing.
   An answer that calls the library's reference (``rlbook``) earns nothing for that question, and says so;
   one that reaches outside its function (``os``, ``open``, ``getattr``, dunder attributes...) is not run.
2. **Test in a fresh process per question**, sandboxed (``sandbox.py``: own folder, own unprivileged user,
   no network, the grader's files and the other submissions hidden, a clean environment, time and memory
   limits). The hidden tests come from the master, not from anything the submission can reach.
3. **Re-run training questions** with the master's training code and the submission's own functions under the
   grader's ``--seed``; the numbers the notebook reports are never read. A training question counts only
   when the notebook computed its answers (numbers typed in as literals earn nothing).

The CSV has one row per student: ``student``, ``total``, ``possible``, one column per question and
``feedback``; the same feedback goes to ``FEEDBACK/<student>.txt`` and ``.html`` beside the CSV
(``--feedback-dir``). Hand-graded questions: ``assignments/manual.py``.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import csv
import hashlib
import html
import json
import math
import os
import pathlib
import queue
import re
import secrets
import shutil
import sys
import tempfile
import threading

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import extract  # noqa: E402
import sandbox  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_BUILD = ROOT / "build" / "assignments"
RUNTIME_FILES = (HERE / "harness.py", HERE / "hidden_cases.py", HERE / "masters" / "autograde.py")


def load_spec(autograder: pathlib.Path) -> dict:
    """The assignment's ``grading.json`` (``autograder`` is that file or the folder holding it)."""
    path = autograder / "grading.json" if autograder.is_dir() else autograder
    if path.name != "grading.json":
        path = path.with_name("grading.json")
    if not path.is_file():
        raise ValueError(f"autograder {autograder} has no grading.json: run `make assignments` first")
    return json.loads(path.read_text())


def question_points(autograder: pathlib.Path) -> dict[str, float]:
    """Each autograded question's name and points."""
    return {q["name"]: q["points"] for q in load_spec(autograder)["questions"]}


def answer_names(question: dict) -> list[str]:
    """The names a question's tests take as arguments: the answers it needs, in order."""
    return list(dict.fromkeys(name for test in question["tests"] for name in test["arguments"]))


def _refusal(name: str, submission: extract.Submission) -> str | None:
    """Why the answer ``name`` (a function or a literal) scores 0 without running, or None to run its tests."""
    if submission.is_placeholder(name) and name not in submission.definitions:
        return f"Not attempted yet: replace the placeholder of {name} with your answer."
    if name in submission.library_names():
        return (f"{name} is the library's reference implementation ({submission.library_names()[name]}), "
                "imported: this question asks you to write it yourself, so it earns no points")
    if name in submission.definitions:
        reference = submission.uses_reference(name)
        if reference:
            return (f"{name} calls the library's reference implementation ({reference}): this question asks "
                    "you to write it yourself, so it earns no points")
        outside = submission.reaches_outside(name)
        if outside:
            return (f"{name} uses `{outside}`, which an answer here never needs (it could reach the grader): "
                    "not run, 0 points. Write the answer with torch and math only")
        return None
    if name in submission.stubs:
        return "Not attempted yet: replace the `raise NotImplementedError` with your answer."
    if name in submission.assigned:
        return (f"{name} is bound to something else ({submission.assigned[name]!r}), not defined: write "
                "it yourself (an alias of the library's function earns no points)")
    if name not in submission.literals:
        return f"{name} not found: the cell that defines it was deleted or does not parse as Python"
    return None


def _screen(question: dict, spec: dict, submission: extract.Submission) -> str | None:
    """Why the question scores 0 without running anything, or None to run its tests.

    A training question needs its answers computed by the notebook (not typed in), and every answer function
    its re-run calls must pass the same screening as its own question (or the re-run would run refused code).
    """
    if not question["training"]:
        return next(filter(None, (_refusal(name, submission) for name in answer_names(question))), None)
    for name in answer_names(question):
        if name in submission.assigned:
            continue
        if name in submission.literals and not submission.is_placeholder(name):
            return (f"{name} is typed in, not computed: the grader re-runs this training with your functions "
                    "and its own seed, and gives no points to numbers that no code of yours computed")
        return f"Not attempted yet: {name} is never computed (run the training cell of this question)"
    answers = {name for q in spec["questions"] if not q["training"] for name in answer_names(q)}
    used = {n.id for n in ast.walk(ast.parse(question["training"])) if isinstance(n, ast.Name)}
    for name in sorted(used & answers):
        refused = _refusal(name, submission)
        if refused:
            return f"the grader's re-run calls your {name}, which cannot be used: {refused}"
    return None


def _jobs(spec: dict, questions: list[dict], submission: extract.Submission, seed: int) -> list[dict]:
    """What the sandboxed harness runs: every function question in one job, each training question in its own.

    The setup takes the grader's seed. A training job holds only the functions its training code calls, so
    equal jobs (the same functions, or none) give equal results and are run once per grading pass.
    """
    setup = re.sub(r"^SEED = \d+", f"SEED = {seed}", spec["setup"], flags=re.M)
    functions = [q for q in questions if not q["training"]]
    jobs = [{"setup": setup, "submission": submission.source(), "training": "", "questions": functions,
             "seed": seed}] if functions else []
    for question in (q for q in questions if q["training"]):
        used = {n.id for n in ast.walk(ast.parse(question["training"])) if isinstance(n, ast.Name)}
        jobs.append({"setup": setup, "submission": submission.source(used & set(submission.definitions),
                                                                     also_used=frozenset(used)),
                     "training": question["training"], "questions": [question], "seed": seed})
    return jobs


def _json_or_none(line: str):
    try:
        return json.loads(line)
    except ValueError:
        return None


class Grader:
    """Grades submissions of one assignment; holds the sandbox users free for the jobs running at once."""

    def __init__(self, autograder: pathlib.Path, *, seed: int = 0, limits: sandbox.Limits | None = None,
                 jobs: int = 1, hide: list[pathlib.Path] = (), size: str | None = None):
        self.spec = load_spec(autograder)
        self.seed = seed
        self.limits = limits or sandbox.Limits()
        self.size = size or os.environ.get("RLBOOK_SIZE")  # the size the training re-runs use (ci or full)
        self.warning = sandbox.isolation_warning()
        own = autograder if autograder.is_dir() else autograder.parent
        self.hide = [pathlib.Path(p).resolve() for p in [*hide, HERE, ROOT / "build", own]]
        self.slots: queue.Queue = queue.Queue()
        for slot in range(jobs):
            self.slots.put(slot)
        self.cache: dict[str, list[dict]] = {}
        self.lock = threading.Lock()

    def _run(self, job: dict, scratch: pathlib.Path, uid: int | None) -> list[dict]:
        key = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()
        with self.lock:
            if key in self.cache:
                return self.cache[key]
        nonce = secrets.token_hex(16)
        folder = sandbox.make_folder(scratch, key[:12], uid)
        for path in RUNTIME_FILES:
            shutil.copy(path, folder / path.name)
        extra = {"RLBOOK_SIZE": self.size} if self.size else {}
        outcome = sandbox.run([sys.executable, "-I", "harness.py"], folder, json.dumps({**job, "nonce": nonce}),
                              self.limits, uid=uid, hide=self.hide, extra_env=extra)
        results = [result for result in map(_json_or_none, outcome.stdout.splitlines())
                   if isinstance(result, dict) and result.get("nonce") == nonce]
        done = {(r["question"], r["test"]) for r in results}
        for question, test in ((q, t) for q in job["questions"] for t in q["tests"]):
            if (question["name"], test["name"]) in done:
                continue
            if outcome.timed_out:
                why = (f"did not finish within the {self.limits.wall_s:.0f} s limit (a loop that never ends, or "
                       "far more work than asked): 0 for this question")
            else:
                last = outcome.stderr.strip().splitlines()[-1:] or [f"exit status {outcome.returncode}"]
                why = (f"the test process stopped (exit status {outcome.returncode}; over the "
                       f"{self.limits.memory_gb:g} GB memory limit, or the process was ended): {last[0][-300:]}")
            results.append({"question": question["name"], "test": test["name"], "passed": False, "message": why})
        with self.lock:
            self.cache[key] = results
        return results

    def grade(self, path: pathlib.Path) -> dict:
        """One CSV row: the score on each question, the total, and the feedback of each lost point."""
        points = {q["name"]: q["points"] for q in self.spec["questions"]}
        row = {"student": path.stem, **{name: 0.0 for name in points}}
        feedback: dict[str, list[str]] = {}  # question -> its failed tests' messages
        try:
            submission = extract.parse(extract.code_cells(path))
        except ValueError as error:
            submission, feedback = None, {"notebook": [f"the grader could not read this notebook: {error}"]}
        slot = self.slots.get()
        uid = None if self.warning else sandbox.FIRST_UID + slot
        try:
            with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
                scratch = pathlib.Path(scratch)
                scratch.chmod(0o711)
                to_run = []
                for question in self.spec["questions"] if submission else []:
                    reason = _screen(question, self.spec, submission)
                    if reason:
                        feedback[question["name"]] = [reason]
                    else:
                        to_run.append(question)
                results = {}
                for job in _jobs(self.spec, to_run, submission, self.seed) if submission else []:
                    results.update({(r["question"], r["test"]): r for r in self._run(job, scratch, uid)})
                for question in to_run:
                    self._score(question, results, row, feedback)
        finally:
            self.slots.put(slot)
        row["total"] = sum(row[name] for name in points)
        row["possible"] = sum(points.values())
        lines = [" | ".join(feedback["notebook"])] if "notebook" in feedback else []
        lines += [f"{name} ({row[name]:g}/{points[name]:g}): {' | '.join(feedback[name])}"
                  for name in points if name in feedback]
        row["feedback"] = "\n".join(lines) if lines else "all autograded questions passed"
        return row

    @staticmethod
    def _score(question: dict, results: dict, row: dict, feedback: dict) -> None:
        """Add a question's points from its tests' results; a failure of the course's hidden cases costs all."""
        name, failed = question["name"], []
        for test in question["tests"]:
            result = results[(name, test["name"])]
            if result["passed"]:
                row[name] += test["points"]
            elif result["message"] not in failed:
                failed.append(result["message"])
        hidden = results.get((name, "hidden_cases"), {"passed": True})
        if not hidden["passed"] and not failed:
            row[name] = 0.0  # right on the public checkers' cases only: the course's own cases decide
            failed.append(hidden["message"])
        known = results.get((name, "known_mistake"))
        if known and failed:
            failed = [known["message"]]  # the declared mistake it matches says more than "expected …, got …"
        if failed:
            feedback[name] = failed


def read_late_days(path: pathlib.Path) -> dict[str, float]:
    """``{student: days late}`` from a CSV with the columns ``student`` and ``days_late`` (a number >= 0)."""
    try:
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle))
        days = {row["student"]: float(row["days_late"] or 0) for row in rows}
    except (OSError, KeyError, ValueError) as error:
        raise ValueError(f"late must be a CSV with columns student, days_late (numbers): {path}: {error}") from None
    negative = [student for student, value in days.items() if not value >= 0]
    if negative:
        raise ValueError(f"late: days_late must be >= 0, not for {', '.join(negative)}")
    return days


def late_factor(days: float, penalty_per_day: float) -> float:
    """What a late submission keeps: 1 − penalty × (each day or part of a day late), never below 0."""
    return max(0.0, 1.0 - penalty_per_day * math.ceil(days))


def grade_folder(submissions: pathlib.Path, autograder: pathlib.Path, out_csv: pathlib.Path, *,
                 timeout: float = 180.0, jobs: int = 1, feedback_dir: pathlib.Path | None = None, seed: int = 0,
                 memory_gb: float = 6.0, size: str | None = None, late_days: dict[str, float] | None = None,
                 late_penalty: float = 0.1) -> list[dict]:
    """Grade every ``*.ipynb`` in ``submissions`` and write ``out_csv`` (and one feedback file per student).

    ``late_days`` ({student: days late}) adds the columns ``days_late``, ``late_factor`` (1 − ``late_penalty``
    per day or part of a day) and ``total_after_late``.
    """
    if not 0 <= late_penalty <= 1:
        raise ValueError(f"late_penalty must be a fraction per day in [0, 1], got {late_penalty}")
    if not submissions.is_dir():
        raise ValueError(f"submissions must be a folder of .ipynb files, got {submissions}")
    if not (autograder.is_dir() or autograder.with_name("grading.json").is_file()):
        raise ValueError(f"autograder {autograder} not found: run `make assignments` first")
    if timeout <= 0 or jobs < 1:
        raise ValueError(f"timeout must be > 0 and jobs >= 1, got timeout={timeout}, jobs={jobs}")
    feedback_dir = feedback_dir or out_csv.with_suffix("")
    grader = Grader(autograder, seed=seed, limits=sandbox.Limits(wall_s=timeout, memory_gb=memory_gb), jobs=jobs,
                    hide=[submissions, out_csv.parent, feedback_dir], size=size)
    if grader.warning:
        print(grader.warning, file=sys.stderr)
    notebooks = sorted(submissions.glob("*.ipynb"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        rows = list(pool.map(grader.grade, notebooks))
    columns = ["student", "total", "possible", *question_points(autograder), "feedback"]
    if late_days is not None:
        columns[3:3] = ["days_late", "late_factor", "total_after_late"]
        for row in rows:
            row["days_late"] = late_days.get(row["student"], 0.0)
            row["late_factor"] = late_factor(row["days_late"], late_penalty)
            row["total_after_late"] = row["total"] * row["late_factor"]
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    with open(out_csv, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    feedback_dir.mkdir(parents=True, exist_ok=True)
    for row in rows:
        (feedback_dir / f"{row['student']}.txt").write_text(
            f"{row['student']}: {row['total']:g} / {row['possible']:g} autograded points\n\n{row['feedback']}\n")
        (feedback_dir / f"{row['student']}.html").write_text(feedback_html(row, list(question_points(autograder))))
    return rows


def feedback_html(row: dict, questions: list[str]) -> str:
    """One student's feedback as a small self-contained HTML page: a table of the questions, then the reasons."""
    cells = "".join(f"<tr><td>{html.escape(name)}</td><td>{row[name]:g}</td></tr>" for name in questions)
    reasons = "".join(f"<li>{html.escape(line)}</li>" for line in row["feedback"].splitlines())
    title = html.escape(f"{row['student']}: {row['total']:g} / {row['possible']:g} autograded points")
    return (f"<!doctype html><meta charset='utf-8'><title>{title}</title><h1>{title}</h1>"
            f"<table><tr><th>question</th><th>points</th></tr>{cells}</table><ul>{reasons}</ul>\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=pathlib.Path, help="folder of submitted .ipynb files")
    parser.add_argument("--assignment", required=True, help="e.g. a1_policy_gradient_kl")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="CSV to write")
    parser.add_argument("--build", type=pathlib.Path, default=DEFAULT_BUILD, help="where `make assignments` built")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds allowed per question's process")
    parser.add_argument("--memory-gb", type=float, default=6.0, help="address space allowed per process (GB)")
    parser.add_argument("--seed", type=int, default=0, help="the course's seed: training re-runs use it")
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at once (one per core)")
    parser.add_argument("--feedback-dir", type=pathlib.Path, default=None,
                        help="one feedback file per student (default: the CSV's name without .csv)")
    parser.add_argument("--late", type=pathlib.Path, default=None,
                        help="CSV with columns student, days_late: adds the late factor and total_after_late")
    parser.add_argument("--late-penalty", type=float, default=0.1, help="fraction lost per day late (0.1)")
    args = parser.parse_args(argv)
    autograder = args.build / args.assignment / "autograder"
    rows = grade_folder(args.submissions, autograder, args.out, timeout=args.timeout, jobs=args.jobs,
                        feedback_dir=args.feedback_dir, seed=args.seed, memory_gb=args.memory_gb,
                        late_days=read_late_days(args.late) if args.late else None, late_penalty=args.late_penalty)
    for row in rows:
        print(f"{row['student']}: {row['total']:g} / {row['possible']:g}")


if __name__ == "__main__":
    main()
