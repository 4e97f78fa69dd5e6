"""The one loop scaffold and optimiser configuration (rlbook.trainers.harness), and resume for SFT, the
next-token loop and the reward model: an interrupted run resumes to the uninterrupted one's bits."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset

from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.schedules import RecordedSchedule, recorded_lr
from rlbook.trainers.harness import OptimConfig, run_steps
from rlbook.trainers.history import History
from rlbook.trainers.live import SFT_PANELS
from rlbook.trainers.next_token import NextTokenConfig, train_on_chats
from rlbook.trainers.reward_model import RewardModel, RewardModelConfig, train_reward_model
from rlbook.trainers.sft import SFTConfig, sft

FILMS = ["Dune", "Heat", "Jaws", "Up", "Ran", "Big"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def pairs():
    return Dataset.from_dict({
        "prompt": [f"Review {film}." for film in FILMS],
        "chosen": ["great plot.", "fun cast.", "superb music.", "moving end.", "vivid colour.", "warm jokes."],
        "rejected": ["dull plot.", "weak cast.", "bland music.", "slow end.", "flat colour.", "stale jokes."],
    })


def same_weights(a, b):
    for (name_a, x), (name_b, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert name_a == name_b and torch.equal(x, y), name_a


# ------------------------------------------------------------------------------ OptimConfig


def test_each_loops_default_optimiser_is_what_it_was(tokenizer):
    model = build_tiny_model(tokenizer, shape="test")
    online = OptimConfig.online(1e-3, warmup=2).optimizer(model.parameters()).defaults
    assert (online["lr"], online["betas"], online["weight_decay"]) == (1e-3, (0.9, 0.999), 0.0)
    preference = OptimConfig.preference(1e-4).optimizer(model.parameters()).defaults
    assert (preference["betas"], preference["weight_decay"]) == ((0.9, 0.999), 0.01)  # torch's AdamW defaults
    next_token = NextTokenConfig(steps=10).optim()
    assert (next_token.betas, next_token.weight_decay, next_token.schedule, next_token.min_lr_ratio,
            next_token.grad_clip) == ((0.9, 0.98), 0.01, "zoo", 0.1, 1.0)
    assert RewardModelConfig().optim() == OptimConfig(lr=1e-4)


def test_the_zoo_schedule_sets_the_recorded_rates(tokenizer):
    model = build_tiny_model(tokenizer, shape="test")
    optimizer, scheduler = OptimConfig.next_token(3e-3, warmup=3).build(model.parameters(), steps=10)
    assert isinstance(scheduler, RecordedSchedule)
    for step in range(10):  # the very floats, not a rounding apart
        assert optimizer.param_groups[0]["lr"] == recorded_lr(3e-3, step, steps=10, warmup_steps=3)
        scheduler.step()
    fresh_optimizer, fresh = OptimConfig.next_token(3e-3, warmup=3).build(model.parameters(), steps=10)
    fresh.load_state_dict(scheduler.state_dict())
    assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    with pytest.raises(ValueError, match="differs"):
        OptimConfig.next_token(3e-3, warmup=3).build(model.parameters(), steps=20)[1].load_state_dict(
            scheduler.state_dict())


@pytest.mark.parametrize("field, value", [("lr", 0.0), ("betas", (0.9, 1.0)), ("weight_decay", -1.0),
                                          ("warmup", -1), ("schedule", "step"), ("min_lr_ratio", 2.0),
                                          ("grad_clip", 0.0)])
def test_optim_config_names_a_bad_field(field, value):
    with pytest.raises(ValueError, match=field):
        OptimConfig(**{"lr": 1e-3, "schedule": "cosine", field: value})
    with pytest.raises(ValueError, match="min_lr_ratio"):
        OptimConfig(lr=1e-3, min_lr_ratio=0.1)  # a constant rate has no floor


def test_run_steps_checkpoints_on_its_cadence_and_after_the_last_step():
    saved, history = [], History()
    run_steps(lambda i: {"step": i, "loss": float(i)}, range(2, 7), history=history, panels=SFT_PANELS, title="t",
              progress=False, checkpoint_dir="somewhere", checkpoint_every=2, save=lambda d: saved.append(len(history)))
    assert history.column("step") == [2, 3, 4, 5, 6] and saved == [2, 4, 5]  # after steps 4, 6 and the last (7)
    saved.clear()
    run_steps(lambda i: {"step": i}, range(0, 6), history=History(), panels=SFT_PANELS, title="t", progress=False,
              checkpoint_dir="somewhere", save=lambda d: saved.append(d), stop_after=3)
    assert saved == ["somewhere"]
    with pytest.raises(ValueError, match="checkpoint_every"):
        run_steps(lambda i: None, range(1), history=History(), panels=SFT_PANELS, title="t", checkpoint_every=0)
    with pytest.raises(ValueError, match="save"):
        run_steps(lambda i: None, range(1), history=History(), panels=SFT_PANELS, title="t", checkpoint_dir="x")


def test_the_configs_check_and_record_their_settings():
    assert SFTConfig(steps=3).to_dict() == {"steps": 3, "batch_size": 16, "lr": 1e-3, "weight_decay": 0.01,
                                            "warmup": 0, "max_length": 256, "seed": 0}
    assert SFTConfig(steps=3).optim() == NextTokenConfig(steps=3, lr=1e-3, warmup=0).optim()  # one optimiser
    with pytest.raises(ValueError, match="batch_size"):
        SFTConfig(steps=3, batch_size=0)
    with pytest.raises(ValueError, match="eval_every"):
        RewardModelConfig(eval_every=0)
    with pytest.raises(ValueError, match="warmup"):
        NextTokenConfig(steps=3, warmup=-1)
    assert RewardModelConfig(epochs=2, batch_size=4).total_steps(6) == 4


# ------------------------------------------------------------------------------ resume


def chats():
    return [([{"role": "user", "content": f"Review {film}."}], f"{film} was great.") for film in FILMS]


def test_sft_resume_gives_the_uninterrupted_run(tokenizer, tmp_path):
    settings = dict(steps=6, lr=1e-2, batch_size=4, warmup=2, seed=3, progress=False)
    straight_model = build_tiny_model(tokenizer, shape="test", seed=0)
    straight = sft(straight_model, tokenizer, chats(), **settings)

    sft(build_tiny_model(tokenizer, shape="test", seed=0), tokenizer, chats(), **settings, checkpoint_dir=tmp_path,
        stop_after=3)
    assert (tmp_path / "latest").read_text() == "step_00000003"
    torch.manual_seed(12345)  # the new process's global random state is unrelated
    model = build_tiny_model(tokenizer, shape="test", seed=1)  # and its weights are overwritten
    resumed = sft(model, tokenizer, chats(), **settings, resume_from=tmp_path)

    assert resumed.rows == straight.rows and len(resumed) == 6  # the losses, bit for bit
    same_weights(straight_model, model)
    with pytest.raises(ValueError, match="lr"):
        sft(model, tokenizer, chats(), **{**settings, "lr": 2e-2}, resume_from=tmp_path)


def test_next_token_resume_gives_the_uninterrupted_run(tokenizer, tmp_path):
    corpus = [(f"Q {film}\nA: ", f"{film}!") for film in FILMS]
    settings = dict(steps=5, batch_size=3, lr=3e-3, warmup=2, seed=1, progress=False)
    straight_model = build_tiny_model(tokenizer, shape="test", seed=0)
    straight = train_on_chats(straight_model, tokenizer, corpus, **settings)

    first = train_on_chats(build_tiny_model(tokenizer, shape="test", seed=0), tokenizer, corpus, **settings,
                           checkpoint_dir=tmp_path, checkpoint_every=2, stop_after=2)
    torch.manual_seed(999)
    model = build_tiny_model(tokenizer, shape="test", seed=0)
    resumed = train_on_chats(model, tokenizer, corpus, **settings, resume_from=tmp_path)

    assert first == straight[:2] and resumed == straight
    same_weights(straight_model, model)
    with pytest.raises(ValueError, match="steps"):  # the schedule spans the step budget: it must be the saved one
        train_on_chats(model, tokenizer, corpus, **{**settings, "steps": 9}, resume_from=tmp_path)


def test_reward_model_resume_gives_the_uninterrupted_run(tokenizer, pairs, tmp_path):
    def fresh():
        return RewardModel.from_causal_lm(build_tiny_model(tokenizer, shape="test", seed=0), tokenizer, seed=0)

    settings = dict(batch_size=4, lr=1e-3, eval_pairs=pairs, eval_every=2, progress=False)
    straight_rm = fresh()
    straight = train_reward_model(straight_rm, pairs, steps=4, **settings)

    train_reward_model(fresh(), pairs, steps=2, **settings, checkpoint_dir=tmp_path)
    torch.manual_seed(12345)
    resumed_rm = fresh()
    resumed = train_reward_model(resumed_rm, pairs, steps=4, **settings, resume_from=tmp_path)

    # The eval columns of step 1 were logged as the last step of the 2-step run.
    assert [{k: v for k, v in row.items() if not k.startswith("eval/") or row["step"] != 1} for row in resumed.rows] \
        == [{k: v for k, v in row.items() if not k.startswith("eval/") or row["step"] != 1} for row in straight.rows]
    same_weights(straight_rm.model, resumed_rm.model)
    with pytest.raises(ValueError, match="batch_size"):
        train_reward_model(fresh(), pairs, steps=4, **{**settings, "batch_size": 2}, resume_from=tmp_path)
