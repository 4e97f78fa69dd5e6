"""The figures added to lessons 14 and 15 draw from the tables the lessons build: the filter sweep
(rlbook.viz.throughput.plot_filter_sweep), the behaviour-weight spread and the held-out curves
(rlbook.viz.timeline)."""

from __future__ import annotations


import matplotlib.pyplot as plt
import pandas as pd
import pytest

from rlbook.viz.throughput import plot_filter_sweep
from rlbook.viz.timeline import plot_behaviour_weight_spread, plot_held_out

TOLS = [1e-6, 0.125, 0.25]


def sweep(**extra):
    return pd.DataFrame({"tol": TOLS, "dropped": [0.2, 0.4, 0.7], "update_time": [0.8, 0.6, 0.3],
                         "cosine": [1.0, 0.99, 0.95], "norm_ratio": [1.25, 1.6, 3.0], **extra})


def test_plot_filter_sweep_draws_clean_and_noisy_sweeps():
    noisy = pd.concat([sweep(mislabelled_kept=[0.1, 0.15, 0.2], cosine_reference=[0.9] * 3)
                       .assign(flip_rate=rate, draw=draw, flipped=0.1) for rate in (0.1, 0.2) for draw in (0, 1)])
    figure = plot_filter_sweep(sweep(), noisy, group_size=8)
    axes = figure.axes
    # clean cosine + (own, against the clean gradient) for each flip rate; 2 curves + 2 dotted levels
    assert len(axes) == 3 and len(axes[1].lines) == 5 and len(axes[2].lines) == 4
    assert [tick.get_text() for tick in axes[0].get_xticklabels()] == ["≈0", "1/8", "2/8"]
    assert all(ax.get_ylabel() for ax in axes)
    plt.close(figure)
    figure = plot_filter_sweep(sweep())
    assert len(figure.axes[2].lines) == 0
    plt.close(figure)


def test_plot_filter_sweep_averages_batches_at_column_width():
    batches = pd.concat([sweep().assign(batch=0), sweep(cosine=[1.0, 0.97, 0.91]).assign(batch=1)])
    figure = plot_filter_sweep(batches)
    assert figure.get_figwidth() <= 10.4  # the book's column width
    middle = figure.axes[1]
    mean_line = middle.lines[0]
    assert mean_line.get_ydata() == pytest.approx([1.0, 0.98, 0.93])  # the mean over the two batches
    assert any("2 batches" in label for label in middle.get_legend_handles_labels()[1])
    plt.close(figure)


def test_plot_behaviour_weight_spread_and_held_out():
    spread = pd.DataFrame({"eta": [1, 1, 8, 8], "behaviour_weight_var": [0.01, 0.02, 0.2, 0.3]})
    figure = plot_behaviour_weight_spread(spread)
    assert [tick.get_text() for tick in figure.axes[0].get_xticklabels()] == ["η = 1", "η = 8"]
    plt.close(figure)
    held_out = pd.DataFrame([{"label": label, "seed": seed, "step": step, "pass@1": 0.5, "length_mean": 20.0}
                             for label in ("a", "b") for seed in (0, 1) for step in (8, 16)])
    figure = plot_held_out(held_out)
    assert len(figure.axes) == 2 and len(figure.axes[0].lines) == 2
    plt.close(figure)
