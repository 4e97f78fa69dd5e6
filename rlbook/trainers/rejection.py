"""Best-of-n sampling and rejection-sampling fine-tuning (iterated best-of-K, then SFT).

Best-of-n: draw n completions per prompt from π and keep the one with the highest reward. The
result is a new policy π_best-of-n that needs no training; its KL from π is at most
log n − (n − 1)/n (``rlbook.metrics.best_of_n_kl``; Stiennon et al. 2020, arXiv:2009.01325). Its exact
distribution and KL over a finite set of outcomes, and E[value of the winner] from a pool of samples, are
math (``rlbook.metrics``: ``best_of_n_distribution``, ``best_of_n_exact_kl``, ``best_of_n_expectation``).

Rejection-sampling fine-tuning distils best-of-K back into the weights and repeats:

    for round in 1..R:   sample K completions for each of M fresh prompts
                         keep the best one per prompt (optionally only if its reward ≥ a threshold)
                         SFT the policy on the kept (prompt, completion) pairs

This is RAFT (Dong et al. 2023, "RAFT: Reward rAnked FineTuning", arXiv:2304.06767) and the
rejection-sampling stage of Llama 2 (Touvron et al. 2023, arXiv:2307.09288, §3.2.3). Held-out
pass@1 is measured before the first round and after each, with its standard error clustered by
prompt (``rlbook.evidence.clustered_se``: the samples of one prompt are not independent).

Rewards follow TRL's reward-function convention, ``reward_fn(prompts=..., completions=..., **columns)
-> list[float]``, with each dataset column repeated for every sample of its prompt: a task's
``reward_fn()`` or a ``RewardModel`` both fit. Simplified on purpose: top-1 per prompt (RAFT also
studies keeping a top fraction of the whole batch), a fixed sampling temperature, and each round's
data alone (Llama 2, from its fourth round on, also pooled the best samples of all earlier rounds).
Each round samples from the current policy (Llama 2 samples "from the most recent model"); by default
its SFT then continues from that policy, and with ``restart_from_base=True`` it fine-tunes the
starting weights instead, as STaR (Zelikman et al. 2022, arXiv:2203.14465, Algorithm 1) and ReST-EM
(Singh et al. 2023, arXiv:2312.06585, §3) do, and as Llama 2's only statement on it reads (§3.2.3:
"always starting from the base model on each new RLHF version").
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from rlbook._checks import check_bool, check_int, check_positive
from rlbook.evaluation import sample_and_verify
from rlbook.evidence import clustered_se
from rlbook.metrics import mean_pass_at_k
from rlbook.rollout import sample
from rlbook.trainers.history import History
from rlbook.trainers.sft import sft

__all__ = ["BestOfN", "best_of_n", "rejection_sampling_finetune", "task_reward_fn"]


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
                                seed: int = 0, progress: bool = True, live: bool | None = None,
                                describe=None, restart_from_base: bool = False, measure=None,
                                keep: str = "best") -> History:
    """Iterated best-of-``n`` → SFT for ``rounds`` rounds on fresh training prompts of ``task``.

    Keeps the best completion of each prompt (only those with reward ≥ ``min_reward`` when given)
    and fine-tunes ``model`` in place on them. ``keep="all"`` keeps every one of the ``n`` samples
    instead (again only those with reward ≥ ``min_reward`` when given): with ``min_reward=None`` that is
    the control with no rejection at all, SFT on the policy's own samples; with a ``min_reward`` it keeps
    every accepted sample, as ReST-EM does (Singh et al. 2023, arXiv:2312.06585, §3; without its cap per problem). Logs, for round 0 (before training) and each round,
    held-out pass@1 on ``eval_prompts`` test prompts (``eval_samples`` samples each; a sample passes
    when its reward ≥ ``success_reward``), its standard error clustered by prompt
    (``eval/pass@1_se``) and the mean held-out reward; for training rounds also the mean sampled and
    best-of-n rewards, how many pairs were kept, and the last SFT loss.
    ``live``: each round's SFT draws its loss live (``sft``'s ``live``).
    ``describe``: optional ``describe(completions: list[str]) -> dict[str, float]``, measured on each
    round's kept completions (logged as ``kept/<name>``) and on the held-out samples (``eval/<name>``),
    e.g. the share of completions that use a scratchpad.
    ``restart_from_base``: each round samples from the current weights but fine-tunes ``model``'s
    weights as they were when called (STaR's and ReST-EM's restart); False (default) continues from
    the current weights.
    ``measure``: optional ``measure(model) -> dict[str, float]``, called on the model at round 0 and
    after each round's SFT, logged as ``measure/<name>`` (e.g. ``sft.sft_loss`` on held-out answers of
    the kind a round keeps, whose gap to ``sft_loss`` is the round's over-fitting).
    """
    check_int("rounds", rounds, minimum=1)
    check_int("prompts_per_round", prompts_per_round, minimum=1)
    check_int("eval_prompts", eval_prompts, minimum=1)
    check_int("eval_samples", eval_samples, minimum=1)
    check_positive("temperature", temperature)
    if describe is not None and not callable(describe):
        raise ValueError(f"describe must be None or a function of a list of completions, got {type(describe).__name__}")
    check_bool("restart_from_base", restart_from_base)
    if keep not in ("best", "all"):
        raise ValueError(f"keep must be 'best' (the winner of each prompt) or 'all' (every sample), got {keep!r}")
    if measure is not None and not callable(measure):
        raise ValueError(f"measure must be None or a function of the model, got {type(measure).__name__}")
    base_weights = copy.deepcopy(model.state_dict()) if restart_from_base else None
    reward_fn = task_reward_fn(task)
    train = task.dataset(rounds * prompts_per_round, seed=seed, split="train")
    test = task.dataset(eval_prompts, seed=seed, split="test")
    sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature)
    evaluate = dict(samples=eval_samples, success_reward=success_reward, describe=describe, seed=seed, **sampling)
    measured = (lambda: {}) if measure is None else (lambda: _described("measure", lambda _: measure(model), []))
    history = History([{"round": 0, **_evaluate(model, tokenizer, test, task, **evaluate), **measured()}])
    for round_ in range(1, rounds + 1):
        batch = train.select(range((round_ - 1) * prompts_per_round, round_ * prompts_per_round))
        model.eval()
        result = best_of_n(model, tokenizer, list(batch["prompt"]), reward_fn, n=n, columns=_columns(batch),
                           seed=seed + round_, **sampling)
        candidates = (zip(result.prompts, result.best, result.best_rewards.tolist()) if keep == "best" else
                      ((p, c, r) for p, texts, scores in zip(result.prompts, result.completions, result.rewards.tolist())
                       for c, r in zip(texts, scores)))
        kept = [(p, c) for p, c, r in candidates if min_reward is None or r >= min_reward]
        row = {"round": round_, "sample_reward": result.rewards.mean().item(),
               "best_of_n_reward": result.best_rewards.mean().item(), "kept": len(kept)}
        if kept and describe is not None:
            row.update(_described("kept", describe, [completion for _, completion in kept]))
        if kept:
            if base_weights is not None:
                model.load_state_dict(base_weights)   # sampled from the current policy; fit from the start
            losses = sft(model, tokenizer, kept, steps=sft_steps, lr=sft_lr, batch_size=sft_batch_size,
                         seed=seed + round_, progress=progress, live=live)
            row["sft_loss"] = losses[-1]["loss"]
        row.update(_evaluate(model, tokenizer, test, task, **evaluate))
        row.update(measured())
        history.append(row)
    model.eval()
    return history


def _evaluate(model, tokenizer, test, task, *, samples, success_reward, describe, seed, **sampling) -> dict:
    """Held-out pass@1 (the unbiased estimator from ``samples`` draws per prompt), its standard error
    clustered by prompt (NaN with one prompt), the mean reward, and ``describe`` of the samples."""
    model.eval()
    rollout, rewards = sample_and_verify(model, tokenizer, test, task.reward, n_samples=samples, seed=seed, **sampling)
    correct = rewards >= success_reward
    prompt_of = [prompt for prompt in range(len(test)) for _ in range(samples)]
    spread = clustered_se(correct.double().flatten().tolist(), prompt_of) if len(test) > 1 else float("nan")
    row = {"eval/pass@1": mean_pass_at_k(correct, 1), "eval/pass@1_se": spread, "eval/reward": rewards.mean().item()}
    return row if describe is None else {**row, **_described("eval", describe, rollout.texts)}


def _described(prefix: str, describe, completions: list[str]) -> dict:
    """``describe(completions)``, each name prefixed (``kept/scratchpad``); ValueError if not a dict of numbers."""
    measured = describe(list(completions))
    if not isinstance(measured, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                 for v in measured.values()):
        raise ValueError(f"describe must return a dict of name -> number, got {measured!r}")
    return {f"{prefix}/{name}": float(value) for name, value in measured.items()}


def _columns(dataset) -> dict:
    """Every column but ``prompt``, as lists (what TRL passes to a reward function)."""
    return {name: list(dataset[name]) for name in dataset.column_names if name != "prompt"}


def _per_prompt(name: str, values, n_prompts: int) -> list:
    values = list(values)
    if len(values) != n_prompts:
        raise ValueError(f"columns[{name!r}] must have one value per prompt ({n_prompts}), got {len(values)}")
    return values
