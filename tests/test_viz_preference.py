"""Lessons 06 and 07's figures: the closed-form optimum, the losses drawn from the library, the
training history, clause credit and margins."""

import math


import numpy as np
import pandas as pd
import pytest
import torch

from rlbook import losses
from rlbook.toys import reverse_kl_optimum
from rlbook.trainers.history import History
from rlbook.viz import preference as viz


REF = torch.tensor([0.35, 0.25, 0.2, 0.12, 0.08], dtype=torch.float64)
REWARDS = torch.tensor([0.0, 1.0, -1.0, 2.0, 0.5], dtype=torch.float64)


def test_optimum_figure_shows_both_distributions():
    fig = viz.plot_kl_regularised_optimum(0.5)
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert len(heights) == 10
    np.testing.assert_allclose(heights[:5], REF.numpy())
    np.testing.assert_allclose(heights[5:], reverse_kl_optimum(REF, REWARDS, beta=0.5).numpy())
    assert "KL" in ax.get_title()
    # J(π*) = β log Z, with the toy's value at β = 0.5 (the 1.0983 of lesson 06's table)
    assert "J(π*) = β log Z = 1.10" in ax.get_title()


def test_dpo_loss_and_weight_curves_come_from_the_library():
    h = torch.linspace(-30, 30, 61, dtype=torch.float64)
    loss, weight = viz._dpo_loss_and_weight(h, 0.1)
    np.testing.assert_allclose(loss, losses.dpo_loss(h, 0 * h, 0 * h, 0 * h, 0.1).numpy())
    np.testing.assert_allclose(weight, (0.1 * torch.sigmoid(-0.1 * h)).numpy(), rtol=1e-10)
    assert loss[30] == pytest.approx(math.log(2))  # h = 0
    fig = viz.plot_dpo_loss_and_weight(0.2)
    assert len(fig.axes) == 2
    bold = [line for line in fig.axes[0].lines if line.get_linewidth() > 2]
    assert len(bold) == 1 and bold[0].get_label() == "β = 0.2"
    with pytest.raises(ValueError, match="beta"):
        viz.plot_dpo_loss_and_weight(-1.0)


def fake_history(steps=12, eval_every=4):
    rows = []
    for step in range(steps):
        row = {"step": step, "loss": math.log(2) - 0.02 * step, "rewards/accuracies": 0.5 + 0.03 * step,
               "rewards/margins": 0.1 * step, "logps/chosen": -40.0 - 0.1 * step, "logps/rejected": -40.0 - step}
        if step % eval_every == 0 or step == steps - 1:
            row.update({"eval/rewards/accuracies": 0.5 + 0.02 * step, "eval/rewards/margins": 0.05 * step,
                        "eval/logps/chosen": -41.0, "eval/logps/rejected": -41.0 - step})
        rows.append(row)
    return History(rows)


def test_history_figure_has_four_panels_with_held_out_points():
    fig = viz.plot_preference_history(fake_history())
    assert len(fig.axes) == 4
    accuracy_lines = {line.get_label(): line for line in fig.axes[1].lines}
    assert len(accuracy_lines["held-out"].get_xdata()) == 4  # steps 0, 4, 8 and the last
    labels = [line.get_label() for line in fig.axes[3].lines]
    assert any("held-out" in label for label in labels)
    viz.plot_preference_history(fake_history().to_pandas())  # a DataFrame works too
    with pytest.raises(ValueError, match="missing"):
        viz.plot_preference_history(History([{"step": 0, "loss": 1.0}]))


def test_losses_vs_margin_figure():
    fig = viz.plot_losses_vs_margin(0.1, 0.2, 1.0)
    loss_ax, pull_ax = fig.axes
    assert len(loss_ax.get_lines()) >= 5
    ipo = [line for line in pull_ax.get_lines() if line.get_label().startswith("IPO")][0]
    x, pull = ipo.get_xdata(), ipo.get_ydata()
    assert x[np.argmin(np.abs(pull))] == pytest.approx(1 / (2 * 0.2), abs=0.1)  # IPO's pull vanishes at 1/(2τ)
    dpo = [line for line in pull_ax.get_lines() if line.get_label().startswith("DPO")][0]
    assert (dpo.get_ydata() > 0).all()  # DPO's pull never does


