"""The form JupyterLab saves a notebook in, so that opening a stored lesson leaves it unchanged on disk.

JupyterLab marks a notebook changed (and autosaves it within two minutes) when the kernel it starts
names itself differently from the notebook's ``kernelspec``; and any save writes the notebook as the
browser holds it, where JSON numbers are JavaScript's: a float with no fractional part (a slider's
``"max": 20.0``) comes back as ``20``. A lesson stored in this form is left byte for byte as it is.

``python book/notebook_form.py notebooks/NN_*.ipynb`` rewrites the files given into this form (what
``rlbook.execute`` should do before it writes a lesson).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import nbformat

__all__ = ["KERNELSPEC", "as_lab_saves", "main"]

# What ipykernel's own "python3" kernel calls itself (JupyterLab writes it into the notebook at start).
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def _js_numbers(value):
    """``value`` with every finite float that has no fractional part as an int, as JSON.parse gives it."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _js_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_js_numbers(item) for item in value]
    return value


def as_lab_saves(notebook: dict) -> dict:
    """``notebook`` (nbformat JSON) as JupyterLab would save it after opening it with the python3 kernel."""
    notebook = _js_numbers(notebook)
    if notebook.get("metadata", {}).get("kernelspec", {}).get("name") == KERNELSPEC["name"]:
        notebook["metadata"]["kernelspec"] = dict(KERNELSPEC)
    return notebook


def main(paths: list[str]) -> int:
    for path in map(Path, paths):
        notebook = nbformat.from_dict(as_lab_saves(nbformat.read(path, as_version=nbformat.NO_CONVERT)))
        nbformat.write(notebook, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
