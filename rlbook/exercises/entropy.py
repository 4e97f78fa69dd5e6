"""Checkers for lesson 16 (entropy collapse).

``check_state_covariance`` (the lesson's exercise): the per-state covariance estimate of each token of a
batch, (log π(y_t|s_t) + H(s_t))·A_t with padding 0 (``rlbook.entropy.state_covariance``; Cui et al.
2025, arXiv:2505.22617, §3), on small batches with padding and advantages whose mean is not 0, naming
the likely mistake: the pooled estimator Clip-Cov uses (centred on the batch's means, ``token_covariance``),
the same with padding in the means, log π − H in place of log π + H (the sign of E_π[log π] = −H),
no centring, A centred as well (on its token-weighted or its per-completion mean), the vanilla weighting π(y_t)·(log π + H)·A,
log π + H centred again on its batch mean, padding left non-zero, the sign flipped.

``check_entropy_change`` (the lesson's earlier, one-line exercise; a warm-up): the first-order entropy change of a
natural policy-gradient step on a softmax.

The reader writes ``my_entropy_change(logits, advantages, lr) -> float``: for π = softmax(z) and the
natural step Δz = η·(A − E_π[A]), the first-order change of the entropy,
ΔH ≈ −η·Cov_{a∼π}(log π(a), A(a)) (Cui et al. 2025, arXiv:2505.22617, §3). The checker
compares it with ``rlbook.entropy.predicted_entropy_change`` of
``rlbook.entropy.policy_gradient_logit_step(..., natural=True)`` on a few policies (with advantages
whose mean under π is not 0) and, when it differs, names the likely mistake: the sign, the vanilla
weighting π·A, no centring, a uniform average over actions instead of one under π, η left out, or
the exact change H(softmax(z + Δz)) − H(softmax(z)) in place of its first-order prediction.
"""

from __future__ import annotations

import torch

from rlbook.entropy import (entropy_change, policy_gradient_logit_step, predicted_entropy_change, state_covariance,
                            token_covariance)
from rlbook.exercises.framework import FunctionExercise

__all__ = ["CASES", "reference_entropy_change", "check_entropy_change", "STATE_CASES", "check_state_covariance"]

# (logits, advantages, lr); the advantages' mean under π is not 0, so forgetting to centre shows.
CASES = (
    ((2.0, 0.5, 0.0, -1.0), (1.0, 0.0, 0.0, 0.0), 0.5),
    ((0.0, 1.0, -0.5, 0.3, 2.0), (0.0, 0.0, 1.0, 1.0, 0.0), 0.1),
    ((1.5, -0.5, 0.2), (2.0, -1.0, 0.5), 1.0),
)
TOLERANCE = 1e-6


def reference_entropy_change(logits, advantages, lr: float) -> float:
    """−Cov_π(log π, Δz) for the natural step Δz = η·(A − E_π[A]), from the library."""
    delta = policy_gradient_logit_step(logits, advantages, lr, natural=True)
    return predicted_entropy_change(logits, delta)


def _mistakes(logits, advantages, lr: float) -> dict[str, tuple[float, str]]:
    z = torch.as_tensor(logits, dtype=torch.float64)
    a = torch.as_tensor(advantages, dtype=torch.float64)
    log_p = torch.log_softmax(z, 0)
    p = log_p.exp()
    right = reference_entropy_change(logits, advantages, lr)
    vanilla = predicted_entropy_change(logits, policy_gradient_logit_step(logits, advantages, lr))
    uniform = -lr * float(((log_p - log_p.mean()) * (a - a.mean())).mean())
    exact = entropy_change(logits, policy_gradient_logit_step(logits, advantages, lr, natural=True))
    return {
        "sign": (-right, "the sign is flipped: ΔH ≈ −η·Cov(log π, A); rewarding a likely action lowers the entropy"),
        "vanilla": (vanilla, "that is the vanilla step Δz = η·π·A; the natural step moves each logit by η·A itself"),
        "uncentred": (-lr * float((p * log_p * a).sum()), "not centred: a covariance subtracts the means "
                                                           "(E_π[log π] = −H and E_π[A]) before taking E_π[·]"),
        "uniform": (uniform, "the means and the average are uniform over actions; they are expectations under π"),
        "no_lr": (right / lr, "η is missing: the change is proportional to the step size"),
        "exact": (exact, f"that is the exact change H(softmax(z + Δz)) − H(softmax(z)) = {exact:.6f}; the "
                         f"exercise asks for its first-order prediction −η·Cov_π(log π, A) = {right:.6f}, "
                         "which differs from it at order η²"),
    }


