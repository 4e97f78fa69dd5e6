"""Lesson 18's exercise: pass@k from c correct of n samples."""

import math

from rlbook.exercises.pass_at_k import check_pass_at_k


def correct(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_correct_answer_passes(capsys):
    assert check_pass_at_k(correct) is True
    assert "✓" in capsys.readouterr().out


def test_typical_mistakes_are_named(capsys):
    cases = {"plug-in": lambda n, c, k: 1 - (1 - c / n) ** k,
             "all k samples fail": lambda n, c, k: 1 - correct(n, c, k),
             "pass@1, whatever k is": lambda n, c, k: c / n,
             "*wrong* samples": lambda n, c, k: 1 - math.comb(c, k) / math.comb(n, k)}
    for phrase, fn in cases.items():
        assert check_pass_at_k(fn) is False
        assert phrase in capsys.readouterr().out


def test_errors_and_unknown_answers(capsys):
    assert check_pass_at_k(lambda n, c, k: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert check_pass_at_k(lambda n, c, k: 0.5) is False
    assert "expected" in capsys.readouterr().out
    assert check_pass_at_k(lambda n, c, k: [0.1, 0.2]) is False


# --- the lesson's exercise: the pass@k gap and its SE clustered by problem ---------------------

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from rlbook.evidence import paired_pass_at_k_difference  # noqa: E402


def library_gap(base, policy, k):
    return paired_pass_at_k_difference(policy, base, k)
from rlbook.exercises.pass_at_k import GAP_CASES, check_gap_se, check_lowest_curve, gap_tables  # noqa: E402
from rlbook.metrics import pass_at_k, pass_at_k_per_prompt  # noqa: E402


def _per_problem_gap(base, policy, k):
    return np.asarray(pass_at_k_per_prompt(policy, k)) - np.asarray(pass_at_k_per_prompt(base, k))


def written_by_hand(base, policy, k, ddof=1):
    d = _per_problem_gap(base, policy, k)
    return d.mean(), d.std(ddof=ddof) / np.sqrt(len(d))


@pytest.mark.parametrize("answer", [library_gap, written_by_hand,
                                    lambda b, p, k: written_by_hand(b, p, k, ddof=0),
                                    lambda b, p, k: list(written_by_hand(b, p, k))])
def test_right_answers_pass(answer, capsys):
    assert check_gap_se(answer) is True
    assert "✓" in capsys.readouterr().out


def _se(table, k):
    values = np.asarray(pass_at_k_per_prompt(table, k))
    return values.std(ddof=1) / np.sqrt(len(values))


def _plug_in_gap(b, p, k):
    n = b.shape[1]
    plug = lambda t: 1 - (1 - t.double().mean(1).numpy()) ** k
    d = plug(p) - plug(b)
    return d.mean(), d.std(ddof=1) / np.sqrt(len(d))


WRONG = {
    "unclustered": lambda b, p, k: (_per_problem_gap(b, p, k).mean(),
                                    _per_problem_gap(b, p, k).std(ddof=1) / np.sqrt(b.numel())),
    "unpaired": lambda b, p, k: (_per_problem_gap(b, p, k).mean(), np.hypot(_se(b, k), _se(p, k))),
    "spread (sd)": lambda b, p, k: (_per_problem_gap(b, p, k).mean(), _per_problem_gap(b, p, k).std(ddof=1)),
    "wrong way round": lambda b, p, k: (-_per_problem_gap(b, p, k).mean(), 1.0),
    "plug-in": _plug_in_gap,
}


def _within_problem(b, p, k):  # binomial noise inside each problem only, the problems held fixed
    n = b.shape[1]
    qb, qp = b.double().mean(1).numpy(), p.double().mean(1).numpy()
    slope = lambda q: k * (1 - q) ** (k - 1)
    var = (slope(qb) ** 2 * qb * (1 - qb) + slope(qp) ** 2 * qp * (1 - qp)) / n
    return _per_problem_gap(b, p, k).mean(), np.sqrt(var.sum()) / len(qb)


WRONG["within-problem"] = _within_problem
# a 95 % interval's half-width returned in place of the SE (read s43c: it was named "unpaired")
WRONG["half-width"] = lambda b, p, k: (_per_problem_gap(b, p, k).mean(), 1.96 * _per_problem_gap(b, p, k).std(ddof=1)
                                       / np.sqrt(b.shape[0]))


# pass@k of the pooled rate, or of the pooled counts: the one-coin curve of §3 (read s43e)
WRONG["one-coin"] = lambda b, p, k: (
    (1 - (1 - p.double().mean().item()) ** k) - (1 - (1 - b.double().mean().item()) ** k),
    _per_problem_gap(b, p, k).std(ddof=1) / np.sqrt(b.shape[0]))


def test_one_coin_from_pooled_counts_is_named(capsys):
    def pooled(b, p, k):
        gap = pass_at_k(p.numel(), int(p.sum()), k) - pass_at_k(b.numel(), int(b.sum()), k)
        return gap, _per_problem_gap(b, p, k).std(ddof=1) / np.sqrt(b.shape[0])
    assert check_gap_se(pooled) is False
    assert "one-coin" in capsys.readouterr().out


def test_lowest_curve_exercise(capsys):
    assert check_lowest_curve(None) is None
    assert check_lowest_curve({2: "E", 1024: "e"}) is True
    assert check_lowest_curve({2: "C", 1024: "E"}) is False  # C has a large variance, E's is larger
    assert "variance" in capsys.readouterr().out
    assert check_lowest_curve({2: "E", 1024: "B"}) is False  # support read as if k = 1024 were infinite
    assert "k → ∞ statement" in capsys.readouterr().out
    assert check_lowest_curve({2: "E", 1024: "A"}) is False
    assert "act like zero" in capsys.readouterr().out
    # the rates: each model's pass@1 is 0.25, E lowest at both k, B's pass@1024 0.5 above E's
    from rlbook.exercises.pass_at_k import ONE_COIN_RATES, _mean_pass_at_k
    assert all(abs(sum(r) / 4 - 0.25) < 1e-12 for r in ONE_COIN_RATES.values())
    for k in (2, 1024):
        assert min(ONE_COIN_RATES, key=lambda m: _mean_pass_at_k(ONE_COIN_RATES[m], k)) == "E"
    assert _mean_pass_at_k(ONE_COIN_RATES["B"], 1024) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="keys"):
        check_lowest_curve({2: "C"})
    with pytest.raises(ValueError, match="one of"):
        check_lowest_curve({2: "F", 1024: "B"})


@pytest.mark.parametrize("name", list(WRONG))
def test_each_named_mistake_is_named(name, capsys):
    assert check_gap_se(WRONG[name]) is False
    assert name in capsys.readouterr().out


def test_unclustered_at_k_1_over_every_sample_is_named(capsys):
    # the k = 1 form of the mistake: each of the P·n paired sample differences as its own observation
    def per_sample(b, p, k):
        if k != 1:
            return library_gap(b, p, k)
        d = (p - b).double().flatten().numpy()
        return d.mean(), d.std(ddof=1) / np.sqrt(d.size)
    assert check_gap_se(per_sample) is False
    assert "unclustered" in capsys.readouterr().out


def test_the_mistakes_are_far_apart_on_the_checker_tables():
    for k, seed in GAP_CASES:
        base, policy = gap_tables(seed)
        gap, se = library_gap(base, policy, k)
        assert abs(gap) > 0.05
        for name in ("unclustered", "unpaired", "spread (sd)", "within-problem"):
            wrong = float(WRONG[name](base, policy, k)[1])
            assert not 0.66 < wrong / se < 1.5, (name, k)


def test_stub_errors_and_shapes(capsys):
    def stub(b, p, k):
        raise NotImplementedError
    assert check_gap_se(stub) is None
    assert check_gap_se(None) is None
    assert check_gap_se(lambda b, p, k: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert check_gap_se(lambda b, p, k: 0.1) is False
    assert "two numbers" in capsys.readouterr().out
    assert check_gap_se(lambda b, p, k: (0.123, 0.01)) is False
    assert "expected the gap" in capsys.readouterr().out


def test_a_float32_answer_passes(capsys):
    """The r3 read: a right answer computed in torch's default dtype was rejected with two equal numbers."""
    import torch

    def in_float32(base, policy, k):
        d = torch.tensor(_per_problem_gap(base, policy, k), dtype=torch.float32)
        return d.mean(), d.std() / len(d) ** 0.5
    assert check_gap_se(in_float32) is True
    assert "✓" in capsys.readouterr().out


def test_a_bootstrap_over_problems_passes(capsys):
    """The s42a read: a bootstrap SE (B = 1000) was rejected 15 times in 20 at a 3 % tolerance."""
    passed = 0
    for trial in range(10):
        rng = np.random.default_rng(trial)

        def bootstrap(base, policy, k):
            d = _per_problem_gap(base, policy, k)
            means = [d[rng.integers(0, len(d), len(d))].mean() for _ in range(1000)]
            return d.mean(), np.std(means)
        passed += bool(check_gap_se(bootstrap))
    assert passed == 10
    capsys.readouterr()


def test_an_unnamed_se_reports_a_named_mistake_on_another_case(capsys):
    def within_at_k_1_only(b, p, k):
        return _within_problem(b, p, k) if k == 1 else (_per_problem_gap(b, p, k).mean(), 1.0)
    assert check_gap_se(within_at_k_1_only) is False
    assert "within-problem" in capsys.readouterr().out
