"""rlbook.timeline (with pipeline_schedule) and rlbook.throughput (lessons 14-15): the
schedule obeys its recurrences, a timeline's busy time and overlap add up, and the filter's update is
the full update rescaled."""

from __future__ import annotations

import math

import numpy as np

import pandas as pd
import pytest
import torch

from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.rollout import sample
from rlbook.throughput import equal_time_table, flat_group_probability, update_gradient, update_seconds
from rlbook.timeline import busy_fraction, overlap_seconds, pipeline_schedule, timeline_durations


def span(timeline):
    return max(e["end"] for e in timeline) - min(e["start"] for e in timeline)


def test_synchronous_schedule_is_the_sum_of_the_phases():
    generate, train = [1.0, 2.0, 0.5], [1.0, 1.0, 1.0]
    timeline = pipeline_schedule(generate, train, 0)
    assert [e["phase"] for e in timeline] == ["generate", "train"] * 3
    assert span(timeline) == pytest.approx(sum(generate) + sum(train))
    assert [e["version"] for e in timeline if e["phase"] == "generate"] == [0, 1, 2]


def test_asynchronous_schedule_overlaps_and_bounds_staleness():
    generate, train = [1.0] * 6, [1.0] * 6
    for staleness in (1, 2, 3):
        timeline = pipeline_schedule(generate, train, staleness)
        assert span(timeline) == pytest.approx(7.0)  # n · max(gen, train) + one fill of the pipe
        versions = [e["version"] for e in timeline if e["phase"] == "generate"]
        assert all(0 <= step - version <= staleness for step, version in enumerate(versions))
    generate, train = [0.2] * 6, [1.0] * 6  # a fast generator runs exactly η rounds ahead
    versions = [e["version"] for e in pipeline_schedule(generate, train, 2) if e["phase"] == "generate"]
    assert versions == [0, 0, 0, 1, 2, 3]
    with pytest.raises(ValueError, match="staleness"):
        pipeline_schedule([1.0], [1.0], -1)
    with pytest.raises(ValueError, match="equal length"):
        pipeline_schedule([1.0, 1.0], [1.0], 1)


def test_overlap_and_durations_of_a_timeline():
    generate, train = [1.0, 2.0, 0.5, 1.5], [1.0, 1.0, 1.0, 1.0]
    synchronous = pipeline_schedule(generate, train, 0)
    assert overlap_seconds(synchronous) == 0.0
    assert timeline_durations(synchronous) == (generate, train)
    asynchronous = pipeline_schedule(generate, train, 1)
    assert timeline_durations(asynchronous) == (generate, train)
    # busy time of the two lanes = span + time both were busy (the schedule leaves no gap here)
    busy = busy_fraction(asynchronous)
    both = sum(generate) + sum(train)
    assert overlap_seconds(asynchronous) == pytest.approx(both - busy["span"])
    assert overlap_seconds(asynchronous) > 0
    with pytest.raises(ValueError, match="one generation round per step"):
        timeline_durations(synchronous[:-1])


def test_flat_group_probability():
    assert flat_group_probability(0.5, 2) == pytest.approx(0.5)
    assert flat_group_probability(0.0, 8) == 1.0
    with pytest.raises(ValueError, match="group_size"):
        flat_group_probability(0.5, 0)
    with pytest.raises(ValueError, match="pass_rate"):
        flat_group_probability(1.5, 4)


