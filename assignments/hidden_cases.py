"""Hidden cases drawn per course: each answer function against the master's solution on seeded random inputs.

The book's checkers (``rlbook.exercises``) use fixed inputs that students also run at home. On top of them,
each function question's answer must agree with the master's solution on inputs drawn from the course's
seed (``grade.py --seed``), which differ from the checkers' and from one course to the next. A function that
passes the checkers but fails here (e.g. one special-cased to the public inputs) loses the question.

``CASES`` maps an answer's name to a function ``rng -> list of argument tuples``. For a loss that is
differentiated, ``GRADIENT_OF`` names the argument whose gradient must agree too. Shapes and values are
what the prompt states (float64 tensors, groups of G, masks of mixed lengths).
"""

from __future__ import annotations

import torch

DTYPE = torch.float64
TOLERANCE = dict(rtol=1e-5, atol=1e-7)
# The public checker's tolerance where it is looser: GRPO's advantages may divide by σ + ε (ε up to 1e-4).
TOLERANCES = {"group_advantages": dict(rtol=1e-3, atol=1e-3)}


def _normal(rng: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=rng, dtype=DTYPE)


def _int(rng: torch.Generator, low: int, high: int) -> int:
    return int(torch.randint(low, high + 1, (1,), generator=rng))


def _uniform(rng: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand(1, generator=rng, dtype=DTYPE))


def _log_probs(rng, *shape):
    return torch.log_softmax(_normal(rng, *shape), dim=-1)


def _mask(rng, rows, cols):
    lengths = torch.randint(1, cols + 1, (rows,), generator=rng)
    return (torch.arange(cols)[None, :] < lengths[:, None]).to(DTYPE)


def _k1(logp, ref_logp):
    return logp - ref_logp


def _k3(logp, ref_logp):
    log_r = ref_logp - logp
    return torch.expm1(log_r) - log_r


def _off_policy_tokens(rng):
    """(logp, old_logp, advantages, mask, eps_low) of a variant's per-token loss: ratios about e^{±1}, each
    response's advantage on all its tokens, no padding (what a loss returns on padding is not graded)."""
    b, t = _int(rng, 2, 5), _int(rng, 3, 9)
    old_logp = -2 * torch.rand(b, t, generator=rng, dtype=DTYPE)
    advantages = _normal(rng, b).unsqueeze(1).expand(b, t).clone()
    return (old_logp + 0.6 * _normal(rng, b, t), old_logp, advantages, torch.ones(b, t, dtype=DTYPE),
            _uniform(rng, 0.1, 0.3))


def _bandit(rng):
    k = _int(rng, 3, 6)
    n = _int(rng, 4, 12)
    return (_normal(rng, k), torch.randint(0, k, (n,), generator=rng), _normal(rng, n), _normal(rng, k))


def _preference(rng, last):
    b = _int(rng, 2, 6)
    return (*(_normal(rng, b) * 3 for _ in range(4)), last)


