"""The benchmark scripts' real-model option (``--model smollm2-135m-instruct``), run in seconds without the real model.

rlbook's cache is pointed at a temporary folder where a tiny zoo-shaped model stands in for
SmolLM2-135M-Instruct (built, as far as the scripts can tell), so each script takes its real-model
path: the plain-addition prompts and reward, and for the GRPO step LoRA handed to both trainers.
Timings are not checked (a test never times anything); that each script runs to its ratio and that
both trainers did the same work (completions per step, the length limit) are.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlbook.models.pretrained import SOURCE_JSON

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import report  # noqa: E402  (no side effect; common, which turns the hub client offline, is not imported here)
from report import read_results  # noqa: E402

NAME = "smollm2-135m-instruct"


@pytest.fixture
def fake_cache(tmp_path, model_dir):
    """An rlbook cache in which the tiny ``model_dir`` model is the built real model."""
    folder = tmp_path / "cache" / "models" / NAME
    shutil.copytree(model_dir, folder)
    (folder / SOURCE_JSON).write_text(json.dumps({"name": NAME, "source": "test stand-in"}))
    return tmp_path / "cache"


def run_script(script, cache, *options):
    env = {**os.environ, "RLBOOK_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, f"benchmarks/{script}", "--model", NAME, *options], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_rollout_benchmark_runs_the_real_model_path(fake_cache):
    done = run_script("rollout.py", fake_cache, "--batch", "4", "--num-samples", "2", "--max-new-tokens", "4",
                      "--repeats", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "batch 4 = 2 prompts x 2 samples, max_new_tokens 4" in done.stdout
    assert "Reply with only the number." in done.stdout  # the real model's prompts, not the zoo's "What is a+b?"
    assert re.search(r"ratio rlbook / HF generate: \d+\.\d\dx", done.stdout), done.stdout
    (result,) = read_results(done.stdout)  # what `make report` reads
    assert result["benchmark"].startswith(f"sampler, `{NAME}` (batch 4 = 2 prompts × 2 samples, 4 new tokens)")
    assert result["ratio"] > 0 and result["ratio_cpu"] > 0 and result["rlbook"].endswith("tokens/s")


@pytest.mark.slow
def test_grpo_benchmark_runs_lora_in_both_trainers_on_the_same_work(fake_cache):
    done = run_script("grpo_vs_trl.py", fake_cache, "--steps", "1", "--prompts", "1", "--group-size", "2",
                      "--max-new-tokens", "4")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LoRA r=8" in done.stdout and "plain addition, 2-digit operands" in done.stdout
    work = {trainer: re.search(rf"{trainer} .*completions/tokens (\d+)/(\d+)$", done.stdout, re.M)
            for trainer in ("rlbook OnlineTrainer", "TRL GRPOTrainer")}
    for trainer, found in work.items():
        assert found is not None, (trainer, done.stdout)
        completions, tokens = int(found[1]), int(found[2])
        assert completions == 2 and 2 <= tokens <= 2 * 4, (trainer, completions, tokens)
    assert re.search(r"speed-up \(TRL / rlbook\): \d+\.\d\dx", done.stdout), done.stdout
    (result,) = read_results(done.stdout)
    assert result["benchmark"] == f"GRPO + LoRA step, `{NAME}` (1 prompts × G = 2, 4 new tokens, LoRA r = 8)"
    assert result["reference"].startswith("TRL `GRPOTrainer`") and result["ratio"] > 0


# --- make report: the README's table from a run ---------------------------------------------------------
def _result(benchmark, ratio):
    return {"benchmark": benchmark, "rlbook": "10 tokens/s", "reference": "HF `generate` 5 tokens/s", "ratio": ratio,
            "ratio_cpu": ratio * 1.1, "load_before": 0.3}


def test_make_report_rewrites_only_the_table_between_its_markers_and_reports_a_failure(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\nabove\n{report.REPORT_BEGIN}\nold table\n{report.REPORT_END}\nbelow\n")

    def runner(command):
        if command == report.COMMANDS[2]:
            return [], "exit status 1: RuntimeError: out of memory"
        return [_result(" ".join(command), 2.0)], ""

    assert report.main(["--readme", str(readme)], runner=runner) == 1  # a failed benchmark fails the run
    text = readme.read_text()
    assert text.startswith("# title\nabove\n") and text.endswith("below\n") and "old table" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(report.COMMANDS)
    assert "| did not run: exit status 1: RuntimeError: out of memory | `benchmarks/grpo_vs_trl.py --beside-busy` |" in text
    assert "| rollout.py --num-samples 8 | `benchmarks/rollout.py --num-samples 8` | 10 tokens/s | HF `generate` 5 tokens/s | 2.00× | 2.20× | 0.3 |" in text
    assert "Measured by `make report` on " in text and "cores, torch " in text


def test_make_bench_prints_the_table_and_leaves_the_readme_alone(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    assert report.main(["--print-only", "--readme", str(readme)], runner=lambda c: ([_result("x", 1.5)], "")) == 0
    assert readme.read_text() == "no markers here\n"
    assert "| x | `benchmarks/rollout.py` | 10 tokens/s |" in capsys.readouterr().out


def test_make_report_refuses_a_readme_without_its_markers_before_running_anything(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"{report.REPORT_BEGIN}\nonly the beginning\n")
    ran = []
    with pytest.raises(ValueError, match="each report marker once"):
        report.main(["--readme", str(readme)], runner=lambda command: ran.append(command) or ([], ""))
    assert not ran


def test_the_readme_holds_the_report_block_and_make_runs_the_report():
    text = (ROOT / "README.md").read_text()
    assert text.count(report.REPORT_BEGIN) == 1 and text.count(report.REPORT_END) == 1
    makefile = (ROOT / "Makefile").read_text()
    assert "benchmarks/report.py --print-only" in makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    assert "benchmarks/report.py" in makefile.split("\nreport:", 1)[1].split("\n\n", 1)[0]


def test_a_real_model_not_in_the_cache_is_refused_without_a_download(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBOOK_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what the module sets (setdefault), so importing it changes nothing
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from common import get_model

    with pytest.raises(SystemExit, match="is not built in rlbook's cache.*ensure_pretrained"):
        get_model(NAME)
    assert not (tmp_path / "empty-cache").exists()  # nothing was fetched or built
