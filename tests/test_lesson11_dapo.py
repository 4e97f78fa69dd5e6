"""Lesson 11 (DAPO): the clip-higher bandit toy, the clip figure's counter-example, the clip-mask checker."""

import copy

import numpy as np
import pytest
import torch

from rlbook.exercises.dapo import CLIP_CASES, check_clip_mask, clip_mask_reference
from rlbook.toys import clip_higher_bandit
from rlbook.viz import dapo as dapo_viz


# --- the toy ------------------------------------------------------------------------------------

def test_clip_higher_bandit_shapes_and_start():
    run = clip_higher_bandit(0.28, seeds=3, steps=4, group_size=16)
    assert run["entropy"].shape == run["rare_mass"].shape == run["wrong_mass"].shape == (3, 5)
    assert run["max_ratio"].shape == (3, 4)
    probs = np.array([0.5] + [0.02] * 10 + [0.3 / 9] * 9)
    assert run["entropy"][:, 0] == pytest.approx(-(probs * np.log(probs)).sum())
    assert run["rare_mass"][:, 0] == pytest.approx(0.2)
    assert run["wrong_mass"][:, 0] == pytest.approx(0.3)


def test_clip_higher_bandit_is_reproducible_and_seeded():
    a = clip_higher_bandit(0.2, seeds=2, steps=3, group_size=16, seed=1)
    b = clip_higher_bandit(0.2, seeds=2, steps=3, group_size=16, seed=1)
    c = clip_higher_bandit(0.2, seeds=2, steps=3, group_size=16, seed=2)
    assert np.array_equal(a["entropy"], b["entropy"])
    assert not np.array_equal(a["entropy"], c["entropy"])


def test_clip_higher_bandit_learns_to_avoid_the_wrong_arms():
    run = clip_higher_bandit(0.2, seeds=8, steps=30)
    assert run["wrong_mass"][:, -1].mean() < 0.05 < run["wrong_mass"][:, 0].mean()


@pytest.mark.parametrize("kwargs, name", [
    (dict(eps_high=-0.1), "eps_high"), (dict(eps_high=0.2, eps_low=1.0), "eps_low"),
    (dict(eps_high=0.2, seeds=0), "seeds"), (dict(eps_high=0.2, group_size=1), "group_size"),
    (dict(eps_high=0.2, lr=0.0), "lr"), (dict(eps_high=0.2, common_prob=0.9, rare_prob=0.02), "common_prob"),
])
def test_clip_higher_bandit_rejects_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        clip_higher_bandit(**kwargs)


def test_plot_clip_higher_bandit():
    runs = {e: clip_higher_bandit(e, seeds=2, steps=3, group_size=16) for e in (0.2, 0.5)}
    fig = dapo_viz.plot_clip_higher_bandit(runs)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 2
    with pytest.raises(ValueError, match="runs"):
        dapo_viz.plot_clip_higher_bandit({})
    with pytest.raises(ValueError, match="runs"):
        dapo_viz.plot_clip_higher_bandit({0.2: {"entropy": 1}})


# --- the clip figure: the clip cuts a token's own gradient, it does not cap π ---------------------

def _batch():
    old = torch.tensor([[0.01, 0.5, 0.99], [0.2, 0.3, 0.9]])
    new = torch.tensor([[0.02, 0.55, 0.995], [0.1, 0.3, 0.95]])
    return {"old_logp": old.log(), "logp": new.log(), "advantages": torch.tensor([1.0, -1.0]),
            "mask": torch.ones(2, 3)}


def test_upclip_stats_counts_tokens_past_the_bound_and_the_largest_ratio():
    stats = dapo_viz.upclip_stats(_batch(), 0.2)
    assert stats["positive_tokens"] == 3
    assert stats["upclip_count"] == 1          # 0.01 -> 0.02: ratio 2 > 1.2
    assert stats["max_ratio"] == pytest.approx(2.0)
    assert stats["median_old_prob"] == pytest.approx(0.01)


def test_plot_clip_higher_shows_every_positive_token_on_a_ratio_axis():
    fig = dapo_viz.plot_clip_higher(0.2, 0.2, batch=_batch())
    right = fig.axes[1]
    assert right.get_xscale() == "logit"
    assert sum(len(c.get_offsets()) for c in right.collections) == 3
    ymin, ymax = right.get_ylim()
    assert ymin < 1 and ymax > 2.0            # the ratio-2 token is inside the axes
    assert "1 + ε_high" in right.get_title()
    assert "after the updates" in right.get_ylabel()


