"""The figures and widgets of lessons 01 and 02 draw without error and show what they claim."""

import pytest
import torch

from rlbook import toys
from rlbook.viz import kl as kl_viz
from rlbook.viz import policy_gradient as pg_viz

BANDIT = toys.GaussianBandit(means=(1.0, 1.4, 2.0, 0.6, 1.2), noise=0.5)
LOGITS = torch.tensor([0.5, 0.0, -0.5, 1.0, 0.0], dtype=torch.float64)
REF = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05], dtype=torch.float64)


@pytest.mark.parametrize("baseline", toys.BASELINES)
def test_gradient_spread_view_is_fixed_across_settings(baseline):
    fig = pg_viz.plot_gradient_spread(BANDIT, LOGITS, batch_size=8, baseline=baseline, num_estimates=50, dims=(2, 3))
    reference = pg_viz.plot_gradient_spread(BANDIT, LOGITS, batch_size=64, baseline="none", num_estimates=50, dims=(2, 3))
    assert fig.axes[0].get_xlim() == reference.axes[0].get_xlim()
    assert baseline in fig.axes[0].get_title()


def test_gradient_spread_marks_the_batches_that_missed_the_arm():
    fig = pg_viz.plot_gradient_spread(BANDIT, LOGITS, batch_size=4, baseline="value", num_estimates=200, dims=(2, 3),
                                      reference_baseline="none")
    labels = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    push = toys.unsampled_arm_push(BANDIT, LOGITS, 2, batch_size=4, baseline="value")
    assert any("never drew arm 2" in label and f"{push['probability']:.0%})" in label for label in labels)
    assert any(f"{push['mean_push']:+.3f}" in label for label in labels)
    assert any("baseline='none'" in label for label in labels)  # the reference cloud
    assert fig.axes[0].get_xlabel() == "estimated ∂J/∂θ₂"


def test_gradient_spread_title_counts_the_estimates_outside_the_fixed_view():
    """A large offset carries the no-baseline cloud out of the view: the title says how many (reader's F6)."""
    import re

    inside = pg_viz.plot_gradient_spread(BANDIT, LOGITS, batch_size=64, baseline="value", num_estimates=60, dims=(2, 3))
    assert "outside" not in inside.axes[0].get_title()
    fig = pg_viz.plot_gradient_spread(BANDIT, LOGITS, batch_size=1, baseline="none", num_estimates=60, dims=(2, 3),
                                      reward_offset=4.0, half_width=0.05)
    ax = fig.axes[0]
    points = ax.collections[0].get_offsets().data.tolist() + ax.collections[1].get_offsets().data.tolist()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    expected = sum(not (x0 <= x <= x1 and y0 <= y <= y1) for x, y in points)
    match = re.search(r"(\d+) of 60 estimates lie outside", ax.get_title())
    assert expected > 0 and match and int(match.group(1)) == expected


def test_every_control_of_the_gradient_spread_widget_changes_the_figure():
    from test_widgets_respond import _drive

    recorder = _drive(pg_viz.gradient_spread_widget(BANDIT, LOGITS, num_estimates=20))
    assert len(recorder.fingerprints) == 1 + len(recorder.interactive.kwargs_widgets) >= 2


def test_variance_and_learning_plots():
    fig = pg_viz.plot_variance_vs_batch_size({"none": [1.0, 0.5], "value": [0.2, 0.1]}, [2, 4],
                                             exact_one_pull={"none": 2.0, "value": 0.4})
    assert len(fig.axes[0].lines) == 4
    fig = pg_viz.plot_variance_vs_batch_size({"none": [1.0, 0.5], "leave_one_out": [0.3, 0.1]}, [2, 4],
                                             exact={"none": [1.0, 0.5], "leave_one_out": [0.31, 0.12]})
    assert [list(line.get_ydata()) for line in fig.axes[0].lines[1::2]] == [[1.0, 0.5], [0.31, 0.12]]
    histories = {"none": torch.rand(3, 11), "value": torch.rand(3, 11)}
    fig = pg_viz.plot_bandit_learning(histories, best=2.0)
    assert fig.axes[0].get_xlabel() == "REINFORCE step"


