"""Build every assignment's student notebook and autograder from its master (``make assignments``).

    python assignments/build.py [--out build/assignments] [a1_policy_gradient_kl ...]

For each master ``assignments/masters/NAME.ipynb`` this runs ``otter assign`` (otter-grader) into
``OUT/NAME/``: ``student/NAME.ipynb`` is what students get (stubs, no solutions, no hidden tests),
``autograder/autograder.zip`` is what ``assignments/grade.py`` grades with, and
``autograder/NAME.ipynb`` is the solution. Offline: no PDF, no Docker, and the tests are not run
here (``tests/test_assignments.py`` grades the solutions instead).
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys

MASTERS = pathlib.Path(__file__).resolve().parent / "masters"
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
    zip_file.rename(target / "autograder" / "autograder.zip")
    return target


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="assignments to build (default: all)")
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="output folder")
    args = parser.parse_args(argv)
    for name in args.names or master_names():
        print(f"{name}: {build(name, args.out)}")


if __name__ == "__main__":
    main()
