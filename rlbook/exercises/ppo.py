"""Checkers for the exercises of lesson 03 (PPO).

=================================  ====================================================  ==========
checker                            the reader writes                                     lesson
=================================  ====================================================  ==========
``check_clipped_objective``        PPO's clipped objective for one token                 03
``check_gae``                      GAE's advantages for one trajectory                   03
``check_clip_only_negative_loss``  a variant's per-token loss: PPO's clip on A < 0       03, 11
=================================  ====================================================  ==========

Like ``rlbook.exercises.pg_kl``: each checker runs the reader's function on fixed inputs, compares
with the library (``rlbook.losses.clipped_surrogate``, ``rlbook.advantages.gae``), and when they
differ tries the usual mistakes one by one and names the one the reader's answer matches. It prints
its verdict and returns True / False, or None when the exercise is not attempted yet (``None``, or
a function that raises ``NotImplementedError``).

``check_clip_only_negative_loss`` checks a variant of the reader's own: PPO's clip kept only where it acts on
A < 0 tokens, −min(r·A, max(r, 1 − ε_low)·A) per token (DAPO's clip-higher, Yu et al. 2025, arXiv:2503.14476,
§3.1, taken to ε_high = ∞), written as ``fn(logp, old_logp, advantages, mask, eps_low)``, the form
``rlbook.losses.register_policy_loss`` takes. It registers the function under a name of its own, compares
its values and gradient on the response tokens with ``clipped_surrogate`` at an ε_high no ratio reaches,
runs it through ``policy_loss``, and names the likely mistake: the sign, no clip at all, PPO's two-sided
clip, log π in place of the ratio, the ratio upside down, the min left out, ε_low ignored, a detached ratio.
"""

from __future__ import annotations

import itertools

import torch

from rlbook.advantages import gae
from rlbook.exercises.framework import (DTYPE, NOT_ATTEMPTED, FunctionExercise, _call, _close, _diagnose, _failed,
                                        _not_attempted, _one_number, _verdict, _within)
from rlbook.losses import clipped_surrogate, policy_loss, register_policy_loss, unregister_policy_loss

__all__ = ["check_clipped_objective", "check_gae", "clipped_objective_mistakes", "clip_only_negative_reference",
           "check_clip_only_negative_loss"]

# Ratios on both sides of both bounds, advantages of both signs, symmetric and asymmetric bounds; r = 4
# is past a dual clip's c = 3 (Ye et al. 2020), so an answer that adds one is caught.
RATIOS = (0.3, 0.75, 0.85, 1.0, 1.1, 1.25, 1.5, 2.5, 4.0)
ADVANTAGES = (1.5, -0.7)
BOUNDS = ((0.2, 0.2), (0.2, 0.28), (0.1, 0.3))
CLIP_CASES = list(itertools.product(RATIOS, ADVANTAGES, BOUNDS))


def _reference_objective(r: float, a: float, eps_low: float, eps_high: float) -> float:
    """The library's per-token objective min(r A, clip(r, 1 − ε_low, 1 + ε_high) A) (minus its loss)."""
    ratio, advantage = torch.tensor([r], dtype=DTYPE), torch.tensor([a], dtype=DTYPE)
    return -float(clipped_surrogate(ratio, advantage, eps_low=eps_low, eps_high=eps_high))


def _clip(x: float, low: float, high: float) -> float:
    return min(max(x, low), high)


