"""rlbook.preference_analysis: each loss against one pair's margin, pairs scored as the trainer scores
them, and the implicit reward split clause by clause."""

import math

import numpy as np
import pytest
import torch
from datasets import Dataset

from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.preference_analysis import (
    _unit_of_each_token, clause_credit, clause_credit_by_position, clause_credit_table, margin_slope,
    pair_losses_vs_margin, pair_sequence_logps, paired_accuracy_gain, preference_margin_run, ranked_correctly,
    review_samples_summary, sampled_kl, stop_credit_table,
)
from rlbook.tasks.reviews import gold_reward


def test_pair_losses_vs_margin_match_each_library_loss():
    h = torch.linspace(-5, 5, 11, dtype=torch.float64)
    curves = pair_losses_vs_margin(h, beta=0.2, tau=0.25, gamma=0.5, simpo_beta=2.0)
    assert set(curves) == {"dpo", "ipo", "kto", "simpo", "orpo"}
    np.testing.assert_allclose(curves["dpo"], -torch.nn.functional.logsigmoid(0.2 * h).numpy())
    np.testing.assert_allclose(curves["ipo"], ((h - 2.0) ** 2).numpy())
    np.testing.assert_allclose(curves["simpo"], -torch.nn.functional.logsigmoid(2.0 * h - 0.5).numpy())
    np.testing.assert_allclose(curves["kto"], (2 * (1 - torch.sigmoid(0.1 * h))).numpy())
    assert curves["dpo"][5] == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="margins"):
        pair_losses_vs_margin(torch.zeros(2, 2))


def test_pair_sequence_logps_score_pairs_as_the_trainer_does():
    from rlbook.trainers import PreferenceTrainer

    tokenizer = build_char_tokenizer()
    pairs = Dataset.from_dict({
        "prompt": [[{"role": "user", "content": f"Review {film}."}] for film in ("Dune", "Up", "Jaws")],
        "chosen": ["the plot was great.", "the cast was fun, the music was superb.", "the ending was moving."],
        "rejected": ["the plot was dull.", "the cast was weak.", "the music was bland, the pace was slow."],
    })
    model = build_tiny_model(tokenizer, shape="test", seed=0)
    chosen, rejected = pair_sequence_logps(model, tokenizer, pairs, batch_size=2)
    assert chosen.shape == rejected.shape == (3,)
    assert (chosen < 0).all() and (rejected < 0).all()
    means = PreferenceTrainer(model, tokenizer, pairs, steps=1, progress=False).evaluate(pairs)
    assert float(chosen.mean()) == pytest.approx(means["logps/chosen"], abs=1e-4)
    assert float(rejected.mean()) == pytest.approx(means["logps/rejected"], abs=1e-4)
    # per token: the length-averaged log-prob SimPO and ORPO rank by, so the ranking is the trainer's
    chosen_avg, rejected_avg = pair_sequence_logps(model, tokenizer, pairs, per_token=True)
    lengths = torch.tensor([len(text) + 1 for text in pairs["chosen"]], dtype=torch.float32)  # characters + EOS
    torch.testing.assert_close(chosen_avg, chosen / lengths)
    simpo = PreferenceTrainer(model, tokenizer, pairs, loss="simpo", beta=1.0, progress=False).evaluate(pairs)
    assert ranked_correctly(chosen_avg, rejected_avg).mean() == pytest.approx(simpo["rewards/accuracies"])


def test_ranked_correctly_counts_a_tie_as_wrong_and_the_paired_gain_has_its_paired_se():
    assert ranked_correctly([1.0, 0.0, -1.0], [0.0, 0.0, 0.0]).tolist() == [True, False, False]
    correct = np.array([1, 1, 0, 1, 0, 1], dtype=float)
    coin = np.full(6, 0.5)
    gain, se = paired_accuracy_gain(correct, coin)
    assert gain == pytest.approx(correct.mean() - 0.5)
    assert se == pytest.approx(np.std(correct - coin, ddof=1) / np.sqrt(6))
    # identical rankers: no gain and no spread, whatever their accuracy
    assert paired_accuracy_gain(correct, correct) == (0.0, 0.0)
    with pytest.raises(ValueError):
        ranked_correctly([1.0], [0.0, 1.0])
    with pytest.raises(ValueError):
        paired_accuracy_gain([1.0, 0.0], [1.0])


