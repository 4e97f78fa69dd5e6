"""The figures and widgets of lessons 04 (reward models) and 05 (rejection sampling) draw what they claim."""

import math


import numpy as np
import pandas as pd
import pytest
import torch

from rlbook.metrics import (best_of_n_distribution, best_of_n_exact_kl, best_of_n_kl,
                            expected_max_of_normals, overoptimisation_curves)
from rlbook.toys import best_of_n_efficiency, toy_policy
from rlbook.viz import rejection as rejection_viz
from rlbook.viz import reward_models as rm_viz


# ------------------------------------------------------------------------------ lesson 04


def test_bradley_terry_figure_marks_the_labellers_probability():
    fig = rm_viz.plot_bradley_terry(0.5)
    ax_label, ax_loss = fig.axes
    marked = [line for line in ax_label.lines if line.get_marker() == "o"]
    assert [float(line.get_xdata()[0]) for line in marked] == [1.0, 0.5]
    assert float(marked[0].get_ydata()[0]) == pytest.approx(1 / (1 + math.exp(-1.0 / 0.5)))
    loss_line = ax_loss.lines[0]
    at_zero = np.argmin(np.abs(loss_line.get_xdata()))
    assert loss_line.get_ydata()[at_zero] == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="temperature"):
        rm_viz.plot_bradley_terry(0.0)


def test_reward_model_history_plots_held_out_points_only_where_measured():
    frame = pd.DataFrame({"step": [0, 1, 2, 3], "loss": [0.7, 0.6, 0.5, 0.4], "accuracy": [0.5, 0.6, 0.7, 0.8],
                          "eval/accuracy": [0.55, np.nan, np.nan, 0.85]})
    fig = rm_viz.plot_reward_model_history(frame)
    held_out = fig.axes[1].lines[1]
    # step i's held-out metrics are taken after its update: drawn at i + 1 updates done
    np.testing.assert_allclose(held_out.get_xdata(), [1, 4])
    np.testing.assert_allclose(held_out.get_ydata(), [0.55, 0.85])
    marked = rm_viz.plot_reward_model_history(frame, untrained={"accuracy": 0.6})
    before = [line for line in marked.axes[1].lines if "untrained" in line.get_label()]
    assert len(before) == 1 and before[0].get_xdata()[0] == 0 and before[0].get_ydata()[0] == pytest.approx(0.6)


def test_proxy_against_gold_colours_the_unparsable_kinds():
    proxy, gold = torch.tensor([[1.0, 2.0, 3.0, 0.5]]), torch.tensor([[-3.0, -3.0, 1.0, 0.0]])
    fig = rm_viz.plot_proxy_against_gold(proxy, gold, top=2, kinds=[["cut off", "malformed", "None", "None"]])
    labels = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert "unparsable: cut off (1)" in labels and "unparsable: malformed (1)" in labels
    with pytest.raises(ValueError, match="one kind per sample"):
        rm_viz.plot_proxy_against_gold(proxy, gold, kinds=["cut off"])


def _pool_with_a_hack():
    """Two prompts × 12 samples; the proxy loves the last sample, which gold hates, and otherwise agrees with gold."""
    gold = torch.tensor([[0.0, 1, 2, 3, 1, 0, 2, 1, 0, 3, 1, -3], [1.0, 0, 3, 2, 0, 1, 1, 2, 0, 3, 0, -3]])
    proxy = gold.clone()
    proxy[:, -1] = 10.0
    return proxy, gold


