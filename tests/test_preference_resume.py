"""Checkpoint/resume of the preference loop: an interrupted run resumes to the uninterrupted one's numbers."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset

from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.trainers.preference import PreferenceTrainer


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def pairs():
    films = ["Dune", "Heat", "Jaws", "Up", "Ran", "Big"]
    return Dataset.from_dict({
        "prompt": [f"Review {film}." for film in films],
        "chosen": ["great plot.", "fun cast.", "superb music.", "moving end.", "vivid colour.", "warm jokes."],
        "rejected": ["dull plot.", "weak cast.", "bland music.", "slow end.", "flat colour.", "stale jokes."],
    })


def fresh_trainer(tokenizer, pairs, steps, **kwargs):
    """A trainer built from scratch, as a new process would build it."""
    model = build_tiny_model(tokenizer, shape="test", seed=0)
    settings = dict(steps=steps, batch_size=4, lr=1e-2, warmup_steps=3, progress=False)
    return PreferenceTrainer(model, tokenizer, pairs, **{**settings, **kwargs})


SPEED_OPTIONS = dict(precompute_reference=True, group_by_length=True)


@pytest.mark.parametrize("loss, options", [("dpo", {}), ("simpo", {}), ("dpo", SPEED_OPTIONS)],
                         ids=["dpo", "simpo", "dpo-precomputed-grouped"])  # with and without a reference model
def test_resume_gives_the_uninterrupted_run(tokenizer, pairs, tmp_path, loss, options):
    straight = fresh_trainer(tokenizer, pairs, 4, loss=loss, **options)
    straight.train()

    fresh_trainer(tokenizer, pairs, 2, loss=loss, **options).train(checkpoint_dir=tmp_path)
    torch.manual_seed(12345)  # the new process's global random state is unrelated
    resumed = fresh_trainer(tokenizer, pairs, 4, loss=loss, **options)
    resumed.train(resume_from=tmp_path)

    assert len(resumed.history) == 4
    for expected, actual in zip(straight.history.rows, resumed.history.rows, strict=True):
        assert actual.keys() == expected.keys()
        for key, value in expected.items():
            assert actual[key] == pytest.approx(value, rel=1e-6, abs=1e-6), key
    for (name_a, a), (name_b, b) in zip(straight.model.state_dict().items(), resumed.model.state_dict().items()):
        assert name_a == name_b and torch.equal(a, b), name_a


def test_checkpoint_every_and_refusals(tokenizer, pairs, tmp_path):
    fresh_trainer(tokenizer, pairs, 3).train(checkpoint_dir=tmp_path, checkpoint_every=2)
    assert (tmp_path / "latest").read_text() == "step_00000003"
    with pytest.raises(ValueError, match="beta"):
        fresh_trainer(tokenizer, pairs, 4, beta=0.5).train(resume_from=tmp_path)
    with pytest.raises(ValueError, match="checkpoint_every"):
        fresh_trainer(tokenizer, pairs, 4).train(checkpoint_dir=tmp_path, checkpoint_every=0)
    with pytest.raises(ValueError, match="path"):
        fresh_trainer(tokenizer, pairs, 4).train(resume_from=tmp_path / "nowhere")
