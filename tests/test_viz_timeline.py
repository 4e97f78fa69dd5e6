"""Tests of rlbook.viz.timeline and rlbook.viz.throughput (lessons 14-15) and of
rlbook.trainers.async_rl.pipeline_schedule: the schedule obeys its recurrences, the figures draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from rlbook.trainers.async_rl import pipeline_schedule  # noqa: E402
from rlbook.viz.throughput import flat_group_probability, plot_advantage_noise, plot_flat_groups  # noqa: E402
from rlbook.viz.timeline import busy_fraction, example_durations, plot_schedule, plot_timelines  # noqa: E402


def span(timeline):
    return max(e["end"] for e in timeline) - min(e["start"] for e in timeline)


def test_synchronous_schedule_is_the_sum_of_the_phases():
    generate, train = [1.0, 2.0, 0.5], [1.0, 1.0, 1.0]
    timeline = pipeline_schedule(generate, train, 0)
    assert [e["phase"] for e in timeline] == ["generate", "train"] * 3
    assert span(timeline) == pytest.approx(sum(generate) + sum(train))
    assert [e["version"] for e in timeline if e["phase"] == "generate"] == [0, 1, 2]


def test_asynchronous_schedule_overlaps_and_bounds_staleness():
    generate, train = [1.0] * 6, [1.0] * 6
    for staleness in (1, 2, 3):
        timeline = pipeline_schedule(generate, train, staleness)
        assert span(timeline) == pytest.approx(7.0)  # n · max(gen, train) + one fill of the pipe
        versions = [e["version"] for e in timeline if e["phase"] == "generate"]
        assert all(0 <= step - version <= staleness for step, version in enumerate(versions))
    generate, train = [0.2] * 6, [1.0] * 6  # a fast generator runs exactly η rounds ahead
    versions = [e["version"] for e in pipeline_schedule(generate, train, 2) if e["phase"] == "generate"]
    assert versions == [0, 0, 0, 1, 2, 3]
    with pytest.raises(ValueError, match="staleness"):
        pipeline_schedule([1.0], [1.0], -1)
    with pytest.raises(ValueError, match="equal length"):
        pipeline_schedule([1.0, 1.0], [1.0], 1)


def test_timeline_figures_draw():
    generate, train = example_durations(6, spread=1.0)
    assert len(generate) == 6 and min(generate) > 0 and train == [1.0] * 6
    timelines = {"sync": pipeline_schedule(generate, train, 0), "async": pipeline_schedule(generate, train, 1)}
    assert busy_fraction(timelines["async"])["span"] < busy_fraction(timelines["sync"])["span"]
    figure = plot_timelines(timelines)
    assert len(figure.axes) == 2
    assert len(plot_schedule(2, 0.5).axes) == 2
    plt.close("all")
    with pytest.raises(ValueError, match="timeline"):
        plot_timelines({"empty": []})


def test_throughput_figures_and_flat_probability():
    assert flat_group_probability(0.5, 2) == pytest.approx(0.5)
    assert flat_group_probability(0.0, 8) == 1.0
    with pytest.raises(ValueError, match="group_size"):
        flat_group_probability(0.5, 0)
    with pytest.raises(ValueError, match="pass_rate"):
        flat_group_probability(1.5, 4)
    import pandas as pd

    measured = pd.DataFrame({"pass@1": [0.2, 0.5], "frac_zero_adv_groups": [0.5, 0.2]})
    assert plot_flat_groups(4, measured=measured).axes
    assert plot_advantage_noise(0.2, 4).axes
    plt.close("all")


def test_stale_token_weights_figure():
    from rlbook.viz.timeline import plot_stale_token_weights

    figure = plot_stale_token_weights(0.2, 5.0)
    naive_positive = figure.axes[0].lines[1].get_ydata()
    ratios = figure.axes[0].lines[1].get_xdata()
    assert naive_positive[ratios > 1.25].max() == 0  # A > 0 beyond 1 + ε: clipped, no gradient
    decoupled_negative = figure.axes[1].lines[2].get_ydata()
    assert decoupled_negative[ratios > 5.01].max() == 0 and decoupled_negative[ratios < 4.9].min() > 0
    assert plot_stale_token_weights(0.3, None).axes
    plt.close("all")
