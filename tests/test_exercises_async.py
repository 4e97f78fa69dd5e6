"""Tests of the checkers of lessons 14 (rlbook.exercises.throughput) and 15 (rlbook.exercises.async_rl):
a right answer passes, each typical mistake is named, an unattempted exercise is reported as such."""

from __future__ import annotations

import torch

from rlbook.exercises.async_rl import check_decoupled_loss
from rlbook.exercises.throughput import check_advantage_filter


def right_filter(rewards, group_size):
    groups = rewards.view(-1, group_size)
    return (groups.max(dim=1).values != groups.min(dim=1).values).repeat_interleave(group_size)


def group_centred(rewards, group_size):
    return rewards - rewards.view(-1, group_size).mean(dim=1).repeat_interleave(group_size)


def test_advantage_filter_checker(capsys):
    right_answers = {
        "max != min": right_filter,
        "std > a tolerance": lambda r, g: (r.view(-1, g).std(dim=1) > 1e-6).repeat_interleave(g),
        "|A| > tol": lambda r, g: group_centred(r, g).abs() > 1e-6,
        "in float64": lambda r, g: group_centred(r.double(), g) != 0,
        "a list": lambda r, g: [len(set(group.tolist())) > 1 for group in r.view(-1, g) for _ in range(g)],
        "variance > 1e-8": lambda r, g: (r.view(-1, g).var(dim=1) > 1e-8).repeat_interleave(g),
    }
    for name, right in right_answers.items():
        assert check_advantage_filter(right) is True, name
        assert "A ≠ 0" in capsys.readouterr().out
    cases = {
        "rewarded completions": lambda r, g: r > 0,
        "inverted": lambda r, g: ~right_filter(r, g),
        "nothing is dropped": lambda r, g: torch.ones_like(r, dtype=torch.bool),
        "one entry per group": lambda r, g: right_filter(r, g)[::g],
        "sum is 0 or G": lambda r, g: ((r.view(-1, g).sum(1) > 0) & (r.view(-1, g).sum(1) < g)).repeat_interleave(g),
        "only the positive advantages": lambda r, g: group_centred(r, g) > 0,
        "the batch's mean": lambda r, g: r - r.mean() != 0,
        "interleaved": lambda r, g: (r.view(g, -1).max(dim=0).values != r.view(g, -1).min(dim=0).values).repeat(g),
        "wrong shape": lambda r, g: (r.view(g, -1).max(dim=1).values
                                     != r.view(g, -1).min(dim=1).values).repeat_interleave(r.numel() // g),
        "A != 0 exactly on floats": lambda r, g: group_centred(r, g) != 0,
        ".repeat_interleave(G) repeats": lambda r, g: (r.view(-1, g).max(dim=1).values
                                                       != r.view(-1, g).min(dim=1).values).repeat(g),
        "only the all-wrong groups": lambda r, g: (r.view(-1, g) > 0).any(dim=1).repeat_interleave(g),
        "tolerance is too wide": lambda r, g: (r.view(-1, g).var(dim=1) > 1e-3).repeat_interleave(g),
        "tolerance is too wide ": lambda r, g: group_centred(r, g).abs() > 0.1,
        "up to 0.0167": lambda r, g: group_centred(r, g).abs() > 0.02,  # at the smallest |A| of the case
        "up to 0.0333": lambda r, g: group_centred(r, g).abs() > 0.05,
        "raised": lambda r, g: 1 / 0,
        "return a mask": lambda r, g: group_centred(r, g),
    }
    std_above_zero = lambda r, g: (r.view(-1, g).std(dim=1) > 0).repeat_interleave(g)  # noqa: E731
    if torch.tensor([.9] * 8).view(1, -1).std(dim=1).item() > 0:  # float32 rounding, as on the CPU kernels tested
        cases["you tested std > 0"] = std_above_zero
    else:  # a build whose kernel gives exactly 0: there the answer is right on every case
        assert check_advantage_filter(std_above_zero) is True
    for expected, wrong in cases.items():
        assert check_advantage_filter(wrong) is False, expected
        assert expected.strip() in capsys.readouterr().out, expected


def test_flat_extremes_checker(capsys):
    from rlbook.exercises.throughput import check_flat_extremes

    def bisect(g, low=0.5, high=1.0):
        for _ in range(50):
            middle = (low + high) / 2
            low, high = (middle, high) if middle ** g + (1 - middle) ** g < 0.5 else (low, middle)
        return low

    assert check_flat_extremes(lambda g: (0.5, 2 * 0.5 ** g, bisect(g))) is True
    assert "0.0078" in capsys.readouterr().out
    assert check_flat_extremes(lambda g: (0.5, 2 * 0.5 ** g, 1 - bisect(g))) is True  # the other root
    assert check_flat_extremes(lambda g: (0.5, 2 * 0.5 ** g, 0.5 ** (1 / g))) is True  # (1 − p)^G ≈ 0 there
    capsys.readouterr()
    cases = {
        "one kind of flat group": lambda g: (0.5, 0.5 ** g, bisect(g)),
        "is the pass rate": lambda g: (0.5, 0.5, bisect(g)),
        "minimum is in the middle": lambda g: (0.0, 2 * 0.5 ** g, bisect(g)),
        "P(flat) =": lambda g: (0.5, 2 * 0.5 ** g, 0.5),
        "three numbers": lambda g: (0.5, 2 * 0.5 ** g),
        "not a pass rate": lambda g: (0.5, 2 * 0.5 ** g, 2.0),
        "expected P(flat)": lambda g: (0.5, 0.01, bisect(g)),
    }
    for expected, wrong in cases.items():
        assert check_flat_extremes(wrong) is False, expected
        assert expected in capsys.readouterr().out, expected


def reference_dropped(counts, g, tol):
    k = counts.double()
    return float((((g - k) * (k <= tol * g + 1e-9)) + k * ((g - k) <= tol * g + 1e-9)).sum() / (k.numel() * g))


def grpo_default(counts, g, tol):
    """The slip of calling group_advantages with its default method, GRPO's σ-normalised one."""
    from rlbook.advantages import group_advantages

    rewards = torch.tensor([[1.0] * int(k) + [0.0] * (g - int(k)) for k in counts]).flatten()
    return float((group_advantages(rewards, g).abs() <= tol).float().mean())


def test_dropped_share_checker(capsys):
    from rlbook.exercises.throughput import check_dropped_share

    assert check_dropped_share(reference_dropped) is True
    assert "78%" in capsys.readouterr().out  # the question's batch: 50 of 64 completions

    def flat_only(counts, g, tol):
        return float(((counts == 0) | (counts == g)).double().mean())

    def minority(counts, g, tol):
        k = counts.double()
        return float((((g - k) * ((g - k) <= tol * g + 1e-9)) + k * (k <= tol * g + 1e-9)).sum() / (k.numel() * g))

    def strict(counts, g, tol):
        k = counts.double()
        return float((((g - k) * (k < tol * g - 1e-9)) + k * ((g - k) < tol * g - 1e-9)).sum() / (k.numel() * g))

    def groups_touched(counts, g, tol):
        k = counts.double()
        return float(((k <= tol * g + 1e-9) | ((g - k) <= tol * g + 1e-9)).double().mean())

    def without_flat(counts, g, tol):
        flat = (counts == 0) | (counts == g)
        return reference_dropped(counts, g, tol) - float(flat.double().sum() * g / (counts.numel() * g))

    cases = {
        "only the flat groups": flat_only,
        "the minority": minority,
        "the boundary": strict,
        "groups touched": groups_touched,
        "left out the flat groups": without_flat,
        "not a count": lambda c, g, tol: reference_dropped(c, g, tol) * c.numel() * g,
        "per group, on average": lambda c, g, tol: reference_dropped(c, g, tol) * g,
        "GRPO's advantages": grpo_default,
        "one number": lambda c, g, tol: [0.1, 0.2],
        "expected": lambda c, g, tol: 0.123,
        "raised": lambda c, g, tol: 1 / 0,
    }
    for expected, wrong in cases.items():
        assert check_dropped_share(wrong) is False, expected
        assert expected in capsys.readouterr().out, expected


def decoupled(logp, prox, behaviour, advantages, eps):
    u = torch.exp(logp - prox)
    weight = torch.exp(prox - behaviour)
    return -weight * torch.minimum(u * advantages, u.clamp(1 - eps, 1 + eps) * advantages)


def test_decoupled_loss_checker(capsys):
    assert check_decoupled_loss(decoupled) is True
    assert "match" in capsys.readouterr().out

    def naive(logp, prox, behaviour, advantages, eps):
        r = torch.exp(logp - behaviour)
        return -torch.minimum(r * advantages, r.clamp(1 - eps, 1 + eps) * advantages)

    def detached_ratio(logp, prox, behaviour, advantages, eps):  # right values, wrong gradient
        u = torch.exp(logp - prox)
        weight = torch.exp(prox - behaviour)
        return -weight * torch.minimum(u.detach() * advantages, u.clamp(1 - eps, 1 + eps) * advantages)

    def weighted(ratio_of, combine):
        def loss(logp, prox, behaviour, advantages, eps):
            ratio = torch.exp(logp - ratio_of(prox, behaviour))
            return -torch.exp(prox - behaviour) * combine(ratio, ratio.clamp(1 - eps, 1 + eps), advantages)
        return loss

    on_prox, on_behaviour = (lambda p, b: p), (lambda p, b: b)
    cases = {
        "naive objective": naive,
        "picks the wrong branch": weighted(on_prox, lambda x, c, a: a * torch.minimum(x, c)),
        "there is no clip": weighted(on_prox, lambda x, c, a: x * a),
        "only the clipped term": weighted(on_prox, lambda x, c, a: c * a),
        "max instead of min": weighted(on_prox, lambda x, c, a: torch.maximum(x * a, c * a)),
        "around the stale behaviour policy: clip u": weighted(on_behaviour, lambda x, c, a: torch.minimum(x * a, c * a)),
        "both of its terms": lambda lp, p, b, a, e: -torch.minimum(torch.exp(lp - p) * a, torch.exp(p - b)
                                                                   * torch.exp(lp - p).clamp(1 - e, 1 + e) * a),
        "not a reduction": lambda *args: decoupled(*args).mean(),
        "weight sg[π_prox/π_behav] is missing": lambda lp, p, b, a, e: decoupled(lp, p, p, a, e),
        "inverted": lambda lp, p, b, a, e: decoupled(lp, p, b, a, e) * torch.exp(2 * (b - p)),
        "sign is flipped": lambda *args: -decoupled(*args),
        "no gradient": lambda *args: decoupled(*args).detach(),
        "gradient is not": detached_ratio,
        "raised": lambda *args: 1 / 0,
    }
    for expected, wrong in cases.items():
        assert check_decoupled_loss(wrong) is False
        assert expected in capsys.readouterr().out, expected
