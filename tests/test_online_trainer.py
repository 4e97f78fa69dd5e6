"""Tests of rlbook.trainers.online: every preset runs on a tiny model and changes what it should."""

from __future__ import annotations

import math

import pytest
import torch

from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.rollout import sample
from rlbook.shaping import dynamic_sampling_mask
from rlbook.tasks import get_task
from rlbook.trainers import PRESETS, OnlineTrainer, preset
from rlbook.trainers.online import ScoredBatch

SINGLE_SAMPLE_PRESETS = ("ppo", "reinforce")


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def dataset():
    return get_task("arithmetic", digits=1).dataset(8, seed=0)


def parity_reward(text, example):
    """A reward a random tiny model earns half the time: 1 for an odd number of characters."""
    return float(len(text) % 2)


def tiny_config(name, **overrides):
    group_size = 1 if name in SINGLE_SAMPLE_PRESETS else 3
    settings = dict(group_size=group_size, prompts_per_step=2 if group_size > 1 else 4, max_new_tokens=8, lr=1e-2)
    return preset(name, **{**settings, **overrides})


def make_trainer(tokenizer, dataset, name, *, reward=parity_reward, **overrides):
    model = build_tiny_model(tokenizer, shape="test")
    return OnlineTrainer(model, tokenizer, reward, tiny_config(name, **overrides), train_dataset=dataset)


def snapshot(module):
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def changed(before, module):
    return {name for name, p in module.named_parameters() if not torch.equal(before[name], p.detach())}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_trains_the_policy_and_only_its_own_models(tokenizer, dataset, name):
    trainer = make_trainer(tokenizer, dataset, name)
    policy_before = snapshot(trainer.policy)
    reference_before = snapshot(trainer.reference) if trainer.reference is not None else None
    critic_before = snapshot(trainer.critic) if trainer.critic is not None else None
    history = trainer.train(2, progress=False)
    assert len(history) == 2 and history[-1]["step"] == 2
    assert changed(policy_before, trainer.policy), f"{name} did not change the policy"
    if reference_before is not None:
        assert not changed(reference_before, trainer.reference), "the reference model changed"
    assert (trainer.critic is not None) == (name == "ppo")
    if critic_before is not None:
        assert changed(critic_before, trainer.critic), "the critic was not trained"
    for key in ("reward", "pass@1", "entropy", "clip_frac_low", "clip_frac_high", "ratio_mean", "length_mean",
                "truncation_rate", "extra_samples", "tokens_per_s", "wall_time"):
        assert key in history[-1], key


def test_lora_trains_only_the_adapters(tokenizer, dataset):
    trainer = make_trainer(tokenizer, dataset, "grpo", lora=4)
    before = snapshot(trainer.policy)
    trainer.train(2, progress=False)
    moved = changed(before, trainer.policy)
    assert moved and all("lora_" in name for name in moved)


def test_under_lora_the_reference_is_the_base_model_with_adapters_off(tokenizer, dataset):
    from rlbook.rollout import rollout_logprobs, sample

    trainer = make_trainer(tokenizer, dataset, "grpo", lora=4, kl_beta=0.1)
    assert trainer.reference is None  # no deep copy of the policy
    row = trainer.train(3, progress=False)[-1]
    assert row["kl_ref"] > 0  # the adapters have moved the policy away from its base
    base = build_tiny_model(tokenizer, shape="test").eval()  # the same weights the trainer started from
    rollout = sample(trainer.policy, tokenizer, [example["prompt"] for example in dataset][:2], num_samples=2,
                     max_new_tokens=8, seed=5)
    ref_logp, kl = trainer._reference_terms(rollout)
    with torch.no_grad():
        expected = rollout_logprobs(base, rollout)
    assert torch.allclose(ref_logp, expected, atol=1e-5)
    assert (kl.abs() > 0).any()


def test_zero_beta_builds_no_reference_and_logs_kl_to_old(tokenizer, dataset):
    trainer = make_trainer(tokenizer, dataset, "dr_grpo")
    assert trainer.config.kl_beta == 0 and trainer.reference is None
    row = trainer.train(1, progress=False)[-1]
    assert math.isnan(row["kl_ref"]) and math.isfinite(row["approx_kl"])


@pytest.mark.filterwarnings("ignore:kl_placement='reward'")  # a non-k1 estimator in the reward, on purpose
def test_kl_in_the_reward_and_in_the_loss_are_logged(tokenizer, dataset):
    for placement in ("loss", "reward"):
        trainer = make_trainer(tokenizer, dataset, "grpo", kl_placement=placement, kl_estimator="k2", epochs=2)
        row = trainer.train(2, progress=False)[-1]
        assert trainer.reference is not None and row["kl_ref"] > 0


