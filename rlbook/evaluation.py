"""Held-out evaluation of a policy: sample n completions per prompt, verify each, estimate pass@k.

What every "did it get better?" in the book measures: the trainers' ``evaluate``, the
rejection-sampling rounds, and the numbers on a zoo model's card. For P held-out prompts,

1. ``sample`` draws n completions of each (one seeded call, so the same seed gives the same samples);
2. the verifier scores each one, ``verifier(text, example) -> reward``; a sample is correct when
   its reward reaches ``success_reward`` (1 for the book's tasks, whose rewards are 0 or 1);
3. pass@k is Chen et al.'s unbiased estimator from the n samples of each prompt, averaged over the
   prompts (``rlbook.metrics.mean_pass_at_k``).
"""

from __future__ import annotations

import torch

from rlbook._checks import check_int
from rlbook.metrics import mean_pass_at_k
from rlbook.rollout import Rollout, sample

__all__ = ["evaluate_pass_at_k", "sample_and_verify"]


def sample_and_verify(model, tokenizer, examples, verifier, *, n_samples: int = 8, max_new_tokens: int = 64,
                      temperature: float = 1.0, seed: int = 0,
                      batch_size: int | None = None) -> tuple[Rollout, torch.Tensor]:
    """``n_samples`` completions for each of ``examples`` (rows with a ``prompt``), and their rewards.

    Returns the rollout (rows of a prompt contiguous) and the (P, n_samples) rewards
    ``verifier(text, example)``, in float64 (Python's floats, as the verifier returned them).
    """
    check_int("n_samples", n_samples, minimum=1)
    examples = [dict(row) for row in examples]
    if not examples:
        raise ValueError("examples must hold at least one row")
    rollout = sample(model, tokenizer, [e["prompt"] for e in examples], num_samples=n_samples,
                     max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, batch_size=batch_size)
    rewards = [float(verifier(text, examples[i // n_samples])) for i, text in enumerate(rollout.texts)]
    return rollout, torch.tensor(rewards, dtype=torch.float64).view(len(examples), n_samples)


def evaluate_pass_at_k(model, tokenizer, examples, verifier, *, n_samples: int = 8, ks=None,
                       max_new_tokens: int = 64, temperature: float = 1.0, seed: int = 0,
                       batch_size: int | None = None, success_reward: float = 1.0,
                       return_correct: bool = False) -> dict:
    """pass@k of ``model`` on the held-out ``examples``, from ``n_samples`` completions per prompt.

    Returns ``{"pass@k": ... for k in ks (default 1 and n_samples), "length_mean": mean completion
    length in tokens, "n_prompts": P}``; with ``return_correct``, also ``"correct"``: the (P, n) 0/1
    table as nested lists, what a standard error clustered by prompt needs
    (``rlbook.evidence.pass_at_k_with_se``).
    """
    if not isinstance(return_correct, bool):
        raise ValueError(f"return_correct must be a bool, got {return_correct!r}")
    check_int("n_samples", n_samples, minimum=1)
    ks = sorted({1, n_samples}) if ks is None else [check_int("ks", k, minimum=1) for k in ks]
    if any(k > n_samples for k in ks):
        raise ValueError(f"ks must be at most n_samples={n_samples}, got {ks}")
    rollout, rewards = sample_and_verify(model, tokenizer, examples, verifier, n_samples=n_samples,
                                         max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                                         batch_size=batch_size)
    correct = rewards >= success_reward
    result = {f"pass@{k}": mean_pass_at_k(correct, k) for k in ks}
    result["length_mean"] = rollout.completion_lengths.float().mean().item()
    result["n_prompts"] = rewards.shape[0]
    if return_correct:
        result["correct"] = correct.int().tolist()
    return result
