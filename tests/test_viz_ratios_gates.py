"""The figures, widgets and helpers of lessons 12 (GSPO/GMPO) and 13 (SAPO/CISPO)."""

import numpy as np
import pandas as pd
import pytest
import torch

from rlbook import probes
from rlbook._figures import COLUMN_IN
from rlbook.models import load_model
from rlbook.tasks import get_task
from rlbook.viz import gates as gate_viz
from rlbook.viz import ratios as ratio_viz


@pytest.fixture(scope="module")
def batch_and_model():
    model, tokenizer = load_model("arith-base")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    batch = probes.off_policy_batch(model, tokenizer, get_task("arithmetic", digits=3), n_prompts=2, group_size=4,
                                    updates=2, minibatch_size=4, max_new_tokens=40, seed=3)
    return batch, model, before


def test_off_policy_batch_records_snapshots_and_leaves_the_model_alone(batch_and_model):
    batch, model, before = batch_and_model
    assert batch.updates == 2 and len(batch.logps) == 3
    assert batch.old_logp.shape == batch.mask.shape == batch.logps[0].shape
    assert batch.rewards.shape == batch.advantages.shape == (8,)
    on_policy = (batch.logps[0] - batch.old_logp) * batch.mask
    assert on_policy.abs().max() < 1e-4  # re-scoring before any step reproduces the sampling log-probs
    assert ((batch.logps[2] - batch.old_logp) * batch.mask).abs().max() > 1e-4  # the steps moved the policy
    assert all(torch.equal(before[name], p) for name, p in model.named_parameters())
    # two minibatches of 4 rows, one per step, together the whole batch
    assert [len(rows) for rows in batch.trained_rows] == [4, 4]
    assert sorted(torch.cat(batch.trained_rows).tolist()) == list(range(8))


def test_off_policy_batch_rescores_in_another_dtype():
    model, tokenizer = load_model("arith-base")
    task = get_task("arithmetic", digits=3)
    plain = probes.off_policy_batch(model, tokenizer, task, n_prompts=1, group_size=2, updates=0, max_new_tokens=16, seed=1)
    assert plain.rescored_logp is None
    batch = probes.off_policy_batch(model, tokenizer, task, n_prompts=1, group_size=2, updates=0, max_new_tokens=16,
                                    seed=1, rescore_dtype=torch.bfloat16)
    assert batch.rescored_logp.dtype == torch.float32 and batch.rescored_logp.shape == batch.old_logp.shape
    gap = ((batch.rescored_logp - batch.old_logp) * batch.mask).abs()
    assert 0 < gap.max() < 1.0  # bf16 rounding moves the log-probs, but only a little
    assert torch.equal(plain.old_logp, batch.old_logp)  # the sampled tokens and their fp32 log-probs are unchanged
    assert next(model.parameters()).dtype == torch.float32


def test_off_policy_batch_validates_arguments():
    with pytest.raises(ValueError, match="updates"):
        probes.off_policy_batch(None, None, None, updates=-1)
    with pytest.raises(ValueError, match="group_size"):
        probes.off_policy_batch(None, None, None, group_size=1)


def test_clip_fraction_table_starts_unclipped(batch_and_model):
    batch, _, _ = batch_and_model
    table = ratio_viz.clip_fraction_table(batch)
    assert list(table.index) == [0, 1, 2]
    assert table.loc[0, ["clip grpo", "clip gspo", "clip gmpo"]].abs().max() < 1e-6
    token, sequence = ratio_viz.log_ratios(batch, 2)
    assert token.shape == (int(batch.mask.sum()),) and sequence.shape == (8,)
    with pytest.raises(ValueError, match="update"):
        ratio_viz.log_ratios(batch, 3)
    fig = ratio_viz.plot_clip_fractions(table)
    assert len(fig.axes[0].lines) == 3


