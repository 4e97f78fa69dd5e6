"""Build the book: ``python book/build.py [--out book/_build]`` (what ``make book`` runs).

Writes the Sphinx sources into ``OUT/src`` and the site into ``OUT/html``:

- ``lessons/NN_name.ipynb``: a copy of every ``notebooks/NN_*.ipynb`` with its stored outputs (nothing
  is executed: ``nb_execution_mode = "off"``), its widget views drawn as static HTML (``widgets.py``)
  and, under its title, how to open it in JupyterLab;
- ``index.md``: the table of contents, the README's lesson table with each row linked to its page
  (a lesson the README does not list yet gets a row with its notebook's first heading);
- ``bibliography.md``: every paper the lessons cite, with its link and the lessons citing it
  (``bibliography.py``, read from the notebooks at each build);
- ``api/``: one autodoc page per public module of ``rlbook``.

Sphinx runs with ``-W``: a warning (a broken reference, a docstring that does not parse, a missing
image) fails the build. Sources are rewritten only when they change, so a second build is incremental;
when what every page shows changes (the navigation, the configuration, the static files), every page
is written again (``-a``), since Sphinx rewrites only the pages whose own source changed.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import json
import pkgutil
import re
import shutil
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parent
ROOT = BOOK.parent
sys.path.insert(0, str(BOOK))

from bibliography import bibliography, bibliography_page  # noqa: E402
from docstrings import escape_pipes, rst_problems  # noqa: E402
from widgets import static_notebook  # noqa: E402

LESSON_GLOB = "[0-9][0-9]_*.ipynb"
# A lesson page at /static/lessons/NN.html of the JupyterLab that `make lab` starts (book/lab.py serves the site
# there) opens its notebook at /lab/tree/NN.ipynb of the same server: whatever its port, base URL and login.
LAB_LINK = "../../lab/tree/{name}"
LAB_DEFAULT_URL = "http://localhost:8888/lab/tree/{name}"  # rlbook.js's fallback for a site served elsewhere
DOWNLOADS = "notebooks"  # the lessons as stored, copied into the site (html_extra_path) for download
ARXIV = re.compile(r"\barXiv:(\d{4}\.\d{4,5})(v\d+)?")
LESSON_MENTION = re.compile(r"\b([Ll]esson) (\d\d)\b")
# What a cross-link must not touch: headings, code, math, links and raw HTML already there.
PROTECTED = re.compile(r"^#[^\n]*|```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$|\[[^\]\n]*\]\([^)\n]*\)|<[^>\n]*>", re.S | re.M)
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
    """MyST for the box under a lesson's title that says how to run it in JupyterLab, and offers its file."""
    link, fallback = LAB_LINK.format(name=name), LAB_DEFAULT_URL.format(name=name)
    return (":::{admonition} Run this lesson\n:class: tip rlbook-open-in-lab\n"
            f"In a clone of the repository, `make lab` starts JupyterLab on `notebooks/` and serves this book "
            f"at its `/static/index.html`; read there, "
            f'<a class="rlbook-lab-link" href="{link}" data-fallback="{fallback}">open {name} in JupyterLab</a> '
            "runs it with live widgets. "
            f'<a class="rlbook-download" href="../{DOWNLOADS}/{name}" download>Download {name}</a> '
            "as stored.\n\n"
            "This page shows the outputs stored by `make execute`. Its sliders and menus are pictures of the "
            "controls at the values their figure was drawn with: greyed out, because moving them needs the "
            "lesson's Python kernel, which JupyterLab runs.\n:::\n")


def _outside_protected(text: str, change) -> str:
    """``text`` with ``change`` applied to every stretch that is not code, math, a link or an HTML tag."""
    parts, last = [], 0
    for match in PROTECTED.finditer(text):
        parts += [change(text[last:match.start()]), match.group(0)]
        last = match.end()
    return "".join(parts + [change(text[last:])])


def cross_linked(markdown: str, pages: dict[str, str], this_page: str) -> str:
    """``markdown`` with each "lesson NN" linked to that lesson's page (``pages``: NN -> page file name,
    relative to the page; not on ``this_page`` itself) and each arXiv:ID to its arXiv abstract."""
    def link(text: str) -> str:
        text = ARXIV.sub(lambda m: f"[arXiv:{m.group(1)}{m.group(2) or ''}](https://arxiv.org/abs/{m.group(1)})", text)
        return LESSON_MENTION.sub(lambda m: m.group(0) if pages.get(m.group(2), this_page) == this_page
                                  else f"[{m.group(0)}]({pages[m.group(2)]})", text)

    return _outside_protected(markdown, link)


