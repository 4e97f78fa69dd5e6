"""Tests of rlbook.trainers.checkpoint: atomic checkpoints, resuming to the same numbers, every
state restored exactly, and damaged or tampered checkpoints refused (never unpickled)."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.tasks import get_task
from rlbook.trainers import OnlineTrainer, load_checkpoint, preset, save_checkpoint
from rlbook.trainers.checkpoint import Checkpoint, rng_state, set_rng_state

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
        checkpoint = Checkpoint(models={"weights": {"w": torch.full((2,), float(step))}}, meta={"step": step})
        save_checkpoint(tmp_path, step, checkpoint, keep=2)
    assert (tmp_path / "latest").read_text() == "step_00000003"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_00000002", "step_00000003"]
    assert sorted(p.name for p in (tmp_path / "step_00000003").iterdir()) == ["state.json", "tensors.safetensors"]
    loaded = load_checkpoint(tmp_path)
    assert loaded.meta == {"step": 3} and torch.equal(loaded.models["weights"]["w"], torch.full((2,), 3.0))
    assert load_checkpoint(tmp_path / "step_00000002").meta == {"step": 2}


def test_a_failed_write_leaves_the_last_checkpoint(tmp_path):
    save_checkpoint(tmp_path, 1, Checkpoint(meta={"step": 1}))
    with pytest.raises(TypeError):  # an object JSON cannot hold
        save_checkpoint(tmp_path, 2, Checkpoint(meta={"step": object()}))
    assert (tmp_path / "latest").read_text() == "step_00000001"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_00000001"]  # no half-written folder


def assert_same_state(expected, actual, where="state"):
    """Equal nested states: tensors equal in dtype and value, tuples still tuples, NaN equal to NaN."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and actual.dtype == expected.dtype, where
        assert torch.equal(actual.cpu(), expected.cpu()), where
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_same_state(expected[key], actual[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected) and len(actual) == len(expected), where
        for index, (a, b) in enumerate(zip(expected, actual)):
            assert_same_state(a, b, f"{where}[{index}]")
    elif isinstance(expected, np.ndarray):
        assert np.array_equal(actual, expected), where
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual), where
    else:
        assert actual == expected, where


def test_every_state_comes_back_exactly(tokenizer, tmp_path):
    trainer = fresh_trainer(tokenizer, "ppo", minibatch_size=2, warmup_steps=3)  # critic, reference, scheduler
    trainer.train(2, progress=False)
    random.random(), np.random.rand(), torch.rand(1)  # move every global generator somewhere
    saved_random = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    trainer.save(tmp_path)

    torch.manual_seed(7), random.seed(7), np.random.seed(7)
    resumed = fresh_trainer(tokenizer, "ppo", minibatch_size=2, warmup_steps=3).resume(tmp_path)
    for name in ("policy", "critic", "reference", "optimizer", "critic_optimizer", "scheduler"):
        assert_same_state(getattr(trainer, name).state_dict(), getattr(resumed, name).state_dict(), name)
    assert_same_state(saved_random, (random.getstate(), np.random.get_state(), torch.get_rng_state()), "rng")
    assert (resumed.step, resumed.sample_calls, resumed.wall_time) == (trainer.step, trainer.sample_calls,
                                                                       trainer.wall_time)
    assert_same_state(trainer.history.rows, resumed.history.rows, "history")
    assert resumed.history.config == trainer.config.to_dict()


def test_random_states_survive_json():
    random.random(), np.random.rand(), torch.rand(1)
    state = json.loads(json.dumps(rng_state()))
    expected = (random.random(), np.random.rand(), torch.rand(1))
    set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected
    with pytest.raises(ValueError, match="rng_state"):
        set_rng_state({**state, "numpy": ["MT19937", [1, 2], 0, 0, 0.0]})


# --- damaged and tampered checkpoints ------------------------------------------------------------
@pytest.fixture
def saved(tokenizer, tmp_path):
    """A GRPO trainer's checkpoint folder after one step."""
    fresh_trainer(tokenizer, "grpo").train(1, checkpoint_dir=tmp_path, progress=False)
    return tmp_path / "step_00000001"