def test_sampled_kl_is_zero_for_the_reference_itself_and_positive_for_another_policy():
    tokenizer = build_char_tokenizer()
    prompts = [[{"role": "user", "content": f"Review {film}."}] for film in ("Dune", "Up", "Jaws")]
    reference = build_tiny_model(tokenizer, shape="test", seed=0)
    same = sampled_kl(reference, reference, tokenizer, prompts, max_new_tokens=12)
    assert same["kl"] == pytest.approx(0.0, abs=1e-4) and same["kl s.e."] == pytest.approx(0.0, abs=1e-4)
    other = sampled_kl(build_tiny_model(tokenizer, shape="test", seed=1), reference, tokenizer, prompts,
                       max_new_tokens=12)
    assert other["kl"] > 0 and other["kl s.e."] > 0
    assert {"gold reward", "unparsable", "length"} <= set(other)


def test_clause_credit_splits_the_implicit_reward_and_the_gold_reward_exactly():
    tokenizer = build_char_tokenizer()
    reference = build_tiny_model(tokenizer, shape="test", seed=0)
    model = build_tiny_model(tokenizer, shape="test", seed=1)
    texts = ["the plot was great, the plot was dull.", "not a review", " the cast was fun, the music was odd, "
             "the sets was weak, the pace was slow.", "the ending was moving."]
    prompts = [[{"role": "user", "content": "Review Up."}]] * len(texts)
    credit = clause_credit(model, reference, tokenizer, prompts, texts, beta=0.5, batch_size=2)
    assert sorted(set(credit["text"])) == [0, 2, 3]  # the unparsable text is skipped
    # Each text's clause credits sum to its implicit reward β (log π − log π_ref), and its gold terms to its gold.
    pairs = {"prompt": prompts[:2], "chosen": [texts[0], texts[2]], "rejected": [texts[3], texts[3]]}
    chosen, rejected = pair_sequence_logps(model, tokenizer, pairs)
    ref_chosen, ref_rejected = pair_sequence_logps(reference, tokenizer, pairs)
    implicit = {0: chosen[0] - ref_chosen[0], 2: chosen[1] - ref_chosen[1], 3: rejected[0] - ref_rejected[0]}
    for i, frame in credit.groupby("text"):
        assert frame["credit"].sum() == pytest.approx(0.5 * float(implicit[i]), abs=1e-4)
        assert frame["gold"].sum() == pytest.approx(gold_reward(texts[i]))
        assert list(frame["unit"]) == ["clause"] * (len(frame) - 1) + ["stop"]  # one stop per review, last
    clauses = credit[credit["unit"] == "clause"]
    second = clauses[clauses["text"] == 0].iloc[1]
    assert bool(second["repeat"]) and second["gold"] == -1 - 1.5
    fourth = clauses[clauses["text"] == 2].iloc[3]
    assert bool(fourth["past_limit"]) and not fourth["repeat"] and fourth["gold"] == -1 - 1.0
    stops = stop_credit_table(credit)
    assert stops.loc[2, "reviews"] == 1 and stops.loc[4, "reviews"] == 1 and stops.loc[1, "reviews"] == 1
    with pytest.raises(ValueError, match="unit"):
        stop_credit_table(credit.drop(columns="unit"))
    table = clause_credit_table(credit)
    assert int(table["clauses"].sum().sum()) == 2 + 4 + 1  # every clause, and none of the three stops
    assert list(table.index) == ["positive", "neutral", "negative"]
    assert table.loc["negative", ("clauses", "repeat")] == 1
    assert table.loc["negative", ("gold", "past the limit")] == -2.0
    with pytest.raises(ValueError, match="beta"):
        clause_credit(model, reference, tokenizer, prompts, texts, beta=0)
    with pytest.raises(ValueError, match="texts"):
        clause_credit(model, reference, tokenizer, prompts, texts[:2], beta=0.5)