def _cases():
    return [(torch.tensor(logits, dtype=torch.float64), torch.tensor(advantages, dtype=torch.float64), lr)
            for logits, advantages, lr in CASES]


def _where(z, a, lr) -> str:
    return f"logits={tuple(z.tolist())}, advantages={tuple(a.tolist())}, lr={lr}"


check_entropy_change = FunctionExercise(
    "check_entropy_change",
    what="entropy-change function",
    cases=_cases,
    reference=reference_entropy_change,
    mistakes=_mistakes,
    label=_where,
    checks=(lambda result, reference, *case: (f"return one number, got shape {tuple(result.shape)}"
                                              if result.numel() != 1 else None),),
    close=lambda result, expected: abs(float(result) - float(expected)) < TOLERANCE,
    wrong=lambda *case: f"({_where(*case)}) ",
    otherwise=lambda result, reference, *case: (f"{_where(*case)}: expected {float(reference):.6f}, "
                                                f"got {float(result):.6f}"),
    success=f"matches −η·Cov_π(log π, A) on {len(CASES)} policies",
    doc="""Check ``fn(logits, advantages, lr) -> float`` (1-D float64 tensors and a float) on ``CASES``.

    Prints a verdict naming the likely mistake; returns True / False, or None when ``fn`` is None
    or raises ``NotImplementedError`` (not attempted yet).
    """)


# (logp, entropy, advantages, mask): three completions of up to four tokens, the last ones padded; the
# advantages' mean over the tokens is not 0 and the entropies differ, so each mistake shows.
STATE_CASES = (
    (((-0.05, -1.20, -0.01, -2.30), (-0.40, -0.02, 0.0, 0.0), (-0.90, -0.10, -0.03, 0.0)),
     ((0.30, 1.10, 0.05, 1.60), (0.90, 0.10, 0.0, 0.0), (1.20, 0.40, 0.15, 0.0)),
     (1.0, -0.5, 0.2),
     ((1, 1, 1, 1), (1, 1, 0, 0), (1, 1, 1, 0))),
    (((-0.70, -0.003, -1.60), (-0.02, -0.25, -0.60)),
     ((0.65, 0.02, 1.30), (0.08, 0.70, 0.95)),
     (-0.7, 1.3),
     ((1, 1, 1), (1, 1, 0))),
)


def _state_cases():
    return [tuple(torch.tensor(x, dtype=torch.float64) for x in case) for case in STATE_CASES]


