"""Lessons 06 and 07's checkers accept the reference, name each typical mistake, and tolerate unanswered stubs."""

import pytest
import torch
import torch.nn.functional as F

from rlbook.exercises import preference as exercises
from rlbook.losses import dpo_loss, ipo_loss, simpo_loss


def correct_optimum(ref_probs, rewards, beta):
    # the softmax form: the normalised product ref_probs * exp(rewards / beta) overflows at the checker's β = 0.003
    return torch.softmax(ref_probs.log() + rewards / beta, dim=0)


def correct_dpo(chosen, rejected, ref_chosen, ref_rejected, beta):
    return -F.logsigmoid(beta * ((chosen - ref_chosen) - (rejected - ref_rejected)))


def correct_ipo(chosen, rejected, ref_chosen, ref_rejected, tau):
    return ((chosen - ref_chosen) - (rejected - ref_rejected) - 1 / (2 * tau)) ** 2


def correct_simpo(chosen, rejected, chosen_lens, rejected_lens, beta, gamma):
    return -F.logsigmoid(beta * chosen / chosen_lens - beta * rejected / rejected_lens - gamma)


CHECKERS = [
    (exercises.check_optimal_policy, correct_optimum),
    (exercises.check_dpo_loss, correct_dpo),
    (exercises.check_ipo_loss, correct_ipo),
    (exercises.check_simpo_loss, correct_simpo),
]
SIMPO_CASE = (*exercises.PAIRS[:2], *exercises.LENGTHS, *exercises.SIMPO_SETTINGS[0])


@pytest.mark.parametrize("checker, correct", CHECKERS)
def test_correct_answers_pass(checker, correct, capsys):
    assert checker(correct) is True
    assert "✓" in capsys.readouterr().out
    as_lists = lambda *args: correct(*args).tolist()  # noqa: E731  (a list of floats is accepted too)
    # ...except for the losses, whose checkers ask for a loss that can train (a gradient back to the log-probs)
    assert checker(as_lists) is (checker is exercises.check_optimal_policy)


@pytest.mark.parametrize("checker, correct", CHECKERS[1:])
def test_loss_checkers_reject_a_loss_without_gradient(checker, correct, capsys):
    # the right values, rewrapped through numpy: no gradient reaches the policy's log-probs (read s46a)
    rewrapped = lambda *args: torch.tensor(correct(*args).detach().numpy())  # noqa: E731
    assert checker(rewrapped) is False
    assert "carries no gradient" in capsys.readouterr().out


def test_simpo_checker_names_an_underflowing_log_sigmoid(capsys):
    unstable = lambda c, r, cl, rl, b, g: -torch.log(torch.sigmoid(b * c / cl - b * r / rl - g))  # noqa: E731
    assert exercises.check_simpo_loss(unstable) is False
    out = capsys.readouterr().out
    assert "underflows" in out and "logsigmoid" in out


