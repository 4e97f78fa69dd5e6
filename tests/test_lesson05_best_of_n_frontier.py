"""Lesson 05's comparison of best-of-n with the KL-regularised optimum: the figure, and the facts the
lesson states as theorems (worked checks there) checked here on other toys."""

import math

import numpy as np
import pytest
import torch

from rlbook.toys import best_of_n_efficiency, optimum_at_kl, reverse_kl, reverse_kl_optimum, toy_policy
from rlbook.metrics import best_of_n_distribution, best_of_n_exact_kl
from rlbook.viz.rejection import plot_reward_kl_frontier


def _frontier(probs, rewards, betas):
    optima = [reverse_kl_optimum(probs, rewards, beta=float(b)) for b in betas]
    kl = np.array([float(reverse_kl(q.log(), probs)) for q in optima])
    gain = np.array([float(q @ rewards - probs @ rewards) for q in optima])
    return kl, gain


@pytest.mark.parametrize("seed,levels", [(1, None), (2, 4), (3, None)])
def test_best_of_n_never_beats_the_optimum_at_its_own_kl(seed, levels):
    probs, rewards = (t.double() for t in toy_policy(20, reward_levels=levels, seed=seed))
    for n in (2, 4, 16):
        best = best_of_n_distribution(probs, rewards, n).double()
        kl = best_of_n_exact_kl(probs, rewards, n)
        # The optimum at the β whose KL matches best-of-n's, found by bisection on log β.
        low, high = -6.0, 8.0
        for _ in range(80):
            middle = (low + high) / 2
            optimum = reverse_kl_optimum(probs, rewards, beta=float(np.exp(middle)))
            low, high = (low, middle) if float(reverse_kl(optimum.log(), probs)) < kl else (middle, high)
        optimum = reverse_kl_optimum(probs, rewards, beta=float(np.exp(high)))
        assert float(reverse_kl(optimum.log(), probs)) == pytest.approx(kl, abs=1e-6)
        assert float(best @ rewards) <= float(optimum @ rewards) + 1e-9
        # The library's search (bisection on 1/β) finds the same optimum.
        assert torch.allclose(optimum_at_kl(probs, rewards, kl), optimum, atol=1e-6)


def test_optimum_at_kl_hits_each_target_and_refuses_an_unreachable_one():
    probs, rewards = toy_policy(30, temperature=0.5, seed=4)
    targets = torch.tensor([0.0, 0.01, 0.7, 2.5])
    optima = optimum_at_kl(probs, rewards, targets)
    assert optima.shape == (4, 30) and torch.allclose(optima.sum(1), torch.ones(4, dtype=torch.float64))
    reached = torch.stack([reverse_kl(q.log(), probs) for q in optima])
    assert torch.allclose(reached, targets.double(), atol=1e-9)
    assert torch.allclose(optima[0], probs)  # KL 0: π_ref itself
    ceiling = -math.log(float(probs[rewards == rewards.max()].sum()))  # π_ref conditioned on the top reward
    assert float(optimum_at_kl(probs, rewards, ceiling)[rewards.argmax()]) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="kl"):
        optimum_at_kl(probs, rewards, ceiling + 0.01)
    with pytest.raises(ValueError, match="kl"):
        optimum_at_kl(probs, rewards, -0.1)


def test_best_of_n_efficiency_is_at_most_one_and_exactly_one_with_two_reward_levels():
    probs, rewards = toy_policy(30, seed=0)
    efficiency = best_of_n_efficiency(probs, rewards, [1, 2, 8, 64])
    assert np.isnan(efficiency["ratio"][0]) and efficiency["kl"][0] < 1e-12  # n = 1 is π: 0 / 0
    assert (efficiency["ratio"][1:] <= 1 + 1e-9).all() and (np.diff(efficiency["ratio"][1:]) > 0).all()
    np.testing.assert_allclose(efficiency["gain"][1:] / efficiency["optimum_gain"][1:], efficiency["ratio"][1:])
    # A 0/1 reward: best-of-n and π*_β are both π re-weighted between the two levels, so they coincide.
    probs, rewards = toy_policy(30, reward_levels=2, seed=5)
    np.testing.assert_allclose(best_of_n_efficiency(probs, rewards, [2, 8, 64])["ratio"], 1.0, atol=1e-9)
    with pytest.raises(ValueError, match="ns"):
        best_of_n_efficiency(probs, rewards, [0])


