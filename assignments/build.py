"""Build every assignment's student notebook and autograder from its master (``make assignments``).

    python assignments/build.py [--out build/assignments] [a1_policy_gradient_kl ...]

For each master ``assignments/masters/NAME.ipynb`` this runs ``otter assign`` (otter-grader) into
``OUT/NAME/``: ``student/NAME.ipynb`` is what students get (stubs, no solutions, no hidden tests) and
``autograder/NAME.ipynb`` is the solution. Otter's own autograder zip is deleted: it grades by running the
notebook with its tests; the Gradescope autograder is ``gradescope.py``'s. Offline: no PDF, no Docker, and the tests are not run
here (``tests/test_assignments.py`` grades the solutions instead).

It also writes ``autograder/grading.json``, what ``assignments/grade.py`` grades with: the master's setup
cell, and for each autograded question its points, its hidden tests (each a function whose arguments name
the answers it needs) and, for a training question (``training`` in its name), the solution's training
code, which the grader re-runs with the submission's own functions under its own seed, and for a
function question the solution's definitions (``reference``), which ``hidden_cases.py`` compares the
answer with on inputs drawn from the course's seed; for a question the book has no checker for, its known
mistakes (``assignments/known_mistakes.json`` entries with a ``message``: the solution with one line edited,
and what the feedback says when an answer behaves like it); and the hand-graded questions' names and points
(``manual``, for ``assignments/manual.py``).
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import re
import shutil
import subprocess
import sys

import yaml

MASTERS = pathlib.Path(__file__).resolve().parent / "masters"
KNOWN_MISTAKES = pathlib.Path(__file__).resolve().parent / "known_mistakes.json"
DEFAULT_OUT = pathlib.Path(__file__).resolve().parent.parent / "build" / "assignments"


def master_names() -> list[str]:
    """The assignments, one per master notebook, in order."""
    return sorted(path.stem for path in MASTERS.glob("*.ipynb"))


def build(name: str, out: pathlib.Path) -> pathlib.Path:
    """Run ``otter assign`` on one master; returns the folder holding ``student/`` and ``autograder/``."""
    if name not in master_names():
        raise ValueError(f"name must be one of {master_names()}, got {name!r}")
    target = out.resolve() / name
    shutil.rmtree(target, ignore_errors=True)
    otter = pathlib.Path(sys.executable).with_name("otter")
    command = [str(otter), "assign", "--no-run-tests", "--no-pdfs", f"{name}.ipynb", str(target)]
    done = subprocess.run(command, cwd=MASTERS, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"otter assign failed for {name}:\n{done.stdout}\n{done.stderr}")
    (zip_file,) = (target / "autograder").glob(f"{name}-autograder_*.zip")
    zip_file.unlink()  # otter's own zip grades by running the notebook with its tests: gradescope.py builds ours
    spec = grading_spec(MASTERS / f"{name}.ipynb")
    (target / "autograder" / "grading.json").write_text(json.dumps(spec, indent=1, ensure_ascii=False))
    return target


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def solution_code(source: str) -> str:
    """A solution cell's code as it runs: the solution kept, the students' prompt (stub) dropped."""
    source = re.sub(r'""" # BEGIN PROMPT.*?""" # END PROMPT\n?', "", source, flags=re.S)
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in ("# BEGIN SOLUTION NO PROMPT", "# BEGIN SOLUTION", "# END SOLUTION"))


def hidden_test(source: str) -> dict:
    """One test cell: its points, the test function's source, its name and its arguments (the answers)."""
    config = re.search(r'""" # BEGIN TEST CONFIG\n(.*?)""" # END TEST CONFIG\n', source, re.S)
    (function,) = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]
    return {"points": float(yaml.safe_load(config.group(1))["points"]), "name": function.name,
            "arguments": [arg.arg for arg in function.args.args], "source": ast.unparse(function)}


