"""Lessons 04 and 05's checkers accept correct answers, name each typical mistake, and tolerate unanswered stubs."""

import math

import pytest
import torch
import torch.nn.functional as F

from rlbook.exercises import rejection as rejection_exercises
from rlbook.exercises import reward_models as rm_exercises
from rlbook.metrics import best_of_n_distribution, best_of_n_exact_kl


def _names_the_mistake(checker, mistakes, case, name, capsys):
    """The checker, given an answer that commits mistake ``name`` on every case, refuses it with that mistake's hint."""
    def wrong(*args):
        return mistakes(*args)[name][0]

    assert checker(wrong) is False
    assert mistakes(*case)[name][1] in capsys.readouterr().out


# ------------------------------------------------------------------------------ Bradley–Terry loss


def test_bradley_terry_checker_accepts_correct_answers(capsys):
    assert rm_exercises.check_bradley_terry_loss(lambda c, r: -F.logsigmoid(c - r).mean()) is True
    assert rm_exercises.check_bradley_terry_loss(lambda c, r: F.softplus(r - c).mean()) is True
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("naive", [lambda c, r: -torch.log(torch.sigmoid(c - r)).mean(),
                                   lambda c, r: torch.log1p(torch.exp(-(c - r))).mean()])
def test_bradley_terry_checker_refuses_the_unstable_textbook_forms(naive, capsys):
    # right on paper, but at the margin of −800 σ underflows (or e^800 overflows) even in float64
    assert rm_exercises.check_bradley_terry_loss(naive) is False
    out = capsys.readouterr().out
    assert "not finite at a margin of −800" in out and "the formula is right" in out


@pytest.mark.parametrize("clamped", [lambda c, r: -torch.log(torch.sigmoid(c - r) + 1e-8).mean(),
                                     lambda c, r: -torch.log(torch.sigmoid(c - r).clamp(min=1e-12)).mean()])
def test_bradley_terry_checker_names_the_epsilon_clamp(clamped, capsys):
    # the common half-fix of the unstable form: finite, right on ordinary margins, capped at −log ε at −800
    assert rm_exercises.check_bradley_terry_loss(clamped) is False
    out = capsys.readouterr().out
    assert "ε inside the log" in out and "capped" in out


@pytest.mark.parametrize("name", ["swapped", "no_minus", "sum", "no_log", "hinge", "pointwise", "over_temperature",
                                  "times_temperature"])
def test_bradley_terry_checker_names_each_mistake(name, capsys):
    def wrong(chosen, rejected):
        return rm_exercises._mistakes(chosen, rejected)[name][0]

    chosen, rejected = rm_exercises._cases()[0]
    hint = rm_exercises._mistakes(chosen, rejected)[name][1]
    assert rm_exercises.check_bradley_terry_loss(wrong) is False
    assert hint in capsys.readouterr().out


