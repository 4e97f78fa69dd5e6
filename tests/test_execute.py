"""rlbook.execute runs a lesson headless and stores its outputs; widget cells do not stall it."""

from __future__ import annotations

import nbformat
import pytest

from rlbook.execute import execute_notebook

WIDGET_CELL = """\
import ipywidgets as widgets
import matplotlib.pyplot as plt

def draw(slope):
    plt.plot([0, 1], [0, slope])
    plt.show()

widgets.interact(draw, slope=widgets.FloatSlider(value=1.0, min=0.0, max=2.0));
"""


def _widget_notebook(path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("%matplotlib inline\nx = 41"), nbformat.v4.new_code_cell(WIDGET_CELL),
                      nbformat.v4.new_code_cell("print(x + 1)")]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)


@pytest.mark.slow
def test_widget_cells_execute_headless_within_seconds_and_outputs_are_stored(tmp_path):
    path = tmp_path / "widgets.ipynb"
    _widget_notebook(path)
    for _ in range(3):  # the stall this guards against was intermittent
        seconds = execute_notebook(path, timeout=30)  # a stalled cell fails after 30 s instead of hanging
        assert seconds < 30
    cells = nbformat.read(path, as_version=4).cells
    widget_outputs = [o for o in cells[1].outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widget_outputs, "the interact widget's view is stored"
    assert cells[2].outputs[0]["text"] == "42\n"


def test_a_missing_notebook_is_refused(tmp_path):
    with pytest.raises(ValueError, match="path"):
        execute_notebook(tmp_path / "nope.ipynb")


def test_a_finished_progress_bars_text_fallback_is_rewritten_to_its_final_state():
    from rlbook.execute import final_progress_text

    view = "application/vnd.jupyter.widget-view+json"
    state = {
        "bar": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_left", "IPY_MODEL_progress", "IPY_MODEL_right"]}},
        "left": {"model_name": "HTMLModel", "state": {"value": "runs:\u2007100%"}},
        "progress": {"model_name": "FloatProgressModel", "state": {"min": 0, "max": 3, "value": 3}},
        "right": {"model_name": "HTMLModel", "state": {"value": "\u20073/3\u2007[02:00&lt;00:00,\u200734.60s/run]"}},
        "slider": {"model_name": "VBoxModel", "state": {"children": []}},
    }
    outputs = [{"output_type": "display_data", "data": {view: {"model_id": "bar"}, "text/plain": ["runs:   0%|  | 0/3"]}},
               {"output_type": "display_data", "data": {view: {"model_id": "slider"}, "text/plain": ["interactive(…)"]}}]
    notebook = {"cells": [{"cell_type": "code", "outputs": outputs}],
                "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": state}}}}
    assert final_progress_text(notebook) == 1
    assert outputs[0]["data"]["text/plain"] == "runs: 100%|██████████| 3/3 [02:00<00:00, 34.60s/run]"
    assert outputs[1]["data"]["text/plain"] == ["interactive(…)"]  # not a progress bar: left alone
    assert final_progress_text({"cells": []}) == 0
