"""check_claim and worked_check: each prints what held and fails loudly when it does not."""

import pytest

from rlbook.notebook import check_claim, claim_at_full_size, worked_check


def test_a_claim_that_holds_is_printed_and_one_that_does_not_fails(capsys):
    check_claim(True, "the reward rises", "0.3 -> 0.9")
    assert capsys.readouterr().out == "✓ the reward rises (0.3 -> 0.9)\n"
    with pytest.raises(AssertionError, match="claim not shown by this run: the reward rises"):
        check_claim(False, "the reward rises")


def test_a_worked_check_is_marked_as_such_and_a_failing_one_is_a_bug(capsys):
    worked_check(True, "AM >= GM", "smallest gap 0")
    assert capsys.readouterr().out.startswith("= AM >= GM (smallest gap 0) [true by construction")
    with pytest.raises(AssertionError, match="worked check failed, which means a bug: AM >= GM"):
        worked_check(False, "AM >= GM")


def test_a_worked_check_of_a_sampler_says_so_instead_of_true_by_construction(capsys):
    worked_check(True, "share of misses 23%", "SE 0.2%", basis="a check of the sampler against a theorem")
    out = capsys.readouterr().out
    assert out.endswith("[a check of the sampler against a theorem, shown as a worked check]\n")
    assert "true by construction" not in out
    with pytest.raises(ValueError, match="basis"):
        worked_check(True, "x", basis=" ")


def test_gap_prints_rounding_as_its_bound_and_a_real_difference_as_itself():
    from rlbook.notebook import gap

    assert gap(5.6e-17) == gap(-6.2e-17) == "< 1e-12"
    assert gap(0.0) == "< 1e-12"
    assert gap(3.2e-4) == "3.2e-04"
    assert gap(2e-9, floor=1e-6) == "< 1e-06"
    with pytest.raises(ValueError, match="floor"):
        gap(1.0, floor=0)


def test_a_full_size_claim_is_asserted_at_full_size_and_reported_at_the_ci_size(capsys, monkeypatch):
    monkeypatch.setenv("RLBOOK_SIZE", "full")
    claim_at_full_size(True, "the share rises", "0.2 → 0.9", "12 steps are too few", n="3 seeds")
    assert capsys.readouterr().out.startswith("✓ the share rises (0.2 → 0.9) [3 seeds]")
    with pytest.raises(AssertionError, match="the share rises"):
        claim_at_full_size(False, "the share rises", "0.2 → 0.2", "12 steps are too few")
    monkeypatch.setenv("RLBOOK_SIZE", "ci")
    claim_at_full_size(False, "the share rises", "0.2 → 0.2", "12 steps are too few", n="3 seeds")
    out = capsys.readouterr().out
    assert out.startswith("report at the CI size (12 steps are too few): the share rises — not shown (0.2 → 0.2)")
    assert "✓" not in out
    with pytest.raises(ValueError, match="why_not_at_ci"):
        claim_at_full_size(True, "the share rises", "", " ")


def test_show_source_shows_an_excerpt_under_a_header_and_refuses_a_missing_marker(capsys):
    from rlbook.losses import policy_loss
    from rlbook.notebook import show_source

    show_source(policy_loss, excerpt=("surrogate_value = aggregate", "loss = aggregate(per_token"))
    shown = capsys.readouterr().out.strip().splitlines()  # outside Jupyter the source is printed
    assert shown[0].startswith("# rlbook.losses.policy.policy_loss, lines ")
    assert "surrogate_value = aggregate" in shown[1] and "loss = aggregate(per_token" in shown[-1]
    assert any("_kl_term" in line for line in shown) and not any("def policy_loss" in line for line in shown)
    with pytest.raises(ValueError, match="not found"):
        show_source(policy_loss, excerpt=("no such line", "return"))


def test_check_prediction_prints_either_verdict_and_never_raises_on_a_failed_prediction(capsys):
    import numpy as np
    from rlbook.notebook import check_prediction

    support = dict(n="5 seeds", uncertainty="seed sd 0.1", threshold="sign test at 5%, fixed before the run")
    assert check_prediction(True, "A beats B", "5 of 5", **support) is True
    held = capsys.readouterr().out
    assert held.startswith("✓ A beats B (5 of 5) [5 seeds; seed sd 0.1; threshold: sign test at 5%")
    assert check_prediction(np.bool_(False), "C beats B", "3 of 5", **support) is False
    failed = capsys.readouterr().out
    assert failed.startswith("✗ fixed before this run, and NOT shown by it (kept as the result): C beats B (3 of 5)")
    assert "threshold: sign test at 5%, fixed before the run" in failed
    for bad in ("n", "uncertainty", "threshold"):
        with pytest.raises(ValueError, match=bad):
            check_prediction(True, "x", "y", **{**support, bad: " "})
    with pytest.raises(ValueError, match="condition"):
        check_prediction(0.03, "x", "y", **support)  # a p-value, not the test's outcome
