"""The zoo: the build command works and is deterministic; every shipped card's numbers reproduce."""

import math

import pytest
import torch

from rlbook.models import load_model, zoo_names
from rlbook.zoo import RECIPES, build, read_card
from rlbook.zoo.evaluate import evaluate
from rlbook.zoo.recipes import Recipe

TINY = dict(steps=3, corpus_size=64, eval_prompts=3)


def test_every_recipe_is_shipped_with_a_card():
    assert set(zoo_names()) == set(RECIPES)
    for name in RECIPES:
        card = read_card(name)
        assert card["build_command"] == f"python -m rlbook.zoo build {name}"
        assert card["measured"], f"{name} ships without measured numbers"


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_build_command_rebuilds_at_a_tiny_budget(tmp_path, name):
    path = build(name, out_dir=tmp_path / name, progress=False, **TINY)
    card = read_card(path)
    assert card["recipe"]["steps"] == 3 and card["measured"]["eval_prompts"] == 3
    model, tokenizer = load_model(str(path))
    assert type(model).__name__ == "Qwen2ForCausalLM" and tokenizer.eos_token == "<|im_end|>"
    assert (path / "README.md").read_text().startswith(f"# {name}")


def test_build_is_deterministic(tmp_path):
    a = build("arith-base", out_dir=tmp_path / "a", progress=False, measure=False, **TINY)
    b = build("arith-base", out_dir=tmp_path / "b", progress=False, measure=False, **TINY)
    model_a, _ = load_model(str(a))
    model_b, _ = load_model(str(b))
    for pa, pb in zip(model_a.parameters(), model_b.parameters()):
        assert torch.equal(pa, pb)


def test_build_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="name"):
        build("no-such-model", out_dir=tmp_path)
    with pytest.raises(ValueError, match="steps"):
        build("arith-base", out_dir=tmp_path, steps=0)


def _tolerance(value: float, n: int) -> float:
    """Four binomial standard errors (and one point), the tolerance for a re-measured rate."""
    p = min(max(value, 0.05), 0.95)
    return 4 * math.sqrt(p * (1 - p) / n) + 0.01


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_card_numbers_reproduce(name):
    card = read_card(name)
    recipe = Recipe(**card["recipe"])
    model, tokenizer = load_model(name)
    fresh = evaluate(model, tokenizer, recipe)
    shipped = card["measured"]
    n_samples = shipped["eval_prompts"] * shipped["eval_samples"]
    for key, value in shipped.items():
        if key.startswith("pass_at_"):
            assert abs(fresh[key] - value) <= _tolerance(value, shipped["eval_prompts"]), (key, fresh[key], value)
        elif key.endswith("_rate") or key.startswith("accuracy_"):
            assert abs(fresh[key] - value) <= _tolerance(value, n_samples // 2), (key, fresh[key], value)
        elif key == "mean_gold_reward":
            spread = shipped["gold_reward_std"] / math.sqrt(n_samples)
            assert abs(fresh[key] - value) <= 4 * spread + 0.01, (key, fresh[key], value)


def test_arith_base_has_rl_headroom():
    """The design promise of the arithmetic base: pass@1 well below pass@8, scratchpad sometimes, and paying."""
    measured = read_card("arith-base")["measured"]
    assert 0.2 <= measured["pass_at_1"] <= 0.5
    assert measured["pass_at_8"] >= measured["pass_at_1"] + 0.25
    assert 0.05 <= measured["scratchpad_rate"] <= 0.6
    assert measured["accuracy_with_scratchpad"] >= measured["accuracy_without_scratchpad"] + 0.3


def test_countdown_base_has_nontrivial_pass_at_k():
    measured = read_card("countdown-base")["measured"]
    assert measured["pass_at_8"] >= 0.1 and measured["pass_at_8"] > measured["pass_at_1"]


def test_review_base_writes_reviews_of_mixed_quality():
    measured = read_card("review-base")["measured"]
    assert measured["parse_rate"] >= 0.7
    assert measured["gold_reward_std"] >= 0.5


def test_arith_tiny_is_a_smaller_student_with_headroom():
    """Lesson 20's distillation student: the same corpus as arith-base on a model a seventh of its size,
    with pass@1 below arith-base's and a scratchpad that pays."""
    tiny, base = read_card("arith-tiny"), read_card("arith-base")
    assert tiny["parameters"] * 5 < base["parameters"]
    assert {k: v for k, v in tiny["recipe"].items() if k not in ("name", "summary", "shape")} == \
        {k: v for k, v in base["recipe"].items() if k not in ("name", "summary", "shape")}
    measured = tiny["measured"]
    assert measured["pass_at_1"] < base["measured"]["pass_at_1"]
    assert measured["accuracy_with_scratchpad"] >= measured["accuracy_without_scratchpad"] + 0.3