def test_update_gradient_of_kept_rows_is_the_scaled_full_gradient():
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, shape="test")
    rollout = sample(model, tokenizer, ["1+2=", "3+4="], num_samples=4, max_new_tokens=6, seed=0)
    advantages = torch.tensor([0.5, -0.5, 0.25, -0.25, 0.0, 0.0, 0.0, 0.0])  # the second group is flat
    kept, flat, every = torch.arange(4), torch.arange(4, 8), torch.arange(8)
    full = update_gradient(model, rollout, advantages, every, max_len=6)
    filtered = update_gradient(model, rollout, advantages, kept, max_len=6)
    assert update_gradient(model, rollout, advantages, flat, max_len=6).abs().max() == 0
    assert torch.allclose(filtered, 2.0 * full, rtol=1e-4, atol=1e-7)  # B/K = 8/4
    assert full.abs().max() > 0
    seconds = update_seconds(model, rollout, advantages, {"all": every, "kept": kept}, max_len=6, repeats=2)
    assert set(seconds) == {"all", "kept"} and all(0 < s < 60 for s in seconds.values())
    with pytest.raises(ValueError, match="rows"):
        update_gradient(model, rollout, advantages, torch.tensor([], dtype=torch.long), max_len=6)


def test_equal_time_table_reads_each_run_at_the_fastest_runs_total():
    rows = [{"label": label, "seed": 0, "step": step, "wall_time": step * seconds, "step_time": seconds,
             "pass@1": step / 10} for label, seconds in (("slow", 2.0), ("fast", 1.0)) for step in range(1, 5)]
    table = equal_time_table(pd.DataFrame(rows), window=2)
    assert table.loc["fast", "steps_done"] == 4 and table.loc["slow", "steps_done"] == 2
    assert table.loc["slow", "pass@1 (last 2)"] == pytest.approx(0.15)
    assert table["budget_s"].unique().tolist() == [4.0]
    spread = equal_time_table(pd.DataFrame(rows), window=2, spread=True)
    assert (spread["smallest seed"] <= spread["pass@1 (last 2)"]).all()
    assert (spread["pass@1 (last 2)"] <= spread["largest seed"]).all()


def test_flip_rewards_flips_the_chosen_share_reproducibly():
    from rlbook.throughput import flip_rewards

    rewards = torch.tensor([0.0, 1.0] * 500)
    assert torch.equal(flip_rewards(rewards, 0.0), rewards)
    assert torch.equal(flip_rewards(rewards, 1.0), 1 - rewards)
    flipped = flip_rewards(rewards, 0.2, generator=torch.Generator().manual_seed(0))
    assert 0.15 < (flipped != rewards).float().mean().item() < 0.25
    assert torch.equal(flipped, flip_rewards(rewards, 0.2, generator=torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError, match="rewards"):
        flip_rewards(torch.tensor([0.5, 1.0]), 0.1)
    with pytest.raises(ValueError, match="fraction"):
        flip_rewards(rewards, 1.5)


def test_filter_sweep_is_unbiased_below_the_smallest_advantage_and_turns_above_it():
    from rlbook.throughput import filter_sweep

    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, shape="test")
    rollout = sample(model, tokenizer, ["1+2=", "3+4="], num_samples=4, max_new_tokens=6, seed=0)
    advantages = torch.tensor([0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.0, 0.0])  # one right of four; a flat group
    mislabelled = torch.tensor([True, False, False, False, False, False, False, False])
    table = filter_sweep(model, rollout, advantages, [1e-6, 0.25, 1.0], max_len=6, mislabelled=mislabelled,
                         reference=update_gradient(model, rollout, advantages, torch.arange(8), max_len=6))
    exact, wide, everything = table.iloc[0], table.iloc[1], table.iloc[2]
    assert exact["dropped"] == 0.5 and exact["cosine"] == pytest.approx(1.0, abs=1e-6)
    assert exact["norm_ratio"] == pytest.approx(2.0, rel=1e-4)  # B/K
    assert wide["dropped"] == 0.875 and wide["cosine"] < 1 - 1e-4  # dropping gradient-carrying rows turns it
    assert wide["mislabelled_kept"] == 1.0 and exact["mislabelled_kept"] == 0.25
    assert exact["cosine_reference"] == pytest.approx(1.0, abs=1e-6)
    assert everything["dropped"] == 1.0 and math.isnan(everything["cosine"])
    assert 0 < exact["update_time"] and 0 < wide["update_time"]
    untimed = filter_sweep(model, rollout, advantages, [1e-6], max_len=6, repeats=None)
    assert math.isnan(untimed["update_time"].iloc[0])
    with pytest.raises(ValueError, match="tols"):
        filter_sweep(model, rollout, advantages, [], max_len=6)
    with pytest.raises(ValueError, match="mislabelled"):
        filter_sweep(model, rollout, advantages, [0.1], max_len=6, mislabelled=torch.zeros(3, dtype=torch.bool))


