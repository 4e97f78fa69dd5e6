"""rlbook.coverage: pass@k curves, crossover, coverage split, the plug-in estimator's bias, and
scoring one model's completions under another."""

import math

import pytest
import torch

from rlbook.coverage import (addition_cot_correct, between_sd_upper, completion_logprob_sums, coverage_split, crossover_k, dispersion,
                             expected_estimates, kind_subtable, majority_at_k, mixed_group_share, one_coin_curve, one_coin_gap, pass_at_k_curve, per_problem_pass_at_k,
                             plug_in_pass_at_k, powers_of_two, problems_behind, problems_lost, seen_fraction)
from rlbook.metrics import mean_pass_at_k, pass_at_k
from rlbook.models import load_model
from rlbook.rollout import completion_logprobs, sample

# Three problems, four samples: one always solved, one half the time, one never.
TABLE = torch.tensor([[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0]])


def test_powers_of_two():
    assert powers_of_two(1) == [1]
    assert powers_of_two(8) == [1, 2, 4, 8]
    assert powers_of_two(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    with pytest.raises(ValueError, match="n"):
        powers_of_two(0)


def test_per_problem_and_curve_match_the_metric():
    assert per_problem_pass_at_k(TABLE, 2).tolist() == [1.0, pass_at_k(4, 2, 2), 0.0]
    curve = pass_at_k_curve(TABLE, [1, 2, 4])
    assert curve == pytest.approx([mean_pass_at_k(TABLE, k) for k in (1, 2, 4)])
    assert curve[0] == pytest.approx(1.5 / 3) and curve[-1] == pytest.approx(2 / 3)


@pytest.mark.parametrize("bad, match", [(torch.ones(4), "table"), (torch.full((2, 2), 2), "0/1")])
def test_tables_are_checked(bad, match):
    with pytest.raises(ValueError, match=match):
        per_problem_pass_at_k(bad, 1)
    with pytest.raises(ValueError, match="k must be at most"):
        per_problem_pass_at_k(TABLE, 5)
    with pytest.raises(ValueError, match="ks"):
        pass_at_k_curve(TABLE, [])


def test_crossover():
    ks = [1, 2, 4, 8]
    assert crossover_k(ks, [0.2, 0.4, 0.6, 0.9], [0.5, 0.6, 0.6, 0.7]) == 4  # a tie counts as caught up
    assert crossover_k(ks, [0.2, 0.4, 0.6, 0.7], [0.5, 0.6, 0.7, 0.8]) is None
    assert crossover_k(ks, [0.5, 0.6, 0.7, 0.8], [0.4, 0.6, 0.8, 0.9]) == 1
    with pytest.raises(ValueError, match="one length"):
        crossover_k(ks, [0.1], [0.2, 0.3, 0.4, 0.5])
    with pytest.raises(ValueError, match="increasing"):
        crossover_k([1, 1], [0.1, 0.2], [0.2, 0.3])


def test_coverage_split():
    policy = torch.tensor([[1, 0], [0, 0], [0, 1]])  # n may differ from the base's
    assert coverage_split(TABLE, policy) == {"both": 1, "policy_only": 1, "base_only": 1, "neither": 0,
                                             "problems": 3}
    with pytest.raises(ValueError, match="same problems"):
        coverage_split(TABLE, policy[:2])
    with pytest.raises(ValueError, match="policy_correct"):
        coverage_split(TABLE, torch.ones(3))


def test_plug_in_is_biased_low_and_the_unbiased_estimator_is_not():
    for p, n, k in [(0.1, 16, 4), (0.3, 20, 10), (0.05, 32, 32)]:
        e = expected_estimates(p, n, k)
        assert e["unbiased"] == pytest.approx(e["true"], abs=1e-12)
        assert e["plug_in"] < e["true"] - 1e-3
    e = expected_estimates(0.3, 20, 1)  # at k = 1 both are c/n, unbiased
    assert e["plug_in"] == pytest.approx(e["true"]) == pytest.approx(e["unbiased"])
    assert plug_in_pass_at_k(4, 2, 2) == 0.75
    with pytest.raises(ValueError, match="p must"):
        expected_estimates(1.5, 4, 2)
    with pytest.raises(ValueError, match="c must"):
        plug_in_pass_at_k(4, 5, 2)


def test_seen_fraction():
    assert seen_fraction(["a", "b", "b", "c"], ["b", "c", "d"]) == 0.75
    assert seen_fraction(["x"], []) == 0.0
    with pytest.raises(ValueError, match="texts"):
        seen_fraction([], ["a"])


def test_completion_logprob_sums_scores_chosen_rows():
    model, tokenizer = load_model("arith-base")
    rollout = sample(model, tokenizer, ["Add 12 and 30.", "Add 5 and 7."], num_samples=3, max_new_tokens=16, seed=0)
    rows = [4, 0]
    sums = completion_logprob_sums(model, rollout, rows)
    whole = completion_logprobs(model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                rollout.completion_mask).sum(dim=1)
    assert torch.allclose(sums, whole[rows], atol=1e-4)
    assert torch.allclose(sums, rollout.logprobs[rows].sum(dim=1), atol=1e-3)  # the sampler recorded the same
    assert math.isfinite(float(sums.sum())) and (sums < 0).all()
    with pytest.raises(ValueError, match="rows"):
        completion_logprob_sums(model, rollout, [6])
    with pytest.raises(ValueError, match="rows"):
        completion_logprob_sums(model, rollout, [])


def test_sequence_logps_scores_a_text_as_the_sampler_scored_it():
    from rlbook.preference_analysis import sequence_logps

    model, tokenizer = load_model("arith-base")
    prompts = ["Add 12 and 30.", "Add 5 and 7."]
    rollout = sample(model, tokenizer, prompts, num_samples=3, max_new_tokens=64, seed=0)
    rows = [r for r in range(len(rollout)) if not bool(rollout.truncated[r])]  # ended with end-of-sequence
    assert rows
    by_text = sequence_logps(model, tokenizer, [prompts[r // 3] for r in rows], [rollout.texts[r] for r in rows],
                             batch_size=2)
    assert torch.allclose(by_text, completion_logprob_sums(model, rollout, rows), atol=1e-4)
    per_token = sequence_logps(model, tokenizer, [prompts[r // 3] for r in rows], [rollout.texts[r] for r in rows],
                               per_token=True)
    assert torch.allclose(per_token, by_text / rollout.completion_lengths[rows].float(), atol=1e-4)
    assert sequence_logps(model, tokenizer, [], []).numel() == 0
    with pytest.raises(ValueError, match="batch_size"):
        sequence_logps(model, tokenizer, prompts, ["x", "y"], batch_size=0)


def test_one_coin_curve_is_the_jensen_bound_across_problems():
    ks = [1, 2, 4, 16]
    assert one_coin_curve(0.3, ks) == pytest.approx([1 - 0.7 ** k for k in ks])
    # unequal rates with the same mean: pass@k (the exact expectation) lies below, equal at k = 1
    rates = [0.0, 0.1, 0.5, 0.6]
    exact = [1 - sum((1 - p) ** k for p in rates) / len(rates) for k in ks]
    bound = one_coin_curve(sum(rates) / len(rates), ks)
    assert exact[0] == pytest.approx(bound[0]) and all(e < b for e, b in zip(exact[1:], bound[1:]))
    for bad, match in ((1.5, "pass_at_1"), (True, "pass_at_1")):
        with pytest.raises(ValueError, match=match):
            one_coin_curve(bad, ks)
    with pytest.raises(ValueError, match="ks"):
        one_coin_curve(0.3, [])


def test_one_coin_gap_is_the_variance_at_k_2_and_variance_does_not_order_large_k():
    rates = [0.9, 0.3, 0.05, 0.0, 0.5]
    mean = sum(rates) / len(rates)
    variance = sum((r - mean) ** 2 for r in rates) / len(rates)
    gap = one_coin_gap(rates, [1, 2, 8])
    assert gap[0] == pytest.approx(0.0, abs=1e-12)
    assert gap[1] == pytest.approx(variance)  # the exact k = 2 identity
    assert gap[2] > 0
    assert one_coin_gap(rates, (k for k in [1, 2, 8])) == pytest.approx(gap)  # any iterable of ks, read once
    assert one_coin_gap([0.4] * 7, [2, 64]) == pytest.approx([0.0, 0.0], abs=1e-12)
    # the lesson's counterexample: same pass@1, smaller variance, yet behind at large k
    even, uneven = [0.5, 0.5, 0.0, 0.0], [0.97, 0.01, 0.01, 0.01]
    var = lambda r: one_coin_gap(r, [2])[0]
    assert var(even) < var(uneven)
    assert var(even) == pytest.approx(0.0625) and var(uneven) == pytest.approx(0.1728)  # the values lesson 18 prints
    pass_at = lambda r, k: 1 - sum((1 - p) ** k for p in r) / len(r)
    assert pass_at(even, 1024) == pytest.approx(0.5) and pass_at(uneven, 1024) > 0.99
    # higher pass@1 *and* smaller variance, still behind at k = 1024: the zero-rate share decides
    a, b = [0.3, 0.3, 0.0], [0.578, 0.001, 0.001]
    assert sum(a) > sum(b) and var(a) < var(b) and pass_at(a, 1024) < pass_at(b, 1024)
    assert pass_at(a, 1024) == pytest.approx(0.667, abs=5e-4) and pass_at(b, 1024) == pytest.approx(0.761, abs=5e-4)
    with pytest.raises(ValueError):
        one_coin_gap([], [2])
    with pytest.raises(ValueError):
        one_coin_gap([1.2], [2])


def test_dispersion_tells_one_coin_from_many():
    generator = torch.Generator().manual_seed(0)
    one_coin = (torch.rand(64, 256, generator=generator) < 0.3).int()
    result = dispersion(one_coin)
    assert result["low"] < result["index"] < result["high"]
    assert result["binomial_sd"] == pytest.approx(math.sqrt(result["pass_at_1"] * (1 - result["pass_at_1"]) / 256))
    assert result["low"] == pytest.approx(42.95 / 63, rel=2e-3)  # χ²(63)'s 2.5th and 97.5th percentiles
    assert result["high"] == pytest.approx(86.83 / 63, rel=2e-3)
    assert 0.01 < result["detectable_sd"] < 0.04
    many = (torch.rand(64, 256, generator=generator) < torch.linspace(0.05, 0.55, 64)[:, None]).int()
    spread = dispersion(many)
    assert spread["index"] > spread["high"] and spread["between_sd"] == pytest.approx(0.146, abs=0.02)
    assert math.isnan(dispersion(torch.zeros(4, 8))["index"])
    with pytest.raises(ValueError, match="2 problems"):
        dispersion(torch.ones(1, 8))


def test_plug_in_curve_is_the_mean_of_the_plug_in_and_lies_below():
    table = torch.tensor([[1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]])
    plug = pass_at_k_curve(table, [1, 4, 8], estimator="plug_in")
    assert plug[0] == pytest.approx(0.25)
    assert plug[2] == pytest.approx((1 - (7 / 8) ** 8 + 1 - (5 / 8) ** 8) / 2)
    assert all(p < u for p, u in zip(plug[1:], pass_at_k_curve(table, [4, 8])))
    with pytest.raises(ValueError, match="estimator"):
        pass_at_k_curve(table, [1], estimator="naive")
    with pytest.raises(ValueError, match="at most"):
        pass_at_k_curve(table, [9], estimator="plug_in")


def test_between_sd_upper_covers_the_true_spread_about_as_often_as_it_says():
    generator = torch.Generator().manual_seed(1)
    rates = 0.3 + 0.05 * torch.linspace(-1.7, 1.7, 64)  # true per-problem rates, sd about 0.05
    tau = float(rates.std(unbiased=False))
    bounds = [between_sd_upper((torch.rand(64, 128, generator=generator) < rates[:, None]).int())
              for _ in range(200)]
    covered = sum(b >= tau for b in bounds) / len(bounds)
    assert 0.88 <= covered <= 0.995  # 95 % nominal, Wilson–Hilferty and p̄ estimated
    one_coin = (torch.rand(64, 256, generator=generator) < 0.3).int()
    assert 0.0 <= between_sd_upper(one_coin) < 0.03
    assert between_sd_upper(one_coin, confidence=0.99) >= between_sd_upper(one_coin, confidence=0.9)
    with pytest.raises(ValueError, match="confidence"):
        between_sd_upper(one_coin, confidence=1.0)
    with pytest.raises(ValueError, match="2 problems"):
        between_sd_upper(torch.ones(1, 8))


def test_addition_cot_correct_checks_the_working_line_for_line():
    right = "<think>5+8=13\n4+7+1=12\n3+2+1=6</think><answer>623</answer>"
    wrong_work = "<think>5+8=13\n4+7=11\n3+2+1=6</think><answer>623</answer>"
    texts = [right, wrong_work, "<answer>623</answer>", right,          # 345+278
             "<think>1+1=2</think><answer>2</answer>", "x", "x", "x"]  # 1+1
    correct = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    table = addition_cot_correct(texts, [(345, 278), (1, 1)], correct)
    assert table.tolist() == [[True, False, False, False], [True, False, False, False]]
    # a stray "+" changes no number and is read past; a wrong number is not
    slips = ["<think>4+0=4\n1+8=9\n0++8=8</think><answer>894</answer>",   # 14+880: right working, one slip
             "<think>4+0=4\n1+8=9\n1++8=8</think><answer>894</answer>",   # a wrong digit in the last column
             "<think>4+0=4\n1+8=9</think><answer>894</answer>",            # a column missing
             "<think>4+0=4\n1+8=9\n0+8=8\n0+0=0</think><answer>894</answer>"]  # a column too many
    assert addition_cot_correct(slips, [(14, 880)], torch.ones(1, 4)).tolist() == [[True, False, False, False]]
    with pytest.raises(ValueError, match="texts"):
        addition_cot_correct(texts[:3], [(345, 278), (1, 1)], correct)
    with pytest.raises(ValueError, match="operands"):
        addition_cot_correct(texts, [(345, 278)], correct)


def test_problems_behind_names_only_clear_losses():
    generator = torch.Generator().manual_seed(1)
    rates = torch.full((20, 1), 0.3)
    base = (torch.rand(20, 256, generator=generator) < rates).int()
    policy_rates = rates.clone()
    policy_rates[3], policy_rates[7], policy_rates[9] = 0.0, 0.05, 0.25  # two clear losses, one within noise
    policy = (torch.rand(20, 256, generator=generator) < policy_rates).int()
    assert problems_behind(base, policy) == [3, 7]
    assert problems_behind(base, base) == []
    # the same policy, nowhere worse: no problem named (the Bonferroni bar at alpha / P)
    same = (torch.rand(20, 256, generator=generator) < rates).int()
    assert problems_behind(base, same) == []
    with pytest.raises(ValueError, match="alpha"):
        problems_behind(base, policy, alpha=0.0)
    with pytest.raises(ValueError, match="same problems"):
        problems_behind(base, policy[:5])


def _vote_by_enumeration(row, reference, k):
    """maj@k by listing every k-subset: the definition ``majority_at_k`` counts without listing."""
    import itertools

    total, subsets = 0.0, 0
    for subset in itertools.combinations(row, k):
        votes = {}
        for answer in subset:
            if answer is not None:
                votes[answer] = votes.get(answer, 0) + 1
        subsets += 1
        if votes:
            top = max(votes.values())
            tied = [answer for answer, count in votes.items() if count == top]
            total += (reference in tied) / len(tied)
    return total / subsets


def test_majority_at_k_counts_what_enumeration_lists():
    import random

    chooser = random.Random(0)
    for _ in range(150):
        n = chooser.randint(1, 10)
        k = chooser.randint(1, n)
        row = [chooser.choice(["1", "2", "3", None]) for _ in range(n)]
        reference = chooser.choice(["1", "2"])
        assert majority_at_k([row], [reference], k)[0].item() == pytest.approx(_vote_by_enumeration(row, reference, k))
    # k = 1 is pass@1; a tie of two answers is a coin; no answer at all scores 0
    assert majority_at_k([["7", "8", "7", None]], ["7"], 1)[0].item() == pytest.approx(0.5)
    assert majority_at_k([["7", "8"]], ["7"], 2)[0].item() == pytest.approx(0.5)
    assert majority_at_k([[None, None]], ["7"], 2)[0].item() == 0.0
    # a right answer in the minority loses the vote, though pass@k would count it
    assert majority_at_k([["7", "8", "8"]], ["7"], 3)[0].item() == 0.0
    with pytest.raises(ValueError, match="at least k"):
        majority_at_k([["7"]], ["7"], 2)
    with pytest.raises(ValueError, match="one length"):
        majority_at_k([["7"]], ["7", "8"], 1)
    with pytest.raises(ValueError, match="str or None"):
        majority_at_k([[7, 8]], ["7"], 1)


def test_problems_lost_counts_against_the_base_itself():
    generator = torch.Generator().manual_seed(2)
    rates = torch.linspace(0.1, 0.9, 40)[:, None]
    base = (torch.rand(40, 16, generator=generator) < rates).int()
    # a policy as good as the base on every problem loses about what the base itself would
    same = (torch.rand(40, 4, generator=generator) < rates).int()
    found = problems_lost(base, same)
    assert found["chosen"] > 20 and found["tail"] > 0.01
    assert abs(found["lost"] - found["expected"]) < 3 * found["sd"] + 1
    # a policy that never solves the problems the base solves most: far more than chance
    narrowed = same.clone()
    narrowed[rates.flatten() > 0.5] = 0
    lost = problems_lost(base, narrowed)
    assert lost["lost"] > lost["expected"] + 4 * lost["sd"] and lost["tail"] < 1e-6
    # by hand: one problem chosen (2 of its first 8 right), 2 of its other 8 right: C(6, 4)/C(8, 4) = 15/70
    one = problems_lost(torch.tensor([[1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]]), torch.zeros(1, 4, dtype=torch.int))
    assert one == {"chosen": 1, "lost": 1, "expected": pytest.approx(15 / 70), "sd": pytest.approx(math.sqrt(15 / 70 * 55 / 70)),
                   "tail": pytest.approx(15 / 70), "flagged_from": None}   # one coin at 15/70 never reaches 5 %
    assert found["flagged_from"] > found["expected"] and lost["lost"] >= lost["flagged_from"]
    with pytest.raises(ValueError, match="alpha"):
        problems_lost(base, same, alpha=1.0)
    with pytest.raises(ValueError, match="2 m samples"):
        problems_lost(base[:, :6], same)
    with pytest.raises(ValueError, match="min_base_rate"):
        problems_lost(base, same, min_base_rate=0.0)
    with pytest.raises(ValueError, match="same problems"):
        problems_lost(base, same[:5])


def test_mixed_group_share_counts_the_groups_with_a_gradient_by_enumeration():
    import itertools
    # the (problem, group) pairs enumerated: a group of G of the n samples is mixed when its rewards differ
    table = torch.tensor([[1, 1, 1, 1, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    for g in (1, 2, 3, 5):
        mixed = [len({row[i] for i in idx}) > 1 for row in table.tolist() for idx in itertools.combinations(range(5), g)]
        assert mixed_group_share(table, g) == pytest.approx(sum(mixed) / len(mixed))
    assert mixed_group_share(table, 1) == 0.0            # one sample is never a mixed group
    assert mixed_group_share(torch.zeros(3, 8), 4) == 0.0  # never solved: no gradient at all
    # a rate p problem, sampled many times: 1 − (1 − p)^G − p^G
    big = torch.tensor([[1] * 30 + [0] * 70])
    assert mixed_group_share(big, 8) == pytest.approx(1 - 0.7 ** 8 - 0.3 ** 8, abs=0.02)
    with pytest.raises(ValueError, match="group_size"):
        mixed_group_share(table, 6)


def test_kind_subtable_keeps_the_first_m_of_one_kind():
    correct = torch.tensor([[1, 0, 1, 1], [0, 1, 1, 0]])
    keep = torch.tensor([[0, 1, 1, 1], [1, 0, 1, 0]])
    sub = kind_subtable(correct, keep)
    assert sub.tolist() == [[False, True], [False, True]]  # m = 2, problem 0's third kept sample dropped
    with pytest.raises(ValueError, match="no sample"):
        kind_subtable(correct, torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0]]))
    with pytest.raises(ValueError, match="shape"):
        kind_subtable(correct, keep[:, :3])
