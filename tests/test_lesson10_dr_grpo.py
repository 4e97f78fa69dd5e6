"""Lesson 10's toy of the 1/|o| length bias (rlbook.toys.length_bias_toy) and its figure."""

from __future__ import annotations


import numpy as np
import pytest

from rlbook.toys import _length_toy_policy, length_bias_toy
from rlbook.viz.aggregation import plot_length_toy


def test_starts_where_asked_and_same_seed_same_numbers():
    curves = length_bias_toy(steps=4, p_correct=0.3, start_length=8.0, max_len=400, seed=1)
    assert set(curves) == {"p_correct", "length_correct", "length_incorrect", "capped_correct", "capped_incorrect"}
    assert all(len(v) == 5 for v in curves.values())
    assert curves["p_correct"][0] == pytest.approx(0.3)
    assert curves["length_correct"][0] == pytest.approx(8.0, abs=1e-6)  # cap far away: the geometric mean
    again = length_bias_toy(steps=4, p_correct=0.3, start_length=8.0, max_len=400, seed=1)
    assert all(np.array_equal(curves[k], again[k]) for k in curves)


def test_expected_length_counts_the_cap():
    import torch

    # q = 1/2, cap 4: P(|o| = 2) = 1/2, P(3) = 1/4, P(4) = 1/4 (stopped at 4, or truncated there)
    _, correct, wrong = _length_toy_policy(torch.tensor(0.0), torch.tensor([0.0, 0.0], dtype=torch.float64), 4)
    assert correct == pytest.approx(2 * 0.5 + 3 * 0.25 + 4 * 0.25) and wrong == correct


def test_capped_share_is_the_geometric_tail():
    curves = length_bias_toy(steps=2, start_length=8.0, max_len=10, seed=0)
    q0 = 6 / 7                                              # mean of 2 + Geometric is 8
    assert curves["capped_incorrect"][0] == pytest.approx(q0 ** 8)
    assert curves["capped_correct"][0] == pytest.approx(q0 ** 8)
    assert all(0 <= v <= 1 for v in curves["capped_incorrect"])


def test_sgd_moves_the_length_far_less_than_adam_at_the_same_lr():
    adam = length_bias_toy("seq_mean_token_mean", "grpo", steps=30, seed=0)
    sgd = length_bias_toy("seq_mean_token_mean", "grpo", steps=30, seed=0, optimizer="sgd")
    assert abs(sgd["length_incorrect"][-1] - 8) < 0.2 * abs(adam["length_incorrect"][-1] - 8)


def test_one_over_length_grows_wrong_answers_and_a_constant_does_not():
    grpo = length_bias_toy("seq_mean_token_mean", "grpo", steps=60, seed=0)
    dr = length_bias_toy("seq_mean_token_sum_norm", "dr_grpo", steps=60, seed=0)
    assert grpo["length_incorrect"][-1] > 2 * grpo["length_incorrect"][0]
    assert grpo["length_correct"][-1] < 0.6 * grpo["length_correct"][0]
    assert abs(dr["length_incorrect"][-1] - dr["length_incorrect"][0]) < 0.3 * dr["length_incorrect"][0]


@pytest.mark.parametrize("kwargs, name", [
    (dict(mode="mean"), "mode"), (dict(advantage="ppo"), "advantage"), (dict(steps=0), "steps"),
    (dict(group_size=1), "group_size"), (dict(lr=0.0), "lr"), (dict(p_correct=1.0), "p_correct"),
    (dict(start_length=70.0), "start_length"), (dict(max_len=2), "max_len"), (dict(seed=-1), "seed"),
    (dict(optimizer="rmsprop"), "optimizer"),
])
def test_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        length_bias_toy(**kwargs)


def test_plot_length_toy():
    runs = [length_bias_toy(steps=3, seed=s) for s in (0, 1)]
    fig = plot_length_toy({"GRPO": runs, "Dr.GRPO": [length_bias_toy("seq_mean_token_sum_norm", "dr_grpo", steps=3)]})
    assert len(fig.axes) == 3 and len(fig.axes[0].lines) == 2 and len(fig.axes[0].collections) == 1
    with pytest.raises(ValueError, match="curves"):
        plot_length_toy({})
    with pytest.raises(ValueError, match="keys"):
        plot_length_toy({"GRPO": runs}, keys=("reward",))