def test_overoptimisation_curves_from_one_pool():
    proxy, gold = _pool_with_a_hack()
    ns = [1, 2, 3, 12]
    curves = overoptimisation_curves(proxy, gold, ns)
    np.testing.assert_allclose(curves["sqrt_kl"], [math.sqrt(best_of_n_kl(n)) for n in ns])
    assert curves["gold"][0] == pytest.approx(gold.mean().item())  # n = 1 is π itself
    assert curves["proxy"][-1] == pytest.approx(10.0) and curves["gold"][-1] == pytest.approx(-3.0)  # n = N: the top
    assert (np.diff(curves["proxy"]) > 0).all()  # E[max] grows with n
    assert curves["gold"][1] > curves["gold"][0] > curves["gold"][-1]  # gold rises, then falls to the hack
    assert (np.diff(curves["gold_oracle"]) > 0).all() and curves["gold_oracle"][-1] == pytest.approx(3.0)
    honest = overoptimisation_curves(gold, gold, ns)
    np.testing.assert_allclose(honest["gold"], honest["gold_oracle"])


def test_proxy_against_gold_rings_the_proxys_top_samples():
    proxy, gold = _pool_with_a_hack()
    fig = rm_viz.plot_proxy_against_gold(proxy, gold, top=2)
    ax = fig.axes[0]
    ringed = ax.collections[1].get_offsets()
    np.testing.assert_allclose(np.asarray(ringed)[:, 1], [10.0, 10.0])  # the two hacks
    assert "-3×2" in ax.get_title()
    means = ax.lines[0].get_ydata()
    assert len(means) == len(torch.unique(gold)) and means[0] == pytest.approx(10.0)  # gold −3: only the hacks
    with pytest.raises(ValueError, match="same samples"):
        rm_viz.plot_proxy_against_gold(proxy, gold[:, :3])


def test_overoptimisation_plot_draws_gains_and_marks_the_peak():
    proxy, gold = _pool_with_a_hack()
    curves = overoptimisation_curves(proxy, gold, [1, 2, 3, 4, 12])
    fig = rm_viz.plot_overoptimisation(curves)
    ax = fig.axes[0]
    proxy_line, gold_line = ax.lines[0], ax.lines[1]
    assert proxy_line.get_ydata()[0] == 0 and gold_line.get_ydata()[0] == 0  # gains over n = 1
    np.testing.assert_allclose(gold_line.get_ydata(), curves["gold"] - curves["gold"][0])
    peak = int(np.argmax(curves["gold"]))
    assert any(f"n = {curves['n'][peak]}" in text.get_text() for text in ax.texts)
    assert len(rm_viz.plot_overoptimisation(curves, fit=False).axes[0].lines) == len(ax.lines) - 1


def test_winners_distribution_is_a_distribution_and_n1_is_the_policy():
    proxy, gold = _pool_with_a_hack()
    fig = rm_viz.plot_best_of_n_winners(proxy, gold, 1)
    bars = fig.axes[0].patches
    levels = torch.unique(gold)
    base, by_proxy, by_gold = (np.array([b.get_height() for b in bars[i * len(levels):(i + 1) * len(levels)]])
                               for i in range(3))
    for heights in (base, by_proxy, by_gold):
        assert heights.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(by_proxy, base)  # best-of-1 is a plain sample
    fig = rm_viz.plot_best_of_n_winners(proxy, gold, 12)
    heights = np.array([b.get_height() for b in fig.axes[0].patches])
    hack_level = int((levels == -3.0).nonzero())
    assert heights[len(levels) + hack_level] == pytest.approx(1.0)  # the proxy's best-of-12 is always the hack