def test_training_history_plot_checks_keys():
    fig = pg_viz.plot_training_history({"reward": [0.1, 0.2], "loss": [1.0, 0.5]})
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="entropy"):
        pg_viz.plot_training_history({"reward": [0.1]}, keys=["entropy"])


def test_training_history_plot_rows_and_steps():
    history = {key: [0.1, 0.2, 0.3] for key in "abcdefg"}
    fig = pg_viz.plot_training_history(history, steps=[1, 2, 3], ncols=4)
    assert len(fig.axes) == 7                       # 2 rows of 4, the unused eighth panel removed
    assert [ax.get_title() for ax in fig.axes] == list("abcdefg")
    assert list(fig.axes[3].lines[0].get_xdata()) == [1, 2, 3]
    with pytest.raises(ValueError, match="steps"):
        pg_viz.plot_training_history(history, steps=[1, 2])
    with pytest.raises(ValueError, match="ncols"):
        pg_viz.plot_training_history(history, ncols=0)


def test_kl_histograms_mark_the_true_kl():
    fig = kl_viz.plot_kl_estimator_histograms(1.0, 1.0, n_samples=2_000)
    assert len(fig.axes) == 3
    assert all("true KL = 0.5" in ax.get_legend().get_texts()[0].get_text() for ax in fig.axes)
    assert "(exact 1.70)" in fig.axes[2].get_title()  # k3's closed-form stdev/true beside the sample's


def test_kl_histograms_give_the_bias_with_its_standard_error():
    fig = kl_viz.plot_kl_estimator_histograms(1.0, 1.0, n_samples=2_000)
    # k1 = −log r has stdev μ = 1, so the SE of bias/true is 1/√2000/0.5 ≈ 0.045
    assert "± 0.04" in fig.axes[0].get_title() or "± 0.05" in fig.axes[0].get_title()


def test_kl_histograms_show_the_infinite_variance_of_k3():
    fig = kl_viz.plot_kl_estimator_histograms(0.5, 2.0, n_samples=2_000, seed=3)
    assert "(exact ∞)" in fig.axes[2].get_title() and "∞" not in fig.axes[0].get_title()
    assert "SE undefined" in fig.axes[2].get_title() and "SE undefined" not in fig.axes[0].get_title()
    assert "seed 3" in fig._suptitle.get_text()


def test_kl_histograms_mark_the_draws_beyond_the_range():
    fig = kl_viz.plot_kl_estimator_histograms(1.0, 1.0, n_samples=2_000)
    hatched = [patch for patch in fig.axes[0].patches if patch.get_hatch()]
    assert hatched and all(patch.get_facecolor()[:3] == (0.8, 0.8, 0.8) for patch in hatched)
    assert any("beyond the range" in text.get_text() for text in fig.axes[0].get_legend().get_texts())


def test_sequence_placement_plot_puts_each_marker_over_its_bars():
    from rlbook import kl_sequence as ks
    toy = ks.TwoTokenToy(ref_first=[0.5, 0.5], ref_second=[[0.6, 0.4], [0.05, 0.95]], rewards=[[1.0, 0.0], [1.0, 0.0]])
    pair = (toy.ref_first, toy.ref_second)
    finals = {name: pair for name in ks.SEQUENCE_PLACEMENTS}
    fig = kl_viz.plot_sequence_placements(finals, reference=pair, tilt=pair, per_token=pair,
                                          first_names=("easy", "hard"), second_names=("right", "wrong"))
    ax = fig.axes[0]
    assert len(ax.patches) == 4 * (1 + len(ks.SEQUENCE_PLACEMENTS))
    assert [label.get_text() for label in ax.get_xticklabels()][-1] == "π(y₂ = right | hard)"
    crosses = [len(line.get_xdata()) for line in ax.get_lines() if line.get_marker() == "x"]
    rings = [len(line.get_xdata()) for line in ax.get_lines() if line.get_marker() == "o"]
    assert crosses == [4] and rings == [4] * 4  # × over k1 in the reward; ○ over each of the four partial placements
    fig = kl_viz.plot_sequence_placements(finals, reference=pair, tilt=pair, per_token=pair, forward_each_prefix=pair,
                                          first_names=("easy", "hard"), second_names=("right", "wrong"))
    diamonds = [len(line.get_xdata()) for line in fig.axes[0].get_lines() if line.get_marker() == "D"]
    assert diamonds == [4]  # ◇ over k3 in the loss: the forward-KL optimum of each prefix