def test_bradley_terry_checker_other_failures(capsys):
    assert rm_exercises.check_bradley_terry_loss(lambda c, r: -F.logsigmoid(c - r)) is False  # per-pair, not a mean
    assert "one number" in capsys.readouterr().out
    assert rm_exercises.check_bradley_terry_loss(lambda c, r: c.sum() / 0) is False
    out = capsys.readouterr().out
    assert "not finite" in out and "formula is right" not in out  # wrong on the first batch already
    assert rm_exercises.check_bradley_terry_loss(lambda c, r: (c - r).mean()) is False
    assert "expected" in capsys.readouterr().out
    assert rm_exercises.check_bradley_terry_loss(lambda c, r: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    with pytest.raises(ValueError, match="function"):
        rm_exercises.check_bradley_terry_loss(0.5)


@pytest.mark.parametrize("number", [lambda c, r: -F.logsigmoid(c - r).mean().item(),
                                    lambda c, r: float(-F.logsigmoid(c - r).mean().detach()),
                                    lambda c, r: -F.logsigmoid(c - r).mean().detach()])
def test_bradley_terry_checker_refuses_a_loss_no_gradient_flows_through(number, capsys):
    # the right value, but a number cannot train a reward model
    assert rm_exercises.check_bradley_terry_loss(number) is False
    assert "no gradient flows back" in capsys.readouterr().out


def test_bradley_terry_checker_accepts_other_differentiable_forms(capsys):
    assert rm_exercises.check_bradley_terry_loss(
        lambda c, r: F.binary_cross_entropy_with_logits(c - r, torch.ones_like(c))) is True
    assert rm_exercises.check_bradley_terry_loss(lambda c, r: -F.logsigmoid(c.float() - r.float()).mean()) is True
    assert "✓" in capsys.readouterr().out


def test_bradley_terry_mistakes_all_differ_from_the_reference():
    from rlbook.trainers.reward_model import bradley_terry_loss

    for chosen, rejected in rm_exercises._cases():
        reference = bradley_terry_loss(chosen, rejected)
        for name, (candidate, _) in rm_exercises._mistakes(chosen, rejected).items():
            assert not torch.allclose(candidate, reference), name


# ------------------------------------------------------------------------------ one-pool best-of-n estimator


def test_brute_force_best_of_n_equals_the_library_closed_form():
    from rlbook.metrics import best_of_n_expectation

    generator = torch.Generator().manual_seed(0)
    scores, values = torch.randn(8, generator=generator, dtype=torch.float64), torch.randn(8, generator=generator, dtype=torch.float64)
    for n in range(1, 9):
        assert torch.allclose(rm_exercises.brute_force_best_of_n(scores, values, n),
                              best_of_n_expectation(scores[None], values[None], n)[0])
    # ties go to the earlier sample, as in the library
    tied = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    assert rm_exercises.brute_force_best_of_n(tied, torch.tensor([5.0, 7.0, 0.0]), 2).item() == pytest.approx((5 + 5 + 7) / 3)
    with pytest.raises(ValueError, match="1 <= n <= N"):
        rm_exercises.brute_force_best_of_n(scores, values, 9)


def test_best_of_n_expectation_checker_accepts_a_right_answer(capsys):
    def answer(scores, values, n):
        size = scores.numel()
        weights = torch.tensor([math.comb(k - 1, n - 1) / math.comb(size, n) for k in range(1, size + 1)])
        return (values[torch.argsort(scores)] * weights.to(values.dtype)).sum()

    assert rm_exercises.check_best_of_n_expectation(answer) is True
    assert "brute-force enumeration" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["descending", "sorted_values", "cdf", "k_not_k_minus_one", "with_replacement", "unsorted",
                                  "argmax", "plain_mean", "top_n_mean", "continuous", "ranks_not_order",
                                  "k_not_k_minus_one_renormalised"])
def test_best_of_n_expectation_checker_names_each_mistake(name, capsys):
    _names_the_mistake(rm_exercises.check_best_of_n_expectation, rm_exercises._pool_mistakes,
                       rm_exercises._pool_cases()[1], name, capsys)


def test_best_of_n_expectation_checker_names_hand_written_slips_across_cases(capsys):
    # best-of-N whatever n: at n = 1 it equals the top-1 mean, so only judging every case together names it
    assert rm_exercises.check_best_of_n_expectation(lambda s, v, n: v[s.argmax()]) is False
    assert "best-of-N whatever n" in capsys.readouterr().out

    def unsorted(scores, values, n):
        size = scores.numel()
        return sum(math.comb(k - 1, n - 1) / math.comb(size, n) * values[k - 1] for k in range(1, size + 1))

    assert rm_exercises.check_best_of_n_expectation(unsorted) is False
    assert "pool order" in capsys.readouterr().out


def test_best_of_n_expectation_checker_other_answers(capsys):
    assert rm_exercises.check_best_of_n_expectation(lambda s, v, n: v.max()) is False
    out = capsys.readouterr().out
    assert "expected" in out and "[" not in out      # plain numbers, not one-element lists
    assert rm_exercises.check_best_of_n_expectation(lambda s, v, n: v) is False
    assert "one number" in capsys.readouterr().out
    assert rm_exercises.check_best_of_n_expectation(None) is None


