"""The exactly solvable toys: each closed form against autograd or a large sample."""

import math

import pytest
import torch

from rlbook import toys
from rlbook.kl import kl_estimate

BANDIT = toys.GaussianBandit(means=(1.0, 1.4, 2.0, 0.6, 1.2), noise=0.5)
LOGITS = torch.tensor([0.5, 0.0, -0.5, 1.0, 0.0], dtype=torch.float64)
REF = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05], dtype=torch.float64)
REWARDS = torch.tensor([0.0, 0.2, 0.5, 0.8, 1.0], dtype=torch.float64)


def test_exact_gradient_is_the_autograd_gradient_of_the_expected_reward():
    theta = LOGITS.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(toys.expected_reward(BANDIT, theta), theta)
    assert torch.allclose(toys.exact_gradient(BANDIT, LOGITS), gradient, atol=1e-12)


def test_score_function_is_the_gradient_of_log_softmax():
    theta = LOGITS.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(torch.log_softmax(theta, 0)[3], theta)
    assert torch.allclose(toys.score_function(LOGITS, torch.tensor(3)), gradient, atol=1e-12)


@pytest.mark.parametrize("baseline", toys.BASELINES)
def test_reinforce_estimates_are_unbiased(baseline):
    estimates = toys.reinforce_estimates(BANDIT, LOGITS, batch_size=8, num_estimates=20_000, baseline=baseline, seed=0)
    z = (estimates.mean(0) - toys.exact_gradient(BANDIT, LOGITS)) / (estimates.std(0) / math.sqrt(20_000))
    assert z.abs().max() < 4.5


@pytest.mark.parametrize("baseline", ["none", "value"])
def test_exact_variance_matches_sampling(baseline):
    value = float(toys.expected_reward(BANDIT, LOGITS)) if baseline == "value" else 0.0
    estimates = toys.reinforce_estimates(BANDIT, LOGITS, batch_size=1, num_estimates=100_000, baseline=baseline, seed=1)
    per_arm = toys.exact_gradient_variance(BANDIT, LOGITS, value, per_arm=True)
    assert float(per_arm.sum()) == pytest.approx(toys.exact_gradient_variance(BANDIT, LOGITS, value))
    assert torch.allclose(estimates.var(0), per_arm, rtol=0.05)


def test_sample_batches_are_the_pulls_behind_the_estimates():
    arms, rewards = toys.sample_batches(BANDIT, LOGITS, batch_size=5, num_estimates=7, seed=3)
    estimates = toys.reinforce_estimates(BANDIT, LOGITS, batch_size=5, num_estimates=7, baseline="none", seed=3)
    by_hand = (rewards.unsqueeze(-1) * toys.score_function(LOGITS, arms)).mean(1)
    assert arms.shape == rewards.shape == (7, 5) and torch.allclose(estimates, by_hand, atol=1e-12)


def test_exact_covariance_matches_sampling():
    value = float(toys.expected_reward(BANDIT, LOGITS))
    estimates = toys.reinforce_estimates(BANDIT, LOGITS, batch_size=1, num_estimates=200_000, baseline="value", seed=4)
    covariance = toys.exact_gradient_covariance(BANDIT, LOGITS, value)
    assert torch.allclose(torch.cov(estimates.T), covariance, atol=0.004)
    assert float(covariance.trace()) == pytest.approx(toys.exact_gradient_variance(BANDIT, LOGITS, value))


@pytest.mark.parametrize("batch_size", [2, 3, 8])
@pytest.mark.parametrize("baseline", toys.BASELINES)
def test_exact_estimate_variance_matches_sampling(baseline, batch_size):
    estimates = toys.reinforce_estimates(BANDIT, LOGITS, batch_size=batch_size, num_estimates=100_000,
                                         baseline=baseline, seed=5)
    exact = toys.exact_estimate_variance(BANDIT, LOGITS, batch_size=batch_size, baseline=baseline)
    assert toys.total_variance(estimates) == pytest.approx(exact, rel=0.02)


def test_leave_one_out_variance_lies_above_the_value_baselines_and_meets_it():
    ratio = lambda n: (toys.exact_estimate_variance(BANDIT, LOGITS, batch_size=n, baseline="leave_one_out")  # noqa: E731
                       / toys.exact_estimate_variance(BANDIT, LOGITS, batch_size=n, baseline="value"))
    ratios = [ratio(n) for n in (2, 4, 16, 256, 4096)]
    assert all(a > b > 1 for a, b in zip(ratios, ratios[1:])) and ratios[-1] == pytest.approx(1, abs=1e-3)
    with pytest.raises(ValueError, match="batch_size >= 2"):
        toys.exact_estimate_variance(BANDIT, LOGITS, batch_size=1, baseline="leave_one_out")


