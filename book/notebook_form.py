"""The form JupyterLab saves a notebook in, so that opening a stored lesson leaves it unchanged on disk.

JupyterLab marks a notebook changed (and autosaves it within two minutes) when the kernel it starts
names itself differently from the notebook's ``kernelspec``; and any save writes the notebook as the
browser holds it, where JSON numbers are JavaScript's: a float with no fractional part (a slider's
``"max": 20.0``) comes back as ``20``. A lesson stored in this form is left byte for byte as it is.

``python book/notebook_form.py notebooks/NN_*.ipynb`` rewrites the files given into this form, the
form ``rlbook.execute`` (``make execute``) writes a lesson in.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from rlbook.execute import KERNELSPEC, as_lab_saves

__all__ = ["KERNELSPEC", "as_lab_saves", "main"]


def main(paths: list[str]) -> int:
    for path in map(Path, paths):
        notebook = nbformat.from_dict(as_lab_saves(nbformat.read(path, as_version=nbformat.NO_CONVERT)))
        nbformat.write(notebook, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
