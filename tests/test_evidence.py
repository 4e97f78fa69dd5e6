"""Tests of rlbook.evidence and check_claim's support: the uncertainty a claim carries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlbook.evidence import (
    MIN_SEEDS, clustered_difference_se, clustered_se, compare_seeds, detectable_bias, minimum_detectable_difference,
    paired_pass_at_k_difference,
    pass_at_k_with_se, ratio_se,
)
from rlbook.metrics import pass_at_k
from rlbook.notebook import check_claim


def test_one_sample_per_cluster_is_the_ordinary_standard_error_up_to_the_small_sample_factor():
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    ordinary = y.std(ddof=0) / math.sqrt(len(y)) * math.sqrt(len(y) / (len(y) - 1))
    assert clustered_se(y, range(len(y))) == pytest.approx(ordinary)


def test_samples_of_one_prompt_that_agree_count_as_one_observation():
    # 4 prompts, each answered 8 times the same way: really 4 observations, not 32.
    per_prompt = np.array([1.0, 0.0, 1.0, 0.0])
    y = np.repeat(per_prompt, 8)
    prompts = np.repeat(np.arange(4), 8)
    naive = y.std(ddof=1) / math.sqrt(len(y))
    assert clustered_se(y, prompts) == pytest.approx(clustered_se(per_prompt, range(4)))
    assert clustered_se(y, prompts) > 2.5 * naive


def test_clustered_se_matches_the_spread_of_simulated_means():
    rng = np.random.default_rng(0)
    means, ses = [], []
    for _ in range(400):
        difficulty = rng.uniform(0, 1, size=32)                       # 32 prompts
        y = (rng.uniform(size=(32, 8)) < difficulty[:, None]).astype(float)  # 8 samples each
        means.append(y.mean())
        ses.append(clustered_se(y.reshape(-1), np.repeat(np.arange(32), 8)))
    assert np.mean(ses) == pytest.approx(np.std(means), rel=0.15)


def test_held_out_pass_at_1_se_is_the_sample_mean_se_clustered_by_prompt():
    correct = np.random.default_rng(3).integers(0, 2, size=(12, 8))
    mean, se = pass_at_k_with_se(correct, 1)
    assert mean == pytest.approx(correct.mean())
    assert se == pytest.approx(clustered_se(correct.reshape(-1), np.repeat(np.arange(12), 8)))


def test_held_out_pass_at_k_counts_a_prompt_drawn_twice_as_one_cluster():
    correct = np.array([[1, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0]])
    mean, se = pass_at_k_with_se(correct, 4, clusters=["a", "a", "b", "c"])
    assert mean == pytest.approx(0.75)
    assert se == pytest.approx(clustered_se([1.0, 1.0, 0.0, 1.0], ["a", "a", "b", "c"]))
    assert se != pytest.approx(pass_at_k_with_se(correct, 4)[1])


def test_compare_seeds_claims_only_with_three_seeds_and_no_overlap():
    assert compare_seeds([0.8, 0.82, 0.85], [0.6, 0.62, 0.7]).separated
    assert not compare_seeds([0.8, 0.82, 0.65], [0.6, 0.62, 0.7]).separated  # the ranges overlap
    assert not compare_seeds([0.9, 0.95], [0.1, 0.2]).separated  # two seeds: reported, never claimed
    result = compare_seeds([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert result.gap == pytest.approx(2.0) and result.seed_sd == pytest.approx(math.sqrt(2 / 4))
    assert "reported, not claimed" in str(compare_seeds([1, 2], [0, 0])) and MIN_SEEDS == 3


def test_minimum_detectable_difference_is_2_8_standard_errors():
    assert minimum_detectable_difference(0.1, 3, 3) == pytest.approx(2.8016 * 0.1 * math.sqrt(2 / 3), rel=1e-4)
    assert minimum_detectable_difference(0.1, 12, 12) < minimum_detectable_difference(0.1, 3, 3)


def test_ratio_se_matches_the_spread_of_simulated_ratios():
    # Paired draws: y and a correlated x; the delta-method SE should match the spread of the ratio.
    rng = np.random.default_rng(1)
    ratios, ses = [], []
    for _ in range(400):
        y = rng.exponential(1.0, size=500)
        x = 2.0 * y + rng.normal(0.0, 0.5, size=500)
        ratio, se = ratio_se(x, y)
        ratios.append(ratio)
        ses.append(se)
    assert np.mean(ratios) == pytest.approx(2.0, abs=0.01)
    assert np.mean(ses) == pytest.approx(np.std(ratios), rel=0.15)


def test_ratio_se_is_zero_when_the_pairs_are_proportional():
    y = np.array([1.0, 2.0, 3.0, 5.0])
    assert ratio_se(3 * y, y) == pytest.approx((3.0, 0.0))


@pytest.mark.parametrize("call, message", [
    (lambda: ratio_se([1.0, 2.0], [1.0]), "paired"),
    (lambda: ratio_se([1.0], [1.0]), "two draws"),
    (lambda: ratio_se([1.0, 2.0], [1.0, -1.0]), "average to zero"),
    (lambda: clustered_se([1.0, 2.0], [0, 0]), "two clusters"),
    (lambda: clustered_se([1.0, 2.0], [0]), "one label per value"),
    (lambda: clustered_se([], []), "at least one number"),
    (lambda: compare_seeds([1.0, float("nan")], [0.0]), "finite"),
    (lambda: minimum_detectable_difference(-1.0, 3, 3), "seed_sd"),
    (lambda: minimum_detectable_difference(0.1, 0, 3), "n_a"),
    (lambda: paired_pass_at_k_difference(np.ones((3, 4)), np.ones((2, 4)), 2), "one row per prompt"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_check_claim_prints_its_support_and_fails_with_it(capsys):
    check_claim(True, "pass@1 rises", "0.30 → 0.60", n="3 seeds", uncertainty="seed sd 0.02",
                threshold="fixed before the run")
    assert capsys.readouterr().out == ("✓ pass@1 rises (0.30 → 0.60) [3 seeds; seed sd 0.02; "
                                       "threshold: fixed before the run]\n")
    with pytest.raises(AssertionError, match=r"\[2 seeds\]"):
        check_claim(False, "pass@1 rises", n="2 seeds")
    with pytest.raises(ValueError, match="uncertainty"):
        check_claim(True, "x", uncertainty="  ")


def test_clustered_difference_se_without_clusters_is_the_two_sample_standard_error():
    rng = np.random.default_rng(4)
    y = rng.normal(size=200)
    kind = rng.uniform(size=200) < 0.3
    gap, se = clustered_difference_se(y, kind, range(200))
    assert gap == pytest.approx(y[kind].mean() - y[~kind].mean())
    two_sample = math.sqrt(y[kind].var(ddof=0) / kind.sum() + y[~kind].var(ddof=0) / (~kind).sum())
    assert se == pytest.approx(two_sample * math.sqrt(200 / 199))


def test_clustered_difference_se_matches_the_spread_of_simulated_gaps_with_shared_clusters():
    # 24 groups of 8: a group effect shared by both kinds (which cancels in the gap) and a group effect
    # on the gap itself (which the clusters must count once per group, not once per sample).
    rng = np.random.default_rng(5)
    gaps, ses = [], []
    groups = np.repeat(np.arange(24), 8)
    for _ in range(400):
        shared, on_gap = rng.normal(size=24)[groups], rng.normal(scale=0.5, size=24)[groups]
        kind = rng.uniform(size=groups.size) < 0.4
        y = shared + kind * (1.0 + on_gap) + rng.normal(scale=0.3, size=groups.size)
        gap, se = clustered_difference_se(y, kind, groups)
        gaps.append(gap)
        ses.append(se)
    assert np.mean(gaps) == pytest.approx(1.0, abs=0.03)
    assert np.mean(ses) == pytest.approx(np.std(gaps), rel=0.15)
    naive = [math.sqrt(clustered_se(y[kind], groups[kind]) ** 2 + clustered_se(y[~kind], groups[~kind]) ** 2)]
    assert naive[0] > 1.5 * se  # as if independent: the shared group effect is counted twice


def test_detectable_bias_is_4_84_standard_errors_at_the_lessons_threshold():
    assert detectable_bias(0.001) == pytest.approx(4.8416e-3, rel=1e-4)
    assert detectable_bias(np.array([1.0, 2.0]), z_threshold=2.0, power=0.5) == pytest.approx([2.0, 4.0])


@pytest.mark.parametrize("call, message", [
    (lambda: clustered_difference_se([1.0, 2.0, 3.0], [True, True, True], [0, 1, 2]), "each kind"),
    (lambda: clustered_difference_se([1.0, 2.0], [True], [0, 1]), "one bool per value"),
    (lambda: clustered_difference_se([1.0, 2.0], [True, False], [0, 0]), "two clusters"),
    (lambda: detectable_bias(0.1, power=1.0), "power"),
    (lambda: detectable_bias(-0.1), "se"),
    (lambda: detectable_bias(0.1, z_threshold=0), "z_threshold"),
])
def test_difference_and_bias_helpers_name_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()

def test_paired_pass_at_k_difference_is_the_mean_of_per_prompt_gaps_clustered_by_prompt():
    from rlbook.evidence import paired_pass_at_k_difference, pass_at_k_with_se

    rng = np.random.default_rng(0)
    rates = rng.uniform(0, 1, size=40)
    a = (rng.uniform(size=(40, 4)) < np.minimum(rates + 0.2, 1)[:, None]).astype(int)
    b = (rng.uniform(size=(40, 16)) < rates[:, None]).astype(int)
    gap, se = paired_pass_at_k_difference(a, b, 4)
    assert gap == pytest.approx(pass_at_k_with_se(a, 4)[0] - pass_at_k_with_se(b, 4)[0])
    # pairing removes the spread between prompts: smaller than the two separate SEs combined
    assert 0 < se < math.hypot(pass_at_k_with_se(a, 4)[1], pass_at_k_with_se(b, 4)[1])
    assert paired_pass_at_k_difference(b, b, 4) == (0.0, 0.0)
    with pytest.raises(ValueError, match="correct_b"):
        paired_pass_at_k_difference(a, b[:10], 4)
    with pytest.raises(ValueError, match="k"):
        paired_pass_at_k_difference(a, b, 8)


def test_pooled_pass_at_k_difference_averages_seeds_per_prompt_and_counts_the_shared_table_once():
    from rlbook.evidence import clustered_se, paired_pass_at_k_difference, pooled_pass_at_k_difference
    from rlbook.metrics import pass_at_k_per_prompt

    rng = np.random.default_rng(1)
    rates = rng.uniform(0, 1, size=30)
    base = (rng.uniform(size=(30, 16)) < rates[:, None]).astype(int)
    seeds = [(rng.uniform(size=(30, 8)) < np.minimum(rates + 0.1, 1)[:, None]).astype(int) for _ in range(3)]
    gap, se = pooled_pass_at_k_difference(seeds, base, 4)
    # the mean of the seeds' own paired gaps, and the SE of the per-prompt seed-mean minus the base
    assert gap == pytest.approx(np.mean([paired_pass_at_k_difference(t, base, 4)[0] for t in seeds]))
    per_prompt = np.mean([pass_at_k_per_prompt(t, 4) for t in seeds], axis=0) - np.asarray(pass_at_k_per_prompt(base, 4))
    assert se == pytest.approx(clustered_se(per_prompt, range(30)))
    assert pooled_pass_at_k_difference([seeds[0]], base, 4) == pytest.approx(paired_pass_at_k_difference(seeds[0], base, 4))
    assert pooled_pass_at_k_difference((t for t in seeds), base, 4) == pytest.approx((gap, se))  # any iterable
    with pytest.raises(ValueError, match="seed_tables"):
        pooled_pass_at_k_difference([], base, 4)
    with pytest.raises(ValueError, match="one row per prompt"):
        pooled_pass_at_k_difference([seeds[0][:10]], base, 4)


def test_paired_minimum_detectable_difference_uses_t_quantiles():
    import math

    import pytest

    from rlbook.evidence import _t_quantile, paired_minimum_detectable_difference

    assert _t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-3)  # tables of Student's t
    assert _t_quantile(0.8, 2) == pytest.approx(1.0607, abs=1e-3)
    assert _t_quantile(0.975, 10_000) == pytest.approx(1.960, abs=1e-3)
    differences = [0.185, 0.009, 0.089]
    sd = float(np.std(differences, ddof=1))
    assert paired_minimum_detectable_difference(differences) == pytest.approx((4.3027 + 1.0607) * sd / math.sqrt(3),
                                                                              rel=1e-3)
    with pytest.raises(ValueError, match="differences"):
        paired_minimum_detectable_difference([0.1])
    with pytest.raises(ValueError, match="power"):
        paired_minimum_detectable_difference(differences, power=1.2)


def test_critical_correlation_matches_the_tables_of_r():
    from rlbook.evidence import critical_correlation

    assert critical_correlation(20) == pytest.approx(0.3783, abs=1e-3)  # one-tailed 5 %, df = 18
    assert critical_correlation(12) == pytest.approx(0.4973, abs=1e-3)  # df = 10
    assert critical_correlation(20, level=0.025) == pytest.approx(0.4438, abs=1e-3)  # = two-tailed 5 %
    for bad in (2, 2.5, True):
        with pytest.raises(ValueError, match="n must"):
            critical_correlation(bad)
    with pytest.raises(ValueError, match="level"):
        critical_correlation(20, level=0.9)


def test_the_paired_sign_test_is_the_binomial_tail_and_drops_ties():
    from rlbook.evidence import paired_sign_test
    assert paired_sign_test([0.03, 0.05, 0.05, 0.001, 0.04]) == pytest.approx(1 / 32)
    assert paired_sign_test([0.03, -0.05, 0.05, 0.001, 0.04]) == pytest.approx(6 / 32)
    assert paired_sign_test([0.03, 0.0, 0.05]) == pytest.approx(1 / 4)  # the tie is dropped: 2 of 2
    assert paired_sign_test([-1.0, -2.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="non-zero"):
        paired_sign_test([0.0, 0.0])


def test_seed_mean_interval_is_the_student_t_interval():
    from rlbook.evidence import seed_mean_interval

    mean, low, high = seed_mean_interval([0.258, 0.172, 0.143])
    sd = np.std([0.258, 0.172, 0.143], ddof=1)
    assert mean == pytest.approx(0.191, abs=1e-3)
    assert (high - mean) == pytest.approx(4.303 * sd / math.sqrt(3), rel=1e-3)  # t(2) at 97.5 %
    assert (mean - low) == pytest.approx(high - mean)
    assert seed_mean_interval([1.0, 3.0], level=0.5)[2] == pytest.approx(2.0 + 1.0 * 1.0)  # t(1) at 75 % is 1
    with pytest.raises(ValueError, match="two"):
        seed_mean_interval([0.1])
    with pytest.raises(ValueError, match="level"):
        seed_mean_interval([0.1, 0.2], level=95)


def test_paired_t_test_matches_student_t_tables():
    from rlbook.evidence import paired_t_test

    # t = 3.0649 on 2 df: the table's one-sided 5 % point is 2.920, the 2.5 % point 4.303
    result = paired_t_test([0.0025, 0.0061, 0.0092])
    assert abs(result["t"] - 3.0649) < 1e-3
    assert abs(result["p_one_sided"] - 0.0460) < 5e-4 and abs(result["p_two_sided"] - 0.0920) < 1e-3
    # at the table's critical value t(0.95, 4) = 2.132 the one-sided p is 5 %: differences with mean/(sd/√5) = 2.132
    d = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    d = d + 2.132 * d.std(ddof=1) / np.sqrt(5)
    assert abs(paired_t_test(d)["p_one_sided"] - 0.05) < 5e-4
    assert paired_t_test(-d)["p_one_sided"] > 0.9                   # the other direction
    with pytest.raises(ValueError, match="at least 2"):
        paired_t_test([0.1])
    with pytest.raises(ValueError, match="spread"):
        paired_t_test([0.1, 0.1])


def test_cluster_t_critical_uses_g_minus_one_degrees_of_freedom():
    from rlbook.evidence import cluster_t_critical
    assert cluster_t_critical(["a", "b", "c", "d", "e", "a"]) == pytest.approx(2.776, abs=1e-3)   # t_4, 97.5 %
    assert cluster_t_critical(np.arange(1000) % 500) == pytest.approx(1.965, abs=2e-3)           # near the normal 1.96
    assert cluster_t_critical(["a", "b"], level=0.9) == pytest.approx(6.314, abs=1e-3)           # t_1, 95 %
    with pytest.raises(ValueError, match="two clusters"):
        cluster_t_critical(["a", "a"])


def test_jackknife_se_of_the_mean_is_the_usual_standard_error():
    from rlbook.evidence import jackknife_se

    x = np.array([0.3, 1.7, 2.2, -0.4, 0.9, 1.1])
    leave_outs = [np.delete(x, i).mean() for i in range(x.size)]
    assert jackknife_se(leave_outs) == pytest.approx(x.std(ddof=1) / np.sqrt(x.size))
    with pytest.raises(ValueError, match="at least 2"):
        jackknife_se([1.0])


def test_clustered_se_with_one_cluster_raises_or_gives_nan():
    with pytest.raises(ValueError, match="two clusters"):
        clustered_se([0.0, 1.0], ["a", "a"])
    assert math.isnan(clustered_se([0.0, 1.0], ["a", "a"], one_cluster_nan=True))
    assert clustered_se([0.0, 1.0], ["a", "b"], one_cluster_nan=True) == clustered_se([0.0, 1.0], ["a", "b"])


def test_clustered_slope_recovers_the_slope_and_is_the_difference_for_a_0_1_regressor():
    from rlbook.evidence import clustered_difference_se, clustered_slope

    rng = np.random.default_rng(0)
    clusters = np.repeat(np.arange(400), 4)
    shared = np.repeat(rng.normal(size=400), 4)                      # a prompt effect shared by its 4 samples
    x = rng.normal(size=clusters.size)
    y = 0.5 * x + shared + rng.normal(size=clusters.size)
    slope, se = clustered_slope(x, y, clusters)
    assert abs(slope - 0.5) < 3 * se and 0 < se < 0.05
    kind = x > 0
    assert np.allclose(clustered_slope(kind.astype(float), y, clusters), clustered_difference_se(y, kind, clusters))
    with pytest.raises(ValueError, match="constant"):
        clustered_slope(np.ones(8), y[:8], clusters[:8])
    with pytest.raises(ValueError, match="one length"):
        clustered_slope(x[:5], y[:6], clusters[:6])


def test_clustered_slope_se_matches_the_spread_of_simulated_slopes_with_shared_clusters():
    from rlbook.evidence import clustered_slope

    rng = np.random.default_rng(1)
    clusters = np.repeat(np.arange(60), 5)
    slopes, ses = [], []
    for _ in range(400):
        x = np.repeat(rng.normal(size=60), 5) + 0.3 * rng.normal(size=300)   # x, too, shared within a cluster
        y = 0.2 * x + np.repeat(rng.normal(size=60), 5) + rng.normal(size=300)
        slope, se = clustered_slope(x, y, clusters)
        slopes.append(slope)
        ses.append(se)
    assert abs(np.std(slopes) / np.mean(ses) - 1) < 0.15


def test_exact_binomial_interval_is_clopper_pearson():
    from rlbook.evidence import exact_binomial_interval

    low, high = exact_binomial_interval(64, 64)
    assert high == 1.0 and math.isclose(low, 0.025 ** (1 / 64), rel_tol=1e-9)
    assert exact_binomial_interval(0, 10) == (0.0, 1 - exact_binomial_interval(10, 10)[0])
    low, high = exact_binomial_interval(5, 10)                     # the tabled 95 % interval: 0.187 to 0.813
    assert math.isclose(low, 0.18709, abs_tol=1e-4) and math.isclose(high, 0.81291, abs_tol=1e-4)
    low90, high90 = exact_binomial_interval(5, 10, level=0.9)
    assert low < low90 < high90 < high
    for bad in [(11, 10), (-1, 10), (1, 0)]:
        with pytest.raises(ValueError):
            exact_binomial_interval(*bad)


def test_minimum_detectable_difference_with_t_quantiles():
    from rlbook.evidence import minimum_detectable_difference

    normal = minimum_detectable_difference(1.0, 3, 3)
    t_based = minimum_detectable_difference(1.0, 3, 3, t_quantiles=True)
    assert math.isclose(t_based / normal, (2.7764 + 0.9410) / 2.8016, rel_tol=1e-3)   # t(4) quantiles 0.975 and 0.8
    big = minimum_detectable_difference(1.0, 500, 500, t_quantiles=True)
    assert math.isclose(big, minimum_detectable_difference(1.0, 500, 500), rel_tol=2e-3)


def test_separation_power_is_the_permutation_level_at_no_gap_and_rises_with_the_gap():
    from math import comb

    from rlbook.evidence import separation_power
    assert separation_power(0.0, 1.0, 6, 6) == pytest.approx(1 / comb(12, 6), rel=1e-6)
    assert separation_power(0.0, 0.5, 3, 4) == pytest.approx(1 / comb(7, 3), rel=1e-6)
    powers = [separation_power(gap, 0.06, 6, 6) for gap in (0.0, 0.05, 0.1, 0.2, 0.4)]
    assert powers == sorted(powers) and powers[-1] > 0.99


def test_separation_power_matches_a_simulation():
    from rlbook.evidence import separation_power
    rng = np.random.default_rng(0)
    a = rng.normal(0.15, 0.06, size=(100_000, 6))
    b = rng.normal(0.0, 0.06, size=(100_000, 6))
    simulated = (a.min(axis=1) > b.max(axis=1)).mean()
    assert separation_power(0.15, 0.06, 6, 6) == pytest.approx(simulated, abs=4 * np.sqrt(0.25 / 100_000))


def test_separation_detectable_gap_solves_for_the_power_and_exceeds_the_t_tests():
    from rlbook.evidence import minimum_detectable_difference, separation_detectable_gap, separation_power
    gap = separation_detectable_gap(0.06, 6, 6)
    assert separation_power(gap, 0.06, 6, 6) == pytest.approx(0.8, abs=1e-6)
    assert 3.1 < gap / 0.06 < 3.5                               # about 3.3 seed sds at 6 + 6 seeds
    assert gap > minimum_detectable_difference(0.06, 6, 6, t_quantiles=True)
    with pytest.raises(ValueError):
        separation_detectable_gap(0.06, 6, 6, power=1.0)
    with pytest.raises(ValueError):
        separation_power(0.1, 0.0, 6, 6)


def test_evaluation_noise_detectable_difference_is_the_paired_floor():
    from rlbook.evidence import evaluation_noise_detectable_difference
    sd = math.sqrt(2 * 0.75 * 0.25 / 256)
    assert evaluation_noise_detectable_difference(0.75, 256, 3) == pytest.approx((4.3027 + 1.0607) * sd / math.sqrt(3),
                                                                                 abs=1e-3)
    assert evaluation_noise_detectable_difference(0.75, 256, 3) == pytest.approx(0.118, abs=1e-3)
    # more answers or more seeds give a finer resolution; p = 0.5 is the noisiest pass rate
    assert evaluation_noise_detectable_difference(0.75, 1024, 3) < evaluation_noise_detectable_difference(0.75, 256, 3)
    assert evaluation_noise_detectable_difference(0.75, 256, 10) < evaluation_noise_detectable_difference(0.75, 256, 3)
    assert evaluation_noise_detectable_difference(0.5, 256, 3) > evaluation_noise_detectable_difference(0.9, 256, 3)
    for bad in (dict(pass_rate=1.0), dict(answers=0), dict(seeds=1), dict(power=0.3)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            evaluation_noise_detectable_difference(**{"pass_rate": 0.5, "answers": 100, "seeds": 3, **bad})

def test_paired_mean_difference_pairs_prompts_and_matches_pass_at_1_on_binary_tables():
    import numpy as np
    from rlbook.evidence import clustered_se, paired_mean_difference, paired_pass_at_k_difference

    lengths_a = [[30, 28, 6], [6, 6, 6], [29, 31, 30]]
    lengths_b = [[6, 6], [6, 30], [28, 6]]
    gap, se = paired_mean_difference(lengths_a, lengths_b)
    per_prompt = np.array([64 / 3 - 6, 6 - 18, 30 - 17])
    assert gap == pytest.approx(per_prompt.mean())
    assert se == pytest.approx(clustered_se(per_prompt, range(3)))
    correct_a, correct_b = [[1, 0, 1], [0, 0, 1]], [[1, 1], [0, 0]]
    assert paired_mean_difference(correct_a, correct_b) == pytest.approx(
        paired_pass_at_k_difference(correct_a, correct_b, 1))
    # a constant shift on every prompt has no spread between prompts: SE 0
    assert paired_mean_difference([[5, 7], [1, 3]], [[4, 6], [0, 2]]) == pytest.approx((1.0, 0.0))
    with pytest.raises(ValueError, match="same prompts"):
        paired_mean_difference([[1, 2]], [[1], [2]])
    with pytest.raises(ValueError, match="finite"):
        paired_mean_difference([[1, float("nan")], [1, 2]], [[1], [2]])