@pytest.mark.parametrize("baseline", toys.BASELINES)
def test_unsampled_arm_push_matches_sampling(baseline):
    arms, _ = toys.sample_batches(BANDIT, LOGITS, batch_size=4, num_estimates=100_000, seed=6)
    estimates = toys.reinforce_estimates(BANDIT, LOGITS, batch_size=4, num_estimates=100_000, baseline=baseline, seed=6)
    missed = (arms != 2).all(1)
    push = toys.unsampled_arm_push(BANDIT, LOGITS, 2, batch_size=4, baseline=baseline)
    assert float(missed.double().mean()) == pytest.approx(push["probability"], abs=0.006)
    assert float(estimates[missed, 2].mean()) == pytest.approx(push["mean_push"], abs=0.002)
    if baseline == "leave_one_out":  # every such batch, not only on average
        assert float(estimates[missed, 2].abs().max()) < 1e-12
    with pytest.raises(ValueError, match="arm"):
        toys.unsampled_arm_push(BANDIT, LOGITS, 5, batch_size=4, baseline=baseline)


def test_reward_to_go_variances_match_sampling():
    generator = torch.Generator().manual_seed(7)
    arms = toys.sample_arms(LOGITS, (200_000, 2), generator)
    r = BANDIT.pull(arms, generator)
    s = toys.score_function(LOGITS, arms)
    total = r.sum(1, keepdim=True)
    sampled = {"whole return": total * (s[:, 0] + s[:, 1]), "reward-to-go": total * s[:, 0] + r[:, 1:] * s[:, 1],
               "dropped term": r[:, :1] * s[:, 1]}
    exact = toys.reward_to_go_variances(BANDIT, LOGITS)
    for name, estimates in sampled.items():
        assert toys.total_variance(estimates) == pytest.approx(exact[name], rel=0.02), name


def test_total_variance_ratio_of_paired_estimates():
    none = toys.reinforce_estimates(BANDIT, LOGITS, batch_size=4, num_estimates=20_000, baseline="none", seed=8)
    value = toys.reinforce_estimates(BANDIT, LOGITS, batch_size=4, num_estimates=20_000, baseline="value", seed=8)
    ratio, se = toys.total_variance_ratio(none, value)
    assert ratio == pytest.approx(toys.total_variance(none) / toys.total_variance(value))
    exact = (toys.exact_estimate_variance(BANDIT, LOGITS, batch_size=4, baseline="none")
             / toys.exact_estimate_variance(BANDIT, LOGITS, batch_size=4, baseline="value"))
    assert 0 < se < 0.05 and abs(ratio - exact) < 4 * se
    with pytest.raises(ValueError, match="paired"):
        toys.total_variance_ratio(none, value[:10])


def test_optimal_constant_baseline_minimises_the_exact_variance():
    best = toys.optimal_constant_baseline(BANDIT, LOGITS)
    variance = lambda b: toys.exact_gradient_variance(BANDIT, LOGITS, b)  # noqa: E731
    assert variance(best) < variance(best - 0.01) and variance(best) < variance(best + 0.01)
    assert variance(best) <= variance(float(toys.expected_reward(BANDIT, LOGITS)))


def test_leave_one_out_baseline_excludes_the_sample_itself():
    rewards = torch.tensor([[1.0, 2.0, 6.0]])
    assert torch.allclose(toys.baseline_values(rewards, "leave_one_out"), torch.tensor([[4.0, 3.5, 1.5]]))
    with pytest.raises(ValueError, match="batch_size >= 2"):
        toys.baseline_values(torch.ones(2, 1), "leave_one_out")
    with pytest.raises(ValueError, match="baseline"):
        toys.baseline_values(rewards, "mean")


def test_group_mean_baseline_is_the_shrunk_leave_one_out_and_a_bias_test_catches_it():
    rewards = torch.tensor([[1.0, 2.0, 6.0]])
    assert torch.allclose(toys.baseline_values(rewards, "group_mean"), torch.full((1, 3), 3.0))
    loo = rewards - toys.baseline_values(rewards, "leave_one_out")
    assert torch.allclose(rewards - toys.baseline_values(rewards, "group_mean"), (2 / 3) * loo)  # (N − 1)/N
    estimates = toys.reinforce_estimates(BANDIT, LOGITS, batch_size=4, num_estimates=20_000,
                                         baseline="group_mean", seed=0)
    exact = toys.exact_gradient(BANDIT, LOGITS)
    z_shrunk, _ = toys.z_scores(estimates, 0.75 * exact)   # E ĝ = (1 − 1/N) ∇J
    z_exact, _ = toys.z_scores(estimates, exact)
    assert float(z_shrunk.abs().max()) < 4 < float(z_exact.abs().max())
    with pytest.raises(ValueError, match="baseline"):
        toys.exact_estimate_variance(BANDIT, LOGITS, batch_size=4, baseline="group_mean")


