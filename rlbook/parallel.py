"""Independent runs in parallel: one process per core, one thread per process.

A lesson's seeds are independent runs, and on a CPU the fastest way to run them is side by side, one
process per core, each with a single PyTorch thread: the book's models are ~1 M parameters, so a
step is thousands of small operations that a second thread barely speeds up (see the Makefile's
note on ``OMP_NUM_THREADS``), while a second *process* doubles the work done. ``run_parallel`` is
the one place that does it; ``rlbook.ablation.run_ablation`` and the lessons' multi-seed cells use it::

    results = run_parallel(train_one, [(0,), (1,), (2,)])   # train_one(0), train_one(1), train_one(2)

Same seed, same numbers: every call runs on one thread, whether it runs in a worker process or in
this one (``workers=1``), so the order of floating-point reductions, and with it every result, is
the same either way (``tests/test_parallel.py`` checks it on a real training run).

How many workers: ``workers`` if given, else the ``RLBOOK_WORKERS`` environment variable, else the
cores this process may use, never more than there are jobs.

Simplifications: the workers are started with ``fork`` (Linux), so a function defined in a notebook
cell works as it is and nothing but the results is pickled; the results must be picklable (a
``History``, numbers, dicts, tensors). Where ``fork`` is not the platform's way (macOS, Windows),
or once this process has initialised CUDA (a forked child cannot use it), the jobs run one after
another in this process, with the same numbers. What a worker prints
reaches the notebook in no particular order (or the terminal that started Jupyter): a job should
return what the lesson shows rather than print it; the parent shows one progress bar over the jobs.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager

import torch
from tqdm.auto import tqdm

__all__ = ["run_parallel", "default_workers", "WORKERS_ENV"]

WORKERS_ENV = "RLBOOK_WORKERS"

# The jobs of the pool being started: set before the workers fork, so they inherit it and only an
# index crosses the process boundary (a notebook's function and its arguments are never pickled).
_PENDING: tuple | None = None


def default_workers(n_jobs: int) -> int:
    """How many processes ``run_parallel`` uses for ``n_jobs`` jobs: ``$RLBOOK_WORKERS`` if set, else
    the cores this process may run on; at most ``n_jobs``, at least 1."""
    if not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs < 0:
        raise ValueError(f"n_jobs must be a non-negative int, got {n_jobs!r}")
    setting = os.environ.get(WORKERS_ENV, "").strip()
    if setting:
        if not setting.isdigit() or int(setting) < 1:
            raise ValueError(f"{WORKERS_ENV} must be a positive integer, got {setting!r}")
        cores = int(setting)
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, n_jobs))


def _can_fork() -> bool:
    # A forked child cannot use CUDA once the parent has initialised it: on a GPU the jobs run here.
    return (sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
            and not torch.cuda.is_initialized())


@contextmanager
def _one_thread():
    """Run the body on one PyTorch thread, then restore the caller's setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _start_worker() -> None:
    torch.set_num_threads(1)
    # The parent's sys.stdout may be a Jupyter stream bound to its sockets: write to the real descriptors.
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)


def _run_pending(index: int):
    fn, jobs = _PENDING
    return fn(*jobs[index])


def run_parallel(fn, jobs, *, workers: int | None = None, progress: bool = True, desc: str = "runs") -> list:
    """``[fn(*args) for args in jobs]``, computed in up to ``workers`` processes, in the jobs' order.

    Args:
        - fn: the function to call; each call must be independent of the others (its own seed).
        - jobs: a sequence of argument tuples, one call each.
        - workers: how many processes; None: ``default_workers(len(jobs))``. With 1, or where the
          platform cannot fork, the calls run here, one after another.
        - progress: a progress bar over the finished jobs.
        - desc: the progress bar's label.

    An exception in a job is raised here, with the worker's traceback as its cause.
    """
    global _PENDING
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    jobs = [tuple(args) if isinstance(args, (tuple, list)) else None for args in jobs]
    if any(args is None for args in jobs):
        raise ValueError("jobs must be a sequence of argument tuples (use (x,) for one argument)")
    if workers is None:
        workers = default_workers(len(jobs))
    elif not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"workers must be a positive int or None, got {workers!r}")
    workers = min(workers, max(1, len(jobs)))
    with tqdm(total=len(jobs), desc=desc, unit="run", disable=not progress or len(jobs) < 2) as bar:
        if workers == 1 or not _can_fork():
            results = []
            for args in jobs:
                with _one_thread():
                    results.append(fn(*args))
                bar.update()
            return results
        if _PENDING is not None:
            raise RuntimeError("run_parallel cannot be nested: a job must not call run_parallel itself")
        _PENDING = (fn, jobs)
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                     initializer=_start_worker) as pool:
                futures = [pool.submit(_run_pending, index) for index in range(len(jobs))]
                for _ in as_completed(futures):
                    bar.update()
                return [future.result() for future in futures]
        finally:
            _PENDING = None
