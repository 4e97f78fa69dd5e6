"""Tests of rlbook.trainers.async_rl: η = 0 is the synchronous loop, staleness is bounded by η, the two
objectives differ on stale batches, the threaded producer stops cleanly, bad configs are refused
(checkpoint/resume: test_async_resume.py)."""

from __future__ import annotations

import math

import pytest

from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.tasks import get_task
from rlbook.trainers import AsyncConfig, AsyncTrainer, OnlineTrainer, preset

TIMINGS = ("tokens_per_s", "step_time", "wall_time")


def parity_reward(text, example):
    return float(len(text) % 2)


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def config(**overrides):
    return preset("grpo", **{**dict(group_size=2, prompts_per_step=2, max_new_tokens=8, lr=1e-2), **overrides})


def trainer(tokenizer, async_config=None, **overrides):
    dataset = get_task("arithmetic", digits=1).dataset(8, seed=0)
    model = build_tiny_model(tokenizer, shape="test")
    if async_config is None:
        return OnlineTrainer(model, tokenizer, parity_reward, config(**overrides), train_dataset=dataset)
    return AsyncTrainer(model, tokenizer, parity_reward, config(**overrides), async_config, train_dataset=dataset)


@pytest.mark.parametrize("objective", ["naive", "decoupled"])
def test_no_staleness_is_the_synchronous_trainer(tokenizer, objective):
    synchronous = trainer(tokenizer).train(3, progress=False)
    asynchronous = trainer(tokenizer, AsyncConfig(staleness=0, objective=objective)).train(3, progress=False)
    for expected, actual in zip(synchronous.rows, asynchronous.rows, strict=True):
        assert actual["staleness_max"] == 0
        for key, value in expected.items():
            if key not in TIMINGS:
                assert actual[key] == pytest.approx(value, rel=1e-6, abs=1e-6, nan_ok=True), key


def test_simulated_staleness_is_bounded_recorded_and_reproducible(tokenizer):
    first = trainer(tokenizer, AsyncConfig(staleness=2, objective="naive"))
    history = first.train(5, progress=False)
    assert history.column("staleness_max") == [0, 1, 2, 2, 2]  # min(step, η): the generator runs η ahead
    assert history.column("staleness_mean") == [0, 1, 2, 2, 2]
    assert all(row["generate_time"] > 0 and row["train_time"] > 0 for row in history)
    phases = [entry["phase"] for entry in first.timeline]
    assert phases == ["generate", "train"] * 5
    assert all(entry["end"] >= entry["start"] for entry in first.timeline)
    again = trainer(tokenizer, AsyncConfig(staleness=2, objective="naive")).train(5, progress=False)
    assert again.column("loss") == history.column("loss") and again.column("reward") == history.column("reward")


def test_decoupled_and_naive_differ_on_stale_batches(tokenizer):
    # w · u = π_θ/π_behav = r: the two objectives differ only where the clip acts, so a large step.
    naive = trainer(tokenizer, AsyncConfig(staleness=1, objective="naive"), lr=5e-2).train(3, progress=False)
    decoupled = trainer(tokenizer, AsyncConfig(staleness=1, objective="decoupled", behaviour_weight_cap=10.0),
                        lr=5e-2).train(3, progress=False)
    assert naive.column("reward")[:2] == decoupled.column("reward")[:2]  # same samples until the updates differ
    assert naive[1]["ratio_max"] > 1.5  # the stale batch's ratio to π_behav is far from 1 ...
    assert decoupled[1]["ratio_max"] == pytest.approx(1.0, abs=1e-5)  # ... its ratio to π_prox is not
    assert naive[1]["clip_frac"] > 0 and decoupled[1]["clip_frac"] == 0
    assert naive[1]["loss"] != pytest.approx(decoupled[1]["loss"], abs=1e-6)
    assert "behaviour_weight_mean" in decoupled[1] and "behaviour_weight_mean" not in naive[1]
    assert all(math.isfinite(row["loss"]) for row in (*naive, *decoupled))