def test_plot_clip_higher_schematic_does_not_claim_data():
    """Without a batch the right panel is a schematic: no 'after the updates' on an axis with no points."""
    right = dapo_viz.plot_clip_higher(0.2, 0.28).axes[1]
    assert not right.collections
    assert "after the updates" not in right.get_ylabel()
    assert "1/π_old" in right.get_title() and "1 + ε_high" in right.get_title()


# --- the clip-mask exercise ---------------------------------------------------------------------

def _correct(ratio, advantages, eps_low, eps_high):
    return ((advantages > 0) & (ratio > 1 + eps_high)) | ((advantages < 0) & (ratio < 1 - eps_low))


def test_clip_mask_reference_matches_the_formula():
    ratio = torch.tensor([0.5, 0.9, 1.25, 1.5, 0.5, 0.9, 1.25, 1.5])
    advantages = torch.tensor([1.0] * 4 + [-1.0] * 4)
    assert clip_mask_reference(ratio, advantages, 0.2, 0.28).tolist() == \
        _correct(ratio, advantages, 0.2, 0.28).tolist()
    with pytest.raises(ValueError, match="shape"):
        clip_mask_reference(ratio, advantages[:3], 0.2, 0.28)


def test_check_clip_mask_passes_the_answer_and_a_float_answer(capsys):
    assert check_clip_mask(_correct) is True
    assert check_clip_mask(lambda r, a, lo, hi: _correct(r, a, lo, hi).float()) is True
    assert "matches" in capsys.readouterr().out
    assert len(CLIP_CASES) >= 2


def test_check_clip_mask_not_attempted(capsys):
    def stub(*args):
        raise NotImplementedError

    assert check_clip_mask(stub) is None
    assert check_clip_mask(None) is None
    assert "Not attempted" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, words", [
    (lambda r, a, lo, hi: _correct(r, a, lo, lo), "both sides use ε_low"),
    (lambda r, a, lo, hi: _correct(r, a, hi, hi), "both sides use ε_high"),
    (lambda r, a, lo, hi: _correct(r, a, hi, lo), "swapped"),
    (lambda r, a, lo, hi: (r > 1 + hi) | (r < 1 - lo), "sign of A is ignored"),
    (lambda r, a, lo, hi: ((a > 0) & (r < 1 - lo)) | ((a < 0) & (r > 1 + hi)), "wrong side"),
    (lambda r, a, lo, hi: (a > 0) & (r > 1 + hi), "only the upper clip"),
    (lambda r, a, lo, hi: (a > 0) & (r > 1.5), "expected"),
    (lambda r, a, lo, hi: r[:3] > 1, "shape"),
    (lambda r, a, lo, hi: 1 / 0, "ZeroDivisionError"),
])
def test_check_clip_mask_names_the_mistake(capsys, wrong, words):
    assert check_clip_mask(wrong) is False
    assert words in capsys.readouterr().out


# --- the clip probe: what the clip did while each row was trained ----------------------------------

def test_policy_after_updates_records_the_clip_while_each_row_is_trained(model_dir):
    from rlbook.models import load_model
    from rlbook.probes import policy_after_updates
    from rlbook.rollout import sample

    model, tokenizer = load_model(model_dir)
    rollout = sample(model, tokenizer, ["1+2=", "3+4="], num_samples=4, max_new_tokens=6, seed=0)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, 1.0, -1.0, -1.0])
    batch = policy_after_updates(model, rollout, advantages, updates=4, minibatch_size=4, lr=3e-2,
                                 eps_low=0.2, eps_high=0.0, seed=0)
    mask = batch["mask"] > 0
    assert batch["updates_per_row"].tolist() == [2] * 8          # two passes of two minibatches
    assert torch.isfinite(batch["last_ratio"][mask]).all()
    clipped = batch["clipped_high"]
    assert not (clipped & ~mask).any() and not clipped[advantages < 0].any()   # only A > 0 tokens, only real ones
    # a token past the line at its row's last update was clipped in that update
    past = mask & (advantages > 0).unsqueeze(1) & (batch["last_ratio"] > 1.0)
    assert past.any() and clipped[past].all()
    with pytest.raises(ValueError, match="eps_high"):
        policy_after_updates(model, rollout, advantages, eps_high=-0.1)


