"""Lesson 03's checkers accept the reference, name each typical mistake, and tolerate unanswered stubs."""

import pytest
import torch

from rlbook.advantages import gae
from rlbook.exercises import ppo as exercises


def correct_objective(r, a, eps_low, eps_high):
    return min(r * a, min(max(r, 1 - eps_low), 1 + eps_high) * a)


def test_clipped_objective_accepts_correct_answers(capsys):
    assert exercises.check_clipped_objective(correct_objective) is True
    as_tensor = lambda r, a, lo, hi: torch.minimum(torch.tensor(r * a), torch.tensor(r).clamp(1 - lo, 1 + hi) * a)  # noqa: E731
    assert exercises.check_clipped_objective(as_tensor) is True
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("name", list(exercises.clipped_objective_mistakes()))
def test_clipped_objective_names_each_mistake(name, capsys):
    wrong, hint = exercises.clipped_objective_mistakes()[name]
    assert exercises.check_clipped_objective(wrong) is False
    assert hint in capsys.readouterr().out


def test_clipped_objective_broken(capsys):
    assert exercises.check_clipped_objective(lambda r, a, lo, hi: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert exercises.check_clipped_objective(lambda r, a, lo, hi: 0.0) is False
    assert "expected" in capsys.readouterr().out
    with pytest.raises(ValueError, match="function"):
        exercises.check_clipped_objective(3.0)


def test_gae_checker(capsys):
    assert exercises.check_gae(lambda r, v, g, l: gae(r, v, g, l)[0]) is True
    assert exercises.check_gae(lambda r, v, g, l: gae(r, v, g, l)) is True  # (advantages, returns) also accepted
    rewards, values = exercises._gae_trajectories()[0]
    for name, (candidate, hint) in exercises._gae_mistakes(rewards, values, 0.9, 0.5).items():
        assert not torch.allclose(candidate, gae(rewards, values, 0.9, 0.5)[0]), name


def test_gae_checker_names_the_lambda_only_recursion(capsys):
    def lambda_only(rewards, values, gamma, lam):
        advantages, running = torch.zeros_like(rewards), 0.0
        for t in reversed(range(len(rewards))):
            following = values[t + 1] if t + 1 < len(values) else 0.0
            running = rewards[t] + gamma * following - values[t] + lam * running
            advantages[t] = running
        return advantages

    assert exercises.check_gae(lambda_only) is False
    assert "γλ, not λ" in capsys.readouterr().out
    assert exercises.check_gae(lambda r, v, g, l: torch.zeros(3)) is False
    assert "shape" in capsys.readouterr().out


@pytest.mark.parametrize("name", list(exercises._gae_mistakes(*exercises._gae_trajectories()[0], 0.9, 0.5)))
def test_gae_checker_names_each_mistake(name, capsys):
    def wrong(rewards, values, gamma, lam):
        return exercises._gae_mistakes(rewards, values, gamma, lam)[name][0]

    hint = exercises._gae_mistakes(*exercises._gae_trajectories()[0], 0.9, 0.5)[name][1]
    assert exercises.check_gae(wrong) is False
    assert hint in capsys.readouterr().out


def test_gae_checker_names_the_lambda_discounted_return_minus_value(capsys):
    def lambda_discounted(rewards, values, gamma, lam):   # "GAE is the λ-discounted return": a reader's slip
        advantages, running = torch.zeros_like(rewards), 0.0
        for t in reversed(range(len(rewards))):
            running = rewards[t] + gamma * lam * running
            advantages[t] = running - values[t]
        return advantages

    def gamma_lambda_bootstrap(rewards, values, gamma, lam):
        advantages, running = torch.zeros_like(rewards), 0.0
        for t in reversed(range(len(rewards))):
            following = values[t + 1] if t + 1 < len(values) else 0.0
            running = rewards[t] + gamma * lam * following - values[t] + gamma * lam * running
            advantages[t] = running
        return advantages

    assert exercises.check_gae(lambda_discounted) is False
    assert "γλ-discounted reward-to-go minus V_t" in capsys.readouterr().out
    assert exercises.check_gae(gamma_lambda_bootstrap) is False   # the values telescope away: the same slip
    assert "γλ-discounted reward-to-go minus V_t" in capsys.readouterr().out


def test_gae_checker_names_a_reader_s_rolled_bootstrap_and_forward_recursion(capsys):
    def rolled(rewards, values, gamma, lam):
        delta = rewards + gamma * torch.roll(values, -1) - values   # wraps V_0 round to the last token
        advantages, running = torch.zeros_like(rewards), 0.0
        for t in reversed(range(len(rewards))):
            running = delta[t] + gamma * lam * running
            advantages[t] = running
        return advantages

    def forwards(rewards, values, gamma, lam):
        following = torch.cat([values[1:], values.new_zeros(1)])
        delta = rewards + gamma * following - values
        advantages, running = torch.zeros_like(rewards), 0.0
        for t in range(len(rewards)):
            running = delta[t] + gamma * lam * running
            advantages[t] = running
        return advantages

    def whitened_float32(rewards, values, gamma, lam):
        advantages = gae(rewards.float(), values.float(), gamma, lam)[0]
        return (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    assert exercises.check_gae(rolled) is False
    assert "V(s_{T+1}) = 0" in capsys.readouterr().out
    assert exercises.check_gae(forwards) is False
    assert "runs forwards" in capsys.readouterr().out
    assert exercises.check_gae(whitened_float32) is False
    assert "whitened" in capsys.readouterr().out
    assert exercises.check_gae(lambda r, v, g, l: gae(r, v, g, l)[1]) is False
    assert "λ-returns" in capsys.readouterr().out


# --- a variant of the reader's own: the "clip only negative" surrogate, registered -----------------
def _capture(capsys, checker, fn):
    result = checker(fn)
    return result, capsys.readouterr().out


def _clip_only_negative(logp, old_logp, advantages, mask, eps_low):
    ratio = torch.exp(logp - old_logp)
    return -torch.minimum(ratio * advantages, ratio.clamp(min=1 - eps_low) * advantages)


def _ratio(logp, old_logp):
    return torch.exp(logp - old_logp)


def test_clip_only_negative_reference_passes_and_leaves_no_variant_behind(capsys):
    from rlbook.exercises.ppo import check_clip_only_negative_loss
    from rlbook.losses import variant_names

    before = variant_names()
    result, out = _capture(capsys, check_clip_only_negative_loss, _clip_only_negative)
    assert result is True and out.startswith("✓") and variant_names() == before


@pytest.mark.parametrize("wrong, words", [
    (lambda logp, old_logp, advantages, mask, eps_low: -_clip_only_negative(logp, old_logp, advantages, mask, eps_low),
     "the sign is flipped"),
    (lambda logp, old_logp, advantages, mask, eps_low: -_ratio(logp, old_logp) * advantages, "you forgot the clip"),
    (lambda logp, old_logp, advantages, mask, eps_low: -torch.minimum(
        _ratio(logp, old_logp) * advantages, _ratio(logp, old_logp).clamp(1 - eps_low, 1 + eps_low) * advantages),
     "you clipped the upper side too"),
    (lambda logp, old_logp, advantages, mask, eps_low: -advantages * logp, "you used log π"),
    (lambda logp, old_logp, advantages, mask, eps_low: _clip_only_negative(old_logp, logp, advantages, mask, eps_low),
     "the ratio is upside down"),
    (lambda logp, old_logp, advantages, mask, eps_low: -_ratio(logp, old_logp).clamp(min=1 - eps_low) * advantages,
     "the min is missing"),
    (lambda logp, old_logp, advantages, mask, eps_low: _clip_only_negative(logp, old_logp, advantages, mask, 0.2),
     "ignores the eps_low"),
    (lambda logp, old_logp, advantages, mask, eps_low: _clip_only_negative(logp.detach(), old_logp, advantages, mask,
                                                                           eps_low), "no gradient reaches logp"),
    (lambda logp, old_logp, advantages, mask: -advantages * logp, "does not accept the knob"),
    (lambda logp, advantages, old_logp, mask, eps_low: -advantages * logp, "in that order"),
    (lambda logp, old_logp, advantages, mask, eps_low: (-advantages * logp)[:, :2], "shape"),
])
def test_clip_only_negative_mistakes_are_named(capsys, wrong, words):
    from rlbook.exercises.ppo import check_clip_only_negative_loss

    result, out = _capture(capsys, check_clip_only_negative_loss, wrong)
    assert result is False and words in out, out
