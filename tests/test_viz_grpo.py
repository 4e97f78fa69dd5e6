"""The figures and widgets of lessons 08 (GRPO) and 09 (baselines), and the token heatmap, draw correctly."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from rlbook.models import build_char_tokenizer  # noqa: E402
from rlbook.viz import baselines as baselines_viz  # noqa: E402
from rlbook.viz import grpo as grpo_viz  # noqa: E402
from rlbook.viz import tokens as tokens_viz  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_token_labels_show_the_text():
    tokenizer = build_char_tokenizer()
    ids = tokenizer(["<think>1 2</think><answer>3</answer>", "<answer>7</answer>"], add_special_tokens=False,
                    padding=True, return_tensors="pt", padding_side="right")
    labels = tokens_viz.token_labels(tokenizer, ids["input_ids"], ids["attention_mask"])
    assert labels[0] == ["<t", "1", "␣", "2", "t>", "<a", "3", "a>"]
    assert labels[1] == ["<a", "7", "a>"]


def test_token_heatmap_panels_and_cell_text():
    tokens = [list("abc"), list("de")]
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    panels = {"ratio": torch.tensor([[1.0, 1.3, 0.7], [0.9, 1.1, 5.0]]),
              "clip mask": torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])}
    fig = tokens_viz.plot_token_heatmap(tokens, panels, mask, centers={"ratio": 1.0}, row_labels=["r=1", "r=0"])
    image_axes = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title(loc="left") for ax in image_axes] == ["ratio", "clip mask"]
    shown = [t.get_text() for t in image_axes[0].texts]
    assert shown == ["a", "b", "c", "d", "e"]
    assert np.ma.is_masked(image_axes[0].images[0].get_array()[1, 2])  # padding is blank, its 5.0 not drawn
    with pytest.raises(ValueError, match="panel"):
        tokens_viz.plot_token_heatmap(tokens, {"x": torch.zeros(2, 2)}, mask)
    with pytest.raises(ValueError, match="panels"):
        tokens_viz.plot_token_heatmap(tokens, {}, mask)


def test_group_advantages_figure_and_widget():
    fig = grpo_viz.plot_group_advantages(3, 4)
    left = fig.axes[0]
    heights = sorted(round(p.get_height(), 3) for p in left.patches)
    assert -1.732 in heights and 0.577 in heights and -1.5 in heights and 0.5 in heights
    with pytest.raises(ValueError, match="n_correct"):
        grpo_viz.plot_group_advantages(5, 4)
    assert grpo_viz.group_advantages_widget(max_group_size=8) is not None


def test_models_in_memory_bars_add_up():
    fig = grpo_viz.plot_models_in_memory({"GRPO": {"policy": 10, "reference": 10},
                                          "PPO": {"policy": 10, "reference": 10, "critic": 10}},
                                         bytes_per_parameter=1, unit=1, unit_name="B")
    widths = [p.get_width() for p in fig.axes[0].patches]
    assert sum(widths) == 50
    with pytest.raises(ValueError, match="models"):
        grpo_viz.plot_models_in_memory({})


def _sweep():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(64, 6, generator=generator, dtype=torch.float64)
    rewards = (torch.rand(64, generator=generator) > 0.6).double()
    reference = (rewards[:, None] * scores).mean(0)
    return baselines_viz.sweep_group_sizes(scores, rewards, reference, group_sizes=(2, 4, 8), n_prompts=2)


def test_baseline_figures_and_widget():
    sweep = _sweep()
    assert sorted(sweep) == [2, 4, 8] and "critic" not in sweep[2]
    fig = baselines_viz.plot_variance_vs_group_size(sweep, highlight=4)
    assert len(fig.axes[0].lines) >= 4
    fig = baselines_viz.plot_baseline_comparison(sweep[4], group_size=4)
    assert len(fig.axes) == 3 and "G = 4" in fig._suptitle.get_text()
    table = baselines_viz.as_table(sweep[4])
    assert list(table.index) == ["none", "mean", "rloo", "grpo"]
    assert baselines_viz.group_size_widget(sweep) is not None
