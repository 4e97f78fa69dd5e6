"""The self-checking exercises of lessons 08 (group advantages) and 09 (RLOO) accept the right answer
and name the usual mistakes."""

import pytest
import torch

from rlbook.advantages import batch_normalize, group_advantages
from rlbook.exercises.baselines import check_rloo_advantages
from rlbook.exercises.grpo import check_group_advantages


def _grouped(fn):
    """fn(groups (n, G)) -> (n, G) as a reader's (rewards, G) -> (B,) function."""
    return lambda rewards, group_size: fn(rewards.view(-1, group_size)).reshape(-1)


def _centred(groups):
    return groups - groups.mean(1, keepdim=True)


def _flat(rewards, group_size):
    groups = rewards.view(-1, group_size)
    return (groups == groups[:, :1]).all(1).repeat_interleave(group_size)


def _interleaved_grpo(rewards, group_size):
    """A reader's slip: view(G, -1) and normalise along dim 0 (groups read as interleaved rows)."""
    columns = rewards.view(group_size, -1)
    std = columns.std(0, correction=0, keepdim=True)
    centred = columns - columns.mean(0, keepdim=True)
    return torch.where(std > 0, centred / std.clamp_min(1e-12), torch.zeros_like(columns)).reshape(-1)


@pytest.mark.parametrize("answer", [
    lambda r, g: group_advantages(r, g),
    _grouped(lambda x: _centred(x) / (x.std(1, correction=0, keepdim=True) + 1e-8)),
    _grouped(lambda x: _centred(x) / (x.std(1, correction=0, keepdim=True) + 1e-4)),
])
def test_group_advantages_accepts_right_answers(answer, capsys):
    assert check_group_advantages(answer) is True
    assert "match" in capsys.readouterr().out


@pytest.mark.parametrize("answer, phrase", [
    (_grouped(lambda x: _centred(x) / (x.std(1, keepdim=True) + 1e-8)), "Bessel"),
    (_grouped(lambda x: _centred(x) / x.std(1, correction=0, keepdim=True)), "zero-variance"),
    (_grouped(lambda x: torch.where(x.std(1, keepdim=True) > 0, _centred(x) / (x.std(1, correction=0, keepdim=True)
                                                                                 + 1e-8), 1.0)), "exactly 0"),
    (lambda r, g: batch_normalize(r), "whole batch"),
    (lambda r, g: (r - r.mean()) / r.std(), "whole batch"),
    (_grouped(_centred), "did not divide"),
    # groups read as interleaved rows: on the first batch this coincides with the whole-batch answer
    (lambda r, g: _interleaved_grpo(r, g), "`view(G, -1)`"),
    # the right rows, the wrong axis: μ and σ over dim 0 of view(-1, G)
    (_grouped(lambda x: (x - x.mean(0, keepdim=True)) / (x.std(0, correction=0, keepdim=True) + 1e-8)), "wrong axis"),
    # group mean, whole-batch σ: on the first batch it coincides with Bessel's σ
    (lambda r, g: torch.where(_flat(r, g), 0.0, _grouped(_centred)(r, g) / r.std(correction=0)), "whole batch's σ"),
    (lambda r, g: group_advantages(r, g, "rloo"), "RLOO"),
    (lambda r, g: -group_advantages(r, g), "sign"),
    (lambda r, g: torch.zeros(3), "one advantage per reward"),
    (lambda r, g: 1 / 0, "ZeroDivisionError"),
    # the batch's mean with each group's σ
    (lambda r, g: torch.where(_flat(r, g), 0.0, ((r.view(-1, g) - r.mean()) / (r.view(-1, g).std(1, correction=0, keepdim=True)
                                                                            + 1e-8)).reshape(-1)), "whole batch's mean"),
    # an ε that moves σ: σ + 1e-3, and √(var + 1e-2)
    (_grouped(lambda x: _centred(x) / (x.std(1, correction=0, keepdim=True) + 1e-3)), "ε is too large"),
    (_grouped(lambda x: _centred(x) / (x.var(1, correction=0, keepdim=True) + 1e-2).sqrt()), "ε is too large"),
])
def test_group_advantages_names_the_mistake(answer, phrase, capsys):
    assert check_group_advantages(answer) is False
    assert phrase in capsys.readouterr().out


