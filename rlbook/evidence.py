"""The evidence a claim carries: uncertainties that respect how the samples were drawn.

A lesson's claim (``rlbook.notebook.check_claim``) states how many seeds or samples back it and how
uncertain the number is. Three cases come up again and again, and each has one function here:

- **Samples that share a prompt are not independent.** 1,024 completions of 128 prompts are closer
  to 128 observations than to 1,024: completions of an easy prompt are all likely right.
  ``clustered_se`` gives the standard error of a mean with the samples grouped by prompt (the
  cluster-robust "sandwich" variance of a mean; Cameron & Miller, *A Practitioner's Guide to
  Cluster-Robust Inference*, J. Human Resources 50(2), 2015, with the G/(G − 1) small-sample
  factor). With one sample per prompt it is the ordinary standard error. ``pass_at_k_with_se`` applies it
  to a held-out pass@k: one estimate per prompt, clustered by prompt; ``paired_pass_at_k_difference`` to
  the gap between two policies' pass@k on the same prompts, one difference per prompt.
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
- **The gap between two kinds of sample drawn from the same clusters.** ``clustered_difference_se``
  gives the standard error of mean(y | kind a) − mean(y | kind b) when both kinds occur inside the
  same clusters (the scratchpad and the direct answers of one prompt's group): the cluster-robust
  sandwich variance of the slope of a regression of y on the 0/1 kind (Cameron & Miller 2015, §II),
  with the same G/(G − 1) factor as ``clustered_se``. Adding the two means' clustered SEs in
  quadrature would treat them as independent, which they are not when they share clusters.
- **"No difference" needs a size.** ``minimum_detectable_difference`` is the smallest true gap a
  comparison of that many seeds, with that spread, would detect with 80 % power at the two-sided 5 %
  level: (z₀.₉₇₅ + z₀.₈) · sd · √(1/n_a + 1/n_b) ≈ 2.80 · se (the normal approximation; e.g.
  Cohen, *Statistical Power Analysis*, 1988, ch. 2). A lesson may say "no difference" only next to
  this number, and only when it is small. For a test of "no bias" that passes when an estimate lies
  within k standard errors of its target, ``detectable_bias`` is the bias it would catch with 80 %
  power: (k + z₀.₈) · se, 4.84 standard errors at k = 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from rlbook.metrics import pass_at_k_per_prompt

__all__ = ["clustered_se", "jackknife_se", "clustered_difference_se", "ratio_se", "pass_at_k_with_se", "paired_pass_at_k_difference",
           "paired_mean_difference", "pooled_pass_at_k_difference",
           "SeedComparison", "compare_seeds", "minimum_detectable_difference", "paired_minimum_detectable_difference",
           "evaluation_noise_detectable_difference",
           "detectable_bias", "critical_correlation", "paired_sign_test", "paired_t_test", "seed_mean_interval",
           "clustered_slope", "exact_binomial_interval", "separation_power", "separation_detectable_gap", "MIN_SEEDS"]

MIN_SEEDS = 3  # fewer seeds than this per method: a comparison is reported, never asserted
_Z_TWO_SIDED_5_PERCENT, _Z_POWER_80_PERCENT = 1.959964, 0.841621


def _values(name: str, values) -> np.ndarray:
    array = np.asarray(values, dtype=float).reshape(-1)
    if array.size == 0:
        raise ValueError(f"{name} must hold at least one number")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite")
    return array


def clustered_se(values, clusters, *, one_cluster_nan: bool = False) -> float:
    """Standard error of ``mean(values)`` when the values come in clusters (e.g. samples of one prompt).

    ``values``: one number per sample (e.g. 0/1 correct); ``clusters``: the same length, any hashable
    label per sample (e.g. the prompt's index). Needs at least two clusters; with one, raises, or returns
    NaN when ``one_cluster_nan`` (one cluster carries no spread: a table row that has no SE).
    SE² = G/(G − 1) · Σ_g (Σ_{i∈g} (y_i − ȳ))² / n².
    """
    y = _values("values", values)
    if one_cluster_nan and len(set(np.asarray(clusters).reshape(-1).tolist())) < 2:
        return float("nan")
    return _cluster_sandwich(y - y.mean(), clusters) / y.size


def _cluster_sandwich(terms: np.ndarray, clusters) -> float:
    """√(G/(G − 1) · Σ_g (Σ_{i∈g} terms_i)²): the cluster-robust spread of Σ_i terms_i, G clusters."""
    labels = list(clusters) if not isinstance(clusters, np.ndarray) else clusters.reshape(-1).tolist()
    if len(labels) != terms.size:
        raise ValueError(f"clusters must have one label per value: {len(labels)} labels for {terms.size} values")
    sums: dict = {}
    for label, term in zip(labels, terms):
        sums[label] = sums.get(label, 0.0) + term
    g = len(sums)
    if g < 2:
        raise ValueError("clusters must name at least two clusters")
    return math.sqrt(g / (g - 1) * sum(s * s for s in sums.values()))


def jackknife_se(leave_outs) -> float:
    """The delete-one jackknife standard error √((n − 1)/n · Σ_i (θ̂₍ᵢ₎ − θ̄)²) from the n leave-one-out
    estimates θ̂₍ᵢ₎ (Efron & Tibshirani 1993, *An Introduction to the Bootstrap*, eq. 11.5), for a statistic
    whose independent units (prompts, batches, problems) were each left out once."""
    leave_outs = np.asarray(leave_outs, dtype=np.float64).reshape(-1)
    if leave_outs.size < 2:
        raise ValueError(f"leave_outs must hold at least 2 leave-one-out estimates, got {leave_outs.size}")
    n = leave_outs.size
    return math.sqrt((n - 1) / n * float(((leave_outs - leave_outs.mean()) ** 2).sum()))


def clustered_difference_se(values, in_a, clusters) -> tuple[float, float]:
    """``(gap, se)``: gap = mean(values where ``in_a``) − mean(values elsewhere), and its clustered SE.

    ``values``: one number per sample (e.g. an advantage); ``in_a``: one bool per sample, its kind
    (e.g. wrote a scratchpad); ``clusters``: one label per sample (e.g. its prompt's group). Both kinds
    may occur in one cluster, so the two means are correlated. The gap is the slope of the least-squares
    fit of y on the indicator a (with an intercept); linearised, gap − E gap ≈ Σ_i z_i with
    z_i = a_i (y_i − ȳ_a)/n_a − (1 − a_i)(y_i − ȳ_b)/n_b, and the cluster-robust (sandwich) variance
    of that sum is SE² = G/(G − 1) · Σ_g (Σ_{i∈g} z_i)² (Cameron & Miller, "A Practitioner's Guide to
    Cluster-Robust Inference", J. Human Resources 50(2), 2015, §II, with the small-sample factor of
    ``clustered_se``). Needs at least one sample of each kind and two clusters.
    """
    y = _values("values", values)
    kind = np.asarray(in_a).reshape(-1)
    if kind.size != y.size or not (kind.dtype == bool or np.isin(kind, (0, 1)).all()):
        raise ValueError(f"in_a must hold one bool per value: {kind.size} entries for {y.size} values")
    kind = kind.astype(bool)
    n_a, n_b = int(kind.sum()), int((~kind).sum())
    if n_a == 0 or n_b == 0:
        raise ValueError("in_a must mark at least one value of each kind (True and False)")
    mean_a, mean_b = y[kind].mean(), y[~kind].mean()
    z = np.where(kind, (y - mean_a) / n_a, -(y - mean_b) / n_b)
    return float(mean_a - mean_b), _cluster_sandwich(z, clusters)


def clustered_slope(x, y, clusters) -> tuple[float, float]:
    """``(slope, se)``: the least-squares slope of y on x (with an intercept) and its SE clustered by ``clusters``.

    ``x``, ``y``: one number per sample (e.g. a critic's value and the return that followed);
    ``clusters``: one label per sample (e.g. its prompt). slope = Σ(x − x̄)(y − ȳ) / Σ(x − x̄)²;
    linearised, slope − E slope ≈ Σ_i (x_i − x̄) e_i / Σ(x − x̄)² with e_i the fit's residual, and
    the cluster-robust (sandwich) variance of that sum is SE² = G/(G − 1) · Σ_g (Σ_{i∈g} (x_i − x̄) e_i)²
    / (Σ(x − x̄)²)² (Cameron & Miller 2015, §II, with ``clustered_se``'s small-sample factor).
    ``clustered_difference_se`` is the case of a 0/1 x. A slope of 1 means y moves one for one with
    x; 0 that x carries no linear information about y. Needs x not constant and two clusters.
    """
    x, y = _values("x", x), _values("y", y)
    if x.size != y.size:
        raise ValueError(f"x and y must have one length, got {x.size} and {y.size}")
    centred = x - x.mean()
    sxx = float((centred ** 2).sum())
    if sxx <= 0:
        raise ValueError("x must not be constant: a slope needs spread in x")
    slope = float((centred * (y - y.mean())).sum() / sxx)
    residual = (y - y.mean()) - slope * centred
    return slope, _cluster_sandwich(centred * residual, clusters) / sxx


def exact_binomial_interval(successes: int, trials: int, *, level: float = 0.95) -> tuple[float, float]:
    """``(low, high)``: the Clopper–Pearson exact two-sided interval for a binomial proportion.

    low solves P(X ≥ k | p) = (1 − level)/2 and high solves P(X ≤ k | p) = (1 − level)/2 for
    X ~ Binomial(n, p) (Clopper & Pearson, "The use of confidence or fiducial limits illustrated in
    the case of the binomial", Biometrika 26(4), 1934); low = 0 at k = 0 and high = 1 at k = n. Unlike
    the Wald SE √(p̂(1 − p̂)/n), it does not collapse to zero at 0/n or n/n: 64 of 64 gives
    low = 0.025^(1/64) ≈ 0.944 at 95 %.
    """
    for name, value in (("successes", successes), ("trials", trials)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    if trials < 1 or successes > trials:
        raise ValueError(f"need 0 ≤ successes ≤ trials and trials ≥ 1, got {successes} of {trials}")
    if not isinstance(level, float) or not 0 < level < 1:
        raise ValueError(f"level must be a float in (0, 1), got {level!r}")
    tail = (1 - level) / 2

    def at_least(k: int):   # p ↦ P(X ≥ k | p), increasing in p
        return lambda p: sum(math.comb(trials, j) * p ** j * (1 - p) ** (trials - j) for j in range(k, trials + 1))

    def solve(f, target: float) -> float:   # f increasing in p on [0, 1]
        low, high = 0.0, 1.0
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if f(middle) < target else (low, middle)
        return (low + high) / 2

    low = 0.0 if successes == 0 else solve(at_least(successes), tail)
    # P(X ≤ k | p) = 1 − P(X ≥ k + 1 | p); it equals tail where P(X ≥ k + 1) = 1 − tail.
    high = 1.0 if successes == trials else solve(at_least(successes + 1), 1 - tail)
    return low, high


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


def paired_pass_at_k_difference(correct_a, correct_b, k: int, *, clusters=None) -> tuple[float, float]:
    """pass@k of policy a minus pass@k of policy b on the same prompts, and its standard error: ``(gap, se)``.

    ``correct_a`` (P, n_a) and ``correct_b`` (P, n_b) are 0/1 tables whose row i is the same prompt
    (n_a and n_b may differ, each ≥ k). Each prompt's pass@k is Chen et al. 2021's unbiased estimator
    (``rlbook.metrics.pass_at_k``) from its own row, so each prompt's difference is an unbiased estimate
    of its gap; the SE is ``clustered_se`` of those P differences (``clusters``: one label per prompt,
    default each its own). Pairing by prompt removes the spread between easy and hard prompts, which
    two separate SEs would count twice.
    """
    a, b = np.asarray(pass_at_k_per_prompt(correct_a, k)), np.asarray(pass_at_k_per_prompt(correct_b, k))
    if a.size != b.size:
        raise ValueError(f"correct_b must have one row per prompt of correct_a ({a.size}), got {b.size}")
    labels = range(a.size) if clusters is None else clusters
    return float((a - b).mean()), clustered_se(a - b, labels)


def paired_mean_difference(values_a, values_b, *, clusters=None) -> tuple[float, float]:
    """Mean of policy a's per-sample values minus policy b's on the same prompts, and its SE: ``(gap, se)``.

    ``values_a`` (P, n_a) and ``values_b`` (P, n_b): any per-sample numbers (a completion's length, 0/1
    for "used the scratchpad"), row i the same prompt for both. Each prompt's difference of row means
    is one paired observation; the gap is their mean and the SE their ``clustered_se`` (``clusters``:
    one label per prompt, default each its own), as ``paired_pass_at_k_difference`` does for pass@k.
    """
    a, b = np.asarray(values_a, dtype=float), np.asarray(values_b, dtype=float)
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[0] or min(a.size, b.size) == 0:
        raise ValueError(f"values_a and values_b must be non-empty (prompts, samples) tables with the same prompts, "
                         f"got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("values_a and values_b must be finite")
    differences = a.mean(axis=1) - b.mean(axis=1)
    return float(differences.mean()), clustered_se(differences, range(a.shape[0]) if clusters is None else clusters)


def pooled_pass_at_k_difference(seed_tables, correct_b, k: int, *, clusters=None) -> tuple[float, float]:
    """The mean over seeds of pass@k(seed) − pass@k(b) on the same prompts, and its standard error: ``(gap, se)``.

    ``seed_tables``: one (P, n) 0/1 table per seed of one recipe, row i the same prompt as ``correct_b``'s
    row i (typically the base model's one table, shared by every seed's comparison). Per prompt the seeds'
    unbiased pass@k (Chen et al. 2021) are averaged first and ``correct_b``'s subtracted once; the SE is
    ``clustered_se`` of those P differences. So b's sampling noise, common to every seed's gap, is counted
    once, not as if it were independent per seed, and the seeds' own differences enter through how they
    vary from prompt to prompt. It answers "are these runs, pooled, below b on prompts like these", not
    "is the recipe below b" (for that, the spread between seeds: ``seed_mean_interval``).
    """
    tables = list(seed_tables)
    if not tables:
        raise ValueError("seed_tables must hold at least one table (one per seed)")
    b = np.asarray(pass_at_k_per_prompt(correct_b, k))
    per_seed = [np.asarray(pass_at_k_per_prompt(table, k)) for table in tables]
    if any(a.size != b.size for a in per_seed):
        raise ValueError(f"every table in seed_tables must have one row per prompt of correct_b ({b.size}), got "
                         f"{[a.size for a in per_seed]}")
    gaps = np.mean(per_seed, axis=0) - b
    return float(gaps.mean()), clustered_se(gaps, range(b.size) if clusters is None else clusters)


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


def separation_power(gap: float, seed_sd: float, n_a: int, n_b: int) -> float:
    """The chance that ``compare_seeds`` finds a ``separated``: every one of ``n_a`` seeds of a above every one of
    ``n_b`` seeds of b, when a's seeds are normal with mean ``gap`` above b's and both have sd ``seed_sd``.

    With δ = gap / seed_sd, P(min a > max b) = ∫ n_b φ(x) Φ(x)^(n_b − 1) (1 − Φ(x − δ))^n_a dx (the density of
    the largest of n_b standard normals times the chance that all n_a of a lie above it), by the trapezoid
    rule on a fine grid (error far below 1e-6). At gap 0 it is the permutation level 1/C(n_a + n_b, n_a).
    """
    if not isinstance(seed_sd, (int, float)) or not math.isfinite(seed_sd) or seed_sd <= 0:
        raise ValueError(f"seed_sd must be a finite positive number, got {seed_sd!r}")
    for name, n in (("n_a", n_a), ("n_b", n_b)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{name} must be a positive int, got {n!r}")
    delta = float(gap) / seed_sd
    x = np.linspace(min(0.0, delta) - 12.0, max(0.0, delta) + 12.0, 8_001)
    normal_cdf = np.vectorize(NormalDist().cdf)
    phi = np.exp(-x ** 2 / 2) / math.sqrt(2 * math.pi)
    integrand = n_b * phi * normal_cdf(x) ** (n_b - 1) * (1 - normal_cdf(x - delta)) ** n_a
    return float(np.sum((integrand[1:] + integrand[:-1]) / 2 * np.diff(x)))


def separation_detectable_gap(seed_sd: float, n_a: int, n_b: int, *, power: float = 0.8) -> float:
    """The smallest true gap that ``compare_seeds``'s rule (every seed of a above every seed of b) detects with
    ``power``, for normal seeds of sd ``seed_sd``: ``separation_power`` solved for the gap by bisection.

    The rule is a permutation test at 1/C(n_a + n_b, n_a) that uses only the order of the seeds, so it needs a far
    larger gap than a t-test on the same seeds: about 3.3 seed sds at 6 + 6 seeds and 80 % power.
    """
    if not isinstance(power, (int, float)) or not 0 < power < 1:
        raise ValueError(f"power must be a probability in (0, 1), got {power!r}")
    low, high = 0.0, seed_sd
    while separation_power(high, seed_sd, n_a, n_b) < power:
        low, high = high, 2 * high
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if separation_power(middle, seed_sd, n_a, n_b) < power else (low, middle)
    return (low + high) / 2


def minimum_detectable_difference(seed_sd: float, n_a: int, n_b: int, *, t_quantiles: bool = False) -> float:
    """The smallest true gap that ``n_a`` vs ``n_b`` seeds with this ``seed_sd`` detect with 80 % power
    at the two-sided 5 % level: 2.80 · seed_sd · √(1/n_a + 1/n_b) (normal quantiles). With
    ``t_quantiles``, Student's t quantiles with n_a + n_b − 2 degrees of freedom replace the normal's, as
    the pooled sd is estimated from those seeds: (t_{0.975} + t_{0.8}) · seed_sd · √(1/n_a + 1/n_b), 3.72
    instead of 2.80 at 3 + 3 seeds (the same approximation as ``paired_minimum_detectable_difference``)."""
    if not isinstance(seed_sd, (int, float)) or not math.isfinite(seed_sd) or seed_sd < 0:
        raise ValueError(f"seed_sd must be a finite non-negative number, got {seed_sd!r}")
    for name, n in (("n_a", n_a), ("n_b", n_b)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{name} must be a positive int, got {n!r}")
    if t_quantiles:
        df = n_a + n_b - 2
        if df < 1:
            raise ValueError(f"t_quantiles needs n_a + n_b ≥ 3, got {n_a} + {n_b}")
        factor = _t_quantile(0.975, df) + _t_quantile(0.8, df)
    else:
        factor = _Z_TWO_SIDED_5_PERCENT + _Z_POWER_80_PERCENT
    return factor * seed_sd * math.sqrt(1 / n_a + 1 / n_b)


def paired_minimum_detectable_difference(differences, *, power: float = 0.8) -> float:
    """The smallest true gap a paired t-test on these per-seed differences detects with ``power`` (two-sided 5 %).

    ``differences``: one a − b per seed, runs of the same seed paired (same prompts, same sampling
    seed), n ≥ 2 of them. The test is on their mean, with n − 1 degrees of freedom, so
    MDD = (t_{0.975, n−1} + t_{power, n−1}) · sd(differences) / √n (the usual approximation of the
    noncentral t, e.g. Cohen 1988, ch. 2). With few seeds the t quantiles are far above the normal's
    (4.30 and 1.06 at n = 3, against 1.96 and 0.84), which ``minimum_detectable_difference`` ignores.
    """
    d = _values("differences", differences)
    if d.size < 2:
        raise ValueError(f"differences must hold at least 2 values (one per seed), got {d.size}")
    if not isinstance(power, (int, float)) or not 0.5 <= power < 1:
        raise ValueError(f"power must be a probability in [0.5, 1), got {power!r}")
    df = d.size - 1
    return (_t_quantile(0.975, df) + _t_quantile(power, df)) * float(d.std(ddof=1)) / math.sqrt(d.size)


def evaluation_noise_detectable_difference(pass_rate: float, answers: int, seeds: int, *,
                                           power: float = 0.8) -> float:
    """The paired detectable difference (as ``paired_minimum_detectable_difference``) that evaluation noise
    alone leaves, before any run-to-run variance of training: a floor on a design's resolution, known
    before the run.

    Each seed's difference of two runs' pass@1, each scored on ``answers`` answers at ``pass_rate``, has
    at least the binomial sd √(2 p (1 − p) / answers) when the two runs' answers are independent draws
    (more when answers cluster by prompt). A paired t-test on ``seeds`` such differences then detects,
    with ``power`` at the two-sided 5 % level, a gap of (t_{0.975, n−1} + t_{power, n−1}) · sd / √n
    (Cohen 1988, ch. 2): e.g. 0.118 at p = 0.75, 256 answers, 3 seeds.
    """
    if not isinstance(pass_rate, (int, float)) or not 0 < pass_rate < 1:
        raise ValueError(f"pass_rate must be a probability in (0, 1), got {pass_rate!r}")
    for name, n, least in (("answers", answers, 1), ("seeds", seeds, 2)):
        if not isinstance(n, int) or isinstance(n, bool) or n < least:
            raise ValueError(f"{name} must be an int of at least {least}, got {n!r}")
    if not isinstance(power, (int, float)) or not 0.5 <= power < 1:
        raise ValueError(f"power must be a probability in [0.5, 1), got {power!r}")
    sd = math.sqrt(2 * pass_rate * (1 - pass_rate) / answers)
    return (_t_quantile(0.975, seeds - 1) + _t_quantile(power, seeds - 1)) * sd / math.sqrt(seeds)


def paired_sign_test(differences) -> float:
    """One-sided exact sign test: the chance of at least as many positive paired differences as observed
    if each were positive or negative with probability ½ (no effect, differences symmetric about 0).

    ``differences``: one a − b per seed, runs of the same seed paired; exact ties (0) are dropped, as
    the test prescribes (e.g. Conover, *Practical Nonparametric Statistics*, §3.4). Returns
    P(Binomial(n, ½) ≥ k) for k positives among n non-zero differences; 5 of 5 gives 1/32 ≈ 0.031.
    It uses only the signs, so one wild seed cannot carry it.
    """
    d = _values("differences", differences)
    d = d[d != 0]
    if d.size == 0:
        raise ValueError("differences must hold at least one non-zero value")
    n, k = int(d.size), int((d > 0).sum())
    return sum(math.comb(n, j) for j in range(k, n + 1)) / 2 ** n


def critical_correlation(n: int, *, level: float = 0.05) -> float:
    """The Pearson r that ``n`` paired values must exceed for a one-sided test of a positive
    correlation at ``level``: r* = t / √(n − 2 + t²), t = Student's t quantile 1 − level with n − 2
    degrees of freedom (the t-test of r under bivariate normal noise). E.g. 0.378 at n = 20, 5 %.
    For a law that predicts the sign of a relation before the data are seen."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 3:
        raise ValueError(f"n must be an int of at least 3 pairs, got {n!r}")
    if not isinstance(level, (int, float)) or not 0 < level <= 0.5:
        raise ValueError(f"level must be in (0, 0.5], got {level!r}")
    t = _t_quantile(1 - level, n - 2)
    return t / math.sqrt(n - 2 + t * t)


def seed_mean_interval(values, *, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of one number per seed (e.g. each training run's gain) and its
    two-sided Student-t interval, mean ± t_{(1+level)/2, n−1} · sd / √n: what the recipe, not one run,
    is estimated to give, treating the seeds as independent draws of the run. Needs at least two seeds;
    with three, t(2) at 95 % is 4.30, so the interval is wide."""
    x = _values("values", values)
    if x.size < 2:
        raise ValueError("values must hold at least two seeds")
    if not (isinstance(level, float) and 0 < level < 1):
        raise ValueError(f"level must be a float in (0, 1), got {level!r}")
    half = _t_quantile((1 + level) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def paired_t_test(differences) -> dict:
    """Student's paired t-test of per-seed differences against 0: ``{"t", "p_two_sided", "p_one_sided"}``.

    ``differences``: one a − b per seed (runs of one seed paired), n ≥ 2. t = mean / (sd / √n) with
    n − 1 degrees of freedom (Student 1908; e.g. Rice, *Mathematical Statistics*, §11.3);
    ``p_one_sided`` = P(T ≥ t), the test of a gap in the direction a > b stated before the run,
    ``p_two_sided`` = P(|T| ≥ |t|). E.g. three gaps with t = 3.06 give 0.046 one-sided, 0.092 two-sided.
    """
    d = _values("differences", differences)
    if d.size < 2:
        raise ValueError(f"differences must hold at least 2 values (one per seed), got {d.size}")
    sd = float(d.std(ddof=1))
    if sd == 0:
        raise ValueError("differences must not all be equal (the t statistic needs a spread)")
    t = float(d.mean()) / (sd / math.sqrt(d.size))
    upper = 1.0 - _t_cdf(abs(t), d.size - 1)
    return {"t": t, "p_two_sided": float(2 * upper), "p_one_sided": float(upper if t >= 0 else 1.0 - upper)}


def cluster_t_critical(clusters, *, level: float = 0.95) -> float:
    """The two-sided Student-t critical value for a cluster-robust SE from G clusters, df = G − 1.

    With few clusters the CR1 SE of ``clustered_se`` is itself noisy, so a test that uses it should
    compare against t_{G−1} rather than the normal 1.96 (Cameron & Miller 2015, "A practitioner's guide
    to cluster-robust inference", §VI: G − 1 degrees of freedom). ``clusters``: one label per sample."""
    labels = list(clusters) if not isinstance(clusters, np.ndarray) else clusters.reshape(-1).tolist()
    groups = len(set(labels))
    if groups < 2:
        raise ValueError("clusters must name at least two clusters")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return _t_quantile((1 + level) / 2, groups - 1)


def _t_cdf(t: float, df: int) -> float:
    """Student's t CDF at t ≥ 0 (the density integrated from 0 by Simpson's rule)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    steps = 2000
    xs = np.linspace(0.0, t, steps + 1)
    pdf = np.exp(log_norm - (df + 1) / 2 * np.log1p(xs * xs / df))
    return 0.5 + t / (3 * steps) * (pdf[0] + pdf[-1] + 4 * pdf[1:-1:2].sum() + 2 * pdf[2:-1:2].sum())


def _t_quantile(q: float, df: int) -> float:
    """Student's t quantile for 0.5 ≤ q < 1, by bisection on its CDF (``_t_cdf``)."""
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < q:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if _t_cdf(middle, df) < q else (low, middle)
    return (low + high) / 2


def detectable_bias(se, *, z_threshold: float = 4.0, power: float = 0.8):
    """The bias a test "|estimate − target| < z_threshold · se" catches with probability ``power``.

    The estimate is normal around target + bias with standard error ``se``; the test fails (catches
    the bias) when the estimate lands beyond the threshold, which for a bias of
    (z_threshold + Φ⁻¹(power)) · se happens with probability ``power`` (the far tail ignored). At the
    lessons' 4 SE and 80 % power: 4.84 · se. ``se``: a number or an array (one per coordinate).
    """
    if not isinstance(z_threshold, (int, float)) or not math.isfinite(z_threshold) or z_threshold <= 0:
        raise ValueError(f"z_threshold must be a positive number, got {z_threshold!r}")
    if not isinstance(power, (int, float)) or not 0 < power < 1:
        raise ValueError(f"power must be a probability strictly between 0 and 1, got {power!r}")
    array = np.asarray(se, dtype=float)
    if not np.isfinite(array).all() or (array < 0).any():
        raise ValueError("se must be finite and non-negative")
    factor = z_threshold + NormalDist().inv_cdf(power)
    return factor * float(array) if array.ndim == 0 else factor * array


def group_means(values, groups, clusters) -> pd.DataFrame:
    """The mean of ``values`` in each group of equal ``groups``, with its standard error clustered by
    ``clusters`` (``rlbook.evidence.clustered_se``: samples of one prompt are not independent) and its
    count; one row per group, sorted. A group with a single cluster gets SE NaN (one cluster carries no
    spread). Lesson 04 reads a reward model's mean score per gold level within one clause count."""
    values, groups, clusters = (np.asarray(v.detach().cpu() if hasattr(v, "detach") else v).ravel()
                                for v in (values, groups, clusters))
    if not values.size == groups.size == clusters.size:
        raise ValueError(f"values, groups and clusters must have one length, got {values.size}, {groups.size}, {clusters.size}")
    import pandas as pd

    rows = []
    for group in sorted(set(groups.tolist())):
        mask = groups == group
        se = clustered_se(values[mask].astype(float), clusters[mask], one_cluster_nan=True)
        rows.append({"group": group, "mean": float(values[mask].astype(float).mean()), "se": se, "count": int(mask.sum())})
    return pd.DataFrame(rows, columns=["group", "mean", "se", "count"])