def book_notebook(path: Path, pages: dict[str, str] | None = None) -> dict:
    """The lesson at ``path`` as the book shows it: static widget views without progress bars, the
    JupyterLab banner, and its mentions of other lessons (``pages``: NN -> page) and of arXiv linked."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    static_notebook(notebook)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = cross_linked(_source(cell), pages or {}, path.name)
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

```{{toctree}}
:caption: References
:maxdepth: 1
:hidden:

bibliography
```

## What the book covers

{chr(10).join(table)}

The library's reference, one page per module from its docstrings: [](api/index.rst). Every paper the
lessons cite, with the lessons citing it: [](bibliography.md).
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


def _summary(module_name: str) -> str:
    """The first line of ``module_name``'s docstring ('' when it has none)."""
    doc = importlib.import_module(module_name).__doc__ or ""
    line = escape_pipes(doc.strip().split("\n")[0])
    return "" if rst_problems(line) else line


def api_groups(modules: list[str]) -> dict[str, list[str]]:
    """``modules`` grouped by package: ``rlbook`` and its top-level modules first, then each subpackage
    with its own modules, in name order."""
    packages = {m for m in modules if any(other.startswith(m + ".") for other in modules)} - {"rlbook"}
    groups: dict[str, list[str]] = {"rlbook": []}
    for module in modules:
        package = next((p for p in sorted(packages) if module == p or module.startswith(p + ".")), "rlbook")
        groups.setdefault(package, []).append(module)
    return groups


def api_pages(modules: list[str]) -> dict[str, str]:
    """``api/index.rst`` (the modules grouped by package, each with its summary line) and one
    ``api/MODULE.rst`` per module: autodoc of the members it defines, constants included, with a link to
    its highlighted source (``sphinx.ext.viewcode``)."""
    index = ["The library", "===========", "", "One page per module of ``rlbook``, from its docstrings, grouped by "
             "package; each page links to its module's source.", ""]
    for package, members in api_groups(modules).items():
        title = f"``{package}``" if package != "rlbook" else "``rlbook`` and its top-level modules"
        index += [title, "-" * len(title), "", ".. toctree::", "   :hidden:", ""]
        index += [f"   {m}" for m in members] + [""]
        index += [f"- :doc:`{m}` — {_summary(m)}" if _summary(m) else f"- :doc:`{m}`" for m in members] + [""]
    pages = {"api/index.rst": "\n".join(index)}
    for module in modules:
        members = defined_members(module)
        option = f"   :members: {', '.join(members)}\n   :undoc-members:\n" if members else ""  # bare :members: = all
        pages[f"api/{module}.rst"] = f"``{module}``\n{'=' * (len(module) + 4)}\n\n.. automodule:: {module}\n{option}"
    return pages


def write_sources(src: Path) -> int:
    """Write every source file of the book under ``src``; returns how many lessons it has."""
    lessons = lesson_paths()
    if not lessons:
        raise ValueError("no notebooks/NN_*.ipynb to build a book from")
    files, titles = {}, {}
    pages = {path.name[:2]: path.name for path in lessons}
    stored = {path.name: json.loads(path.read_text(encoding="utf-8")) for path in lessons}
    files["bibliography.md"] = bibliography_page(bibliography(stored), {path.name: f"lessons/{path.name}" for path in lessons})
    for path in lessons:
        notebook = book_notebook(path, pages)
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


def write_downloads(folder: Path) -> None:
    """Copy every lesson, as stored, into ``folder`` (the site's ``notebooks/``, for its download links)."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.ipynb"):
        stale.unlink()
    for path in lesson_paths():
        (folder / path.name).write_bytes(path.read_bytes())


def site_wide(src: Path) -> str:
    """A digest of what every page shows besides its own text: the configuration, the static files, the index
    (the navigation's tables of contents and titles) and which pages there are."""
    digest = hashlib.sha256()
    for path in sorted([BOOK / "conf.py", *(BOOK / "_static").rglob("*"), src / "index.md"]):
        if path.is_file():
            digest.update(path.read_bytes())
    digest.update("\n".join(sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())).encode())
    return digest.hexdigest()


def build(out: Path) -> int:
    """Write the sources into ``out/src`` and build the site into ``out/html``; Sphinx's exit status."""
    from sphinx.cmd.build import build_main

    count = write_sources(out / "src")
    extra = out / "extra"
    write_downloads(extra / DOWNLOADS)
    print(f"book: {count} lessons -> {out / 'html'}", flush=True)
    stamp, digest = out / "site-wide.sha256", site_wide(out / "src")
    every_page = [] if stamp.is_file() and stamp.read_text() == digest else ["-a"]
    if every_page:  # viewcode writes a module's source page only when the module changed: these go too
        shutil.rmtree(out / "html" / "_modules", ignore_errors=True)
    status = build_main(["-b", "html", "-c", str(BOOK), "-W", "--keep-going", "-q", *every_page,
                         "-D", f"html_extra_path={extra}", "-d", str(out / "doctrees"), str(out / "src"), str(out / "html")])
    if status == 0:
        stamp.write_text(digest)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BOOK / "_build", help="build folder (default: book/_build)")
    return build(parser.parse_args(argv).out.resolve())


if __name__ == "__main__":
    sys.exit(main())