def clipped_objective_mistakes() -> dict[str, tuple]:
    """The usual wrong versions of the one-token objective, each with the hint that names it.

    Maps a name to ``(fn(r, a, eps_low, eps_high), hint)``.
    """
    return {
        "max": (lambda r, a, lo, hi: max(r * a, _clip(r, 1 - lo, 1 + hi) * a),
                "you took the max of the two terms: PPO takes the MIN, the pessimistic one, so that moving "
                "r past the bound can never raise the objective (a max rewards the policy for moving further)."),
        "no_clip": (lambda r, a, lo, hi: r * a,
                    "there is no clipping: this is the plain importance-weighted surrogate r·A."),
        "clip_only": (lambda r, a, lo, hi: _clip(r, 1 - lo, 1 + hi) * a,
                      "you returned only the clipped term clip(r)·A: take the min with the unclipped r·A, "
                      "otherwise a token whose ratio went the WRONG way (r < 1 − ε for A > 0) loses its "
                      "gradient and cannot be pulled back."),
        "clipped_product": (lambda r, a, lo, hi: min(r * a, _clip(r * a, 1 - lo, 1 + hi)),
                            "you clipped the product r·A (or the advantage) instead of the ratio r: the "
                            "bounds 1 − ε and 1 + ε are on r = π_θ/π_old; A multiplies the clipped ratio."),
        "clipped_advantage": (lambda r, a, lo, hi: min(r * a, r * _clip(a, 1 - lo, 1 + hi)),
                              "you clipped the advantage A instead of the ratio r: the bounds are on "
                              "r = π_θ/π_old; A multiplies clip(r, 1 − ε_low, 1 + ε_high)."),
        "factored_advantage": (lambda r, a, lo, hi: min(r, _clip(r, 1 - lo, 1 + hi)) * a,
                               "you factored A out of the min, min(r, clip(r))·A: that is right for A > 0 only. "
                               "For A < 0 multiplying by A flips the order, so min(r, clip r)·A becomes the max "
                               "of the two products; keep the min over the products r·A and clip(r)·A."),
        "abs_advantage": (lambda r, a, lo, hi: min(r * abs(a), _clip(r, 1 - lo, 1 + hi) * abs(a)),
                          "you used |A|: the sign of the advantage matters (for A < 0 the objective falls as r "
                          "rises, and the clip binds at 1 − ε_low instead of 1 + ε_high)."),
        "symmetric_low": (lambda r, a, lo, hi: min(r * a, _clip(r, 1 - lo, 1 + lo) * a),
                          "your bounds are symmetric, 1 ± ε_low: the upper bound is 1 + ε_high (the two can "
                          "differ, as in DAPO's clip-higher 0.2 / 0.28)."),
        "symmetric_high": (lambda r, a, lo, hi: min(r * a, _clip(r, 1 - hi, 1 + hi) * a),
                           "your bounds are symmetric, 1 ± ε_high: the lower bound is 1 − ε_low."),
        "swapped_bounds": (lambda r, a, lo, hi: min(r * a, _clip(r, 1 - hi, 1 + lo) * a),
                           "ε_low and ε_high are swapped: the interval is [1 − ε_low, 1 + ε_high]."),
        "lower_bound_only": (lambda r, a, lo, hi: min(r * a, max(r, 1 - lo) * a),
                             "only the lower bound is there: clip(r, 1 − ε_low, 1 + ε_high) also caps r at "
                             "1 + ε_high, which is what stops an A > 0 token from being pushed further."),
        "upper_bound_only": (lambda r, a, lo, hi: min(r * a, min(r, 1 + hi) * a),
                             "only the upper bound is there: clip(r, 1 − ε_low, 1 + ε_high) also keeps r above "
                             "1 − ε_low, which is what stops an A < 0 token from being pushed further down."),
        "hard_coded_bounds": (lambda r, a, lo, hi: min(r * a, _clip(r, 0.8, 1.2) * a),
                              "your bounds are fixed at 0.8 and 1.2: use the arguments, clip(r, 1 − eps_low, "
                              "1 + eps_high); the checker also tries other ε."),
        "clipped_without_advantage": (lambda r, a, lo, hi: min(r * a, _clip(r, 1 - lo, 1 + hi)),
                                      "the clipped term lacks A: it is clip(r, 1 − ε_low, 1 + ε_high)·A, not "
                                      "clip(r, …) alone."),
        "dual_clip": (lambda r, a, lo, hi: (max(min(r * a, _clip(r, 1 - lo, 1 + hi) * a), 3.0 * a) if a < 0
                                            else min(r * a, _clip(r, 1 - lo, 1 + hi) * a)),
                      "you added a dual clip (a floor c·A for A < 0): the exercise asks for PPO's plain "
                      "clipped objective, with no floor, so at r = 4 and A < 0 it is r·A."),
        "loss_sign": (lambda r, a, lo, hi: -min(r * a, _clip(r, 1 - lo, 1 + hi) * a),
                      "you returned the loss (minus the objective): the exercise asks for the objective J, "
                      "which PPO maximises."),
    }


