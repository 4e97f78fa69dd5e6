"""Metrics a training run logs and a lesson asserts on: pass@k, best-of-n KL, entropy, clip fractions;
and the best-of-n math (the winner's exact distribution and KL, E[value of the winner] from a pool of
samples, E[max of k normals]) that lessons 04 and 05 plot."""

from __future__ import annotations

import math

import numpy as np
import torch

from rlbook._checks import as_float_tensor, check_int, check_same_shape
from rlbook.aggregation import masked_mean, response_mask
from rlbook.kl import kl_estimate

__all__ = [
    "pass_at_k",
    "mean_pass_at_k",
    "pass_at_k_per_prompt",
    "best_of_n_kl",
    "best_of_n_distribution",
    "best_of_n_exact_kl",
    "best_of_n_expectation",
    "overoptimisation_curves",
    "overoptimisation_downturn",
    "least_squares_slope",
    "within_level_correlation",
    "ensemble_scores",
    "bradley_terry_loss_floor",
    "expected_max_of_normals",
    "best_of_n_normal_efficiency",
    "entropy_from_logits",
    "clip_fractions",
    "approx_kl",
    "mean_length_by_correctness",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021, arXiv:2107.03374, eq. 1).

        pass@k = 1 − C(n − c, k) / C(n, k) = 1 − Π_{i = n−c+1}^{n} (1 − k / i)

    The product form avoids the huge binomials. c = 0 gives 0; n − c < k gives 1 (every draw of k
    samples contains a correct one).
    """
    n = check_int("n", n, minimum=1)
    c = check_int("c", c, minimum=0)
    k = check_int("k", k, minimum=1)
    if c > n:
        raise ValueError(f"c must be <= n={n}, got {c}")
    if k > n:
        raise ValueError(f"k must be <= n={n}, got {k}")
    if n - c < k:
        return 1.0
    all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        all_wrong *= 1.0 - k / i
    return 1.0 - all_wrong


def pass_at_k_per_prompt(correct, k: int) -> list[float]:
    """``pass_at_k`` of each prompt of a (P, n) table of n samples for each of P prompts, 1 (or True)
    where a sample is correct; 1 ≤ k ≤ n."""
    correct = torch.as_tensor(correct)
    if correct.dim() != 2 or correct.numel() == 0:
        raise ValueError(f"correct must be a non-empty (prompts, samples) table, got shape {tuple(correct.shape)}")
    if not ((correct == 0) | (correct == 1)).all():
        raise ValueError("correct must hold only 0/1 (or False/True) entries")
    n = correct.shape[1]
    return [pass_at_k(n, int(c), k) for c in correct.sum(dim=1).tolist()]


def mean_pass_at_k(correct, k: int) -> float:
    """pass@k on a set of prompts: ``pass_at_k`` of each prompt (``pass_at_k_per_prompt``), averaged
    over the prompts. The average is taken with ``math.fsum``: exact, whatever the prompts' order."""
    per_prompt = pass_at_k_per_prompt(correct, k)
    return math.fsum(per_prompt) / len(per_prompt)


def best_of_n_kl(n: int) -> float:
    """KL(π_best-of-n ‖ π) = log n − (n − 1)/n, the analytic formula for best-of-n sampling.

    The formula is the one used since Stiennon et al. (2020, arXiv:2009.01325); Beirami et al. (2024,
    "Theoretical guarantees on the best-of-n alignment policy", arXiv:2401.01879 v3, §3) prove it is an
    upper bound on the true KL, and study how loose it can be.
    """
    n = check_int("n", n, minimum=1)
    return math.log(n) - (n - 1) / n


def entropy_from_logits(logits) -> torch.Tensor:
    """Per-position entropy H = −Σ_v p_v log p_v of softmax(logits) over the last axis."""
    logits = as_float_tensor("logits", logits)
    if logits.dim() < 1 or logits.shape[-1] < 1:
        raise ValueError(f"logits must have a vocabulary axis last, got shape {tuple(logits.shape)}")
    log_probs = torch.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