def test_batch_mean_spread_plot_draws_both_estimators_at_both_widths():
    spread = {sigma: toys.k3_batch_mean_spread(0.5, sigma, batch_sizes=(100, 1_000, 10_000), batches=20, seed=0,
                                              resamples=20) for sigma in (2.0, 1.3)}
    fig = kl_viz.plot_batch_mean_spread(spread)
    ax_iqr, ax_hist = fig.axes
    assert ax_iqr.get_xscale() == "log" and ax_iqr.get_yscale() == "log"
    labels = [text.get_text() for text in ax_iqr.get_legend().get_texts()]
    # each label names its line style, so σ = 2 (solid) and σ = 1.3 (dashed) read apart in the legend
    assert {"k1, σ = 2 (solid)", "k3, σ = 2 (solid)", "k1, σ = 1.3 (dashed)", "k3, σ = 1.3 (dashed)"} <= set(labels)
    assert any("−1/2" in label for label in labels) and any("-0.25" in label or "−0.25" in label for label in labels)
    assert "1,000 draws, σ = 2" in ax_hist.get_title()
    assert ax_hist.get_ylabel() == "batches" and "beyond it" in ax_hist.get_xlabel()  # the clipped means counted
    with pytest.raises(ValueError, match="histogram_size"):
        kl_viz.plot_batch_mean_spread(spread, histogram_size=7)
    with pytest.raises(ValueError, match="spread"):
        kl_viz.plot_batch_mean_spread({})


def test_kl_table_and_gradient_plots():
    measured = {1.0: toys.kl_estimator_table_monte_carlo(1.0, n_samples=2_000)}
    fig = kl_viz.plot_kl_estimator_table([0.1, 1.0], measured=measured)
    assert len(fig.axes) == 2
    gradients = {name: toys.expected_estimator_gradient(LOGITS, REF, name) for name in ("k1", "k2", "k3")}
    fig = kl_viz.plot_expected_gradients(gradients, reverse=toys.kl_gradient(LOGITS, REF, "reverse"),
                                         forward=toys.kl_gradient(LOGITS, REF, "forward"))
    assert len(fig.axes[0].patches) == 15


def test_placement_plot_puts_each_marker_over_the_bars_it_predicts():
    rewards = torch.tensor([0.0, 0.2, 0.5, 0.8, 1.0], dtype=torch.float64)
    finals = {"k1_in_reward": REF, "k3_in_loss": REF, "k3+_in_loss": REF}
    fig = kl_viz.plot_placement_outcomes(REF, rewards, finals, reverse_optimum=REF, forward_optimum=REF)
    ax = fig.axes[0]
    assert len(ax.patches) == 20
    bar_centres = {round(patch.get_x() + patch.get_width() / 2, 9) for patch in ax.patches}
    marker_xs = {round(float(x), 9) for line in ax.get_lines() for x in line.get_xdata()}
    assert marker_xs <= bar_centres  # every marker sits on a bar, none between bars
    assert len(ax.get_lines()) == 3  # × over k1_in_reward and k3+_in_loss, ○ over k3_in_loss


