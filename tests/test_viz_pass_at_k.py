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
    one_coin = lines[-1]  # the base's one-coin curve, 1 − (1 − pass@1)^k, dashed
    assert one_coin.get_linestyle() == "--"
    assert np.allclose(one_coin.get_ydata(), 1 - (1 - pass_at_k_curve(BASE, [1])[0]) ** np.array([1, 2, 4, 8, 16]))
    assert any("min–max" in t.get_text() for t in ax.get_legend().get_texts())
    assert any("RL's one coin" in t.get_text() for t in ax.get_legend().get_texts())  # the policy's dashed curve
    plt.close(fig)


def test_panels_add_the_miss_rate_on_a_log_scale():
    fig = viz.plot_pass_at_k_panels(BASE, POLICIES, title="t")
    right = fig.axes[1]
    assert right.get_yscale() == "log"
    miss = right.get_lines()[0].get_ydata()
    expected = 1 - np.array(pass_at_k_curve(BASE, [1, 2, 4, 8, 16]))
    assert np.allclose(miss[~np.isnan(miss)], expected[expected > 0])
    plt.close(fig)


def test_breakdown_counts_and_checks():
    fig = viz.plot_problem_breakdown(BASE, torch.ones(12, 16, dtype=torch.int), 1)
    assert "behind on 0 of 12" in fig.axes[0].get_title()
    plt.close(fig)
    # sorted by the policy's pass@1: the dots rise from left to right at k = 1
    fig = viz.plot_problem_breakdown(BASE, POLICIES["RL"][0], 1)
    dots = fig.axes[0].get_lines()[0].get_ydata()
    assert np.all(np.diff(dots) >= 0)
    plt.close(fig)
    with pytest.raises(ValueError, match="policy must"):
        viz.plot_pass_at_k_breakdown(BASE, POLICIES, 2, policy="nope")
    with pytest.raises(ValueError, match="seed"):
        viz.plot_pass_at_k_breakdown(BASE, POLICIES, 2, policy="RL + KL", seed=1)
    with pytest.raises(ValueError, match="policies"):
        viz.plot_pass_at_k_curves(BASE, {})
    with pytest.raises(ValueError, match="samples"):
        viz.plot_logprob_cdfs({"a": ([], [])})
    with pytest.raises(ValueError, match="families"):
        viz.pass_at_k_widget({})


def test_cdfs_split_by_kind():
    fig = viz.plot_logprob_cdfs({"base": ([-1.0, -2.0, -3.0], ["scratchpad", "direct", "scratchpad"]),
                                 "RL": ([-0.5, -0.4], ["scratchpad", "scratchpad"])})
    scratch, direct = fig.axes
    assert [t.get_text() for t in scratch.get_legend().get_texts()] == ["base (n = 2)", "RL (n = 2)"]
    assert [t.get_text() for t in direct.get_legend().get_texts()] == ["base (n = 1)"]
    assert list(scratch.get_lines()[0].get_xdata()) == [-3.0, -1.0]
    assert list(scratch.get_lines()[0].get_ydata()) == [0.5, 1.0]
    plt.close(fig)


def _fingerprint():
    fig = plt.gcf()
    data = [np.asarray(line.get_xydata()).round(9).tobytes() for ax in fig.axes for line in ax.get_lines()]
    return data + [ax.get_title() for ax in fig.axes]


def test_widget_redraws_on_every_control(monkeypatch):
    monkeypatch.setattr(plt, "show", lambda: None)
    harder = (torch.rand(12, 16, generator=generator) < 0.05).int()
    interactive = viz.pass_at_k_widget({"easy": (BASE, POLICIES), "hard": (harder, POLICIES)})
    draw = interactive.widget.f if hasattr(interactive, "widget") else interactive.f
    draw(family="easy", k=1, policy="RL", seed=0)
    first = _fingerprint()
    for change in ({"family": "hard", "k": 1, "policy": "RL", "seed": 0},
                   {"family": "easy", "k": 16, "policy": "RL", "seed": 0},
                   {"family": "easy", "k": 1, "policy": "RL + KL", "seed": 0},
                   {"family": "easy", "k": 1, "policy": "RL", "seed": 1}):
        plt.close("all")
        draw(**change)
        assert _fingerprint() != first, change
    plt.close("all")
    draw(family="easy", k=1, policy="RL + KL", seed=1)  # a policy with fewer seeds: the last one is used
    plt.close("all")


