"""Run one grading process in a sandbox: its own folder, an unprivileged user, no network, hidden paths, limits.

When the grader runs as root with ``unshare`` and ``setpriv`` (Linux; CI and a course server), the process:

- runs in new network, mount and PID namespaces (``unshare``): no network at all (not even loopback), no
  view of the grader's or any other process (its own ``/proc``), an empty tmpfs mounted over every path
  in ``hide`` (the submissions, the grader's outputs, the masters and autograders), its own empty ``/tmp``,
  ``/var/tmp`` and ``/dev/shm``, and its folder at ``/mnt``;
- then drops to a user of its own (``setpriv``, uid ``uid``, no groups, no capabilities, no new privileges):
  it can read what every user can (the Python environment, the library, the zoo models) and write only its
  own folder (mode 0700, owned by that uid), which no other submission's uid can read;
- gets a clean environment (none of the grader's variables), a CPU-time, memory, file-size and
  process-count limit (``resource.setrlimit``) and a wall-clock limit (killed with its whole process group).

Without root (or without those tools) it runs as the grader's user with only the environment, the limits
and the folder, and ``isolation_warning`` says so in one line.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import pathlib
import resource
import shlex
import shutil
import signal
import subprocess
import sys

SANDBOX_DIR = "/mnt"  # where a sandboxed process sees its own folder (bound there in its mount namespace)
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")  # each sandboxed process gets its own, empty
FIRST_UID = 61000  # sandbox users: FIRST_UID + slot, one per submission graded at once; no passwd entry needed


@functools.lru_cache(maxsize=1)
def _namespaces_allowed() -> bool:
    """True when this root may create the sandbox's namespaces (a container without CAP_SYS_ADMIN, such as
    Gradescope's, may not: there the grader runs without them rather than failing every job)."""
    probe = ["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def isolation_warning() -> str | None:
    """None when full isolation is available here; otherwise one line saying what is missing."""
    missing = [tool for tool in ("unshare", "setpriv") if shutil.which(tool) is None]
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "warning: not on Linux: submissions run without a sandbox user, network or mount isolation"
    if os.geteuid() != 0 or missing or not _namespaces_allowed():
        why = ("not running as root" if os.geteuid() != 0 else f"{', '.join(missing)} not found" if missing
               else "this root may not create namespaces (a container without CAP_SYS_ADMIN)")
        return (f"warning: {why}: submissions run as this user, with network, and can read what it reads "
                "(only the clean environment, the folder and the time and memory limits apply)")
    return None


@dataclasses.dataclass
class Limits:
    """A sandboxed process's limits: wall-clock and CPU seconds, address space (GB), processes."""

    wall_s: float = 180.0
    memory_gb: float = 6.0
    processes: int = 256

    def __post_init__(self):
        if not self.wall_s > 0:
            raise ValueError(f"wall_s (the time limit) must be > 0 seconds, got {self.wall_s}")
        if not self.memory_gb > 0:
            raise ValueError(f"memory_gb (the memory limit) must be > 0, got {self.memory_gb}")


@dataclasses.dataclass
class Outcome:
    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool


def make_folder(parent: pathlib.Path, name: str, uid: int | None) -> pathlib.Path:
    """A fresh folder that only the sandbox user ``uid`` (or this user) can read and write."""
    folder = parent / name
    folder.mkdir(mode=0o700)
    if uid is not None:
        os.chown(folder, uid, uid)
    return folder


def _set_limits(limits: Limits):
    def apply():
        os.setsid()
        cpu = int(limits.wall_s) + 5
        memory = int(limits.memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (2**28, 2**28))  # 256 MB per file written
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    return apply


def run(argv: list[str], folder: pathlib.Path, stdin: str, limits: Limits, *, uid: int | None,
        hide: list[pathlib.Path], extra_env: dict[str, str] | None = None) -> Outcome:
    """Run ``argv`` in ``folder`` (sandboxed as the module docstring says when ``uid`` is not None).

    Sandboxed, the process sees its folder at ``SANDBOX_DIR`` and fresh, private ``/tmp``, ``/var/tmp`` and
    ``/dev/shm``, so nothing it leaves there reaches the next process of the same user.
    """
    command, visible = argv, folder
    if uid is not None:
        visible = pathlib.Path(SANDBOX_DIR)
        mounts = ["mount --make-rprivate /", f"mount --bind {shlex.quote(str(folder))} {SANDBOX_DIR}"]
        needed = [pathlib.Path(sys.prefix), *_rlbook_folder()]
        hidden = [path for path in hide if path.is_dir() and not any(n.is_relative_to(path) for n in needed)]
        # A folder inside another hidden one is hidden with it (and could not be mounted over once its parent is).
        hidden = [path for path in hidden if not any(path != other and path.is_relative_to(other) for other in hidden)]
        mounts += [f"mount -t tmpfs -o size=4k,mode=000 none {shlex.quote(str(path))}" for path in hidden]
        mounts += _private_tmp_mounts(needed)
        drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                "--no-new-privs", "--"]
        script = " && ".join(mounts) + f" && cd {SANDBOX_DIR} && exec " + shlex.join(drop + argv)
        command = ["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc", "sh", "-c", script]
    env = clean_env(visible, extra_env or {})
    process = subprocess.Popen(command, cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_set_limits(limits))
    try:
        stdout, stderr = process.communicate(stdin, timeout=limits.wall_s)
        return Outcome(stdout, stderr, process.returncode, False)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = process.communicate()
        return Outcome(stdout, stderr, None, True)


def _rlbook_folder() -> list[pathlib.Path]:
    """Where the tests' ``import rlbook`` finds it (a checkout's folder, or the venv's site-packages)."""
    found = importlib.util.find_spec("rlbook")
    return [pathlib.Path(found.origin).resolve().parent] if found and found.origin else []


def _private_tmp_mounts(needed: list[pathlib.Path]) -> list[str]:
    """Shell commands giving the process an empty ``/tmp`` (and ``/var/tmp``, ``/dev/shm``) that still shows
    the ``needed`` folders under them (the interpreter and rlbook, when the checkout itself lives in ``/tmp``):
    each is opened before the empty tmpfs covers it and bound back from that open descriptor."""
    commands, descriptor = [], 3
    for path in PRIVATE_TMP:
        if not os.path.isdir(path):
            continue
        inside = [n for n in needed if n.resolve().is_relative_to(path)]
        opened = {}
        for folder in inside:
            opened[folder.resolve()] = descriptor
            commands.append(f"exec {descriptor}< {shlex.quote(str(folder.resolve()))}")
            descriptor += 1
        commands.append(f"mount -t tmpfs -o size=256m,mode=1777 none {path}")
        for folder, fd in opened.items():
            commands += [f"mkdir -p {shlex.quote(str(folder))}",
                         f"mount --no-canonicalize --bind /proc/self/fd/{fd} {shlex.quote(str(folder))}", f"exec {fd}<&-"]
    return commands


def clean_env(folder: pathlib.Path, extra: dict[str, str]) -> dict[str, str]:
    """The only environment a sandboxed process sees: none of the grader's variables."""
    return {"PATH": f"{pathlib.Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(folder),
            "TMPDIR": str(folder), "MPLCONFIGDIR": str(folder), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "TOKENIZERS_PARALLELISM": "false", **extra}
