"""Best-of-n sampling and rejection-sampling fine-tuning (iterated best-of-K, then SFT).

Best-of-n: draw n completions per prompt from π and keep the one with the highest reward. The
result is a new policy π_best-of-n that needs no training; its KL from π is at most
log n − (n − 1)/n (``rlbook.metrics.best_of_n_kl``; Stiennon et al. 2020, arXiv:2009.01325).

Rejection-sampling fine-tuning distils best-of-K back into the weights and repeats:

    for round in 1..R:   sample K completions for each of M fresh prompts
                         keep the best one per prompt (optionally only if its reward ≥ a threshold)
                         SFT the policy on the kept (prompt, completion) pairs

This is RAFT (Dong et al. 2023, "RAFT: Reward rAnked FineTuning", arXiv:2304.06767) and the
rejection-sampling stage of Llama 2 (Touvron et al. 2023, arXiv:2307.09288, §3.2.3). Held-out
pass@1 is measured before the first round and after each.

Rewards follow TRL's reward-function convention, ``reward_fn(prompts=..., completions=..., **columns)
-> list[float]``, with each dataset column repeated for every sample of its prompt: a task's
``reward_fn()`` or a ``RewardModel`` both fit. Simplified on purpose: top-1 per prompt (RAFT also
studies keeping a top fraction of the whole batch), a fixed sampling temperature, and SFT that
starts each round from the current policy (Llama 2 restarts from the base model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from rlbook._checks import as_float_tensor, check_int, check_positive
from rlbook.evaluation import sample_and_verify
from rlbook.metrics import best_of_n_kl, mean_pass_at_k
from rlbook.rollout import sample
from rlbook.trainers.history import History
from rlbook.trainers.sft import sft

__all__ = ["BestOfN", "best_of_n", "best_of_n_distribution", "best_of_n_exact_kl", "best_of_n_expectation",
           "expected_max_of_normals", "overoptimisation_curves", "rejection_sampling_finetune", "task_reward_fn"]


@dataclass
class BestOfN:
    """The result of ``best_of_n`` for P prompts and n samples each.

    ``best`` (P strings) and ``best_rewards`` (P,) are the winners; ``completions`` (P lists of n
    strings) and ``rewards`` (P, n) are every sample, so a lesson can plot E[max of n] against n.
    """

    prompts: list
    best: list[str]
    best_rewards: torch.Tensor
    completions: list[list[str]]
    rewards: torch.Tensor


def best_of_n(model, tokenizer, prompts, reward_fn, *, n: int, columns: dict | None = None,
              max_new_tokens: int = 64, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
              batch_size: int | None = None) -> BestOfN:
    """Sample ``n`` completions per prompt and keep the one ``reward_fn`` scores highest (first on ties).

    ``columns`` maps dataset column names to one value per prompt (e.g. the ``answer`` a task's
    verifier needs); they reach ``reward_fn`` repeated once per sample.
    """
    check_int("n", n, minimum=1)
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts is empty: best_of_n needs at least one prompt")
    rollout = sample(model, tokenizer, prompts, num_samples=n, max_new_tokens=max_new_tokens,
                     temperature=temperature, top_p=top_p, seed=seed, batch_size=batch_size)
    repeated = {name: [v for v in _per_prompt(name, values, len(prompts)) for _ in range(n)]
                for name, values in (columns or {}).items()}
    scores = reward_fn(prompts=[p for p in prompts for _ in range(n)], completions=rollout.texts, **repeated)
    rewards = torch.as_tensor([float(s) for s in scores], dtype=torch.float32).view(len(prompts), n)
    winners = rewards.argmax(dim=1)
    completions = [rollout.texts[i * n:(i + 1) * n] for i in range(len(prompts))]
    return BestOfN(prompts=prompts, best=[c[w] for c, w in zip(completions, winners.tolist())],
                   best_rewards=rewards.max(dim=1).values, completions=completions, rewards=rewards)


def best_of_n_expectation(scores, values, n: int) -> torch.Tensor:
    """E[value of the best-of-``n`` winner] per prompt, estimated without bias from N ≥ n samples each.

    ``scores`` (P, N) pick the winner, ``values`` (P, N) are what is averaged (the same scores, or
    a gold reward the selection never saw). Every n-subset of the N samples is an equally likely
    draw of n, and the sample with the k-th smallest score wins exactly C(k − 1, n − 1) of the
    C(N, n) subsets, so (the U-statistic of the order statistics)

        Ê_n[value] = Σ_k  C(k − 1, n − 1) / C(N, n) · value_(k)            (k = 1..N, by score)

    One pool of N samples thus gives the whole best-of-n curve, n = 1..N. Ties in ``scores`` are
    broken by position (stable sort), i.e. first sample wins, as in ``best_of_n``.
    """
    scores = as_float_tensor("scores", scores, ndim=(2,))
    values = as_float_tensor("values", values, ndim=(2,))
    if scores.shape != values.shape:
        raise ValueError(f"values must have the shape of scores {tuple(scores.shape)}, got {tuple(values.shape)}")
    num_samples = scores.shape[1]
    n = check_int("n", n, minimum=1)
    if n > num_samples:
        raise ValueError(f"n must be at most the number of samples per prompt ({num_samples}), got {n}")
    order = torch.sort(-scores.double(), dim=1, stable=True).indices.flip(1)  # ascending; first sample ranks highest
    total = math.comb(num_samples, n)
    weights = torch.tensor([math.comb(k - 1, n - 1) / total for k in range(1, num_samples + 1)], dtype=torch.float64)
    return (values.double().gather(1, order) * weights).sum(dim=1)


def overoptimisation_curves(proxy, gold, ns) -> dict[str, np.ndarray]:
    """Best-of-n curves from one pool: proxy and gold reward of the proxy's winner, and the gold reward of
    gold's own winner, for each n in ``ns``, averaged over prompts; with √KL = √(log n − (n − 1)/n).

    ``proxy`` and ``gold`` are (P, N) rewards of the same N samples of P prompts, each curve point a
    ``best_of_n_expectation``. Gold's own selection breaks its ties by position, like ``best_of_n``.
    Plotted against √KL, the gold curve of the proxy's pick rises and then falls (Gao et al. 2022,
    "Scaling laws for reward model over-optimization", arXiv:2210.10760).
    """
    proxy, gold = torch.as_tensor(proxy), torch.as_tensor(gold)
    curves = {"n": np.asarray(ns), "sqrt_kl": np.sqrt([best_of_n_kl(int(n)) for n in ns])}
    curves["proxy"] = np.array([best_of_n_expectation(proxy, proxy, int(n)).mean().item() for n in ns])
    curves["gold"] = np.array([best_of_n_expectation(proxy, gold, int(n)).mean().item() for n in ns])
    curves["gold_oracle"] = np.array([best_of_n_expectation(gold, gold, int(n)).mean().item() for n in ns])
    return curves


def best_of_n_distribution(probs, rewards, n: int) -> torch.Tensor:
    """The exact distribution of the best-of-``n`` winner over a finite set of outcomes.

    ``probs`` (V,) is π, ``rewards`` (V,) the reward of each outcome. With the cumulative
    F(r) = π(reward ≤ r), the winner's reward is ≤ r with probability F(r)^n; a reward level c with
    mass p_c therefore wins with probability F(c)^n − F(c⁻)^n, and since the first of the tied
    samples wins, the outcomes of a level share it in proportion to π (Beirami et al. 2024,
    arXiv:2401.01879, Lemma 1):

        π_n(y) = π(y) / p_c(y) · ( F(c(y))^n − F(c(y)⁻)^n )

    Without ties this is F(y)^n − (F(y) − π(y))^n ≈ n π(y) F(y)^(n−1) when π(y) is small.
    """
    probs = as_float_tensor("probs", probs, ndim=(1,)).double()
    rewards = as_float_tensor("rewards", rewards, ndim=(1,)).double()
    if probs.shape != rewards.shape:
        raise ValueError(f"rewards must have the shape of probs {tuple(probs.shape)}, got {tuple(rewards.shape)}")
    if (probs < 0).any() or abs(probs.sum().item() - 1.0) > 1e-6:
        raise ValueError("probs must be non-negative and sum to 1")
    n = check_int("n", n, minimum=1)
    levels, level_of = torch.unique(rewards, return_inverse=True)  # ascending reward levels
    level_mass = torch.zeros(len(levels), dtype=torch.float64).index_add_(0, level_of, probs)
    cdf = level_mass.cumsum(0).clamp(max=1.0)
    below = (cdf - level_mass).clamp(min=0.0)
    level_win = cdf ** n - below ** n
    share = torch.where(level_mass[level_of] > 0, probs / level_mass[level_of], torch.zeros_like(probs))
    return share * level_win[level_of]


def best_of_n_exact_kl(probs, rewards, n: int) -> float:
    """KL(π_n ‖ π) = Σ_y π_n(y) log(π_n(y) / π(y)) of ``best_of_n_distribution``, exactly.

    At most ``rlbook.metrics.best_of_n_kl(n)`` = log n − (n − 1)/n, with equality only in the limit
    of no ties and no outcome of sizeable probability (Beirami et al. 2024, Theorem 1)."""
    best = best_of_n_distribution(probs, rewards, n)
    base = as_float_tensor("probs", probs, ndim=(1,)).double()
    support = best > 0
    return (best[support] * (best[support] / base[support]).log()).sum().item()


def expected_max_of_normals(k: int, *, grid_points: int = 20_001) -> float:
    """E[max of ``k`` independent N(0, 1)], by quadrature of its density k φ(x) Φ(x)^(k−1).

    The integral ∫ x k φ(x) Φ(x)^(k−1) dx is taken with the trapezoid rule on [−10, 10] (the tails
    beyond hold less than 1e-20 of the mass for any k this book uses). Grows like √(2 log k),
    which bounds it from above (Jensen on E[exp(t · max)], then t = √(2 log k)).
    """
    k = check_int("k", k, minimum=1)
    x = torch.linspace(-10.0, 10.0, check_int("grid_points", grid_points, minimum=101), dtype=torch.float64)
    normal = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))
    log_density = math.log(k) + normal.log_prob(x) + (k - 1) * torch.special.log_ndtr(x)
    return torch.trapezoid(x * log_density.exp(), x).item()


def task_reward_fn(task):
    """A TRL-convention reward function from any task's ``reward(completion, example)``."""

    def reward_function(prompts=None, completions=None, **columns) -> list[float]:
        examples = [{name: values[i] for name, values in columns.items()} for i in range(len(completions))]
        return [task.reward(completion, example) for completion, example in zip(completions, examples)]

    return reward_function


