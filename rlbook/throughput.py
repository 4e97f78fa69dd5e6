"""What the advantage filter saves (lesson 14): how often a group carries no gradient, what skipping
it changes in the update, and what it saves in work and in wall time.

A group whose G rewards are all equal has all-zero advantages (``rlbook.advantages``), so its
completions add nothing to the policy gradient but their share of the loss's divisor.
``flat_group_probability`` gives how often that happens for binary rewards, i.i.d. or with the
pass rate spread across prompts (a beta-binomial), and ``between_prompt_share`` estimates that
spread from a batch; ``sample_probe_batch`` draws a batch to look inside; ``update_gradient`` is the
gradient of the Dr.GRPO loss (Liu et al. 2025, arXiv:2503.20783) over chosen rows, so the update
with and without the flat groups can be compared; ``update_seconds`` and ``sampling_seconds``
measure the CPU time of the update's forward and backward pass (the work the filter saves) and of
the sampling (the work it cannot save); and ``equal_time_table`` reads an ablation's runs at equal
wall time. ``rlbook.viz.throughput`` draws them.

``filter_sweep`` widens the filter from exactly-zero advantages to |A| ≤ tol and measures, for each
tol, what share of the batch it drops, what that saves in update work, and how far the filtered
gradient turns away from the full one on that batch (its bias); ``dropped_share`` gives the share
dropped from the count of right answers in each group alone. ``flip_rewards`` is a noisy verifier
to repeat the sweep under, and ``mislabelled_kept`` draws its flips many times over (no gradients
needed) to measure what share of the completions each filter keeps are mislabelled.
``expected_cosine`` compares the *expected* filtered and full gradients over many batches (a bias,
unlike one batch's turn), ``gradient_snr`` says how much of one batch's gradient is signal (and so
how a batch's turn shrinks as batches are averaged, ``noise_turn_factor``), ``flat_parameters``
lays a model's weights out as one vector to compare two runs' end points, and ``sampled_divisor_weights`` is the control that makes a filtered run
the unfiltered one step for step: the loss keeps dividing by the completions sampled.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from rlbook._checks import as_float_tensor, check_int, check_positive
from rlbook.evidence import jackknife_se
from rlbook.losses import policy_loss
from rlbook.rollout import rollout_logprobs, sample

__all__ = ["between_prompt_share", "dropped_share", "equal_time_table", "expected_cosine", "filter_sweep",
           "flat_group_probability", "flat_parameters", "flip_rewards", "gradient_snr", "mislabelled_kept",
           "noise_turn_factor", "sample_probe_batch", "sampled_divisor_weights",
           "sampling_seconds", "update_gradient", "update_seconds"]


def flat_group_probability(pass_rate, group_size: int, *, between_prompt_share: float = 0.0):
    """P(a group's G binary rewards are all equal), for a batch whose mean pass rate is ``pass_rate``.

    With ``between_prompt_share`` ρ = 0 every completion is right with probability p, independently:
    P(flat) = p^G + (1 − p)^G. In a real batch the pass rate differs from prompt to prompt; model it
    as p_prompt ~ Beta(a, b) with mean a / (a + b) = ``pass_rate`` and ρ = 1 / (a + b + 1), the share
    of a reward's variance that lies between prompts (Var p_prompt = ρ p (1 − p)). A group is then
    beta-binomial (Skellam, J. R. Stat. Soc. B 10, 1948) and
    P(flat) = E[p^G] + E[(1 − p)^G],  E[p^G] = Π_{j=0}^{G−1} (a + j) / (a + b + j).
    ρ = 1 puts every prompt at 0 or 1: every group is flat. Since p^G + (1 − p)^G is convex, any
    spread (ρ > 0) makes flat groups more common than the i.i.d. formula at the same mean.
    """
    group_size = check_int("group_size", group_size, minimum=1)
    share = check_positive("between_prompt_share", between_prompt_share, allow_zero=True)
    if share > 1:
        raise ValueError(f"between_prompt_share must lie in [0, 1], got {share}")
    p = np.asarray(pass_rate, dtype=float)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("pass_rate must lie in [0, 1]")
    if share == 0:
        value = p ** group_size + (1 - p) ** group_size
    elif share == 1:
        value = np.ones_like(p)
    else:
        concentration = 1 / share - 1  # a + b
        a, b = p * concentration, (1 - p) * concentration
        j = np.arange(group_size).reshape((-1,) + (1,) * p.ndim)
        value = np.prod((a + j) / (concentration + j), axis=0) + np.prod((b + j) / (concentration + j), axis=0)
    return float(value) if value.ndim == 0 else value


def between_prompt_share(correct) -> float:
    """ρ̂, the share of a 0/1 reward's variance that lies between prompts, from a (P, n) table.

    ``correct``: P prompts (rows) × n ≥ 2 completions each, 0 or 1. The moment estimate of the
    beta-binomial's ρ (see ``flat_group_probability``): the per-prompt pass rates p̂_i = k_i / n have
    Var p̂_i = p (1 − p) (ρ + (1 − ρ) / n), so ρ̂ = (s² / (p̂ (1 − p̂)) − 1/n) / (1 − 1/n), with s²
    the (population) variance of the p̂_i and p̂ their mean, clipped to [0, 1]. NaN when every
    completion got the same reward (no variance to split).
    """
    table = torch.as_tensor(correct, dtype=torch.float64)
    if table.dim() != 2 or table.shape[0] < 2 or table.shape[1] < 2:
        raise ValueError(f"correct must be a (prompts, samples) table with at least 2 of each, got shape "
                         f"{tuple(table.shape)}")
    if not bool(((table == 0) | (table == 1)).all()):
        raise ValueError("correct must hold only 0 and 1")
    n = table.shape[1]
    per_prompt = table.mean(dim=1)
    mean = per_prompt.mean().item()
    if mean in (0.0, 1.0):
        return math.nan
    ratio = per_prompt.var(correction=0).item() / (mean * (1 - mean))
    return float(min(1.0, max(0.0, (ratio - 1 / n) / (1 - 1 / n))))


def dropped_share(right_counts, group_size: int, tol: float) -> float:
    """The share of a batch's completions the filter |A| ≤ tol drops, from each group's count of right answers.

    For 0/1 rewards and Dr.GRPO's advantages A_i = r_i − mean (``group_advantages(..., "dr_grpo")``),
    a group of G with k right answers gives its G − k wrong ones |A| = k/G and its k right ones
    |A| = (G − k)/G, so it loses (G − k)·[k/G ≤ tol] + k·[(G − k)/G ≤ tol] completions; a flat group
    (k = 0 or G) loses all G. Nothing but the histogram of k enters.
    """
    group_size = check_int("group_size", group_size, minimum=1)
    tol = check_positive("tol", tol, allow_zero=True)
    counts = np.asarray(right_counts)
    if counts.ndim != 1 or counts.size == 0 or not np.issubdtype(counts.dtype, np.integer):
        raise ValueError("right_counts must be a non-empty 1-D array of ints, one per group")
    if np.any((counts < 0) | (counts > group_size)):
        raise ValueError(f"right_counts must lie in [0, group_size={group_size}]")
    bar = tol * group_size + 1e-9  # |A| ≤ tol  ⇔  count of the other kind ≤ tol · G
    dropped = (group_size - counts) * (counts <= bar) + counts * ((group_size - counts) <= bar)
    return float(dropped.sum() / (counts.size * group_size))


def update_gradient(model, rollout, advantages, rows, *, max_len: int) -> torch.Tensor:
    """The gradient (one flat vector) of the Dr.GRPO loss of ``rollout``'s completions ``rows``.

    The loss is ``policy_loss(variant="dr_grpo")`` at the start of an update (π_θ = π_old, so the
    ratio is 1 and no clip acts): −Σ_i Σ_t A_i log π_θ(y_i,t) / (|rows| · L), L = ``max_len``.
    Its gradient is Σ_i A_i ∇log π_θ(y_i) / (|rows| · L): a completion with A_i = 0 adds nothing but
    its count to the divisor. ``advantages`` is (B,), one per completion; ``rows`` a (K,) index tensor.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad(set_to_none=True)
    _update_loss(model, rollout, advantages, rows, max_len).backward()
    gradient = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params])
    model.zero_grad(set_to_none=True)
    return gradient.detach().clone()