def clip_fractions(ratio, advantages, mask, *, eps_low: float, eps_high: float) -> dict[str, float]:
    """Fractions of unmasked tokens whose PPO gradient is clipped to zero.

    ``low``: r < 1 − ε_low with A < 0; ``high``: r > 1 + ε_high with A > 0 (the two regions where
    min(rA, clip(r)A) picks the constant clipped branch); ``total`` is their sum.
    """
    ratio = as_float_tensor("ratio", ratio, ndim=(2,))
    advantages = as_float_tensor("advantages", advantages, ndim=(1, 2))
    if advantages.dim() == 1:
        if advantages.shape[0] != ratio.shape[0]:
            expected = f"({ratio.shape[0]},) or {tuple(ratio.shape)}"
            raise ValueError(f"advantages must have shape {expected}, got {tuple(advantages.shape)}")
        advantages = advantages.unsqueeze(1).expand_as(ratio)
    check_same_shape(ratio=ratio, advantages=advantages)
    mask = response_mask(mask)
    low = ((ratio < 1 - eps_low) & (advantages < 0)).float()
    high = ((ratio > 1 + eps_high) & (advantages > 0)).float()
    low, high = masked_mean(low, mask).item(), masked_mean(high, mask).item()
    return {"low": low, "high": high, "total": low + high}


def approx_kl(logp, old_logp, mask, *, estimator: str = "k3") -> float:
    """Mean per-token estimate of KL(π_old ‖ π_θ) on tokens sampled from π_old (default k3).

    How far one update moved the policy; PPO implementations log it to stop an epoch early.
    The estimators take the *sampling* policy first, so the roles are (old_logp, logp).
    """
    kl = kl_estimate(torch.as_tensor(old_logp).detach(), torch.as_tensor(logp).detach(), estimator)
    return masked_mean(kl, response_mask(mask)).item()


def mean_length_by_correctness(lengths, correct) -> dict[str, float]:
    """Mean response length of correct and of incorrect responses (NaN where a class is empty).

    Dr.GRPO (Liu et al. 2025, arXiv:2503.20783) shows that 1/|o| normalisation lets *incorrect*
    responses grow long; this is the number that makes it visible.
    """
    lengths = as_float_tensor("lengths", lengths, ndim=(1,))
    correct = torch.as_tensor(correct)
    if correct.shape != lengths.shape:
        raise ValueError(f"correct must have shape {tuple(lengths.shape)}, got {tuple(correct.shape)}")
    correct = correct.bool()
    return {
        "correct": lengths[correct].mean().item() if correct.any() else math.nan,
        "incorrect": lengths[~correct].mean().item() if (~correct).any() else math.nan,
    }


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


def _resampled_prompts(rng, prompts: int, resamples: int, strata=None) -> np.ndarray:
    """(resamples, prompts) indices of prompts drawn with replacement: from all of them, or, with ``strata``
    (one label per prompt), within each stratum, so that every resample keeps each stratum's count."""
    if strata is None:
        return rng.integers(0, prompts, size=(resamples, prompts))
    strata = np.asarray([str(label) for label in strata])
    if strata.shape != (prompts,):
        raise ValueError(f"strata must give one label per prompt ({prompts}), got {strata.shape[0]}")
    picks = np.empty((resamples, prompts), dtype=np.int64)
    for label in np.unique(strata):
        members = np.flatnonzero(strata == label)
        picks[:, members] = members[rng.integers(0, members.size, size=(resamples, members.size))]
    return picks


