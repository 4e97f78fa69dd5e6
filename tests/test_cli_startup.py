"""``rlbook --help`` and every subcommand's usage mistake answer without importing the heavy libraries.

What is asserted is what was imported, not how long it took (a busy machine would break a timing):
a fresh interpreter runs ``rlbook ARGS`` for each case and reports which of torch, transformers,
datasets, peft, pandas and matplotlib ended up in ``sys.modules`` (none may). The choices the parsers offer
without importing the library are then checked against the library's own names.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlbook import cli

HEAVY = ("torch", "transformers", "datasets", "peft", "pandas", "matplotlib")

# In a fresh interpreter: for each ARGS, `rlbook ARGS` (rlbook.cli.main), then its exit code and the
# heavy modules imported so far. A module once imported stays in sys.modules, so the first case
# that imports one is the one reported with it.
PROBE = """
import json, sys
cases, heavy_names = json.loads(sys.argv[1]), set(json.loads(sys.argv[2]))
from rlbook.cli import main
reports = []
for argv in cases:
    try:
        code = main(argv)
    except SystemExit as exit:
        code = exit.code
    reports.append({"argv": argv, "code": code,
                    "heavy": sorted({name.split(".")[0] for name in sys.modules} & heavy_names)})
print(json.dumps(reports))
"""

CASES = [
    (["--help"], 0),
    (["no-such-command"], 2),
    (["zoo", "--help"], 0),
    (["zoo"], 2),
    (["zoo", "build", "no-such-model"], 2),
    (["train", "--help"], 0),
    (["train"], 2),
    (["train", "no-such-preset", "--steps", "1", "--out", "x"], 2),
    (["train", "grpo", "--task", "no-such-task", "--steps", "1", "--out", "x"], 2),
    (["preference", "--help"], 0),
    (["preference"], 2),
    (["preference", "no-such-loss", "--out", "x"], 2),
    (["sft", "--help"], 0),
    (["sft", "--steps", "1"], 2),
    (["reward-model", "--help"], 0),
    (["reward-model", "--steps", "0", "--out", "x"], 2),
]


def probe(cases, heavy=HEAVY):
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(cases), json.dumps(heavy)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_help_and_usage_mistakes_import_no_heavy_library():
    reports = probe([argv for argv, _ in CASES])
    assert reports == [{"argv": argv, "code": code, "heavy": []} for argv, code in CASES]


def test_the_probe_sees_an_import():
    """The check can fail: the command line itself imports json, and the probe reports it."""
    assert probe([["--help"]], heavy=("json", "torch")) == [{"argv": ["--help"], "code": 0, "heavy": ["json"]}]


def test_python_dash_m_rlbook_answers_help():
    result = subprocess.run([sys.executable, "-m", "rlbook", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("usage: rlbook COMMAND")
    assert all(f"  {name}" in result.stdout for name in cli.COMMANDS)


def test_the_parsers_choices_are_the_librarys_names():
    from rlbook.tasks import TASKS
    from rlbook.trainers import PREFERENCE_LOSSES, PRESETS
    from rlbook.zoo import RECIPES

    assert cli.PRESET_NAMES == tuple(sorted(PRESETS))
    assert cli.TASK_NAMES == tuple(sorted(TASKS))
    assert cli.PREFERENCE_LOSS_NAMES == tuple(PREFERENCE_LOSSES)
    assert cli.ZOO_MODEL_NAMES == tuple(RECIPES)