check_clipped_objective = FunctionExercise(
    "check_clipped_objective", what="clipped objective", cases=lambda: [_flat(case) for case in CLIP_CASES],
    reference=_reference_objective,
    mistakes=lambda r, a, lo, hi: {name: (wrong(r, a, lo, hi), hint)
                                   for name, (wrong, hint) in clipped_objective_mistakes().items()},
    checks=(_one_number("return one number for one token"),), close=_within(1e-6),
    # a mistake is told by its answers on all the cases: max and min agree wherever the clip is inactive
    together=lambda *case: "all", across=True,
    otherwise=lambda result, reference, r, a, lo, hi, wrong, of: (
        f"wrong on {wrong} of {of} cases, e.g. r={r}, A={a}, ε_low={lo}, ε_high={hi}: expected "
        f"{float(reference):.4f}, got {float(result):.4f}"),
    success=f"your clipped objective matches the library on all {len(CLIP_CASES)} cases (both signs of A, both "
            "bounds, asymmetric ε)",
    doc="""Check ``objective_fn(r, advantage, eps_low, eps_high) -> float``, PPO's objective for one token.

    J = min(r A, clip(r, 1 − ε_low, 1 + ε_high) A) (Schulman et al. 2017, arXiv:1707.06347, eq. 7,
    with DAPO's separate bounds), compared with ``−rlbook.losses.clipped_surrogate`` on
    ratios either side of both bounds, A of both signs, and symmetric and asymmetric bounds.
    """)


def _advantages_only(result):
    """The advantages, also when the reader returns (advantages, returns) as the library does."""
    return result[0] if isinstance(result, tuple) else result


def _flat(case) -> tuple[float, float, float, float]:
    r, a, (lo, hi) = case
    return r, a, lo, hi


# ----------------------------------------------------------------------------------------------
# GAE for one trajectory

GAE_SETTINGS = ((1.0, 0.95), (0.9, 0.5), (0.99, 0.0), (0.95, 1.0))


def _gae_trajectories():
    """Two fixed (rewards, values) trajectories of 7 tokens: small KL penalties, a final reward."""
    generator = torch.Generator().manual_seed(3)
    cases = []
    for final in (1.0, 0.0):
        rewards = -0.05 * torch.rand(7, dtype=DTYPE, generator=generator)
        rewards[-1] += final
        values = torch.rand(7, dtype=DTYPE, generator=generator)
        cases.append((rewards, values))
    return cases