def test_winners_distribution_splits_the_unparsable_bar_by_kind():
    proxy, gold = _pool_with_a_hack()
    kinds = np.full(gold.shape, "None", dtype=object)
    kinds[0, -1], kinds[1, -1] = "malformed", "cut off"   # the proxy's favourite: malformed in pool 0, cut off in pool 1
    fig = rm_viz.plot_best_of_n_winners(proxy, gold, 12, kinds=kinds)
    levels = torch.unique(gold)
    whole = [b for b in fig.axes[0].patches if b.get_hatch() is None]
    parts = {(round(b.get_x(), 3), b.get_hatch()): b.get_height() for b in fig.axes[0].patches if b.get_hatch()}
    hack_level = int((levels == -3.0).nonzero())
    proxy_bar = whole[len(levels) + hack_level]
    x = round(proxy_bar.get_x(), 3)
    assert proxy_bar.get_height() == pytest.approx(1.0)
    assert parts[(x, "//")] == pytest.approx(0.5) and parts[(x, "xx")] == pytest.approx(0.5)  # half cut off, half malformed
    labels = fig.axes[0].get_legend_handles_labels()[1] + [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("malformed" in label for label in labels)
    # without kinds the figure is unchanged: three bars per level, no hatching
    assert len(rm_viz.plot_best_of_n_winners(proxy, gold, 12).axes[0].patches) == 3 * len(levels)


# ------------------------------------------------------------------------------ lesson 05


def test_expected_max_plot_draws_the_bound_and_the_ratio():
    ks = [1, 2, 4, 16, 256]
    exact = [expected_max_of_normals(k) for k in ks]
    fig = rejection_viz.plot_expected_max(ks, exact, monte_carlo={4: (1.03, 0.01)})
    ax, ax_ratio = fig.axes
    bound = ax.lines[0]  # drawn on a fine grid from K = 1, so that it has no kink between the lesson's K
    np.testing.assert_allclose(bound.get_ydata(), np.sqrt(2 * np.log(bound.get_xdata())))
    assert bound.get_xdata()[0] == 1 and bound.get_xdata()[-1] == pytest.approx(256) and len(bound.get_xdata()) > 100
    ratio = ax_ratio.lines[0].get_ydata()
    assert len(ratio) == len(ks) - 1 and (ratio < 1).all() and (np.diff(ratio) > 0).all()


def test_best_of_n_toy_plot_shows_both_distributions_sorted_by_reward():
    fig = rejection_viz.plot_best_of_n_toy(4, 1.0, num_outcomes=8, seed=1)
    probs, rewards = toy_policy(8, seed=1)
    order = torch.sort(rewards).indices
    heights = np.array([b.get_height() for b in fig.axes[0].patches])
    np.testing.assert_allclose(heights[:8], probs[order].numpy())
    np.testing.assert_allclose(heights[8:], best_of_n_distribution(probs, rewards, 4)[order].numpy())
    assert f"{best_of_n_exact_kl(probs, rewards, 4):.3f}" in fig.axes[0].get_title()
    ratio = best_of_n_efficiency(probs, rewards, [4])["ratio"][0]
    assert f"best-of-4 gets {ratio:.1%} of the reward gain" in fig.axes[0].get_title()
    assert "n = 1 is π itself" in rejection_viz.plot_best_of_n_toy(1, 1.0, num_outcomes=8, seed=1).axes[0].get_title()


def test_kl_plot_and_history_plot():
    ns = [1, 2, 4, 8]
    fig = rejection_viz.plot_kl_against_bound(ns, {"toy": [0.0, 0.1, 0.5, 1.0]})
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), [best_of_n_kl(n) for n in ns])
    history = pd.DataFrame({"round": [0, 1, 2], "eval/pass@1": [0.3, 0.5, 0.6], "sample_reward": [np.nan, 0.3, 0.5],
                            "best_of_n_reward": [np.nan, 0.9, 0.95]})
    fig = rejection_viz.plot_rejection_sampling_history(history)
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), [0.3, 0.5, 0.6])
    np.testing.assert_allclose(fig.axes[1].lines[1].get_ydata(), [0.9, 0.95])


def test_kl_plot_draws_error_bands_and_ceilings():
    ns = [1, 2, 4, 8]
    fig = rejection_viz.plot_kl_against_bound(ns, {"toy": [0.0, 0.1, 0.5, 1.0], "verifier": [0.0, 0.1, 0.3, 0.4]},
                                              errors={"verifier": [0.0, 0.01, 0.02, 0.03]}, ceilings={"verifier": 0.45})
    ax = fig.axes[0]
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.0) and band.max() == pytest.approx(0.46)  # 0.4 + 2 · 0.03
    assert any(list(line.get_ydata()) == [0.45, 0.45] for line in ax.lines)  # the ceiling
    assert any("its ceiling, 0.45" in text.get_text() for text in ax.get_legend().get_texts())
    with pytest.raises(ValueError, match="name curves"):
        rejection_viz.plot_kl_against_bound(ns, {"toy": [0, 0, 0, 0]}, ceilings={"other": 1.0})