def solution_cells(master: pathlib.Path) -> list[str]:
    """The master's code cells without its hidden tests: the solution as a student would hand it in."""
    cells, in_tests = [], False
    for cell in json.loads(master.read_text())["cells"]:
        source = _source(cell)
        if cell["cell_type"] == "raw" and source.strip() in ("# BEGIN TESTS", "# END TESTS"):
            in_tests = source.strip() == "# BEGIN TESTS"
        elif cell["cell_type"] == "code" and not in_tests:
            cells.append(source)
    return cells


def known_mistakes(assignment: str | None = None) -> list[dict]:
    """The entries of ``known_mistakes.json`` (of one assignment, when given)."""
    mistakes = json.loads(KNOWN_MISTAKES.read_text())["mistakes"]
    return [m for m in mistakes if assignment is None or m["assignment"] == assignment]


def _wrong_answer(source: str, mistake: dict) -> dict:
    """A known mistake as the harness uses it: the edited solution's definitions, or its literal value."""
    code = solution_code(source.replace(mistake["find"], mistake["replace"]))
    nodes = ast.parse(code).body
    entry = {"name": mistake["name"], "message": mistake["message"]}
    definitions = [node for node in nodes if isinstance(node, ast.FunctionDef)]
    if definitions:
        return {**entry, "definitions": "".join(ast.unparse(node) + "\n" for node in definitions)}
    (value,) = [node.value for node in nodes if isinstance(node, ast.Assign)]
    return {**entry, "literal": ast.literal_eval(value), "tolerance": mistake.get("tolerance", 0.0)}


def grading_spec(master: pathlib.Path) -> dict:
    """The setup code and each autograded question's points, tests, known mistakes and (training questions)
    training code."""
    cells = json.loads(master.read_text())["cells"]
    declared = [m for m in known_mistakes(master.stem) if "message" in m]
    setup, questions, manual, question, block = [], [], [], None, None
    for cell in cells:
        source = _source(cell)
        if cell["cell_type"] == "raw":
            first = source.strip().splitlines()[0] if source.strip() else ""
            if first == "# BEGIN QUESTION":
                config = yaml.safe_load(source.split("\n", 1)[1])
                question = {"name": config["name"], "points": float(config["points"]), "tests": [], "training": "",
                            "reference": "", "mistakes": []}
                (manual if config.get("manual") else questions).append(question)
            elif first == "# END QUESTION":
                question = None
            elif first in ("# BEGIN SOLUTION", "# BEGIN TESTS"):
                block = first
            elif first in ("# END SOLUTION", "# END TESTS"):
                block = None
        elif cell["cell_type"] == "code" and question is None:
            setup.append(source)
        elif cell["cell_type"] == "code" and block == "# BEGIN TESTS":
            question["tests"].append(hidden_test(source))
        elif cell["cell_type"] == "code" and block == "# BEGIN SOLUTION" and "training" in question["name"]:
            question["training"] += solution_code(source) + "\n"
        elif cell["cell_type"] == "code" and block == "# BEGIN SOLUTION":
            definitions = [n for n in ast.parse(solution_code(source)).body if isinstance(n, ast.FunctionDef)]
            question["reference"] += "".join(ast.unparse(node) + "\n" for node in definitions)
            question["mistakes"] += [_wrong_answer(source, m) for m in declared
                                     if m["question"] == question["name"] and m["find"] in source]
    for question in questions:
        if sum(test["points"] for test in question["tests"]) != question["points"]:
            raise ValueError(f"{master.name}: {question['name']}'s tests do not add up to its points")
    found = {(q["name"], m["name"]) for q in questions for m in q["mistakes"]}
    lost = [m["name"] for m in declared if (m["question"], m["name"]) not in found]
    if lost:
        raise ValueError(f"{master.name}: known mistakes whose `find` is not in their question's solution: {lost}")
    manual = [{"name": q["name"], "points": q["points"]} for q in manual]
    return {"setup": "\n".join(setup), "questions": questions, "manual": manual}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="assignments to build (default: all)")
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="output folder")
    args = parser.parse_args(argv)
    for name in args.names or master_names():
        print(f"{name}: {build(name, args.out)}")


if __name__ == "__main__":
    main()