CASES = {
    "reinforce_loss": lambda rng: [_bandit(rng) for _ in range(4)],
    "optimal_baseline": lambda rng: [(_normal(rng, k), _normal(rng, k)) for k in (3, 5, 7)],
    "k3": lambda rng: [(_log_probs(rng, 3, 7), _log_probs(rng, 3, 7)) for _ in range(3)],
    "expected_gradient": lambda rng: [(_normal(rng, k), torch.softmax(_normal(rng, k), 0), estimator)
                                      for k in (4, 6) for estimator in (_k1, _k3)],
    "clipped_objective": lambda rng: [(_uniform(rng, 0.3, 1.8), _uniform(rng, -2, 2), _uniform(rng, 0.05, 0.3),
                                       _uniform(rng, 0.05, 0.4)) for _ in range(24)],
    "gae_advantages": lambda rng: [(_normal(rng, t), _normal(rng, t), _uniform(rng, 0.8, 1.0), _uniform(rng, 0, 1))
                                   for t in (1, 5, 9)],
    "critic_targets": lambda rng: [(_normal(rng, t), _normal(rng, t)) for t in (3, 8)],
    "clip_only_negative_loss": lambda rng: [_off_policy_tokens(rng) for _ in range(4)],
    "optimal_policy": lambda rng: [(torch.softmax(_normal(rng, k), 0), _normal(rng, k), _uniform(rng, 0.1, 2))
                                   for k in (3, 6)],
    "dpo_loss": lambda rng: [_preference(rng, _uniform(rng, 0.05, 1)) for _ in range(3)],
    "ipo_loss": lambda rng: [_preference(rng, _uniform(rng, 0.1, 1)) for _ in range(3)],
    "group_advantages": lambda rng: [(torch.randint(0, 2, (g * n,), generator=rng).to(DTYPE) * _uniform(rng, .5, 2), g)
                                     for g, n in ((4, 3), (6, 2), (8, 2))],
    "token_weights": lambda rng: [(_mask(rng, rows, cols), mode, cols)
                                  for rows, cols in ((3, 6), (5, 9))
                                  for mode in ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")],
    "clip_mask": lambda rng: [(torch.rand(20, generator=rng, dtype=DTYPE) * 2, _normal(rng, 20),
                               _uniform(rng, 0.1, 0.3), _uniform(rng, 0.1, 0.4)) for _ in range(3)],
    "pass_at_k": lambda rng: [(n, c, k) for n in (_int(rng, 5, 40) for _ in range(6))
                              for c in (_int(rng, 0, n),) for k in (1, _int(rng, 1, n))],
}
GRADIENT_OF = {"reinforce_loss": 0, "clip_only_negative_loss": 0}


def _value(result) -> torch.Tensor:
    """A result as a detached tensor: float64, or bool for a mask (the first element of a tuple, as GAE's)."""
    if isinstance(result, tuple) and result and isinstance(result[0], torch.Tensor):
        result = result[0]
    result = torch.as_tensor(result).detach()
    return result if result.dtype == torch.bool else result.to(DTYPE)


def _describe(args) -> str:
    shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) else (round(a, 3) if isinstance(a, float) else a)
              for a in args if not callable(a)]
    return ", ".join(str(s) for s in shapes)


def _gradient(fn, args, index):
    args = list(args)
    args[index] = args[index].clone().requires_grad_(True)
    out = fn(*args)
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return None
    (grad,) = torch.autograd.grad(out.sum(), args[index], allow_unused=True)
    return grad


def check(name: str, answer, reference, seed: int) -> str | None:
    """None when ``answer`` agrees with ``reference`` on the course's cases for ``name``; else what differs."""
    if name not in CASES:
        return None
    rng = torch.Generator().manual_seed(seed * 1_000_003 + sum(map(ord, name)))
    for args in CASES[name](rng):
        copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        want = _value(reference(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args]))
        got = _value(answer(*copies))
        where = f"on a hidden case (inputs {_describe(args)})"
        if got.shape != want.shape and got.numel() != want.numel():
            return f"{where} the result has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        got = got.reshape(want.shape)
        tolerance = TOLERANCES.get(name, TOLERANCE)
        if want.dtype == torch.bool:
            same = bool((got.to(torch.bool) == want).all())
        else:
            same = bool(torch.allclose(got, want, **tolerance, equal_nan=False)) and bool(torch.isfinite(got).all())
        if not same:
            return (f"{where} it differs from the expected result (tolerance rtol {tolerance['rtol']}, atol "
                    f"{tolerance['atol']}): the public checks pass, so look at cases they do not cover "
                    "(other sizes, ties, edge values)")
        if name in GRADIENT_OF:
            want_grad = _gradient(reference, args, GRADIENT_OF[name])
            got_grad = _gradient(answer, args, GRADIENT_OF[name])
            if got_grad is None or not torch.allclose(got_grad, want_grad, **TOLERANCE):
                return f"{where} its gradient differs from the expected one (is a constant not detached?)"
    return None