def test_track_ratios_leaves_the_updates_alone_and_splits_each_rise_into_own_and_carried(model_dir):
    from rlbook.models import load_model
    from rlbook.probes import policy_after_updates, ratio_crossings
    from rlbook.rollout import sample

    model, tokenizer = load_model(model_dir)
    rollout = sample(model, tokenizer, ["1+2=", "3+4="], num_samples=4, max_new_tokens=6, seed=0)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, 1.0, -1.0, -1.0])
    kwargs = dict(updates=4, minibatch_size=4, lr=3e-2, eps_low=0.2, eps_high=0.0, seed=0)
    plain = policy_after_updates(copy.deepcopy(model), rollout, advantages, **kwargs)
    tracked = policy_after_updates(copy.deepcopy(model), rollout, advantages, track_ratios=True, **kwargs)
    assert torch.equal(plain["logp"], tracked["logp"]) and "ratio_path" not in plain   # same updates, same numbers
    path, mask = tracked["ratio_path"], tracked["mask"] > 0
    assert path.shape == (5, *mask.shape) and tracked["in_update"].shape == (4, 8)
    assert tracked["in_update"].sum(0).tolist() == tracked["updates_per_row"].tolist()
    assert torch.allclose(path[-1][mask], (tracked["logp"] - tracked["old_logp"]).exp()[mask])
    table = ratio_crossings(tracked, 0.0)
    ended = mask & (advantages > 0).unsqueeze(1) & ((tracked["logp"] - tracked["old_logp"]).exp() > 1.0)
    assert len(table) == int(ended.sum()) > 0
    # the two parts add up to the final log-ratio, and the crossing update is where the ratio passed the line
    assert torch.allclose(torch.tensor((table["own_rise"] + table["carried_rise"]).to_numpy()),
                          torch.tensor(table["final_ratio"].to_numpy()).log(), atol=1e-4)
    crossed = table[table["crossed_in"] > 0]
    assert ((crossed["ratio_before"] <= 1.0) & (crossed["ratio_after"] > 1.0)).all()
    for _, row in crossed.iterrows():
        own = bool(tracked["in_update"][row["crossed_in"] - 1, row["row"]])
        assert row["crossed_by"] == ("own" if own else "carried")
    with pytest.raises(ValueError, match="track_ratios"):
        ratio_crossings(plain, 0.0)


def _relief_pair():
    """Two rows of one prompt (G = 2) sharing their first token, a third row of another prompt (G = 2 → 2 prompts)."""
    old = torch.tensor([[0.3, 0.9], [0.3, 0.6], [0.5, 0.99], [0.4, 0.2]]).log()
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    advantages = torch.tensor([1.0, 1.0, 1.0, -1.0])
    low_new = torch.tensor([[0.36, 0.92], [0.36, 0.62], [0.55, 0.5], [0.3, 0.2]]).log()
    high_new = torch.tensor([[0.39, 0.92], [0.39, 0.61], [0.55, 0.5], [0.3, 0.2]]).log()
    clipped = torch.tensor([[True, False], [True, False], [False, False], [False, False]])
    common = {"old_logp": old, "advantages": advantages, "mask": mask}
    return ({**common, "logp": low_new, "clipped_high": clipped},
            {**common, "logp": high_new, "clipped_high": torch.zeros_like(clipped)})


def test_clip_relief_pairs_the_two_updates_decision_by_decision():
    from rlbook.probes import clip_relief

    low, high = _relief_pair()
    ids = torch.tensor([[5, 6], [5, 7], [5, 6], [5, 6]])
    table = clip_relief(low, high, 2, ids)
    # A > 0 tokens: rows 0-2 (row 3 has A < 0; row 2's second token is padding). Rows 0 and 1 share
    # their first token and its context: one decision standing for two rows.
    assert len(table) == 4
    first = table[(table["prompt"] == 0) & (table["position"] == 0)].iloc[0]
    assert first["rows"] == 2 and bool(first["clipped_low"])
    assert first["old_prob"] == pytest.approx(0.3)
    assert first["difference"] == pytest.approx(np.log(0.39 / 0.36), rel=1e-5)
    second = table[(table["prompt"] == 0) & (table["position"] == 1)]
    assert sorted(second["difference"].round(6)) == pytest.approx(sorted([0.0, np.log(0.61 / 0.62)]), abs=1e-6)
    assert table[table["prompt"] == 1]["difference"].abs().max() == pytest.approx(0.0, abs=1e-6)


