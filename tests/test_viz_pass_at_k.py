"""Lesson 18's figures and widget: they draw what they are given, and the widget's controls redraw."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from rlbook.coverage import pass_at_k_curve
from rlbook.viz import pass_at_k as viz

generator = torch.Generator().manual_seed(0)
BASE = (torch.rand(12, 16, generator=generator) < 0.3).int()
POLICIES = {"RL": [(torch.rand(12, 16, generator=generator) < p).int() for p in (0.5, 0.6)],
            "RL + KL": [(torch.rand(12, 16, generator=generator) < 0.4).int()]}


def test_curves_plot_the_mean_and_the_seed_range():
    fig = viz.plot_pass_at_k_curves(BASE, POLICIES, k=4)
    ax = fig.axes[0]
    lines = [line for line in ax.get_lines() if len(line.get_xdata()) == 5]
    assert np.allclose(lines[0].get_ydata(), pass_at_k_curve(BASE, [1, 2, 4, 8, 16]))
    mean = (np.array(pass_at_k_curve(POLICIES["RL"][0], [1, 2, 4, 8, 16])) +
            np.array(pass_at_k_curve(POLICIES["RL"][1], [1, 2, 4, 8, 16]))) / 2
    assert np.allclose(lines[1].get_ydata(), mean)
    assert len(ax.collections) == 2  # one band per policy
    plt.close(fig)


def test_breakdown_counts_and_checks():
    fig = viz.plot_problem_breakdown(BASE, torch.ones(12, 16, dtype=torch.int), 1)
    assert "behind on 0" in fig.axes[0].get_title()
    plt.close(fig)
    with pytest.raises(ValueError, match="policy must"):
        viz.plot_pass_at_k_breakdown(BASE, POLICIES, 2, policy="nope")
    with pytest.raises(ValueError, match="seed"):
        viz.plot_pass_at_k_breakdown(BASE, POLICIES, 2, policy="RL + KL", seed=1)
    with pytest.raises(ValueError, match="policies"):
        viz.plot_pass_at_k_curves(BASE, {})
    with pytest.raises(ValueError, match="samples"):
        viz.plot_logprob_histograms({"a": []})


def test_histograms_show_medians():
    fig = viz.plot_logprob_histograms({"base": [-1.0, -2.0, -3.0], "RL": [-0.5, -0.4]})
    texts = fig.axes[0].get_legend().get_texts()
    assert "median -2.00" in texts[0].get_text() and "median -0.45" in texts[1].get_text()
    plt.close(fig)


def _fingerprint():
    fig = plt.gcf()
    data = [np.asarray(line.get_xydata()).round(9).tobytes() for ax in fig.axes for line in ax.get_lines()]
    return data + [ax.get_title() for ax in fig.axes]


def test_widget_redraws_on_every_control(monkeypatch):
    monkeypatch.setattr(plt, "show", lambda: None)
    interactive = viz.pass_at_k_widget(BASE, POLICIES)
    draw = interactive.widget.f if hasattr(interactive, "widget") else interactive.f
    draw(k=1, policy="RL", seed=0)
    first = _fingerprint()
    for change in ({"k": 16, "policy": "RL", "seed": 0}, {"k": 1, "policy": "RL + KL", "seed": 0},
                   {"k": 1, "policy": "RL", "seed": 1}):
        plt.close("all")
        draw(**change)
        assert _fingerprint() != first, change
    plt.close("all")
    draw(k=1, policy="RL + KL", seed=1)  # a policy with fewer seeds: the last one is used
    plt.close("all")