def test_flat_group_probability_with_a_spread_of_pass_rates_across_prompts():
    import numpy as np

    # ρ → 0 is the i.i.d. formula; ρ = 1 puts every prompt at 0 or 1, so every group is flat
    assert flat_group_probability(0.3, 8, between_prompt_share=1e-9) == pytest.approx(flat_group_probability(0.3, 8))
    assert flat_group_probability(0.3, 8, between_prompt_share=1.0) == 1.0
    # G = 2: P(flat) = 1 − 2 E[p(1 − p)] = 1 − 2 p (1 − p) (1 − ρ), the beta-binomial's closed form
    assert flat_group_probability(0.3, 2, between_prompt_share=0.4) == pytest.approx(1 - 2 * 0.3 * 0.7 * 0.6)
    # against a Monte Carlo draw of p ~ Beta, then k ~ Binomial(G, p)
    rng = np.random.default_rng(0)
    concentration = 1 / 0.3 - 1
    p = rng.beta(0.4 * concentration, 0.6 * concentration, 200_000)
    k = rng.binomial(8, p)
    assert flat_group_probability(0.4, 8, between_prompt_share=0.3) == pytest.approx(((k == 0) | (k == 8)).mean(),
                                                                                      abs=0.005)
    grid = np.linspace(0, 1, 11)  # convexity: any spread gives more flat groups than i.i.d. rewards
    assert (flat_group_probability(grid, 8, between_prompt_share=0.2) >= flat_group_probability(grid, 8) - 1e-12).all()
    with pytest.raises(ValueError, match="between_prompt_share"):
        flat_group_probability(0.5, 4, between_prompt_share=1.5)


def test_between_prompt_share_recovers_the_spread():
    import numpy as np

    from rlbook.throughput import between_prompt_share

    rng = np.random.default_rng(1)
    concentration = 1 / 0.4 - 1
    p = rng.beta(0.5 * concentration, 0.5 * concentration, 5000)
    correct = (rng.random((5000, 8)) < p[:, None]).astype(int)
    assert between_prompt_share(correct) == pytest.approx(0.4, abs=0.03)
    iid = (rng.random((5000, 8)) < 0.5).astype(int)
    assert between_prompt_share(iid) == pytest.approx(0.0, abs=0.02)
    assert between_prompt_share([[0, 0], [1, 1]]) == 1.0  # every prompt all-right or all-wrong
    assert math.isnan(between_prompt_share([[1, 1], [1, 1]]))
    with pytest.raises(ValueError, match="correct"):
        between_prompt_share([[0, 1, 0]])
    with pytest.raises(ValueError, match="correct"):
        between_prompt_share([[0, 0.5], [1, 1]])


def test_dropped_share_from_the_count_of_right_answers_matches_the_filter():
    from rlbook.advantages import group_advantages
    from rlbook.shaping import advantage_filter_mask
    from rlbook.throughput import dropped_share

    counts = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 1])
    rewards = torch.cat([(torch.arange(8) < k).float() for k in counts])
    advantages = group_advantages(rewards, 8, "dr_grpo")
    for tol in (1e-6, 1 / 8, 2 / 8, 3 / 8, 4 / 8):
        expected = 1 - advantage_filter_mask(advantages, tol=tol).float().mean().item()
        assert dropped_share(counts.numpy(), 8, tol) == pytest.approx(expected), tol
    assert dropped_share([0, 8], 8, 1e-6) == 1.0 and dropped_share([4], 8, 3 / 8) == 0.0
    with pytest.raises(ValueError, match="right_counts"):
        dropped_share([9], 8, 0.1)
    with pytest.raises(ValueError, match="right_counts"):
        dropped_share([0.5], 8, 0.1)
    with pytest.raises(ValueError, match="tol"):
        dropped_share([1], 8, -0.1)


