"""The built book (``make book``) in a browser: every page renders, its math typesets with no error,
every image loads, every internal link resolves (its anchor included), and nothing is fetched from
outside the site.

The book is built once per session into a temporary folder (``book/build.py``), or taken from
``book/_build/html`` when that build is newer than every input (notebooks, README, book/, rlbook/),
and served by ``http.server`` on 127.0.0.1 at a free port. ``RLBOOK_BOOK_HTML=DIR`` tests the site
already built in DIR instead.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urldefrag, urlparse

import pytest

from labtools import REPO, assert_no_console_errors

BUILT = REPO / "book" / "_build" / "html"
INPUTS = ("notebooks", "README.md", "book", "rlbook")
BUILD_TIMEOUT_S = 600

# What each page reports once MathJax (if the page loads it) has finished typesetting.
PAGE_REPORT_JS = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const math = Array.from(document.querySelectorAll('span.math, div.math'));
  return {
    title: document.title.trim(),
    heading: (document.querySelector('article h1') || document.querySelector('h1') || {}).textContent || '',
    math: math.length,
    untypeset: math.filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 80)),
    mathErrors: Array.from(document.querySelectorAll('mjx-merror, [data-mml-node="merror"]'))
                     .map(e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 120)),
    images: document.images.length,
    brokenImages: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))
                       .map(i => i.currentSrc || i.src),
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
    ids: Array.from(document.querySelectorAll('[id], a[name]')).map(e => e.id || e.getAttribute('name')),
    sliders: document.querySelectorAll('.rlbook-widget-slider input[type=range]').length,
    labLinks: Array.from(document.querySelectorAll('.rlbook-open-in-lab a[href^="http://localhost:8888/lab/tree/"]'))
                   .map(a => a.href),
  };
}"""


def _newest_input_mtime() -> float:
    newest = 0.0
    for name in INPUTS:
        path = REPO / name
        files = [path] if path.is_file() else (p for p in path.rglob("*") if p.is_file() and "_build" not in p.parts)
        newest = max([newest, *(p.stat().st_mtime for p in files)])
    return newest


@pytest.fixture(scope="session")
def book_html(tmp_path_factory) -> Path:
    if os.environ.get("RLBOOK_BOOK_HTML"):
        return Path(os.environ["RLBOOK_BOOK_HTML"])
    index = BUILT / "index.html"
    if index.is_file() and index.stat().st_mtime > _newest_input_mtime():
        return BUILT
    out = tmp_path_factory.mktemp("book")
    result = subprocess.run([sys.executable, str(REPO / "book" / "build.py"), "--out", str(out)], cwd=REPO,
                            capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, f"book build failed:\n{result.stdout}\n{result.stderr}"
    return out / "html"


@pytest.fixture(scope="session")
def book_url(book_html):
    class QuietHandler(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(book_html)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _pages(html: Path) -> list[str]:
    skip = {"_static", "_sources", "_images"}
    return sorted(str(p.relative_to(html)) for p in html.rglob("*.html") if not skip & set(p.relative_to(html).parts))


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_every_page_renders_with_math_images_and_links(page, book_html, book_url):
    outside = []

    def only_the_site(route):
        if route.request.url.startswith(book_url):
            return route.continue_()
        outside.append(route.request.url)
        return route.abort()

    page.route("**/*", only_the_site)
    problems, ids, links, reports = [], {}, {}, {}
    for name in _pages(book_html):
        errors_before = len(page.console_errors)
        page.goto(book_url + name, wait_until="load")
        report = page.evaluate(PAGE_REPORT_JS)
        reports[name] = report
        where = f"{name}:"
        if not report["title"] or not report["heading"].strip():
            problems.append(f"{where} no title or heading")
        if report["untypeset"]:
            problems.append(f"{where} math not typeset: {report['untypeset'][:3]}")
        if report["mathErrors"]:
            problems.append(f"{where} math errors: {report['mathErrors'][:3]}")
        if report["brokenImages"]:
            problems.append(f"{where} images that did not load: {report['brokenImages'][:3]}")
        problems += [f"{where} {error}" for error in page.console_errors[errors_before:]]
        ids[name] = set(report["ids"])
        for link in report["links"]:
            if link.startswith(book_url):
                links.setdefault(link, name)
    for link, source in links.items():
        target, anchor = urldefrag(link)
        path = urlparse(target).path.lstrip("/") or "index.html"
        if path.endswith("/"):
            path += "index.html"
        if path in ids:
            if anchor and anchor not in ids[path]:
                problems.append(f"{source}: link to a missing anchor {path}#{anchor}")
        elif _status(target) != 200:
            problems.append(f"{source}: broken link {target}")
    assert not outside, f"pages fetched from outside the site: {sorted(set(outside))[:5]}"
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])

    lessons = [name for name in reports if name.startswith("lessons/")]
    assert len(lessons) == len(list((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))), "a page per lesson"
    for name in lessons:
        assert reports[name]["labLinks"] == [f"http://localhost:8888/lab/tree/{Path(name).stem}.ipynb"], name
    assert sum(reports[name]["math"] for name in lessons) > 100, "the lessons' math is on the pages"
    assert sum(reports[name]["sliders"] for name in lessons) > 10, "stored sliders are drawn"
    assert sum(1 for name in reports if name.startswith("api/")) > 20, "API pages exist"
    assert_no_console_errors(page)