def test_dynamic_sampling_trains_on_varied_groups_only(tokenizer, dataset, monkeypatch):
    def often_flat(text, example):
        return float("1" in text)

    trainer = make_trainer(tokenizer, dataset, "dapo", reward=often_flat, group_size=2, prompts_per_step=3,
                           max_resample_rounds=6)
    trained_batches = []
    compute_advantages = trainer._advantages

    def recording(batch):
        trained_batches.append(trainer._sequence_rewards(batch))
        return compute_advantages(batch)

    monkeypatch.setattr(trainer, "_advantages", recording)
    history = trainer.train(4, progress=False)
    assert sum(history.column("frac_zero_adv_groups")) > 0, "the test reward should leave some groups flat"
    assert sum(history.column("extra_samples")) > 0
    for rewards in trained_batches:
        assert rewards.numel() % 2 == 0
        assert dynamic_sampling_mask(rewards, 2).all(), "a zero-variance group reached the update"


def test_dynamic_sampling_on_correctness_drops_groups_the_penalty_alone_varies(tokenizer, dataset, monkeypatch):
    def never_right(text, example):
        return 0.0

    # every answer is wrong, so every group is flat in correctness; the penalty on the last 6 of 8 tokens
    # still tells answers of different lengths apart, so a filter on the reward would keep those groups
    settings = dict(reward=never_right, group_size=3, prompts_per_step=2, overlong=(8, 6), max_resample_rounds=2)
    on_reward = make_trainer(tokenizer, dataset, "dapo", **settings).train(3, progress=False)
    assert sum(on_reward.column("frac_reward_only_groups")) > 0, "the penalty should vary some group"
    assert sum(on_reward.column("trained_samples")) > 0
    on_correct = make_trainer(tokenizer, dataset, "dapo", dynamic_sampling="correct", **settings)
    history = on_correct.train(3, progress=False)
    # the first round of the first step is the same sample in both runs (no update has happened yet)
    assert history.column("frac_reward_only_groups")[0] == on_reward.column("frac_reward_only_groups")[0]
    assert sum(history.column("trained_samples")) == 0 and all(0 <= f <= 1 for f in
                                                                history.column("frac_overlong_penalised"))
    with pytest.raises(ValueError, match="verifier"):
        OnlineTrainer(build_tiny_model(tokenizer, shape="test"), tokenizer, None,
                      tiny_config("dapo", dynamic_sampling="correct"), train_dataset=dataset,
                      reward_model=lambda prompts, completions: [0.0] * len(completions))


def test_same_seed_same_history(tokenizer, dataset):
    def run():
        rows = make_trainer(tokenizer, dataset, "dapo", epochs=2, minibatch_size=3, advantage_noise=0.1,
                            advantage_filter=1e-6).train(3, progress=False).rows
        return [{k: v for k, v in row.items() if k not in ("tokens_per_s", "step_time", "wall_time")} for row in rows]

    first, second = run(), run()
    assert first == second


def test_evaluate_reports_pass_at_k(tokenizer, dataset):
    trainer = make_trainer(tokenizer, dataset, "grpo")
    result = trainer.evaluate(dataset.select(range(3)), n_samples=4, max_new_tokens=6)
    assert 0 <= result["pass@1"] <= result["pass@4"] <= 1 and result["n_prompts"] == 3


def test_a_task_is_the_verifier_and_the_default_data(tokenizer):
    task = get_task("arithmetic", digits=1)
    model = build_tiny_model(tokenizer, shape="test")
    trainer = OnlineTrainer(model, tokenizer, task, tiny_config("rloo"), gold_reward=lambda text, example: 0.5)
    row = trainer.train(1, progress=False)[-1]
    assert row["pass@1"] == row["reward"] and row["gold_reward"] == 0.5


def test_history_is_tidy(tokenizer, dataset):
    history = make_trainer(tokenizer, dataset, "cispo").train(2, progress=False)
    frame = history.to_pandas()
    assert list(frame["step"]) == [1, 2] and "reward" in frame.columns
    assert set(history.postfix()) >= {"reward", "ent", "kl", "clip", "len"}


def test_bad_trainer_arguments_raise(tokenizer, dataset):
    model = build_tiny_model(tokenizer, shape="test")
    with pytest.raises(ValueError, match="config"):
        OnlineTrainer(model, tokenizer, parity_reward, {"group_size": 2}, train_dataset=dataset)
    with pytest.raises(ValueError, match="train_dataset"):
        OnlineTrainer(model, tokenizer, parity_reward, tiny_config("grpo"))
    with pytest.raises(ValueError, match="task_or_reward"):
        OnlineTrainer(model, tokenizer, None, tiny_config("grpo"), train_dataset=dataset)


