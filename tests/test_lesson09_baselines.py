"""Lesson 09's figures draw variances honestly: linear axes from 0, each bar labelled with its ratio."""

from __future__ import annotations


import pytest

from rlbook.viz import baselines as baselines_viz


def _statistics(scale=1.0):
    values = {"none": 0.04, "rloo": 0.036, "value": 0.03, "critic": 0.028}
    return {name: {"variance": 10 * v * scale, "relative_variance": v * scale, "scale": 1.0, "scale_noise": 0.02,
                   "cosine": 1.0} for name, v in values.items()}


def test_variance_bars_are_linear_from_zero_with_ratio_labels():
    statistics = _statistics()
    fig = baselines_viz.plot_baseline_comparison(statistics, group_size=8)
    for ax in fig.axes[:2]:
        assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    labels = [t.get_text() for t in fig.axes[1].texts]
    assert labels == ["×1.00", "×0.90", "×0.75", "×0.70"]  # each bar over the no-baseline bar


def test_noise_by_setting_is_linear_and_labels_the_growth():
    fig = baselines_viz.plot_noise_by_setting({"0/1": _statistics(), "offset": _statistics(scale=9.8)})
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    assert [t.get_text() for t in ax.texts] == ["×9.8"] * 4


def test_noise_by_setting_labels_carry_the_ratio_se_when_given():
    fig = baselines_viz.plot_noise_by_setting({"0/1": _statistics(), "offset": _statistics(scale=9.8)},
                                              ratio_errors={"offset": {"none": 1.0, "rloo": 0.03}}, decimals=2)
    assert [t.get_text() for t in fig.axes[0].texts] == ["×9.80\n± 1.00", "×9.80\n± 0.03", "×9.80", "×9.80"]


def test_no_ratio_labels_without_a_none_bar():
    statistics = {name: s for name, s in _statistics().items() if name != "none"}
    fig = baselines_viz.plot_baseline_comparison(statistics)
    assert len(fig.axes[1].texts) == 0 and fig.axes[1].get_ylim()[1] == pytest.approx(1.22 * 0.036)


def test_widget_draws_the_ratio_panel_when_given_ratios():
    # the slider's sweep gains the panel of ratios to no baseline (with the predictions) when ratios are passed
    import matplotlib.pyplot as plt

    sweep = {g: _statistics(scale=8 / g) for g in (2, 4, 8)}
    ratios = {name: {g: (1.0, 0.05) for g in sweep} for name in ("rloo", "critic")}
    plt.close("all")
    baselines_viz.group_size_widget(sweep, ratios=ratios, predictions={"heuristic": {2: 1.4, 4: 1.0, 8: 0.8}})
    sweep_figures = [plt.figure(n) for n in plt.get_fignums() if len(plt.figure(n).axes) == 2]
    assert sweep_figures, "the sweep should be drawn with its ratio panel"
    labels = [t.get_text() for t in sweep_figures[0].axes[1].get_legend().get_texts()]
    assert "heuristic" in labels and "rloo, measured ± SE" in labels
    plt.close("all")


def test_formula_plot_marks_the_break_even_and_overlays_the_measured_points():
    import matplotlib.pyplot as plt

    from rlbook.gradients import heuristic_noise_ratios

    # the plain heuristic at p = 0.3: RLOO (1 − p) G/(G − 1) drops below 1 from G = 4 (G > 1/p = 3.3)
    ax = baselines_viz.plot_formula_ratios(0.3, 1.0, 0.0, group_sizes=(2, 3, 4, 8))
    assert "G = 4" in " ".join(t.get_text() for t in ax.get_legend().get_texts())
    curve = ax.lines[0].get_ydata()
    assert list(curve) == pytest.approx([heuristic_noise_ratios(0.3, 1.0, (g,))["rloo"][g] for g in (2, 3, 4, 8)])
    ax = baselines_viz.plot_formula_ratios(0.28, 1.73, 0.19, measured={"rloo": {2: (2.45, 0.15), 4: (1.41, 0.08)}})
    assert "rloo, measured ± SE" in [t.get_text() for t in ax.get_legend().get_texts()]
    # no break-even when the wrong answers' scores are huge and p is small
    ax = baselines_viz.plot_formula_ratios(0.05, 20.0, 0.0, group_sizes=(2, 4))
    assert not any("below none" in t.get_text() for t in ax.get_legend().get_texts())
    plt.close("all")


def test_formula_widget_keeps_m_within_its_bound():
    import matplotlib.pyplot as plt

    from rlbook.gradients import max_mean_share

    widget = baselines_viz.formula_widget(0.28, 1.73, 0.19)
    assert [c.description for c in widget.widget.kwargs_widgets][2] == "m / m_max"
    draw = widget.widget.f
    for p, k in ((0.30, 0.05), (0.9, 1.0), (0.98, 100.0)):    # the reader's two cases, and a corner
        plt.close("all")
        draw(p, k, 1.0)                                        # the slider's far end is the bound itself
        ax = plt.gcf().axes[0]
        assert f"m = {max_mean_share(p, k):.2f}" in ax.get_title()
        assert min(min(line.get_ydata()) for line in ax.get_lines()) >= -1e-9   # no negative variance ratio
    with pytest.raises(ValueError, match="max_mean_share"):
        baselines_viz.formula_widget(0.30, 0.05, 0.8)
    plt.close("all")


def test_tick_labels_rename_a_baseline_and_se_labels_sit_above_the_bars():
    statistics = _statistics()
    fig = baselines_viz.plot_baseline_comparison(statistics, ratio_errors={"rloo": 0.05, "value": 0.04},
                                                 tick_labels={"rloo": "RLOO (renamed)"})
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["none", "RLOO (renamed)", "value", "critic"]
    middle = fig.axes[1]
    assert [t.get_text() for t in middle.texts] == ["×1.00", "×0.90\n±0.05", "×0.75\n±0.04", "×0.70"]
    for text, bar in zip(middle.texts, middle.patches):   # above each bar, in black
        assert text.xy[1] >= bar.get_height() and text.get_color() in ("black", "k", "#000000")
