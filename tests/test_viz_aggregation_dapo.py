"""Figures and widgets of lessons 10 (aggregation) and 11 (DAPO): they draw, and check their input."""

import pandas as pd
import pytest
import torch

from rlbook.viz import aggregation as agg_viz
from rlbook.viz import dapo as dapo_viz


def test_lengths_mask_and_table():
    mask = agg_viz.lengths_mask([2, 4], width=5)
    assert mask.tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 1, 0]]
    table = agg_viz.token_weight_table([2, 4], max_len=8)
    assert table["seq_mean_token_mean total"].tolist() == pytest.approx([0.5, 0.5])
    assert table["seq_mean_token_mean per token"].tolist() == pytest.approx([0.25, 0.125])
    assert table["token_mean per token"].tolist() == pytest.approx([1 / 6, 1 / 6])
    assert table["seq_mean_token_sum_norm per token"].tolist() == pytest.approx([1 / 16, 1 / 16])
    with pytest.raises(ValueError, match="max_len"):
        agg_viz.token_weight_table([2, 10], max_len=8)
    with pytest.raises(ValueError, match="lengths"):
        agg_viz.lengths_mask([])
    with pytest.raises(ValueError, match="lengths"):
        agg_viz.lengths_mask([0, 3])


def test_token_weight_figures_draw():
    fig = agg_viz.plot_token_weights([3, 9, 20], max_len=24)
    assert len(fig.axes) == 4
    fig = agg_viz.plot_token_weights([3, 9, 20], max_len=24, log_scale=True)
    assert len(fig.axes) == 5, "four panels and one shared colourbar"
    norm = fig.axes[0].images[0].norm
    assert norm.vmin == pytest.approx(1 / (3 * 24)) and norm.vmax == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="log_scale"):
        agg_viz.plot_token_weights([3], log_scale="yes")
    fig = agg_viz.plot_length_bias(max_len=32, batch_lengths=(4, 8))
    lines = fig.axes[0].get_lines()
    assert len(lines) == 4
    grpo = lines[0].get_ydata()
    assert grpo[0] > grpo[-1], "GRPO's per-token weight must fall with length"
    with pytest.raises(ValueError, match="modes"):
        agg_viz.plot_token_weights([3], modes=["nope"])
    with pytest.raises(ValueError, match="batch_lengths"):
        agg_viz.plot_length_bias(max_len=8, batch_lengths=(20,))


def _batch():
    generator = torch.Generator().manual_seed(0)
    old_logp = -3 * torch.rand(4, 6, generator=generator)
    logp = old_logp + 0.4 * torch.randn(4, 6, generator=generator)
    mask = torch.ones(4, 6)
    mask[0, 4:] = 0
    return {"old_logp": old_logp, "logp": logp, "advantages": torch.tensor([1.0, -1.0, 0.5, 0.0]), "mask": mask}


def test_upclip_stats_counts_tokens_above_the_line():
    batch = _batch()
    stats = dapo_viz.upclip_stats(batch, 0.2)
    old, new = batch["old_logp"].exp(), batch["logp"].exp()
    positive = (batch["mask"] > 0) & (batch["advantages"] > 0).unsqueeze(1)
    expected = (positive & (new > 1.2 * old)).sum() / positive.sum()
    assert stats["positive_tokens"] == int(positive.sum()) == 10
    assert stats["upclip_frac"] == pytest.approx(float(expected))
    assert dapo_viz.upclip_stats(batch, 0.28)["upclip_frac"] <= stats["upclip_frac"]
    assert dapo_viz.upclip_stats(batch, 100.0)["upclip_frac"] == 0.0
    assert stats["positive_median_old_prob"] == pytest.approx(float(old[positive].median()))
    with pytest.raises(ValueError, match="missing"):
        dapo_viz.upclip_stats({"logp": batch["logp"]}, 0.2)
    with pytest.raises(ValueError, match="eps_high"):
        dapo_viz.upclip_stats(batch, -0.1)


class _CharTokenizer:
    def decode(self, ids):
        return "".join(chr(ord("a") + i) for i in ids)


def test_upclipped_tokens_lists_the_tokens_above_the_line():
    batch = _batch()
    completion_ids = torch.arange(24).view(4, 6) % 26
    table = dapo_viz.upclipped_tokens(batch, completion_ids, _CharTokenizer(), 0.2)
    stats = dapo_viz.upclip_stats(batch, 0.2)
    assert len(table) == round(stats["upclip_frac"] * stats["positive_tokens"])
    assert (table["ratio"] > 1.2).all() and (table["advantage"] > 0).all()
    assert table["old_prob"].is_monotonic_increasing
    for _, row in table.iterrows():
        assert row["token"] == chr(ord("a") + int(completion_ids[row["row"], row["position"]]))
        assert batch["mask"][row["row"], row["position"]] == 1
    assert dapo_viz.upclipped_tokens(batch, completion_ids, _CharTokenizer(), 100.0).empty
    with pytest.raises(ValueError, match="completion_ids"):
        dapo_viz.upclipped_tokens(batch, completion_ids[:, :3], _CharTokenizer(), 0.2)