def test_training_history_of_several_runs_in_a_grid_with_two_metrics_in_one_panel():
    runs = [{"reward": [0.1, 0.2, 0.4], "adv a": [0.5, 0.4, 0.3], "adv b": [-0.2, -0.1, -0.1], "tokens": [5, 6, 7]}
            for _ in range(3)]
    fig = pg_viz.plot_training_history(runs, ["reward", ("adv a", "adv b"), "tokens"], ncols=2,
                                       labels=["seed 0", "seed 1", "seed 2"],
                                       titles=["training-batch reward", "mean advantage", "tokens"], log_y=["tokens"])
    visible = [ax for ax in fig.axes if ax.axison]
    assert len(visible) == 3 and len(fig.axes) == 3                      # a 2×2 grid, the empty fourth cell removed
    assert visible[0].get_title() == "training-batch reward"
    assert [t.get_text() for t in visible[0].get_legend().get_texts()] == ["seed 0", "seed 1", "seed 2"]
    assert [t.get_text() for t in visible[1].get_legend().get_texts()] == ["adv a", "adv b"]
    assert len(visible[1].get_lines()) == 6                               # two metrics × three runs
    assert visible[2].get_yscale() == "log" and visible[0].get_yscale() == "linear"
    with pytest.raises(ValueError, match="labels"):
        pg_viz.plot_training_history(runs, ["reward"], labels=["one"])
    with pytest.raises(ValueError, match=r"run 1"):
        pg_viz.plot_training_history([runs[0], {"reward": [0.1]}], ["tokens"])


def test_reward_offset_moves_only_the_no_baseline_cloud_and_keeps_the_view():
    def cloud(baseline, offset):
        fig = pg_viz.plot_gradient_spread(BANDIT, LOGITS, batch_size=8, baseline=baseline, num_estimates=60,
                                          dims=(2, 3), reward_offset=offset)
        ax = fig.axes[0]
        return ax.get_xlim(), [c.get_offsets().data.copy() for c in ax.collections[:2]], ax.get_title()

    view, none_0, _ = cloud("none", 0.0)
    view_c, none_c, title = cloud("none", 2.0)
    assert view == view_c and "reward offset +2" in title and "the two drawn" in title
    assert not all((a == b).all() for a, b in zip(none_0, none_c) if a.shape == b.shape)
    _, value_0, _ = cloud("value", 0.0)
    _, value_c, _ = cloud("value", 2.0)
    assert all(abs(a - b).max() < 1e-12 for a, b in zip(value_0, value_c))   # the advantages do not see c
    with pytest.raises(ValueError, match="reward_offset"):
        pg_viz.plot_gradient_spread(BANDIT, LOGITS, reward_offset=float("nan"))


def test_kl_gradient_variance_plot_has_a_log_log_panel_per_policy():
    lengths = [1, 2, 4, 16]
    variances = {"near": {"own_token": [1.0, 2.0, 4.0, 16.0], "reward_to_go": [1.0, 4.0, 16.0, 256.0]},
                 "far": {"own_token": [2.0, 4.0, 8.0, 32.0], "reward_to_go": [2.0, 8.0, 32.0, 512.0]}}
    fig = kl_viz.plot_kl_gradient_variance(lengths, variances, labels={"own_token": "per token"})
    assert len(fig.axes) == 2 and all(ax.get_xscale() == ax.get_yscale() == "log" for ax in fig.axes)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["per token", "reward_to_go"]
    assert fig.get_size_inches()[0] <= 10.4
    with pytest.raises(ValueError, match="lengths"):
        kl_viz.plot_kl_gradient_variance([1], variances, labels={})
    with pytest.raises(ValueError, match="one value per length"):
        kl_viz.plot_kl_gradient_variance([1, 2], variances, labels={})


