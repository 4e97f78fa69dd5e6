"""Build the book: ``python book/build.py [--out book/_build]`` (what ``make book`` runs).

Writes the Sphinx sources into ``OUT/src`` and the site into ``OUT/html``:

- ``lessons/NN_name.ipynb``: a copy of every ``notebooks/NN_*.ipynb`` with its stored outputs (nothing
  is executed: ``nb_execution_mode = "off"``), its widget views drawn as static HTML (``widgets.py``)
  and, under its title, how to open it in JupyterLab;
- ``index.md``: the table of contents, the README's lesson table with each row linked to its page
  (a lesson the README does not list yet gets a row with its notebook's first heading);
- ``api/``: one autodoc page per public module of ``rlbook``.

Sphinx runs with ``-W``: a warning (a broken reference, a docstring that does not parse, a missing
image) fails the build. Sources are rewritten only when they change, so a second build is incremental.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import pkgutil
import re
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parent
ROOT = BOOK.parent
sys.path.insert(0, str(BOOK))

from widgets import static_notebook  # noqa: E402

LESSON_GLOB = "[0-9][0-9]_*.ipynb"
LAB_URL = "http://localhost:8888/lab/tree/{name}"  # `make lab` serves notebooks/ on JupyterLab's default port
README_ROW = re.compile(r"^\|\s*(\d\d(?:[–-]\d\d)?)\s*\|(.*)\|\s*([^|]*?)\s*\|\s*$")
UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def lesson_paths(notebooks: Path = ROOT / "notebooks") -> list[Path]:
    """Every ``NN_*.ipynb`` in ``notebooks``, in lesson order."""
    return sorted(notebooks.glob(LESSON_GLOB))


def first_heading(notebook: dict) -> str:
    """The text of the first Markdown heading of ``notebook``; ValueError if it has none."""
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            for line in _source(cell).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    raise ValueError("notebook has no Markdown heading to title its page")


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def open_in_lab_banner(name: str) -> str:
    """MyST for the box under a lesson's title that says how to run it in JupyterLab."""
    return (":::{admonition} Run this lesson\n:class: tip rlbook-open-in-lab\n"
            f"In a clone of the repository, `make lab` starts JupyterLab on `notebooks/`; open `notebooks/{name}` "
            f"there, or follow [{name} in JupyterLab]({LAB_URL.format(name=name)}) once it is running. "
            "This page shows the outputs stored by `make execute`; sliders are drawn at the values "
            "their figure was made with.\n:::\n")


def book_notebook(path: Path) -> dict:
    """The lesson at ``path`` as the book shows it: static widget views and the JupyterLab banner."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    static_notebook(notebook)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown" and _source(cell).lstrip().startswith("#"):
            heading, _, rest = _source(cell).lstrip().partition("\n")
            cell["source"] = f"{heading}\n\n{open_in_lab_banner(path.name)}\n{rest}"
            return notebook
    raise ValueError(f"{path.name} does not open with a Markdown heading")


def readme_rows(readme: Path = ROOT / "README.md") -> list[tuple[str, str, str]]:
    """The rows (nb, lesson, status) of the README's lesson table, Markdown as written."""
    rows = []
    for line in readme.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in UNESCAPED_PIPE.split(line.strip())[1:-1]]
        if len(cells) == 3 and re.fullmatch(r"\d\d(?:[–-]\d\d)?", cells[0]):
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def index_page(lessons: list[Path], titles: dict[str, str], rows: list[tuple[str, str, str]]) -> str:
    """``index.md``: the README's lesson table, each row linked to its page; the sidebar's lessons and API."""
    by_number = {p.name[:2]: p for p in lessons}
    table = ["| nb | lesson | status |", "|---|---|---|"]
    listed = set()
    for number, lesson, status in rows:
        if number in by_number:
            lesson = lesson.replace(f"notebooks/{by_number[number].name}", f"lessons/{by_number[number].name}")
            listed.add(number)
        else:  # a planned lesson (or a range of them): no page to link to yet
            lesson = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", lesson)
        table.append(f"| {number} | {lesson} | {status} |")
    for number, path in by_number.items():
        if number not in listed:
            table.append(f"| {number} | [{titles[path.name]}](lessons/{path.name}) | |")
    table.sort(key=lambda row: row[2:4] if row[2:4].isdigit() else "")
    toc = "\n".join(f"lessons/{p.stem}" for p in lessons)
    return f"""# rlbook

An interactive textbook of LLM post-training reinforcement learning, and the library that implements
every method in it once, tested. Each lesson derives an objective, draws its geometry, lets you turn
its knobs, and trains a real (small) `transformers` language model with it. These pages show every
lesson with the outputs stored by its last full-size run; to run one, clone the repository and
`make lab`.

```{{toctree}}
:caption: Lessons
:maxdepth: 1
:hidden:

{toc}
```

```{{toctree}}
:caption: Library
:maxdepth: 1
:hidden:

api/index
```

## What the book covers

{chr(10).join(table)}

The library's reference, one page per module from its docstrings: [](api/index.rst).
"""