def test_dynamic_sampling_figure():
    frame = pd.DataFrame({"step": [1, 2, 1, 2], "frac_zero_adv_groups": [0.5, 0.25, 0.0, 0.25],
                          "frac_zero_adv_groups_trained": [0.0] * 4, "extra_samples": [32, 0, 0, 32]})
    fig = dapo_viz.plot_dynamic_sampling(frame, batch_size=32)
    before, after = fig.axes[0].get_lines()[:2]
    assert list(before.get_ydata()) == [0.25, 0.25] and list(after.get_ydata()) == [0.0, 0.0]
    assert [bar.get_height() for bar in fig.axes[1].patches] == [48, 48]
    with pytest.raises(ValueError, match="extra_samples"):
        dapo_viz.plot_dynamic_sampling(frame.drop(columns="extra_samples"), batch_size=32)


def test_dapo_figures_draw():
    fig = dapo_viz.plot_overlong_penalty(64, 16, lengths=torch.tensor([10, 50, 60, 64]))
    curve = fig.axes[0].get_lines()[0]
    assert min(curve.get_ydata()) == -1.0 and max(curve.get_ydata()) == 0.0
    fig = dapo_viz.plot_clip_higher(0.2, 0.28, batch=_batch())
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="eps_low"):
        dapo_viz.plot_clip_higher(1.5, 2.0)
    table = pd.DataFrame({"reward": [0.5, 0.6], "entropy": [0.2, 0.3]}, index=["a", "b"])
    assert len(dapo_viz.plot_ablation_bars(table, ("reward", "entropy")).axes) == 2
    with pytest.raises(ValueError, match="metrics"):
        dapo_viz.plot_ablation_bars(table, ("nope",))


def _probed_batches():
    """One batch 'updated' under three ε_high: the larger the clip, the further its A > 0 tokens rose."""
    base = _batch()
    return {eps: {**base, "logp": base["old_logp"] + (1 + eps) * (base["logp"] - base["old_logp"])}
            for eps in (0.2, 0.28, 0.5)}


@pytest.mark.parametrize("make", [lambda: agg_viz.token_weights_widget(max_len=16),
                                  lambda: dapo_viz.clip_higher_widget(_batch()),
                                  lambda: dapo_viz.clip_higher_widget(batches=_probed_batches())],
                         ids=["token_weights", "clip_higher", "clip_higher_probed"])
def test_every_control_of_the_widgets_changes_the_figure(make):
    pytest.importorskip("ipywidgets")
    from test_widgets_respond import _drive

    recorder = _drive(make())  # fails on a raising draw or a control that changes nothing
    assert len(recorder.fingerprints) == 1 + len(recorder.interactive.kwargs_widgets) >= 2


def test_the_probed_clip_widget_draws_the_batch_of_each_eps_high():
    pytest.importorskip("ipywidgets")
    batches = _probed_batches()
    widget = dapo_viz.clip_higher_widget(batches=batches)
    slider = widget.widget.kwargs_widgets[1]
    assert [value for _, value in slider.options] == [0.2, 0.28, 0.5] and slider.value == 0.28
    eps_low = widget.widget.kwargs_widgets[0]
    assert eps_low.max == 0.2 and eps_low.value <= 0.2          # never above an ε_high the figure could draw
    with pytest.raises(ValueError, match="not both"):
        dapo_viz.clip_higher_widget(_batch(), batches=batches)
    with pytest.raises(ValueError, match="non-empty"):
        dapo_viz.clip_higher_widget(batches={})


def test_the_trainer_logs_flat_groups_of_the_trained_batch():
    from rlbook.models import load_model
    from rlbook.tasks import get_task
    from rlbook.trainers import OnlineTrainer, preset

    model, tokenizer = load_model("arith-base")
    config = preset("dapo", group_size=4, prompts_per_step=2, max_new_tokens=16, max_resample_rounds=3)
    row = OnlineTrainer(model, tokenizer, get_task("arithmetic", digits=3), config).train(1, progress=False)[-1]
    trained = row["frac_zero_adv_groups_trained"]
    assert trained == 0.0 or (row["trained_samples"] == 0 and trained != trained)


def test_paired_difference_figures_draw_and_check_their_input():
    import matplotlib.pyplot as plt

    differences = pd.DataFrame({"seed 0": [0.1, -0.2], "seed 1": [0.2, 0.0], "mean": [0.15, -0.1],
                                "CI low": [-0.3, -0.8], "CI high": [0.6, 0.6]}, index=["b − a", "c − b"])
    fig = dapo_viz.plot_paired_differences(differences, ["seed 0", "seed 1"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["b − a", "c − b"]
    assert any(list(line.get_xdata()) == [0, 0] for line in ax.lines)          # the line at zero
    plt.close(fig)
    with pytest.raises(ValueError, match="CI low"):
        dapo_viz.plot_paired_differences(differences.drop(columns="CI low"), ["seed 0"])
    frame = pd.DataFrame({"label": ["a"] * 4 + ["b"] * 4, "seed": [0, 0, 1, 1] * 2, "step": [1, 2] * 4,
                          "entropy": [1.0, 1.0, 2.0, 2.0, 1.5, 1.0, 2.5, 3.0]})
    fig = dapo_viz.plot_paired_gap_by_step(frame, "b", "a")
    mean_line = [line for line in fig.axes[0].lines if line.get_label() == "mean over seeds"][0]
    assert list(mean_line.get_ydata()) == pytest.approx([0.5, 0.5])            # (0.5 + 0.5) / 2, (0 + 1) / 2
    plt.close(fig)
    with pytest.raises(ValueError, match="labelled"):
        dapo_viz.plot_paired_gap_by_step(frame, "b", "z")
