"""pass@k, best-of-n KL, entropy, clip fractions, approximate KL, lengths (rlbook.metrics)."""

import math
from fractions import Fraction

import pytest
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.metrics import (
    approx_kl,
    best_of_n_exact_kl,
    best_of_n_kl,
    clip_fractions,
    entropy_from_logits,
    mean_length_by_correctness,
    pass_at_k,
)


def _exact_pass_at_k(n, c, k):
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def test_pass_at_k_edge_cases():
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 6, 5) == 1.0  # n − c = 4 < k: every draw of 5 holds a correct sample
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 − C(3,2)/C(4,2) = 1 − 3/6
    assert isinstance(pass_at_k(5, 2, 2), float)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_the_binomial_formula(case):
    n, c, k = case
    assert pass_at_k(n, c, k) == pytest.approx(_exact_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    assert pass_at_k(2000, 7, 300) == pytest.approx(_exact_pass_at_k(2000, 7, 300), rel=1e-12)


def test_best_of_n_kl():
    assert best_of_n_kl(1) == 0.0
    assert best_of_n_kl(2) == pytest.approx(math.log(2) - 0.5)
    values = [best_of_n_kl(n) for n in (1, 2, 4, 16, 256)]
    assert values == sorted(values)


def test_best_of_n_exact_kl_is_never_negative():
    probs = torch.softmax(torch.randn(5000, generator=torch.Generator().manual_seed(0), dtype=torch.float64), 0)
    rewards = torch.randperm(5000, generator=torch.Generator().manual_seed(1)).double()
    assert 0.0 <= best_of_n_exact_kl(probs, rewards, 1) < 1e-12  # π_1 = π; rounding alone can give −1e-17
    assert 0 < best_of_n_exact_kl(probs, rewards, 2) <= best_of_n_kl(2)


def test_entropy_from_logits():
    assert entropy_from_logits(torch.zeros(2, 3, 8)).allclose(torch.full((2, 3), math.log(8)))
    peaked = entropy_from_logits(torch.tensor([100.0, 0.0, 0.0]))
    assert peaked.item() == pytest.approx(0.0, abs=1e-6)


def test_clip_fractions_and_approx_kl():
    ratio = torch.tensor([[1.5, 1.0], [0.5, 0.7]])
    fractions = clip_fractions(ratio, torch.tensor([1.0, -1.0]), torch.tensor([[1, 1], [1, 0]]), eps_low=0.2, eps_high=0.2)
    assert fractions == pytest.approx({"low": 1 / 3, "high": 1 / 3, "total": 2 / 3})
    logp = torch.tensor([[-1.0, -2.0]])
    assert approx_kl(logp, logp, torch.ones(1, 2)) == 0.0
    assert approx_kl(logp, logp - 0.1, torch.ones(1, 2)) > 0


def test_mean_length_by_correctness():
    result = mean_length_by_correctness(torch.tensor([10, 20, 30, 40]), torch.tensor([True, False, True, False]))
    assert result == {"correct": 20.0, "incorrect": 30.0}
    assert math.isnan(mean_length_by_correctness(torch.tensor([5.0]), torch.tensor([True]))["incorrect"])


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: pass_at_k(5, 6, 1), "c"),
        (lambda: pass_at_k(5, 1, 6), "k"),
        (lambda: pass_at_k(5, 1, 0), "k"),
        (lambda: pass_at_k(0, 0, 1), "n"),
        (lambda: pass_at_k(5.0, 1, 1), "n"),
        (lambda: pass_at_k(5, -1, 1), "c"),
        (lambda: best_of_n_kl(0), "n"),
        (lambda: entropy_from_logits(torch.tensor([float("nan"), 0.0])), "logits"),
        (lambda: clip_fractions(torch.ones(2, 2), torch.ones(3), torch.ones(2, 2), eps_low=0.2, eps_high=0.2), "advantages"),
        (lambda: approx_kl(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2)), "mask"),
        (lambda: mean_length_by_correctness(torch.ones(3), torch.ones(2)), "correct"),
    ],
)
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_within_level_correlation_is_zero_for_any_function_of_the_level_and_finds_length():
    import numpy as np
    from rlbook.metrics import within_level_correlation
    rng = np.random.default_rng(0)
    levels = rng.integers(0, 4, 4000).astype(float)
    length = 20 * levels + rng.normal(0, 5, 4000)          # higher levels are longer
    concave = np.minimum(levels, 1.0) + rng.normal(0, 0.3, 4000)
    # a non-linear function of the level alone: no within-level link to length
    assert abs(within_level_correlation(concave, length, levels)) < 0.05
    leaning = concave - 0.05 * (length - 20 * levels)
    assert within_level_correlation(leaning, length, levels) < -0.4
    with pytest.raises(ValueError, match="one length"):
        within_level_correlation(concave[:3], length, levels)
    with pytest.raises(ValueError, match="constant"):
        within_level_correlation(levels, length, levels)


