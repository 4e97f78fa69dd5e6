"""The token heatmap (rlbook.viz.tokens) and the figures of lesson 09 (rlbook.viz.baselines) draw correctly."""

import numpy as np
import pytest
import torch

from rlbook.gradients import sweep_group_sizes
from rlbook.models import build_char_tokenizer
from rlbook.viz import baselines as baselines_viz
from rlbook.viz import tokens as tokens_viz


def test_token_labels_show_the_text():
    tokenizer = build_char_tokenizer()
    ids = tokenizer(["<think>1 2</think><answer>3</answer>", "<answer>7</answer>"], add_special_tokens=False,
                    padding=True, return_tensors="pt", padding_side="right")
    labels = tokens_viz.token_labels(tokenizer, ids["input_ids"], ids["attention_mask"])
    assert labels[0] == ["<t", "1", "␣", "2", "t>", "<a", "3", "a>"]
    assert labels[1] == ["<a", "7", "a>"]
    with pytest.raises(ValueError, match="completion_ids"):
        tokens_viz.token_labels(tokenizer, ids["input_ids"][0], ids["attention_mask"][0])


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
    norm = image_axes[0].images[0].norm
    assert norm.vcenter == 1.0 and norm.vmax == pytest.approx(1.3)  # centred on 1, padding ignored
    assert [t.get_text() for t in image_axes[0].get_yticklabels()] == ["r=1", "r=0"]
    with pytest.raises(ValueError, match="panel"):
        tokens_viz.plot_token_heatmap(tokens, {"x": torch.zeros(2, 2)}, mask)
    with pytest.raises(ValueError, match="panels"):
        tokens_viz.plot_token_heatmap(tokens, {}, mask)
    with pytest.raises(ValueError, match="mask"):
        tokens_viz.plot_token_heatmap(tokens[:1], panels, mask)


def test_token_heatmap_limits_and_width():
    tokens = [list("abcdef")]
    mask = torch.ones(1, 6)
    fig = tokens_viz.plot_token_heatmap(tokens, {"kl": torch.linspace(0, 1, 6)[None]}, mask, max_tokens=4,
                                        limits={"kl": (0.0, 2.0)})
    (ax,) = [ax for ax in fig.axes if ax.images]
    assert ax.images[0].get_array().shape == (1, 4)  # cut to max_tokens columns
    assert [t.get_text() for t in ax.texts] == list("abcd")
    assert (ax.images[0].norm.vmin, ax.images[0].norm.vmax) == (0.0, 2.0)


def _sweep():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(64, 6, generator=generator, dtype=torch.float64)
    rewards = (torch.rand(64, generator=generator) > 0.6).double()
    reference = (rewards[:, None] * scores).mean(0)
    values = torch.full((64,), float(rewards.mean()), dtype=torch.float64)
    return sweep_group_sizes(scores, rewards, reference, group_sizes=(2, 4, 8), n_prompts=2, prompt_values=values)


def test_baseline_figures_and_widget():
    sweep = _sweep()
    assert sorted(sweep) == [2, 4, 8] and "critic" not in sweep[2] and "value" in sweep[2]
    fig = baselines_viz.plot_variance_vs_group_size(sweep, highlight=4)
    assert len(fig.axes[0].lines) == len(sweep[2]) + 1  # one line per baseline and the marked G (no 1/G guide)
    ratios = {"rloo": {g: (2.0 / g, 0.1) for g in (2, 4, 8)}}
    fig = baselines_viz.plot_variance_vs_group_size(sweep, ratios=ratios, predictions={"heuristic": {2: 1.9, 8: 1.0}})
    assert len(fig.axes) == 2 and fig.axes[1].get_xscale() == "log"
    fig = baselines_viz.plot_baseline_comparison(sweep[4], group_size=4)
    assert len(fig.axes) == 3 and "G = 4" in fig._suptitle.get_text()
    heights = [p.get_height() for p in fig.axes[2].patches]
    assert heights == pytest.approx([sweep[4][name]["scale"] for name in sweep[4]])
    table = baselines_viz.as_table(sweep[4])
    assert list(table.index) == ["none", "mean", "rloo", "grpo", "value"]
    assert "scale_noise" in table.columns
    with pytest.raises(ValueError, match="statistics"):
        baselines_viz.plot_baseline_comparison({})
    with pytest.raises(ValueError, match="sweep"):
        baselines_viz.plot_variance_vs_group_size({})


def test_noise_by_setting_bars():
    sweep = _sweep()
    shifted = {name: dict(stats, relative_variance=2 * stats["relative_variance"]) for name, stats in sweep[4].items()}
    fig = baselines_viz.plot_noise_by_setting({"0/1": sweep[4], "shifted": shifted}, title="t")
    bars = fig.axes[0].patches
    assert len(bars) == 2 * len(sweep[4])
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list(sweep[4])
    with pytest.raises(ValueError, match="settings"):
        baselines_viz.plot_noise_by_setting({})


def test_token_heatmap_outlines_marked_cells_and_keeps_its_default_size():
    tokens = [list("abc"), list("de")]
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    panels = {"ratio": torch.tensor([[1.0, 1.3, 0.7], [0.9, 1.1, 5.0]])}
    default = tokens_viz.plot_token_heatmap(tokens, panels, mask)
    assert tuple(default.get_size_inches()) == pytest.approx((1.6 + 0.2 * 3, 0.5 + 0.26 * 2 + 0.4))
    assert [t.get_fontsize() for t in default.axes[0].texts] == [6.5] * 5
    clipped = torch.tensor([[0, 1, 0], [0, 0, 1]])  # the second mark is on padding: not drawn
    fig = tokens_viz.plot_token_heatmap(tokens, panels, mask, outlines={"ratio": clipped}, fontsize=9,
                                        row_height=0.3)
    (ax,) = [ax for ax in fig.axes if ax.images]
    assert [(p.get_x(), p.get_y()) for p in ax.patches] == [(0.5, -0.5)]
    assert {t.get_fontsize() for t in ax.texts} == {9}
    with pytest.raises(ValueError, match="not drawn"):
        tokens_viz.plot_token_heatmap(tokens, panels, mask, outlines={"kl": clipped})
    with pytest.raises(ValueError, match="shape"):
        tokens_viz.plot_token_heatmap(tokens, panels, mask, outlines={"ratio": torch.zeros(2, 2)})
