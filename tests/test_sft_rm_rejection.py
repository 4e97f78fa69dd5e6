"""SFT, the Bradley–Terry reward model, best-of-n and rejection-sampling fine-tuning, on tiny models."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset

from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.tasks.reviews import ReviewTask
from rlbook.trainers.rejection import best_of_n, rejection_sampling_finetune, task_reward_fn
from rlbook.trainers.reward_model import RewardModel, pairwise_accuracy, train_reward_model
from rlbook.trainers.sft import sft


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def _model(tokenizer, seed=0):
    return build_tiny_model(tokenizer, shape="test", seed=seed)


# ------------------------------------------------------------------------------ SFT


def test_sft_loss_falls_on_a_repeated_corpus(tokenizer):
    chats = [([{"role": "user", "content": "Review Dune."}], "the plot was great.")] * 8
    history = sft(_model(tokenizer), tokenizer, chats, steps=30, lr=1e-2, batch_size=4, progress=False)
    losses = history.column("loss")
    assert len(losses) == 30 and losses[-1] < 0.5 * losses[0]


def test_sft_takes_a_prompt_completion_dataset_and_refuses_bad_data(tokenizer):
    data = Dataset.from_dict({"prompt": ["Q: 1+1\nA: "], "completion": ["2"]})
    assert len(sft(_model(tokenizer), tokenizer, data, steps=2, progress=False)) == 2
    with pytest.raises(ValueError, match="completion"):
        sft(_model(tokenizer), tokenizer, data.remove_columns("completion"), steps=2, progress=False)
    with pytest.raises(ValueError, match="data is empty"):
        sft(_model(tokenizer), tokenizer, [], steps=2, progress=False)
    with pytest.raises(ValueError, match="steps"):
        sft(_model(tokenizer), tokenizer, data, steps=0, progress=False)


# ------------------------------------------------------------------------------ reward model


def _separable_pairs(n_films: int) -> Dataset:
    films = ["Dune", "Heat", "Jaws", "Up", "Elf", "Ran", "Big", "Cars"][:n_films]
    aspects = ["plot", "cast", "music", "ending"]
    rows = [(film, aspect) for film in films for aspect in aspects]
    return Dataset.from_dict({
        "prompt": [[{"role": "user", "content": f"Review {film}."}] for film, _ in rows],
        "chosen": [f"the {aspect} was great." for _, aspect in rows],
        "rejected": [f"the {aspect} was dull." for _, aspect in rows],
    })


def test_reward_model_learns_separable_pairs(tokenizer):
    reward_model = RewardModel.from_causal_lm(_model(tokenizer, seed=1), tokenizer, seed=1)
    pairs, held_out = _separable_pairs(6), _separable_pairs(8).select(range(24, 32))
    assert pairwise_accuracy(reward_model, pairs)["accuracy"] < 0.5  # this seed's head starts the wrong way round
    history = train_reward_model(reward_model, pairs, steps=40, batch_size=8, lr=3e-3, eval_pairs=held_out,
                                 eval_every=20, progress=False)
    assert history[-1]["eval/accuracy"] > 0.9
    assert pairwise_accuracy(reward_model, pairs)["accuracy"] > 0.9


def test_reward_model_copies_the_backbone_and_scores_in_batches(tokenizer):
    causal_lm = _model(tokenizer)
    reward_model = RewardModel.from_causal_lm(causal_lm, tokenizer)
    assert torch.equal(reward_model.model.model.embed_tokens.weight, causal_lm.model.embed_tokens.weight)
    prompts = [[{"role": "user", "content": "Review Up."}]] * 5
    completions = ["the plot was great.", "the plot was dull.", "x", "the cast was fun, the sets were odd.", ""]
    scores = reward_model.score(prompts, completions, batch_size=2)
    assert scores.shape == (5,) and scores.dtype == torch.float32
    assert torch.allclose(scores, reward_model.score(prompts, completions, batch_size=5), atol=1e-5)
    assert reward_model.score(["any text", "more"]).shape == (2,)
    assert reward_model(prompts=prompts, completions=completions, film=["Up"] * 5) == pytest.approx(scores.tolist())


def test_reward_model_refuses_bad_input(tokenizer):
    reward_model = RewardModel.from_causal_lm(_model(tokenizer), tokenizer)
    with pytest.raises(ValueError, match="completions"):
        reward_model.score(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="pairs"):
        train_reward_model(reward_model, _separable_pairs(1).remove_columns("chosen"), steps=1, progress=False)
    with pytest.raises(ValueError, match="lr"):
        train_reward_model(reward_model, _separable_pairs(1), steps=1, lr=-1.0, progress=False)


# ------------------------------------------------------------------------------ best-of-n and RAFT


def test_best_of_n_picks_the_argmax_reward(tokenizer):
    def length_reward(prompts=None, completions=None, **columns):
        assert columns["film"] == ["Dune"] * 4 + ["Heat"] * 4  # columns repeated per sample
        return [float(len(c)) for c in completions]

    prompts = [[{"role": "user", "content": f"Review {film}."}] for film in ("Dune", "Heat")]
    result = best_of_n(_model(tokenizer), tokenizer, prompts, length_reward, n=4, columns={"film": ["Dune", "Heat"]},
                       max_new_tokens=12, seed=1)
    assert result.rewards.shape == (2, 4) and len(result.completions) == 2
    for row, best, completions in zip(result.rewards, result.best, result.completions):
        assert best == completions[int(row.argmax())]
        assert len(best) == max(len(c) for c in completions)
    assert torch.equal(result.best_rewards, result.rewards.max(dim=1).values)
    with pytest.raises(ValueError, match="n must be"):
        best_of_n(_model(tokenizer), tokenizer, prompts, length_reward, n=0)


def test_task_reward_fn_reads_the_task(tokenizer):
    reward = task_reward_fn(ReviewTask())
    assert reward(prompts=["p", "p"], completions=["the plot was great.", "nonsense"], film=["Up", "Up"]) == [1.0, -3.0]


def test_rejection_sampling_finetune_runs_one_round(tokenizer):
    history = rejection_sampling_finetune(_model(tokenizer), tokenizer, ReviewTask(), rounds=1, n=2,
                                          prompts_per_round=4, sft_steps=2, eval_prompts=2, eval_samples=2,
                                          max_new_tokens=8, progress=False)
    assert [row["round"] for row in history] == [0, 1]
    assert {"eval/pass@1", "eval/reward", "best_of_n_reward", "kept", "sft_loss"} <= history[1].keys()
    assert history[1]["best_of_n_reward"] >= history[1]["sample_reward"]
    assert all(row["eval/pass@1_se"] >= 0 for row in history)  # clustered by prompt: 2 prompts × 2 samples
    with pytest.raises(ValueError, match="rounds"):
        rejection_sampling_finetune(_model(tokenizer), tokenizer, ReviewTask(), rounds=0)


def test_rejection_sampling_finetune_describes_the_kept_and_the_held_out_completions(tokenizer):
    seen = []

    def describe(completions):
        seen.append(list(completions))
        return {"count": len(completions), "has_e": sum("e" in c for c in completions) / len(completions)}

    history = rejection_sampling_finetune(_model(tokenizer), tokenizer, ReviewTask(), rounds=1, n=2,
                                          prompts_per_round=4, sft_steps=1, eval_prompts=3, eval_samples=2,
                                          max_new_tokens=8, progress=False, describe=describe)
    assert history[0]["eval/count"] == 6 and "kept/count" not in history[0]  # before training: held-out only
    assert history[1]["kept/count"] == history[1]["kept"] == 4  # no min_reward: every prompt's best is kept
    assert history[1]["eval/count"] == 6 and 0 <= history[1]["eval/has_e"] <= 1
    assert len(seen) == 3  # held-out before, kept, held-out after
    with pytest.raises(ValueError, match="describe"):
        rejection_sampling_finetune(_model(tokenizer), tokenizer, ReviewTask(), rounds=1, describe="scratchpad")
    with pytest.raises(ValueError, match="describe must return"):
        rejection_sampling_finetune(_model(tokenizer), tokenizer, ReviewTask(), rounds=1, n=2, prompts_per_round=2,
                                    sft_steps=1, eval_prompts=2, eval_samples=1, max_new_tokens=4, progress=False,
                                    describe=lambda completions: ["not", "a", "dict"])


def test_pass_at_1_standard_error_is_clustered_by_prompt(monkeypatch):
    from rlbook.evidence import clustered_se
    from rlbook.trainers import rejection

    # Every sample of a prompt scores the same: the 2 prompts, not the 8 samples, are the observations.
    rewards = torch.tensor([[1.0] * 4, [0.0] * 4])
    monkeypatch.setattr(rejection, "sample_and_verify", lambda *args, **kwargs: (None, rewards))
    model = torch.nn.Linear(1, 1)
    row = rejection._evaluate(model, None, [{"prompt": "a"}, {"prompt": "b"}], ReviewTask(), samples=4,
                              success_reward=1.0, describe=None, seed=0)
    assert row["eval/pass@1"] == 0.5
    assert row["eval/pass@1_se"] == pytest.approx(clustered_se([1] * 4 + [0] * 4, [0] * 4 + [1] * 4))
    assert row["eval/pass@1_se"] > clustered_se([1] * 4 + [0] * 4, range(8))  # wider than 8 independent samples


@pytest.mark.parametrize("restart", [False, True])
def test_rejection_sampling_finetune_restarts_each_round_from_the_starting_weights(tokenizer, monkeypatch, restart):
    from rlbook.trainers import rejection

    model = _model(tokenizer)
    start = {name: value.clone() for name, value in model.state_dict().items()}
    at_sft = []

    def fake_sft(model, tokenizer, kept, **settings):   # records the weights each round's SFT starts from, then moves them
        at_sft.append({name: value.clone() for name, value in model.state_dict().items()})
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.01)
        return [{"loss": 0.0}]

    monkeypatch.setattr(rejection, "sft", fake_sft)
    rejection_sampling_finetune(model, tokenizer, ReviewTask(), rounds=2, n=2, prompts_per_round=2, sft_steps=1,
                                eval_prompts=2, eval_samples=1, max_new_tokens=4, progress=False,
                                restart_from_base=restart)
    assert len(at_sft) == 2 and all(torch.equal(at_sft[0][k], start[k]) for k in start)
    same_as_start = all(torch.equal(at_sft[1][k], start[k]) for k in start)
    assert same_as_start == restart   # round 2 fits the starting weights only when restarting
    with pytest.raises(ValueError, match="restart_from_base"):
        rejection_sampling_finetune(model, tokenizer, ReviewTask(), rounds=1, restart_from_base="yes")


@pytest.mark.parametrize("keep, min_reward, expected", [
    ("best", None, [("p0", "b"), ("p1", "d")]),                           # each prompt's winner
    ("best", 1.0, [("p1", "d")]),                                         # ... if it is accepted
    ("all", None, [("p0", "a"), ("p0", "b"), ("p1", "c"), ("p1", "d")]),  # no rejection: every sample
    ("all", 0.5, [("p0", "b"), ("p1", "c"), ("p1", "d")]),                # every accepted sample (ReST-EM)
])
def test_rejection_sampling_finetune_keeps_the_winner_or_every_sample(tokenizer, monkeypatch, keep, min_reward, expected):
    from rlbook.trainers import rejection

    fitted = []

    def fake_best_of_n(model, tokenizer, prompts, reward_fn, *, n, **settings):   # two prompts, two samples, known rewards
        rewards = torch.tensor([[0.0, 0.5], [1.0, 2.0]])
        completions = [["a", "b"], ["c", "d"]]
        return rejection.BestOfN(prompts=["p0", "p1"], best=["b", "d"], best_rewards=rewards.max(dim=1).values,
                                 completions=completions, rewards=rewards)

    def fake_sft(model, tokenizer, kept, **settings):   # records what the round fits on
        fitted.append(list(kept))
        return [{"loss": 0.0}]

    monkeypatch.setattr(rejection, "best_of_n", fake_best_of_n)
    monkeypatch.setattr(rejection, "sft", fake_sft)
    history = rejection_sampling_finetune(_model(tokenizer), tokenizer, ReviewTask(), rounds=1, n=2, prompts_per_round=2,
                                          sft_steps=1, eval_prompts=2, eval_samples=1, max_new_tokens=4, progress=False,
                                          keep=keep, min_reward=min_reward)
    assert fitted == [expected] and history[1]["kept"] == len(expected)
    with pytest.raises(ValueError, match="keep must be"):
        rejection_sampling_finetune(_model(tokenizer), tokenizer, ReviewTask(), rounds=1, keep="top")


def test_sft_loss_is_the_loss_sft_logs_before_its_first_step(tokenizer):
    from rlbook.trainers.sft import sft_loss

    chats = [("Review Dune.", "the plot was great."), ("Review Up.", "bad."), ("Review Heat.", "the cast was fine.")]
    model = _model(tokenizer)
    model.train()
    before = sft_loss(model, tokenizer, chats)
    assert model.training   # left in the mode it was found in
    assert sft_loss(model, tokenizer, chats, batch_size=1) == pytest.approx(before, rel=1e-5)  # a token mean, not a mean of batches
    logged = sft(model, tokenizer, chats, steps=1, batch_size=len(chats), lr=1e-2, progress=False)[0]["loss"]
    assert logged == pytest.approx(before, rel=1e-4)
    assert sft_loss(model, tokenizer, chats) < before   # the step lowered it on its own batch
    with pytest.raises(ValueError, match="max_length"):
        sft_loss(model, tokenizer, chats, max_length=1)


def test_rejection_sampling_finetune_measures_the_model_every_round(tokenizer):
    calls = []

    def measure(model):
        calls.append(model)
        return {"calls": len(calls)}

    model = _model(tokenizer)
    history = rejection_sampling_finetune(model, tokenizer, ReviewTask(), rounds=2, n=2, prompts_per_round=2,
                                          sft_steps=1, eval_prompts=2, eval_samples=1, max_new_tokens=4,
                                          progress=False, measure=measure)
    assert [row["measure/calls"] for row in history] == [1.0, 2.0, 3.0]   # round 0, then after each round
    assert all(m is model for m in calls)
    with pytest.raises(ValueError, match="measure"):
        rejection_sampling_finetune(model, tokenizer, ReviewTask(), rounds=1, measure="held-out loss")
