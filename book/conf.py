"""Sphinx configuration of the book (``make book``; sources written by ``book/build.py``).

Why Sphinx + myst-nb + sphinx-book-theme rather than Jupyter Book 2 (mystmd): they are pip packages
that build offline, while mystmd needs Node and fetches its themes at build time; myst-nb reads the
notebooks with their stored outputs (execution off) and autodoc builds the API pages from the same run.

Math: MathJax 3.2.2 as shipped by the pip package ``sphinx-mathjax-offline``, copied into ``_static``
and loaded from there (SVG output: one self-contained file, no web fonts), so pages render math with
no network. Widgets: drawn as static HTML at build time (``book/widgets.py``); no widget JavaScript.

Repository link: every page's header has the theme's repository button. Its address is one setting,
``[project.urls] Repository`` in pyproject.toml (else the clone's ``origin`` when that is a web address);
the repository states no public address yet, so the button downloads the book's source from the site
itself (``SOURCE_ARCHIVE``, ``git archive`` of the commit built), which works offline and inside ``make lab``.
"""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from docstrings import as_shown  # noqa: E402

_verbatim = set()  # docstrings shown as written (not valid reStructuredText)

project = "rlbook"
author = "the rlbook authors"
copyright = "the rlbook authors"

# viewcode: each API entry links to its module's source, highlighted in the site itself (no network).
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.mathjax", "sphinx.ext.viewcode"]
exclude_patterns = []

# Notebooks: stored outputs only; dollar math and $$ blocks; MyST directives with ::: fences.
nb_execution_mode = "off"
nb_ipywidgets_js = {}  # widget views are static HTML (book/widgets.py): load no widget manager from a CDN
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

# Autodoc: members in each module's order; type hints in the signature as written.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

# MathJax from the pip-installed package, never a CDN. `noundefined` off, so an unknown macro is a
# TeX error (an merror node the browser test finds) rather than red text that passes unnoticed.
_mathjax = Path(importlib.util.find_spec("sphinx-mathjax-offline").origin).parent / "static"
mathjax_path = "mathjax/tex-svg-full.js"
mathjax3_config = {
    "tex": {"packages": {"[-]": ["noundefined", "noerrors"]}},
    "svg": {"fontCache": "global"},
}

html_theme = "sphinx_book_theme"
html_title = "rlbook"
html_static_path = [str(Path(__file__).parent / "_static"), str(_mathjax)]
html_css_files = ["rlbook.css"]
html_js_files = ["rlbook.js"]
html_theme_options = {
    "show_toc_level": 2,
    "collapse_navbar": True,
    "use_download_button": False,  # each lesson page offers the notebook as stored (book/build.py's banner)
    "use_fullscreen_button": False,
}


def _repository_url() -> str:
    """The project's public address: ``[project.urls] Repository`` of pyproject.toml, the one place to state it
    (the repository states none yet); else the clone's ``origin`` when it is a web address; else ''."""
    import subprocess
    import tomllib

    urls = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"].get("urls", {})
    if urls.get("Repository"):
        return urls["Repository"]
    result = subprocess.run(["git", "remote", "get-url", "origin"], cwd=ROOT, capture_output=True, text=True)
    url = result.stdout.strip().removesuffix(".git")
    return url if result.returncode == 0 and url.startswith("https://") else ""


REPOSITORY_URL = _repository_url()
# With no public address, every page's repository button downloads the book's source from the site itself:
# `git archive` of the commit built (lessons, library, tests, Makefile), written next to the pages.
SOURCE_ARCHIVE = "rlbook-source.tar.gz"

if REPOSITORY_URL:
    html_theme_options |= {"repository_url": REPOSITORY_URL, "use_repository_button": True}


def _source_button(app, pagename, templatename, context, doctree):
    """html-page-context, after the theme's buttons: the repository button, pointing at SOURCE_ARCHIVE."""
    context["header_buttons"].append({
        "type": "link", "url": context["pathto"](SOURCE_ARCHIVE, 1), "label": "source-repository-button",
        "text": "Repository", "icon": "fas fa-code-branch",
        "tooltip": f"The book's source, as built: lessons, library and tests ({SOURCE_ARCHIVE}; then make lab)"})


def _write_source_archive(app, exception):
    """build-finished: SOURCE_ARCHIVE in the site, from the commit checked out (git archive)."""
    import subprocess

    if exception is None:
        result = subprocess.run(["git", "archive", "--format=tar.gz", "--prefix=rlbook/", "-o",
                                 str(Path(app.outdir) / SOURCE_ARCHIVE), "HEAD"], cwd=ROOT, capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"no {SOURCE_ARCHIVE} for the repository button (git archive: {result.stderr.strip()}); "
                               "outside a git clone, state the address in pyproject.toml's [project.urls] Repository")


def _show_docstring(app, what, name, obj, options, lines):
    """autodoc-process-docstring: reStructuredText where it parses, else verbatim (book/docstrings.py)."""
    shown, parsed = as_shown(list(lines), env=app.env)
    lines[:] = shown
    if not parsed:
        _verbatim.add(name)


def _list_verbatim(app, exception):
    if exception is None:
        report = Path(app.outdir) / "docstrings-verbatim.txt"
        report.write_text("".join(f"{name}\n" for name in sorted(_verbatim)), encoding="utf-8")
        if _verbatim:
            print(f"book: {len(_verbatim)} docstrings are not valid reStructuredText and are shown verbatim "
                  f"(listed in {report})")


def setup(app):
    app.set_html_assets_policy("always")  # MathJax on every page: the sidebar shows lesson titles with math
    app.connect("autodoc-process-docstring", _show_docstring)
    app.connect("build-finished", _list_verbatim)
    if not REPOSITORY_URL:
        app.connect("html-page-context", _source_button, priority=502)
        app.connect("build-finished", _write_source_archive)