def _gae_mistakes(rewards, values, gamma, lam):
    """Advantages of the usual wrong recursions, each with the hint that names the mistake.

    Besides the wrong weights, the missing bootstrap, γ dropped from the bootstrap and the TD errors
    alone: the γλ-discounted reward-to-go minus V, Σ_l (γλ)^l r_{t+l} − V_t, which γλ put on the
    bootstrap of δ also gives (the values telescope away; GAE, Schulman et al. 2015, arXiv:1506.02438,
    eq. 16, discounts the TD errors by γλ, not the rewards), a recursion run forwards (A_t from A_{t−1}),
    the right recursion stored reversed, the last token bootstrapped from a value that
    does not exist (``torch.roll`` wraps V_0 round; repeating V_{T−1}), the λ-returns A + V (the
    critic's target, eq. 16's ``returns``) handed back for the advantages, and advantages whitened
    over the trajectory, as the trainer later does over a batch.
    """
    def recursion(next_value_of, weight, *, forwards=False, discount=gamma):
        advantages, running = torch.zeros_like(rewards), 0.0
        order = range(len(rewards)) if forwards else reversed(range(len(rewards)))
        for t in order:
            delta = rewards[t] + discount * next_value_of(t) - values[t]
            running = delta + weight * running
            advantages[t] = running
        return advantages

    following = lambda t: values[t + 1] if t + 1 < len(values) else 0.0  # noqa: E731
    correct = recursion(following, gamma * lam)
    returns_to_go = torch.zeros_like(rewards)
    lambda_discounted = torch.zeros_like(rewards)   # Σ_l (γλ)^l r_{t+l}: "GAE = the λ-discounted return", misread
    running, running_gl = 0.0, 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        returns_to_go[t] = running
        running_gl = rewards[t] + gamma * lam * running_gl
        lambda_discounted[t] = running_gl
    return {
        "lambda_only": (recursion(following, lam),
                        "the recursion uses λ alone: the weight of the next advantage is γλ, not λ."),
        "gamma_only": (recursion(following, gamma),
                       "the recursion uses γ alone: that is λ = 1 (the Monte Carlo return minus V) whatever λ is; "
                       "the weight is γλ."),
        "no_bootstrap": (recursion(lambda t: 0.0, gamma * lam),
                         "δ_t is missing γ V_{t+1}: the TD error is r_t + γ V_{t+1} − V_t."),
        "no_gamma_in_delta": (recursion(following, gamma * lam, discount=1.0),
                              "δ_t is missing the γ on the bootstrap: δ_t = r_t + γ V_{t+1} − V_t (at γ = 1 the two "
                              "agree, which is why the γ < 1 cases catch it)."),
        # The γλ-discounted reward-to-go minus V is also what a γλ bootstrap in δ gives: with
        # δ_t = r_t + γλ V_{t+1} − V_t the values telescope away, leaving Σ_l (γλ)^l r_{t+l} − V_t.
        "lambda_discounted_return_minus_value": (
            lambda_discounted - values,
            "this is the γλ-discounted reward-to-go minus V_t, Σ_l (γλ)^l r_{t+l} − V_t (what you also get from "
            "γλ instead of γ on the bootstrap in δ, where the values telescope away): GAE discounts the TD errors "
            "δ_t = r_t + γ V_{t+1} − V_t by (γλ)^l, not the rewards, so the later values stay in (the two agree "
            "only at λ = 1)."),
        "td_errors_only": (recursion(following, 0.0),
                           "these are the one-step TD errors δ_t alone (λ = 0): add γλ A_{t+1}, running backwards "
                           "from the last token."),
        "returns": (returns_to_go,
                    "these are the discounted returns, not advantages: subtract the value V_t (λ = 1 gives "
                    "return − V_t)."),
        "reversed": (correct.flip(0),
                     "the advantages come out reversed: you ran the recursion from the last token backwards but "
                     "stored A_t at position T − 1 − t (appended, then forgot to reverse); store it at position t."),
        "forward": (recursion(following, gamma * lam, forwards=True),
                    "the recursion runs forwards, A_t = δ_t + γλ A_{t−1}: the advantage collects the TD errors "
                    "that come AFTER token t, so start at the last token and go backwards."),
        "same_value": (recursion(lambda t: values[t], gamma * lam),
                       "off by one in δ: the next state's value is V_{t+1} (values[t + 1]), not V_t."),
        "bootstrap_last": (recursion(lambda t: values[min(t + 1, len(values) - 1)], gamma * lam),
                           "the last step bootstraps from V_{T−1} repeated: the response ended after its last token, "
                           "so the value after it is V_T = 0 and the last δ is r_{T−1} − V_{T−1}."),
        "rolled": (recursion(lambda t: values[(t + 1) % len(values)], gamma * lam),
                   "the last step bootstraps from V_0 (torch.roll wraps the first value around to the end): the "
                   "response is over, so V(s_{T+1}) = 0 — append a zero instead of rolling."),
        "stored_early": (torch.cat([correct[1:], rewards.new_zeros(1)]),
                         "off by one: position t holds A_{t+1} — update the running sum with δ_t first, then "
                         "store it at t."),
        "skipped_last": (_skip_last(rewards, values, gamma, lam),
                         "the last token was skipped (a loop over range(T − 1)): A_{T−1} = δ_{T−1} = r_{T−1} − "
                         "V_{T−1}, and every earlier advantage includes it."),
        "negated": (-correct, "the sign is flipped: δ_t = r_t + γ V_{t+1} − V_t (V_t is subtracted)."),
        "lambda_returns": (correct + values,
                           "these are the λ-returns A_t + V_t — the critic's regression target — not the "
                           "advantages: return A_t, without adding V_t back."),
        "whitened": (_whitened(correct), WHITENED),
        "whitened_unbiased": (_whitened(correct, correction=1), WHITENED),
    }


WHITENED = ("you normalised (whitened) the advantages to mean 0, std 1: that is a later step of the trainer, over a "
            "whole batch; GAE itself returns the raw Σ (γλ)^l δ_{t+l}.")


def _skip_last(rewards, values, gamma, lam):
    """GAE with the loop stopped one token early (A_{T−1} left at 0)."""
    advantages, running = torch.zeros_like(rewards), 0.0
    for t in reversed(range(len(rewards) - 1)):
        running = rewards[t] + gamma * values[t + 1] - values[t] + gamma * lam * running
        advantages[t] = running
    return advantages


def _whitened(advantages, correction: int = 0):
    """(A − mean) / std over one trajectory, with the population (0) or sample (1) std."""
    return (advantages - advantages.mean()) / advantages.std(correction=correction)


def _gae_cases():
    return [(rewards, values, gamma, lam)
            for (rewards, values), (gamma, lam) in itertools.product(_gae_trajectories(), GAE_SETTINGS)]


def _one_advantage_per_token(result, reference, *case):
    if result.shape != reference.shape:
        return f"return one advantage per token, shape {tuple(reference.shape)}, got {tuple(result.shape)}"
    return None


