"""The evidence a claim carries: uncertainties that respect how the samples were drawn.

A lesson's claim (``rlbook.notebook.check_claim``) states how many seeds or samples back it and how
uncertain the number is. Three cases come up again and again, and each has one function here:

- **Samples that share a prompt are not independent.** 1,024 completions of 128 prompts are closer
  to 128 observations than to 1,024: completions of an easy prompt are all likely right.
  ``clustered_se`` gives the standard error of a mean with the samples grouped by prompt (the
  cluster-robust "sandwich" variance of a mean; Cameron & Miller, *A Practitioner's Guide to
  Cluster-Robust Inference*, J. Human Resources 50(2), 2015, with the G/(G − 1) small-sample
  factor). With one sample per prompt it is the ordinary standard error. ``pass_at_k_with_se`` applies it
  to a held-out pass@k: one estimate per prompt, clustered by prompt. ``pass_at_k_gap`` compares two
  policies on the same prompts: one paired difference per prompt, so a prompt that is hard for both
  counts once (the two SEs do not add in quadrature).
- **Comparing two methods over seeds.** ``compare_seeds`` says whether one method beat the other
  beyond the seed spread: at least three seeds each, and every seed of the better method above every
  seed of the other. With 3 seeds against 3, that ordering arises by chance with probability
  1/20 = 0.05 when the methods are the same (a one-sided permutation test: 1 of the C(6, 3) = 20
  equally likely splits); with more seeds, less. It reports the gap and the pooled seed standard
  deviation too.
- **A ratio of two means over the same samples.** ``ratio_se`` gives the standard error of
  mean(x) / mean(y) when x and y are measured on the same draws (paired, so correlated): the delta
  method's linearisation (x_i − r y_i) / ȳ (e.g. Casella & Berger, *Statistical Inference*, 2nd ed.,
  2002, §5.5.4). A ratio of two variances measured on the same batches is one.
- **"No difference" needs a size.** ``minimum_detectable_difference`` is the smallest true gap a
  comparison of that many seeds, with that spread, would detect with 80 % power at the two-sided 5 %
  level: (z₀.₉₇₅ + z₀.₈) · sd · √(1/n_a + 1/n_b) ≈ 2.80 · se (the normal approximation; e.g.
  Cohen, *Statistical Power Analysis*, 1988, ch. 2). A lesson may say "no difference" only next to
  this number, and only when it is small.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlbook.metrics import pass_at_k_per_prompt

__all__ = ["clustered_se", "ratio_se", "pass_at_k_with_se", "pass_at_k_gap", "SeedComparison", "compare_seeds",
           "minimum_detectable_difference", "MIN_SEEDS"]

MIN_SEEDS = 3  # fewer seeds than this per method: a comparison is reported, never asserted
_Z_TWO_SIDED_5_PERCENT, _Z_POWER_80_PERCENT = 1.959964, 0.841621


def _values(name: str, values) -> np.ndarray:
    array = np.asarray(values, dtype=float).reshape(-1)
    if array.size == 0:
        raise ValueError(f"{name} must hold at least one number")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite")
    return array


def clustered_se(values, clusters) -> float:
    """Standard error of ``mean(values)`` when the values come in clusters (e.g. samples of one prompt).

    ``values``: one number per sample (e.g. 0/1 correct); ``clusters``: the same length, any hashable
    label per sample (e.g. the prompt's index). Needs at least two clusters.
    SE² = G/(G − 1) · Σ_g (Σ_{i∈g} (y_i − ȳ))² / n².
    """
    y = _values("values", values)
    labels = list(clusters) if not isinstance(clusters, np.ndarray) else clusters.reshape(-1).tolist()
    if len(labels) != y.size:
        raise ValueError(f"clusters must have one label per value: {len(labels)} labels for {y.size} values")
    residual = y - y.mean()
    sums: dict = {}
    for label, r in zip(labels, residual):
        sums[label] = sums.get(label, 0.0) + r
    g = len(sums)
    if g < 2:
        raise ValueError("clusters must name at least two clusters")
    return math.sqrt(g / (g - 1) * sum(s * s for s in sums.values())) / y.size


def ratio_se(numerators, denominators) -> tuple[float, float]:
    """``(r, se)``: the ratio r = mean(numerators) / mean(denominators) and its delta-method standard error.

    The two arrays hold one number per draw, the i-th of each measured on the same draw (so they may
    be correlated); the draws are independent. se = sd((x_i − r y_i) / ȳ) / √n, the first-order
    (delta-method) linearisation of the ratio. Needs at least two draws and mean(denominators) ≠ 0.
    """
    x, y = _values("numerators", numerators), _values("denominators", denominators)
    if x.size != y.size:
        raise ValueError(f"numerators and denominators must be paired: {x.size} and {y.size} values")
    if x.size < 2:
        raise ValueError("numerators must hold at least two draws")
    if y.mean() == 0:
        raise ValueError("denominators must not average to zero")
    ratio = x.mean() / y.mean()
    linear = (x - ratio * y) / y.mean()
    return float(ratio), float(linear.std(ddof=1) / math.sqrt(x.size))


def pass_at_k_with_se(correct, k: int, *, clusters=None) -> tuple[float, float]:
    """Held-out pass@k and its standard error clustered by prompt: ``(mean, se)``.

    ``correct``: a (P, n) 0/1 table, n samples of each of P prompts. Each prompt's pass@k (Chen et al.
    2021's unbiased estimator, ``rlbook.metrics.pass_at_k``) is one observation; the SE is
    ``clustered_se`` of those, with ``clusters`` one label per prompt (default: each prompt its own; give
    the question text so that a prompt drawn twice counts as one cluster). For k = 1 this is the SE of
    the mean over all P·n samples clustered by prompt.
    """
    per_prompt = pass_at_k_per_prompt(correct, k)
    labels = range(len(per_prompt)) if clusters is None else clusters
    return float(np.mean(per_prompt)), clustered_se(per_prompt, labels)


def pass_at_k_gap(base_correct, policy_correct, k: int) -> tuple[float, float]:
    """``(gap, se)``: the policy's held-out pass@k minus the base's, on the same P prompts, and its SE
    clustered by prompt.

    ``base_correct``, ``policy_correct``: (P, n) 0/1 tables of the same P prompts in the same order (n
    may differ, k ≤ both). Each prompt gives one paired difference d_i = pass@k_policy,i − pass@k_base,i
    (Chen et al. 2021's unbiased estimator, arXiv:2107.03374 eq. 1, on each row); gap = mean d_i and
    se = ``clustered_se(d, prompts)`` = sd(d)/√P. The prompts are the independent units: the n samples
    of one prompt are not n observations, and the two tables share their prompts, so the SE of the gap
    is not √(se_base² + se_policy²).
    """
    base = pass_at_k_per_prompt(base_correct, k)
    policy = pass_at_k_per_prompt(policy_correct, k)
    if len(base) != len(policy):
        raise ValueError(f"base_correct and policy_correct must cover the same prompts, got {len(base)} and "
                         f"{len(policy)} rows")
    differences = np.asarray(policy, dtype=float) - np.asarray(base, dtype=float)
    return float(differences.mean()), clustered_se(differences, range(len(differences)))


@dataclass(frozen=True)
class SeedComparison:
    """``compare_seeds``'s answer: ``gap`` = mean(a) − mean(b); ``seed_sd`` pooled over both;
    ``separated`` True when a claim may be made (see ``compare_seeds``)."""

    gap: float
    seed_sd: float
    n_a: int
    n_b: int
    separated: bool

    def __str__(self) -> str:
        verdict = "beyond the seed spread" if self.separated else "within the seed spread (reported, not claimed)"
        return (f"gap {self.gap:+.3f} over {self.n_a} vs {self.n_b} seeds, seed sd {self.seed_sd:.3f}: {verdict}")


def compare_seeds(a, b) -> SeedComparison:
    """Did method a beat method b beyond the seed spread? ``a``, ``b``: one number per seed.

    ``separated`` is True when both have at least ``MIN_SEEDS`` seeds and min(a) > max(b): every seed
    of a above every seed of b (a one-sided permutation test at level 1/C(n_a + n_b, n_a) ≤ 0.05).
    """
    a, b = _values("a", a), _values("b", b)
    dof = a.size + b.size - 2
    pooled = (((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / dof if dof > 0 else math.nan
    separated = bool(min(a.size, b.size) >= MIN_SEEDS and a.min() > b.max())
    return SeedComparison(gap=float(a.mean() - b.mean()), seed_sd=float(math.sqrt(pooled)) if dof > 0 else math.nan,
                          n_a=int(a.size), n_b=int(b.size), separated=separated)


def minimum_detectable_difference(seed_sd: float, n_a: int, n_b: int) -> float:
    """The smallest true gap that ``n_a`` vs ``n_b`` seeds with this ``seed_sd`` detect with 80 % power
    at the two-sided 5 % level: 2.80 · seed_sd · √(1/n_a + 1/n_b)."""
    if not isinstance(seed_sd, (int, float)) or not math.isfinite(seed_sd) or seed_sd < 0:
        raise ValueError(f"seed_sd must be a finite non-negative number, got {seed_sd!r}")
    for name, n in (("n_a", n_a), ("n_b", n_b)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{name} must be a positive int, got {n!r}")
    return (_Z_TWO_SIDED_5_PERCENT + _Z_POWER_80_PERCENT) * seed_sd * math.sqrt(1 / n_a + 1 / n_b)