def test_history_plot_draws_one_line_per_seed_with_clustered_error_bars():
    rows = []
    for seed in (0, 1, 2):
        rows += [{"seed": seed, "round": r, "eval/pass@1": 0.3 + 0.1 * r + 0.01 * seed, "eval/pass@1_se": 0.02,
                  "sample_reward": np.nan if r == 0 else 0.3 * r, "best_of_n_reward": np.nan if r == 0 else 0.9}
                 for r in range(3)]
    fig = rejection_viz.plot_rejection_sampling_history(pd.DataFrame(rows))
    ax_pass, ax_reward = fig.axes
    assert len(ax_pass.containers) == 3  # one error bar set per seed
    segments = ax_pass.containers[0].lines[2][0].get_segments()
    assert [seg[1, 1] - seg[0, 1] for seg in segments] == pytest.approx([0.08] * 3)  # ± 2 s.e.
    assert len(ax_reward.lines) == 6 and "clustered by prompt" in ax_pass.get_title()


def test_verifier_reward_kl_plot_draws_the_frontier_best_of_n_and_the_tuned_policies():
    from rlbook.toys import verifier_frontier

    rates = [0.1, 0.3, 0.6]
    frontier = verifier_frontier(rates, np.linspace(0, 8, 50))
    fig = rejection_viz.plot_verifier_reward_kl(frontier["kl"], frontier["success"], [2, 8], [0.1, 0.5], [0.5, 0.8],
                                                ceiling=(1.0, 1.0), tuned={"seed 0": (2.0, 0.2, 0.75, 0.03)})
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), frontier["success"][np.argsort(frontier["kl"])])
    np.testing.assert_allclose(ax.lines[1].get_xdata(), [0.1, 0.5])
    assert [t.get_text() for t in ax.texts] == ["n=2", "n=8"]
    assert "seed 0" in [t.get_text() for t in ax.get_legend().get_texts()]
    with pytest.raises(ValueError, match="must match"):
        rejection_viz.plot_verifier_reward_kl([0, 1], [0.3], [2], [0.1], [0.5])
    with pytest.raises(ValueError, match="colours"):
        rejection_viz.plot_verifier_reward_kl(frontier["kl"], frontier["success"], [2], [0.1], [0.5],
                                              tuned={"seed 0": (2.0, 0.2, 0.75, 0.03)}, colours={"seed 9": "C9"})
    with pytest.raises(ValueError, match="markers"):
        rejection_viz.plot_verifier_reward_kl(frontier["kl"], frontier["success"], [2], [0.1], [0.5],
                                              tuned={"seed 0": (2.0, 0.2, 0.75, 0.03)}, markers={"seed 9": "o"})


def test_verifier_reward_kl_plot_marks_two_recipes_of_one_seed_apart():
    from rlbook.toys import verifier_frontier

    frontier = verifier_frontier([0.1, 0.3], np.linspace(0, 4, 20))
    tuned = {"lr 1e-3, seed 0": (2.5, 0.3, 0.8, 0.03), "lr 3e-4, seed 0": (1.5, 0.2, 0.92, 0.02)}
    fig = rejection_viz.plot_verifier_reward_kl(frontier["kl"], frontier["success"], [2], [0.1], [0.5], tuned=tuned,
                                                colours={label: rejection_viz.seed_colour(0) for label in tuned},
                                                markers={"lr 3e-4, seed 0": "o"})
    drawn = [container.lines[0].get_marker() for container in fig.axes[0].containers]
    assert drawn == ["D", "o"]   # the default diamond, then the marker asked for