def overoptimisation_downturn(proxies, gold, ns, *, resamples: int = 2000, level: float = 0.95,
                              seed: int = 0, strata=None) -> dict:
    """How far the gold reward of best-of-n under a proxy falls from its peak, over several proxies
    (reward-model seeds) scoring one pool, with a bootstrap interval over the pool's prompts.

    ``proxies`` (S, P, N) are S reward models' scores of the same N samples of P prompts; ``gold``
    (P, N) their gold reward; ``ns`` increasing. For every proxy s the gold curve g_s(n) is
    ``best_of_n_expectation`` averaged over prompts (as in ``overoptimisation_curves``). The seed-mean
    curve ḡ(n) = mean_s g_s(n) peaks at n* and has the drop D = ḡ(n*) − ḡ(n_last); each seed's drop
    is taken at the same n*, g_s(n*) − g_s(n_last), so that it can come out negative (a seed's own
    maximum minus its end never could). The interval for D is the percentile bootstrap over prompts: each of
    ``resamples`` draws P prompts with replacement, recomputes ḡ on them, **re-locates its peak** and
    takes the drop, so the interval also carries the upward bias of picking the best of noisy points.
    It does not resample the S proxies: their spread is reported as the seed standard deviation of
    the per-seed drops. ``strata`` (one label per prompt, e.g. the film when several prompts share one):
    each resample draws prompts within each stratum, keeping its count — inference for these strata,
    not for new ones (for those, cluster by stratum: ``pool_drops`` are the per-prompt drops at n*).

    Returns a dict: ``curves`` (S, L) and ``mean_curve`` (L,), ``band`` (2, L) the bootstrap interval
    of ḡ(n) at each n, ``peak`` (index of the peak of ḡ), ``drop`` D, ``interval`` (lo, hi) of D,
    ``seed_drops`` (S,) at n* and ``seed_sd`` (their standard deviation, ddof 1; 0 for one proxy),
    ``pool_drops`` (P,) the seed-mean drop of each prompt's pool at n*,
    ``se_last`` the bootstrap SE of ḡ(n_last) — the noisiest point when n_last = N, one argmax per
    prompt and proxy.
    """
    proxies = torch.as_tensor(proxies).double()
    gold = torch.as_tensor(gold).double()
    if proxies.dim() == 2:
        proxies = proxies.unsqueeze(0)
    if proxies.dim() != 3 or proxies.shape[1:] != gold.shape:
        raise ValueError(f"proxies must be (S, P, N) over gold's (P, N) {tuple(gold.shape)}, got {tuple(proxies.shape)}")
    ns = [check_int("n", n, minimum=1) for n in ns]
    if len(ns) < 2 or any(b <= a for a, b in zip(ns, ns[1:])) or ns[-1] > gold.shape[1]:
        raise ValueError(f"ns must be ≥ 2 increasing sizes up to the pool size {gold.shape[1]}, got {ns}")
    check_int("resamples", resamples, minimum=1)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    # per proxy, per n, per prompt: E[gold of the winner] — (S, L, P)
    per_prompt = torch.stack([torch.stack([best_of_n_expectation(proxy, gold, n) for n in ns]) for proxy in proxies])
    curves = per_prompt.mean(-1).numpy()
    mean_curve = curves.mean(0)
    peak = int(np.argmax(mean_curve))
    seed_drops = curves[:, peak] - curves[:, -1]
    rng = np.random.default_rng(seed)
    prompts = per_prompt.shape[-1]
    seed_mean = per_prompt.mean(0).numpy()                                   # (L, P)
    picks = _resampled_prompts(rng, prompts, resamples, strata)
    boot = seed_mean[:, picks].mean(-1).T                                    # (B, L)
    boot_drops = boot.max(1) - boot[:, -1]
    tail = (1 - level) / 2
    return {"n": np.asarray(ns), "curves": curves, "mean_curve": mean_curve,
            "band": np.quantile(boot, [tail, 1 - tail], axis=0), "peak": peak,
            "drop": float(mean_curve.max() - mean_curve[-1]),
            "interval": tuple(float(q) for q in np.quantile(boot_drops, [tail, 1 - tail])),
            "seed_drops": seed_drops, "seed_sd": float(seed_drops.std(ddof=1)) if len(seed_drops) > 1 else 0.0,
            "pool_drops": seed_mean[peak] - seed_mean[-1],
            "se_last": float(boot[:, -1].std(ddof=1)), "level": level, "resamples": resamples}


