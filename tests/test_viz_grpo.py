"""The figures and widget of lesson 08 (GRPO) draw correctly."""

import pytest

from rlbook.viz import grpo as grpo_viz


def test_group_advantages_figure_and_widget():
    fig = grpo_viz.plot_group_advantages(3, 4)
    left, right = fig.axes[:2]
    heights = sorted(round(p.get_height(), 3) for p in left.patches)
    assert -1.732 in heights and 0.577 in heights and -1.5 in heights and 0.5 in heights
    assert list(right.get_xticks()) == [0, 1, 2, 3, 4]  # one tick per possible number of right answers
    # each rule draws a right-answer curve and a wrong-answer curve over k = 0 … G
    assert len(right.lines) >= 2 * len(grpo_viz.ADVANTAGE_RULES)
    # the right panel keys its own colours (a reader should not have to look back at the left legend)
    assert [t.get_text() for t in right.get_legend().get_texts()] == list(grpo_viz.ADVANTAGE_RULES)
    with pytest.raises(ValueError, match="n_correct"):
        grpo_viz.plot_group_advantages(5, 4)
    with pytest.raises(ValueError, match="group_size"):
        grpo_viz.plot_group_advantages(1, 1)


def test_models_in_memory_bars_add_up():
    fig = grpo_viz.plot_models_in_memory({"GRPO": {"policy": 10, "reference": 10},
                                          "PPO": {"policy": 10, "reference": 10, "critic": 10}},
                                         bytes_per_parameter=1, unit=1, unit_name="B")
    widths = [p.get_width() for p in fig.axes[0].patches]
    assert sum(widths) == 50
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["policy", "reference", "critic"]  # one legend entry per role
    with pytest.raises(ValueError, match="models"):
        grpo_viz.plot_models_in_memory({})


def test_widget_right_answers_slider_follows_the_group_size():
    import matplotlib.pyplot as plt

    interactive = grpo_viz.group_advantages_widget(max_group_size=16).widget
    group, correct = interactive.kwargs_widgets
    assert correct.max == group.value == 4
    group.value = 12
    assert correct.max == 12  # the whole range of the slider is a possible number of right answers
    correct.value = 10
    group.value = 6
    assert (correct.max, correct.value) == (6, 6)
    plt.close("all")


def test_push_panel_shows_the_exact_push_beside_its_limit():
    import matplotlib.pyplot as plt

    fig = grpo_viz.plot_group_advantages(3, 8, show_push=True)
    assert len(fig.axes) == 3
    push = fig.axes[2]
    exact, limit, flat = push.lines[:3]
    p, relative = exact.get_data()
    assert relative[abs(p - 0.5).argmin()] == pytest.approx(1.0, abs=1e-3)
    # G = 8: a prompt at p = 0.02 is pushed about 1.39× as hard as one at ½; the large-G limit says 3.57×
    assert relative[abs(p - 0.02).argmin()] == pytest.approx(1.387, abs=0.01)
    assert limit.get_data()[1][abs(p - 0.02).argmin()] == pytest.approx(3.57, abs=0.01)
    assert set(flat.get_data()[1]) == {1.0}
    assert len(grpo_viz.plot_group_advantages(3, 8).axes) == 2  # the default figure keeps its two panels
    plt.close("all")


def test_widget_starts_where_asked():
    pytest.importorskip("ipywidgets")
    interactive = grpo_viz.group_advantages_widget(max_group_size=64, group_size=8, n_correct=3).widget
    group, correct = interactive.kwargs_widgets
    assert (group.value, correct.value, correct.max) == (8, 3, 8)
    with pytest.raises(ValueError):
        grpo_viz.group_advantages_widget(max_group_size=16, group_size=32)
