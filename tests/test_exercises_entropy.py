"""Lesson 16's exercise: the first-order entropy change of a natural policy-gradient step."""

import torch

from rlbook.exercises.entropy import check_entropy_change


def correct(logits, advantages, lr):
    log_p = torch.log_softmax(logits, 0)
    p = log_p.exp()
    return -lr * float((p * (log_p - (p * log_p).sum()) * (advantages - (p * advantages).sum())).sum())


def test_correct_answer_passes(capsys):
    assert check_entropy_change(correct) is True
    assert "✓" in capsys.readouterr().out


def test_typical_mistakes_are_named(capsys):
    def vanilla(z, a, lr):
        p = torch.softmax(z, 0)
        return correct(z, p * (a - (p * a).sum()), lr)

    def uncentred(z, a, lr):
        log_p = torch.log_softmax(z, 0)
        return -lr * float((log_p.exp() * log_p * a).sum())

    def uniform(z, a, lr):
        log_p = torch.log_softmax(z, 0)
        return -lr * float(((log_p - log_p.mean()) * (a - a.mean())).mean())

    cases = {"sign is flipped": lambda z, a, lr: -correct(z, a, lr), "vanilla step": vanilla,
             "not centred": uncentred, "uniform over actions": uniform,
             "η is missing": lambda z, a, lr: correct(z, a, lr) / lr}
    for phrase, fn in cases.items():
        assert check_entropy_change(fn) is False
        assert phrase in capsys.readouterr().out


def test_errors(capsys):
    assert check_entropy_change(lambda z, a, lr: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert check_entropy_change(lambda z, a, lr: z) is False


def test_the_exact_change_is_named_not_taken_for_the_prediction(capsys):
    from rlbook.entropy import entropy_change, policy_gradient_logit_step

    def exact(z, a, lr):
        return torch.tensor(entropy_change(z, policy_gradient_logit_step(z, a, lr, natural=True)))

    assert check_entropy_change(exact) is False
    assert "exact change" in capsys.readouterr().out


# The per-state covariance estimate, the lesson's exercise.

def _right_ways():
    def masked(logp, entropy, advantages, mask):
        return (logp + entropy) * advantages[:, None] * mask

    def where(logp, entropy, advantages, mask):
        return torch.where(mask > 0, (logp + entropy) * advantages.unsqueeze(1), torch.zeros_like(logp))

    def float32(logp, entropy, advantages, mask):
        return ((logp.float() + entropy.float()) * advantages.float()[:, None] * mask.float())

    def loop(logp, entropy, advantages, mask):
        out = torch.zeros_like(logp)
        for i in range(logp.shape[0]):
            for t in range(logp.shape[1]):
                if mask[i, t]:
                    out[i, t] = (logp[i, t] - (-entropy[i, t])) * advantages[i]
        return out

    return masked, where, float32, loop


def test_every_right_way_to_write_the_per_state_estimate_passes(capsys):
    from rlbook.exercises.entropy import check_state_covariance

    for fn in _right_ways():
        assert check_state_covariance(fn) is True, fn.__name__
    assert capsys.readouterr().out.count("✓") == 4


def test_the_per_state_checker_names_each_common_mistake(capsys):
    from rlbook.entropy import token_covariance
    from rlbook.exercises.entropy import check_state_covariance

    def pooled(logp, entropy, advantages, mask):  # Clip-Cov's centring on the batch means
        return token_covariance(logp, advantages, mask)

    def minus_entropy(logp, entropy, advantages, mask):
        return (logp - entropy) * advantages[:, None] * mask

    def uncentred(logp, entropy, advantages, mask):
        return logp * advantages[:, None] * mask

    def centred_advantage(logp, entropy, advantages, mask):
        per_token = advantages[:, None].expand_as(logp)
        return (logp + entropy) * (per_token - (per_token * mask).sum() / mask.sum()) * mask

    def completion_centred(logp, entropy, advantages, mask):  # the commonest way to "centre A"
        return (logp + entropy) * (advantages - advantages.mean())[:, None] * mask

    def padding(logp, entropy, advantages, mask):
        return (logp + entropy) * advantages[:, None]

    def half_pooled(logp, entropy, advantages, mask):  # log π on the batch mean, A left raw
        return (logp - (logp * mask).sum() / mask.sum()) * advantages[:, None] * mask

    def completion_centred_logp(logp, entropy, advantages, mask):  # "its own state" read as its completion
        return (logp - (logp * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True)) * advantages[:, None] * mask

    def sign(logp, entropy, advantages, mask):
        return -(logp + entropy) * advantages[:, None] * mask

    def vanilla(logp, entropy, advantages, mask):  # the π-weighted (vanilla-PG) form
        return logp.exp() * (logp + entropy) * advantages[:, None] * mask

    def recentred(logp, entropy, advantages, mask):  # per state, then centred on the batch again
        centred = logp + entropy
        return (centred - (centred * mask).sum() / mask.sum()) * advantages[:, None] * mask

    def unmasked_mean(logp, entropy, advantages, mask):  # .mean() counts the padding positions
        return (logp - logp.mean()) * advantages[:, None] * mask

    def standardised(logp, entropy, advantages, mask):
        return (logp + entropy) * ((advantages - advantages.mean()) / advantages.std())[:, None] * mask

    def standardised_population(logp, entropy, advantages, mask):
        return (logp + entropy) * ((advantages - advantages.mean()) / advantages.std(unbiased=False))[:, None] * mask

    for fn, words in ((unmasked_mean, "plain .mean()"), (standardised, "standardised A"),
                      (standardised_population, "standardised A"), (pooled, "pooled estimator Clip-Cov"), (minus_entropy, "log π − H"),
                      (uncentred, "not centred"), (centred_advantage, "centred A"),
                      (completion_centred, "mean over the completions"), (padding, "padding positions"),
                      (half_pooled, "half the pooled"), (completion_centred_logp, "completion's mean log-prob"),
                      (sign, "sign is flipped"), (vanilla, "vanilla-PG form"), (recentred, "again on its batch mean")):
        assert check_state_covariance(fn) is False
        assert words in capsys.readouterr().out, fn.__name__
    assert check_state_covariance(lambda *args: torch.zeros(2)) is False
    assert "one value per token" in capsys.readouterr().out
    assert check_state_covariance(None) is None