def test_each_clause_owns_the_separator_before_it_and_the_stop_is_its_own_unit():
    # One character per token, as with the book's tokenizer; the last entry is the end-of-sequence token.
    text = " the a was b, the c was d."
    owners = _unit_of_each_token(text, [1] * len(text))
    first, comma = text.index("the a was b"), text.index(",")
    assert owners[:comma] == [0] * comma  # the leading space and the first clause
    assert owners[comma:comma + 2] == [1, 1]  # ", " is the choice to write clause 1: it is clause 1's
    assert owners[text.index("the c"):text.index(".")] == [1] * len("the c was d")
    assert owners[text.index(".")] == 2 and owners[-1] == 2  # "." and end-of-sequence: the stop
    assert len(owners) == len(text) + 1 and first == 1
    with pytest.raises(ValueError, match="align"):
        _unit_of_each_token(text, [1] * (len(text) - 1))


def test_clause_credit_by_position_reads_new_clauses_and_repeats_apart():
    import pandas as pd

    credit = pd.DataFrame({"text": [0, 0, 0, 0, 1, 1], "unit": ["clause"] * 3 + ["stop", "clause", "stop"],
                           "position": [0, 1, 2, 3, 0, 1], "sentiment": [1, 1, -1, 0, 1, 0],
                           "repeat": [False, True, False, False, False, False],
                           "past_limit": [False] * 6, "gold": [1.0, -0.5, -1.0, 0.0, 1.0, 0.0],
                           "credit": [0.5, 0.1, -1.0, 9.0, 0.3, 9.0]})
    new = clause_credit_by_position(credit)
    assert list(new.columns) == ["positive", "neutral", "negative"] and list(new.index) == [0, 2]
    assert new.loc[0, "positive"] == pytest.approx(0.4) and new.loc[2, "negative"] == -1.0  # stops left out
    repeats = clause_credit_by_position(credit, repeat=True)
    assert list(repeats.index) == [1] and repeats.loc[1, "positive"] == pytest.approx(0.1)


def test_kl_optimum_log_ratio_matches_the_exact_optimum_on_a_sampled_reference():
    # reference samples drawn exactly in proportion to π_ref: the estimate is then β log Z itself
    import numpy as np

    from rlbook.preference_analysis import kl_optimum_log_ratio
    from rlbook.toys import reverse_kl_optimum
    ref_probs = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    rewards = torch.tensor([0.0, 1.0, -2.0], dtype=torch.float64)
    samples = np.repeat(rewards.numpy(), [2, 1, 1])             # π_ref as 4 equally likely samples
    log_ratios, beta_log_z, se = kl_optimum_log_ratio(rewards.numpy(), samples, beta=0.5)
    exact = (reverse_kl_optimum(ref_probs, rewards, beta=0.5) / ref_probs).log().numpy()
    assert np.allclose(log_ratios, exact, atol=1e-12)
    assert beta_log_z == pytest.approx(0.5 * float(torch.logsumexp(ref_probs.log() + rewards / 0.5, 0)))
    assert se > 0
    # stable at a tiny β (e^{r/β} would overflow), and β log Z → max reward as β → 0
    _, tiny, _ = kl_optimum_log_ratio([0.0], samples, beta=1e-3)
    assert tiny == pytest.approx(1.0, abs=2e-3)
    with pytest.raises(ValueError):
        kl_optimum_log_ratio([0.0], [1.0], beta=0.5)


def test_parse_rule_accuracy_scores_one_zero_and_a_coin():
    from rlbook.preference_analysis import parse_rule_accuracy
    good, broken = "the plot was clever.", "the plot was"
    assert list(parse_rule_accuracy([good, broken, good, broken], [broken, good, good, broken])) == [1.0, 0.0, 0.5, 0.5]
    with pytest.raises(ValueError):
        parse_rule_accuracy([good], [])


def test_shorter_rule_accuracy_scores_one_zero_and_a_coin():
    from rlbook.preference_analysis import shorter_rule_accuracy
    short, long = "the plot was clever.", "the plot was clever, the cast was dull."
    assert list(shorter_rule_accuracy([short, long, short], [long, short, "the cast was dull!!."])) == [1.0, 0.0, 0.5]
    with pytest.raises(ValueError):
        shorter_rule_accuracy([short], [])


def test_gold_by_clause_count_groups_well_formed_reviews_by_length():
    from rlbook.preference_analysis import gold_by_clause_count
    texts = ["the plot was clever.", "the plot was dull.", "the plot was clever, the cast was superb.", "the plot was"]
    table = gold_by_clause_count(texts, [gold_reward(t) for t in texts])
    assert set(table) == {1, 2}                         # the broken review is left out
    assert table[1] == (pytest.approx((gold_reward(texts[0]) + gold_reward(texts[1])) / 2), 2)
    assert table[2] == (pytest.approx(gold_reward(texts[2])), 1)
    with pytest.raises(ValueError):
        gold_by_clause_count(texts, [0.0])