def test_mislabelled_kept_matches_flip_rewards_and_the_filter():
    from rlbook.advantages import group_advantages
    from rlbook.shaping import advantage_filter_mask
    from rlbook.throughput import flip_rewards, mislabelled_kept

    rewards = torch.tensor([0.0] * 8 + [1.0] * 8 + [1.0, 0.0] * 4 + [1.0] + [0.0] * 7)
    table = mislabelled_kept(rewards, 8, 0.2, [1e-6, 3 / 8], draws=50, seed=3)
    assert len(table) == 100 and set(table["tol"]) == {1e-6, 3 / 8}
    # the first draw is flip_rewards' draw with the same seed, filtered as the trainer filters
    flipped = flip_rewards(rewards, 0.2, generator=torch.Generator().manual_seed(3))
    mislabelled = flipped != rewards
    for tol in (1e-6, 3 / 8):
        keep = advantage_filter_mask(group_advantages(flipped, 8, "dr_grpo"), tol=tol)
        row = table[(table["draw"] == 0) & (table["tol"] == tol)].iloc[0]
        assert row["kept"] == int(keep.sum()) and row["flipped"] == pytest.approx(mislabelled.float().mean().item())
        assert row["mislabelled_kept"] == pytest.approx(mislabelled[keep].float().mean().item())
    assert table["flipped"].between(0, 1).all()
    clean = mislabelled_kept(rewards, 8, 0.0, [1e-6], draws=3)
    assert (clean["mislabelled_kept"] == 0).all() and (clean["kept"] == 16).all()
    for kwargs, name in ((dict(fraction=1.5), "fraction"), (dict(draws=0), "draws"), (dict(tols=[]), "tols")):
        arguments = dict(fraction=0.1, tols=[0.1], draws=2) | kwargs
        with pytest.raises(ValueError, match=name):
            mislabelled_kept(rewards, 8, arguments.pop("fraction"), arguments.pop("tols"), **arguments)
    with pytest.raises(ValueError, match="group_size"):
        mislabelled_kept(rewards[:-1], 8, 0.1, [0.1], draws=2)