def test_frontier_figure_draws_the_curve_and_one_point_per_n():
    probs, rewards = (t.double() for t in toy_policy(30, seed=0))
    kl, gain = _frontier(probs, rewards, np.logspace(-1, 3, 50))
    ns = [1, 4, 16]
    fig = plot_reward_kl_frontier(kl, gain, ns, [best_of_n_exact_kl(probs, rewards, n) for n in ns],
                                  [float(best_of_n_distribution(probs, rewards, n) @ rewards - probs @ rewards)
                                   for n in ns])
    lines = fig.axes[0].get_lines()
    assert len(lines[0].get_xdata()) == 50 and np.all(np.diff(lines[0].get_xdata()) >= 0)  # drawn in KL order
    assert len(lines[1].get_xdata()) == 3 and [t.get_text() for t in fig.axes[0].texts] == ["n=1", "n=4", "n=16"]
    # Two points almost on top of each other get their labels on opposite sides.
    fig = plot_reward_kl_frontier(kl, gain, [128, 256], [3.5, 3.52], [17.1, 17.12])
    assert fig.axes[0].texts[0].xyann[1] < 0 < fig.axes[0].texts[1].xyann[1]
    with pytest.raises(ValueError, match="must match"):
        plot_reward_kl_frontier(kl, gain[:-1], ns, [0, 1, 2], [0, 1, 2])
    with pytest.raises(ValueError, match="must match"):
        plot_reward_kl_frontier(kl, gain, ns, [0, 1], [0, 1])


# ---------------------------------------------------------------- a 0/1 verifier over many prompts


def test_verifier_frontier_is_each_prompts_tilt_at_one_shared_beta():
    from rlbook.toys import verifier_frontier

    rates = [0.0, 0.1, 0.5, 1.0]
    frontier = verifier_frontier(rates, [0.0, 1.0, 50.0])
    assert frontier["kl"][0] == pytest.approx(0.0, abs=1e-15) and frontier["success"][0] == pytest.approx(0.4)
    # λ = 1: each moving prompt is π*_β of reverse_kl_optimum on its two outcomes, β = 1
    expected_kl, expected_success = 0.0, 0.0
    for p in rates:
        if 0 < p < 1:
            two = torch.tensor([p, 1 - p], dtype=torch.float64)
            optimum = reverse_kl_optimum(two, torch.tensor([1.0, 0.0], dtype=torch.float64), beta=1.0)
            expected_kl += float(reverse_kl(optimum.log(), two))
            expected_success += float(optimum[0])
        else:
            expected_success += p
    assert frontier["kl"][1] == pytest.approx(expected_kl / len(rates), abs=1e-12)
    assert frontier["success"][1] == pytest.approx(expected_success / len(rates), abs=1e-12)
    # λ → ∞: π conditioned on success where it can be, KL the mean log(1/p) of the prompts with p > 0
    assert frontier["kl"][2] == pytest.approx((math.log(10) + math.log(2)) / 4, abs=1e-9)
    assert frontier["success"][2] == pytest.approx(0.75, abs=1e-9)


def test_verifier_best_of_n_is_on_the_frontier_for_one_pass_rate_and_short_of_it_for_two():
    from rlbook.toys import verifier_best_of_n_efficiency, verifier_optimum_at_kl

    one = verifier_best_of_n_efficiency([0.3, 0.3, 0.3], [1, 2, 8, 32])
    assert np.isnan(one["ratio"][0])
    assert np.allclose(one["ratio"][1:], 1.0, atol=1e-7)  # one p: one n is one β, the frontier itself
    two = verifier_best_of_n_efficiency([0.1, 0.5], [2, 8, 64])
    assert (two["ratio"][:2] < 1 - 1e-3).all() and (two["ratio"] > 0.95).all()
    assert two["ratio"][1] == pytest.approx(0.9794, abs=1e-4)  # best-of-8 at p = 0.1 and 0.5
    assert two["ratio"][2] == pytest.approx(1.0, abs=1e-4)     # n = 64: both have conditioned on success
    # the frontier's success rises with the KL, and the KL ceiling is the mean log(1/p)
    success = verifier_optimum_at_kl([0.1, 0.5], [0.0, 0.5, 1.0])
    assert success[0] == pytest.approx(0.3) and success[0] < success[1] < success[2]
    with pytest.raises(ValueError, match="kl"):
        verifier_optimum_at_kl([0.1, 0.5], (math.log(10) + math.log(2)) / 2 + 0.01)


