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