def test_difficulty_factor_matches_the_lesson_table():
    from rlbook.advantages import difficulty_factor

    assert difficulty_factor(0.05, 8) == pytest.approx(2.473, abs=1e-3)
    assert difficulty_factor(0.5, 8) == pytest.approx(1.856, abs=1e-3)
    for p in (0.05, 0.3, 0.5):
        assert difficulty_factor(p, 8, "dr_grpo") == pytest.approx(7 / 8)
    with pytest.raises(ValueError, match="p"):
        difficulty_factor(1.5, 8)
    with pytest.raises(ValueError, match="group_size"):
        difficulty_factor(0.5, 1)


def test_check_difficulty_factor_accepts_a_from_scratch_answer_and_names_the_slips(capsys):
    import math

    from rlbook.advantages import difficulty_factor
    from rlbook.exercises.aggregation import check_difficulty_factor

    def from_scratch(p, G):
        def adv(k, r):
            m = k / G
            s = math.sqrt(m * (1 - m))
            return 0.0 if s == 0 else (r - m) / s
        return sum(math.comb(G - 1, j) * p ** j * (1 - p) ** (G - 1 - j) * (adv(j + 1, 1) - adv(j, 0)) for j in range(G))

    assert check_difficulty_factor(from_scratch) is True
    assert check_difficulty_factor(lambda p, G: (G - 1) / G) is False
    assert "Dr.GRPO's factor" in capsys.readouterr().out
    assert check_difficulty_factor(lambda p, G: 1 / math.sqrt(p * (1 - p))) is False
    assert "realised group" in capsys.readouterr().out
    assert check_difficulty_factor(lambda p, G: difficulty_factor(p, G, unbiased_std=True)) is False
    assert "Bessel" in capsys.readouterr().out

    def counts(right, wrong, nan_for_flat=False):  # from_scratch with the group counts of the two answers changed
        def fn(p, G):
            def adv(k, r):
                m = k / G
                s = math.sqrt(m * (1 - m))
                return (float("nan") if nan_for_flat else 0.0) if s == 0 else (r - m) / s
            return sum(math.comb(G - 1, j) * p ** j * (1 - p) ** (G - 1 - j) * (adv(right(j), 1) - adv(wrong(j), 0))
                       for j in range(G))
        return fn

    for right, wrong in ((lambda j: j, lambda j: j), (lambda j: j + 1, lambda j: j + 1), (lambda j: j, lambda j: j + 1)):
        assert check_difficulty_factor(counts(right, wrong)) is False
        assert "off by one" in capsys.readouterr().out
    assert check_difficulty_factor(counts(lambda j: j + 1, lambda j: j, nan_for_flat=True)) is False
    assert "flat group" in capsys.readouterr().out


def test_check_token_weights_names_the_budget_minus_one_and_a_per_row_token_mean(capsys):
    from rlbook.aggregation import token_weights
    from rlbook.exercises.aggregation import check_token_weights

    def minus_one(m, mode, L):
        return m / (m.shape[0] * (L - 1)) if mode == "seq_mean_token_sum_norm" else token_weights(m, mode, max_len=L)

    def per_row(m, mode, L):
        return m / m.sum(1, keepdim=True) if mode == "token_mean" else token_weights(m, mode, max_len=L)

    assert check_token_weights(minus_one) is False
    assert "L − 1" in capsys.readouterr().out
    assert check_token_weights(per_row) is False
    assert "its own length" in capsys.readouterr().out


def test_the_token_weight_widget_keeps_one_colour_range():
    from rlbook.viz.aggregation import plot_token_weights

    for budget in (64, 256):
        fig = plot_token_weights([4, 10, 24, 48], max_len=budget, log_scale=True, colour_range=(1 / 1024, 1 / 4))
        norm = fig.axes[0].images[0].norm
        assert (norm.vmin, norm.vmax) == pytest.approx((1 / 1024, 1 / 4))
    with pytest.raises(ValueError):
        plot_token_weights([4], max_len=8, colour_range=(0.5, 0.1))


def test_plot_length_toy_marks_the_cap():
    runs = [length_bias_toy(steps=3, seed=0)]
    fig = plot_length_toy({"GRPO": runs}, max_len=64)
    assert any(line.get_ydata()[0] == 64 for line in fig.axes[0].get_lines())
    fig2 = plot_length_toy({"GRPO": runs}, keys=("capped_incorrect",))
    assert fig2.axes[0].get_ylabel() == "probability"
