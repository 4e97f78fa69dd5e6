"""Run lessons headless and store their outputs: ``python -m rlbook.execute notebooks/NN_*.ipynb``.

What ``make execute`` calls. Each notebook is run top to bottom in a fresh kernel (``nbclient``,
the engine of ``jupyter nbconvert --execute``) and written back in place with its outputs and
its widgets' state, so a reader sees every figure and slider without running anything.

Why not ``jupyter nbconvert --execute`` itself: on this project's lessons it sometimes stalls
after a cell that displays a widget — the kernel has finished and sent its reply, and the client
waits on its socket indefinitely (measured: lesson 12 at the CI size hung in 1 of 2 runs under
``nbconvert``, for ipykernel 6.31 and 7.4 alike; the same kernel, cells and settings ran 3 of 3
times in 18–20 s here). The client waits for a reply with one unbounded poll of a ZeroMQ socket;
``PatientClient`` polls in one-second slices instead, so a wake-up the event loop misses costs
at most a second. (That the wake-up is missed is our reading of the stall, not a proven cause:
the message is never lost, since a fresh poll finds it. The same symptom is reported upstream, open
at the time of writing: jupyter/nbclient#312, "when cell contains ipywidget, execute cell will
sometimes block", where the shell channel's ``get_msg`` returns the reply only at its timeout.)
"""

from __future__ import annotations

import html
import math
import sys
import time
from pathlib import Path
from queue import Empty

import nbformat
from nbclient import NotebookClient

__all__ = ["PatientClient", "execute_notebook", "as_lab_saves", "final_progress_text", "KERNELSPEC"]

POLL_SLICE_S = 1.0


class PatientClient(NotebookClient):
    """``nbclient.NotebookClient`` whose reads of the kernel's shell and IOPub sockets poll in short slices."""

    async def async_start_new_kernel_client(self):
        client = await super().async_start_new_kernel_client()
        for channel in (client.shell_channel, client.iopub_channel):
            channel.get_msg = _in_slices(channel.get_msg)
        return client


def _in_slices(get_msg):
    """``get_msg(timeout)`` made of polls of at most ``POLL_SLICE_S`` each, the same timeout in all."""
    async def get(timeout=None):
        start = time.monotonic()
        while True:
            left = None if timeout is None else timeout - (time.monotonic() - start)
            try:
                return await get_msg(timeout=POLL_SLICE_S if left is None else max(0.0, min(POLL_SLICE_S, left)))
            except Empty:
                if left is not None and left <= POLL_SLICE_S:
                    raise
    return get


def execute_notebook(path, *, timeout: int = 600, kernel_name: str = "python3") -> float:
    """Run the notebook at ``path`` in a fresh kernel, in its own folder, and store its outputs in place.

    ``timeout`` bounds each cell (seconds). Returns the wall time. A cell that raises stops the run
    with ``nbclient``'s ``CellExecutionError`` and leaves the file as it was.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be a notebook file, got {str(path)!r}")
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    PatientClient(notebook, timeout=timeout, kernel_name=kernel_name,
                  resources={"metadata": {"path": str(path.parent)}}).execute()
    final_progress_text(notebook)
    nbformat.write(nbformat.from_dict(as_lab_saves(notebook)), path)
    return time.perf_counter() - start


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def final_progress_text(notebook) -> int:
    """Rewrite the plain-text form of every stored tqdm progress bar to its final state; returns how many.

    A notebook tqdm bar is a widget (a box of a text, a progress model and a text); its output also holds
    a ``text/plain`` fallback, written once when the bar appears ("…: 0%| | 0/3"). A renderer without the
    widget state (GitHub, nbviewer, a terminal) shows that fallback, so a finished run would read as
    unfinished. The stored widget state holds the bar's last texts and value; the fallback is rebuilt
    from them in tqdm's own layout ("…: 100%|██████████| 3/3 [02:00<00:00, 34.60s/run]"). Other widgets
    are left alone.
    """
    state = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    rewritten = 0
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            data = output.get("data", {})
            if WIDGET_VIEW not in data or "text/plain" not in data:
                continue
            text = _progress_text(state, data[WIDGET_VIEW].get("model_id"))
            if text is not None:
                data["text/plain"] = text
                rewritten += 1
    return rewritten


def _progress_text(state: dict, model_id) -> str | None:
    """The text form of the tqdm bar ``model_id`` in ``state``, or None when it is not one."""
    box = state.get(model_id, {})
    children = [state.get(str(child).removeprefix("IPY_MODEL_"), {}) for child in box.get("state", {}).get("children", [])]
    kinds = [child.get("model_name") for child in children]
    if not box.get("model_name", "").endswith("BoxModel") or kinds not in (
            ["HTMLModel", "FloatProgressModel", "HTMLModel"], ["HTMLModel", "IntProgressModel", "HTMLModel"]):
        return None
    left, bar, right = (child.get("state", {}) for child in children)
    low, high, value = bar.get("min", 0), bar.get("max", 0), bar.get("value", 0)
    filled = round(10 * (value - low) / (high - low)) if high > low else 0
    def plain(widget_text):
        return html.unescape(str(widget_text.get("value", ""))).replace("\u2007", " ")
    return f"{plain(left)}|{'█' * filled}{' ' * (10 - filled)}|{plain(right)}"


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: python -m rlbook.execute NOTEBOOK.ipynb [...]", file=sys.stderr)
        return 2
    for path in paths:
        print(f"{path}: executing", flush=True)
        print(f"{path}: stored in {execute_notebook(path):.0f} s", flush=True)
    return 0



# What ipykernel's own "python3" kernel calls itself: JupyterLab writes it into a notebook it opens, so a
# lesson stored with another display name is marked changed on open, and autosaved.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def as_lab_saves(notebook: dict) -> dict:
    """``notebook`` (nbformat JSON) as JupyterLab saves it after opening it with the python3 kernel, so that
    opening a stored lesson leaves its file byte for byte as it is: every whole float as an int (JSON numbers
    pass through JavaScript: a slider's ``20.0`` comes back ``20``) and ipykernel's name for the kernel."""
    notebook = _js_numbers(notebook)
    if notebook.get("metadata", {}).get("kernelspec", {}).get("name") == KERNELSPEC["name"]:
        notebook["metadata"]["kernelspec"] = dict(KERNELSPEC)
    return notebook


def _js_numbers(value):
    """``value`` with every finite float that has no fractional part as an int, as JSON.parse gives it."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _js_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_js_numbers(item) for item in value]
    return value


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