def test_clip_relief_rejects_two_different_rollouts():
    from rlbook.probes import clip_relief

    low, high = _relief_pair()
    with pytest.raises(ValueError, match="same rollout"):
        clip_relief(low, {**high, "old_logp": high["old_logp"] + 0.1}, 2)
    with pytest.raises(ValueError, match="policy_after_updates"):
        clip_relief(low, {k: v for k, v in high.items() if k != "clipped_high"}, 2)
    with pytest.raises(ValueError, match="multiple"):
        clip_relief(low, high, 3)


def test_upclipped_tokens_lists_the_tokens_clipped_during_an_update():
    batch = {**_batch(), "clipped_high": torch.tensor([[False, True, False], [False, False, False]]),
             "last_ratio": torch.tensor([[1.5, 1.3, 1.0], [1.0, 1.0, 1.0]])}
    table = dapo_viz.upclipped_tokens(batch, torch.zeros(2, 3, dtype=torch.long), _Decode(), 0.2)
    assert table[["row", "position"]].values.tolist() == [[0, 0], [0, 1]]     # ended above, clipped in an update
    assert table["ended_above"].tolist() == [True, False]
    assert table["clipped_in_update"].tolist() == [False, True]
    stats = dapo_viz.upclip_stats(batch, 0.2)
    assert stats["clipped_in_update_count"] == 1
    assert stats["clipped_in_update_median_old_prob"] == pytest.approx(0.5)


class _Decode:
    def decode(self, ids):
        return "x"


def test_plot_ablation_bars_draws_one_dot_per_seed():
    import pandas as pd

    table = pd.DataFrame({"pass@1": [0.5, 0.6]}, index=["a", "b"])
    seeds = pd.Series([0.4, 0.6, 0.55, 0.65], index=pd.MultiIndex.from_tuples([("a", 0), ("a", 1), ("b", 0), ("b", 1)]))
    fig = dapo_viz.plot_ablation_bars(table, ("pass@1",), points={"pass@1": seeds})
    assert len(fig.axes[0].get_lines()) == 4
    with pytest.raises(ValueError, match="points"):
        dapo_viz.plot_ablation_bars(table, ("pass@1",), points={"nope": seeds})


def test_plot_clip_higher_counts_tokens_that_land_on_one_spot():
    old = torch.tensor([[0.2, 0.2, 0.2, 0.9]])
    new = torch.tensor([[0.3, 0.3, 0.3, 0.9]])
    batch = {"old_logp": old.log(), "logp": new.log(), "advantages": torch.tensor([1.0]), "mask": torch.ones(1, 4)}
    texts = [t.get_text() for t in dapo_viz.plot_clip_higher(0.2, 0.2, batch=batch).axes[1].texts]
    assert "×3" in texts


def test_ratio_crossings_by_decision_merges_shared_prefixes_and_splits_own_sibling_and_other_updates():
    from rlbook.probes import ratio_crossings

    # one group of 3 rows (G = 3) and one of another prompt; position 0: rows 0 and 1 sampled token 5, row 2 token 9
    ids = torch.tensor([[5, 1], [5, 2], [9, 1], [5, 1], [7, 7], [7, 7]])
    mask = torch.ones(6, 2)
    advantages = torch.tensor([1.0, 1.0, -1.0, 1.0, -1.0, 1.0])
    # three updates: 1 trains row 2 (the sibling at row 0's context), 2 trains row 3 (another prompt), 3 trains row 0
    in_update = torch.zeros(3, 6, dtype=torch.bool)
    in_update[0, 2] = in_update[1, 3] = in_update[2, 0] = True
    path = torch.ones(4, 6, 2)
    path[:, 0, 0] = path[:, 1, 0] = torch.tensor([1.0, 1.1, 1.3, 1.5])     # the shared first token of rows 0 and 1
    batch = {"ratio_path": path, "in_update": in_update, "mask": mask, "advantages": advantages}
    table = ratio_crossings(batch, 0.2, group_size=3, completion_ids=ids)
    assert len(table) == 1                                                 # rows 0 and 1: one decision, two rows
    decision = table.iloc[0]
    assert (decision["prompt"], decision["position"], decision["rows"]) == (0, 0, 2)
    assert decision["crossed_in"] == 2 and decision["crossed_by"] == "other contexts"
    assert decision["same_context_rise"] == pytest.approx(np.log(1.1))
    assert decision["other_rise"] == pytest.approx(np.log(1.3 / 1.1))
    assert decision["own_rise"] == pytest.approx(np.log(1.5 / 1.3))
    assert decision[["own_rise", "same_context_rise", "other_rise"]].sum() == pytest.approx(np.log(1.5))
    assert (decision["own_updates"], decision["same_context_updates"], decision["other_updates"]) == (1, 1, 1)
    by_row = ratio_crossings(batch, 0.2)                                    # the old count: two rows
    assert len(by_row) == 2
    with pytest.raises(ValueError, match="completion_ids"):
        ratio_crossings(batch, 0.2, group_size=3)