def test_cli_train_writes_history_and_a_checkpoint(tokenizer, tmp_path, capsys):
    from rlbook.cli import main

    model_dir = tmp_path / "model"
    build_tiny_model(tokenizer, shape="test").save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "run"
    code = main(["train", "rloo", "--task", "arithmetic", "--task-set", "digits=1", "--steps", "2", "--out", str(out),
                 "--model", str(model_dir), "--set", "group_size=2", "--set", "prompts_per_step=2",
                 "--set", "max_new_tokens=6", "--eval-prompts", "2"])
    assert code == 0
    assert (out / "history.csv").is_file() and (out / "history.json").is_file()
    assert (out / "checkpoint" / "latest").is_file()
    assert '"held_out_after"' in capsys.readouterr().out


def test_a_reward_model_alone_can_give_the_reward(tokenizer, dataset):
    def reward_model(prompts=None, completions=None):
        assert len(prompts) == len(completions) and "<|im_start|>" in prompts[0]
        return [float(len(text) % 2) for text in completions]

    model = build_tiny_model(tokenizer, shape="test")
    trainer = OnlineTrainer(model, tokenizer, None, tiny_config("grpo"), train_dataset=dataset,
                            reward_model=reward_model)
    row = trainer.train(1, progress=False)[-1]
    assert 0 <= row["reward"] <= 1 and math.isnan(row["pass@1"])
    with pytest.raises(ValueError, match="verifier"):
        trainer.evaluate(dataset)


def test_the_ratio_is_one_on_policy_and_moves_with_more_epochs(tokenizer, dataset):
    on_policy = make_trainer(tokenizer, dataset, "grpo", prompts_per_step=6).train(1, progress=False)[-1]
    assert on_policy["ratio_min"] == pytest.approx(1.0, abs=1e-4)
    assert on_policy["ratio_max"] == pytest.approx(1.0, abs=1e-4)
    two_epochs = make_trainer(tokenizer, dataset, "grpo", prompts_per_step=6, epochs=2).train(1, progress=False)[-1]
    assert two_epochs["ratio_max"] - two_epochs["ratio_min"] > 1e-3 and two_epochs["approx_kl"] > 0


def test_a_step_with_no_signal_skips_the_update(tokenizer, dataset):
    trainer = make_trainer(tokenizer, dataset, "dapo", reward=lambda text, example: 0.0, max_resample_rounds=1)
    before = snapshot(trainer.policy)
    row = trainer.train(1, progress=False)[-1]
    assert row["trained_samples"] == 0 and row["frac_zero_adv_groups"] == 1.0 and row["extra_samples"] == 6
    assert not changed(before, trainer.policy)


def _rows(trainer, steps=2):
    rows = trainer.train(steps, progress=False).rows
    return [{k: v for k, v in row.items() if k not in ("tokens_per_s", "step_time", "wall_time")} for row in rows]


@pytest.mark.parametrize("name", ["grpo", "dr_grpo"])
def test_own_advantages_and_token_weights_equal_to_the_library_give_the_same_run(tokenizer, dataset, name):
    from rlbook.advantages import group_advantages
    from rlbook.aggregation import token_weights

    def own_advantages(rewards, group_size):
        return group_advantages(rewards, group_size, name)

    def own_weights(mask, mode, max_len):
        return token_weights(mask, mode, max_len=max_len)

    model = build_tiny_model(tokenizer, shape="test")
    own = OnlineTrainer(model, tokenizer, parity_reward, tiny_config(name), train_dataset=dataset,
                        advantage_fn=own_advantages, token_weights_fn=own_weights)
    assert _rows(own) == _rows(make_trainer(tokenizer, dataset, name))


def test_own_advantages_of_the_wrong_sign_change_the_run(tokenizer, dataset):
    from rlbook.advantages import group_advantages

    model = build_tiny_model(tokenizer, shape="test")
    flipped = OnlineTrainer(model, tokenizer, parity_reward, tiny_config("grpo"), train_dataset=dataset,
                            advantage_fn=lambda rewards, group_size: -group_advantages(rewards, group_size))
    assert _rows(flipped) != _rows(make_trainer(tokenizer, dataset, "grpo"))


def test_bad_hooks_name_themselves(tokenizer, dataset):
    model = build_tiny_model(tokenizer, shape="test")
    with pytest.raises(ValueError, match="advantage_fn must be None or a function"):
        OnlineTrainer(model, tokenizer, parity_reward, tiny_config("grpo"), train_dataset=dataset, advantage_fn=1)
    with pytest.raises(ValueError, match="token_weights_fn must be None or a function"):
        OnlineTrainer(model, tokenizer, parity_reward, tiny_config("grpo"), train_dataset=dataset,
                      token_weights_fn="token_mean")
    with pytest.raises(ValueError, match="cannot replace GAE"):
        OnlineTrainer(model, tokenizer, parity_reward, tiny_config("ppo"), train_dataset=dataset,
                      advantage_fn=lambda rewards, group_size: rewards)
    wrong_shape = OnlineTrainer(model, tokenizer, parity_reward, tiny_config("grpo"), train_dataset=dataset,
                                advantage_fn=lambda rewards, group_size: rewards.mean())
    with pytest.raises(ValueError, match="advantage_fn must return a tensor of the rewards' shape"):
        wrong_shape.train(1, progress=False)