def test_gap_matched_accuracy_reweights_the_reference_to_the_groups_gaps():
    from rlbook.preference_analysis import gap_matched_accuracy
    correct = [1, 0, 1, 1, 0, 1, 1, 1]
    gaps = [0.5, 0.5, 2.0, 0.5, 0.5, 2.0, 2.0, 3.0]
    group = [True, True, True, False, False, False, False, False]
    reference = [False, False, False, True, True, True, True, True]
    acc, matched, n = gap_matched_accuracy(correct, gaps, group, reference)
    # group: two pairs at gap 0.5, one at 2.0; reference: 0.5 at gap 0.5, 1.0 at gap 2.0
    assert (acc, n) == (pytest.approx(2 / 3), 3)
    assert matched == pytest.approx((2 * 0.5 + 1 * 1.0) / 3)
    with pytest.raises(ValueError):
        gap_matched_accuracy([1], [1.0], [True], [False])


def test_margin_slope_is_the_least_squares_line_and_its_standard_error():
    t = np.arange(40, dtype=float)
    noise = np.random.default_rng(0).normal(0, 0.5, 40)
    slope, se = margin_slope(3.0 + 0.2 * t + noise)
    fit = np.polyfit(t, 3.0 + 0.2 * t + noise, 1, cov="unscaled")
    residuals = 3.0 + 0.2 * t + noise - np.polyval(fit[0], t)
    assert slope == pytest.approx(fit[0][0])
    assert se == pytest.approx(np.sqrt(fit[1][0, 0] * (residuals ** 2).sum() / 38))
    assert margin_slope(np.r_[np.zeros(10), 1.0, 2.0, 3.0], start=10) == pytest.approx((1.0, 0.0))
    with pytest.raises(ValueError, match="3 finite"):
        margin_slope([1.0, 2.0])


def test_margin_slope_newey_west_widens_the_se_of_autocorrelated_noise():
    t = np.arange(200, dtype=float)
    rng = np.random.default_rng(1)
    drift = np.zeros(200)
    for i in range(1, 200):   # AR(1) noise, ρ = 0.8: neighbouring deviations from the line agree
        drift[i] = 0.8 * drift[i - 1] + rng.normal(0, 0.3)
    y = 1.0 + 0.01 * t + drift
    slope, plain = margin_slope(y)
    slope_nw, robust = margin_slope(y, lags=8)
    assert slope_nw == slope and robust > 1.5 * plain
    # by hand: Bartlett-weighted autocovariances of u_t = (t − t̄) e_t
    tc = t - t.mean()
    e = y - y.mean() - slope * tc
    u = tc * e
    variance = (u ** 2).sum() + 2 * sum((1 - lag / 9) * (u[lag:] * u[:-lag]).sum() for lag in range(1, 9))
    assert robust == pytest.approx(np.sqrt(variance) / (tc ** 2).sum())
    with pytest.raises(ValueError, match="lags"):
        margin_slope(y[:5], lags=5)


def test_review_samples_summary_splits_the_gold_reward():
    texts = ["the plot was great.", "the plot was great, the cast was dull.", "plot great", "the ending was moving."]
    summary = review_samples_summary(texts, lengths=[19, 38, 10, 22])
    golds = [gold_reward(text) for text in texts]
    assert summary["gold reward"] == pytest.approx(np.mean(golds))
    assert summary["unparsable"] == pytest.approx(0.25)
    assert summary["gold (parsed)"] == pytest.approx(np.mean([golds[0], golds[1], golds[3]]))
    assert summary["clauses (parsed)"] == pytest.approx(4 / 3)
    assert summary["length"] == pytest.approx(22.25)
    # the mean is the parsed reviews' mean and the unparsable ones' −3, weighted by their shares
    assert summary["gold reward"] == pytest.approx(0.75 * summary["gold (parsed)"] + 0.25 * -3.0)
    with pytest.raises(ValueError, match="lengths"):
        review_samples_summary(texts, lengths=[1, 2])


