"""Lesson 03's figures: the clip regions come from the library's loss, and the GAE plot draws its limits."""

import numpy as np
import pytest
import torch

from rlbook.advantages import gae
from rlbook.viz import ppo as ppo_viz


def test_clip_regions_are_shaded_where_the_gradient_is_zero():
    fig = ppo_viz.plot_clipped_objective(0.2, 0.28)
    axes = np.array(fig.axes).reshape(2, 2)
    positive_span = [p for p in axes[0, 0].patches]
    assert len(positive_span) == 1  # one zero-gradient region for A > 0: r > 1.28
    x_left = positive_span[0].get_x()
    assert x_left == pytest.approx(1.28, abs=0.01)
    assert len(axes[0, 1].patches) == 1  # and one for A < 0: r < 0.8
    fig = ppo_viz.plot_clipped_objective(0.2, 0.2, 3.0)
    assert len(np.array(fig.axes).reshape(2, 2)[0, 1].patches) == 2  # the dual clip adds r > c


def test_overlay_on_given_axes_and_bad_axes():
    fig = ppo_viz.plot_clipped_objective()
    axes = np.array(fig.axes).reshape(2, 2)
    same = ppo_viz.plot_clipped_objective(0.2, 0.28, ax=axes, shade=False, label="clip-higher", colour="tab:purple")
    assert same is fig
    assert "clip-higher" in [t.get_text() for t in axes[0, 0].get_legend().get_texts()]
    with pytest.raises(ValueError, match="ax"):
        ppo_viz.plot_clipped_objective(ax=[axes[0, 0]])
    with pytest.raises(ValueError, match="advantage"):
        ppo_viz.plot_clipped_objective(advantage=0.0)
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_viz.plot_clipped_objective(dual_clip=0.5)


def test_gae_plot_draws_the_two_limits():
    rewards = torch.tensor([-0.01, -0.02, 0.0, 1.0])
    values = torch.tensor([0.6, 0.7, 0.65, 0.9])
    fig = ppo_viz.plot_gae(rewards, values, 1.0, 0.5, tokens=["<think>", "1", "\n", "<|im_end|>"])
    bottom = fig.axes[1]
    td_line, monte_carlo_line = bottom.lines[0], bottom.lines[1]
    np.testing.assert_allclose(td_line.get_ydata(), gae(rewards, values, 1.0, 0.0)[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(monte_carlo_line.get_ydata(), gae(rewards, values, 1.0, 1.0)[0].numpy(), atol=1e-6)
    assert [t.get_text() for t in bottom.get_xticklabels()] == ["<t>", "1", "↵", "end"]
    with pytest.raises(ValueError, match="tokens"):
        ppo_viz.plot_gae(rewards, values, tokens=["a"])
    with pytest.raises(ValueError, match="lam"):
        ppo_viz.plot_gae(rewards, values, lam=1.5)


def test_run_curves_draw_one_line_per_label_and_seed():
    import pandas as pd

    frame = pd.DataFrame([{"label": label, "seed": seed, "step": step, "reward": 0.1 * step + seed}
                          for label in ("a", "b") for seed in (0, 1, 2) for step in (1, 2, 3)])
    fig = ppo_viz.plot_run_curves(frame, "reward")
    lines = fig.axes[0].get_lines()
    assert len(lines) == 6 and {line.get_label() for line in lines} == {f"{l}, seed {s}" for l in "ab" for s in range(3)}
    assert len({line.get_color() for line in lines}) == 2 and len({line.get_linestyle() for line in lines}) == 3
    with pytest.raises(ValueError, match="entropy"):
        ppo_viz.plot_run_curves(frame, "entropy")
