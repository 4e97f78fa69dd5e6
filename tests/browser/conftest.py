"""Fixtures for every browser test (pytest + Playwright driving the system's Chromium).

``chromium_browser`` (session)  a Playwright ``Browser`` launched from the system Chromium
                                ($RLBOOK_CHROMIUM, else ``chromium`` / ``chromium-browser`` on PATH).
                                Missing Chromium or Playwright: the tests fail with one line saying
                                what to install when CI=true, and are skipped with that line otherwise.
``page``                        a fresh context and page per test; ``page.console_errors`` collects
                                console errors and uncaught page errors (``labtools.assert_no_console_errors``);
                                on failure (on every test with RLBOOK_BROWSER_SCREENSHOTS=all) a
                                full-page screenshot goes to tests/browser/artifacts/ (or
                                $RLBOOK_BROWSER_ARTIFACTS) and its path is printed.
``jupyter_lab`` (session)       a ``labtools.JupyterLab`` (url, token, root) on a temporary copy of
                                notebooks/, 127.0.0.1 only, RLBOOK_SIZE=ci, OMP_NUM_THREADS=1, stopped at the end.
``lab``                         ``jupyter_lab`` for one test: every kernel it started is shut down after it.
``lab_page``                    a page already showing JupyterLab (``jupyter_lab``), for a test that opens
                                notebooks in it (``labtools.open_notebook``): one JupyterLab per worker, loaded
                                once (loading it costs a page about 6 s of CPU, opening a notebook in it about
                                1 s); console errors are counted from the test's start, its notebooks are
                                closed and its kernels shut down after it, and a failure is screenshot as on
                                ``page``.
``book_html`` (session)         the built site's folder: built once per ``make test`` into a temporary folder
                                that every pytest-xdist worker shares (``book/build.py``; the first worker to
                                need it builds it, the others wait for it), or ``book/_build/html`` when that
                                build is newer than every input (notebooks, README, book/, rlbook/);
                                ``RLBOOK_BOOK_HTML=DIR`` tests the site already built in DIR.
``book_url`` (session)          that site served by ``http.server`` on 127.0.0.1 at a free port.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import labtools  # noqa: E402

BUILT = labtools.REPO / "book" / "_build" / "html"
INPUTS = ("notebooks", "README.md", "book", "rlbook")
BUILD_TIMEOUT_S = 600

ARTIFACTS = Path(os.environ.get("RLBOOK_BROWSER_ARTIFACTS", Path(__file__).parent / "artifacts"))
VIEWPORT = {"width": 1400, "height": 1000}


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium_browser():
    missing = labtools.missing_browser_dependency()
    if missing:
        _unavailable(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=labtools.chromium_path(),
                                             args=labtools.CHROMIUM_ARGS, timeout=60_000)
        yield browser
        browser.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def _console_collector(page) -> None:
    page.console_errors = []
    page.on("console", lambda message: message.type == "error" and page.console_errors.append(
        f"console: {message.text} ({message.location.get('url', '')})"))
    page.on("pageerror", lambda error: page.console_errors.append(f"page error: {error}"))


def _screenshot_if_failed(page, request) -> None:
    report = getattr(request.node, "report_call", None)
    if report is not None and (report.failed or os.environ.get("RLBOOK_BROWSER_SCREENSHOTS") == "all"):
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / (re.sub(r"[^\w.-]+", "_", request.node.name) + ".png")
        try:
            page.screenshot(path=str(path), full_page=True, timeout=30_000)
            print(f"\nscreenshot of the {'failing ' if report.failed else ''}page: {path}")
        except Exception as error:  # the page may be gone: report it, keep the test's own failure
            print(f"\nno screenshot ({error!r})")


def _new_page(browser):
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(30_000)
    page = context.new_page()
    _console_collector(page)
    return context, page


@pytest.fixture
def page(chromium_browser, request):
    context, page = _new_page(chromium_browser)
    yield page
    _screenshot_if_failed(page, request)
    context.close()


@pytest.fixture(scope="session")
def jupyter_lab(tmp_path_factory):
    missing = labtools.missing_browser_dependency()
    if missing:
        _unavailable(missing)
    server = labtools.start_jupyter_lab(tmp_path_factory.mktemp("lab"))
    yield server
    server.stop()


@pytest.fixture
def lab(jupyter_lab):
    yield jupyter_lab
    jupyter_lab.shutdown_kernels()


@pytest.fixture(scope="session")
def _lab_app(chromium_browser, jupyter_lab):
    context, page = _new_page(chromium_browser)
    labtools.open_lab(page, jupyter_lab)
    yield page
    context.close()


@pytest.fixture
def lab_page(_lab_app, lab, request):
    _lab_app.console_errors.clear()
    yield _lab_app
    _screenshot_if_failed(_lab_app, request)
    labtools.close_notebooks(_lab_app)  # before ``lab`` shuts their kernels down


def _newest_input_mtime() -> float:
    newest = 0.0
    for name in INPUTS:
        path = labtools.REPO / name
        files = [path] if path.is_file() else (p for p in path.rglob("*") if p.is_file() and "_build" not in p.parts)
        newest = max([newest, *(p.stat().st_mtime for p in files)])
    return newest


def _shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder every pytest-xdist worker of this run sees (its own temporary folder when run without xdist)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.getbasetemp().parent / name
    return tmp_path_factory.getbasetemp() / name


@pytest.fixture(scope="session")
def book_html(tmp_path_factory) -> Path:
    if os.environ.get("RLBOOK_BOOK_HTML"):
        return Path(os.environ["RLBOOK_BOOK_HTML"])
    index = BUILT / "index.html"
    if index.is_file() and index.stat().st_mtime > _newest_input_mtime():
        return BUILT
    out = _shared_folder(tmp_path_factory, "book")
    out.mkdir(exist_ok=True)
    with open(out / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held while building: a second worker waits, then reads the same site
        if not (out / "built").is_file():
            result = subprocess.run([sys.executable, str(labtools.REPO / "book" / "build.py"), "--out", str(out)],
                                    cwd=labtools.REPO, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            assert result.returncode == 0, f"book build failed:\n{result.stdout}\n{result.stderr}"
            (out / "built").touch()
    return out / "html"


@pytest.fixture(scope="session")
def book_url(book_html):
    class QuietHandler(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    class QuietServer(ThreadingHTTPServer):
        def handle_error(self, request, client_address):  # the browser left a page before it loaded: not an error
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(book_html)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
