"""Open the book in JupyterLab: ``python book/lab.py [jupyter lab options]`` (what ``make lab`` runs).

1. Trusts the lessons (``nbformat``'s notary, what ``jupyter trust`` does): a fresh clone's notebooks
   are untrusted, and JupyterLab then shows each stored widget as a line of text and leaves out its
   figure until the cell runs again. They are this repository's own lessons, signed on this machine.
2. Keeps, when JupyterLab saves a lesson, the ``language_info`` it was stored with: the kernel reports
   the reader's own Python version, JupyterLab writes it into the notebook and autosaves, and a lesson
   merely read would show as changed in ``git status`` (a pre-save hook: ``book/jupyter_lab_config.py``).
3. Starts JupyterLab on ``notebooks/``, serving the built site (``make book``) from the same server at
   ``/static/index.html``, so that a page's "Open in JupyterLab" link opens its lesson on whatever
   port and login this JupyterLab uses.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat
from nbformat.sign import NotebookNotary

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "book" / "_build" / "html"


def trust(paths: list[Path]) -> int:
    """Sign every notebook in ``paths`` that is not trusted yet; returns how many were signed."""
    notary, signed = NotebookNotary(), 0
    for path in paths:
        notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
        if not notary.check_signature(notebook):
            notary.sign(notebook)
            signed += 1
    return signed


def lab_command(notebooks: Path, site: Path, extra: list[str]) -> list[str]:
    """The ``jupyter lab`` command line: ``notebooks`` as its root, ``site`` served at ``/static/``."""
    return [str(Path(sys.executable).with_name("jupyter")), "lab", f"--ServerApp.root_dir={notebooks}",
            f"--ServerApp.extra_static_paths={site}",
            f"--config={Path(__file__).with_name('jupyter_lab_config.py')}", *extra]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="other options go to jupyter lab")
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks", help="the lessons' folder")
    parser.add_argument("--site", type=Path, default=SITE, help="the built site (default: book/_build/html)")
    args, lab_options = parser.parse_known_args(argv)
    signed = trust(sorted(args.notebooks.glob("[0-9][0-9]_*.ipynb")))
    print(f"lab: {signed} lessons newly trusted (their stored widgets show on first open)", flush=True)
    if (args.site / "index.html").is_file():
        print("lab: the book is at /static/index.html of this JupyterLab: the address printed below with "
              "/lab... replaced by /static/index.html", flush=True)
    command = lab_command(args.notebooks.resolve(), args.site.resolve(), lab_options)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
