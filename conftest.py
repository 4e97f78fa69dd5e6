"""pytest hooks for the whole repository (tests/ and the lessons that nbval executes).

The lessons that time things run beside busy processes. A lesson may claim nothing about wall-clock
time that a busy machine could break (the design's "What a claim is"): it counts, reads a CPU
clock, or compares two timings taken in the same run. To keep that so, every lesson named in
``$RLBOOK_BUSY_LESSONS`` (default: 14 and 15, the ones that time their runs) is executed, under
``make test``, beside ``$RLBOOK_BUSY_PROCESSES`` processes that spin on a core each (default: one
per core that no other pytest-xdist worker keeps busy, at least one), started before its first cell and
stopped after its last. A claim that holds only on an
idle machine fails there. ``RLBOOK_BUSY_LESSONS=`` (empty) turns it off.

Under ``make test`` (pytest-xdist, one worker per core, a file whole per worker) the files go out
longest first, so the last minutes are short files filling both cores rather than one long lesson
running alone: ``LONGEST_FIRST`` lists the slow ones, in order (measured by ``make test
PYTEST_ARGS=--durations=0``); everything else follows in its usual order. pytest-xdist would
otherwise hand out the files with the most tests first (its ``--loadscope-reorder``, on by default:
in a measured run of tests/ the browser tests, listed early, started mid-run and ran alone for the last
10 minutes), so this file turns that off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BUSY_LESSONS_ENV, BUSY_PROCESSES_ENV = "RLBOOK_BUSY_LESSONS", "RLBOOK_BUSY_PROCESSES"
DEFAULT_BUSY_LESSONS = "14,15"
SPIN = "while True: pass"

_busy: dict[str, list[subprocess.Popen]] = {}  # lesson file -> its spinning processes

# Path prefixes (relative to the repository), slowest first: lesson 20 alone is about a fifth of make test.
# The browser tests that read the built book (test_lessons_in_lab) are left unlisted, to run after
# test_book has built it (a worker that needs it while the other builds it waits).
LONGEST_FIRST = ("notebooks/20_", "tests/test_assignments", "tests/browser/test_widgets_in_lab", "notebooks/21_",
                 "notebooks/18_", "tests/browser/test_book", "notebooks/07_", "notebooks/16_", "notebooks/15_",
                 "notebooks/19_", "notebooks/04_", "tests/browser/test_live_plot_in_lab", "tests/test_grading_adversarial",
                 "notebooks/11_", "notebooks/13_", "notebooks/14_", "notebooks/17_", "notebooks/12_")


def _rank(item) -> int:
    path = Path(str(item.fspath)).resolve()
    try:
        relative = path.relative_to(Path(__file__).resolve().parent).as_posix()
    except ValueError:
        return len(LONGEST_FIRST)
    return next((i for i, prefix in enumerate(LONGEST_FIRST) if relative.startswith(prefix)), len(LONGEST_FIRST))


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order set below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    items.sort(key=_rank)  # stable: a file's items keep their order, and so do the unlisted files


def _lesson_number(item) -> str | None:
    path = Path(str(item.fspath))
    if path.suffix != ".ipynb" or not path.name[:2].isdigit():
        return None
    return path.name[:2]


def _busy_lessons() -> set[str]:
    setting = os.environ.get(BUSY_LESSONS_ENV, DEFAULT_BUSY_LESSONS)
    return {number.strip().zfill(2) for number in setting.split(",") if number.strip()}


def _busy_process_count() -> int:
    """Spinners to start: ``$RLBOOK_BUSY_PROCESSES``, or enough that every core is busy. Under pytest-xdist
    each other worker keeps a core busy with its own tests, so one spinner per core they leave (at least
    one): on 2 cores with 2 workers, the lesson, the other worker and one spinner share the two cores. A
    spinner per core would, on top of that, halve the other worker's speed for the lesson's whole run."""
    setting = os.environ.get(BUSY_PROCESSES_ENV, "").strip()
    if not setting:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        other_workers = max(0, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1) - 1)
        return max(1, cores - other_workers)
    if not setting.isdigit():
        raise ValueError(f"{BUSY_PROCESSES_ENV} must be a non-negative integer, got {setting!r}")
    return int(setting)


def pytest_runtest_setup(item):
    number = _lesson_number(item)
    key = str(item.fspath)
    if number is None or number not in _busy_lessons() or key in _busy:
        return
    _busy[key] = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(_busy_process_count())]
    print(f"\nlesson {number} runs beside {len(_busy[key])} busy processes ({BUSY_LESSONS_ENV})")


def _stop(key: str) -> None:
    for process in _busy.pop(key, []):
        process.kill()
        process.wait()


def pytest_runtest_teardown(item, nextitem):
    key = str(item.fspath)
    if key in _busy and (nextitem is None or str(nextitem.fspath) != key):
        _stop(key)


def pytest_unconfigure(config):
    for key in list(_busy):
        _stop(key)