def rejection_sampling_finetune(model, tokenizer, task, *, rounds: int = 3, n: int = 8, prompts_per_round: int = 64,
                                min_reward: float | None = None, sft_steps: int = 50, sft_lr: float = 1e-3,
                                sft_batch_size: int = 16, eval_prompts: int = 64, eval_samples: int = 4,
                                success_reward: float = 1.0, max_new_tokens: int = 64, temperature: float = 1.0,
                                seed: int = 0, progress: bool = True, live: bool | None = None) -> History:
    """Iterated best-of-``n`` → SFT for ``rounds`` rounds on fresh training prompts of ``task``.

    Keeps the best completion of each prompt (only those with reward ≥ ``min_reward`` when given)
    and fine-tunes ``model`` in place on them. Logs, for round 0 (before training) and each round,
    held-out pass@1 on ``eval_prompts`` test prompts (``eval_samples`` samples each; a sample passes
    when its reward ≥ ``success_reward``) and the mean held-out reward; for training rounds also
    the mean sampled and best-of-n rewards, how many pairs were kept, and the last SFT loss.
    ``live``: each round's SFT draws its loss live (``sft``'s ``live``).
    """
    check_int("rounds", rounds, minimum=1)
    check_int("prompts_per_round", prompts_per_round, minimum=1)
    check_int("eval_prompts", eval_prompts, minimum=1)
    check_int("eval_samples", eval_samples, minimum=1)
    check_positive("temperature", temperature)
    reward_fn = task_reward_fn(task)
    train = task.dataset(rounds * prompts_per_round, seed=seed, split="train")
    test = task.dataset(eval_prompts, seed=seed, split="test")
    sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature)
    history = History([{"round": 0, **_evaluate(model, tokenizer, test, task, eval_samples, success_reward,
                                                seed=seed, **sampling)}])
    for round_ in range(1, rounds + 1):
        batch = train.select(range((round_ - 1) * prompts_per_round, round_ * prompts_per_round))
        model.eval()
        result = best_of_n(model, tokenizer, list(batch["prompt"]), reward_fn, n=n, columns=_columns(batch),
                           seed=seed + round_, **sampling)
        kept = [(p, c) for p, c, r in zip(result.prompts, result.best, result.best_rewards.tolist())
                if min_reward is None or r >= min_reward]
        row = {"round": round_, "sample_reward": result.rewards.mean().item(),
               "best_of_n_reward": result.best_rewards.mean().item(), "kept": len(kept)}
        if kept:
            losses = sft(model, tokenizer, kept, steps=sft_steps, lr=sft_lr, batch_size=sft_batch_size,
                         seed=seed + round_, progress=progress, live=live)
            row["sft_loss"] = losses[-1]["loss"]
        row.update(_evaluate(model, tokenizer, test, task, eval_samples, success_reward, seed=seed, **sampling))
        history.append(row)
    model.eval()
    return history


def _evaluate(model, tokenizer, test, task, samples, success_reward, *, seed, **sampling) -> dict:
    """Held-out pass@1 (the unbiased estimator from ``samples`` draws per prompt) and mean reward."""
    model.eval()
    _, rewards = sample_and_verify(model, tokenizer, test, task.reward, n_samples=samples, seed=seed, **sampling)
    return {"eval/pass@1": mean_pass_at_k(rewards >= success_reward, 1), "eval/reward": rewards.mean().item()}


def _columns(dataset) -> dict:
    """Every column but ``prompt``, as lists (what TRL passes to a reward function)."""
    return {name: list(dataset[name]) for name in dataset.column_names if name != "prompt"}


def _per_prompt(name: str, values, n_prompts: int) -> list:
    values = list(values)
    if len(values) != n_prompts:
        raise ValueError(f"columns[{name!r}] must have one value per prompt ({n_prompts}), got {len(values)}")
    return values
