"""Lesson 16's figures and widget: they draw, agree with rlbook.entropy, and check their input."""

import pytest
import torch

from rlbook.entropy import entropy_change
from rlbook.viz import entropy as viz


def test_softmax_step_signs():
    likely = viz.softmax_step(viz.PRESETS["confident"], 0, 0.5)
    rare = viz.softmax_step(viz.PRESETS["confident"], 4, 0.5)
    assert likely["exact"] < 0 < rare["exact"]
    assert likely["predicted"] < 0 < rare["predicted"]
    delta = likely["delta"]
    assert likely["exact"] == pytest.approx(entropy_change(viz.PRESETS["confident"], delta))
    assert float(likely["after"].sum()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="action"):
        viz.softmax_step(viz.PRESETS["flat"], 5, 0.5)
    with pytest.raises(ValueError, match="logits"):
        viz.softmax_step([1.0], 0, 0.5)


def test_figures_draw():
    fig = viz.plot_softmax_step("two-way", 1, 2.0, natural=True)
    assert "ΔH" in fig.axes[0].get_title()
    rare = viz.plot_softmax_step("confident", 4, 1.0)  # the rare action's small Δπ, on the inset's own scale
    inset = rare.axes[0].child_axes[0]
    step = viz.softmax_step(viz.PRESETS["confident"], 4, 1.0)
    assert inset.patches[4].get_height() == pytest.approx(float(step["after"][4] - step["before"][4]))
    assert rare.axes[0].texts[0].get_horizontalalignment() == "right"  # the last action's label stays inside
    with pytest.raises(ValueError, match="preset"):
        viz.plot_softmax_step("nope")
    fig = viz.plot_first_order_error([1.0, 0.0, -1.0], [1.0, 0.0, 0.0], [0.01, 0.1, 1.0])
    assert len(fig.axes[0].lines) == 3
    with pytest.raises(ValueError, match="lrs"):
        viz.plot_first_order_error([1.0, 0.0], [1.0, 0.0], [0.1])
    probes = {"step": [0, 5], "decision": [0.3, 0.9], "pass@1": [0.3, 0.5], "pass@8": [0.9, 0.7]}
    assert len(viz.plot_collapse([0.4, 0.3, 0.1], probes).axes) == 3
    with_se = viz.plot_collapse([0.4, 0.3, 0.1], {**probes, "pass@1 SE": [0.05, 0.04], "pass@8 SE": [0.03, 0.06]})
    assert [t.get_text() for t in with_se.axes[2].get_legend().get_texts()] == ["pass@1 (±1 SE)", "pass@8 (±1 SE)"]
    with pytest.raises(ValueError, match="pass@8"):
        viz.plot_collapse([0.4], {"step": [0], "decision": [0.3], "pass@1": [0.3]})
    fig = viz.plot_token_entropy_histograms(torch.rand(50), torch.rand(50) * 0.1)
    assert len(fig.axes[0].patches) > 0
    with pytest.raises(ValueError, match="early"):
        viz.plot_token_entropy_histograms(torch.tensor([]), torch.rand(3))


def test_controls_figure():
    import pandas as pd

    runs = pd.DataFrame({"control": ["none", "none", "KL", "KL"], "entropy": [0.1, 0.12, 0.2, 0.22],
                         "pass@1": [0.4, 0.5, 0.3, 0.4], "pass@8": [0.7, 0.8, 0.7, 0.9]})
    fig = viz.plot_controls(runs)
    assert len(fig.axes) == 3 and len(fig.axes[0].patches) == 2
    assert viz.plot_controls(runs, units={"entropy": "nats"}).axes[0].get_ylabel() == "nats"
    with pytest.raises(ValueError, match="pass@8"):
        viz.plot_controls(runs.drop(columns="pass@8"))
    # paired: one dot per seed at control − none of that seed, a bar at their mean, the baseline not drawn
    paired = viz.plot_controls(runs.assign(seed=[0, 1, 0, 1]), baseline="none")
    ax = paired.axes[1]
    assert len(ax.patches) == 1 and ax.patches[0].get_height() == pytest.approx(-0.1)
    assert sorted(ax.collections[0].get_offsets()[:, 1]) == pytest.approx([-0.1, -0.1])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["KL"]
    with pytest.raises(ValueError, match="baseline"):
        viz.plot_controls(runs.assign(seed=[0, 1, 0, 1]), baseline="nope")
    with pytest.raises(ValueError, match="seed"):
        viz.plot_controls(runs, baseline="none")


def test_control_curves_show_the_mean_over_seeds_and_their_range():
    import pandas as pd

    rows = [{"control": c, "seed": s, "step": t, "entropy": base - 0.01 * t + 0.02 * s}
            for c, base in (("none", 0.3), ("Clip-Cov", 0.4)) for s in (0, 1) for t in (1, 2, 3)]
    fig = viz.plot_control_curves(pd.DataFrame(rows))
    ax = fig.axes[0]
    assert list(ax.lines[1].get_ydata()) == pytest.approx([0.4, 0.39, 0.38])  # Clip-Cov: mean of seeds 0 and 1
    band = ax.collections[1].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.37) and band.max() == pytest.approx(0.41)  # lowest and highest seed
    assert ax.get_legend().get_texts()[0].get_text() == "none (2 seeds)"
    assert len(viz.plot_control_curves([pd.DataFrame(rows)], controls=["Clip-Cov"]).axes[0].lines) == 1
    with pytest.raises(ValueError, match="controls"):
        viz.plot_control_curves(pd.DataFrame(rows), controls=["nope"])
    with pytest.raises(ValueError, match="reward"):
        viz.plot_control_curves(pd.DataFrame(rows), column="reward")