def best_of_n_share_rise(proxies, indicator, n_from: int, n_to: int, *, resamples: int = 2000,
                         level: float = 0.95, seed: int = 0, strata=None) -> dict:
    """How much the share of best-of-n winners with a property rises from ``n_from`` to ``n_to``, over
    several proxies scoring one pool, with a percentile bootstrap over the pool's prompts.

    ``proxies`` (S, P, N) are S reward models' scores of the same N samples of P prompts, ``indicator``
    (P, N) a 0/1 property of each sample — or any value of it: with the gold reward, the "rise" is the change
    of the winners' mean gold from ``n_from`` to ``n_to``, a contrast at two sizes fixed in advance, which
    (unlike ``overoptimisation_downturn``'s drop from a re-found peak) can come out either sign. For every
    proxy and prompt the share is
    ``best_of_n_expectation`` of the indicator (the unbiased one-pool estimator); the rise is the
    seed-mean share at ``n_to`` minus that at ``n_from``, averaged over prompts. The interval resamples
    the P prompts with replacement (the seeds held fixed), as ``overoptimisation_downturn`` does for the
    drop: when all proxies score the same pool, which prompts happen to hold a sample with the property
    is a source of variance the seed spread does not see. ``strata``: resample within each stratum, as in
    ``overoptimisation_downturn``; ``pool_rises`` (P,) are the per-prompt seed-mean rises.

    Returns a dict: ``rise`` (float), ``seed_rises`` (S,), ``interval`` (lo, hi), ``se`` (the bootstrap
    standard deviation), ``level``, ``resamples``."""
    proxies = torch.as_tensor(proxies).double()
    indicator = torch.as_tensor(indicator).double()
    if proxies.dim() == 2:
        proxies = proxies.unsqueeze(0)
    if proxies.dim() != 3 or proxies.shape[1:] != indicator.shape:
        raise ValueError(f"proxies must be (S, P, N) over the indicator's (P, N) {tuple(indicator.shape)}, "
                         f"got {tuple(proxies.shape)}")
    n_from, n_to = check_int("n_from", n_from, minimum=1), check_int("n_to", n_to, minimum=1)
    if n_to > indicator.shape[1] or n_from > indicator.shape[1]:
        raise ValueError(f"n_from and n_to must be at most the pool size {indicator.shape[1]}, got {n_from}, {n_to}")
    check_int("resamples", resamples, minimum=1)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    per_prompt = torch.stack([best_of_n_expectation(proxy, indicator, n_to) - best_of_n_expectation(proxy, indicator, n_from)
                              for proxy in proxies]).numpy()                # (S, P)
    seed_mean = per_prompt.mean(0)
    rng = np.random.default_rng(seed)
    boot = seed_mean[_resampled_prompts(rng, seed_mean.size, resamples, strata)].mean(-1)
    tail = (1 - level) / 2
    return {"rise": float(seed_mean.mean()), "seed_rises": per_prompt.mean(-1), "pool_rises": seed_mean,
            "interval": tuple(float(q) for q in np.quantile(boot, [tail, 1 - tail])),
            "se": float(boot.std(ddof=1)), "level": level, "resamples": resamples}


def least_squares_slope(y, x) -> float:
    """The least-squares slope of ``y`` on ``x`` (with an intercept): cov(x, y) / var(x).

    Lesson 04 regresses a Bradley–Terry reward model's score on the gold reward: with labels of
    temperature T its population optimum is r*/T + c(x), a slope of 1/T."""
    x = np.asarray(torch.as_tensor(x).double().flatten())
    y = np.asarray(torch.as_tensor(y).double().flatten())
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"x and y must be two equally long samples of ≥ 2 values, got {x.size} and {y.size}")
    spread = ((x - x.mean()) ** 2).sum()
    if spread == 0:
        raise ValueError("x is constant: the slope is not defined")
    return float(((x - x.mean()) * (y - y.mean())).sum() / spread)


def standardised_coefficients(y, *xs) -> np.ndarray:
    """Multiple least-squares regression of ``y`` on the predictors ``xs`` (with an intercept), each
    variable standardised to mean 0, sd 1: the coefficient of x_j is the change of y, in its sds, per
    sd of x_j **with the other predictors held fixed** (a partial effect, unlike a correlation).

    Lesson 04 regresses a reward model's score on gold and length to ask whether it relies on length
    beyond what gold itself does."""
    def z(v):
        v = np.asarray(torch.as_tensor(v).double().flatten())
        if v.std() == 0:
            raise ValueError("a variable is constant: its standardised coefficient is not defined")
        return (v - v.mean()) / v.std()
    target = z(y)
    design = np.stack([z(x) for x in xs], axis=1)
    if design.shape[0] != target.size or target.size <= design.shape[1]:
        raise ValueError(f"need equally long samples longer than the number of predictors, got {target.size}, {design.shape}")
    return np.linalg.lstsq(design, target, rcond=None)[0]


