"""rlbook.coverage: pass@k curves, crossover, coverage split, the plug-in estimator's bias, and
scoring one model's completions under another."""

import math

import pytest
import torch

from rlbook.coverage import (completion_logprob_sums, coverage_split, crossover_k, expected_estimates,
                             pass_at_k_curve, per_problem_pass_at_k, plug_in_pass_at_k, powers_of_two, seen_fraction)
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