def public_modules(package: str = "rlbook") -> list[str]:
    """Every importable module of ``package`` whose dotted name has no part starting with ``_``."""
    root = __import__(package)
    names = [package] + [m.name for m in pkgutil.walk_packages(root.__path__, f"{package}.")]
    return sorted(n for n in names if not any(part.startswith("_") for part in n.split(".")))


def defined_members(module_name: str) -> list[str]:
    """The public names ``module_name``'s own source defines at top level, in ``__all__``'s order where it
    has one: submodules and what it re-exports are left to the pages of the modules that define them."""
    module = importlib.import_module(module_name)
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    defined = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined += [t.id for t in targets if isinstance(t, ast.Name)]
    public = getattr(module, "__all__", [n for n in defined if not n.startswith("_")])
    return [n for n in public if n in defined]


def api_pages(modules: list[str]) -> dict[str, str]:
    """``api/index.rst`` and one ``api/MODULE.rst`` per module (autodoc of the members it defines)."""
    pages = {"api/index.rst": "The library\n===========\n\nOne page per module of ``rlbook``, from its "
                              "docstrings.\n\n.. toctree::\n   :maxdepth: 1\n\n"
                              + "".join(f"   {m}\n" for m in modules)}
    for module in modules:
        members = defined_members(module)
        option = f"   :members: {', '.join(members)}\n" if members else ""  # a bare :members: means all
        pages[f"api/{module}.rst"] = f"``{module}``\n{'=' * (len(module) + 4)}\n\n.. automodule:: {module}\n{option}"
    return pages


def write_sources(src: Path) -> int:
    """Write every source file of the book under ``src``; returns how many lessons it has."""
    lessons = lesson_paths()
    if not lessons:
        raise ValueError("no notebooks/NN_*.ipynb to build a book from")
    files, titles = {}, {}
    for path in lessons:
        notebook = book_notebook(path)
        titles[path.name] = first_heading(notebook)
        files[f"lessons/{path.name}"] = json.dumps(notebook, ensure_ascii=False, indent=1)
    files["index.md"] = index_page(lessons, titles, readme_rows())
    files.update(api_pages(public_modules()))
    expected = {src / name for name in files}
    for stale in [p for p in src.rglob("*") if p.is_file() and p not in expected]:
        stale.unlink()  # a lesson renamed or removed must not linger in the book
    for name, text in files.items():
        target = src / name
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    return len(lessons)


def build(out: Path) -> int:
    """Write the sources into ``out/src`` and build the site into ``out/html``; Sphinx's exit status."""
    from sphinx.cmd.build import build_main

    count = write_sources(out / "src")
    print(f"book: {count} lessons -> {out / 'html'}", flush=True)
    return build_main(["-b", "html", "-c", str(BOOK), "-W", "--keep-going", "-q",
                       "-d", str(out / "doctrees"), str(out / "src"), str(out / "html")])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BOOK / "_build", help="build folder (default: book/_build)")
    return build(parser.parse_args(argv).out.resolve())


if __name__ == "__main__":
    sys.exit(main())