def test_policy_after_updates_warm_start_fills_adams_moments_without_moving_the_weights(model_dir):
    from rlbook.models import load_model
    from rlbook.probes import policy_after_updates
    from rlbook.rollout import sample

    model, tokenizer = load_model(model_dir)
    rollout = sample(model, tokenizer, ["1+2=", "3+4="], num_samples=4, max_new_tokens=6, seed=0)
    other = sample(model, tokenizer, ["5+6=", "7+1="], num_samples=4, max_new_tokens=6, seed=1)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, 1.0, -1.0, -1.0])
    kwargs = dict(updates=4, minibatch_size=4, lr=3e-2, eps_low=0.2, eps_high=0.0, seed=0, track_ratios=True)
    fresh = policy_after_updates(copy.deepcopy(model), rollout, advantages, **kwargs)
    same = policy_after_updates(copy.deepcopy(model), rollout, advantages, warm_start=[], **kwargs)
    assert torch.equal(fresh["logp"], same["logp"])                          # no warm batch: the default
    warm = policy_after_updates(copy.deepcopy(model), rollout, advantages, max_grad_norm=1.0,
                                warm_start=[(other, advantages.flip(0))], **kwargs)
    mask = warm["mask"] > 0
    assert torch.allclose(warm["ratio_path"][0][mask], torch.ones(int(mask.sum())), atol=1e-5)   # weights unmoved
    assert not torch.allclose(warm["logp"], fresh["logp"])


def test_plot_ablation_bars_sets_the_x_labels_it_is_given():
    import pandas as pd

    table = pd.DataFrame({"pass@1": [0.5, 0.6], "n": [32, 60]}, index=["a", "b"])
    fig = dapo_viz.plot_ablation_bars(table, ("pass@1", "n"), xlabels={"n": "completions per step"})
    assert [ax.get_xlabel() for ax in fig.axes] == ["", "completions per step"]


def test_label_panels_titles_each_panel_and_moves_the_legend_off_the_axes():
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2)
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="a")
        ax.plot([0, 1], [1, 0], label="b")
    axes[0].legend(title="line: mean\nband: range")
    dapo_viz.label_panels(fig, ["pass@1 (first round)", "entropy (nats)"])
    assert [ax.get_ylabel() for ax in axes] == ["pass@1", "entropy"]
    assert axes[0].get_legend() is None and len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["a", "b"]
    with pytest.raises(ValueError, match="names"):
        dapo_viz.label_panels(fig, ["x", "y", "z"])
    plt.close(fig)


def test_plot_against_samples_puts_a_row_that_samples_more_further_right():
    import pandas as pd

    frame = pd.DataFrame({"label": ["a"] * 4 + ["b"] * 4, "seed": [0, 0, 1, 1] * 2, "step": [1, 2] * 4,
                          "extra_samples": [0, 0, 0, 0, 32, 32, 32, 32], "pass@1": [0.1, 0.2, 0.3, 0.4] * 2})
    fig = dapo_viz.plot_against_samples(frame, "pass@1", batch_size=32, smooth=1)
    (a, b) = fig.axes[0].get_lines()
    assert list(a.get_xdata()) == [32, 64] and list(b.get_xdata()) == [64, 128]
    assert list(a.get_ydata()) == pytest.approx([0.2, 0.3])
    with pytest.raises(ValueError, match="lacks"):
        dapo_viz.plot_against_samples(frame.drop(columns="extra_samples"), batch_size=32)