def test_one_colour_per_seed_across_the_history_and_the_plane():
    import matplotlib.colors as mcolors

    from rlbook.toys import verifier_frontier

    rows = [{"seed": seed, "round": r, "eval/pass@1": 0.3 + 0.1 * r, "eval/pass@1_se": 0.02,
             "sample_reward": None if r == 0 else 0.5, "best_of_n_reward": None if r == 0 else 0.9}
            for seed in (1, 2) for r in range(3)]
    history = rejection_viz.plot_rejection_sampling_history(pd.DataFrame(rows))
    history_colours = [mcolors.to_hex(c.lines[0].get_color()) for c in history.axes[0].containers]
    frontier = verifier_frontier([0.1, 0.3], np.linspace(0, 4, 20))
    plane = rejection_viz.plot_verifier_reward_kl(
        frontier["kl"], frontier["success"], [2], [0.1], [0.5],
        tuned={f"tuned, seed {s}": (2.0, 0.2, 0.7, 0.03) for s in (1, 2)},
        colours={f"tuned, seed {s}": rejection_viz.seed_colour(s) for s in (1, 2)})
    plane_colours = [mcolors.to_hex(c.lines[0].get_color()) for c in plane.axes[0].containers]
    expected = [mcolors.to_hex(rejection_viz.seed_colour(s)) for s in (1, 2)]
    assert history_colours == plane_colours == expected      # seed 1 is C1 in both, not C0 in one and C2 in the other
    with pytest.raises(ValueError, match="seed"):
        rejection_viz.seed_colour(-1)


def test_overoptimisation_downturn_over_seeds_with_a_bootstrap_interval():
    from rlbook.metrics import overoptimisation_downturn
    proxy, gold = _pool_with_a_hack()
    gold = gold.repeat(8, 1)                       # 16 prompts, so that the bootstrap has prompts to draw
    hacked = proxy.repeat(8, 1)
    honest = gold + 0.01 * torch.arange(12.0)      # agrees with gold (ties broken), no hack
    ns = [1, 2, 4, 12]
    result = overoptimisation_downturn(torch.stack([hacked, hacked, honest]), gold, ns, resamples=200)
    single = overoptimisation_curves(hacked, gold, ns)["gold"]
    np.testing.assert_allclose(result["curves"][0], single)            # each seed is overoptimisation_curves' gold
    np.testing.assert_allclose(result["mean_curve"], result["curves"].mean(0))
    assert result["drop"] == pytest.approx(result["mean_curve"].max() - result["mean_curve"][-1])
    assert result["seed_drops"][0] > 1 and result["seed_drops"][2] <= 0  # honest: rises to the end, no drop
    assert result["seed_sd"] > 0
    lo, hi = result["interval"]
    assert lo <= result["drop"] + 1e-9 and hi >= lo
    assert result["band"].shape == (2, len(ns)) and (result["band"][0] <= result["band"][1]).all()
    # one proxy: the seed spread is 0, and a pool where every prompt is the same has no bootstrap spread
    same = overoptimisation_downturn(hacked[:1].repeat(4, 1), gold[:1].repeat(4, 1), ns, resamples=50)
    assert same["seed_sd"] == 0.0 and same["interval"][0] == pytest.approx(same["interval"][1])
    # per-pool drops average to the drop at n*; within strata of identical pools there is no spread
    np.testing.assert_allclose(result["pool_drops"].mean(), result["mean_curve"][result["peak"]] - result["mean_curve"][-1])
    mixed = torch.cat([hacked[:8], honest[8:]])
    strata = [f"{'hacked' if i < 8 else 'honest'} {i % 2}" for i in range(16)]   # gold's rows alternate two pools
    fixed = overoptimisation_downturn(mixed, gold, ns, resamples=100, strata=strata)
    assert fixed["interval"][0] == pytest.approx(fixed["interval"][1]) == pytest.approx(fixed["drop"])
    assert overoptimisation_downturn(mixed, gold, ns, resamples=100)["interval"][1] > fixed["drop"] + 1e-6
    with pytest.raises(ValueError, match="increasing"):
        overoptimisation_downturn(hacked, gold, [4, 2])
    with pytest.raises(ValueError, match="proxies"):
        overoptimisation_downturn(hacked[:, :3], gold, ns)