@pytest.mark.parametrize("checker, correct", CHECKERS)
def test_broken_answers(checker, correct, capsys):
    assert checker(lambda *args: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    with pytest.raises(ValueError, match="function"):
        checker(3.0)


def test_the_library_is_what_the_checkers_compare_with():
    chosen, rejected, ref_chosen, ref_rejected = exercises.PAIRS
    torch.testing.assert_close(correct_dpo(*exercises.PAIRS, 0.1), dpo_loss(*exercises.PAIRS, 0.1))
    torch.testing.assert_close(correct_ipo(*exercises.PAIRS, 0.1), ipo_loss(*exercises.PAIRS, 0.1))
    # The fixed pairs include one with h = 0, whose DPO loss is ln 2.
    h = (chosen - ref_chosen) - (rejected - ref_rejected)
    assert (h == 0).sum() == 1
    assert torch.isclose(dpo_loss(*exercises.PAIRS, 0.5)[h == 0], torch.tensor(0.6931471805599453, dtype=h.dtype))


@pytest.mark.parametrize("name", list(exercises.optimal_policy_mistakes(exercises.REF_PROBS, exercises.REWARDS, 1.0)))
def test_optimal_policy_names_each_mistake(name, capsys):
    def wrong(ref_probs, rewards, beta):
        return exercises.optimal_policy_mistakes(ref_probs, rewards, beta)[name][0]

    hint = exercises.optimal_policy_mistakes(exercises.REF_PROBS, exercises.REWARDS, 1.0)[name][1]
    assert exercises.check_optimal_policy(wrong) is False
    out = capsys.readouterr().out
    assert hint in out and "✗" in out


@pytest.mark.parametrize("name", list(exercises.dpo_loss_mistakes(*exercises.PAIRS, 0.1)))
def test_dpo_loss_names_each_mistake(name, capsys):
    def wrong(*args):
        return exercises.dpo_loss_mistakes(*args)[name][0]

    assert exercises.check_dpo_loss(wrong) is False
    assert exercises.dpo_loss_mistakes(*exercises.PAIRS, 0.1)[name][1] in capsys.readouterr().out


@pytest.mark.parametrize("name", list(exercises.ipo_loss_mistakes(*exercises.PAIRS, 0.1)))
def test_ipo_loss_names_each_mistake(name, capsys):
    def wrong(*args):
        return exercises.ipo_loss_mistakes(*args)[name][0]

    assert exercises.check_ipo_loss(wrong) is False
    assert exercises.ipo_loss_mistakes(*exercises.PAIRS, 0.1)[name][1] in capsys.readouterr().out


@pytest.mark.parametrize("name", list(exercises.simpo_loss_mistakes(*SIMPO_CASE)))
def test_simpo_loss_names_each_mistake(name, capsys):
    def wrong(*args):
        return exercises.simpo_loss_mistakes(*args)[name][0]

    assert exercises.check_simpo_loss(wrong) is False
    out = capsys.readouterr().out
    assert exercises.simpo_loss_mistakes(*SIMPO_CASE)[name][1] in out
    assert "(β, γ) = (2.0, 0.5)" in out  # the message names both knobs of the failing case


def test_simpo_cases_make_length_matter():
    # In some pairs the summed log-probs and the per-token averages disagree on which response is better,
    # so a loss on sums cannot pass by accident.
    chosen, rejected = exercises.PAIRS[:2]
    chosen_lens, rejected_lens = exercises.LENGTHS
    by_sum = chosen > rejected
    by_average = chosen / chosen_lens > rejected / rejected_lens
    assert (by_sum != by_average).any() and (by_sum == by_average).any()
    torch.testing.assert_close(correct_simpo(*SIMPO_CASE), simpo_loss(*SIMPO_CASE))


def test_mistakes_differ_from_the_reference():
    # A hint is only useful if its wrong answer really differs from the right one on the fixed cases
    # (β·r and r/β coincide at β = 1, so the optimum's mistakes are required to differ at β = 0.5, checked first).
    beta = exercises.OPTIMUM_BETAS[0]
    want = correct_optimum(exercises.REF_PROBS, exercises.REWARDS, beta)
    for wrong, _ in exercises.optimal_policy_mistakes(exercises.REF_PROBS, exercises.REWARDS, beta).values():
        assert not torch.allclose(wrong, want)
    for beta in exercises.DPO_BETAS:
        for wrong, _ in exercises.dpo_loss_mistakes(*exercises.PAIRS, beta).values():
            assert not torch.allclose(wrong, dpo_loss(*exercises.PAIRS, beta))
    for tau in exercises.IPO_TAUS:
        for wrong, _ in exercises.ipo_loss_mistakes(*exercises.PAIRS, tau).values():
            assert not torch.allclose(wrong, ipo_loss(*exercises.PAIRS, tau))
    for beta, gamma in exercises.SIMPO_SETTINGS:
        case = (*exercises.PAIRS[:2], *exercises.LENGTHS, beta, gamma)
        for wrong, _ in exercises.simpo_loss_mistakes(*case).values():
            assert not torch.allclose(wrong, simpo_loss(*case))


def test_a_batch_mean_gets_its_own_hint(capsys):
    assert exercises.check_dpo_loss(lambda *args: correct_dpo(*args).mean()) is False
    assert "without .mean()" in capsys.readouterr().out
    assert exercises.check_ipo_loss(lambda *args: correct_ipo(*args) + 1.0) is False
    assert "compare with" in capsys.readouterr().out


def test_preference_checkers_name_a_wrong_shape(capsys):
    assert exercises.check_dpo_loss(lambda *args: dpo_loss(*args).unsqueeze(0)) is False
    assert "shape (1, 7)" in capsys.readouterr().out
    assert exercises.check_optimal_policy(lambda p, r, b: correct_optimum(p, r, b).unsqueeze(0)) is False
    assert "shape (1, 4)" in capsys.readouterr().out


def test_optimal_policy_rewards_the_stable_form(capsys):
    # at the smallest β, exp(r/β) overflows: the normalised product fails where the softmax form passes
    def naive(ref_probs, rewards, beta):
        weights = ref_probs * torch.exp(rewards / beta)
        return weights / weights.sum()

    assert exercises.check_optimal_policy(naive) is False
    assert "overflowed" in capsys.readouterr().out
    assert exercises.check_optimal_policy(correct_optimum) is True


def test_dpo_loss_names_log_of_sigmoid_underflow(capsys):
    # log(sigmoid(β h)) is right in exact arithmetic but −inf at β h = −1000 in float64; logsigmoid is not
    def log_of_sigmoid(chosen, rejected, ref_chosen, ref_rejected, beta):
        return -torch.log(torch.sigmoid(beta * ((chosen - ref_chosen) - (rejected - ref_rejected))))

    assert exercises.check_dpo_loss(log_of_sigmoid) is False
    out = capsys.readouterr().out
    assert "underflows" in out and "β·h = -1000" in out and "logsigmoid" in out
    assert exercises.check_dpo_loss(correct_dpo) is True


def test_dpo_loss_names_swapped_reference_arguments(capsys):
    # ref_chosen and ref_rejected passed the wrong way round: a student's common slip, named as such
    def swapped(chosen, rejected, ref_chosen, ref_rejected, beta):
        return dpo_loss(chosen, rejected, ref_rejected, ref_chosen, beta)

    assert exercises.check_dpo_loss(swapped) is False
    assert "ref_chosen and ref_rejected are swapped" in capsys.readouterr().out


def test_dpo_checker_catches_a_loss_without_a_gradient(capsys):
    detached = lambda *args: correct_dpo(*args).detach()  # noqa: E731
    through_numpy = lambda *args: torch.tensor(correct_dpo(*args).detach().numpy())  # noqa: E731
    for answer in (detached, through_numpy):
        assert exercises.check_dpo_loss(answer) is False
        assert "no gradient" in capsys.readouterr().out
    assert exercises.check_dpo_loss(correct_dpo) is True


def test_optimum_checker_keeps_an_unreachable_response_at_zero(capsys):
    clamped = lambda p, r, b: torch.softmax(p.clamp_min(1e-12).log() + r / b, 0)  # noqa: E731
    epsilon = lambda p, r, b: torch.softmax((p + 1e-8).log() + r / b, 0)  # noqa: E731
    for answer in (clamped, epsilon):
        assert exercises.check_optimal_policy(answer) is False
        assert "never writes" in capsys.readouterr().out
    assert exercises.check_optimal_policy(correct_optimum) is True
