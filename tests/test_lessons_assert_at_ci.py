"""Every lesson asserts at least one claim at the CI size.

DESIGN.md's budget: the CI size "still demonstrates every asserted claim". ``claim_at_full_size`` prints a
claim as a report at the CI size, so a lesson whose every ✓ goes through it would pass ``make test``
without asserting anything there; this test reads each lesson's code cells and requires at least one
call of ``check_claim`` itself (a call, found with ``ast``; an import or a comment does not count).
"""

from __future__ import annotations

import ast
import pathlib

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

LESSONS = sorted((pathlib.Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _calls(notebook, name: str) -> int:
    count = 0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(TransformerManager().transform_cell(cell.source))
        count += sum(1 for node in ast.walk(tree) if isinstance(node, ast.Call)
                     and (getattr(node.func, "id", None) == name or getattr(node.func, "attr", None) == name))
    return count


def test_the_lessons_are_found():
    assert len(LESSONS) >= 22


@pytest.mark.parametrize("lesson", LESSONS, ids=[path.stem for path in LESSONS])
def test_lesson_calls_check_claim_at_every_size(lesson):
    notebook = nbformat.read(lesson, as_version=4)
    assert _calls(notebook, "check_claim") >= 1, (
        f"{lesson.name} asserts no claim at the CI size: every ✓ goes through claim_at_full_size "
        "(make one claim hold at the CI size, or make the CI size large enough for it)")