def test_one_step_drift_reads_the_untrained_rows(batch_and_model):
    batch, _, _ = batch_and_model
    drift = ratio_viz.one_step_drift(batch)
    untrained = torch.ones(len(batch.texts), dtype=torch.bool)
    untrained[batch.trained_rows[0]] = False
    log_s = ratio_viz.log_ratios(batch, 1)[1][untrained.numpy()]
    assert drift["median |log s_i|"] == pytest.approx(float(np.median(np.abs(log_s))), rel=1e-5)
    # a band wide enough holds every sequence and clips nothing; the default one can only hold fewer
    wide = ratio_viz.one_step_drift(batch, eps_low=0.99, eps_high=100.0)
    assert wide["sequences inside GSPO's band"] == 1.0 and wide["clip gspo"] == 0.0
    assert drift["sequences inside GSPO's band"] <= 1.0 and drift["clip gspo"] >= wide["clip gspo"]
    assert drift["clip grpo"] == wide["clip grpo"]  # GRPO's clip does not depend on GSPO's band
    table = ratio_viz.clip_fraction_table(batch)
    assert table.loc[0, "r_t min"] == pytest.approx(1.0, abs=1e-4) and table.loc[0, "r_t max"] == pytest.approx(1.0, abs=1e-4)
    assert (table["r_t min"] <= 1.0 + 1e-4).all() and (table["r_t max"] >= 1.0 - 1e-4).all()
    with pytest.raises(ValueError, match="eps_low"):
        ratio_viz.one_step_drift(batch, eps_low=0)


def test_ratio_spread_plot_and_widget(batch_and_model):
    batch, _, _ = batch_and_model
    fig = ratio_viz.plot_ratio_spread(batch, 1, eps_sequence=1e-3)
    assert len(fig.axes) == 2 and fig.axes[0].get_xscale() == "log"
    with pytest.raises(ValueError, match="eps_token"):
        ratio_viz.plot_ratio_spread(batch, 1, eps_token=0)
    # both sides of GSPO's band are drawn (3e-4 below, 4e-4 above), and the probe says which loss moved it
    assert len(fig.axes[0].lines) == 3 and batch.variant == "grpo"


def test_gspo_clip_fraction_is_policy_losss_metric(batch_and_model):
    batch, _, _ = batch_and_model
    table = ratio_viz.clip_fraction_table(batch)
    assert ratio_viz.gspo_clip_fraction(batch, 0, 1e-6) == 0.0  # on-policy nothing is clipped
    assert ratio_viz.gspo_clip_fraction(batch, 1, 0.2, variant="grpo") == pytest.approx(table.loc[1, "clip grpo"])
    wide, tight = ratio_viz.gspo_clip_fraction(batch, 1, 1.0), ratio_viz.gspo_clip_fraction(batch, 1, 1e-6)
    assert 0.0 <= wide <= tight <= 1.0
    with pytest.raises(ValueError, match="eps"):
        ratio_viz.gspo_clip_fraction(batch, 1, 0.0)
    with pytest.raises(ValueError, match="update"):
        ratio_viz.gspo_clip_fraction(batch, batch.updates + 1, 0.1)


def test_gspo_clip_fraction_on_a_subset_of_responses(batch_and_model):
    batch, _, _ = batch_and_model
    even = np.arange(len(batch.texts)) % 2 == 0  # any split of the responses will do
    tokens = batch.mask.sum(1).numpy()
    whole = ratio_viz.gspo_clip_fraction(batch, 1, 1e-3)
    parts = [ratio_viz.gspo_clip_fraction(batch, 1, 1e-3, rows=picked) for picked in (even, ~even)]
    # the fraction is over tokens, so the whole batch's is the token-weighted mean of the two parts
    weights = [tokens[even].sum(), tokens[~even].sum()]
    assert whole == pytest.approx((parts[0] * weights[0] + parts[1] * weights[1]) / sum(weights), abs=1e-6)
    assert ratio_viz.gspo_clip_fraction(batch, 1, 1e-3, rows=np.flatnonzero(even)) == pytest.approx(parts[0])
    with pytest.raises(ValueError, match="no response"):
        ratio_viz.gspo_clip_fraction(batch, 1, 1e-3, rows=np.zeros(len(batch.texts), dtype=bool))
    with pytest.raises(ValueError, match="one entry per response"):
        ratio_viz.gspo_clip_fraction(batch, 1, 1e-3, rows=np.ones(3, dtype=bool))


