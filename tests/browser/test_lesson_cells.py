"""lesson_cells finds the cells a widget needs (no browser needed)."""

from __future__ import annotations

import nbformat
import pytest
from lesson_cells import needed_cells, needs_cost, stored_seconds, trimmed_lesson, widget_cells


def _notebook(*sources: str):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# a lesson")] + [nbformat.v4.new_code_cell(s) for s in sources]
    return notebook


LESSON = _notebook(
    "%matplotlib inline\nimport numpy as np\nfrom rlbook.viz import kl as kl_viz",  # 1: setup
    "slow = np.arange(10).sum()",  # 2: unrelated
    "data = np.ones(3)",  # 3
    "data[0] = 5\nfor i in range(3):\n    print(i)",  # 4: changes data in place; i is its own
    "i = 7",  # 5: unrelated (only the loop's i above)
    "def f(x):\n    return x + data\nscale = f(1)",  # 6
    "kl_viz.kl_estimator_widget(scale, n=i if False else 3);",  # 7: reads i -> cell 5
    "def my_widget():\n    pass",  # 8: defines a widget, does not call one
)


def test_widget_cells_are_the_cells_calling_a_widget_function():
    assert widget_cells(LESSON) == [7]


def test_a_widget_needs_the_setup_cell_its_names_definers_and_in_place_changes():
    assert needed_cells(LESSON, [7]) == [1, 3, 4, 5, 6, 7]


def test_a_name_read_before_it_is_assigned_in_a_cell_comes_from_an_earlier_cell():
    notebook = _notebook("import torch", "model = 1", "model = model + 1", "other = 2", "show_widget(model)")
    assert needed_cells(notebook, [5]) == [1, 2, 3, 5]


def test_loop_and_function_argument_names_are_not_needs():
    notebook = _notebook("import torch", "x = 1",
                         "for x in range(2):\n    print(x)\ndef g(x):\n    return x\ng_widget(g)")
    assert needed_cells(notebook, [3]) == [1, 3]


def _timed(cell, seconds):
    cell.metadata["execution"] = {"iopub.execute_input": "2026-01-01T00:00:00.000000Z",
                                  "shell.execute_reply": f"2026-01-01T00:00:{seconds:06.3f}Z"}


def test_needs_cost_sums_the_stored_timings_of_the_needed_cells_but_the_setup_cell():
    notebook = _notebook("import torch", "data = 1", "unrelated = 2", "a_widget(data)")
    for index, seconds in zip((1, 2, 3, 4), (9.0, 2.5, 30.0, 0.5)):
        _timed(notebook.cells[index], seconds)
    assert stored_seconds(notebook.cells[2]) == pytest.approx(2.5)
    assert needs_cost(notebook, 4) == pytest.approx(3.0)
    notebook.cells[2].metadata.pop("execution")
    assert needs_cost(notebook, 4) is None


def test_the_trimmed_lesson_keeps_only_the_needed_cells_without_outputs(tmp_path):
    notebook = _notebook("import torch", "data = 1", "unrelated = 2", "a_widget(data)")
    notebook.cells[4].outputs = [nbformat.v4.new_output("stream", text="old")]
    nbformat.write(notebook, tmp_path / "lesson.ipynb")
    trimmed, indices = trimmed_lesson(tmp_path / "lesson.ipynb", [4])
    assert [cell.source for cell in trimmed.cells] == ["import torch", "data = 1", "a_widget(data)"]
    assert indices == [2] and trimmed.cells[2].outputs == []