@pytest.mark.parametrize("call,message", [
    (lambda: __import__("rlbook.toys", fromlist=["x"]).verifier_frontier([], [1.0]), "pass_rates"),
    (lambda: __import__("rlbook.toys", fromlist=["x"]).verifier_frontier([1.5], [1.0]), "pass_rates"),
    (lambda: __import__("rlbook.toys", fromlist=["x"]).verifier_frontier([0.5], [-1.0]), "inverse_betas"),
    (lambda: __import__("rlbook.toys", fromlist=["x"]).verifier_best_of_n_efficiency([0.5], []), "ns"),
])
def test_verifier_functions_name_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_best_of_n_normal_efficiency_is_the_toy_frontier_of_a_discretised_normal_reward():
    from torch.distributions import Normal

    from rlbook.metrics import best_of_n_kl, best_of_n_normal_efficiency, expected_max_of_normals

    outcomes = 20_000   # π uniform over outcomes whose rewards are the normal's quantiles: a normal reward, finely cut
    rewards = Normal(0.0, 1.0).icdf((torch.arange(outcomes, dtype=torch.float64) + 0.5) / outcomes)
    probs = torch.full((outcomes,), 1.0 / outcomes, dtype=torch.float64)
    ns = [2, 4, 8]
    exact = best_of_n_efficiency(probs, rewards, ns)["ratio"]
    formula = [best_of_n_normal_efficiency(n) for n in ns]
    np.testing.assert_allclose(exact, formula, atol=1e-3)
    assert formula[0] == pytest.approx(expected_max_of_normals(2) / math.sqrt(2 * best_of_n_kl(2)))
    assert formula[0] == pytest.approx(0.9077, abs=1e-4) and np.all(np.diff(formula) > 0)
    assert math.isnan(best_of_n_normal_efficiency(1))
    with pytest.raises(ValueError, match="n"):
        best_of_n_normal_efficiency(0)


def test_success_conditioned_mode_part_against_an_exact_reference_opening_probability():
    from rlbook.kl import bernoulli_kl
    from rlbook.reasoning import success_conditioned_mode_split

    # prompt 0: q̂* = 3/4 of its right samples in the mode; prompt 1 never solved; prompt 2 always right, q̂* = 1/4
    in_mode = torch.tensor([[1, 1, 1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0]])
    correct = torch.tensor([[1, 1, 1, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
    exact_q = [0.4, 0.2, 0.3]
    split = success_conditioned_mode_split(in_mode, correct, reference_mode_prob=exact_q)
    by_hand = [float(bernoulli_kl(torch.tensor(0.75), torch.tensor(0.4))), 0.0,
               float(bernoulli_kl(torch.tensor(0.25), torch.tensor(0.3)))]
    assert split["mode_exact_reference"][0] == pytest.approx(np.mean(by_hand))
    assert split["mode"] == success_conditioned_mode_split(in_mode, correct)["mode"]   # the plug-in part is unchanged
    assert "mode_exact_reference" not in success_conditioned_mode_split(in_mode, correct)
    with pytest.raises(ValueError, match="reference_mode_prob"):
        success_conditioned_mode_split(in_mode, correct, reference_mode_prob=[0.4, 0.2])
    with pytest.raises(ValueError, match="reference_mode_prob"):
        success_conditioned_mode_split(in_mode, correct, reference_mode_prob=[0.4, 1.0, 0.3])


def test_mode_model_rounds_is_bayes_rule_on_the_mode_round_after_round():
    from rlbook.reasoning import mode_model_rounds

    model = mode_model_rounds(0.274, 0.923, 0.046, 3)
    assert len(model["share"]) == len(model["pass_at_1"]) == 4
    assert model["share"][1] == pytest.approx(0.274 * 0.923 / (0.274 * 0.923 + 0.726 * 0.046))
    assert model["share"][1] == pytest.approx(0.883, abs=5e-4) and model["pass_at_1"][1] == pytest.approx(0.821, abs=5e-4)
    assert model["share"][2] == pytest.approx(0.993, abs=5e-4) and model["pass_at_1"][2] == pytest.approx(0.917, abs=5e-4)
    assert mode_model_rounds(0.3, 0.5, 0.5, 2)["share"] == pytest.approx([0.3, 0.3, 0.3])   # no accuracy gap, no pull
    assert mode_model_rounds(0.3, 0.2, 0.6, 2)["share"][2] < 0.3   # the worse mode is left
    with pytest.raises(ValueError, match="mode_share"):
        mode_model_rounds(1.5, 0.9, 0.1, 1)
    with pytest.raises(ValueError, match="never right"):
        mode_model_rounds(0.5, 0.0, 0.0, 1)
