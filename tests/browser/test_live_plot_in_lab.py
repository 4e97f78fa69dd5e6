"""A training run's live plot, seen in JupyterLab in Chromium: while ``OnlineTrainer.train`` runs with
its progress bar on, a figure of its metrics (reward, entropy, KL, length) appears under the bar and
is redrawn in place (one PNG display with a display_id, at most about once a second), so the reader
sees it change at least twice before the cell finishes — and the cell's output ends with one image.
"""

from __future__ import annotations

import time

import nbformat
import pytest
from labtools import assert_no_console_errors, error_outputs, open_notebook, run_command, wait_cells_done

SETUP = """\
from rlbook.models import load_model
from rlbook.tasks import get_task
from rlbook.trainers import OnlineTrainer, preset
from rlbook.zoo import read_card

card = read_card("arith-base")
model, tokenizer = load_model("arith-base")
task = get_task(card["recipe"]["task"], **card["recipe"]["task_settings"])
trainer = OnlineTrainer(model, tokenizer, task, preset("grpo", prompts_per_step=4, group_size=4, max_new_tokens=32))
"""
TRAIN = "history = trainer.train(STEPS)\nprint('trained', len(history), 'steps')"
STEPS = 80  # about 10 s of training on an idle 2-core machine: several redraws, at most one a second
TRAIN_S = 300


def _scratch_notebook(root, steps: int) -> str:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(TRAIN.replace("STEPS", str(steps)))]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, root / "live_plot_scratch.ipynb")
    return "live_plot_scratch.ipynb"


def _training_cell(page):
    return page.locator(".jp-Notebook .jp-Cell").nth(1)


def _images(page) -> list[str]:
    return [img.get_attribute("src") or "" for img in _training_cell(page).locator(".jp-OutputArea-output img").all()]


def _finished(page) -> bool:
    """Whether the training cell has printed its last line."""
    return f"trained {STEPS} steps" in _training_cell(page).locator(".jp-OutputArea").inner_text()


@pytest.mark.slow
def test_live_plot_appears_and_changes_while_the_cell_runs(lab, lab_page):
    page = lab_page
    open_notebook(page, _scratch_notebook(lab.root, STEPS))
    run_command(page, "notebook:run-all-cells")
    seen, deadline = [], time.monotonic() + TRAIN_S
    while time.monotonic() < deadline:
        finished = _finished(page)  # read first: the images read next are then all drawn inside train()
        sources = _images(page)
        if sources and (not seen or sources[-1] != seen[-1]):
            seen.append(sources[-1])
        if finished:
            break
        time.sleep(0.1)
    wait_cells_done(page, timeout_s=TRAIN_S)
    assert not error_outputs(page), "\n".join(error_outputs(page))
    assert len(seen) >= 3, f"the live plot appeared and changed {max(len(seen) - 1, 0)} times while the cell ran"
    assert len(_images(page)) == 1, "the plot is redrawn in place: one image at the end"
    assert_no_console_errors(page)
