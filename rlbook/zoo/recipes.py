"""The zoo's recipes: how each shipped model is built, as data.

A recipe names a corpus (which task, how many chats, what fraction shows its working, how much
label noise) and a training budget. ``python -m rlbook.zoo build NAME`` turns a recipe into the
checkpoint shipped under ``rlbook/zoo/models/NAME`` together with its measured card.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Recipe:
    """Everything that determines a zoo model: corpus, shape, budget, seed and evaluation."""

    name: str
    summary: str
    task: str  # "arithmetic", "countdown" or "reviews"
    task_settings: dict = field(default_factory=dict)
    corpus_size: int = 20_000
    scratchpad_fraction: float = 0.3  # share of chats that show their working in <think>
    noise: float = 0.05  # share of chats whose final answer has one digit wrong on purpose
    direct_digit_noise: float = 0.0  # each digit of a direct (unworked) answer is a guess with this probability
    shape: str = "small"
    steps: int = 1000
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0
    eval_prompts: int = 200  # held-out prompts on the card
    eval_samples: int = 8  # samples per prompt: pass@1 and pass@8 come from these
    max_new_tokens: int = 64


RECIPES = {
    recipe.name: recipe
    for recipe in (
        Recipe(
            name="arith-base",
            summary="3-digit addition; answers directly (often wrongly) most of the time, sometimes "
                    "works it out in <think> (usually rightly); RL's headroom is to learn that the "
                    "scratchpad pays.",
            task="arithmetic",
            task_settings={"digits": 3},
            scratchpad_fraction=0.3,
            direct_digit_noise=0.35,
        ),
        Recipe(
            name="arith-tiny",
            summary="arith-base's corpus on a model about a seventh of its size: the student of lesson 20's "
                    "distillation (SFT on a bigger RL policy's outputs, against RL on it directly).",
            task="arithmetic",
            task_settings={"digits": 3},
            scratchpad_fraction=0.3,
            direct_digit_noise=0.35,
            shape="tiny",
        ),
        Recipe(
            name="countdown-base",
            summary="Countdown with 3 numbers: reach the target with + - * /, each number once.",
            task="countdown",
            task_settings={"n_numbers": 3},
            scratchpad_fraction=0.5,
        ),
        Recipe(
            name="review-base",
            summary="Short film reviews of any sentiment: the policy for the preference and "
                    "reward-model lessons, whose gold labeller is rlbook.tasks.reviews.gold_preference.",
            task="reviews",
            scratchpad_fraction=0.0,
            noise=0.0,
            steps=400,
            max_new_tokens=96,
        ),
    )
}
