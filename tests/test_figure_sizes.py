"""The library's figures fit the book's column (``rlbook._figures``): drawn no wider than ``COLUMN_IN`` at the
lessons' 100 dpi, a figure is shown at full size in the book, where one too wide is scaled down below
legibility (``tests/browser/test_book.py`` counts those). Each figure here was wider than the column before
its panels were wrapped into rows."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from rlbook._figures import COLUMN_IN, grid_shape, panel_grid  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _width(figure) -> float:
    return float(figure.get_size_inches()[0])


def test_panels_wrap_into_even_rows_that_fit_the_column():
    assert [grid_shape(n, max_columns=4) for n in (1, 4, 5, 7, 9)] == [(1, 1), (1, 4), (2, 3), (2, 4), (3, 3)]
    fig, axes = panel_grid(7, panel=(3.4, 2.7), title=True)
    assert len(axes) == len(fig.axes) == 7 and fig.axes == axes  # the spare cell of the 4 + 3 grid is gone
    assert _width(fig) == pytest.approx(COLUMN_IN) and fig.get_size_inches()[1] == pytest.approx(5.8)
    fig, axes = panel_grid(2, panel=(4.2, 3.2), min_width=3.4)
    assert _width(fig) == pytest.approx(8.4)  # two panels fit at their own width
    with pytest.raises(ValueError, match="n"):
        panel_grid(0)
    with pytest.raises(ValueError, match="min_width"):
        panel_grid(3, min_width=0)


def test_the_training_history_of_seven_metrics_is_two_rows_and_keeps_each_panel_at_its_index():
    from rlbook.viz.policy_gradient import plot_training_history

    keys = ["reward", "kl_ref", "clip_frac", "value_loss", "length_mean", "approx_kl", "entropy"]
    fig = plot_training_history({key: [0.0, 1.0, 2.0] for key in keys}, keys, title="PPO")
    assert _width(fig) <= COLUMN_IN and [ax.get_title() for ax in fig.axes] == keys
    assert len({ax.get_position().y0 for ax in fig.axes}) == 2


def test_the_figures_that_were_one_strip_wider_than_the_column_now_fit_it():
    from rlbook.ablation import AblationResult
    from rlbook.viz import entropy, pass_at_k, pipeline, preference, scaling

    steps = np.arange(12)
    history = pd.DataFrame({"step": steps, "loss": 0.69 - 0.01 * steps, "rewards/accuracies": 0.5 + 0.02 * steps,
                            "rewards/margins": 0.1 * steps, "logps/chosen": -20 - 0.1 * steps,
                            "logps/rejected": -20 - 0.2 * steps})
    law = pd.DataFrame({"measured": np.linspace(-0.02, 0.01, 8), "first_order": np.linspace(-0.02, 0.012, 8),
                        "natural_cov": np.linspace(0.01, -0.01, 8), "state_cov": np.linspace(0.005, -0.002, 8)})
    correct = torch.arange(16 * 8).reshape(16, 8) % 3 == 0
    stages = pd.DataFrame({"pass@1": [0.3, 0.8], "pass@8": [0.6, 0.9], "format": [0.3, 0.9],
                           "gold preference": [-3.0, -1.0]}, index=["base", "1 · cold-start SFT"])
    memory = scaling.memory_table(["Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-7B"], sequences=8, tokens_per_sequence=64)
    memory = pd.concat([memory.rename(index=lambda n: f"{n} full"), memory.rename(index=lambda n: f"{n} again")])
    runs = {label: [[{"step": s, "reward": 0.1 * s, "entropy": 1.0, "clip_frac": 0.1, "length_mean": 9.0,
                      "step_time": 1.0} for s in range(5)]] for label in ("grpo", "gspo")}
    ablation = AblationResult(histories=runs, seeds=(0,), steps=5)
    figures = {
        "plot_preference_history": preference.plot_preference_history(history),
        "plot_step_law": entropy.plot_step_law(law),
        "plot_pass_at_k_breakdown": pass_at_k.plot_pass_at_k_breakdown(correct, {"RL": [correct]}, 4),
        "plot_stage_table": pipeline.plot_stage_table(stages)[0].figure,
        "plot_training_memory": scaling.plot_training_memory(memory.drop(columns="parameters (B)"), title="GiB")[0].figure,
        "AblationResult.plot": ablation.plot(["reward", "entropy", "clip_frac", "length_mean"]),
    }
    assert {name: _width(fig) for name, fig in figures.items() if _width(fig) > COLUMN_IN + 1e-9} == {}
    assert len(figures["plot_training_memory"].axes) == 4 and figures["plot_training_memory"]._suptitle.get_text() == "GiB"
