"""What every browser test shares: finding Chromium, a JupyterLab server on a copy of the book, and
the steps a reader takes in it (open a notebook, run its cells, wait for the kernel, read the outputs).

Imported by ``tests/browser/conftest.py`` and by the browser tests (``from labtools import ...``).
The JupyterLab server runs on 127.0.0.1 only, on a free port, with a random token, on a temporary
copy of ``notebooks/``: the repository's notebooks are never touched.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # the interpreter running pytest: .venv/bin under make test
SERVER_START_S = 90
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
ERROR_OUTPUT = '.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]'

# JupyterLab settings for a test server: every cell in the DOM (no windowing, so a cell far down a
# lesson can be found), no news or update pop-ups over the notebook.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
}


def chromium_path() -> str | None:
    """The Chromium binary: $RLBOOK_CHROMIUM, else ``chromium`` or ``chromium-browser`` on PATH."""
    explicit = os.environ.get("RLBOOK_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing_browser_dependency() -> str | None:
    """One line saying what is missing for browser tests, or None when Chromium and Playwright are there."""
    missing = []
    if chromium_path() is None:
        missing.append("Chromium (apt-get install chromium, or RLBOOK_CHROMIUM=/path/to/chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append(f"Playwright ({VENV_BIN / 'pip'} install playwright)")
    if not missing:
        return None
    return "browser tests need " + " and ".join(missing) + "; make test installs both"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class JupyterLab:
    """A running JupyterLab server: its base URL, token and root folder (the copy of notebooks/)."""

    url: str
    token: str
    root: Path
    site: Path  # what it serves at /static/ (book/lab.py), as `make lab` serves the built book
    process: subprocess.Popen = field(repr=False)
    log: Path = field(repr=False)

    def lab_url(self, workspace: str | None = None) -> str:
        """The URL of JupyterLab itself, in a workspace of its own (no tab of an earlier visit restored)."""
        workspace = workspace or f"t{secrets.token_hex(4)}"
        return f"{self.url}/lab/workspaces/{workspace}?token={self.token}"

    def api(self, route: str, method: str = "GET"):
        """A call to the server's REST API (``route`` like ``api/sessions``); the decoded JSON or None."""
        request = urllib.request.Request(f"{self.url}/{route}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """End every session and kernel the tests started (a test's kernel does not outlive it)."""
        for session in self.api("api/sessions"):
            self.api(f"api/sessions/{session['id']}", method="DELETE")
        for kernel in self.api("api/kernels"):
            self.api(f"api/kernels/{kernel['id']}", method="DELETE")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=15)


def _write_lab_settings(settings_dir: Path) -> None:
    for name, values in LAB_SETTINGS.items():
        path = settings_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def start_jupyter_lab(workdir: Path, *, size: str = "ci", site: Path | None = None) -> JupyterLab:
    """Start JupyterLab as ``make lab`` does (``book/lab.py``: trust the lessons, serve the site ``site``
    at /static/) on a free 127.0.0.1 port over a copy of the repository's notebooks/ in
    ``workdir/notebooks``, with a Jupyter data folder of its own (no notebook trusted before, as in a
    fresh clone), the kernel from this interpreter's environment, RLBOOK_SIZE=``size`` and
    OMP_NUM_THREADS=1. Waits (bounded) until the server answers."""
    root = workdir / "notebooks"
    shutil.copytree(REPO / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    _write_lab_settings(workdir / "lab-settings")
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, RLBOOK_SIZE=size, OMP_NUM_THREADS="1", PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
               JUPYTER_CONFIG_DIR=str(workdir / "jupyter-config"), JUPYTER_RUNTIME_DIR=str(workdir / "jupyter-runtime"),
               JUPYTER_DATA_DIR=str(workdir / "jupyter-data"))
    site = site or workdir / "site"
    site.mkdir(exist_ok=True)  # JupyterLab serves only a folder there at its start (a test may fill it later)
    command = [sys.executable, str(REPO / "book" / "lab.py"), f"--notebooks={root}", f"--site={site}",
               "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--LabApp.user_settings_dir={workdir / 'lab-settings'}",
               f"--LabApp.workspaces_dir={workdir / 'lab-workspaces'}", "--LabApp.expose_app_in_browser=True",
               "--ServerApp.open_browser=False"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = workdir / "jupyter-lab.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen(command, env=env, cwd=root, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    lab = JupyterLab(url=f"http://127.0.0.1:{port}", token=token, root=root, site=site, process=process, log=log)
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            lab.api("api/status")
            return lab
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    lab.stop()
    raise RuntimeError(f"JupyterLab did not answer within {SERVER_START_S} s:\n{log.read_text()[-3000:]}")


# --- In the browser -------------------------------------------------------------------------------------

def open_lab(page, lab: JupyterLab, *, timeout_s: float = 90) -> None:
    """Load JupyterLab in ``page`` (a workspace of its own) and wait until it has restored its layout."""
    page.goto(lab.lab_url(), timeout=timeout_s * 1000)
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=timeout_s * 1000)
    page.evaluate("async () => { await window.jupyterapp.restored; }")


def open_notebook(page, path: str, *, timeout_s: float = 90) -> None:
    """Open ``path`` (relative to the server's root) in the JupyterLab that ``page`` shows, as File > Open
    does, and wait until its cells are shown and its kernel is idle."""
    run_command(page, "docmanager:open", {"path": path})
    page.wait_for_function(f"() => {{ const panel = {CURRENT_NOTEBOOK_JS};"
                           " return !!panel && !!panel.context && panel.context.path === "
                           f"{json.dumps(path)}; }}", timeout=timeout_s * 1000)
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=timeout_s * 1000)
    wait_kernel_idle(page, timeout_s=timeout_s)


