"""Tests of rlbook.parallel: independent runs side by side, with the numbers of one after another."""

from __future__ import annotations

import math
import os

import pytest
import torch

from rlbook.ablation import run_ablation
from rlbook.parallel import WORKERS_ENV, default_workers, run_parallel
from rlbook.tasks import get_task
from rlbook.trainers import preset

SMALL = dict(group_size=3, prompts_per_step=2, max_new_tokens=6, lr=1e-2)
TIMING_COLUMNS = ("step_time", "wall_time", "tokens_per_s")  # wall-clock: the only columns allowed to differ


def _square_and_pid(x):
    return x * x, os.getpid(), torch.get_num_threads()


def _fails(x):
    raise ValueError(f"job {x} failed")


def test_results_come_back_in_the_jobs_order_from_worker_processes():
    results = run_parallel(_square_and_pid, [(x,) for x in range(6)], workers=2, progress=False)
    assert [r[0] for r in results] == [x * x for x in range(6)]
    pids = {r[1] for r in results}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert all(r[2] == 1 for r in results), "every worker must run on one thread"


def test_one_worker_runs_here_on_one_thread_and_restores_the_setting():
    before = torch.get_num_threads()
    results = run_parallel(_square_and_pid, [(3,)], workers=1, progress=False)
    assert results == [(9, os.getpid(), 1)]
    assert torch.get_num_threads() == before


def test_a_function_defined_at_run_time_works_in_the_workers():
    offset = 10
    local = lambda x: x + offset  # noqa: E731 - like a function defined in a notebook cell: not picklable
    assert run_parallel(local, [(1,), (2,)], workers=2, progress=False) == [11, 12]


def test_a_failing_job_raises_its_error():
    with pytest.raises(ValueError, match="job 1 failed"):
        run_parallel(_fails, [(1,)], workers=2, progress=False)
    with pytest.raises(ValueError, match="job 2 failed"):
        run_parallel(_fails, [(2,), (3,)], workers=2, progress=False)


@pytest.mark.parametrize("bad, message", [(dict(workers=0), "workers"), (dict(workers=1.5), "workers"),
                                          (dict(fn=3), "fn must be callable"), (dict(jobs=[1, 2]), "argument tuples")])
def test_bad_arguments_are_named(bad, message):
    arguments = dict(fn=_square_and_pid, jobs=[(1,)], progress=False) | bad
    with pytest.raises(ValueError, match=message):
        run_parallel(arguments.pop("fn"), arguments.pop("jobs"), **arguments)


def test_default_workers_follows_the_environment(monkeypatch):
    monkeypatch.setenv(WORKERS_ENV, "3")
    assert default_workers(10) == 3 and default_workers(2) == 2 and default_workers(0) == 1
    monkeypatch.setenv(WORKERS_ENV, "zero")
    with pytest.raises(ValueError, match=WORKERS_ENV):
        default_workers(4)
    monkeypatch.delenv(WORKERS_ENV)
    assert default_workers(1000) == len(os.sched_getaffinity(0))


def _comparable(value):
    return "nan" if isinstance(value, float) and math.isnan(value) else value  # NaN != NaN across processes


def _numbers(result):
    return {label: [[{k: _comparable(v) for k, v in row.items() if k not in TIMING_COLUMNS} for row in history]
                    for history in runs] for label, runs in result.histories.items()}


def test_an_ablation_gives_the_same_numbers_in_parallel_and_one_after_another(model_dir):
    task = get_task("arithmetic", digits=1)
    configs = {"grpo": preset("grpo", **SMALL), "dr_grpo": preset("dr_grpo", **SMALL)}
    held_out = task.dataset(3, seed=5, split="test")
    kwargs = dict(model=model_dir, task=task, steps=2, seeds=(0, 1), eval_dataset=held_out, eval_samples=2,
                  eval_every=1, progress=False)
    serial = run_ablation(configs, workers=1, **kwargs)
    parallel = run_ablation(configs, workers=2, **kwargs)
    assert _numbers(parallel) == _numbers(serial)
    assert parallel.evaluations == serial.evaluations
    assert parallel.eval_curves == serial.eval_curves
    # and the runs differ from each other, so the comparison above could have failed
    grpo = _numbers(serial)["grpo"]
    assert grpo[0] != grpo[1]