def _state_mistakes(logp, entropy, advantages, mask) -> dict[str, tuple[torch.Tensor, str]]:
    per_token = advantages[:, None].expand_as(logp)
    everywhere = torch.ones_like(mask)
    count = mask.sum()
    mean_advantage = (per_token * mask).sum() / count
    return {
        "pooled": (token_covariance(logp, advantages, mask),
                   "that is the pooled estimator Clip-Cov and KL-Cov select by: (log π − batch mean)·(A − batch mean). "
                   "The law is per state: centre each token's log π on its own state's mean, E_π[log π(·|s_t)] = −H(s_t)"),
        "pooled_padding": (token_covariance(logp, advantages, everywhere) * mask,
                           "centred on batch means that count the padding too — and the law centres on each state's "
                           "own mean −H(s_t) anyway, not on a batch mean"),
        "half_pooled": ((logp - (logp * mask).sum() / count) * per_token * mask,
                        "you centred log π on the batch's mean log-prob and left A as given: that is half the pooled "
                        "estimator. The law centres each token on its own state's mean, E_π[log π(·|s_t)] = −H(s_t)"),
        "half_pooled_unmasked": ((logp - logp.mean()) * per_token * mask,
                                 "you centred log π on a plain .mean() over the whole (B, C) tensor, padding "
                                 "included, and left A as given. Even a masked batch mean would be wrong: the law "
                                 "centres each token on its own state's mean, E_π[log π(·|s_t)] = −H(s_t)"),
        **{name: ((logp + entropy) * ((advantages - advantages.mean()) / advantages.std(unbiased=unbiased))[:, None]
                  * mask,
                  "you standardised A, (A − mean)/std. The advantages are given already normalised by GRPO; "
                  "use them as they are, (log π + H)·A (a rescaled A rescales the covariance, and its mean "
                  "does not matter per state)")
           for name, unbiased in (("standardised", True), ("standardised_population", False))},
        "completion_centred": ((logp - ((logp * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True))) * per_token * mask,
                               "you centred log π on its completion's mean log-prob. A completion passes through many "
                               "states; \"its own state\" is the position s_t, whose mean log-prob is −H(s_t)"),
        "minus_entropy": ((logp - entropy) * per_token * mask,
                          "log π − H: the state's mean log-prob is E_π[log π] = −H, so the centred log-prob is log π + H"),
        "uncentred": (logp * per_token * mask,
                      "log π·A is not centred: subtract the state's mean log-prob −H(s_t), i.e. use (log π + H)·A"),
        "centred_advantage": ((logp + entropy) * (per_token - mean_advantage) * mask,
                              "you centred A on its batch mean as well. In expectation that changes nothing (E_π[log π + H] "
                              "= 0 at each state, so a constant in A drops out), but the exercise asks for A as given"),
        "completion_centred_advantage": ((logp + entropy) * (per_token - advantages.mean()) * mask,
                                         "you centred A on its mean over the completions, (A − mean(A)). In expectation "
                                         "that changes nothing (E_π[log π + H] = 0 at each state, so a constant in A "
                                         "drops out), but the exercise asks for A as given"),
        "vanilla": (logp.exp() * (logp + entropy) * per_token * mask,
                    "you weighted each token by π(y_t): that is the vanilla-PG form Cov(log π, π·A). The exercise asks "
                    "for the natural-PG estimate the controls are built on, (log π + H)·A with no π factor"),
        "recentred": ((logp + entropy - ((logp + entropy) * mask).sum() / count) * per_token * mask,
                      "you centred log π + H again on its batch mean. Each token is already centred on its own "
                      "state's mean (−H(s_t)); a second, batch-wide centring brings the between-state term back"),
        "padding": ((logp + entropy) * per_token,
                    "right on the completion tokens, but the padding positions (mask 0) must be 0"),
        "sign": (-(logp + entropy) * per_token * mask,
                 "the sign is flipped: the estimate is (log π + H)·A, positive for a likely token with A > 0"),
    }


def _batch(logp, entropy, advantages, mask) -> str:
    return f"{tuple(logp.shape[:1])[0]} completions × {logp.shape[1]} positions, advantages {tuple(advantages.tolist())}"


check_state_covariance = FunctionExercise(
    "check_state_covariance",
    what="per-state covariance estimate",
    cases=_state_cases,
    reference=state_covariance,
    mistakes=_state_mistakes,
    label=_batch,
    checks=(lambda result, reference, *case: (f"return one value per token, shape {tuple(reference.shape)}, got "
                                              f"{tuple(result.shape)}" if result.shape != reference.shape else None),),
    wrong=lambda *case: f"({_batch(*case)}) ",
    otherwise=lambda result, reference, *case: (f"{_batch(*case)}: expected {reference.tolist()}, "
                                                f"got {result.tolist()}"),
    success=f"matches (log π(y_t) + H(s_t))·A_t, padding 0, on {len(STATE_CASES)} batches",
    doc="""Check ``fn(logp, entropy, advantages, mask) -> (B, C) tensor`` on ``STATE_CASES``.

    ``logp`` (B, C): the sampled tokens' log-probs; ``entropy`` (B, C): the entropy of the full next-token
    distribution at each position; ``advantages`` (B,): one per completion; ``mask`` (B, C): 1 on completion
    tokens. Prints a verdict naming the likely mistake; returns True / False, or None when ``fn`` is None or
    raises ``NotImplementedError`` (not attempted yet).
    """)