def test_widget_has_no_policy_menu_for_one_recipe():
    """The r3 read: a one-option policy dropdown is a dead control; with one recipe the widget shows none."""
    import ipywidgets as widgets

    one = {"RL": POLICIES["RL"]}
    interactive = viz.pass_at_k_widget({"easy": (BASE, one)})
    box = interactive.widget if hasattr(interactive, "widget") else interactive
    descriptions = [child.description for child in box.children if isinstance(child, widgets.Dropdown)]
    assert descriptions == ["problems"]
    plt.close("all")
    two = viz.pass_at_k_widget({"easy": (BASE, POLICIES)})
    box = two.widget if hasattr(two, "widget") else two
    assert "policy" in [child.description for child in box.children if isinstance(child, widgets.Dropdown)]
    plt.close("all")


def test_breakdown_labels_the_training_seed_when_named():
    fig = viz.plot_pass_at_k_breakdown(BASE, POLICIES, 2, policy="RL", seed=1, seed_names=(7, 11))
    assert fig.axes[-1].get_title().startswith("RL seed 11 vs the base")
    fig = viz.plot_pass_at_k_breakdown(BASE, POLICIES, 2, policy="RL", seed=1)
    assert fig.axes[-1].get_title().startswith("RL seed index 1 vs the base")


def test_panels_carry_a_caption_and_cdfs_zoom_on_their_tail():
    fig = viz.plot_pass_at_k_panels(BASE, POLICIES, title="t", caption="band: the seeds' range, not an SE")
    assert any("not an SE" in t.get_text() for t in fig.texts)
    plt.close(fig)
    values = list(np.linspace(-1.0, -0.05, 40))
    fig = viz.plot_logprob_cdfs({"base": (values, ["scratchpad"] * 40)}, kinds=("scratchpad",), tail=0.1)
    full, zoom = fig.axes
    assert full.get_ylim() == (0, 1.02) and zoom.get_ylim() == (0, 0.1)
    assert zoom.get_xlim()[1] < -0.7  # cut where the curve reaches a tenth of its answers
    assert "lowest 10%" in zoom.get_title()
    plt.close(fig)
    with pytest.raises(ValueError, match="tail"):
        viz.plot_logprob_cdfs({"base": (values, ["scratchpad"] * 40)}, tail=1.5)


def test_widget_offers_every_policy_and_falls_back_where_a_family_lacks_one(monkeypatch):
    import ipywidgets as widgets
    monkeypatch.setattr(plt, "show", lambda: None)
    interactive = viz.pass_at_k_widget({"easy": (BASE, POLICIES), "hard": (BASE, {"RL + KL": POLICIES["RL + KL"]})})
    box = interactive.widget if hasattr(interactive, "widget") else interactive
    menu = [child for child in box.children if isinstance(child, widgets.Dropdown) and child.description == "policy"]
    assert list(menu[0].options) == ["RL", "RL + KL"]
    draw = interactive.widget.f if hasattr(interactive, "widget") else interactive.f
    draw(family="hard", k=2, policy="RL", seed=1)  # "hard" has no "RL": its first policy is shown
    assert "RL + KL" in plt.gcf().axes[1].get_title()
    plt.close("all")


def test_panels_leave_the_caption_room_and_draw_references_dashed():
    caption = "a long caption " * 20 + "\nand a second line"
    fig = viz.plot_pass_at_k_panels(BASE, POLICIES, caption=caption,
                                    references={"base, one kind only": BASE[:, :8]})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    text = [t for t in fig.texts if t.get_text() == caption][0].get_window_extent(renderer)
    for ax in fig.axes[:2]:  # the caption sits wholly below both panels' x-axis labels
        assert ax.xaxis.label.get_window_extent(renderer).y0 > text.y1
    ref = [line for line in fig.axes[0].get_lines() if line.get_label() == "base, one kind only"][0]
    assert ref.get_linestyle() == "--"
    assert np.allclose(ref.get_ydata(), pass_at_k_curve(BASE[:, :8], [1, 2, 4, 8]))
    assert "0 is off a log axis" in fig.axes[1].get_title()
    plt.close(fig)