def test_threaded_mode_runs_within_the_bound_and_joins_its_thread(tokenizer):
    async_trainer = trainer(tokenizer, AsyncConfig(staleness=1, threaded=True, queue_timeout=60.0))
    async_trainer.train(3, progress=False)
    assert async_trainer._producer is None  # stopped and joined by train()
    history = async_trainer.train(2, progress=False)  # a second call restarts the producer
    assert len(history) == 5
    assert all(0 <= row["staleness_max"] <= 1 for row in history)
    assert async_trainer._producer is None
    assert {entry["phase"] for entry in async_trainer.timeline} == {"generate", "train"}


@pytest.mark.parametrize("settings, field", [
    (dict(staleness=-1), "staleness"),
    (dict(objective="offpolicy"), "objective"),
    (dict(objective="naive", behaviour_weight_cap=5.0), "behaviour_weight_cap"),
    (dict(behaviour_weight_cap=0.5), "behaviour_weight_cap"),
    (dict(threaded="yes"), "threaded"),
    (dict(queue_timeout=0), "queue_timeout"),
])
def test_bad_config_names_the_field(settings, field):
    with pytest.raises(ValueError, match=field):
        AsyncConfig(**settings)


def test_async_config_type_is_checked(tokenizer):
    with pytest.raises(ValueError, match="async_config"):
        trainer(tokenizer, async_config={"staleness": 1})


def test_behaviour_weight_variance_is_the_token_variance_of_the_weight():
    import torch

    from rlbook.trainers.async_rl import behaviour_weight_variance

    prox = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    behaviour = torch.log(torch.tensor([[1.0, 0.5, 1.0], [2.0, 1.0, 1.0]]))  # w = 1, 2, (pad), 0.5, 1
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    weights = torch.tensor([1.0, 2.0, 0.5, 1.0, 1.0], dtype=torch.float64)
    assert behaviour_weight_variance(prox, behaviour, mask) == pytest.approx(weights.var(correction=0).item())
    assert behaviour_weight_variance(prox, prox, mask) == 0.0  # a fresh batch: w = 1 everywhere
    with pytest.raises(ValueError, match="prox_logp, behaviour_logp and mask"):
        behaviour_weight_variance(prox, behaviour[:, :2], mask)
    with pytest.raises(ValueError, match="mask"):
        behaviour_weight_variance(prox, behaviour, torch.zeros_like(mask))


def test_decoupled_runs_log_the_behaviour_weight_variance(tokenizer):
    decoupled = trainer(tokenizer, AsyncConfig(staleness=1, objective="decoupled"), lr=5e-2).train(3, progress=False)
    assert decoupled.column("behaviour_weight_var")[0] == 0.0  # step 1 is fresh
    assert all(value > 0 for value in decoupled.column("behaviour_weight_var")[1:])
    naive = trainer(tokenizer, AsyncConfig(staleness=1, objective="naive"), lr=5e-2).train(2, progress=False)
    assert all(math.isnan(value) for value in naive.column("behaviour_weight_var"))


def test_trained_timeline_drops_the_rounds_no_step_took(tokenizer):
    async_trainer = trainer(tokenizer, AsyncConfig(staleness=2, threaded=True, queue_timeout=60.0))
    async_trainer.train(3, progress=False)
    rounds = [e for e in async_trainer.timeline if e["phase"] == "generate"]
    trained = async_trainer.trained_timeline()
    assert len([e for e in trained if e["phase"] == "generate"]) == 3  # one round per step was taken
    assert len(rounds) >= 3 and trained == [e for e in async_trainer.timeline if e not in rounds[3:]]
    simulated = trainer(tokenizer, AsyncConfig(staleness=1))
    simulated.train(2, progress=False)
    assert simulated.trained_timeline() == simulated.timeline