def close_notebooks(page) -> None:
    """Close every open document of the JupyterLab in ``page`` without asking (changes are not saved),
    leaving their kernels running (``JupyterLab.shutdown_kernels`` ends them)."""
    page.evaluate("() => { for (const widget of Array.from(window.jupyterapp.shell.widgets('main')))"
                  " { if (widget.context) { widget.dispose(); } } }")
    page.wait_for_function("() => !document.querySelector('.jp-NotebookPanel')")


CURRENT_NOTEBOOK_JS = "window.jupyterapp.shell.currentWidget"


def wait_kernel_idle(page, *, timeout_s: float) -> None:
    """Wait until the open notebook's kernel exists and is idle."""
    page.wait_for_function(
        f"""() => {{ const panel = {CURRENT_NOTEBOOK_JS};
                    const kernel = panel && panel.sessionContext && panel.sessionContext.session
                                   && panel.sessionContext.session.kernel;
                    return !!kernel && kernel.status === 'idle'; }}""", timeout=timeout_s * 1000)


def run_command(page, command: str, args: dict | None = None) -> None:
    """Start a JupyterLab command (what a menu item or shortcut does), e.g. ``notebook:run-all-cells``;
    returns at once, not when the command's work (running the cells) is done."""
    page.evaluate("([command, args]) => { window.jupyterapp.commands.execute(command, args); }",
                  [command, args or {}])


def run_all_cells(page, *, timeout_s: float) -> None:
    """Run > Run All Cells, then wait until every code cell has run or one shows an error."""
    run_command(page, "notebook:run-all-cells")
    wait_cells_done(page, timeout_s=timeout_s)


def wait_cells_done(page, *, timeout_s: float) -> None:
    """Wait until every code cell of the open notebook has an execution count and the kernel is idle,
    or a cell has an error output (Run All stops there)."""
    page.wait_for_function(
        f"""() => {{ const panel = {CURRENT_NOTEBOOK_JS};
                    const cells = Array.from(panel.content.model.cells);
                    const failed = c => c.type === 'code' && Array.from({{length: c.outputs.length}},
                                        (_, i) => c.outputs.get(i).type).includes('error');
                    if (cells.some(failed)) return true;
                    const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
                    if (!kernel || kernel.status !== 'idle') return false;
                    return cells.every(c => c.type !== 'code' || typeof c.executionCount === 'number'); }}""",
        timeout=timeout_s * 1000, polling=500)


def error_outputs(page, scope: str = "") -> list[str]:
    """The text of every stderr output under ``scope`` (a CSS selector; the whole page by default) that
    shows an error or a traceback."""
    texts = page.locator(f"{scope} {ERROR_OUTPUT}".strip()).all_inner_texts()
    return [text for text in texts if "Error" in text or "Traceback" in text]


def assert_no_console_errors(page, *, ignore: tuple[str, ...] = ()) -> None:
    """Fail if the browser console logged an error (or the page threw) since the page opened; messages
    containing any string in ``ignore`` are allowed."""
    errors = [e for e in page.console_errors if not any(part in e for part in ignore)]
    assert not errors, "browser console errors:\n" + "\n".join(errors)