def test_best_of_n_mistakes_all_differ_from_brute_force_where_it_matters():
    # every mistake is wrong on at least one case (the checker can name it)
    for name in rm_exercises._pool_mistakes(*rm_exercises._pool_cases()[0]):
        assert any(not torch.allclose(rm_exercises._pool_mistakes(*case)[name][0], rm_exercises.brute_force_best_of_n(*case))
                   for case in rm_exercises._pool_cases()), name


# ------------------------------------------------------------------------------ best-of-n distribution


def _by_hand(probs, rewards, n):
    """F(y)^n − (F(y) − π(y))^n with F summed over the outcomes of reward ≤ r(y) (distinct rewards)."""
    cdf = torch.stack([probs[rewards <= r].sum() for r in rewards])
    return cdf ** n - (cdf - probs) ** n


def test_best_of_n_checker_accepts_correct_answers(capsys):
    assert rejection_exercises.check_best_of_n_probabilities(_by_hand) is True
    assert rejection_exercises.check_best_of_n_probabilities(best_of_n_distribution) is True
    assert rejection_exercises.check_best_of_n_probabilities(lambda p, r, n: _by_hand(p, r, n).tolist()) is True
    assert "✓" in capsys.readouterr().out


def test_best_of_n_checker_accepts_a_float32_answer(capsys):
    assert rejection_exercises.check_best_of_n_probabilities(
        lambda p, r, n: _by_hand(p.float(), r.float(), n)) is True
    assert "✓" in capsys.readouterr().out


def _sorted_answer(probs, rewards, n, *, descending=False, scatter_back=True):
    """A reader's sort-and-cumsum answer; ``descending`` and ``scatter_back=False`` are the two slips."""
    order = rewards.argsort(descending=descending)
    cdf = probs[order].cumsum(0)
    in_sorted_order = cdf ** n - (cdf - probs[order]) ** n
    if not scatter_back:
        return in_sorted_order
    return torch.empty_like(probs).index_copy_(0, order, in_sorted_order)


def test_best_of_n_checker_names_a_readers_descending_sort_and_a_missing_scatter(capsys):
    assert rejection_exercises.check_best_of_n_probabilities(_sorted_answer) is True
    capsys.readouterr()
    assert rejection_exercises.check_best_of_n_probabilities(
        lambda p, r, n: _sorted_answer(p, r, n, descending=True)) is False
    assert "*worst* of n" in capsys.readouterr().out
    assert rejection_exercises.check_best_of_n_probabilities(
        lambda p, r, n: _sorted_answer(p, r, n, scatter_back=False)) is False
    assert "listed in reward order" in capsys.readouterr().out


def test_best_of_n_checker_names_a_readers_unsort_with_the_wrong_permutation(capsys):
    def indexed_back(probs, rewards, n):
        order = rewards.argsort()
        cdf = probs[order].cumsum(0)
        return (cdf ** n - (cdf - probs[order]) ** n)[order]   # the slip: index with order, not scatter

    assert rejection_exercises.check_best_of_n_probabilities(indexed_back) is False
    assert "wrong permutation" in capsys.readouterr().out


def test_best_of_n_checker_prints_the_largest_difference_when_no_mistake_matches(capsys):
    assert rejection_exercises.check_best_of_n_probabilities(lambda p, r, n: _by_hand(p, r, n) * 1.01) is False
    assert "largest difference" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["continuous", "cdf", "worst_of_n", "reward_order", "inverse_permutation", "pi_times",
                                  "unsorted", "strict_cdf", "appears", "continuous_normalised", "one_short"])
def test_best_of_n_checker_names_each_mistake(name, capsys):
    _names_the_mistake(rejection_exercises.check_best_of_n_probabilities, rejection_exercises._mistakes,
                       rejection_exercises._cases()[0], name, capsys)