def test_kto_value_figure_is_the_library_loss_and_its_pull():
    fig = viz.plot_kto_value(0.5, 2.0, undesirable_weight=1.5)
    loss_ax, pull_ax = fig.axes
    lines = {line.get_label().split(" ")[0]: line for line in loss_ax.get_lines() if line.get_label()[0] != "_"}
    r = torch.as_tensor(lines["desirable"].get_xdata())
    z0 = torch.tensor(2.0, dtype=torch.float64)
    for name, flag, weight in (("desirable", 1.0, 1.0), ("undesirable", 0.0, 1.5)):
        want = losses.kto_loss(r, torch.zeros_like(r), torch.full_like(r, flag), z0, 0.5,
                               undesirable_weight=1.5).numpy()
        np.testing.assert_allclose(lines[name].get_ydata(), want)
        assert want.max() <= weight + 1e-12  # the loss is bounded by λ
    pulls = {line.get_label().split(":")[0]: line for line in pull_ax.get_lines() if ":" in line.get_label()}
    x = pulls["desirable"].get_xdata()
    for name, weight in (("desirable", 1.0), ("undesirable", 1.5)):
        pull = np.abs(pulls[name].get_ydata())
        assert x[np.argmax(pull)] == pytest.approx(2.0, abs=0.06)  # largest at the reference point…
        assert pull.max() == pytest.approx(weight * 0.5 / 4, rel=1e-3)  # …where it is λβ/4
        assert pull[0] < 0.01 * pull.max() and pull[-1] < 0.01 * pull.max()  # and it fades on both sides
    assert (pulls["desirable"].get_ydata() > 0).all() and (pulls["undesirable"].get_ydata() < 0).all()
    with pytest.raises(ValueError, match="beta"):
        viz.plot_kto_value(0.0)


def test_margin_trajectories_figure():
    fig = viz.plot_margin_trajectories({"dpo": [0, 1, 2], "ipo": [0, 1, 1.5]}, target=2.0)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels[:2] == ["dpo", "ipo"] and any("1/(2τ)" in label for label in labels)
    with pytest.raises(ValueError, match="margins"):
        viz.plot_margin_trajectories({})


def test_clause_credit_figure_draws_the_table():
    credit = pd.DataFrame({"text": [0, 0, 1], "position": [0, 1, 0], "aspect": ["plot", "plot", "cast"],
                           "adjective": ["great", "dull", "fun"], "sentiment": [1, -1, 1],
                           "repeat": [False, True, False], "past_limit": [False, False, False],
                           "gold": [1.0, -2.5, 1.0], "credit": [0.4, -0.2, 0.6]})
    fig = viz.plot_clause_credit(credit)
    assert len(fig.axes) == 2
    heights = sorted(p.get_height() for p in fig.axes[0].patches if np.isfinite(p.get_height()))
    assert heights == pytest.approx([-0.2, 0.5])  # the negative repeat, and the mean of the positive new clauses


def test_margin_histograms_figure():
    generator = np.random.default_rng(0)
    fig = viz.plot_margin_histograms({"DPO": generator.normal(5, 3, 200), "IPO": generator.normal(1, 1, 200)},
                                     target=2.0)
    labels = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert any(label.startswith("DPO: median") for label in labels) and any("1/(2τ)" in label for label in labels)
    with pytest.raises(ValueError, match="margins"):
        viz.plot_margin_histograms({})
    apart = viz.plot_margin_histograms({"DPO": generator.normal(5, 3, 200), "IPO": generator.normal(1, 1, 200)},
                                       target=2.0, separate=True)
    assert len(apart.axes) == 2  # one panel per run, each binned over its own range
    ipo_bars = [patch for patch in apart.axes[1].patches]
    assert ipo_bars and apart.axes[1].get_xlim()[1] < 6


def test_dpo_weight_panel_is_the_relative_weight_with_a_colour_per_beta():
    fig = viz.plot_dpo_loss_and_weight(0.5)
    weight_lines = [line for line in fig.axes[1].lines if line.get_label().startswith("β =")]
    assert len({tuple(line.get_color()) for line in weight_lines}) == len(weight_lines) == 4
    for line in weight_lines:   # σ(−β h) is ½ at h = 0 for every β
        x, y = line.get_data()
        assert np.interp(0.0, x, y) == pytest.approx(0.5, abs=1e-3)


def test_preference_history_marks_the_reference_before_training():
    before = {"rewards/accuracies": 0.1, "rewards/margins": 0.0, "logps/chosen": -40.0, "logps/rejected": -41.0}
    fig = viz.plot_preference_history(fake_history(), before=before)
    stars = [line for ax in fig.axes for line in ax.lines if line.get_label() == "reference"]
    assert len(stars) == 3 and all(list(line.get_xdata()) in ([-1], [-1, -1]) for line in stars)