def within_level_correlation(y, x, levels) -> float:
    """The correlation of ``y`` and ``x`` within the groups of equal ``levels``: both are centred on their
    group's mean, then correlated (the partial correlation given the level as a categorical factor, i.e. a
    regression with one fixed effect per level).

    If y depends on x only through the level (y = f(level) + noise unrelated to x, for *any* f, linear or
    not) it is 0 in expectation. Lesson 04 uses it to ask whether a reward model leans on length among
    reviews of equal gold reward, a test that a linear regression on gold cannot give when the model is a
    non-linear function of gold."""
    y, x, levels = (np.asarray(torch.as_tensor(v).double().flatten()) for v in (y, x, levels))
    if not y.size == x.size == levels.size:
        raise ValueError(f"y, x and levels must have one length, got {y.size}, {x.size}, {levels.size}")
    y_within, x_within = y.copy(), x.copy()
    for level in np.unique(levels):
        rows = levels == level
        y_within[rows] -= y[rows].mean()
        x_within[rows] -= x[rows].mean()
    if y_within.std() == 0 or x_within.std() == 0:
        raise ValueError("y or x is constant within every level: the within-level correlation is not defined")
    return float(np.corrcoef(y_within, x_within)[0, 1])


def within_level_correlation_interval(y, x, levels, clusters, *, strata=None, resamples: int = 2000,
                                      level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """A percentile-bootstrap interval of ``within_level_correlation(y, x, levels)`` that resamples whole
    clusters (e.g. the pool, or prompt, each text was drawn for) with replacement, not single texts.

    ``clusters`` gives each element its cluster, an integer id 0 … C − 1; ``strata`` (one label per
    cluster) resamples clusters within each stratum, as ``overoptimisation_downturn`` does for prompts.
    Texts of one pool share a prompt and repeat each other, so Fisher's z over texts, which treats them as
    independent, is too narrow. Each resample recomputes the level means from the resampled texts
    (the correlation of the within-level residuals is a ratio of sums, computed here from per-cluster,
    per-level sums). Returns (lo, hi)."""
    y, x, levels = (np.asarray(torch.as_tensor(v).double().flatten()) for v in (y, x, levels))
    clusters = np.asarray(torch.as_tensor(clusters).flatten(), dtype=np.int64)
    if not y.size == x.size == levels.size == clusters.size:
        raise ValueError(f"y, x, levels and clusters must have one length, got {y.size}, {x.size}, {levels.size}, "
                         f"{clusters.size}")
    if clusters.size == 0 or clusters.min() < 0:
        raise ValueError("clusters must be non-negative integer ids, one per element")
    check_int("resamples", resamples, minimum=1)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    count = int(clusters.max()) + 1
    _, level_id = np.unique(levels, return_inverse=True)
    cells = clusters * (level_id.max() + 1) + level_id
    # per (cluster, level): count, Σy, Σx, Σy², Σx², Σxy
    sums = np.stack([np.bincount(cells, weights=w, minlength=count * (level_id.max() + 1))
                     for w in (np.ones_like(y), y, x, y * y, x * x, x * y)], axis=-1).reshape(count, -1, 6)
    picks = _resampled_prompts(np.random.default_rng(seed), count, resamples, strata)
    weights = np.stack([np.bincount(row, minlength=count) for row in picks]).astype(float)   # (B, C)
    total = np.einsum("bc,cls->bls", weights, sums)                                            # (B, L, 6)
    n, sy, sx, syy, sxx, sxy = np.moveaxis(total, -1, 0)
    safe = np.maximum(n, 1)
    cov, var_y, var_x = ((sxy - sx * sy / safe).sum(1), (syy - sy * sy / safe).sum(1), (sxx - sx * sx / safe).sum(1))
    r = cov / np.sqrt(var_y * var_x)
    tail = (1 - level) / 2
    return tuple(float(q) for q in np.quantile(r[np.isfinite(r)], [tail, 1 - tail]))


def ensemble_scores(scores, rule: str = "mean", *, weight: float = 1.0) -> torch.Tensor:
    """Combine M reward models' scores of the same texts, ``scores`` (M, ...), into one score per text.

    Each model's scores are first standardised over all its texts (a Bradley–Terry reward has an
    arbitrary offset and a model-specific scale). Rules (Coste et al. 2023, §3): ``"mean"``, the ensemble
    mean; ``"min"``, worst-case optimisation (WCO), the lowest member; ``"uwo"``, uncertainty-weighted
    optimisation, the mean minus ``weight`` × the members' variance (population variance over the M)."""
    scores = torch.as_tensor(scores).double()
    if scores.dim() < 2 or scores.shape[0] < 2:
        raise ValueError(f"scores must be (M, ...) with M >= 2 reward models, got {tuple(scores.shape)}")
    flat = scores.reshape(scores.shape[0], -1)
    spread = flat.std(dim=1, keepdim=True)
    if (spread == 0).any():
        raise ValueError("a reward model scores every text alike: it cannot be standardised")
    z = ((flat - flat.mean(dim=1, keepdim=True)) / spread).reshape(scores.shape)
    if rule == "mean":
        return z.mean(0)
    if rule == "min":
        return z.min(0).values
    if rule == "uwo":
        if not weight >= 0:
            raise ValueError(f"weight must be >= 0, got {weight!r}")
        return z.mean(0) - weight * z.var(0, unbiased=False)
    raise ValueError(f"rule must be 'mean', 'min' or 'uwo', got {rule!r}")


def bradley_terry_expected_loss(gold_gaps, margins, temperature: float) -> np.ndarray:
    """The expected Bradley–Terry loss of each pair when a reward model gives the higher-gold response a
    margin ``margins`` and a Bradley–Terry labeller of ``temperature`` T labels it.

    The label says the higher-gold response won with p = σ(|Δr*|/T); the expected loss is
    −p log σ(m) − (1 − p) log σ(−m) (Ouyang et al. 2022, eq. 1, in expectation over the label). At the
    optimum m = |Δr*|/T it is the floor H(p) of ``bradley_terry_loss_floor``. Lesson 04's exercise 2
    uses it to show how much a proxy with a small slope on gold still has to gain."""
    gaps = np.abs(np.asarray(torch.as_tensor(gold_gaps).double(), dtype=float))
    margin = np.asarray(torch.as_tensor(margins).double(), dtype=float)
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    p = 1 / (1 + np.exp(-gaps / temperature))
    return p * np.logaddexp(0, -margin) + (1 - p) * np.logaddexp(0, margin)


def bradley_terry_loss_floor(gold_gaps, temperature: float) -> float:
    """The least Bradley–Terry loss any reward model can reach in expectation on pairs labelled by a
    Bradley–Terry labeller of ``temperature`` T, given each pair's gold gap Δr* (either sign).

    The label says the higher-gold response won with probability p = σ(|Δr*|/T); the expected loss
    −E[log σ(±Δr)] is least at σ(Δr) = p (the model reproduces the labeller), where it equals the
    binary entropy H(p) = −p log p − (1 − p) log(1 − p). The floor is the mean of H(p) over the
    pairs: a model at ln 2 knows nothing, one at the floor knows everything the labels can say
    (Bradley & Terry 1952; the loss of Ouyang et al. 2022, eq. 1)."""
    gaps = as_float_tensor("gold_gaps", gold_gaps).double().abs().flatten()
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    z = gaps / temperature
    # H(σ(z)) = log(1 + e^{−z}) + z σ(−z) = softplus(−z) + z σ(−z), finite for any z ≥ 0
    return float((torch.nn.functional.softplus(-z) + z * torch.sigmoid(-z)).mean())


def best_of_n_distribution(probs, rewards, n: int) -> torch.Tensor:
    """The exact distribution of the best-of-``n`` winner over a finite set of outcomes.

    ``probs`` (V,) is π, ``rewards`` (V,) the reward of each outcome. With the cumulative
    F(r) = π(reward ≤ r), the winner's reward is ≤ r with probability F(r)^n; a reward level c with
    mass p_c therefore wins with probability F(c)^n − F(c⁻)^n, and since the first of the tied
    samples wins, the outcomes of a level share it in proportion to π:

        π_n(y) = π(y) / p_c(y) · ( F(c(y))^n − F(c(y)⁻)^n )

    Without ties this is F(y)^n − (F(y) − π(y))^n ≈ n π(y) F(y)^(n−1) when π(y) is small: the
    distribution Beirami et al. derive for distinct rewards ("Theoretical guarantees on the best-of-n
    alignment policy", arXiv:2401.01879 v3, §2). The sharing of a tied level in proportion to π is
    this book's step (which of the tied draws wins depends only on its position, never on which
    outcome it is).
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
    of no ties and no outcome of sizeable probability (Beirami et al. 2024, arXiv:2401.01879 v3, §3).
    Clamped at 0: at n = 1 (π_n = π) rounding can otherwise leave −1e-17."""
    best = best_of_n_distribution(probs, rewards, n)
    base = as_float_tensor("probs", probs, ndim=(1,)).double()
    support = best > 0
    return max(0.0, (best[support] * (best[support] / base[support]).log()).sum().item())


def pool_best_of_n_kl(scores, n: int) -> float:
    """The exact KL of best-of-``n`` by ``scores`` from a finite pool, averaged over prompts.

    ``scores`` (P, N): each row is one prompt's pool of N samples, taken as π (each sample 1/N;
    duplicate texts share a score and so merge into one outcome of their total mass). Returns the mean
    over prompts of ``best_of_n_exact_kl``: how far the bound log n − (n − 1)/n (Beirami et al. 2024)
    overstates the KL when the pool has duplicates or, at n near N, when the pool is small."""
    scores = torch.as_tensor(scores).double()
    if scores.dim() != 2:
        raise ValueError(f"scores must be (P, N), got {tuple(scores.shape)}")
    uniform = torch.full((scores.shape[1],), 1.0 / scores.shape[1], dtype=torch.float64)
    return float(np.mean([best_of_n_exact_kl(uniform, row, n) for row in scores]))


def expected_max_of_normals(k: int, *, grid_points: int = 20_001) -> float:
    """E[max of ``k`` independent N(0, 1)], by quadrature of its density k φ(x) Φ(x)^(k−1).

    The integral ∫ x k φ(x) Φ(x)^(k−1) dx is taken with the trapezoid rule on [−10, 10]. The mass
    outside is at most k (1 − Φ(10)) + Φ(−10)^k ≈ k · 7.6e-24, and its share of the mean at most
    k φ(10) ≈ k · 7.7e-23: below 1e-16 for k ≤ 10⁶, the largest k the book uses. Grows like √(2 log k),
    which bounds it from above (Jensen on E[exp(t · max)], then t = √(2 log k)).
    """
    k = check_int("k", k, minimum=1)
    x = torch.linspace(-10.0, 10.0, check_int("grid_points", grid_points, minimum=101), dtype=torch.float64)
    normal = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))
    log_density = math.log(k) + normal.log_prob(x) + (k - 1) * torch.special.log_ndtr(x)
    return torch.trapezoid(x * log_density.exp(), x).item()