def test_best_of_n_checker_other_failures(capsys):
    assert rejection_exercises.check_best_of_n_probabilities(lambda p, r, n: p) is False
    assert "n − 1" in capsys.readouterr().out   # π is best-of-(n − 1) at the first case's n = 2
    assert rejection_exercises.check_best_of_n_probabilities(lambda p, r, n: 0.5 * p) is False
    assert "expected" in capsys.readouterr().out
    assert rejection_exercises.check_best_of_n_probabilities(lambda p, r, n: p[:3]) is False
    assert "shape" in capsys.readouterr().out
    assert rejection_exercises.check_best_of_n_probabilities(lambda p, r, n: {}) is False
    assert "your function" in capsys.readouterr().out
    with pytest.raises(ValueError, match="function"):
        rejection_exercises.check_best_of_n_probabilities("F^n")


@pytest.mark.parametrize("tied", [False, True])
def test_best_of_n_cases_tie_or_not_as_meant_and_tell_their_mistakes_apart(tied):
    cases, named = ((rejection_exercises._tied_cases(), rejection_exercises._tie_mistakes) if tied
                    else (rejection_exercises._cases(), rejection_exercises._mistakes))
    for probs, rewards, n in cases:
        assert (len(set(rewards.tolist())) < len(rewards)) == tied
        reference = best_of_n_distribution(probs, rewards, n)
        mistakes = named(probs, rewards, n)
        for name, (candidate, _) in mistakes.items():
            assert not rejection_exercises._close(candidate, reference), name
            assert not any(rejection_exercises._close(candidate, other) for other_name, (other, _) in mistakes.items()
                           if other_name != name), name


def _strict_cdf(probs, rewards, n):
    """A reader's slip: the cumulative summed over rewards strictly below r(y)."""
    below = torch.stack([probs[rewards < r].sum() for r in rewards])
    return below ** n - (below - probs) ** n


def test_best_of_n_checker_names_a_readers_own_versions_of_the_new_slips(capsys):
    assert rejection_exercises.check_best_of_n_probabilities(_strict_cdf) is False
    assert "strictly below y" in capsys.readouterr().out
    assert rejection_exercises.check_best_of_n_probabilities(lambda p, r, n: 1 - (1 - p) ** n) is False
    assert "*among* the n draws" in capsys.readouterr().out

    def normalised(probs, rewards, n):
        cdf = torch.stack([probs[rewards <= r].sum() for r in rewards])
        weights = n * probs * cdf ** (n - 1)
        return (weights / weights.sum()).float()

    assert rejection_exercises.check_best_of_n_probabilities(normalised) is False
    assert "renormalising" in capsys.readouterr().out


def _tie_shared(probs, rewards, n):
    """By hand, with ties: each level's F(c)^n − F(c⁻)^n, shared among its outcomes in proportion to π."""
    out = torch.empty_like(probs)
    for i, r in enumerate(rewards):
        at, upto = probs[rewards == r].sum(), probs[rewards <= r].sum()
        out[i] = probs[i] / at * (upto ** n - (upto - at) ** n)
    return out


def test_best_of_n_ties_checker_accepts_right_answers_and_refuses_a_distinct_rewards_answer(capsys):
    check = rejection_exercises.check_best_of_n_probabilities_with_ties
    assert check(_tie_shared) is True and check(best_of_n_distribution) is True
    assert check(lambda p, r, n: _tie_shared(p.float(), r.float(), n)) is True
    assert "✓" in capsys.readouterr().out
    assert rejection_exercises.check_best_of_n_probabilities(_tie_shared) is True   # also right without ties
    capsys.readouterr()
    assert check(_sorted_answer) is False   # a distinct-rewards answer lets the sort break the tie
    assert "the sort broke the tie" in capsys.readouterr().out
    assert check(_by_hand) is False
    assert "as if y were alone on its level" in capsys.readouterr().out
    assert check(lambda p, r, n: 1.01 * _tie_shared(p, r, n)) is False
    assert "largest difference" in capsys.readouterr().out
    assert check(None) is None