def test_least_squares_slope_and_the_bradley_terry_floor():
    from rlbook.metrics import bradley_terry_loss_floor, least_squares_slope
    x = torch.tensor([-1.0, 0.0, 1.0, 2.0])
    assert least_squares_slope(2 * x + 5, x) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="constant"):
        least_squares_slope(x, torch.ones(4))
    # a gap of 0: the label is a coin flip, the floor is ln 2; a huge gap: the label is certain, the floor 0
    assert bradley_terry_loss_floor([0.0], 0.5) == pytest.approx(math.log(2))
    assert bradley_terry_loss_floor([1e4, -1e4], 0.5) == pytest.approx(0.0, abs=1e-12)
    p = 1 / (1 + math.exp(-1 / 0.5))
    entropy = -p * math.log(p) - (1 - p) * math.log(1 - p)
    assert bradley_terry_loss_floor([1.0, -1.0], 0.5) == pytest.approx(entropy)
    # the floor is the least expected loss: a model at σ(Δr) = p pays H(p), any other margin pays more
    margin = torch.linspace(-4, 6, 1001)
    expected = -(p * torch.nn.functional.logsigmoid(margin) + (1 - p) * torch.nn.functional.logsigmoid(-margin))
    assert expected.min().item() == pytest.approx(entropy, abs=1e-5)
    with pytest.raises(ValueError, match="temperature"):
        bradley_terry_loss_floor([1.0], 0.0)


def test_overoptimisation_plot_with_seeds_and_a_rescaled_proxy():
    from rlbook.metrics import overoptimisation_downturn
    proxy, gold = _pool_with_a_hack()
    ns = [1, 2, 3, 4, 12]
    curves = overoptimisation_curves(proxy, gold, ns)
    downturn = overoptimisation_downturn(torch.stack([proxy, gold + 0.01 * torch.arange(12.0)]), gold, ns, resamples=50)
    fig = rm_viz.plot_overoptimisation(curves, downturn=downturn, proxy_scale=2.0)
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), (curves["proxy"] - curves["proxy"][0]) / 2)
    gold_line = next(line for line in ax.lines if "mean of 2" in line.get_label())
    np.testing.assert_allclose(gold_line.get_ydata(), downturn["mean_curve"] - downturn["mean_curve"][0])
    assert len(ax.collections) == 1  # the band
    with pytest.raises(ValueError, match="proxy_scale"):
        rm_viz.plot_overoptimisation(curves, proxy_scale=0.0)
    capped = rm_viz.plot_overoptimisation(curves, proxy_scale=2.0, proxy_name="RM 0", max_gain=4.0).axes[0]
    assert "(RM 0)" in capped.lines[0].get_label()
    assert any(list(line.get_ydata()) == [4.0, 4.0] for line in capped.lines)   # the ceiling
    capped.figure.canvas.draw()   # the legend sits below the axes: it hides no curve and not the ceiling's label
    renderer = capped.figure.canvas.get_renderer()
    assert capped.get_legend().get_window_extent(renderer).y1 < capped.get_window_extent(renderer).y0
    assert rm_viz.plot_bradley_terry(0.5).axes[1].get_ylabel()