def test_kto_value_axis_stays_put_as_the_reference_point_moves():
    low = viz.plot_kto_value(0.5, 0.0).axes[0].get_lines()[0].get_xdata()
    high = viz.plot_kto_value(0.5, 6.0).axes[0].get_lines()[0].get_xdata()
    np.testing.assert_allclose(low, high)  # the same r-axis: z0 slides the curves, not the ticks
    assert viz.plot_kto_value(0.5, 6.0).axes[0].get_ylabel()


def test_margin_trajectories_colour_each_curve_by_its_loss_and_dash_a_variant():
    fig = viz.plot_margin_trajectories({"DPO": [0.0, 1.0], "IPO": [0.0, 0.5], "DPO, Adam": [0.0, 2.0],
                                        "IPO, Adam": [0.0, 0.4]})
    lines = {line.get_label(): line for line in fig.axes[0].lines}
    assert lines["DPO, Adam"].get_color() == lines["DPO"].get_color() != lines["IPO"].get_color()
    assert lines["IPO, Adam"].get_color() == lines["IPO"].get_color()
    assert lines["DPO"].get_linestyle() == "-" and lines["DPO, Adam"].get_linestyle() == "--"


def test_margin_trajectories_on_a_log_step_axis():
    fig = viz.plot_margin_trajectories({"DPO": [0.0, 1.0, 2.0]}, log_steps=True)
    assert fig.axes[0].get_xscale() == "log" and "log" in fig.axes[0].get_xlabel()


def test_margin_histograms_on_one_shared_axis_with_a_bound():
    generator = np.random.default_rng(0)
    fig = viz.plot_margin_histograms({"DPO": generator.normal(10, 6, 200), "IPO": generator.normal(1, 1, 200)},
                                     target=2.0, separate=True, shared_axis=True, bound=4.0)
    assert len(fig.axes) == 2 and fig.axes[0].get_xlim() == fig.axes[1].get_xlim()
    assert fig.axes[1].get_xlim()[1] > 20   # IPO's panel spans DPO's range too
    labels = [text.get_text() for text in fig.axes[1].get_legend().get_texts()]
    assert any("1/τ = 4" in label for label in labels)


def test_losses_vs_margin_draws_conservative_dpo_with_its_finite_target():
    fig = viz.plot_losses_vs_margin(0.5, 0.25, 0.5, label_smoothing=0.1)
    pull = fig.axes[1]
    cdpo = [line for line in pull.lines if line.get_label().startswith("cDPO")]
    assert len(cdpo) == 1 and cdpo[0].get_linestyle() == "--"
    x, y = cdpo[0].get_data()
    crossing = x[np.argmin(np.abs(y))]
    assert crossing == pytest.approx(np.log(0.9 / 0.1) / 0.5, abs=0.1)   # h* = (1/β) log((1 − ε)/ε)
    assert not [line for line in viz.plot_losses_vs_margin(0.5, 0.25, 0.5).axes[1].lines
                if line.get_label().startswith("cDPO")]
    with pytest.raises(ValueError, match="label_smoothing"):
        viz.plot_losses_vs_margin(label_smoothing=0.5)


def test_preference_history_can_leave_the_tied_first_batch_off_the_accuracy_panel():
    history = fake_history()
    steps = list(history.to_pandas()["step"])
    drawn = viz.plot_preference_history(history).axes[1].lines[0]
    assert list(drawn.get_xdata()) == steps
    kept = viz.plot_preference_history(history, first_batch_tied=True).axes[1].lines[0]
    assert list(kept.get_xdata()) == steps[1:] and "not drawn" in kept.get_label()


def test_preference_history_draws_rule_bars_on_the_accuracy_panel():
    fig = viz.plot_preference_history(fake_history(), bars={"parse rule": 0.616, "length rule": 0.708})
    labelled = {line.get_label(): line for line in fig.axes[1].lines}
    assert list(labelled["length rule 0.708"].get_ydata()) == [0.708, 0.708]
    assert "parse rule 0.616" in labelled
    assert len(viz.plot_preference_history(fake_history()).axes[1].lines) == len(fig.axes[1].lines) - 2