def test_plot_histories_overlays_runs():
    runs = {"a": pd.DataFrame({"step": [1, 2], "reward": [0.1, 0.3], "gate_mean": [2.0, 1.9]}),
            "b": pd.DataFrame({"step": [1, 2], "reward": [0.2, 0.4]})}
    fig = ratio_viz.plot_histories(runs, ["reward", "gate_mean"])
    assert len(fig.axes[0].lines) == 2 and len(fig.axes[1].lines) == 1
    with pytest.raises(ValueError, match="entropy"):
        ratio_viz.plot_histories(runs, ["entropy"])
    # a rolling mean is what is drawn; styles reach the line; the legend can sit outside the panels
    fig = ratio_viz.plot_histories(runs, ["reward"], rolling=2, styles={"b": {"color": "red", "ls": ":"}},
                                   legend_outside=True)
    a_line, b_line = fig.axes[0].lines
    assert list(a_line.get_ydata()) == pytest.approx([0.1, 0.2]) and list(b_line.get_ydata()) == pytest.approx([0.2, 0.3])
    assert b_line.get_color() == "red" and b_line.get_linestyle() == ":" and b_line.get_label() == "b"
    with pytest.raises(ValueError, match="rolling"):
        ratio_viz.plot_histories(runs, ["reward"], rolling=0)
    with pytest.raises(ValueError, match="styles"):
        ratio_viz.plot_histories(runs, ["reward"], styles={"c": {}})


def test_gate_plots_and_widget():
    fig = gate_viz.plot_gate_weights(2.0, 4.0, r_max=3.0)
    assert len(fig.axes) == 3
    assert len(fig.axes[1].lines) == 7  # CISPO, importance sampling, PPO, SAPO, the r = 1 marker, PPO's 1 ± ε
    assert fig.get_size_inches()[0] <= COLUMN_IN  # shown at full size in the book's column
    readout = fig.texts[0].get_text()
    assert "τ = 2" in readout and "τ = 4" in readout and f"{gate_viz.half_weight_distance(2.0):.3g}" in readout
    capped = gate_viz.plot_gate_weights(2.0, 4.0, r_max=3.0, cispo_eps_high=0.2).axes[1].lines[0].get_ydata()
    assert max(capped) == pytest.approx(1.2)  # the CISPO curve is drawn at the cap it is given
    with pytest.raises(ValueError, match="tau_pos"):
        gate_viz.plot_gate_weights(0.0, 1.0)
    ratio = torch.tensor([0.5, 1.0, 1.4, 2.0])
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])
    fig = gate_viz.plot_token_coefficients(ratio, advantages, {"ppo": torch.tensor([0.5, 1.0, 0.0, 2.0]),
                                                               "cispo": torch.tensor([0.5, 1.0, 1.4, 2.0])})
    assert len(fig.axes) == 2 and fig.get_size_inches()[0] <= COLUMN_IN
    # the r = 1 marker and PPO's band edges 1 ± ε, dashed in each panel
    assert sorted(line.get_xdata()[0] for line in fig.axes[0].lines) == pytest.approx([0.8, 1.0, 1.2])


def test_gate_weight_closed_forms():
    import math

    assert gate_viz.gate_weight(torch.tensor([1.0, 1.2]), 1.0).tolist() == pytest.approx(
        [1.0, 1 / math.cosh(0.1) ** 2])
    half = gate_viz.half_weight_distance(8.0)
    assert gate_viz.gate_weight(torch.tensor([1 + half]), 8.0).item() == pytest.approx(0.5)
    for bad in (gate_viz.half_weight_distance, lambda tau: gate_viz.gate_weight(torch.ones(1), tau)):
        with pytest.raises(ValueError, match="tau"):
            bad(0.0)
    with pytest.raises(ValueError, match="eps"):
        gate_viz.gate_readout(eps=-0.1)


def test_plot_seed_pairs_draws_one_line_per_seed_and_configuration():
    values = pd.DataFrame({"seed 0": [0.8, 0.7, 0.9], "seed 1": [0.85, 0.75, 0.8]}, index=["grpo", "sapo", "cispo"])
    fig = gate_viz.plot_seed_pairs(values, "grpo")
    ax = fig.axes[0]
    assert len(ax.lines) == 4  # 2 configurations × 2 seeds
    assert list(ax.lines[0].get_ydata()) == [0.8, 0.7]  # grpo's seed 0, then sapo's seed 0
    assert ax.get_ylabel() == "held-out pass@1"
    with pytest.raises(ValueError):
        gate_viz.plot_seed_pairs(values, "ppo")