@pytest.mark.parametrize("name", ["tie_equal", "tie_whole_level", "tie_one", "tie_sort_order", "tie_own_mass"])
def test_best_of_n_ties_checker_names_each_mistake(name, capsys):
    _names_the_mistake(rejection_exercises.check_best_of_n_probabilities_with_ties, rejection_exercises._tie_mistakes,
                       rejection_exercises._tied_cases()[0], name, capsys)


# ------------------------------------------------------------------------------ the KL under a verifier


def _two_coins(p, n):
    q = 1 - (1 - p) ** n
    return sum(a * math.log(a / b) for a, b in ((q, p), (1 - q, 1 - p)) if a > 0)


def test_verifier_kl_checker_accepts_right_answers(capsys):
    assert rejection_exercises.check_verifier_best_of_n_kl(_two_coins) is True
    assert rejection_exercises.check_verifier_best_of_n_kl(lambda p, n: torch.tensor(_two_coins(p, n))) is True
    assert rejection_exercises.check_verifier_best_of_n_kl(
        lambda p, n: best_of_n_exact_kl(torch.tensor([p, 1 - p]), torch.tensor([1.0, 0.0]), n)) is True
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["formula", "ceiling", "one_term", "reverse", "linear_q", "all_right", "not_all_right",
                                  "smaller_bound", "bits", "flipped_wrong_log", "log10"])
def test_verifier_kl_checker_names_each_mistake(name, capsys):
    def wrong(p, n):
        return rejection_exercises._verifier_mistakes(p, n)[name][0]

    p, n = rejection_exercises.VERIFIER_CASES[0]
    hint = rejection_exercises._verifier_mistakes(p, n)[name][1]
    assert rejection_exercises.check_verifier_best_of_n_kl(wrong) is False
    assert hint in capsys.readouterr().out


def test_verifier_kl_checker_names_a_readers_bits_and_not_all_right(capsys):
    assert rejection_exercises.check_verifier_best_of_n_kl(lambda p, n: _two_coins(p, n) / math.log(2)) is False
    assert "in bits" in capsys.readouterr().out

    def not_all_right(p, n):
        q = 1 - p ** n
        return q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))

    assert rejection_exercises.check_verifier_best_of_n_kl(not_all_right) is False
    assert "not all n draws are right" in capsys.readouterr().out


def test_verifier_kl_mistakes_are_told_apart_over_the_cases_and_other_failures(capsys):
    columns = [[v for v, _ in rejection_exercises._verifier_mistakes(p, n).values()] + [_two_coins(p, n)]
               for p, n in rejection_exercises.VERIFIER_CASES]
    rows = list(zip(*columns))                                   # each mistake's (and the answer's) values over the cases
    names = list(rejection_exercises._verifier_mistakes(0.3, 8)) + ["answer"]
    for i, a in enumerate(rows):
        for j, b in enumerate(rows[i + 1:], start=i + 1):
            if {names[i], names[j]} == {"formula", "smaller_bound"}:   # apart only at p = 0.3, n = 8: 1.20444 vs 1.20397
                assert max(abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in zip(a, b)) > 3e-4   # > 3 × the checker's 1e-4
            else:
                assert max(abs(x - y) for x, y in zip(a, b)) > 1e-3, (names[i], names[j])
    assert rejection_exercises.check_verifier_best_of_n_kl(lambda p, n: 1.01 * _two_coins(p, n)) is False
    assert "expected" in capsys.readouterr().out
    assert rejection_exercises.check_verifier_best_of_n_kl(lambda p, n: [0.1, 0.2]) is False
    assert "one number" in capsys.readouterr().out
    # a sign slip that matches no named mistake: a KL below zero is named as impossible
    assert rejection_exercises.check_verifier_best_of_n_kl(lambda p, n: -0.7 * _two_coins(p, n) - 0.01) is False
    assert "never negative" in capsys.readouterr().out
    assert rejection_exercises.check_verifier_best_of_n_kl(lambda p, n: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert rejection_exercises.check_verifier_best_of_n_kl(None) is None
    with pytest.raises(ValueError, match="function"):
        rejection_exercises.check_verifier_best_of_n_kl("log(1/p)")


def test_verifier_kl_checker_names_an_exponent_off_by_one_that_crashes_at_n_1(capsys):
    def off_by_one(p, n):
        q = 1 - (1 - p) ** (n - 1)
        return q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))   # q = 0 at n = 1: log(0)

    assert rejection_exercises.check_verifier_best_of_n_kl(off_by_one) is False
    out = capsys.readouterr().out
    assert "ValueError" in out and "exponent is one short" in out and "q = 1 − (1 − p)^n" in out
    # another crash at n = 1 gets no such hint
    assert rejection_exercises.check_verifier_best_of_n_kl(lambda p, n: _two_coins(p, n) if n > 1 else 1 / 0) is False
    out = capsys.readouterr().out
    assert "ZeroDivisionError" in out and "one short" not in out