def test_z_scores_are_the_distance_in_standard_errors_and_check_shapes():
    estimates = torch.tensor([[0.0, 1.0], [2.0, 3.0]], dtype=torch.float64)
    z, se = toys.z_scores(estimates, torch.tensor([0.0, 0.0], dtype=torch.float64))
    assert torch.allclose(se, torch.full((2,), math.sqrt(2) / math.sqrt(2), dtype=torch.float64))
    assert torch.allclose(z, torch.tensor([1.0, 2.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="target"):
        toys.z_scores(estimates, torch.zeros(3))
    with pytest.raises(ValueError, match="estimates"):
        toys.z_scores(estimates[:1], torch.zeros(2))


def test_train_bandit_shapes_and_improvement():
    history = toys.train_bandit(BANDIT, LOGITS, steps=30, batch_size=4, lr=0.5, baseline="value", num_runs=8, seed=0)
    assert history.shape == (8, 31)
    assert float(history[:, -1].mean()) > float(history[:, 0].mean())
    again, final_policy = toys.train_bandit(BANDIT, LOGITS, steps=30, batch_size=4, lr=0.5, baseline="value",
                                            num_runs=8, seed=0, return_policy=True)
    assert torch.equal(again, history) and final_policy.shape == (8, 5)
    assert torch.allclose((final_policy * BANDIT.mean_tensor).sum(1), history[:, -1], atol=1e-12)


def test_bandit_rejects_bad_input():
    with pytest.raises(ValueError, match="means"):
        toys.GaussianBandit(means=(1.0,))
    with pytest.raises(ValueError, match="logits"):
        toys.exact_gradient(BANDIT, torch.zeros(3))


def test_gaussian_kl_closed_form():
    assert toys.gaussian_kl(0.0, 1.0, 1.0, 1.0) == pytest.approx(0.5)
    assert toys.gaussian_kl(0.3, 1.2, 0.3, 1.2) == pytest.approx(0.0, abs=1e-12)
    # against a large sample of k1 = log q − log p
    estimates = toys.sample_kl_estimates(0.4, 1.5, n_samples=400_000, seed=0)
    assert float(estimates["k1"].mean()) == pytest.approx(toys.gaussian_kl(0.0, 1.0, 0.4, 1.5), rel=0.02)


@pytest.mark.parametrize("mu", [0.1, 1.0])
def test_kl_table_closed_form_matches_sampling(mu):
    exact = toys.kl_estimator_table_exact(mu)
    measured = toys.kl_estimator_table_monte_carlo(mu, n_samples=400_000, seed=0)
    assert measured["true_kl"]["value"] == pytest.approx(mu**2 / 2)
    for name in ("k1", "k2", "k3"):
        assert measured[name]["stdev/true"] == pytest.approx(exact[name]["stdev/true"], rel=0.05)
        assert abs(measured[name]["bias/true"] - exact[name]["bias/true"]) < 5 * measured[name]["bias_se/true"]


def test_kl_table_matches_schulman_2020():
    # The numbers of Schulman's blog note, to the digits it printed.
    small, large = toys.kl_estimator_table_exact(0.1), toys.kl_estimator_table_exact(1.0)
    assert small["k1"]["stdev/true"] == pytest.approx(20)
    assert small["k2"]["stdev/true"] == pytest.approx(1.42, abs=0.005)
    assert small["k3"]["stdev/true"] == pytest.approx(1.42, abs=0.005)
    assert large["k2"]["bias/true"] == pytest.approx(0.25)
    assert large["k2"]["stdev/true"] == pytest.approx(1.73, abs=0.005)
    assert large["k3"]["stdev/true"] == pytest.approx(1.7, abs=0.01)
    with pytest.raises(ValueError, match="mu"):
        toys.kl_estimator_table_exact(0.0)


@pytest.mark.parametrize("mu", [0.1, 0.5, 1.0, 3.0])
def test_kl_table_any_sigma_is_the_sigma_one_table_at_sigma_one(mu):
    general, exact = toys.kl_estimator_table_any_sigma(mu, 1.0), toys.kl_estimator_table_exact(mu)
    for name in ("k1", "k2", "k3"):
        for column in ("bias/true", "stdev/true"):
            assert general[name][column] == pytest.approx(exact[name][column], rel=1e-9, abs=1e-12)


def _quadrature_moments(mu, sigma, estimator):
    """E and stdev of an estimator under x ~ N(0, 1), by a fine Riemann sum (tails negligible here)."""
    x = torch.linspace(-30, 30, 600_001, dtype=torch.float64)
    logp, ref_logp = toys.gaussian_log_density(x, 0.0, 1.0), toys.gaussian_log_density(x, mu, sigma)
    values = kl_estimate(logp, ref_logp, estimator)
    weights = logp.exp() * (x[1] - x[0])
    mean = float((weights * values).sum())
    return mean, math.sqrt(float((weights * values**2).sum()) - mean**2)


@pytest.mark.parametrize("mu, sigma", [(0.5, 0.7), (1.0, 1.2), (0.5, 1.3), (0.0, 1.3)])
def test_kl_table_any_sigma_matches_quadrature(mu, sigma):
    table = toys.kl_estimator_table_any_sigma(mu, sigma)
    kl = toys.gaussian_kl(0.0, 1.0, mu, sigma)
    assert table["true_kl"]["value"] == pytest.approx(kl)
    for name in ("k1", "k2", "k3"):
        mean, stdev = _quadrature_moments(mu, sigma, name)
        assert table[name]["bias/true"] == pytest.approx(mean / kl - 1, abs=1e-7), name
        assert table[name]["stdev/true"] == pytest.approx(stdev / kl, rel=1e-6), name


def test_kl_table_any_sigma_wide_reference_and_bad_input():
    wide = toys.kl_estimator_table_any_sigma(0.5, 2.0)
    assert wide["k3"]["stdev/true"] == math.inf          # E[r²] = ∫ π_ref²/π_θ diverges for σ² ≥ 2
    assert math.isfinite(wide["k1"]["stdev/true"]) and wide["k2"]["bias/true"] < 0  # k2 biased *down*
    with pytest.raises(ValueError, match="sigma"):
        toys.kl_estimator_table_any_sigma(0.5, 0.0)
    with pytest.raises(ValueError, match="KL 0"):
        toys.kl_estimator_table_any_sigma(0.0, 1.0)


def test_k1_k3_spread_crossover():
    mu = toys.k1_k3_spread_crossover()
    assert math.exp(mu**2) == pytest.approx(1 + 2 * mu**2)
    below, above = toys.kl_estimator_table_exact(mu - 0.01), toys.kl_estimator_table_exact(mu + 0.01)
    assert below["k3"]["stdev/true"] < below["k1"]["stdev/true"]
    assert above["k3"]["stdev/true"] > above["k1"]["stdev/true"]


@pytest.mark.parametrize("sigma", [0.8, 0.9, 1.0, 1.1, 1.2])
def test_k1_k3_spread_crossover_for_any_width(sigma):
    # one sign change of stdev(k3) − stdev(k1) on a grid of μ, and the bisection finds it
    mus = [0.01 * i for i in range(1, 400)]
    signs = [toys.kl_estimator_table_any_sigma(mu, sigma)["k3"]["stdev/true"]
             > toys.kl_estimator_table_any_sigma(mu, sigma)["k1"]["stdev/true"] for mu in mus]
    changes = [mus[i] for i in range(1, len(mus)) if signs[i] != signs[i - 1]]
    assert len(changes) == 1 and not signs[0]
    mu = toys.k1_k3_spread_crossover(sigma=sigma)
    assert abs(mu - changes[0]) <= 0.011
    if sigma == 1.0:
        assert mu == pytest.approx(toys.k1_k3_spread_crossover(), abs=1e-12)


def test_k1_k3_spread_crossover_falls_with_the_reference_width():
    # the crossover KL is set by E_q[r²] (reference mass where the policy is thin), not by the KL level
    kls = [toys.gaussian_kl(0.0, 1.0, toys.k1_k3_spread_crossover(sigma=s), s) for s in (0.8, 1.0, 1.1, 1.2)]
    assert kls == sorted(kls, reverse=True) and kls[0] > 2.0 and kls[-1] < 0.06
    assert toys.k1_k3_spread_crossover(sigma=1.3) == 0.0  # k3 spreads more at every μ
    assert toys.k1_k3_spread_crossover(sigma=1.5) == 0.0  # and past σ² = 2 its variance is infinite
    with pytest.raises(ValueError, match="sigma"):
        toys.k1_k3_spread_crossover(sigma=0.0)


def test_k3_batch_mean_spread_separates_finite_from_infinite_variance():
    spread = toys.k3_batch_mean_spread(0.5, 2.0, batch_sizes=(500, 50_000), batches=100, seed=1, resamples=50)
    # k1 (finite variance): 100× the draws narrow the spread about 10×; k3 at σ = 2 (α = 4/3): about 100^{1/4}
    k1_shrink = spread[500]["k1"]["iqr/true"] / spread[50_000]["k1"]["iqr/true"]
    k3_shrink = spread[500]["k3"]["iqr/true"] / spread[50_000]["k3"]["iqr/true"]
    assert 6 < k1_shrink < 16 and k3_shrink < 5
    assert spread[50_000]["k3"]["below"] > 0.6 and spread[50_000]["k3"]["median/true"] < 0
    assert 0 < spread[500]["k3"]["log_iqr_se"] < 0.5
    again = toys.k3_batch_mean_spread(0.5, 2.0, batch_sizes=(500, 50_000), batches=100, seed=1, resamples=50)
    assert again == spread  # same seed, same numbers
    with pytest.raises(ValueError, match="batch_sizes"):
        toys.k3_batch_mean_spread(0.5, 2.0, batch_sizes=(), batches=10)
    with pytest.raises(ValueError, match="batches"):
        toys.k3_batch_mean_spread(0.5, 2.0, batch_sizes=(100,), batches=1)


def test_per_sample_gradients_and_their_variance():
    scores = toys.per_sample_estimator_gradients(LOGITS, REF, "k1")
    probs = torch.softmax(LOGITS, 0)
    assert torch.allclose(scores, torch.eye(5, dtype=torch.float64) - probs, atol=1e-14)  # ∇k1 = ∇log π = e_x − π
    k1 = (probs.log() - REF.log()).unsqueeze(1)
    # one token: ∇k2(x) = k1(x) ∇log π(x), sample by sample (k2 in the loss = k1 in the reward)
    assert torch.allclose(toys.per_sample_estimator_gradients(LOGITS, REF, "k2"), k1 * scores, atol=1e-14)
    ratio = (REF / probs).unsqueeze(1)
    assert torch.allclose(toys.per_sample_estimator_gradients(LOGITS, REF, "k3"), (1 - ratio) * scores, atol=1e-14)
    # the mean of the per-sample gradients is the expected gradient; the variance is the trace of their covariance
    for name in ("k1", "k2", "k3"):
        rows = toys.per_sample_estimator_gradients(LOGITS, REF, name)
        assert torch.allclose(probs @ rows, toys.expected_estimator_gradient(LOGITS, REF, name), atol=1e-14)
        centred = rows - probs @ rows
        assert toys.estimator_gradient_variance(LOGITS, REF, name) == pytest.approx(
            float((probs * (centred**2).sum(1)).sum()), rel=1e-12)
    # where the policy has starved an outcome the reference likes, k3's coefficient (1 − r) explodes
    starved = torch.tensor([-6.0, 0.0, 0.0, 1.0, 2.0], dtype=torch.float64)
    assert (toys.estimator_gradient_variance(starved, REF, "k3")
            > 100 * toys.estimator_gradient_variance(starved, REF, "k2"))


def test_monte_carlo_table_standard_errors():
    # Over 40 seeds, the reported standard errors match the seed-to-seed spread of what they describe.
    tables = [toys.kl_estimator_table_monte_carlo(0.5, n_samples=20_000, seed=seed) for seed in range(40)]
    for name, column, se_column in (("k1", "bias/true", "bias_se/true"), ("k1", "stdev/true", "stdev_se/true"),
                                    ("k2", "stdev/true", "stdev_se/true"),
                                    ("k2", "bias_vs_k3/true", "bias_vs_k3_se/true")):
        spread = float(torch.tensor([t[name][column] for t in tables]).std())
        reported = sum(t[name][se_column] for t in tables) / len(tables)
        assert 0.7 < spread / reported < 1.4, (name, column, spread, reported)
    # close distributions: k2's bias measured against k3 on the same draws is far more precise than alone
    close = toys.kl_estimator_table_monte_carlo(0.1, n_samples=20_000, seed=0)
    assert close["k2"]["bias_vs_k3_se/true"] < close["k2"]["bias_se/true"] / 10
    assert "bias_vs_k3/true" not in close["k3"]


def test_off_policy_estimator_gradients():
    old = torch.softmax(torch.tensor([0.3, -0.2, 0.1, 0.0, 0.4], dtype=torch.float64), 0)
    k1_stale = toys.expected_estimator_gradient(LOGITS, REF, "k1", sampling_probs=old)
    # E_{π_old}[∇k1] = Σ π_old ∇log π_θ = −∇ KL(π_old ‖ π_θ): not zero once π_θ has moved
    assert torch.allclose(k1_stale, -toys.kl_gradient(LOGITS, old, "forward"), atol=1e-14)
    assert k1_stale.abs().max() > 0.05
    # at π_old = π_θ the stale expectation is the on-policy one
    on_policy = torch.softmax(LOGITS, 0)
    for name in ("k1", "k2", "k3"):
        assert torch.allclose(toys.expected_estimator_gradient(LOGITS, REF, name, sampling_probs=on_policy),
                              toys.expected_estimator_gradient(LOGITS, REF, name), atol=1e-14)
    # the ratio π_θ/π_old turns k1 and k3 into the reverse-KL gradient, stale or not
    reverse = toys.kl_gradient(LOGITS, REF, "reverse")
    for name in ("k1", "k3"):
        for sampler in (None, old):
            weighted = toys.expected_estimator_gradient(LOGITS, REF, name, sampling_probs=sampler,
                                                        importance_weighted=True)
            assert torch.allclose(weighted, reverse, atol=1e-14), (name, sampler)
    with pytest.raises(ValueError, match="sampling_probs"):
        toys.expected_estimator_gradient(LOGITS, REF, "k1", sampling_probs=torch.tensor([0.5, 0.5]))


def test_estimators_placed_in_the_reward():
    # detached k times the score: k1 gives the reverse-KL gradient, k3 (and k3+, same value) the reverse minus the forward
    reverse, forward = toys.kl_gradient(LOGITS, REF, "reverse"), toys.kl_gradient(LOGITS, REF, "forward")
    assert torch.allclose(toys.expected_estimator_gradient(LOGITS, REF, "k1", placement="reward"), reverse, atol=1e-14)
    for name in ("k3", "k3+"):
        in_reward = toys.expected_estimator_gradient(LOGITS, REF, name, placement="reward")
        assert torch.allclose(in_reward, reverse - forward, atol=1e-14), name
        assert (in_reward - reverse).abs().max() > 0.01
    # at π_θ = π_ref every estimator is 0 per sample: no pull
    assert torch.allclose(toys.expected_estimator_gradient(REF.log(), REF, "k2", placement="reward"),
                          torch.zeros(5, dtype=torch.float64), atol=1e-14)
    with pytest.raises(ValueError, match="placement"):
        toys.expected_estimator_gradient(LOGITS, REF, "k1", placement="advantage")
    with pytest.raises(ValueError, match="importance_weighted"):
        toys.expected_estimator_gradient(LOGITS, REF, "k1", placement="reward", importance_weighted=True)


def test_straight_through_placement_converges_to_the_tilt():
    final = toys.regularised_ascent(REF.log(), REF, REWARDS, beta=0.25, placement="k3+_in_loss", steps=300, lr=4.0)
    assert torch.allclose(final, toys.reverse_kl_optimum(REF, REWARDS, beta=0.25), atol=1e-6)


def test_estimator_gradients_follow_their_divergences():
    assert torch.allclose(toys.expected_estimator_gradient(LOGITS, REF, "k1"), torch.zeros(5, dtype=torch.float64), atol=1e-14)
    assert torch.allclose(toys.expected_estimator_gradient(LOGITS, REF, "k2"), toys.kl_gradient(LOGITS, REF, "reverse"))
    assert torch.allclose(toys.expected_estimator_gradient(LOGITS, REF, "k3"), toys.kl_gradient(LOGITS, REF, "forward"))


def test_placements_converge_to_their_optima():
    reverse = toys.reverse_kl_optimum(REF, REWARDS, beta=0.25)
    forward = toys.forward_kl_optimum(REF, REWARDS, beta=0.25)
    assert float(forward.sum()) == pytest.approx(1.0)
    for placement, target in (("k1_in_reward", reverse), ("k2_in_loss", reverse), ("k3_in_loss", forward)):
        final = toys.regularised_ascent(REF.log(), REF, REWARDS, beta=0.25, placement=placement, steps=300, lr=4.0)
        assert torch.allclose(final, target, atol=1e-6), placement


def test_forward_kl_optimum_is_stationary():
    # The gradient of E[R] − β KL(π_ref ‖ π) vanishes at the optimum (in logit space).
    optimum = toys.forward_kl_optimum(REF, REWARDS, beta=0.25)
    theta = optimum.log().clone().requires_grad_(True)
    objective = (torch.softmax(theta, 0) * REWARDS).sum() - 0.25 * toys.forward_kl(theta, REF)
    (gradient,) = torch.autograd.grad(objective, theta)
    assert gradient.abs().max() < 1e-9


def test_categorical_inputs_are_checked():
    with pytest.raises(ValueError, match="ref_probs"):
        toys.reverse_kl(LOGITS, torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="placement"):
        toys.placement_gradient(LOGITS, REF, REWARDS, beta=0.1, placement="k2_in_reward")


def _regularised_objective(policy, ref_probs, rewards, beta):
    """E_π[r] − β KL(π ‖ π_ref)."""
    return float((policy * rewards).sum() - beta * (policy * (policy / ref_probs).log()).sum())


@pytest.mark.parametrize("beta", [0.05, 0.5, 1.0, 20.0])
def test_reverse_kl_optimum_is_normalised_and_beats_every_other_policy(beta):
    optimum = toys.reverse_kl_optimum(REF, REWARDS, beta=beta)
    assert torch.isclose(optimum.sum(), torch.tensor(1.0, dtype=torch.float64))
    # Its value is β log Z, and random policies do no better.
    log_z = torch.logsumexp(REF.log() + REWARDS / beta, 0)
    best = _regularised_objective(optimum, REF, REWARDS, beta)
    assert best == pytest.approx(beta * float(log_z), rel=1e-9, abs=1e-9)
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        other = torch.softmax(torch.randn(5, dtype=torch.float64, generator=generator) * 2, 0)
        assert _regularised_objective(other, REF, REWARDS, beta) <= best + 1e-12
    # Inverting it recovers the reward up to the constant β log Z (DPO's implicit reward).
    recovered = beta * (optimum / REF).log()
    torch.testing.assert_close(recovered - REWARDS, torch.full_like(REWARDS, -beta * float(log_z)))


def test_reverse_kl_optimum_limits_and_bad_input():
    assert torch.allclose(toys.reverse_kl_optimum(REF, REWARDS, beta=1e4), REF, atol=1e-3)  # β → ∞: π_ref
    greedy = toys.reverse_kl_optimum(REF, REWARDS, beta=1e-3)  # β → 0: the best response
    assert greedy.argmax() == REWARDS.argmax() and greedy[REWARDS.argmax()] > 0.999
    with pytest.raises(ValueError, match="ref_probs"):
        toys.reverse_kl_optimum([0.5, 0.6], [0.0, 1.0], beta=1.0)
    with pytest.raises(ValueError, match="rewards"):
        toys.reverse_kl_optimum([0.5, 0.5], [0.0, 1.0, 2.0], beta=1.0)
    with pytest.raises(ValueError, match="beta"):
        toys.reverse_kl_optimum([0.5, 0.5], [0.0, 1.0], beta=0.0)
    with pytest.raises(ValueError, match="rewards"):
        toys.forward_kl_optimum([0.5, 0.5], [0.0, 1.0, 2.0], beta=1.0)


def test_toy_policy_is_a_distribution_with_the_asked_reward_levels():
    probs, rewards = toys.toy_policy(12, temperature=0.5, seed=3)
    assert probs.sum().item() == pytest.approx(1.0) and (probs > 0).all()
    assert sorted(rewards.tolist()) == list(range(12))
    _, tied = toys.toy_policy(12, reward_levels=3, seed=3)
    assert sorted(set(tied.tolist())) == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="temperature"):
        toys.toy_policy(12, temperature=0.0)


def test_toy_margin_dynamics_dpo_grows_and_ipo_settles():
    dpo = toys.toy_margin_dynamics("dpo", steps=800, beta=0.5)
    ipo = toys.toy_margin_dynamics("ipo", steps=800, tau=0.25)
    assert dpo[0] == 0 and ipo[0] == 0  # both start at π = π_ref
    assert all(later > earlier for earlier, later in zip(dpo, dpo[1:]))  # DPO's margin only grows…
    assert dpo[-1] > 3 * (1 / (2 * 0.25))  # …far past IPO's target
    assert ipo[-1] == pytest.approx(1 / (2 * 0.25), rel=1e-3)  # IPO's settles on 1/(2τ)
    with pytest.raises(ValueError, match="loss"):
        toys.toy_margin_dynamics("kto")


def test_toy_margin_dynamics_under_adam():
    lr = 0.01
    dpo = toys.toy_margin_dynamics("dpo", steps=2000, beta=0.5, lr=lr, optimizer="adam")
    ipo = toys.toy_margin_dynamics("ipo", steps=2000, tau=0.25, lr=lr, optimizer="adam")
    # Adam's first step moves each of the pair's logits by lr whatever the gradient's size: h = 2 lr.
    assert dpo[1] == pytest.approx(2 * lr, rel=1e-3) and ipo[1] == pytest.approx(2 * lr, rel=1e-3)
    assert dpo[10] == pytest.approx(ipo[10], rel=0.02)  # the same first steps, though IPO's pull is 16x DPO's
    assert ipo[-1] == pytest.approx(2.0, abs=1e-3)  # the finite target survives Adam
    assert all(later > earlier for earlier, later in zip(dpo, dpo[1:]))
    # not the logarithm of gradient descent: doubling the steps adds more than ln 2 / β
    assert dpo[1999] - dpo[1000] > 1.5 * math.log(2) / 0.5
    with pytest.raises(ValueError, match="optimizer"):
        toys.toy_margin_dynamics("dpo", optimizer="sgd")


def test_monte_carlo_table_batch_means_stdev_se():
    # The batch-means SE of the sample stdev matches the seed-to-seed spread of the stdev, k3 included,
    # without the fourth-moment estimate the delta method needs.
    tables = [toys.kl_estimator_table_monte_carlo(0.5, n_samples=20_000, seed=seed, stdev_batches=40) for seed in range(40)]
    for name in ("k1", "k2", "k3"):
        spread = float(torch.tensor([t[name]["stdev/true"] for t in tables]).std())
        reported = sum(t[name]["stdev_batch_se/true"] for t in tables) / len(tables)
        assert 0.7 < spread / reported < 1.4, (name, spread, reported)
    with pytest.raises(ValueError, match="stdev_batches"):
        toys.kl_estimator_table_monte_carlo(0.5, n_samples=100, stdev_batches=60)


@pytest.mark.parametrize("mu, sigma", [(0.5, 2.0), (0.5, 1.3), (0.5, 1.0), (-0.7, 1.0), (0.0, 1.5)])
def test_ratio_survival_matches_a_large_sample(mu, sigma):
    thresholds = torch.tensor([0.5, 1.2, 3.0, 10.0, 50.0], dtype=torch.float64)
    exact = toys.ratio_survival(mu, sigma, thresholds)
    log_r = -toys.sample_kl_estimates(mu, sigma, n_samples=400_000, seed=3)["k1"]
    sampled = (log_r.unsqueeze(0) > thresholds.log().unsqueeze(1)).double().mean(1)
    se = (exact * (1 - exact) / 400_000).sqrt()
    assert bool(((sampled - exact).abs() <= 4 * se + 1e-6).all()), (exact, sampled)


def test_ratio_survival_has_the_power_tail_of_index_alpha():
    # P(r > t) ~ t^(−α) up to a slowly varying factor: the local slope approaches −α = −σ²/(σ² − 1) far out
    t = torch.tensor([1e30, 1e31], dtype=torch.float64)
    for sigma in (1.3, 2.0):
        s = toys.ratio_survival(0.5, sigma, t)
        slope = float((s[1].log() - s[0].log()) / (t[1].log() - t[0].log()))
        assert abs(slope + sigma**2 / (sigma**2 - 1)) < 0.05 * sigma**2 / (sigma**2 - 1), slope
    with pytest.raises(ValueError, match="at least 1"):
        toys.ratio_survival(0.5, 0.9, [2.0])
    with pytest.raises(ValueError, match="positive"):
        toys.ratio_survival(0.5, 2.0, [0.0, 2.0])


def test_below_share_decay_recovers_a_power_and_its_se():
    sizes = (100, 1_000, 10_000)
    shares = [0.5 + 0.4 * n**-0.3 for n in sizes]  # an excess fading exactly like n^(−0.3)
    fit = toys.below_share_decay(shares, sizes, 4_000)
    assert fit["slope"] == pytest.approx(-0.3, abs=1e-12)
    assert fit["excess"] == pytest.approx([s - 0.5 for s in shares])
    # two sizes: the slope's SE is the delta method's, √(Σ var(log e)) / Δ log n
    two = toys.below_share_decay(shares[::2], sizes[::2], [4_000, 1_000])
    var = [s * (1 - s) / (b * (s - 0.5) ** 2) for s, b in zip(shares[::2], (4_000, 1_000))]
    assert two["slope_se"] == pytest.approx(math.sqrt(sum(var)) / math.log(100), rel=1e-12)
    assert two["slope_se"] > fit["slope_se"]
    with pytest.raises(ValueError, match="share"):
        toys.below_share_decay([0.6, 0.45], (100, 1_000), 400)
    with pytest.raises(ValueError, match="two different sizes"):
        toys.below_share_decay([0.6, 0.55], (100, 100), 400)
    with pytest.raises(ValueError, match="one entry per size"):
        toys.below_share_decay([0.6, 0.55], (100, 1_000, 10_000), 400)