def test_kl_gradient_variance_plot_takes_a_colour_per_credit():
    import matplotlib.colors as mcolors
    variances = {"near": {"own_token": [1.0, 2.0], "k3_in_loss": [1.0, 3.0]}}
    fig = kl_viz.plot_kl_gradient_variance([1, 2], variances, labels={}, colours={"k3_in_loss": "tab:blue"})
    curve = {line.get_label(): line for line in fig.axes[0].lines}
    assert mcolors.same_color(curve["k3_in_loss"].get_color(), "tab:blue")
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_baseline_factor_plot_draws_each_checkpoint_and_checks_arguments():
    rows = {"start": {"p": 0.3, "factor": 0.96, "SE": 0.05}, "end": {"p": 0.8, "factor": 0.3, "SE": 0.04}}
    fig = pg_viz.plot_baseline_factor(rows, group_size=8)
    ax = fig.axes[0]
    assert len(ax.containers) == 2 and ax.get_yscale() == "log"
    heuristic = ax.lines[0]
    assert heuristic.get_ydata()[0] == pytest.approx(7 / 8)
    with pytest.raises(ValueError, match="checkpoints"):
        pg_viz.plot_baseline_factor({}, group_size=8)
    with pytest.raises(ValueError, match="group_size"):
        pg_viz.plot_baseline_factor(rows, group_size=1)
    with pytest.raises(ValueError, match="SE"):
        pg_viz.plot_baseline_factor({"start": {"p": 0.3, "factor": 0.96}}, group_size=8)
    rows["end"]["predicted"] = 0.31                   # the score-corrected prediction: an open diamond
    ax = pg_viz.plot_baseline_factor(rows, group_size=8).axes[0]
    diamonds = [line for line in ax.lines if line.get_marker() == "D" and len(line.get_xdata())]
    assert len(diamonds) == 1 and diamonds[0].get_ydata()[0] == pytest.approx(0.31)
    assert any("put in" in t.get_text() for t in ax.get_legend().get_texts())


def test_arm_histories_draw_every_seed_of_every_arm_and_the_held_out_panel():
    runs = lambda shift: [{"reward": [0.1 + shift, 0.5], "rate": [0.2, 0.9]} for _ in range(3)]
    fig = pg_viz.plot_arm_histories({"leave-one-out": runs(0.0), "no baseline": runs(0.1)}, ["reward", "rate"],
                                    titles=["training reward", "scratchpad rate"],
                                    held_out={"leave-one-out": ([0.7, 0.7, 0.8], [0.02] * 3),
                                              "no baseline": ([0.8, 0.7, 0.8], [0.02] * 3)})
    assert len(fig.axes) == 3 and fig.axes[0].get_title() == "training reward"
    lines = fig.axes[0].get_lines()
    assert len(lines) == 8                                                # per arm: three seeds (thin) and their mean
    assert sorted(l.get_linewidth() for l in lines) == [0.7] * 6 + [2.2] * 2
    assert len({l.get_color() for l in lines}) == 2                       # one colour per arm
    thick = [l for l in lines if l.get_linewidth() == 2.2]
    assert list(thick[1].get_ydata()) == pytest.approx([0.2, 0.5])        # the no-baseline arm's mean over seeds
    assert len(fig.axes[2].containers) == 6                               # two arms × three seeds
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert texts[:2] == ["leave-one-out, mean of 3 seeds", "no baseline, mean of 3 seeds"]
    with pytest.raises(ValueError, match="same number of seeds"):
        pg_viz.plot_arm_histories({"a": runs(0.0), "b": runs(0.0)[:2]}, ["reward"])
    with pytest.raises(ValueError, match="no metric"):
        pg_viz.plot_arm_histories({"a": runs(0.0)}, ["tokens"])
    with pytest.raises(ValueError, match="held_out"):
        pg_viz.plot_arm_histories({"a": runs(0.0)}, ["reward"], held_out={"a": ([0.1], [0.1])})


def test_kl_gradient_variance_plot_labels_every_panel_and_its_guides():
    lengths = [1, 4, 16]
    variances = {name: {"own_token": [0.1, 0.4, 1.6], "reward_to_go": [0.1, 1.6, 25.6]} for name in ("near", "far")}
    fig = kl_viz.plot_kl_gradient_variance(lengths, variances, labels={"own_token": "per token"})
    for ax in fig.axes:
        assert ax.get_ylabel() and ax.get_legend() is not None
        guides = [text for text in ax.texts if text.get_text().startswith("guide ∝ T")]
        assert len(guides) == 3 and all(text.get_fontsize() >= 9 for text in guides)