def test_ensemble_scores_mean_min_and_uwo():
    from rlbook.metrics import ensemble_scores
    a = torch.tensor([[0.0, 1.0, 2.0, 3.0]], dtype=torch.float64)
    b = torch.tensor([[0.0, 10.0, 20.0, 30.0]]) + 7      # same order, other scale and offset
    c = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    same = ensemble_scores(torch.stack([a, b]), "mean")
    assert same.shape == (1, 4)
    assert torch.allclose(same, ensemble_scores(torch.stack([a, a]), "mean"))   # scale and offset removed
    opposite = torch.stack([a, c])
    assert torch.allclose(ensemble_scores(opposite, "mean"), torch.zeros(1, 4, dtype=torch.float64), atol=1e-12)
    z = (a - a.mean()) / a.std()
    assert torch.allclose(ensemble_scores(opposite, "min"), -z.abs().double())
    assert torch.allclose(ensemble_scores(opposite, "uwo", weight=0.5), -0.5 * z.double() ** 2)
    with pytest.raises(ValueError, match="rule"):
        ensemble_scores(opposite, "median")
    with pytest.raises(ValueError, match="M >= 2"):
        ensemble_scores(a, "mean")


def test_within_level_correlation_interval_resamples_clusters_not_texts():
    import math

    import numpy as np
    from rlbook.metrics import within_level_correlation, within_level_correlation_interval
    rng = np.random.default_rng(1)
    pools, per_pool = 30, 60
    clusters = np.repeat(np.arange(pools), per_pool)
    levels = rng.integers(0, 3, pools * per_pool).astype(float)
    shock = rng.normal(0, 1, pools)[clusters]                  # a pool-level shock shared by y and x
    length = 20 * levels + 5 * shock + rng.normal(0, 5, clusters.size)
    y = levels - 0.3 * shock + rng.normal(0, 0.5, clusters.size)
    r = within_level_correlation(y, length, levels)
    # every cluster its own stratum: each resample redraws the same clusters, so the sums reproduce r exactly
    lo, hi = within_level_correlation_interval(y, length, levels, clusters, strata=list(range(pools)), resamples=5)
    assert lo == pytest.approx(r, abs=1e-12) and hi == pytest.approx(r, abs=1e-12)
    lo, hi = within_level_correlation_interval(y, length, levels, clusters, resamples=400)
    assert lo < r < hi
    fisher_half = 1.96 / math.sqrt(clusters.size - 3)
    fisher = math.tanh(math.atanh(r) + fisher_half) - math.tanh(math.atanh(r) - fisher_half)
    assert hi - lo > 2 * fisher      # texts of one pool are not independent: the honest interval is wider
    with pytest.raises(ValueError, match="one length"):
        within_level_correlation_interval(y[:5], length, levels, clusters)


def test_group_means_clusters_the_standard_error_and_counts():
    from rlbook.evidence import clustered_se
    from rlbook.evidence import group_means

    values = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 12.0, 5.0])
    groups = np.array(["a", "a", "a", "a", "b", "b", "c"])
    clusters = np.array([0, 0, 1, 1, 0, 1, 0])
    table = group_means(torch.tensor(values), groups, clusters)
    assert list(table["group"]) == ["a", "b", "c"] and list(table["count"]) == [4, 2, 1]
    assert table["mean"].tolist() == pytest.approx([2.5, 11.0, 5.0])
    assert table["se"][0] == pytest.approx(clustered_se(values[:4], clusters[:4]))
    assert math.isnan(table["se"][2])                 # one cluster: no spread to measure
    with pytest.raises(ValueError):
        group_means(values, groups[:3], clusters)