check_gae = FunctionExercise(
    "check_gae", what="GAE", cases=_gae_cases, reference=lambda *case: gae(*case)[0], mistakes=_gae_mistakes,
    adapt=lambda gae_fn: lambda *args: _advantages_only(gae_fn(*args)), checks=(_one_advantage_per_token,),
    wrong=lambda rewards, values, gamma, lam: f"at γ={gamma}, λ={lam}: ",
    otherwise=lambda result, reference, rewards, values, gamma, lam: (
        f"at γ={gamma}, λ={lam}: expected {[round(v, 4) for v in reference.tolist()]}, "
        f"got {[round(v, 4) for v in result.double().tolist()]}"),
    success="your GAE matches rlbook.advantages.gae on every trajectory and (γ, λ)",
    doc="""Check ``gae_fn(rewards, values, gamma, lam) -> advantages`` for one (T,) trajectory that ended.

    A_t = δ_t + γλ A_{t+1}, δ_t = r_t + γ V_{t+1} − V_t, V_T = 0 (Schulman et al. 2015,
    arXiv:1506.02438, eq. 16), compared with ``rlbook.advantages.gae``.
    """)


# ----------------------------------------------------------------------------------------------
# A variant of the reader's own: PPO's clip on A < 0 tokens only, registered and run through policy_loss

NEGATIVE_CLIP_EPS = (0.2, 0.1)  # eps_low
CHECKER_VARIANT = "_checking_clip_only_negative"  # the name the checker registers the reader's function under


def clip_only_negative_reference(logp, old_logp, advantages, mask, eps_low: float) -> torch.Tensor:
    """−min(r·A, max(r, 1 − ε_low)·A): ``clipped_surrogate`` with an ε_high that no ratio here reaches."""
    ratio = torch.exp(logp - old_logp)
    never = float(ratio.detach().max()) + 1.0
    return clipped_surrogate(ratio, advantages, eps_low=eps_low, eps_high=never)


def _negative_clip_inputs(padded: bool) -> tuple[torch.Tensor, ...]:
    """(logp, old_logp, advantages, mask): 4 responses of 9 tokens, ratios over (0.4, 1.9), both signs of A."""
    generator = torch.Generator().manual_seed(11)
    ratio = torch.linspace(0.4, 1.9, 36, dtype=torch.float64)[torch.randperm(36, generator=generator)].view(4, 9)
    old_logp = -2 * torch.rand(4, 9, generator=generator, dtype=torch.float64)
    advantages = torch.tensor([1.3, -0.8, 0.6, -1.5], dtype=torch.float64).unsqueeze(1).expand(4, 9).clone()
    mask = torch.ones(4, 9, dtype=torch.float64)
    if padded:
        mask[1, 6:], mask[2, 4:] = 0, 0
    return ratio.log() + old_logp, old_logp, advantages, mask


def _wrong_negative_clips(logp, old_logp, advantages, eps_low: float) -> dict[str, tuple[torch.Tensor, str]]:
    """The usual wrong per-token losses, each with the hint that names it."""
    ratio = torch.exp(logp - old_logp)
    right = clip_only_negative_reference(logp, old_logp, advantages, None, eps_low)
    default = clip_only_negative_reference(logp, old_logp, advantages, None, 0.2) if eps_low != 0.2 else None
    return {
        "fixed_eps": (default, "the clip ignores the eps_low it is given (it uses 0.2): the knob's value comes "
                               "from the registry's defaults or the config"),
        "sign": (-right, "the sign is flipped: return the loss, minus the objective min(r·A, max(r, 1 − ε_low)·A) "
                         "(policy_loss minimises it)"),
        "no_clip": (-ratio * advantages, "you forgot the clip: an A < 0 token whose ratio fell below 1 − ε_low "
                                         "must lose its gradient (the loss is −(1 − ε_low)·A there, a constant)"),
        "ppo": (clipped_surrogate(ratio, advantages, eps_low=eps_low, eps_high=eps_low),
                "you clipped the upper side too: that is PPO's (and GRPO's) clip; this variant drops it, so an "
                "A > 0 token keeps its gradient however far its ratio rises"),
        "log_pi": (-advantages * logp, "you used log π: the surrogate multiplies A by the ratio r = "
                                       "exp(logp − old_logp) (−A·log π is REINFORCE)"),
        "inverted": (clip_only_negative_reference(old_logp, logp, advantages, None, eps_low),
                     "the ratio is upside down: r = π_θ/π_old = exp(logp − old_logp)"),
        "upper_side": (-torch.minimum(ratio * advantages, ratio.clamp(max=1 + eps_low) * advantages),
                       "the clip is on the wrong side: you capped r at 1 + ε (PPO's clip of A > 0 tokens, which "
                       "this variant drops); keep r from falling below 1 − ε_low: max(r, 1 − ε_low)"),
        "max_of_terms": (-torch.maximum(ratio * advantages, ratio.clamp(min=1 - eps_low) * advantages),
                         "you took the max of the two terms: the objective keeps the MIN, the pessimistic one, "
                         "min(r·A, max(r, 1 − ε_low)·A)"),
        "no_min": (-ratio.clamp(min=1 - eps_low) * advantages,
                   "the min is missing: −max(r, 1 − ε_low)·A alone also flattens A > 0 tokens whose ratio fell "
                   "below 1 − ε_low; min(r·A, max(r, 1 − ε_low)·A) keeps their (pessimistic) unclipped term"),
    }