def test_batch_mean_spread_title_names_mu():
    spread = {2.0: toys.k3_batch_mean_spread(0.5, 2.0, batch_sizes=(100, 1_000), batches=8, seed=0, resamples=10)}
    fig = kl_viz.plot_batch_mean_spread(spread, mu=0.5)
    assert "N(0.5, σ²)" in fig._suptitle.get_text()


def _two_token_toy():
    from rlbook import kl_sequence
    return kl_sequence.TwoTokenToy(ref_first=[0.5, 0.5], ref_second=[[0.6, 0.4], [0.05, 0.95]],
                                   rewards=[[1.0, 0.0], [1.0, 0.0]])


def test_optima_at_beta_prints_the_lessons_closed_forms():
    # lesson 02's §6 table (β = 0.25: logged KL 0.8801 vs 1.2632, +44 %, TV 0.3065) and §7's objective (0.7284 / 0.6989 / 0.6505)
    rewards = torch.tensor([0.0, 0.2, 0.5, 0.8, 1.0], dtype=torch.float64)
    fig = kl_viz.plot_optima_at_beta(REF, rewards, _two_token_toy(), beta=0.25)
    left, right = fig.axes
    assert "0.880 (tilt) vs 1.263 (+44%)" in left.get_title() and "0.306" in left.get_title()
    assert "0.728 / 0.699 / 0.651" in right.get_title()
    assert len(left.patches) == 15 and len(right.patches) == 16
    with pytest.raises(ValueError, match="beta"):
        kl_viz.plot_optima_at_beta(REF, rewards, _two_token_toy(), beta=0.0)


def test_optima_beta_widget_has_one_log_beta_slider():
    rewards = torch.tensor([0.0, 0.2, 0.5, 0.8, 1.0], dtype=torch.float64)
    widget = kl_viz.optima_beta_widget(REF, rewards, _two_token_toy())
    (slider,) = widget.widget.kwargs_widgets
    assert slider.description == "β" and abs(slider.value - 0.25) < 1e-9


def test_ratio_survival_plot_draws_each_width_with_its_guide():
    fig = kl_viz.plot_ratio_survival(0.5, (1.0, 2.0), n_samples=20_000, seed=0)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "σ = 1 (log-normal tail)" in labels and "σ = 2 (α = 1.33)" in labels and "slope −1.33" in labels
    assert not any(label.startswith("slope") and "−∞" in label for label in labels)


def test_placement_and_optima_titles_name_beta_and_the_hard_mass():
    ref = torch.tensor([0.40, 0.25, 0.20, 0.10, 0.05], dtype=torch.float64)
    rewards = torch.tensor([0.0, 0.2, 0.5, 0.8, 1.0], dtype=torch.float64)
    optimum = toys.reverse_kl_optimum(ref, rewards, beta=0.25)
    fig = kl_viz.plot_placement_outcomes(ref, rewards, {"k1_in_reward": optimum}, reverse_optimum=optimum,
                                         forward_optimum=toys.forward_kl_optimum(ref, rewards, beta=0.25), beta=0.25)
    assert "β = 0.25" in fig.axes[0].get_title() and fig.axes[0].get_xlabel()
    fig = kl_viz.plot_optima_at_beta(ref, rewards, _two_token_toy(), beta=0.25)
    assert "π(hard)" in fig.axes[1].get_title() and "per-token ×" in fig.axes[1].get_title()


def test_plot_token_tails_draws_two_labelled_panels():
    import matplotlib.pyplot as plt

    log_r = torch.randn(2_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    exact = torch.rand(2_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    fig = kl_viz.plot_token_tails(log_r, exact, description="test")
    assert len(fig.axes) == 2
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)
    plt.close(fig)