@pytest.mark.parametrize("answer, phrase", [
    (lambda r, g: group_advantages(r, g, "rloo"), "match"),
    (lambda r, g: group_advantages(r, g, "dr_grpo"), "(G − 1)/G"),
    (_grouped(lambda x: x - (x.sum(1, keepdim=True) - x) / x.shape[1]), "divided the others' sum by G"),
    (lambda r, g: r - (r.sum() - r) / (len(r) - 1), "same prompt"),
    (lambda r, g: group_advantages(r, g), "GRPO"),
    (lambda r, g: group_advantages(r, g, "grpo", unbiased_std=True), "Bessel"),
    (lambda r, g: -group_advantages(r, g, "rloo"), "sign"),
    (lambda r, g: group_advantages(r.view(g, -1).T.reshape(-1), g, "rloo")[
        torch.arange(r.numel()).view(g, -1).T.reshape(-1).argsort()], "view(G, -1)"),
    (lambda r, g: (r.view(-1, g) - (r.view(-1, g).sum(0) - r.view(-1, g)) / (r.numel() // g - 1)).reshape(-1),
     "wrong axis"),
    # RLOO normalised by the group's σ (either σ), the baseline returned, G = 4 written into the code
    (lambda r, g: (group_advantages(r, g, "rloo").view(-1, g) / (r.view(-1, g).std(1, keepdim=True) + 1e-8))
     .reshape(-1), "divided RLOO's advantage by the group's σ"),
    (lambda r, g: (group_advantages(r, g, "rloo").view(-1, g) / (r.view(-1, g).std(1, correction=0, keepdim=True)
                                                                 + 1e-8)).reshape(-1), "divided RLOO's advantage"),
    (lambda r, g: ((r.view(-1, g).sum(1, keepdim=True) - r.view(-1, g)) / (g - 1)).reshape(-1), "returned the baseline"),
    (lambda r, g: group_advantages(r, 4, "rloo"), "groups of 4, but this batch has G = 2"),
    (lambda r, g: (r.view(-1, g) - r.view(-1, g).sum(1, keepdim=True) / (g - 1)).reshape(-1), "sample itself included"),
    (lambda r, g: r - r.mean(), "whole batch, the sample itself and the other prompts included"),
    # right numbers, but computed by editing the input in place: refused (the trainer reads the rewards again)
    (lambda r, g: r.sub_(((r.view(-1, g).sum(1, keepdim=True) - r.view(-1, g)) / (g - 1)).reshape(-1)), "in place"),
])
def test_rloo_checker(answer, phrase, capsys):
    assert check_rloo_advantages(answer) is (phrase == "match")
    assert phrase in capsys.readouterr().out


# --- lesson 08's second exercise: GRPO's loss, eq. 3 ---------------------------------------------------------
from rlbook.exercises.grpo import GRPO_LOSS_MISTAKES, check_grpo_loss  # noqa: E402


def _eq3(logp, old_logp, ref_logp, advantages, mask, eps, beta, *, eps_high=None, dual_c=None, kl="k3",
         inverted=False):
    """A reader's right answer, written from eq. 3 and eq. 4 without the library. The keywords write the slips
    the checker names: an ε_high of its own (DAPO's clip-higher), lesson 03's dual clip at ``dual_c`` where A < 0,
    the k2 estimator instead of k3, the ratio π_old/π_θ."""
    ratio = torch.exp(old_logp - logp) if inverted else torch.exp(logp - old_logp)
    a = advantages[:, None]
    surrogate = torch.min(ratio * a, ratio.clamp(1 - eps, 1 + (eps if eps_high is None else eps_high)) * a)
    if dual_c is not None:
        surrogate = torch.where(a < 0, torch.max(surrogate, dual_c * a), surrogate)
    if kl == "k2":
        penalty = 0.5 * (logp - ref_logp) ** 2
    else:
        penalty = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    return -(((surrogate - beta * penalty) * mask).sum(1) / mask.sum(1)).mean()


@pytest.mark.parametrize("answer", [
    _eq3,
    lambda *args: _eq3(*(a.float() if isinstance(a, torch.Tensor) else a for a in args)),  # in float32
    # the same loss through the library, as a reader may check their own
    lambda logp, old, ref, adv, mask, eps, beta: __import__("rlbook").losses.policy_loss(
        logp, old, adv, mask, variant="grpo", eps_low=eps, eps_high=eps, ref_logp=ref, beta=beta)[0],
])
def test_grpo_loss_accepts_right_answers(answer, capsys):
    assert check_grpo_loss(answer) is True
    assert "matches policy_loss" in capsys.readouterr().out


def _token_mean(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    """The most common slip: one mean over all the batch's tokens (DAPO's / PPO's average)."""
    ratio = torch.exp(logp - old_logp)
    a = advantages[:, None]
    surrogate = torch.min(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a)
    k3 = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    return -((surrogate - beta * k3) * mask).sum() / mask.sum()


def _no_clip(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    ratio = torch.exp(logp - old_logp)
    k3 = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    return -(((ratio * advantages[:, None] - beta * k3) * mask).sum(1) / mask.sum(1)).mean()


def _trl_weighted_kl(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    """TRL 1.16's default (use_bias_correction_kl=True): the KL weighted by the ratio."""
    ratio = torch.exp(logp - old_logp)
    a = advantages[:, None]
    surrogate = torch.min(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a)
    k3 = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    return -(((surrogate - beta * ratio * k3) * mask).sum(1) / mask.sum(1)).mean()


def _kl_unmasked(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    ratio = torch.exp(logp - old_logp)
    a = advantages[:, None]
    surrogate = torch.min(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a)
    k3 = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    return -((surrogate * mask).sum(1) / mask.sum(1) - beta * k3.mean(1)).mean()


def _log_ratio_clipped(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    log_ratio = logp - old_logp
    a = advantages[:, None]
    surrogate = torch.min(log_ratio.exp() * a, log_ratio.clamp(-eps, eps).exp() * a)
    k3 = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    return -(((surrogate - beta * k3) * mask).sum(1) / mask.sum(1)).mean()


def _numerator_unmasked(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    """The commonest padding slip: the right length |o_i| = mask.sum(1), but the numerator not masked."""
    ratio = torch.exp(logp - old_logp)
    a = advantages[:, None]
    surrogate = torch.min(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a)
    k3 = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    return -((surrogate - beta * k3).sum(1) / mask.sum(1)).mean()


def _k2(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    return _eq3(logp, old_logp, ref_logp, advantages, mask, eps, beta, kl="k2")


def _kl_rewarded(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    return _eq3(logp, old_logp, ref_logp, advantages, mask, eps, -beta)


def _summed_over_responses(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    """The missing 1/G: each response's token mean, then a sum over the responses."""
    return _eq3(logp, old_logp, ref_logp, advantages, mask, eps, beta) * logp.shape[0]


def _dual_clipped(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    """Lesson 03's dual clip carried over (c = 3): max(min(r·A, clip(r)·A), 3·A) where A < 0."""
    return _eq3(logp, old_logp, ref_logp, advantages, mask, eps, beta, dual_c=3)


def _clip_higher(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    """DAPO's asymmetric clip carried over (ε_high = 0.28)."""
    return _eq3(logp, old_logp, ref_logp, advantages, mask, eps, beta, eps_high=0.28)


def _inverted_ratio(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    return _eq3(logp, old_logp, ref_logp, advantages, mask, eps, beta, inverted=True)


@pytest.mark.parametrize("answer, phrase", [
    (_clip_higher, "DAPO's clip-higher"),
    (_inverted_ratio, "ratio is inverted"),
    (lambda logp, old, ref, adv, mask, eps, beta: _eq3(logp, old, ref, (adv - adv.mean()) / adv.std(), mask, eps,
                                                       beta), "normalised the advantages again"),
    (lambda logp, old, ref, adv, mask, eps, beta: _eq3(logp, old, ref, (adv - adv.mean()) / adv.std(unbiased=False),
                                                       mask, eps, beta), "normalised the advantages again"),
    (_token_mean, "all the batch's tokens at once"),
    (_no_clip, "there is no clip"),
    (_kl_rewarded, "wrong sign"),
    (_summed_over_responses, "summed over the responses"),
    (_dual_clipped, "dual clip"),
    (_trl_weighted_kl, "use_bias_correction_kl"),
    (_kl_unmasked, "padding included"),
    (_log_ratio_clipped, "clipped the log-ratio"),
    (lambda logp, old, ref, adv, mask, eps, beta: _eq3(logp, old, ref, adv, mask, eps, 0.0), "KL term is missing"),
    (lambda logp, old, ref, adv, mask, eps, beta: -_eq3(logp, old, ref, adv, mask, eps, beta), "return the loss −J"),
    (lambda logp, old, ref, adv, mask, eps, beta: _eq3(logp, old, ref, adv, torch.ones_like(mask), eps, beta),
     "one mean over the whole padded"),  # padding treated as tokens: per_token.mean() over the padded tensor
    (_numerator_unmasked, "the padding's values entered the sum"),
    (_k2, "(k2, lesson 02"),
    (lambda logp, old, ref, adv, mask, eps, beta: _eq3(logp.detach(), old, ref, adv, mask, eps, beta),
     "no gradient reaches logp"),
    (lambda logp, old, ref, adv, mask, eps, beta: _eq3(logp, old, ref, adv, mask, 0.2, beta), "uses 0.2"),
    (lambda *args: torch.zeros(3), "one number"),
    (lambda *args: 1 / 0, "ZeroDivisionError"),
])
def test_grpo_loss_names_the_mistake(answer, phrase, capsys):
    assert check_grpo_loss(answer) is False
    assert phrase in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(GRPO_LOSS_MISTAKES))
def test_every_known_grpo_loss_mistake_is_rejected_and_named_as_itself(name, capsys):
    wrong, hint = GRPO_LOSS_MISTAKES[name]
    assert check_grpo_loss(wrong) is False
    assert hint in capsys.readouterr().out


def test_grpo_loss_not_attempted(capsys):
    def stub(*args):
        raise NotImplementedError

    assert check_grpo_loss(stub) is None and check_grpo_loss(None) is None
    assert "Not attempted" in capsys.readouterr().out
