"""Reward shaping and batch filtering: what is done to rewards and advantages before the loss."""

from __future__ import annotations

import math

import torch

from rlbook._checks import as_float_tensor, check_group_size, check_int, check_positive

__all__ = [
    "soft_overlong_penalty",
    "combine_rewards",
    "dynamic_sampling_mask",
    "reward_only_groups",
    "dynamic_sampling_expected_samples",
    "advantage_filter_mask",
    "add_advantage_noise",
]


def soft_overlong_penalty(length, max_len: int, cache_len: int):
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv:2503.14476, "Soft Overlong Punishment").

    The reward added to a response of length |y|::

                  ⎧ 0                                   |y| ≤ L_max − L_cache
        R(y)  =   ⎨ ((L_max − L_cache) − |y|) / L_cache  L_max − L_cache < |y| ≤ L_max
                  ⎩ −1                                  L_max < |y|

    A response that enters the last ``cache_len`` tokens of the budget ``max_len`` is penalised
    linearly, from 0 to −1, instead of being cut off with no warning. ``length`` is an int (returns
    a float) or a tensor of lengths (returns a tensor of the same shape).
    """
    max_len = check_int("max_len", max_len, minimum=1)
    cache_len = check_int("cache_len", cache_len, minimum=0)
    if cache_len > max_len:
        raise ValueError(f"cache_len must be <= max_len={max_len}, got {cache_len}")
    is_number = isinstance(length, int) and not isinstance(length, bool)
    lengths = torch.as_tensor(length)
    if lengths.dtype == torch.bool or lengths.is_complex() or not torch.isfinite(lengths.float()).all():
        raise ValueError(f"length must be a finite number or tensor of numbers, got {length!r}")
    if (lengths < 0).any():
        raise ValueError("length must be non-negative")
    lengths = lengths.float()
    safe_zone = max_len - cache_len
    ramp = (safe_zone - lengths) / max(cache_len, 1)
    penalty = torch.where(lengths <= safe_zone, torch.zeros_like(lengths), ramp)
    penalty = torch.where(lengths > max_len, torch.full_like(lengths, -1.0), penalty)
    return penalty.item() if is_number else penalty


def combine_rewards(components: dict, weights: dict | None = None) -> torch.Tensor:
    """Weighted sum of named reward components: R = Σ_k w_k · R_k (all (B,); missing weights are 1).

    DeepSeek-R1 (Guo et al. 2025, arXiv:2501.12948) trains on an accuracy reward plus a format
    reward; ``combine_rewards({"correct": acc, "format": fmt}, {"format": 0.1})`` is that sum.
    """
    if not isinstance(components, dict) or not components:
        raise ValueError("components must be a non-empty dict of name -> (B,) reward tensor")
    weights = {} if weights is None else dict(weights)
    unknown = set(weights) - set(components)
    if unknown:
        raise ValueError(f"weights names {sorted(unknown)} that are not in components {sorted(components)}")
    total = None
    for name, values in components.items():
        values = as_float_tensor(f"components[{name!r}]", values, ndim=(1,))
        weight = weights.get(name, 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ValueError(f"weights[{name!r}] must be a number, got {type(weight).__name__}")
        if total is not None and values.shape != total.shape:
            raise ValueError(f"components[{name!r}] must have shape {tuple(total.shape)}, got {tuple(values.shape)}")
        total = weight * values if total is None else total + weight * values
    return total


def dynamic_sampling_mask(rewards, group_size: int) -> torch.Tensor:
    """DAPO's dynamic sampling filter: True for the samples of groups whose rewards are not all equal.

    DAPO (Yu et al. 2025, arXiv:2503.14476) constrains its objective to prompts with 0 < #correct < G: a group
    with all-equal rewards has zero group advantage and contributes no gradient, only noise in the
    batch size. Returns a (B,) bool mask (B = n_prompts × G, groups contiguous).
    """
    rewards = as_float_tensor("rewards", rewards, ndim=(1,))
    group_size = check_group_size("group_size", rewards.shape[0], group_size)
    groups = rewards.view(-1, group_size)
    varied = groups.max(dim=1).values != groups.min(dim=1).values
    return varied.repeat_interleave(group_size)


def reward_only_groups(rewards, correct, group_size: int) -> torch.Tensor:
    """True for the groups that a filter on ``rewards`` keeps and DAPO's filter on ``correct`` drops.

    DAPO's dynamic sampling (Yu et al. 2025, arXiv:2503.14476, eq. 11) keeps a group when
    0 < #correct < G. A filter on the total reward (correctness plus, say, the soft overlong
    penalty) also keeps a group whose answers are all right (or all wrong) but differ in the penalty;
    the group-normalised advantage (r − mean)/std then turns that length-only spread into unit-scale
    advantages. Returns a (n_groups,) bool tensor: the correctness of the group is all equal and its
    rewards are not. ``rewards`` and ``correct`` are (B,) with groups contiguous.
    """
    rewards = as_float_tensor("rewards", rewards, ndim=(1,))
    correct = as_float_tensor("correct", correct, ndim=(1,))
    if correct.shape != rewards.shape:
        raise ValueError(f"correct must have shape {tuple(rewards.shape)}, got {tuple(correct.shape)}")
    group_size = check_group_size("group_size", rewards.shape[0], group_size)
    varied_reward = dynamic_sampling_mask(rewards, group_size).view(-1, group_size)[:, 0]
    varied_correct = dynamic_sampling_mask(correct, group_size).view(-1, group_size)[:, 0]
    return varied_reward & ~varied_correct


def dynamic_sampling_expected_samples(flat_probability: float, *, prompts_per_step: int, group_size: int,
                                      max_resample_rounds: int) -> float:
    """Expected completions sampled per step by dynamic sampling as ``OnlineTrainer._collect`` does it.

    Each round draws ``prompts_per_step`` questions × ``group_size`` answers; each group is flat with
    probability ``flat_probability`` (e.g. ``rlbook.throughput.flat_group_probability``), independently.
    Rounds continue until ``prompts_per_step`` varied groups are kept or ``max_resample_rounds`` extra
    rounds are spent. Exact, by the distribution of the
    number of varied groups kept so far (capped at ``prompts_per_step``); DAPO's over-sampling (Yu et
    al. 2025, arXiv:2503.14476, §3.2) with i.i.d. groups.
    """
    flat = check_positive("flat_probability", flat_probability, allow_zero=True)
    if flat > 1:
        raise ValueError(f"flat_probability must lie in [0, 1], got {flat_probability!r}")
    wanted = check_int("prompts_per_step", prompts_per_step, minimum=1)
    group_size = check_int("group_size", group_size, minimum=1)
    extra_rounds = check_int("max_resample_rounds", max_resample_rounds, minimum=0)
    varied = 1.0 - flat
    # P(k varied groups in one round), k = 0..wanted
    one_round = [math.comb(wanted, k) * varied ** k * flat ** (wanted - k) for k in range(wanted + 1)]
    kept = [0.0] * (wanted + 1)  # distribution of the (capped) count kept after the rounds so far
    kept[0] = 1.0
    rounds = 0.0
    for _ in range(1 + extra_rounds):
        rounds += 1.0 - kept[wanted]  # a round is drawn unless the batch is already full
        after = [0.0] * (wanted + 1)
        after[wanted] += kept[wanted]
        for have in range(wanted):
            for k, prob in enumerate(one_round):
                after[min(wanted, have + k)] += kept[have] * prob
        kept = after
    return rounds * wanted * group_size


def advantage_filter_mask(advantages, *, tol: float = 1e-6) -> torch.Tensor:
    """True where |A| > ``tol``: samples whose (near-)zero advantage would add compute but no gradient.

    Skipping them in the backward pass saves time at no cost to the expected update (every term of
    the policy gradient is multiplied by A). Works for (B,) or (B, T) advantages.
    """
    advantages = as_float_tensor("advantages", advantages, ndim=(1, 2))
    tol = check_positive("tol", tol, allow_zero=True)
    return advantages.abs() > tol


def add_advantage_noise(advantages, std: float, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """A + σ · ε with ε ~ N(0, 1), drawn from ``generator`` so the same seed gives the same noise.

    Related to, but not the same as, ReDit (Wei et al. 2025, arXiv:2506.18631), which dithers the
    discrete *rewards* before the group baseline (``rlbook.advantages.dither_rewards``), so that the
    baseline centres the noise within each group and GRPO's σ rescales it; noise added here, after
    the baseline, is neither centred per group nor rescaled. Either way a flat group's completions
    get a random, mean-zero gradient. ``std = 0`` returns the advantages unchanged.
    """
    advantages = as_float_tensor("advantages", advantages, ndim=(1, 2))
    std = check_positive("std", std, allow_zero=True)
    noise = torch.randn(advantages.shape, generator=generator, dtype=advantages.dtype, device=advantages.device)
    return advantages + std * noise