# ------------------------------------------------------------------------------ the mode model's round


def test_mode_share_checker_accepts_a_right_answer_and_names_each_mistake(capsys):
    check = rejection_exercises.check_mode_share
    assert check(lambda q, a_s, a_d: q * a_s / (q * a_s + (1 - q) * a_d)) is True
    assert check(lambda q, a_s, a_d: torch.tensor(q * a_s / (q * a_s + (1 - q) * a_d), dtype=torch.float32)) is True
    assert "✓" in capsys.readouterr().out
    for name in rejection_exercises._mode_mistakes(*rejection_exercises.MODE_CASES[0]):
        assert check(lambda q, a_s, a_d, name=name: rejection_exercises._mode_mistakes(q, a_s, a_d)[name][0]) is False
        assert rejection_exercises._mode_mistakes(*rejection_exercises.MODE_CASES[0])[name][1] in capsys.readouterr().out
    assert check(lambda q, a_s, a_d: 0.5) is False
    assert "expected" in capsys.readouterr().out
    assert check(None) is None


def test_mode_mistakes_differ_from_the_answer_and_each_other():
    for case in rejection_exercises.MODE_CASES:
        values = {name: v for name, (v, _) in rejection_exercises._mode_mistakes(*case).items()}
        values["answer"] = rejection_exercises._mode_share(*case)
        names = list(values)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                assert abs(values[a] - values[b]) > 1e-3, (case, a, b)


def test_best_of_n_expectation_checker_names_the_rank_and_renormalised_slips(capsys):
    def by_ranks(scores, values, n):
        size = scores.numel()
        weights = torch.tensor([math.comb(k - 1, n - 1) / math.comb(size, n) for k in range(1, size + 1)], dtype=values.dtype)
        return (values[torch.argsort(torch.argsort(scores))] * weights).sum()

    def renormalised(scores, values, n):
        size = scores.numel()
        weights = torch.tensor([math.comb(k, n - 1) for k in range(1, size + 1)], dtype=values.dtype)
        return (values[torch.argsort(scores)] * weights / weights.sum()).sum()

    assert rm_exercises.check_best_of_n_expectation(by_ranks) is False
    assert "its *rank*" in capsys.readouterr().out
    assert rm_exercises.check_best_of_n_expectation(renormalised) is False
    assert "divided by its own sum" in capsys.readouterr().out


def test_best_of_n_ties_checker_names_a_readers_whole_level_slip(capsys):
    """A reader's own loop giving each tied outcome its whole level's chance F(c)^n − F(c⁻)^n (no π share) is named."""
    def whole_level(probs, rewards, n):
        return torch.stack([probs[rewards <= r].sum() ** n - probs[rewards < r].sum() ** n for r in rewards])

    assert rejection_exercises.check_best_of_n_probabilities_with_ties(whole_level) is False
    assert "the whole level's chance" in capsys.readouterr().out