def test_bradley_terry_figure_has_no_hidden_reference_and_history_draws_floors():
    labels = [line.get_label() for line in rm_viz.plot_bradley_terry(0.5).axes[0].lines]
    assert labels.count("T = 0.5") + labels.count("T = 0.50") == 1
    frame = pd.DataFrame({"step": [0, 1, 2, 3], "loss": [0.7, 0.6, 0.5, 0.4], "accuracy": [0.5, 0.6, 0.7, 0.8],
                          "margin": [0.0, 0.2, 0.4, 0.6], "eval/accuracy": [0.55, np.nan, np.nan, 0.85],
                          "eval/margin": [0.1, np.nan, np.nan, 0.9]})
    fig = rm_viz.plot_reward_model_history(frame, loss_floor=0.3, label_agreement=0.93, margins=True)
    assert len(fig.axes) == 3
    assert any(np.allclose(line.get_ydata(), 0.3) for line in fig.axes[0].lines)
    assert any(np.allclose(line.get_ydata(), 0.93) for line in fig.axes[1].lines)
    np.testing.assert_allclose(fig.axes[2].lines[1].get_ydata(), [0.1, 0.9])
    smoothed = rm_viz.plot_reward_model_history(frame, smooth=2)
    running = [line for line in smoothed.axes[0].lines if "running mean" in line.get_label()]
    np.testing.assert_allclose(running[0].get_ydata(), [0.7, 0.65, 0.55, 0.45])   # centred window of 2 (pandas)
    with pytest.raises(ValueError, match="smooth"):
        rm_viz.plot_reward_model_history(frame, smooth=0)
    # the loss panel marks the Bradley–Terry optimum margins Δgold / T, which move with T
    optimum = [line.get_xdata()[0] for line in rm_viz.plot_bradley_terry(1.0).axes[1].lines if line.get_marker() == "o"]
    np.testing.assert_allclose(sorted(optimum), [0.5, 1.0])
    # at T = 0.1 the gap-1 minimum (Δr = 10) is past the axis: an arrow at the edge says where, not nothing
    loss_panel = rm_viz.plot_bradley_terry(0.1).axes[1]
    assert [line.get_marker() for line in loss_panel.lines].count(">") == 1
    assert any("min at 10.0" in text.get_text() for text in loss_panel.texts)


def test_best_of_n_share_rise_bootstraps_over_prompts():
    from rlbook.metrics import best_of_n_expectation, best_of_n_share_rise
    ranked = torch.arange(12.0).repeat(16, 1)                        # every proxy ranks sample 11 top
    proxies = torch.stack([ranked, ranked.flip(-1)])                 # ... and a second one sample 0
    top = torch.zeros(16, 12)
    top[:, 11] = 1.0                                                 # the property: sample 11, in every prompt
    result = best_of_n_share_rise(proxies, top, 1, 12, resamples=200)
    expected = [(best_of_n_expectation(p, top, 12) - best_of_n_expectation(p, top, 1)).mean().item() for p in proxies]
    np.testing.assert_allclose(result["seed_rises"], [11 / 12, -1 / 12])
    np.testing.assert_allclose(result["seed_rises"], expected)
    assert result["rise"] == pytest.approx(5 / 12)
    lo, hi = result["interval"]           # every prompt is the same pool: no spread over prompts
    assert lo == pytest.approx(hi) == pytest.approx(5 / 12) and result["se"] == pytest.approx(0, abs=1e-12)
    half = top.clone()
    half[8:] = 0.0                                                   # half the prompts hold no such sample
    spread = best_of_n_share_rise(proxies, half, 1, 12, resamples=400)
    assert spread["rise"] == pytest.approx(5 / 24)
    assert spread["interval"][0] < spread["rise"] < spread["interval"][1] and spread["se"] > 0
    # within strata: prompts 0-7 (the property) and 8-15 (none) keep their counts, so no spread at all
    strata = ["a"] * 8 + ["b"] * 8
    fixed = best_of_n_share_rise(proxies, half, 1, 12, resamples=100, strata=strata)
    assert fixed["interval"][0] == pytest.approx(fixed["interval"][1]) == pytest.approx(5 / 24)
    np.testing.assert_allclose(fixed["pool_rises"], [5 / 12] * 8 + [0.0] * 8)
    with pytest.raises(ValueError, match="one label per prompt"):
        best_of_n_share_rise(proxies, half, 1, 12, strata=["a"])
    with pytest.raises(ValueError, match="proxies"):
        best_of_n_share_rise(proxies[:, :, :3], top, 1, 2)
    with pytest.raises(ValueError, match="pool size"):
        best_of_n_share_rise(proxies, top, 1, 13)


