"""Held-out pass@k (rlbook.evaluation, rlbook.metrics.mean_pass_at_k): one evaluator for trainers, zoo and lessons."""

from __future__ import annotations

import math

import pytest
import torch

from rlbook.evaluation import evaluate_pass_at_k, sample_and_verify
from rlbook.metrics import mean_pass_at_k, pass_at_k, pass_at_k_per_prompt
from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.rollout import sample
from rlbook.tasks import get_task


@pytest.fixture(scope="module")
def setup():
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, shape="test", seed=0)
    examples = get_task("arithmetic", digits=1).dataset(5, seed=0, split="test")
    return model, tokenizer, examples


def parity(text, example):
    """A verifier a random tiny model passes about half the time."""
    return float(len(text) % 2)


def test_mean_pass_at_k_averages_each_prompts_estimate():
    correct = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    for k in (1, 2, 4):
        expected = sum(pass_at_k(4, c, k) for c in (1, 2, 0)) / 3
        assert mean_pass_at_k(correct, k) == pytest.approx(expected)
        assert pass_at_k_per_prompt(correct, k) == pytest.approx([pass_at_k(4, c, k) for c in (1, 2, 0)])
    assert mean_pass_at_k(correct.bool(), 1) == pytest.approx(0.25)


@pytest.mark.parametrize("correct, name", [
    (torch.ones(4), "correct"),
    (torch.full((2, 2), 0.5), "correct"),
])
def test_mean_pass_at_k_rejects_tables_that_are_not_0_1(correct, name):
    with pytest.raises(ValueError, match=name):
        mean_pass_at_k(correct, 1)


def test_the_evaluator_is_sample_then_verify_then_pass_at_k(setup):
    model, tokenizer, examples = setup
    result = evaluate_pass_at_k(model, tokenizer, examples, parity, n_samples=4, ks=(1, 2, 4), max_new_tokens=6,
                                seed=3)
    rollout = sample(model, tokenizer, list(examples["prompt"]), num_samples=4, max_new_tokens=6, seed=3)
    counts = [sum(len(t) % 2 for t in rollout.texts[4 * i:4 * i + 4]) for i in range(5)]
    for k in (1, 2, 4):
        assert result[f"pass@{k}"] == pytest.approx(sum(pass_at_k(4, c, k) for c in counts) / 5)
    assert result["length_mean"] == pytest.approx(rollout.completion_lengths.float().mean().item())
    assert result["n_prompts"] == 5
    assert list(evaluate_pass_at_k(model, tokenizer, examples, parity, n_samples=4, max_new_tokens=6)) == [
        "pass@1", "pass@4", "length_mean", "n_prompts"]
    with_table = evaluate_pass_at_k(model, tokenizer, examples, parity, n_samples=4, ks=(1,), max_new_tokens=6,
                                    seed=3, return_correct=True)
    assert with_table["correct"] == [[len(t) % 2 for t in rollout.texts[4 * i:4 * i + 4]] for i in range(5)]


def test_rewards_come_back_per_prompt_as_the_verifier_gave_them(setup):
    model, tokenizer, examples = setup
    rollout, rewards = sample_and_verify(model, tokenizer, examples, lambda text, example: math.pi,
                                         n_samples=3, max_new_tokens=4)
    assert rewards.shape == (5, 3) and rewards.dtype == torch.float64 and bool((rewards == math.pi).all())
    assert len(rollout) == 15


@pytest.mark.parametrize("kwargs, name", [
    (dict(n_samples=0), "n_samples"),
    (dict(n_samples=2, ks=(4,)), "ks"),
    (dict(return_correct=1), "return_correct"),
])
def test_bad_arguments_name_themselves(setup, kwargs, name):
    model, tokenizer, examples = setup
    with pytest.raises(ValueError, match=name):
        evaluate_pass_at_k(model, tokenizer, examples, parity, **kwargs)


def test_no_examples_is_an_error(setup):
    model, tokenizer, _ = setup
    with pytest.raises(ValueError, match="examples"):
        sample_and_verify(model, tokenizer, [], parity)