def check_clip_only_negative_loss(fn) -> bool | None:
    """Check the per-token loss ``fn(logp, old_logp, advantages, mask, eps_low)`` of the "clip only negative"
    surrogate: its values and gradient on the response tokens, and the same loss through ``policy_loss``.

    Prints a verdict naming the likely mistake; returns True / False, or None when ``fn`` is None
    or raises ``NotImplementedError`` (not attempted yet).
    """
    if _not_attempted(fn, "per-token loss"):
        return None
    logp, old_logp, advantages, mask = _negative_clip_inputs(padded=False)
    _, error = _call(fn, logp, old_logp, advantages, mask, NEGATIVE_CLIP_EPS[0])
    if error == NOT_ATTEMPTED:
        return _failed(error)
    try:
        register_policy_loss(CHECKER_VARIANT, fn, defaults={"eps_low": 0.2}, aggregation="token_mean",
                             overwrite=True)
    except ValueError as error:
        return _verdict(False, "", f"register_policy_loss refuses it: {error}")
    try:
        for eps_low in NEGATIVE_CLIP_EPS:
            for padded in (False, True):
                verdict = _check_negative_clip_case(fn, eps_low, padded)
                if verdict is not True:
                    return verdict
    finally:
        unregister_policy_loss(CHECKER_VARIANT)
    return _verdict(True, f"matches clipped_surrogate with no upper clip, values and gradient, for ε_low in "
                          f"{NEGATIVE_CLIP_EPS}, and trains through policy_loss", "")


def _check_negative_clip_case(fn, eps_low: float, padded: bool) -> bool | None:
    logp, old_logp, advantages, mask = _negative_clip_inputs(padded)
    where = f"eps_low={eps_low}{', with padding' if padded else ''}: "
    logp = logp.clone().requires_grad_(True)
    result, error = _call(fn, logp, old_logp.clone(), advantages.clone(), mask.clone(), eps_low)
    if error:
        return _failed(error, where)
    if tuple(result.shape) != tuple(logp.shape):
        return _verdict(False, "", f"{where}return one loss per token, shape {tuple(logp.shape)}; got shape "
                                   f"{tuple(result.shape)}")
    tokens = mask > 0
    expected = clip_only_negative_reference(logp, old_logp, advantages, mask, eps_low)
    if not _close(result[tokens], expected[tokens]):
        wrong = {name: (candidate[tokens].detach(), hint)
                 for name, (candidate, hint) in _wrong_negative_clips(logp, old_logp, advantages, eps_low).items()
                 if candidate is not None}
        return _verdict(False, "", where + _diagnose(result[tokens], expected[tokens].detach(), wrong))
    if not result.requires_grad:
        return _verdict(False, "", f"{where}the values are right but no gradient reaches logp: compute the ratio "
                                   "from logp, not from a detached copy")
    (got,) = torch.autograd.grad((result * mask).sum(), logp, allow_unused=True)
    (want,) = torch.autograd.grad((expected * mask).sum(), logp)
    if got is None or not _close(got, want):
        return _verdict(False, "", f"{where}the values are right but the gradient is not: is the ratio (or a "
                                   "term of the min) detached?")
    loss, _ = policy_loss(logp, old_logp, advantages[:, 0], mask, variant=CHECKER_VARIANT, eps_low=eps_low)
    reference = (expected * mask).sum() / mask.sum()
    if not _close(loss, reference):
        return _verdict(False, "", f"{where}through policy_loss the loss is {loss.item():.6f}, expected "
                                   f"{reference.item():.6f}")
    return True