def test_standardised_coefficients_are_partial_effects():
    from rlbook.metrics import standardised_coefficients
    generator = torch.Generator().manual_seed(0)
    gold = torch.randn(4000, generator=generator, dtype=torch.float64)
    length = -0.5 * gold + torch.randn(4000, generator=generator, dtype=torch.float64)   # correlated with gold
    follows_gold = 2 * gold + 3.0
    on_gold, on_length = standardised_coefficients(follows_gold, gold, length)
    assert on_gold == pytest.approx(1.0) and on_length == pytest.approx(0.0, abs=1e-9)   # correlated with length, no partial effect
    assert abs(np.corrcoef(follows_gold, length)[0, 1]) > 0.3
    both = gold - 0.5 * length
    coefficients = standardised_coefficients(both, gold, length)
    assert coefficients[1] < -0.2 and coefficients[0] > 0.5
    with pytest.raises(ValueError, match="constant"):
        standardised_coefficients(torch.ones(10), gold[:10])


def test_pool_best_of_n_kl_is_at_most_the_bound_and_smaller_with_duplicates():
    from rlbook.metrics import best_of_n_kl, pool_best_of_n_kl
    distinct = torch.arange(512.0).repeat(2, 1)
    assert pool_best_of_n_kl(distinct, 1) == pytest.approx(0.0, abs=1e-12)
    for n in (2, 8, 64):                      # many distinct outcomes: close to the bound, never above it
        assert pool_best_of_n_kl(distinct, n) <= best_of_n_kl(n) + 1e-9
        assert pool_best_of_n_kl(distinct, n) == pytest.approx(best_of_n_kl(n), abs=0.05)
    duplicated = torch.cat([torch.arange(256.0), torch.full((256,), 1000.0)]).repeat(2, 1)   # the top half is one text
    assert pool_best_of_n_kl(duplicated, 64) == pytest.approx(math.log(2), abs=1e-6)   # the bound says 3.17
    assert pool_best_of_n_kl(distinct, 512) <= math.log(512) + 1e-9
    with pytest.raises(ValueError, match="P, N"):
        pool_best_of_n_kl(torch.arange(5.0), 2)


def test_bradley_terry_expected_loss_is_least_at_the_optimum_margin():
    from rlbook.metrics import bradley_terry_expected_loss, bradley_terry_loss_floor
    gaps = np.array([1.0, 2.32, 3.0])
    at_optimum = bradley_terry_expected_loss(gaps, gaps / 0.5, 0.5)
    assert at_optimum.mean() == pytest.approx(bradley_terry_loss_floor(gaps, 0.5))          # the floor H(p)
    np.testing.assert_allclose(bradley_terry_expected_loss(gaps, 0.63 * gaps, 0.5), [0.502, 0.223, 0.145], atol=1e-3)
    for scale in (0.5, 0.9, 1.1, 3.0):                                                     # any other margin pays more
        assert (bradley_terry_expected_loss(gaps, scale * gaps / 0.5, 0.5) > at_optimum).all()
    assert bradley_terry_expected_loss([1.0], [0.0], 0.5)[0] == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="temperature"):
        bradley_terry_expected_loss(gaps, gaps, 0.0)


def test_best_of_n_share_rise_of_gold_is_the_fixed_contrast_of_the_downturn_curves():
    from rlbook.metrics import best_of_n_share_rise, overoptimisation_downturn
    proxy, gold = _pool_with_a_hack()
    proxies = torch.stack([proxy, gold + 0.01 * torch.arange(12.0)])
    ns = [1, 2, 3, 4, 12]
    curves = overoptimisation_downturn(proxies, gold, ns, resamples=20)["curves"]
    change = best_of_n_share_rise(proxies, gold, 3, 12, resamples=50)   # gold at n = 12 minus gold at n = 3
    np.testing.assert_allclose(change["seed_rises"], curves[:, -1] - curves[:, 2])
    assert change["rise"] == pytest.approx(float((curves[:, -1] - curves[:, 2]).mean()))