def best_of_n_normal_efficiency(n: int) -> float:
    """Best-of-``n``'s share of the most reward any policy can gain at its KL, for a reward that is
    normal under π and has no ties: E[max of n] / √(2 (log n − (n − 1)/n)), scale-free.

    If r(y) ~ N(μ, σ²) when y ~ π, the KL-regularised optimum π* ∝ π e^(r/β) (Rafailov et al. 2023,
    arXiv:2305.18290, eq. 4) tilts the normal: under π* the reward is N(μ + σ²/β, σ²) and
    KL(π* ‖ π) = σ²/(2β²), so its gain is exactly σ √(2 KL). No policy ν gains more at that KL: the
    Donsker–Varadhan inequality E_ν[λr] − log E_π[e^(λr)] ≤ KL(ν ‖ π), minimised over λ > 0, gives
    E_ν[r] − μ ≤ σ √(2 KL(ν ‖ π)). Best-of-n with no ties moves π by log n − (n − 1)/n
    (``best_of_n_kl``; Beirami et al. 2024, arXiv:2401.01879, §3: exact in this continuous limit)
    and gains σ E[max of n] (``expected_max_of_normals``). The ratio is below 1 for n ≥ 2 and rises
    slowly toward 1 with n; NaN at n = 1 (no gain at no KL).
    """
    n = check_int("n", n, minimum=1)
    if n == 1:
        return math.nan
    return expected_max_of_normals(n) / math.sqrt(2 * best_of_n_kl(n))