def test_preference_margin_run_returns_the_trained_margins():
    tokenizer = build_char_tokenizer()
    pairs = Dataset.from_dict({
        "prompt": [[{"role": "user", "content": f"Review {film}."}] for film in ("Dune", "Up", "Jaws", "Heat")],
        "chosen": ["the plot was great.", "the cast was fun.", "the ending was moving.", "the pace was brisk."],
        "rejected": ["the plot was dull.", "the cast was weak.", "the music was bland.", "the pace was slow."],
    })
    model = build_tiny_model(tokenizer, shape="test", seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    out = preference_margin_run(model, tokenizer, pairs, "ipo", 0, steps=3, batch_size=2, lr=1e-3, tau=0.25)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the model is not changed
    assert out["h"].shape == (3,) and out["pair_h"].shape == (4,) and (out["kl"] == 0).all()
    np.testing.assert_allclose(out["pair_h"], out["chosen"] - out["rejected"], atol=1e-6)
    assert "samples" not in out
    with_kl = preference_margin_run(model, tokenizer, pairs, "dpo", 0, steps=2, batch_size=2, lr=1e-3, beta=0.5,
                                    kl_prompts=list(pairs["prompt"][:2]))
    assert with_kl["samples"]["kl"] > 0
    held = preference_margin_run(model, tokenizer, pairs, "dpo", 0, steps=2, batch_size=2, lr=1e-3, beta=0.5,
                                 held_out_pairs=pairs)
    # on the training pairs themselves the held-out ranking is the sign of each pair's final margin
    np.testing.assert_array_equal(held["held_out_correct"], held["pair_h"] > 0)
    kto = preference_margin_run(model, tokenizer, pairs, "kto", 0, steps=2, batch_size=2, lr=1e-3, beta=0.5)
    assert (kto["kl"] >= 0).all() and kto["kl"].shape == (2,)
    with pytest.raises(ValueError, match="loss"):
        preference_margin_run(model, tokenizer, pairs, "simpo", 0, steps=1)


def test_optimum_by_reward_scale_bar_rises_from_the_reference_mean_to_the_max():
    from rlbook.preference_analysis import optimum_by_reward_scale, optimum_reversal_scale

    reference = np.array([-3.0, -1.0, -1.0, 0.0, 2.0])
    chosen = np.array([-0.5, 0.0, 0.5, 1.0, -1.5])
    table = optimum_by_reward_scale(chosen, reference, beta=0.5, scales=[1e-4, 0.1, 1.0, 10.0, 1e3])
    bars = table["bar (r units)"].to_numpy()
    assert bars[0] == pytest.approx(reference.mean(), abs=1e-3)       # c → 0: the reference's mean
    assert bars[-1] == pytest.approx(reference.max(), abs=1e-2)       # c → ∞: the best reference sample
    assert (np.diff(bars) > 0).all() and (np.diff(table["share lowered"]) >= 0).all()
    # the mean log π*/π_ref at c equals (c·mean r − β log Z_c)/β
    c = 1.0
    beta_log_z = 0.5 * np.log(np.mean(np.exp(c * reference / 0.5)))
    assert table.loc[c, "mean log π*/π_ref"] == pytest.approx((c * chosen.mean() - beta_log_z) / 0.5)
    # the share lowered passes ½ at the c where the bar passes the chosen responses' 3rd-lowest reward (0.0)
    share_c = optimum_reversal_scale(chosen, reference, beta=0.5, statistic="share")
    at = optimum_by_reward_scale(chosen, reference, beta=0.5, scales=[share_c * 0.999, share_c * 1.001])
    assert list(at["share lowered"]) == [0.4, 0.6]
    mean_c = optimum_reversal_scale(chosen, reference, beta=0.5, statistic="mean")
    around = optimum_by_reward_scale(chosen, reference, beta=0.5, scales=[mean_c * 0.99, mean_c * 1.01])
    assert around["mean log π*/π_ref"].iloc[0] > 0 > around["mean log π*/π_ref"].iloc[1]
    # chosen responses all above the best reference sample: π* never lowers most of them
    assert math.isnan(optimum_reversal_scale(chosen + 10, reference, beta=0.5))


def test_sample_kl_objective_is_zero_kl_for_the_reference_and_positive_otherwise():
    from rlbook.preference_analysis import sample_kl_objective
    from rlbook.rollout import sample

    tokenizer = build_char_tokenizer()
    reference = build_tiny_model(tokenizer, shape="test", seed=0)
    policy = build_tiny_model(tokenizer, shape="test", seed=1)
    prompts = [[{"role": "user", "content": f"Review {film}."}] for film in ("Dune", "Up", "Jaws", "Cars")]
    rollout = sample(policy, tokenizer, prompts, num_samples=8, max_new_tokens=12, seed=0)
    rewards = np.arange(len(rollout), dtype=float) % 3
    same = sample_kl_objective(reference, reference, rollout, rewards, beta=0.5)
    assert same["kl"] == pytest.approx(0.0, abs=1e-5) and same["J"] == pytest.approx(rewards.mean(), abs=1e-5)
    out = sample_kl_objective(policy, reference, rollout, rewards, beta=0.5, reward_scale=2.0)
    assert out["kl"] > 0 and out["kl_se"] > 0                    # two different random models: KL > 0
    assert out["J"] == pytest.approx(2 * rewards.mean() - 0.5 * out["kl"], abs=1e-6)
    with pytest.raises(ValueError, match="one number per rollout row"):
        sample_kl_objective(policy, reference, rollout, rewards[:3], beta=0.5)


def test_paired_accuracy_gap_uses_the_per_pair_differences():
    from rlbook.preference_analysis import paired_accuracy_gap

    correct = np.array([1, 1, 1, 0, 1, 1, 0, 1], dtype=float)
    rule = np.array([1, 0.5, 1, 0, 0, 1, 0, 0.5])
    gap, se = paired_accuracy_gap(correct, rule)
    difference = correct - rule
    assert gap == pytest.approx(difference.mean())
    assert se == pytest.approx(difference.std(ddof=1) / math.sqrt(len(difference)))
    # clustered by prompt: never below the per-pair SE
    _, clustered = paired_accuracy_gap(correct, rule, clusters=[0, 0, 0, 0, 1, 1, 1, 1])
    assert clustered >= se
    with pytest.raises(ValueError):
        paired_accuracy_gap(correct, rule[:3])


def test_credit_contrasts_read_gold_like_credit_in_sentiment_steps():
    import pandas as pd

    from rlbook.preference_analysis import bootstrap_over_texts, credit_contrasts

    # a credit that is exactly gold's terms: step 1, repeat discount 1.5, extra step 1 at the limit, no slope
    rows = []
    for text in range(12):
        sentiment = (1, 0, -1)[text % 3]
        for position in range(5):
            repeat = position in (1, 2) and text % 2 == 1
            gold = sentiment - 1.5 * repeat - 1.0 * (position >= 3)
            rows.append({"text": text, "unit": "clause", "position": position, "sentiment": sentiment,
                         "repeat": repeat, "past_limit": position >= 3, "gold": gold, "credit": gold})
        rows.append({"text": text, "unit": "stop", "position": 5, "sentiment": 0, "repeat": False,
                     "past_limit": False, "gold": 0.0, "credit": 0.3})
    credit = pd.DataFrame(rows)
    contrasts = credit_contrasts(credit)
    assert contrasts["step"] == pytest.approx(1.0)
    assert contrasts["repeat discount"] == pytest.approx(1.5)
    assert contrasts["late discount"] == pytest.approx(1.0)
    assert contrasts["slope"] == pytest.approx(0.0) and contrasts["extra step at the limit"] == pytest.approx(1.0)
    assert contrasts["positive − neutral"] == pytest.approx(1.0) and contrasts["neutral − negative"] == pytest.approx(1.0)
    table = bootstrap_over_texts(credit, credit_contrasts, draws=20, seed=0)
    assert table.loc["step", "value"] == pytest.approx(1.0) and table["se"].max() < 1e-9   # no noise to resample
    noisy = credit.assign(credit=credit["credit"] + np.random.default_rng(0).normal(0, 0.3, len(credit)))
    assert (bootstrap_over_texts(noisy, credit_contrasts, draws=20, seed=0)["se"] > 0).all()


def test_repeat_rule_gap_compares_repeat_decided_pairs_with_gap_matched_others():
    from rlbook.preference_analysis import gap_matched_accuracy, repeat_rule_gap

    tokenizer = build_char_tokenizer()
    reference = build_tiny_model(tokenizer, shape="test", seed=0)
    policy = build_tiny_model(tokenizer, shape="test", seed=1)
    chosen = ["the plot was great.", "the cast was great.", "the plot was great, the cast was fun.",
              "the cast was fun, the music was fun.", "not a review"]
    rejected = ["the plot was fun, the cast was fun, the music was fun.", "the cast was fun, the music was fun, "
                "the sets was fun.", "the plot was fun.", "the cast was dull.", "the plot was dull."]
    pairs = Dataset.from_dict({"prompt": [[{"role": "user", "content": "Review Up."}]] * 5, "chosen": chosen,
                               "rejected": rejected, "chosen_gold": [gold_reward(t) for t in chosen],
                               "rejected_gold": [gold_reward(t) for t in rejected]})
    out = repeat_rule_gap(policy, reference, tokenizer, pairs)
    pc, pr = pair_sequence_logps(policy, tokenizer, pairs)
    rc, rr = pair_sequence_logps(reference, tokenizer, pairs)
    correct = ((pc - rc) - (pr - rr) > 0).numpy()
    gaps = np.array(pairs["chosen_gold"]) - np.array(pairs["rejected_gold"])
    # pairs 0 and 1 are repeat-decided (gap 1), pair 2 is decided by no rule at the same gap; 3 has gap 1.5 and
    # 4 does not parse, so neither enters
    expected = gap_matched_accuracy(correct, gaps, np.array([1, 1, 0, 0, 0], bool), np.array([0, 0, 1, 1, 0], bool))
    assert (out["repeat"], out["matched"], out["n"]) == pytest.approx(expected)
    assert out["n"] == 2 and out["gap"] == pytest.approx(out["repeat"] - out["matched"])


def test_ipo_win_rate_targets_match_azar_on_small_pools():
    from rlbook.preference_analysis import ipo_win_rate_targets

    # one pair alone: q = 3/4 and 1/4, so h* = 1/(2τ), the two-response target
    assert ipo_win_rate_targets([1.0], [0.0], tau=0.25) == pytest.approx([2.0])
    # three quality levels, pairs (b, a), (c, a), (c, b): pool a, a, b, b, c, c -> q = 1/6, 1/2, 5/6
    h = ipo_win_rate_targets([1.0, 2.0, 2.0], [0.0, 0.0, 1.0], tau=0.5)
    assert h == pytest.approx([2 * (1 / 2 - 1 / 6), 2 * (5 / 6 - 1 / 6), 2 * (5 / 6 - 1 / 2)])
    assert np.all(np.abs(h) <= 1 / 0.5)
    # a continuum: pairs of iid draws put the mean near 1/(3τ), two thirds of 1/(2τ)
    rng = np.random.default_rng(0)
    a, b = rng.random(20000), rng.random(20000)
    h = ipo_win_rate_targets(np.maximum(a, b), np.minimum(a, b), tau=0.25)
    assert h.mean() == pytest.approx(1 / (3 * 0.25), abs=0.02)
    with pytest.raises(ValueError):
        ipo_win_rate_targets([1.0], [0.0, 1.0], tau=0.25)


def test_kl_to_optimum_solves_the_identity_for_the_kl():
    import torch

    from rlbook.preference_analysis import kl_to_optimum
    from rlbook.toys import reverse_kl_optimum

    ref = torch.tensor([0.35, 0.25, 0.2, 0.12, 0.08], dtype=torch.float64)
    r = torch.tensor([0.0, 1.0, -1.0, 2.0, 0.5], dtype=torch.float64)
    policy = torch.tensor([0.1, 0.3, 0.1, 0.4, 0.1], dtype=torch.float64)
    for beta, c in ((0.5, 1.0), (0.5, 2.0), (2.0, 0.5)):
        optimum = reverse_kl_optimum(ref, c * r, beta=beta)
        exact = float((policy * (policy / optimum).log()).sum())
        j_scaled = float((policy * c * r).sum() - beta * (policy * (policy / ref).log()).sum())
        # J and β log Z in units of r, as lesson 06 prints them
        beta_log_z = beta * float(torch.logsumexp(ref.log() + c * r / beta, 0)) / c
        assert kl_to_optimum(j_scaled / c, beta_log_z, beta=beta, reward_scale=c) == pytest.approx(exact, rel=1e-10)
    assert kl_to_optimum(1.0, 1.0, beta=0.5) == 0.0
    with pytest.raises(ValueError):
        kl_to_optimum(0.0, 1.0, beta=0.0)
