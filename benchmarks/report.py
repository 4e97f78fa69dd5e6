"""``make report``: run every benchmark and rewrite the README's table of results from this run.

Each script in ``COMMANDS`` runs in a fresh process under the environment ``make`` gives it (one PyTorch
thread unless ``OMP_NUM_THREADS`` says otherwise) and prints its result as a ``RESULT {json}`` line
(``common.emit_result``): what was measured, rlbook's figure and the reference's, their ratio by the wall
clock and by process (CPU) time, and the load average before it started. This script collects those
lines into one Markdown table, each row with the command that reproduces it, headed by the machine's
state (CPU model, cores, torch version, commit, date), and writes it between the README's two
``REPORT_BEGIN`` / ``REPORT_END`` markers (``--print-only``: print it and leave the README alone; that
is ``make bench``).

A benchmark that fails is reported in its row, with its exit status, and the run goes on; the script
then exits non-zero. Nothing here is timed against a threshold: the numbers are what this machine did.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
README = ROOT / "README.md"
REAL_MODEL = "smollm2-135m-instruct"
REPORT_BEGIN = "<!-- make report: benchmark table (begin) -->"
REPORT_END = "<!-- make report: benchmark table (end) -->"

# What ``make bench`` / ``make report`` run, in order: the zoo's arith-base first, then the real model.
COMMANDS = (
    ("rollout.py",),
    ("rollout.py", "--num-samples", "8"),
    ("grpo_vs_trl.py", "--beside-busy"),
    ("rollout.py", "--model", REAL_MODEL),
    ("rollout.py", "--model", REAL_MODEL, "--num-samples", "8"),
    ("grpo_vs_trl.py", "--model", REAL_MODEL),
)
RESULT_PREFIX = "RESULT "  # a result line, as common.emit_result prints it


def read_results(stdout: str) -> list[dict]:
    """Every ``RESULT`` line a benchmark script printed, decoded."""
    return [json.loads(line[len(RESULT_PREFIX):]) for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]


def command_text(command) -> str:
    return "`benchmarks/" + " ".join(command) + "`"


def machine_state() -> dict:
    """The facts a reader needs to compare a table with their own machine's."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch_version, "commit": commit,
            "threads": os.environ.get("OMP_NUM_THREADS", "unset"),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def run_benchmark(command, timeout_s: float = 3600) -> tuple[list[dict], str]:
    """Run one benchmark script; its results and, if it failed, why (else "")."""
    try:
        done = subprocess.run([sys.executable, str(HERE / command[0]), *command[1:]], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [], f"stopped after {timeout_s:.0f} s"
    sys.stdout.write(done.stdout)
    sys.stdout.flush()
    results = read_results(done.stdout)
    if done.returncode != 0 or not results:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return results, f"exit status {done.returncode}: {tail}"
    return results, ""


def render(rows: list[tuple[tuple, dict | None, str]], state: dict) -> str:
    """The README's block: the machine's state, then one table row per result (``rows``: command, result,
    or None and why it failed)."""
    lines = [
        REPORT_BEGIN,
        f"Measured by `make report` on {state['date']} at commit {state['commit']}: {state['cpu']}, "
        f"{state['cores']} cores, torch {state['torch']}, OMP_NUM_THREADS={state['threads']}, temperature 1. "
        "Ratios above 1 mean rlbook is faster; the load average before each script is in its row.",
        "",
        "| benchmark | command | rlbook | reference | ratio (wall clock) | ratio (CPU time) | load before |",
        "|---|---|---|---|---|---|---|",
    ]
    for command, result, failure in rows:
        if result is None:
            lines.append(f"| did not run: {failure} | {command_text(command)} | – | – | – | – | – |")
            continue
        lines.append(f"| {result['benchmark']} | {command_text(command)} | {result['rlbook']} | {result['reference']} "
                     f"| {result['ratio']:.2f}× | {result['ratio_cpu']:.2f}× | {result['load_before']:.1f} |")
    lines.append(REPORT_END)
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """``text`` with what lies between its report markers (markers included) replaced by ``block``."""
    if text.count(REPORT_BEGIN) != 1 or text.count(REPORT_END) != 1:
        raise ValueError(f"the README must hold each report marker once: {REPORT_BEGIN!r} and {REPORT_END!r}")
    start, end = text.index(REPORT_BEGIN), text.index(REPORT_END) + len(REPORT_END)
    if end < start:
        raise ValueError("the README's report end marker comes before its begin marker")
    return text[:start] + block + text[end:]


def main(argv=None, *, runner=run_benchmark) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/report.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--print-only", action="store_true", help="print the table; leave README.md as it is")
    parser.add_argument("--readme", type=Path, default=README, help="the file whose table is rewritten")
    args = parser.parse_args(argv)
    if not args.print_only:  # fail before an hour of benchmarks, not after
        replace_block(args.readme.read_text(), "")
    rows, failed = [], False
    for command in COMMANDS:
        print(f"\n$ {command_text(command).strip('`')}", flush=True)
        results, failure = runner(command)
        failed |= bool(failure)
        rows += [(command, result, "") for result in results]
        if failure:
            rows.append((command, None, failure))
    block = render(rows, machine_state())
    print("\n" + block)
    if not args.print_only:
        args.readme.write_text(replace_block(args.readme.read_text(), block))
        print(f"\nwritten into {args.readme}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