def update_seconds(model, rollout, advantages, row_sets: dict, *, max_len: int, repeats: int = 3) -> dict:
    """CPU seconds of one forward + backward pass of the Dr.GRPO loss over each set of rows (label → rows).

    The passes run on one thread and are timed with that thread's CPU clock (``time.thread_time``),
    so the result is the work itself: on a shared machine wall-clock time also counts the time spent
    waiting for a processor, which depends on everything else running. The sets are timed in turn,
    ``repeats`` rounds, and each keeps its fastest round. The thread count is restored afterwards.
    """
    repeats = check_int("repeats", repeats, minimum=1)
    best = {label: float("inf") for label in row_sets}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(repeats):
            for label, rows in row_sets.items():
                start = time.thread_time()
                _update_loss(model, rollout, advantages, rows, max_len).backward()
                best[label] = min(best[label], time.thread_time() - start)
                model.zero_grad(set_to_none=True)
    finally:
        torch.set_num_threads(threads)
    return best


def sample_probe_batch(model, tokenizer, task, n_prompts: int, *, group_size: int, max_new_tokens: int, seed: int):
    """A batch to look inside: ``n_prompts`` training prompts of ``task`` (drawn with ``seed``), ``group_size``
    completions of each sampled from ``model`` (with ``seed``), and their (B,) rewards.

    Returns ``(rollout, rewards)``; the completions of a prompt are contiguous, as in training.
    """
    n_prompts = check_int("n_prompts", n_prompts, minimum=1)
    prompts = task.dataset(n_prompts, seed=seed, split="train")
    rollout = sample(model, tokenizer, list(prompts["prompt"]), num_samples=group_size,
                     max_new_tokens=max_new_tokens, seed=seed)
    rewards = torch.tensor([float(task.reward(text, prompts[i // group_size])) for i, text in enumerate(rollout.texts)])
    return rollout, rewards


def sampling_seconds(model, tokenizer, prompts, *, num_samples: int, max_new_tokens: int, seed: int = 0,
                     repeats: int = 2) -> float:
    """CPU seconds of sampling ``num_samples`` completions of each of ``prompts``: the phase the filter cannot skip.

    Timed as ``update_seconds`` times the update (one thread, its CPU clock, the fastest of
    ``repeats`` rounds), so the two phases of a step can be compared: with sampling S and update U
    seconds, a filter that leaves a share r of the update's time saves at most U (1 − r) / (S + U)
    of a step (Amdahl's law, Amdahl 1967).
    """
    repeats = check_int("repeats", repeats, minimum=1)
    best = float("inf")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(repeats):
            start = time.thread_time()
            sample(model, tokenizer, list(prompts), num_samples=num_samples, max_new_tokens=max_new_tokens, seed=seed)
            best = min(best, time.thread_time() - start)
    finally:
        torch.set_num_threads(threads)
    return best


def mislabelled_kept(rewards, group_size: int, fraction: float, tols, *, draws: int, seed: int = 0):
    """What share of the completions each filter keeps are mislabelled, over ``draws`` draws of a noisy verifier.

    ``rewards``: the (B,) correct 0/1 rewards of a batch in groups of ``group_size``. Each draw flips
    every reward independently with probability ``fraction`` (as ``flip_rewards``), takes the Dr.GRPO
    advantages of the flipped rewards (r̃_i − group mean, ``group_advantages(..., "dr_grpo")``) and,
    for each tol in ``tols``, keeps the completions with |A| > tol (``advantage_filter_mask``). No
    gradient is needed, so thousands of draws cost little. Returns a ``pandas.DataFrame`` with one row
    per (draw, tol): ``flipped`` (the share of the batch mislabelled), ``kept`` (completions kept) and
    ``mislabelled_kept`` (the share of the kept ones that are mislabelled; NaN when none is kept).
    """
    import pandas as pd

    rewards = as_float_tensor("rewards", rewards, ndim=(1,)).double()
    group_size = check_int("group_size", group_size, minimum=1)
    if rewards.numel() % group_size:
        raise ValueError(f"rewards must hold whole groups of group_size={group_size}, got {rewards.numel()}")
    if not bool(((rewards == 0) | (rewards == 1)).all()):
        raise ValueError("rewards must be binary (each 0 or 1)")
    fraction = check_positive("fraction", fraction, allow_zero=True)
    if fraction > 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    tols = [check_positive("tols", tol, allow_zero=True) for tol in tols]
    if not tols:
        raise ValueError("tols must hold at least one tolerance")
    draws = check_int("draws", draws, minimum=1)
    generator = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    flips = torch.rand((draws, rewards.numel()), generator=generator, dtype=torch.float64) < fraction
    noisy = torch.where(flips, 1 - rewards, rewards).view(draws, -1, group_size)
    advantages = (noisy - noisy.mean(dim=2, keepdim=True)).view(draws, -1)
    frames = []
    for tol in tols:
        keep = advantages.abs() > tol
        kept = keep.sum(dim=1)
        share = (flips & keep).sum(dim=1) / kept.clamp(min=1)
        frames.append(pd.DataFrame({"draw": np.arange(draws), "tol": tol, "flipped": flips.double().mean(dim=1).numpy(),
                                    "kept": kept.numpy(),
                                    "mislabelled_kept": torch.where(kept > 0, share, math.nan).numpy()}))
    return pd.concat(frames, ignore_index=True)


def flip_rewards(rewards, fraction: float, *, generator: torch.Generator | None = None,
                 exact: bool = False) -> torch.Tensor:
    """A noisy verifier: each binary reward r ∈ {0, 1} flipped to 1 − r independently with probability ``fraction``.

    The symmetric label noise of a verifier that errs on ``fraction`` of its answers, both ways.
    Flips turn flat groups into varied ones (an all-wrong group with one false positive) and so
    change which completions any advantage filter keeps. The same ``generator`` seed gives the same flips.
    ``exact=True`` flips exactly round(``fraction`` · B) rewards, chosen uniformly at random, so that
    one draw's realised share is the stated one (independent flips of 128 rewards at 10 % realise
    anything from about 5 % to 15 %).
    """
    rewards = as_float_tensor("rewards", rewards, ndim=(1,))
    if not bool(((rewards == 0) | (rewards == 1)).all()):
        raise ValueError("rewards must be binary (each 0 or 1)")
    fraction = check_positive("fraction", fraction, allow_zero=True)
    if fraction > 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    if exact:
        flips = torch.zeros(rewards.shape, dtype=torch.bool)
        flips[torch.randperm(rewards.numel(), generator=generator)[:round(fraction * rewards.numel())]] = True
    else:
        flips = torch.rand(rewards.shape, generator=generator, dtype=torch.float64) < fraction
    return torch.where(flips.to(rewards.device), 1 - rewards, rewards)


def expected_cosine(filtered, full, *, minus_per_batch: bool = False) -> tuple[float, float]:
    """cos(E g_tol, E g) from per-batch gradients, and its standard error by delete-one-batch jackknife.

    ``filtered`` and ``full``: n ≥ 3 gradient vectors each, one pair per independent batch (e.g.
    ``update_gradient`` over a filter's kept rows and over all rows). One batch's cosine
    cos(g_tol, g) mixes two things: the filter's *bias* (E g_tol not parallel to E g), which every
    step repeats, and noise (the dropped rows' share of this batch's sampling noise), which
    averages out over steps. The cosine of the *expected* gradients keeps only the first. Averaging
    the vectors first does not give it: g_tol and g of one batch share that batch's noise, which
    pulls the cosine of the means towards one batch's own cosine for small n. So each inner product is estimated from
    *different* batches only, E g_tol · E g ≈ mean_{a≠b} g_tol,a · g_b (unbiased, the batches being
    independent), and likewise |E g_tol|² and |E g|²: a ratio of U-statistics (Hoeffding 1948),
    consistent, and able to come out a little above 1 when the noise is large. The SE is the
    jackknife's over batches (Efron & Stein 1981), i.e. clustered by batch.
    With ``minus_per_batch`` the estimate is cos(E g_tol, E g) *minus* the mean over batches of one
    batch's own cos(g_tol, g), both recomputed in every leave-one-out replicate, so the SE carries the
    comparator's sampling error and its correlation with the estimate (a test of "the bias turns the
    gradient less than one batch's sampling does": difference > 0).
    Returns ``(estimate, se)``.
    """
    if len(filtered) != len(full) or len(full) < 3:
        raise ValueError(f"filtered and full must hold the same number (at least 3) of gradients, "
                         f"got {len(filtered)} and {len(full)}")
    x = torch.stack([torch.as_tensor(v).double().flatten() for v in filtered])
    y = torch.stack([torch.as_tensor(v).double().flatten() for v in full])
    if x.shape != y.shape or not bool(torch.isfinite(x).all() and torch.isfinite(y).all()):
        raise ValueError("filtered and full must be finite vectors, all of one length")
    grams = (x @ x.T, x @ y.T, y @ y.T)
    per_batch = grams[1].diagonal() / (grams[0].diagonal() * grams[2].diagonal()).sqrt()  # one batch's own cosine

    def estimate(keep) -> float:
        def cross(gram):
            sub = gram[keep][:, keep]
            return (sub.sum() - sub.diagonal().sum()).item()  # the common 1/(n(n−1)) cancels in the ratio
        xx, xy, yy = (cross(gram) for gram in grams)
        if xx <= 0 or yy <= 0:
            return math.nan
        value = xy / math.sqrt(xx * yy)
        return value - per_batch[keep].mean().item() if minus_per_batch else value

    n = len(full)
    everything = torch.arange(n)
    value = estimate(everything)
    leave_one_out = np.array([estimate(everything[everything != i]) for i in range(n)])
    se = jackknife_se(leave_one_out)
    return value, se


def gradient_snr(gradients) -> tuple[float, float]:
    """The share of a batch gradient's squared norm that is signal, |E g|² / E|g|², and its jackknife SE.

    ``gradients``: n ≥ 3 gradient vectors of independent batches of one size B. A batch gradient is
    g = E g + ε with E|ε|² = tr Σ / B (Σ: one completion's gradient covariance), so
    E|g|² = |E g|² + tr Σ / B. E|g|² is estimated by the mean of |g_a|², and |E g|² without the noise
    by the mean over pairs of *different* batches of g_a · g_b (unbiased, as in ``expected_cosine``).
    The ratio s is 1 / (1 + B_simple / B), with B_simple = tr Σ / |E g|² the "simple noise scale" of
    McCandlish et al. 2018 (arXiv:1812.06162, §2.2, B_simple = tr Σ / |G|², and their estimate from
    E|G_B|² = |G|² + tr Σ / B, Appendix A): while B ≪ B_simple, i.e. s ≪ 1,
    a batch's gradient is mostly its own noise; B_simple = B (1/s − 1). The SE is the delete-one-batch
    jackknife's (Efron & Stein 1981), i.e. clustered by batch. Returns ``(s, se)``; s can come out a
    little below 0 when the signal is small next to the noise.
    """
    if len(gradients) < 3:
        raise ValueError(f"gradients must hold at least 3 vectors, one per independent batch, got {len(gradients)}")
    g = torch.stack([torch.as_tensor(v).double().flatten() for v in gradients])
    if not bool(torch.isfinite(g).all()):
        raise ValueError("gradients must be finite vectors, all of one length")
    gram = g @ g.T

    def estimate(keep) -> float:
        sub = gram[keep][:, keep]
        n = len(keep)
        signal = (sub.sum() - sub.diagonal().sum()).item() / (n * (n - 1))  # mean over a ≠ b of g_a · g_b
        return signal / sub.diagonal().mean().item()

    n = len(gradients)
    everything = torch.arange(n)
    leave_one_out = np.array([estimate(everything[everything != i]) for i in range(n)])
    return estimate(everything), jackknife_se(leave_one_out)


def noise_turn_factor(snr: float, batches: int) -> float:
    """How much averaging ``batches`` independent batch gradients shrinks a turn made by their noise.

    A filter's turn on one batch, the angle between g_tol and g, is about |Δ⊥| / |g|, Δ the part the
    dropped rows' noise adds. Averaging n batches divides |Δ|² by n, and |g|² = |E g|² + tr Σ / B by
    1 + (n − 1) s (s = ``gradient_snr``): the noise part shrinks n-fold, the signal part does not. So
    the angle shrinks by √((1/n) / ((s + (1 − s)/n))) = 1 / √(1 + (n − 1) s): like 1/√n only once
    n·s ≫ 1, and hardly at all while n·s ≪ 1, where averaging shrinks the noise and the whole vector
    alike. A small-angle, noise-only model: a turn that is partly bias shrinks less.
    """
    batches = check_int("batches", batches, minimum=1)
    if not math.isfinite(snr) or not 0.0 <= snr <= 1.0:
        raise ValueError(f"snr must be a share in [0, 1], got {snr!r}")
    return 1.0 / math.sqrt(1.0 + (batches - 1) * snr)


def flat_parameters(model) -> torch.Tensor:
    """All of a model's parameters, detached, as one float vector: to compare where two runs ended."""
    return torch.cat([p.detach().flatten().float() for p in model.parameters()])


def sampled_divisor_weights(batch_size: int):
    """Dr.GRPO's token weights with the divisor of the batch *sampled*: a ``token_weights_fn`` for ``OnlineTrainer``.

    Dr.GRPO's loss (Liu et al. 2025, arXiv:2503.20783: a constant normaliser in place of 1/|y_i|) weighs
    every token by 1 / (B · L). A filtered trainer hands the loss only its K kept rows, so the weights
    become 1 / (K · L) and the update grows by B/K (lesson 14's Step 3). With these weights the divisor
    stays B · L (``batch_size`` = B, the completions sampled per step, ``max_len`` = L): the dropped
    rows had A = 0 and added nothing else, so the filtered run takes the unfiltered run's steps, up to
    float rounding, while training on K rows — the control that separates "skipping the flat rows"
    from "changing the normaliser". Only for Dr.GRPO's aggregation, ``seq_mean_token_sum_norm``, and a
    batch of fixed size (no dynamic sampling).
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)

    def weights(mask, mode, max_len):
        if mode != "seq_mean_token_sum_norm":
            raise ValueError(f"sampled_divisor_weights is for Dr.GRPO's aggregation 'seq_mean_token_sum_norm', "
                             f"got mode {mode!r}")
        if mask.shape[0] > batch_size:
            raise ValueError(f"the loss got {mask.shape[0]} rows, more than batch_size={batch_size}")
        return mask / (batch_size * max_len)

    return weights


def filter_sweep(model, rollout, advantages, tols, *, max_len: int, reference=None, mislabelled=None,
                 repeats: int | None = 2):
    """What the filter |A| > tol keeps, saves and changes, for each tol in ``tols``: one row each.

    Columns: ``tol``; ``dropped`` (share of the B completions with |A| ≤ tol); ``update_time``
    (CPU time of the update over the kept rows over that over all rows, ``update_seconds``);
    ``cosine`` and ``norm_ratio`` of the filtered gradient g_tol = Σ_{|A_i|>tol} A_i ∇log π(y_i) / (K L)
    against the unfiltered one over all rows, g = Σ_i A_i ∇log π(y_i) / (B L) (``update_gradient``).
    For tol below the smallest non-zero |A| only exact zeros go, and g_tol = (B/K) g: cosine 1, no
    bias. Above it, completions that do carry gradient go too, and the cosine measures how far this
    batch's update turns (one batch: average over several to speak of the expected update). With
    ``reference`` (a gradient vector, e.g. the clean-reward gradient when ``advantages`` come from a
    noisy verifier) a column ``cosine_reference`` compares g_tol with it too; with ``mislabelled`` (a
    (B,) bool mask of the rewards the verifier got wrong) a column ``mislabelled_kept`` gives the
    share of the kept completions that are mislabelled.
    ``repeats=None`` skips the timing (``update_time`` is then NaN).
    """
    import pandas as pd

    advantages = as_float_tensor("advantages", advantages, ndim=(1,))
    tols = [check_positive("tols", tol, allow_zero=True) for tol in tols]
    if not tols:
        raise ValueError("tols must hold at least one tolerance")
    if mislabelled is not None:
        mislabelled = torch.as_tensor(mislabelled)
        if mislabelled.dtype != torch.bool or mislabelled.shape != advantages.shape:
            raise ValueError(f"mislabelled must be a bool tensor of shape {tuple(advantages.shape)}")
    everything = torch.arange(advantages.shape[0])
    full = update_gradient(model, rollout, advantages, everything, max_len=max_len).double()
    kept = {tol: (advantages.abs() > tol).nonzero().squeeze(1) for tol in tols}
    timed = {"all": everything, **{tol: rows for tol, rows in kept.items() if rows.numel()}}
    seconds = (update_seconds(model, rollout, advantages, timed, max_len=max_len, repeats=repeats)
               if repeats is not None else {})
    rows = []
    for tol, keep in kept.items():
        row = {"tol": tol, "dropped": 1 - keep.numel() / advantages.shape[0], "update_time": math.nan,
               "cosine": math.nan, "norm_ratio": math.nan}
        if keep.numel():
            filtered = update_gradient(model, rollout, advantages, keep, max_len=max_len).double()
            row.update(update_time=seconds[tol] / seconds["all"] if seconds else math.nan,
                       cosine=_cosine(filtered, full), norm_ratio=(filtered.norm() / full.norm()).item())
        if reference is not None:
            row["cosine_reference"] = _cosine(filtered, reference.double()) if keep.numel() else math.nan
        if mislabelled is not None:
            row["mislabelled_kept"] = mislabelled[keep].float().mean().item() if keep.numel() else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def equal_time_table(frame, *, metric: str = "pass@1", window: int = 5, spread: bool = False):
    """Each run's ``metric`` at the wall time the fastest run needed for all its steps.

    ``frame`` is ``AblationResult.frame`` (columns label, seed, step, wall_time, ``metric``). The
    budget T is the smallest total wall time of any (label, seed) run; each run is read at the last
    step it finished by T: the steps done, and the mean ``metric`` over its last ``window`` of them.
    Returns one row per label (averaged over seeds), with T in ``budget_s``; with ``spread`` also the
    smallest and largest seed's ``metric`` (so a gap can be read against the seeds' spread).
    """
    import pandas as pd

    check_int("window", window, minimum=1)
    runs = frame.groupby(["label", "seed"], sort=False)
    budget = runs["wall_time"].max().min()
    rows = []
    for (label, seed), run in runs:
        done = run[run["wall_time"] <= budget + 1e-9]
        rows.append({"label": label, "seed": seed, "steps_done": len(done),
                     f"{metric} (last {window})": done[metric].tail(window).mean(),
                     "seconds_per_step": run["step_time"].mean()})
    runs_table = pd.DataFrame(rows)
    table = runs_table.groupby("label", sort=False).mean(numeric_only=True).drop(columns="seed")
    if spread:
        by_label = runs_table.groupby("label", sort=False)[f"{metric} (last {window})"]
        table.insert(2, "smallest seed", by_label.min())
        table.insert(3, "largest seed", by_label.max())
    return table.assign(budget_s=budget)


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a, b, dim=0).item()


def _update_loss(model, rollout, advantages, rows, max_len):
    """The Dr.GRPO loss of ``rollout``'s completions ``rows``, its log-probs recomputed under ``model``."""
    rows = torch.as_tensor(rows, dtype=torch.long)
    if rows.dim() != 1 or rows.numel() == 0:
        raise ValueError("rows must be a non-empty 1-D index tensor")
    picked = rollout.select(rows)
    logp = rollout_logprobs(model, picked)
    loss, _ = policy_loss(logp, picked.logprobs, advantages[rows], picked.completion_mask, variant="dr_grpo",
                          max_len=max_len)
    return loss
