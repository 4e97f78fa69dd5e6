"""The grader's sandbox (assignments/sandbox.py), tested with small Python programs in place of a submission.

Each test runs a few lines of plain Python (no torch: well under a second each) the way grade.py runs a
submission's tests, and checks what it could not do: read a hidden folder, another sandbox user's folder, the
grader's environment or processes; reach the network; write outside its folder; outlive its time or memory
limit. Each would succeed without the sandbox (run as the grader, as the old otter-based grader did).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import socket
import sys
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("assignments_sandbox", ROOT / "assignments" / "sandbox.py")
sandbox = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
spec.loader.exec_module(sandbox)

isolated = pytest.mark.skipif(sandbox.isolation_warning() is not None,
                              reason="the sandbox user and namespaces need root, unshare and setpriv")
UID = sandbox.FIRST_UID + 7


@pytest.fixture
def base():
    """A folder every sandbox user can pass through, outside /tmp (which each sandboxed process gets empty, and
    where pytest's tmp_path sits in a root-only folder): a refusal is then the sandbox's. Removed afterwards."""
    (ROOT / "build").mkdir(exist_ok=True)
    folder = pathlib.Path(tempfile.mkdtemp(prefix="sandbox-test-", dir=ROOT / "build"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder)


def _run(base, code: str, *, hide=(), limits=None, uid=UID, name="me"):
    folder = sandbox.make_folder(base, name, uid)
    return sandbox.run([sys.executable, "-I", "-c", code], folder, "", limits or sandbox.Limits(wall_s=30),
                       uid=uid, hide=list(hide))


# A refused path: unreadable (the sandbox's own user, a hiding mount) or absent (when the checkout itself sits
# under /tmp, each sandboxed process's empty /tmp covers it, and only the interpreter and rlbook are bound back).
REFUSED = {"PermissionError", "FileNotFoundError"}


def _attempt(action: str) -> str:
    """Python that prints OK when ``action`` succeeds and the error's name when it does not."""
    return f"try:\n    {action}\n    print('OK')\nexcept Exception as error:\n    print(type(error).__name__)"


@isolated
def test_a_hidden_folder_reads_as_empty(base):
    secret_dir = base / "submissions"
    secret_dir.mkdir(mode=0o755)
    (secret_dir / "other.ipynb").write_text("another student's answers")
    (secret_dir / "other.ipynb").chmod(0o644)
    code = _attempt(f"open({str(secret_dir / 'other.ipynb')!r}).read()")
    assert _run(base, code, hide=[secret_dir]).stdout.strip() in REFUSED
    if not any(base.resolve().is_relative_to(path) for path in sandbox.PRIVATE_TMP):  # else /tmp covers both
        assert _run(base, code, name="not_hidden").stdout.strip() == "OK"  # world-readable: only the mount hides it


@isolated
def test_a_hidden_folder_inside_another_is_hidden_with_it(base):
    """``grade.py SUBMISSIONS/ --out scores.csv`` run from SUBMISSIONS' parent hides that parent and SUBMISSIONS
    inside it: the process must still start (a mount over a path its parent's mount already covered failed)."""
    outer = base / "course"
    inner = outer / "submissions"
    inner.mkdir(parents=True, mode=0o755)
    (inner / "other.ipynb").write_text("another student's answers")
    (inner / "other.ipynb").chmod(0o644)
    outcome = _run(base, _attempt(f"open({str(inner / 'other.ipynb')!r}).read()"), hide=[outer, inner])
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.strip() in REFUSED


@isolated
def test_another_submissions_folder_is_unreadable_and_nothing_outside_its_own_is_writable(base):
    other = sandbox.make_folder(base, "other", UID + 1)
    (other / "answers.py").write_text("x = 1")
    os.chown(other / "answers.py", UID + 1, UID + 1)
    out = _run(base, "\n".join([
        _attempt(f"open({str(other / 'answers.py')!r}).read()"),
        _attempt(f"open({str(ROOT / 'assignments' / 'pwned.txt')!r}, 'w').write('x')"),
        _attempt("open('mine.txt', 'w').write('x')"),
    ])).stdout.split()
    assert out[0] in REFUSED and out[1] in REFUSED and out[2] == "OK", out
    assert not (ROOT / "assignments" / "pwned.txt").exists()


@isolated
def test_the_graders_environment_and_processes_are_invisible(base, monkeypatch):
    monkeypatch.setenv("GRADER_SECRET", "s3cret")
    code = ("import os\nprint(os.environ.get('GRADER_SECRET'))\n"
            f"print(os.path.exists('/proc/{os.getpid()}/cmdline'))\nprint(os.getuid())")
    assert _run(base, code).stdout.split() == ["None", "False", str(UID)]


@isolated
def test_no_network_not_even_the_graders_loopback(base):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        code = _attempt(f"import socket\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)")
        assert _run(base, code).stdout.strip() == "OSError"
        assert _run(base, code, uid=None, name="unsandboxed").stdout.strip() == "OK"
    finally:
        server.close()


def test_an_endless_loop_is_stopped_at_the_time_limit(base):
    outcome = _run(base, "while True:\n    pass", limits=sandbox.Limits(wall_s=3),
                   uid=None if sandbox.isolation_warning() else UID)
    assert outcome.timed_out


def test_filling_memory_fails_at_the_memory_limit(base):
    code = _attempt("hoard = [bytearray(2**28) for _ in range(64)]")
    outcome = _run(base, code, limits=sandbox.Limits(wall_s=30, memory_gb=2),
                   uid=None if sandbox.isolation_warning() else UID)
    assert outcome.stdout.strip() == "MemoryError"


def test_without_root_the_grader_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    warning = sandbox.isolation_warning()
    assert warning.startswith("warning: not running as root") and "\n" not in warning


def test_limits_reject_bad_values():
    with pytest.raises(ValueError, match="wall_s"):
        sandbox.Limits(wall_s=0)
    with pytest.raises(ValueError, match="memory_gb"):
        sandbox.Limits(memory_gb=-1)


def test_a_result_line_forged_inside_the_test_process_is_ignored(base, tmp_path):
    """Code that reaches the harness's result channel (here by brute force on its file descriptors, which the
    screening of answers refuses) cannot pass a failed test: the grader keeps only lines with its nonce."""
    spec_g = importlib.util.spec_from_file_location("assignments_grade_nonce", ROOT / "assignments" / "grade.py")
    grade = importlib.util.module_from_spec(spec_g)
    spec_g.loader.exec_module(grade)
    forge = ("import os, json\n    line = json.dumps({'question': 'q', 'test': 'test_real', 'passed': True, "
             "'message': ''}) + '\\n'\n    for fd in range(3, 12):\n        try:\n"
             "            os.write(fd, line.encode())\n        except OSError:\n            pass")
    tests = [{"name": "test_real", "arguments": [], "points": 1.0,
              "source": "def test_real():\n    raise AssertionError('really wrong')"},
             {"name": "test_forger", "arguments": [], "points": 1.0, "source": f"def test_forger():\n    {forge}"}]
    question = {"name": "q", "points": 2.0, "tests": tests, "training": "", "reference": ""}
    (tmp_path / "grading.json").write_text(__import__("json").dumps({"setup": "", "questions": [question],
                                                                     "manual": []}))
    grader = grade.Grader(tmp_path)
    scratch = base
    uid = None if sandbox.isolation_warning() else UID + 2
    job = {"setup": "", "submission": "", "training": "", "questions": [question], "seed": 0}
    results = {r["test"]: r for r in grader._run(job, scratch, uid)}
    assert results["test_real"]["passed"] is False and results["test_real"]["message"] == "really wrong", results


@isolated
def test_files_left_in_tmp_do_not_reach_the_next_process_of_the_same_user(base):
    leave = "open('/tmp/planted', 'w').write('from the last submission')\nopen('/dev/shm/planted', 'w').write('x')"
    look = "import os\nprint(os.path.exists('/tmp/planted'), os.path.exists('/dev/shm/planted'))"
    assert _run(base, leave, name="first").stderr == ""
    assert _run(base, look, name="second").stdout.split() == ["False", "False"]
    assert not os.path.exists("/tmp/planted")
