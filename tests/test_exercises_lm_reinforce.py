"""The checker of lesson 01's language-model exercise: the reference passes, and each usual mistake in
the advantages, in the aggregation over tokens, or in both, is named."""

import pytest
import torch

from rlbook.advantages import group_advantages
from rlbook.exercises.lm_reinforce import check_lm_reinforce_loss, reference_lm_reinforce_loss


def _rloo(rewards, g):
    groups = rewards.view(-1, g)
    return (groups - (groups.sum(1, keepdim=True) - groups) / (g - 1)).reshape(-1)


def _run(capsys, fn):
    result = check_lm_reinforce_loss(fn)
    return result, capsys.readouterr().out


def test_the_reference_and_other_right_answers_pass(capsys):
    assert _run(capsys, reference_lm_reinforce_loss)[0] is True

    def written_out(logp, mask, rewards, g):         # per-token surrogate, masked sum per response, batch mean
        per_token = -_rloo(rewards, g).unsqueeze(1) * logp
        return (per_token * mask).sum(dim=1).mean()

    def in_float32_plus_a_constant(logp, mask, rewards, g):
        a = group_advantages(rewards, g, "rloo").float()
        return -(a.unsqueeze(1) * (logp.float() * mask.float())).sum(1).mean() + 3.0

    assert _run(capsys, written_out)[0] is True
    assert _run(capsys, in_float32_plus_a_constant)[0] is True
    assert _run(capsys, None)[0] is None


def _loss(advantage, aggregate):
    return lambda logp, mask, rewards, g: aggregate(-advantage(rewards, g).unsqueeze(1) * logp, mask)


def _grpo_bessel(eps):
    def advantage(r, g):
        groups = r.view(-1, g)
        return ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + eps)).reshape(-1)
    return advantage


RIGHT_A = _rloo
RIGHT_AGG = lambda terms, mask: (terms * mask).sum(1).mean()  # noqa: E731


@pytest.mark.parametrize("advantage, aggregate, words", [
    (lambda r, g: r, RIGHT_AGG, ["no baseline"]),
    (lambda r, g: r - r.view(-1, g).mean(1).repeat_interleave(g), RIGHT_AGG, ["*including* the sample"]),
    (lambda r, g: r - (r.sum() - r) / (r.numel() - 1), RIGHT_AGG, ["whole batch"]),
    (lambda r, g: r - r.mean(), RIGHT_AGG, ["whole batch, the sample included"]),
    (lambda r, g: -_rloo(r, g), RIGHT_AGG, ["sign is flipped"]),
    (lambda r, g: (r.view(g, -1) - (r.view(g, -1).sum(0) - r.view(g, -1)) / (g - 1)).flatten(), RIGHT_AGG,
     ["wrong way round", "view(-1, G)"]),                                   # view(G, -1), leave-one-out down a column
    (lambda r, g: (r.view(g, -1) - (r.view(g, -1).sum(1, keepdim=True) - r.view(g, -1)) / (r.numel() // g - 1)).flatten(),
     RIGHT_AGG, ["B/G consecutive samples"]),                               # view(G, -1), along a row
    (RIGHT_A, lambda t, m: ((t * m).sum(1) / m.sum(1)).mean(), ["own length", "length bias"]),
    (RIGHT_A, lambda t, m: (t * m).sum() / m.sum(), ["DAPO's token_mean"]),
    (RIGHT_A, lambda t, m: t.sum(1).mean(), ["padding tokens count"]),
    (RIGHT_A, lambda t, m: t.mean(), ["whole (B, T) grid"]),
    (RIGHT_A, lambda t, m: (t * m).mean(), ["padded width T"]),
    (RIGHT_A, lambda t, m: (t * m).sum(), ["instead of averaging"]),
    (lambda r, g: r - r.view(-1, g).mean(1).repeat_interleave(g), lambda t, m: ((t * m).sum(1) / m.sum(1)).mean(),
     ["*including* the sample", "own length"]),
    (_grpo_bessel(0.0), RIGHT_AGG, ["GRPO's", "Bessel's correction"]),          # the form most readers type
    (_grpo_bessel(1e-4), RIGHT_AGG, ["GRPO's", "Bessel's correction"]),         # TRL's ε
    (_grpo_bessel(0.0), lambda t, m: ((t * m).sum(1) / m.sum(1)).mean(), ["Bessel's correction", "own length"]),
    (RIGHT_A, lambda t, m: ((t * m).sum(1) / m.sum(1)).sum(), ["two mistakes", "own length", "instead of averaging"]),
    (RIGHT_A, lambda t, m: t.sum(), ["two mistakes", "padding tokens count", "instead of averaging"]),
    (RIGHT_A, lambda t, m: ((t * m).sum(1) / m.sum(1)).sum() / m.sum(), ["two mistakes", "own length", "DAPO"]),
    (RIGHT_A, lambda t, m: t.sum() / m.sum(), ["two mistakes", "padding tokens count", "DAPO"]),
    (lambda r, g: r, lambda t, m: ((t * m).sum(1) / m.sum(1)).sum(), ["no baseline", "two mistakes"]),
])
def test_each_mistake_is_named(capsys, advantage, aggregate, words):
    result, out = _run(capsys, _loss(advantage, aggregate))
    assert result is False and out.startswith("✗")
    assert all(word in out for word in words), out


@pytest.mark.parametrize("wrong, words", [
    (lambda logp, mask, rewards, g: torch.tensor(0.0), "carries no gradient"),
    (lambda logp, mask, rewards, g: -(logp * mask).sum(1), "one number"),
    (lambda logp, mask, rewards, g: 1 / 0, "ZeroDivisionError"),
])
def test_broken_answers_are_told_apart(capsys, wrong, words):
    result, out = _run(capsys, wrong)
    assert result is False and words in out


def test_flat_groups_skipped_pass_and_renormalised_are_named(capsys):
    """A loss that drops the flat groups (their A is 0) is right; one that then divides by the responses left
    is not, and only the batch with flat groups can tell (the reader's F9)."""

    def skip_flat(logp, mask, rewards, g, renormalise):
        keep = ~(rewards.view(-1, g) == rewards.view(-1, g)[:, :1]).all(dim=1).repeat_interleave(g)
        a = _rloo(rewards, g)
        total = -(a[keep].unsqueeze(1) * logp[keep] * mask[keep]).sum()
        return total / (int(keep.sum()) if renormalise else logp.shape[0])

    assert _run(capsys, lambda *args: skip_flat(*args, renormalise=False))[0] is True
    result, out = _run(capsys, lambda *args: skip_flat(*args, renormalise=True))
    assert result is False and "non-flat groups only" in out