def test_run_against_optimum_draws_the_fit_and_the_diagonal():
    predicted = np.array([-2.0, -1.0, 0.0, 1.0])
    fig = viz.plot_run_against_optimum(predicted, 0.5 * predicted - 1.0)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "fit: 0.50·x -1.00" in labels and "y = x (the run at π*)" in labels
    with pytest.raises(ValueError, match="equal-length"):
        viz.plot_run_against_optimum([1.0, 2.0], [1.0])


def test_credit_by_position_figure_draws_new_clauses_and_repeats():
    credit = pd.DataFrame({"text": [0, 0, 0, 0, 1, 1], "unit": ["clause"] * 4 + ["clause", "stop"],
                           "position": [0, 1, 2, 3, 0, 1], "sentiment": [1, 1, -1, 0, 1, 0],
                           "repeat": [False, True, False, False, False, False], "past_limit": [False] * 3 + [True, False, False],
                           "gold": [1.0, -0.5, -1.0, -1.0, 1.0, 0.0], "credit": [0.5, 0.1, -1.0, -0.4, 0.3, 9.0]})
    fig = viz.plot_credit_by_position(credit)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    x, y = lines["positive, new"].get_data()
    assert list(x) == [0, 2, 3] and y[0] == pytest.approx(0.4)          # positions 0-based, as in the tables
    assert list(lines["positive, repeat"].get_xdata()) == [1]
    assert "gold's length step" in lines


def test_margin_trajectories_tell_two_variants_of_one_loss_apart_and_draw_a_predicted_level():
    fig = viz.plot_margin_trajectories({"DPO": [0.0, 1.0], "DPO, seed 1": [0.0, 2.0], "DPO, seed 2": [0.0, 3.0]},
                                       target=2.0, target_label="1/(2τ), one pair alone", predicted=1.5)
    lines = {line.get_label(): line for line in fig.axes[0].lines}
    assert [lines[k].get_linestyle() for k in ("DPO", "DPO, seed 1", "DPO, seed 2")] == ["-", "--", "-."]
    assert "1/(2τ), one pair alone = 2" in lines and "predicted = 1.5" in lines


def test_margin_histograms_draw_a_predicted_distribution_in_its_run_panel():
    generator = np.random.default_rng(0)
    fig = viz.plot_margin_histograms({"DPO": generator.normal(10, 6, 200), "IPO": generator.normal(1, 1, 200)},
                                     target=2.0, separate=True, shared_axis=True,
                                     predicted={"IPO": generator.normal(1.3, 1, 200)})
    labels = [[text.get_text() for text in ax.get_legend().get_texts()] for ax in fig.axes]
    assert not any(label.startswith("predicted") for label in labels[0])
    assert any(label.startswith("predicted: median") for label in labels[1])


def test_reward_vs_kl_draws_one_point_per_policy_coloured_by_loss_and_the_reference():
    points = pd.DataFrame({"loss": ["DPO", "DPO", "IPO", "sft (chosen)"], "seed": [0, 1, 0, 0],
                           "kl": [5.0, 4.0, 0.8, 0.6], "kl s.e.": [0.5, 0.4, 0.1, 0.1],
                           "gold reward": [-0.4, 0.1, -0.3, -0.1], "gold s.e.": [0.1, 0.1, 0.1, 0.1]})
    fig = viz.plot_reward_vs_kl(points, reference=(0.0, -1.3))
    ax = fig.axes[0]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels == ["reference", "DPO", "IPO", "sft (chosen)"]  # one legend entry per loss, not per seed
    star = [line for line in ax.lines if line.get_marker() == "*"][0]
    assert tuple(star.get_xydata()[0]) == (0.0, -1.3)
    assert "marker = seed" in ax.get_title()
    with pytest.raises(ValueError, match="kl s.e."):
        viz.plot_reward_vs_kl(points.drop(columns="kl s.e."))


def test_legends_can_be_moved_off_the_data():
    fig = viz.plot_margin_trajectories({"DPO": [0.0, 1.0]}, legend_outside=True)
    legend = fig.axes[0].get_legend()
    assert legend._loc == 2 and legend.get_bbox_to_anchor().x0 > fig.axes[0].get_window_extent().x1 - 1
    generator = np.random.default_rng(0)
    fig = viz.plot_margin_histograms({"DPO": generator.normal(10, 6, 50)}, separate=True, legend_below=True)
    assert fig.axes[0].get_legend().get_bbox_to_anchor().y1 < fig.axes[0].get_window_extent().y0
