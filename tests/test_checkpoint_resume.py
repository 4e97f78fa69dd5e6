"""Tests of rlbook.trainers.checkpoint: atomic checkpoints, and resuming to the same numbers."""

from __future__ import annotations

import pytest
import torch

from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.tasks import get_task
from rlbook.trainers import OnlineTrainer, load_checkpoint, preset, save_checkpoint

TIMINGS = ("tokens_per_s", "step_time", "wall_time")


def parity_reward(text, example):
    return float(len(text) % 2)


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def fresh_trainer(tokenizer, name, **overrides):
    """A trainer built from scratch, as a new process would build it."""
    dataset = get_task("arithmetic", digits=1).dataset(8, seed=0)
    group_size = 1 if name == "ppo" else 2
    settings = dict(group_size=group_size, prompts_per_step=4 // group_size, max_new_tokens=8, lr=1e-2)
    config = preset(name, **{**settings, **overrides})
    return OnlineTrainer(build_tiny_model(tokenizer, shape="test"), tokenizer, parity_reward, config,
                         train_dataset=dataset)


def without_timings(rows):
    return [{k: v for k, v in row.items() if k not in TIMINGS} for row in rows]


@pytest.mark.parametrize("name, overrides", [
    ("ppo", {"minibatch_size": 2}),  # critic, reference, two epochs of minibatches
    ("dapo", {"advantage_noise": 0.1, "warmup_steps": 3}),  # dynamic sampling, noise, a scheduler
])
def test_resume_gives_the_uninterrupted_run(tokenizer, tmp_path, name, overrides):
    straight = fresh_trainer(tokenizer, name, **overrides)
    straight.train(4, progress=False)

    interrupted = fresh_trainer(tokenizer, name, **overrides)
    interrupted.train(2, checkpoint_dir=tmp_path, progress=False)
    del interrupted
    torch.manual_seed(12345)  # the new process's global random state is unrelated

    resumed = fresh_trainer(tokenizer, name, **overrides)
    resumed.train(2, resume_from=tmp_path, progress=False)

    expected, actual = without_timings(straight.history.rows), without_timings(resumed.history.rows)
    assert [r["reward"] for r in actual] == [r["reward"] for r in expected]
    assert len(actual) == 4
    for row_expected, row_actual in zip(expected, actual):
        assert row_actual.keys() == row_expected.keys()
        for key, value in row_expected.items():
            assert row_actual[key] == pytest.approx(value, rel=1e-6, abs=1e-6, nan_ok=True), key
    for (name_a, a), (name_b, b) in zip(straight.policy.state_dict().items(), resumed.policy.state_dict().items()):
        assert name_a == name_b and torch.equal(a, b), name_a


def test_checkpoints_are_written_atomically_and_pruned(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, {"weights": {"w": torch.full((2,), float(step))}}, {"step": step}, keep=2)
    assert (tmp_path / "latest").read_text() == "step_00000003"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_00000002", "step_00000003"]
    tensors, meta = load_checkpoint(tmp_path)
    assert meta == {"step": 3} and torch.equal(tensors["weights"]["w"], torch.full((2,), 3.0))
    tensors, meta = load_checkpoint(tmp_path / "step_00000002")
    assert meta == {"step": 2}


def test_resume_refuses_a_different_config_or_a_missing_checkpoint(tokenizer, tmp_path):
    fresh_trainer(tokenizer, "grpo").train(1, checkpoint_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="lr"):
        fresh_trainer(tokenizer, "grpo", lr=1e-3).resume(tmp_path)
    with pytest.raises(ValueError, match="path"):
        fresh_trainer(tokenizer, "grpo").resume(tmp_path / "nowhere")