class PlantedCode:
    """Unpickling this runs code: it would create ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_planted_pickle_is_never_loaded(tokenizer, saved, tmp_path):
    marker = tmp_path / "the pickle ran"
    for name in ("policy.pt", "optimizer.pt", "evil.pt"):
        torch.save(PlantedCode(marker), saved / name)
    fresh_trainer(tokenizer, "grpo").resume(saved.parent)
    assert not marker.exists()

    old_format = tmp_path / "old"
    old_format.mkdir()
    torch.save(PlantedCode(marker), old_format / "policy.pt")
    with pytest.raises(ValueError, match="pickled .pt files"):
        fresh_trainer(tokenizer, "grpo").resume(old_format)
    assert not marker.exists()


def rewrite_state(folder, change):
    state = json.loads((folder / "state.json").read_text())
    change(state)
    (folder / "state.json").write_text(json.dumps(state))


def rewrite_tensors(folder, change):
    tensors = load_file(folder / "tensors.safetensors")
    change(tensors)
    save_file(tensors, folder / "tensors.safetensors")


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "state.json").write_text('{"format": "rlbook-checkpoint/1", "models": {'), "not valid JSON"),
    (lambda f: rewrite_state(f, lambda s: s.update(format="something else")), "format"),
    (lambda f: rewrite_state(f, lambda s: s.update(models=[])), "'models' must be an object"),
    (lambda f: rewrite_state(f, lambda s: s["models"].update(policy="all")), "models\['policy'\] must be a list"),
    (lambda f: rewrite_state(f, lambda s: s["meta"].pop("history")), "lacks 'history'"),
    (lambda f: rewrite_state(f, lambda s: s["meta"].update(rng={"python": 3})), "rng_state"),
    (lambda f: rewrite_state(f, lambda s: s["meta"]["config"].update(lr=1.0)), "config differs .*lr"),
    (lambda f: rewrite_state(f, lambda s: s["optimizers"]["optimizer"]["state"].update(x={})),
     "must be a parameter index"),
    (lambda f: (f / "tensors.safetensors").write_bytes(b"not a safetensors file"), "not a readable safetensors"),
    (lambda f: rewrite_tensors(f, lambda t: t.pop("policy/lm_head.weight")), "missing \['policy/lm_head.weight'\]"),
    (lambda f: rewrite_tensors(f, lambda t: t.update({"policy/extra": torch.zeros(1)})),
     "unexpected \['policy/extra'\]"),
    (lambda f: rewrite_tensors(f, lambda t: t.update({"policy/lm_head.weight": torch.zeros(3, 5)})),
     "'policy' has lm_head.weight of shape \(3, 5\)"),
    (lambda f: rewrite_tensors(f, lambda t: t.update({"optimizer/state/0/exp_avg": torch.zeros(3, 5)})),
     "'optimizer' has exp_avg of parameter 0 of shape \(3, 5\)"),
    (lambda f: (f.parent / "latest").write_text("../../elsewhere"), "must name a checkpoint folder"),
], ids=["json-syntax", "format", "models-type", "model-keys-type", "meta-missing", "rng", "config", "optimizer-index",
        "tensor-file", "missing-tensor", "extra-tensor", "model-shape", "optimizer-shape", "latest"])
def test_a_damaged_checkpoint_is_refused_by_name(tokenizer, saved, damage, message):
    damage(saved)
    with pytest.raises(ValueError, match=message):
        fresh_trainer(tokenizer, "grpo").resume(saved.parent)


def test_resume_refuses_a_different_config_or_a_missing_checkpoint(tokenizer, tmp_path):
    fresh_trainer(tokenizer, "grpo").train(1, checkpoint_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="lr"):
        fresh_trainer(tokenizer, "grpo", lr=1e-3).resume(tmp_path)
    with pytest.raises(ValueError, match="path"):
        fresh_trainer(tokenizer, "grpo").resume(tmp_path / "nowhere")


def test_every_preference_state_comes_back_exactly(tokenizer, tmp_path):
    from datasets import Dataset

    from rlbook.trainers import PreferenceTrainer

    pairs = Dataset.from_dict({"prompt": ["Review Dune.", "Review Heat.", "Review Jaws.", "Review Up."],
                               "chosen": ["great plot.", "fun cast.", "superb music.", "moving end."],
                               "rejected": ["dull plot.", "weak cast.", "bland music.", "slow end."]})

    def build():
        return PreferenceTrainer(build_tiny_model(tokenizer, shape="test"), tokenizer, pairs, steps=3, batch_size=2,
                                 lr=1e-2, warmup_steps=2, lr_schedule="cosine", progress=False)

    trainer = build()
    trainer.train()
    trainer.save(tmp_path)
    resumed = build().resume(tmp_path)
    for name in ("model", "reference", "optimizer", "scheduler"):
        assert_same_state(getattr(trainer, name).state_dict(), getattr(resumed, name).state_dict(), name)
    assert resumed.step == trainer.step == 3
    assert_same_state(trainer.history.rows, resumed.history.rows, "history")
    assert resumed.history.config == trainer.history.config and resumed.history.config["steps"] == 3