def test_own_gae_and_critic_targets_equal_to_the_library_give_the_same_run(tokenizer, dataset):
    from rlbook.advantages import gae

    def own_gae(rewards, values, gamma, lam):  # one response, written out as the course's assignment 2 asks
        advantages, running = torch.zeros_like(rewards), 0.0
        for t in reversed(range(len(rewards))):
            next_value = values[t + 1] if t + 1 < len(rewards) else 0.0
            running = rewards[t] + gamma * next_value - values[t] + gamma * lam * running
            advantages[t] = running
        return advantages

    model = build_tiny_model(tokenizer, shape="test")
    own = OnlineTrainer(model, tokenizer, parity_reward, tiny_config("ppo"), train_dataset=dataset, gae_fn=own_gae,
                        critic_targets_fn=lambda advantages, values: advantages + values)
    library = make_trainer(tokenizer, dataset, "ppo")
    for a, b in zip(_rows(own), _rows(library)):
        assert a.keys() == b.keys()
        assert all(a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-5, nan_ok=True) for k in a), (a, b)
    wrong = OnlineTrainer(build_tiny_model(tokenizer, shape="test"), tokenizer, parity_reward, tiny_config("ppo"),
                          train_dataset=dataset, gae_fn=lambda r, v, g, l: -gae(r, v, g, l)[0])
    assert _rows(wrong) != _rows(make_trainer(tokenizer, dataset, "ppo"))
    with pytest.raises(ValueError, match="gae_fn needs config.advantage='gae'"):
        OnlineTrainer(model, tokenizer, parity_reward, tiny_config("grpo"), train_dataset=dataset, gae_fn=own_gae)


def test_scored_batch_select_and_concat_keep_rows_aligned(tokenizer):
    model = build_tiny_model(tokenizer, shape="test")
    rollouts = [sample(model, tokenizer, [prompt], num_samples=2, max_new_tokens=n, seed=0)
                for prompt, n in (("1+2=", 3), ("13+4=?", 6))]
    batches = [ScoredBatch(rollout=r, examples=[{"row": f"{k}{i}"} for i in range(2)], score=torch.tensor([k, k + 0.5]),
                           correct=torch.zeros(2), gold=None, ref_logp=r.logprobs.clone(), kl=None)
               for k, r in enumerate(rollouts)]
    joined = ScoredBatch.concat(batches, pad_id=tokenizer.pad_token_id)
    assert [e["row"] for e in joined.examples] == ["00", "01", "10", "11"]
    assert joined.score.tolist() == [0.0, 0.5, 1.0, 1.5] and joined.gold is None and joined.kl is None
    assert torch.equal(joined.ref_logp, joined.rollout.logprobs)  # per-token fields padded like the rollout's
    picked = joined.select(torch.tensor([3, 0]))
    assert [e["row"] for e in picked.examples] == ["11", "00"] and picked.score.tolist() == [1.5, 0.0]
    assert picked.rollout.texts == [joined.rollout.texts[3], joined.rollout.texts[0]]
    assert torch.equal(picked.ref_logp, joined.ref_logp[[3, 0]])
    with pytest.raises(ValueError, match="rows"):
        joined.select(torch.tensor([4]))


def test_overlong_filter_leaves_the_truncated_answers_out_of_the_update(tokenizer, dataset):
    # an untrained tiny model rarely ends within 4 tokens: most answers are truncated
    kept, truncated = [], []
    for flag in (False, True):
        trainer = make_trainer(tokenizer, dataset, "grpo", max_new_tokens=4, overlong_filter=flag)
        seen = []
        original = trainer._optimise
        trainer._optimise = lambda batch, rows, *rest: (seen.append((batch.rollout.truncated, rows)),
                                                        original(batch, rows, *rest))[1]
        trainer.train(2, progress=False)
        kept.append([len(rows) for _, rows in seen])
        truncated.append([(t[rows]).sum().item() for t, rows in seen])
    assert kept[0] == [6, 6] and sum(truncated[0]) > 0           # without the filter: every answer, truncated or not
    assert sum(truncated[1]) == 0 and all(k < 6 for k in kept[1])  # with it: no truncated answer is trained on
    with pytest.raises(ValueError, match="overlong_filter"):
        tiny_config("grpo", overlong_filter=1)
