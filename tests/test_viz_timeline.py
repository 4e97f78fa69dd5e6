"""Tests of rlbook.viz.timeline and rlbook.viz.throughput (lessons 14-15): the figures draw what they are given."""

from __future__ import annotations


import matplotlib.pyplot as plt
import pandas as pd
import pytest

from rlbook.timeline import busy_fraction, example_durations, pipeline_schedule
from rlbook.viz.throughput import plot_advantage_noise, plot_flat_groups, plot_reward_per_work
from rlbook.viz.timeline import plot_schedule, plot_stale_token_weights, plot_timelines


def test_timeline_figures_draw():
    generate, train = example_durations(6, spread=1.0)
    assert len(generate) == 6 and min(generate) > 0 and train == [1.0] * 6
    timelines = {"sync": pipeline_schedule(generate, train, 0), "async": pipeline_schedule(generate, train, 1)}
    assert busy_fraction(timelines["async"])["span"] < busy_fraction(timelines["sync"])["span"]
    figure = plot_timelines(timelines)
    assert len(figure.axes) == 3  # two panels and the colour bar of the versions
    assert figure.axes[-1].get_ylabel() == "policy version"
    assert len(plot_schedule(2, 0.5).axes) == 3
    assert [ax.get_title().split(":")[0] for ax in plot_schedule((1, 2), 0.5).axes[:3]] == [
        "synchronous (η = 0)", "asynchronous, η = 1", "asynchronous, η = 2"]
    plt.close("all")
    with pytest.raises(ValueError, match="timeline"):
        plot_timelines({"empty": []})


def test_timeline_colours_do_not_wrap_after_ten_versions():
    # 16 steps: versions 0..15 on one continuous scale, so version 10 is not drawn in version 0's colour
    timeline = pipeline_schedule([0.5] * 16, [1.0] * 16, 0)
    figure = plot_timelines({"sixteen steps": timeline})
    colours = [tuple(bar.get_facecolor()) for bar in figure.axes[0].patches]
    generation = colours[0::2]  # pipeline_schedule lists each round before its update
    assert len(set(generation)) == 16
    plt.close("all")


def test_throughput_figures():
    measured = pd.DataFrame({"pass@1": [0.2, 0.5], "frac_zero_adv_groups": [0.5, 0.2]})
    assert plot_flat_groups(4, measured=measured).axes
    spread = plot_flat_groups(8, between_prompt_share=0.5).axes[0]
    bold, iid = [line for line in spread.get_lines() if line.get_linewidth() >= 1.5]
    assert (bold.get_ydata() >= iid.get_ydata() - 1e-12).all()  # a spread of pass rates: more flat groups
    assert "ρ = 0.50" in spread.get_title()
    assert plot_advantage_noise(0.2, 4).axes
    plt.close("all")


def test_stale_token_weights_figure():
    figure = plot_stale_token_weights(0.2, 5.0)
    naive_positive = figure.axes[0].lines[1].get_ydata()
    ratios = figure.axes[0].lines[1].get_xdata()
    assert naive_positive[ratios > 1.25].max() == 0  # A > 0 beyond 1 + ε: clipped, no gradient
    decoupled_negative = figure.axes[1].lines[2].get_ydata()
    assert decoupled_negative[ratios > 5.01].max() == 0 and decoupled_negative[ratios < 4.9].min() > 0
    assert plot_stale_token_weights(0.3, None).axes
    plt.close("all")


def test_reward_per_work_is_drawn_against_cumulative_completions():
    rows = [{"label": label, "seed": 0, "step": step, "pass@1": step / 10, "trained_samples": 8}
            for label in ("slow", "fast") for step in range(1, 5)]
    figure = plot_reward_per_work(pd.DataFrame(rows), smooth=1)
    assert [line.get_xdata().tolist() for line in figure.axes[0].lines] == [[8, 16, 24, 32]] * 2
    plt.close("all")


def test_plot_advantage_noise_puts_the_noise_on_rewards_or_advantages():
    import pytest
    import matplotlib.pyplot as plt

    for noise_on in ("advantages", "rewards"):
        for method in ("dr_grpo", "grpo"):
            figure = plot_advantage_noise(0.05, 8, pass_rate=0.9, noise_on=noise_on, method=method)
            flat_after = figure.axes[0].collections[3].get_offsets()[:, 1]  # the flat groups, after the noise
            size = float((flat_after ** 2).mean() ** 0.5)
            if noise_on == "rewards" and method == "grpo":
                assert size == pytest.approx(1.0, abs=1e-3)  # dithered flat groups under GRPO: RMS 1, whatever σ
            else:
                assert size < 0.1  # of order σ = 0.05
            plt.close(figure)
    with pytest.raises(ValueError, match="noise_on"):
        plot_advantage_noise(0.1, 4, noise_on="logits")