def test_every_control_of_the_softmax_step_widget_changes_the_figure():
    pytest.importorskip("ipywidgets")
    from test_widgets_respond import _drive

    recorder = _drive(viz.softmax_step_widget())  # fails on a raising draw or a control that changes nothing
    assert len(recorder.fingerprints) == 1 + len(recorder.interactive.kwargs_widgets) >= 2


def _frontier_points():
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = []
    for control, drift in (("none", 0.0), ("KL", 0.05), ("temperature", -0.05)):
        for seed in (0, 1):
            for step in range(1, 6):
                entropy = 0.4 - 0.05 * step + 0.02 * seed + rng.normal(0, 0.01)
                rows.append({"control": control, "seed": seed, "step": step, "entropy": entropy,
                             "reward": 0.9 - 0.5 * np.exp(entropy) + drift + rng.normal(0, 0.02)})
    return pd.DataFrame(rows)


def test_the_frontier_figure_fits_the_chosen_points_only():
    from rlbook.entropy import fit_entropy_frontier

    points = _frontier_points()
    fig = viz.plot_entropy_frontier(points, controls=["none"], seed=1, from_step=2)
    chosen = points[(points.control == "none") & (points.seed == 1) & (points.step >= 2)]
    fit = fit_entropy_frontier(chosen["entropy"].to_numpy(), chosen["reward"].to_numpy())
    title = fig.axes[0].get_title()
    assert title.startswith("4 points") and f"r² = {fit['r2']:.2f}" in title
    assert len(fig.axes[0].collections) == 1 and len(fig.axes[0].lines) == 1
    assert "too few" in viz.plot_entropy_frontier(points, controls=["KL"], seed=0, from_step=5).axes[0].get_title()
    with pytest.raises(ValueError, match="controls"):
        viz.plot_entropy_frontier(points, controls=["nope"])
    with pytest.raises(ValueError, match="reward"):
        viz.plot_entropy_frontier(points.drop(columns="reward"))


def test_every_control_of_the_frontier_widget_changes_the_figure():
    pytest.importorskip("ipywidgets")
    from test_widgets_respond import _drive

    recorder = _drive(viz.entropy_frontier_widget(_frontier_points()))
    assert len(set(recorder.fingerprints)) == len(recorder.fingerprints)
    widget = viz.entropy_frontier_widget(_frontier_points(), off=["temperature"])
    ticked = {w.description: w.value for w in widget.widget.kwargs_widgets if hasattr(w, "description")}
    assert ticked["temperature"] is False and ticked["none"] is True
    with pytest.raises(ValueError, match="off"):
        viz.entropy_frontier_widget(_frontier_points(), off=["nope"])


def test_the_step_law_figure():
    import pandas as pd

    steps = pd.DataFrame({"measured": [-0.01, 0.005, -0.02], "first_order": [-0.012, 0.004, -0.015],
                          "natural_cov": [0.2, 0.1, 0.3], "state_cov": [0.02, -0.01, 0.03]})
    fig = viz.plot_step_law(steps)
    # law, one per covariance, the steps, and the covariances over the steps each on its own axis
    assert len(fig.axes) == 6 and "r = +" in fig.axes[0].get_title()
    assert fig.axes[4].get_ylabel() == "−state_cov" and fig.axes[5].get_ylabel() == "−natural_cov"
    assert list(fig.axes[3].get_lines()[0].get_xdata()) == [0, 1, 2]  # steps numbered as the table's rows
    assert fig.axes[1].get_xlabel().startswith("−state_cov") and fig.axes[2].get_xlabel().startswith("−natural_cov")
    assert fig.axes[1].get_title().startswith("r = +") and fig.axes[1].texts[0].get_text() == "first step"
    assert len(viz.plot_step_law(steps, covariances=["natural_cov"]).axes[1].collections) == 1
    with pytest.raises(ValueError, match="vanilla_cov"):
        viz.plot_step_law(steps, covariances=["vanilla_cov"])
    with pytest.raises(ValueError, match="at least one"):
        viz.plot_step_law(steps, covariances=[])


def test_the_frontier_along_one_run_is_fitted_to_its_early_probes_only():
    import pandas as pd

    from rlbook.entropy import fit_entropy_frontier

    probes = pd.DataFrame({"step": [0, 3, 6, 9, 12], "entropy": [0.3, 0.2, 0.12, 0.08, 0.07],
                           "pass@1": [0.3, 0.45, 0.6, 0.5, 0.4], "se": [0.03] * 5})
    fig = viz.plot_frontier_along_run(probes, fit_steps=3)
    early = fit_entropy_frontier(probes["entropy"][:3].to_numpy(), probes["pass@1"][:3].to_numpy())
    assert f"ceiling b − a = {early['ceiling']:.2f}" in fig.axes[0].get_title()
    assert len(fig.axes) == 2  # the panel and its step colourbar
    with pytest.raises(ValueError, match="fit_steps"):
        viz.plot_frontier_along_run(probes, fit_steps=2)
    with pytest.raises(ValueError, match="pass@1"):
        viz.plot_frontier_along_run(probes.drop(columns="pass@1"), fit_steps=3)


def test_penalising_flips_the_cases_the_paper_names():
    # a likely action penalised raises the entropy; a rare one penalised lowers it (Cui et al. 2025, §3)
    likely = viz.softmax_step(viz.PRESETS["confident"], 0, 0.5, advantage=-1.0)
    rare = viz.softmax_step(viz.PRESETS["confident"], 4, 0.5, advantage=-1.0)
    assert likely["exact"] > 0 > rare["exact"]
    with pytest.raises(ValueError, match="advantage"):
        viz.softmax_step(viz.PRESETS["confident"], 0, 0.5, advantage=0.0)
