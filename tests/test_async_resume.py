"""Checkpoint/resume of rlbook.trainers.async_rl.AsyncTrainer.

Simulated mode: a run interrupted at step k and resumed in a fresh trainer (a new process, in
effect) gives the uninterrupted run's history, timings aside, and its weights. Threaded mode: the
learner is restored exactly (weights, version, history) and training goes on within the bound,
but rounds in flight are dropped, so later batches are not the uninterrupted run's.
"""

from __future__ import annotations

import pytest
import torch

from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.tasks import get_task
from rlbook.trainers import AsyncConfig, AsyncTrainer, OnlineTrainer, preset

TIMINGS = ("tokens_per_s", "step_time", "wall_time", "generate_time", "train_time")


def parity_reward(text, example):
    return float(len(text) % 2)


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def fresh_trainer(tokenizer, async_config, **overrides):
    """A trainer built from scratch, as a new process would build it."""
    dataset = get_task("arithmetic", digits=1).dataset(8, seed=0)
    settings = dict(group_size=2, prompts_per_step=2, max_new_tokens=8, lr=5e-2)
    config = preset("grpo", **{**settings, **overrides})
    return AsyncTrainer(build_tiny_model(tokenizer, shape="test"), tokenizer, parity_reward, config, async_config,
                        train_dataset=dataset)


def without_timings(rows):
    return [{k: v for k, v in row.items() if k not in TIMINGS} for row in rows]


def assert_same_rows(expected, actual):
    assert len(actual) == len(expected)
    for row_expected, row_actual in zip(without_timings(expected), without_timings(actual)):
        assert row_actual.keys() == row_expected.keys()
        for key, value in row_expected.items():
            assert row_actual[key] == pytest.approx(value, rel=1e-6, abs=1e-6, nan_ok=True), key


@pytest.mark.parametrize("async_settings, overrides", [
    (dict(staleness=2, objective="naive"), {}),
    (dict(staleness=3, objective="decoupled", behaviour_weight_cap=5.0), {"dynamic_sampling": True}),
])
def test_simulated_resume_gives_the_uninterrupted_run(tokenizer, tmp_path, async_settings, overrides):
    straight = fresh_trainer(tokenizer, AsyncConfig(**async_settings), **overrides)
    straight.train(5, progress=False)

    interrupted = fresh_trainer(tokenizer, AsyncConfig(**async_settings), **overrides)
    interrupted.train(3, checkpoint_dir=tmp_path, progress=False)  # stale snapshots are pending here
    del interrupted
    torch.manual_seed(12345)  # the new process's global random state is unrelated

    resumed = fresh_trainer(tokenizer, AsyncConfig(**async_settings), **overrides)
    resumed.train(2, resume_from=tmp_path, progress=False)

    assert resumed.history.column("staleness_max") == straight.history.column("staleness_max")
    assert_same_rows(straight.history.rows, resumed.history.rows)
    assert resumed.policy_version == straight.policy_version == 5
    for (name_a, a), (name_b, b) in zip(straight.policy.state_dict().items(), resumed.policy.state_dict().items()):
        assert name_a == name_b and torch.equal(a, b), name_a
    assert [e["phase"] for e in resumed.timeline] == [e["phase"] for e in straight.timeline]
    starts = [e["start"] for e in resumed.timeline]
    assert starts == sorted(starts)  # the resumed timeline goes on after the saved one


def test_threaded_resume_restores_the_learner_and_keeps_the_bound(tokenizer, tmp_path):
    settings = dict(staleness=1, threaded=True, queue_timeout=60.0)
    interrupted = fresh_trainer(tokenizer, AsyncConfig(**settings))
    interrupted.train(3, checkpoint_dir=tmp_path, checkpoint_every=2, progress=False)
    saved_rows, saved_weights = interrupted.history.rows, interrupted.policy.state_dict()

    resumed = fresh_trainer(tokenizer, AsyncConfig(**settings))
    resumed.resume(tmp_path)
    assert resumed.policy_version == 3 and resumed._rounds_taken == 3
    assert_same_rows(saved_rows, resumed.history.rows)
    for name, tensor in resumed.policy.state_dict().items():
        assert torch.equal(tensor, saved_weights[name]), name
    history = resumed.train(2, progress=False)
    assert len(history) == 5 and resumed.policy_version == 5
    assert all(0 <= row["staleness_max"] <= 1 for row in history)
    assert resumed._producer is None


def test_resume_refuses_another_async_config_or_a_synchronous_checkpoint(tokenizer, tmp_path):
    fresh_trainer(tokenizer, AsyncConfig(staleness=1)).train(1, checkpoint_dir=tmp_path / "async", progress=False)
    with pytest.raises(ValueError, match="staleness"):
        fresh_trainer(tokenizer, AsyncConfig(staleness=2)).resume(tmp_path / "async")
    with pytest.raises(ValueError, match="objective"):
        fresh_trainer(tokenizer, AsyncConfig(staleness=1, objective="naive")).resume(tmp_path / "async")
    with pytest.raises(ValueError, match="lr"):
        fresh_trainer(tokenizer, AsyncConfig(staleness=1), lr=1e-3).resume(tmp_path / "async")

    dataset = get_task("arithmetic", digits=1).dataset(8, seed=0)
    synchronous = OnlineTrainer(build_tiny_model(tokenizer, shape="test"), tokenizer, parity_reward,
                                preset("grpo", group_size=2, prompts_per_step=2, max_new_tokens=8, lr=5e-2),
                                train_dataset=dataset)
    synchronous.train(1, checkpoint_dir=tmp_path / "sync", progress=False)
    with pytest.raises(ValueError, match="AsyncTrainer"):
        fresh_trainer(tokenizer, AsyncConfig(staleness=1)).resume(tmp_path / "sync")
