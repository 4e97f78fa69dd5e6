"""Measure a zoo model on held-out prompts: the numbers on its card.

For verifiable tasks: pass@1 and pass@k from ``eval_samples`` samples per held-out prompt (the
unbiased estimator of Chen et al. 2021), how often it shows its working, and its accuracy with and
without the scratchpad. For reviews: the mean gold reward and how often a review parses.
"""

from __future__ import annotations

import statistics

from rlbook.evaluation import sample_and_verify
from rlbook.metrics import mean_pass_at_k
from rlbook.tasks import get_task, is_well_formed
from rlbook.tasks.reviews import ReviewTask, parse_review
from rlbook.zoo.recipes import Recipe

EVAL_SEED = 1234


def _mean(values) -> float:
    values = list(values)
    return float(statistics.fmean(values)) if values else float("nan")


def evaluate(model, tokenizer, recipe: Recipe, *, prompts: int | None = None, seed: int = EVAL_SEED) -> dict:
    """Sample ``recipe.eval_samples`` completions for each held-out prompt and score them."""
    n_prompts = prompts or recipe.eval_prompts
    k = recipe.eval_samples
    task = ReviewTask() if recipe.task == "reviews" else get_task(recipe.task, **recipe.task_settings)
    data = task.dataset(n_prompts, seed=seed, split="test")
    rollout, rewards = sample_and_verify(model, tokenizer, data, task.reward, n_samples=k,
                                         max_new_tokens=recipe.max_new_tokens, temperature=1.0, seed=seed)
    texts = rollout.texts
    card = {"eval_prompts": n_prompts, "eval_samples": k, "temperature": 1.0,
            "truncated_rate": round(float(rollout.truncated.float().mean()), 4),
            "mean_completion_tokens": round(float(rollout.completion_mask.sum(1).float().mean()), 2)}
    if recipe.task == "reviews":
        golds = rewards.flatten().tolist()  # the review task's reward is the gold reward
        card.update(mean_gold_reward=round(_mean(golds), 4), gold_reward_std=round(statistics.pstdev(golds), 4),
                    parse_rate=round(_mean(parse_review(t) is not None for t in texts), 4))
        return card
    correct = rewards == 1.0
    scratch = ["<think>" in t for t in texts]
    per_sample = correct.flatten().tolist()
    card.update(
        pass_at_1=round(mean_pass_at_k(correct, 1), 4),
        **{f"pass_at_{k}": round(mean_pass_at_k(correct, k), 4)},
        scratchpad_rate=round(_mean(scratch), 4),
        accuracy_with_scratchpad=round(_mean(c for c, s in zip(per_sample, scratch) if s), 4),
        accuracy_without_scratchpad=round(_mean(c for c, s in zip(per_sample, scratch) if not s), 4),
        format_rate=round(_mean(is_well_formed(t) for t in texts), 4),
    )
    return card