def test_sample_probe_batch_and_sampling_seconds():
    from rlbook.tasks import get_task
    from rlbook.throughput import sample_probe_batch, sampling_seconds

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, shape="test", seed=0)
    task = get_task("arithmetic", digits=1)
    rollout, rewards = sample_probe_batch(model, tokenizer, task, 3, group_size=2, max_new_tokens=4, seed=5)
    prompts = task.dataset(3, seed=5, split="train")
    assert len(rollout) == 6 and rewards.shape == (6,)
    assert rewards.tolist() == [float(task.reward(t, prompts[i // 2])) for i, t in enumerate(rollout.texts)]
    again, _ = sample_probe_batch(model, tokenizer, task, 3, group_size=2, max_new_tokens=4, seed=5)
    assert again.texts == rollout.texts
    seconds = sampling_seconds(model, tokenizer, list(prompts["prompt"]), num_samples=2, max_new_tokens=4)
    assert 0 < seconds < 60
    with pytest.raises(ValueError, match="repeats"):
        sampling_seconds(model, tokenizer, list(prompts["prompt"]), num_samples=2, max_new_tokens=4, repeats=0)


def test_flip_rewards_exact_flips_exactly_the_rounded_share():
    from rlbook.throughput import flip_rewards

    rewards = torch.tensor([0.0, 1.0] * 64)
    for seed in range(5):
        flipped = flip_rewards(rewards, 0.1, generator=torch.Generator().manual_seed(seed), exact=True)
        assert int((flipped != rewards).sum()) == round(0.1 * 128)  # 13, whatever the draw
    again = flip_rewards(rewards, 0.1, generator=torch.Generator().manual_seed(4), exact=True)
    assert torch.equal(flipped, again)
    assert torch.equal(flip_rewards(rewards, 1.0, exact=True), 1 - rewards)


def test_expected_cosine_sees_the_bias_and_not_the_shared_noise():
    from rlbook.throughput import expected_cosine

    generator = torch.Generator().manual_seed(0)
    signal = torch.zeros(4000)
    signal[0] = 1.0
    turned = torch.zeros(4000)
    turned[:2] = torch.tensor([0.6, 0.8])  # E g_tol at cosine 0.6 from E g
    noise = [torch.randn(4000, generator=generator) * 0.1 for _ in range(40)]  # |noise| ≈ 6 ≫ |signal|
    full = [signal + n for n in noise]
    filtered = [turned + 0.9 * n for n in noise]  # each batch's filtered gradient shares its batch's noise
    value, se = expected_cosine(filtered, full)
    assert abs(value - 0.6) < 4 * se and se < 0.2
    naive = torch.nn.functional.cosine_similarity(torch.stack(filtered).mean(0), torch.stack(full).mean(0), dim=0)
    assert naive.item() > value + 0.05  # the cosine of the averages is pulled towards 1 by the noise both share
    same, same_se = expected_cosine(full, full)
    assert same == pytest.approx(1.0) and same_se == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="filtered and full"):
        expected_cosine(full[:2], full[:2])
    with pytest.raises(ValueError, match="filtered and full"):
        expected_cosine(full[:3], full[:4])


def test_sampled_divisor_weights_make_the_kept_rows_loss_the_full_loss():
    from rlbook.aggregation import aggregate
    from rlbook.throughput import sampled_divisor_weights

    generator = torch.Generator().manual_seed(0)
    per_token = torch.randn(8, 5, generator=generator)
    per_token[4:] = 0.0  # the flat group's rows: A = 0 zeroes their token losses
    mask = torch.ones(8, 5)
    mask[1, 3:] = 0
    full = aggregate(per_token, mask, "seq_mean_token_sum_norm", max_len=5)
    kept = aggregate(per_token[:4], mask[:4], "seq_mean_token_sum_norm", max_len=5,
                     weights_fn=sampled_divisor_weights(8))
    shrunk = aggregate(per_token[:4], mask[:4], "seq_mean_token_sum_norm", max_len=5)
    assert kept.item() == pytest.approx(full.item()) and shrunk.item() == pytest.approx(2 * full.item())  # B/K = 2
    with pytest.raises(ValueError, match="seq_mean_token_sum_norm"):
        aggregate(per_token, mask, "token_mean", weights_fn=sampled_divisor_weights(8))
    with pytest.raises(ValueError, match="batch_size"):
        sampled_divisor_weights(0)


def test_expected_cosine_minus_per_batch_is_the_difference_jackknifed_jointly():
    from rlbook.throughput import expected_cosine

    generator = torch.Generator().manual_seed(1)
    full = [torch.randn(50, generator=generator) + 2.0 for _ in range(6)]
    filtered = [g + 0.5 * torch.randn(50, generator=generator) for g in full]
    value, se = expected_cosine(filtered, full)
    difference, difference_se = expected_cosine(filtered, full, minus_per_batch=True)
    per_batch = np.mean([torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0).item()
                         for a, b in zip(filtered, full)])
    assert difference == pytest.approx(value - per_batch, abs=1e-9)
    assert difference_se > 0 and difference_se != pytest.approx(se)
    same, same_se = expected_cosine(full, full, minus_per_batch=True)
    assert same == pytest.approx(0.0, abs=1e-9) and same_se == pytest.approx(0.0, abs=1e-9)


def test_train_end_times_are_when_each_update_finished():
    from rlbook.timeline import train_end_times

    # constant phases g = 0.5, u = 1: synchronously step t ends at 1.5 t; with η = 1 at 0.5 + t
    assert train_end_times(pipeline_schedule([0.5] * 4, [1.0] * 4, 0)) == pytest.approx([1.5, 3.0, 4.5, 6.0])
    assert train_end_times(pipeline_schedule([0.5] * 4, [1.0] * 4, 1)) == pytest.approx([1.5, 2.5, 3.5, 4.5])
    shifted = [{"phase": "generate", "start": 10.0, "end": 11.0, "version": 0},
               {"phase": "train", "start": 11.0, "end": 13.0, "version": 1}]
    assert train_end_times(shifted) == [3.0]  # measured from the timeline's own start
    with pytest.raises(ValueError, match="timeline"):
        train_end_times([])


def test_a_larger_bound_with_steady_times_adds_staleness_and_no_speed():
    # g < u and η = 2: round 2 starts at 1.0 s with version 0, two rounds ahead of the learner, span unchanged
    one, two = pipeline_schedule([0.5] * 8, [1.0] * 8, 1), pipeline_schedule([0.5] * 8, [1.0] * 8, 2)
    assert span(one) == pytest.approx(span(two)) == pytest.approx(8.5)
    round_two = [e for e in two if e["phase"] == "generate"][2]
    assert round_two["start"] == pytest.approx(1.0) and round_two["version"] == 0

def test_gradient_snr_separates_the_signal_from_each_batchs_own_noise():
    from rlbook.throughput import gradient_snr

    generator = torch.Generator().manual_seed(2)
    signal = torch.zeros(4000)
    signal[0] = 2.0  # |E g|² = 4
    noise = [torch.randn(4000, generator=generator) * 0.05 for _ in range(30)]  # E|ε|² = 4000 · 0.0025 = 10
    snr, se = gradient_snr([signal + n for n in noise])
    assert abs(snr - 4 / 14) < 4 * se and se < 0.1  # |E g|² / (|E g|² + tr Σ / B)
    naive = np.mean([(signal + n).norm().item() ** 2 for n in noise])
    assert naive > 10  # |g_a|² counts the noise: the signal is read from pairs of different batches only
    same, same_se = gradient_snr([signal.clone() for _ in range(5)])
    assert same == pytest.approx(1.0) and same_se == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="at least 3"):
        gradient_snr(noise[:2])


def test_noise_turn_factor_is_one_over_root_n_only_when_the_signal_dominates():
    from rlbook.throughput import noise_turn_factor

    assert noise_turn_factor(1.0, 16) == pytest.approx(0.25)  # all signal: the noise's turn falls like 1/√n
    assert noise_turn_factor(0.0, 16) == pytest.approx(1.0)  # all noise: averaging shrinks the turn and |g| alike
    assert noise_turn_factor(0.1, 16) == pytest.approx(1 / math.sqrt(2.5))
    assert noise_turn_factor(0.3, 1) == pytest.approx(1.0)
    # the angle between two noisy vectors that share their noise, averaged over n batches, follows it
    generator = torch.Generator().manual_seed(3)
    signal = torch.zeros(20000)
    signal[0] = 1.0
    angles = {}
    for n in (1, 16):
        cosines = []
        for _ in range(40):
            noise = torch.randn(n, 20000, generator=generator).mul(0.02).mean(0)  # E|ε|² = 8 per batch, so s = 1/9
            extra = torch.randn(n, 20000, generator=generator).mul(0.004).mean(0)  # what the filter's dropped rows add
            g = signal + noise
            cosines.append(torch.nn.functional.cosine_similarity(g, g + extra, dim=0).item())
        angles[n] = math.acos(np.mean(cosines))
    assert angles[16] / angles[1] == pytest.approx(noise_turn_factor(1 / 9, 16), rel=0.1)
    with pytest.raises(ValueError, match="snr"):
        noise_turn_factor(1.5, 4)


def test_flat_parameters_lays_out_every_weight_once():
    from rlbook.throughput import flat_parameters

    model = torch.nn.Linear(3, 2)
    flat = flat_parameters(model)
    assert flat.shape == (8,) and not flat.requires_grad
    assert torch.equal(flat, torch.cat([model.weight.detach().flatten(), model.bias.detach()]))
