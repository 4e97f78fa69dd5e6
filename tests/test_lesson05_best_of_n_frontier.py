"""Lesson 05's comparison of best-of-n with the KL-regularised optimum: the figure, and the facts the
lesson states as theorems (worked checks there) checked here on other toys."""

import numpy as np
import pytest

from rlbook.toys import reverse_kl, reverse_kl_optimum, toy_policy
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
    with pytest.raises(ValueError, match="must match"):
        plot_reward_kl_frontier(kl, gain[:-1], ns, [0, 1, 2], [0, 1, 2])
    with pytest.raises(ValueError, match="must match"):
        plot_reward_kl_frontier(kl, gain, ns, [0, 1], [0, 1])
