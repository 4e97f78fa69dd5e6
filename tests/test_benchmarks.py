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


def test_a_real_model_not_in_the_cache_is_refused_without_a_download(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBOOK_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what the module sets (setdefault), so importing it changes nothing
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from common import get_model

    with pytest.raises(SystemExit, match="is not built in rlbook's cache.*ensure_pretrained"):
        get_model(NAME)
    assert not (tmp_path / "empty-cache").exists()  # nothing was fetched or built
