"""Checkers for the exercises of lessons 01 (policy gradient) and 02 (KL estimators).

Each ``check_*`` runs the reader's function on a few fixed random inputs, compares it with the
reference, and when it differs tries the usual mistakes one by one: if the reader's output
matches a mistake, the feedback names it. It prints its verdict and returns True / False, or
None when the exercise is not attempted yet (``None``, or a function still raising
``NotImplementedError``).

The plumbing they share with every lesson's checker is in ``rlbook.exercises.framework``.

===============================  ===============================================  ==========
checker                          the reader writes                                lesson
===============================  ===============================================  ==========
``check_reinforce_loss``         the REINFORCE loss with the value baseline       01
``check_optimal_baseline``       the variance-minimising constant baseline        01
``check_k3``                     Schulman's k3 per token                          02
``check_k3_straight_through``    k3's value with k2's gradient (verl's "k3+")     02
``check_expected_gradient``      E_{x~π}[∇k(x)] by exact enumeration              02
``check_kl_credit``              each token's credit R − β Σ_{t'≥t} k1_t' (§7)     02
===============================  ===============================================  ==========
"""

from __future__ import annotations

import torch

from rlbook.advantages import gae
from rlbook.exercises.framework import (DTYPE, FLOAT32_NOTE, FLOAT32_TOLERANCE, NOT_ATTEMPTED,  # noqa: F401
                                        TOLERANCE, FunctionExercise, _call, _close, _close_in_float32, _diagnose, _failed,
                                        _not_attempted, _verdict)
from rlbook.kl import k1, k2, k3, k3_straight_through, kl_in_reward
from rlbook.losses import reinforce_surrogate
from rlbook.toys import GaussianBandit, optimal_constant_baseline

__all__ = ["check_reinforce_loss", "check_optimal_baseline", "check_k3", "check_k3_straight_through",
           "check_expected_gradient", "check_kl_credit"]

# ----------------------------------------------------------------------------------------------
# Lesson 01: the REINFORCE loss with the value baseline


def _bandit_cases():
    """Three fixed (logits, arms, rewards, means) cases: K = 4 arms, N = 6 pulls."""
    generator = torch.Generator().manual_seed(2024)
    cases = []
    for _ in range(3):
        logits = torch.randn(4, dtype=DTYPE, generator=generator)
        arms = torch.randint(0, 4, (6,), generator=generator)
        means = 1.0 + torch.rand(4, dtype=DTYPE, generator=generator)
        rewards = means[arms] + 0.5 * torch.randn(6, dtype=DTYPE, generator=generator)
        cases.append((logits, arms, rewards, means))
    return cases


def _gradient_of_loss(loss_fn, x: torch.Tensor, *others, wrt: str):
    """``(∇_x loss_fn(x, *others), None)`` for a scalar loss, or ``(None, error message)``; ``wrt`` names x
    for the reader ("the logits")."""
    leaf = x.clone().requires_grad_(True)
    loss, error = _call(loss_fn, leaf, *others)
    if error:
        return None, error
    if loss.numel() != 1:
        return None, f"the loss must be one number (average over the batch), got shape {tuple(loss.shape)}"
    if not loss.requires_grad:
        return None, (f"the loss carries no gradient: compute it from {wrt} you are given with torch "
                      f"operations (no .item(), .detach() or numpy on them)")
    (gradient,) = torch.autograd.grad(loss.reshape(()), leaf, allow_unused=True)
    if gradient is None:
        return None, f"the loss does not depend on {wrt}"
    return gradient, None


def _loss_gradient(loss_fn, logits, arms, rewards, means):
    """∇_θ of ``loss_fn(θ, arms, rewards, means)`` at θ = ``logits``, or an error message."""
    return _gradient_of_loss(loss_fn, logits, arms, rewards, means, wrt="the logits")


def reference_reinforce_loss(logits, arms, rewards, means):
    """−(1/N) Σ_i sg[R_i − b(θ)] log π_θ(a_i), with b(θ) = Σ_k π_k μ_k (the exact value)."""
    logp = torch.log_softmax(logits, dim=-1)
    value = (logp.exp() * means).sum()
    return reinforce_surrogate(logp[arms], rewards - value).mean()


def _reinforce_mistakes(logits, arms, rewards, means):
    """The gradients of the usual wrong losses, each with the hint that names the mistake."""
    logp = lambda t: torch.log_softmax(t, dim=-1)  # noqa: E731
    value = lambda t: (logp(t).exp() * means).sum()  # noqa: E731
    whitened = lambda scale: (rewards - rewards.mean()) / scale  # noqa: E731  GRPO's normalisation, whole batch
    grpo_hint = ("you normalised the batch GRPO's way, {form}: two mistakes. The baseline is the batch mean "
                 "instead of the exact value b = Σ_k π_k μ_k, and the / σ rescales every advantage. "
                 "Use A = R − b, unscaled.")
    wrong_losses = {
        "undetached": (lambda t, *_: -((rewards - value(t)) * logp(t)[arms]).mean(),
                       "the baseline b(θ) = Σ π_k μ_k was not detached: it depends on θ, so without "
                       "`.detach()` the loss also pushes the baseline around (the gradient gains "
                       "+∇b · mean log π)."),
        "no_baseline": (lambda t, *_: -(rewards * logp(t)[arms]).mean(),
                        "no baseline was subtracted: the advantage should be R − b with b = Σ_k π_k μ_k."),
        "plus_baseline": (lambda t, *_: -((rewards + value(t).detach()) * logp(t)[arms]).mean(),
                          "the baseline was added, not subtracted: the advantage is R − b."),
        "sign": (lambda t, *_: ((rewards - value(t).detach()) * logp(t)[arms]).mean(),
                 "the sign is flipped: this loss is *minimised*, so it is −A · log π (gradient descent on "
                 "it must be gradient ascent on J)."),
        "sum": (lambda t, *_: -((rewards - value(t).detach()) * logp(t)[arms]).sum(),
                "the loss sums over the batch instead of averaging: divide by the number of pulls N."),
        "raw_logits": (lambda t, *_: -((rewards - value(t).detach()) * t[arms]).mean(),
                       "the logit θ_a was used instead of log π(a) = θ_a − logsumexp(θ): the softmax's "
                       "normaliser is missing (the score function is e_a − π, not e_a)."),
        "probabilities": (lambda t, *_: -((rewards - value(t).detach()) * logp(t).exp()[arms]).mean(),
                          "π(a) was used instead of log π(a): the log-derivative trick needs the log."),
        "batch_mean": (lambda t, *_: -((rewards - rewards.mean()) * logp(t)[arms]).mean(),
                       "you estimated b from the batch, as the mean of its rewards (GRPO's group mean). "
                       "The exercise asks for the exact value b = Σ_k π_k μ_k, computed from the logits "
                       "and the arms' means."),
        "leave_one_out": (lambda t, *_: -((rewards - (rewards.sum() - rewards) / (len(rewards) - 1))
                                          * logp(t)[arms]).mean(),
                          "you estimated b from the batch, as the mean of the other rewards (RLOO's "
                          "leave-one-out baseline). The exercise asks for the exact value b = Σ_k π_k μ_k, "
                          "computed from the logits and the arms' means."),
        "per_arm_mean": (lambda t, *_: -((rewards - means[arms]) * logp(t)[arms]).mean(),
                         "you subtracted each pulled arm's own mean μ_a. That baseline depends on the "
                         "sampled arm, so it is not a baseline: the estimate becomes biased (only the "
                         "noise R − μ_a is left). Subtract the same b = Σ_k π_k μ_k from every reward."),
        "std_normalised": (lambda t, *_: -((rewards - value(t).detach()) / rewards.std() * logp(t)[arms]).mean(),
                           "you divided the advantages by the rewards' standard deviation (GRPO's "
                           "normalisation). The exercise's REINFORCE uses A = R − b unscaled: drop the / σ."),
        "std_population": (lambda t, *_: -((rewards - value(t).detach()) / rewards.std(correction=0)
                                            * logp(t)[arms]).mean(),
                           "you divided the advantages by the rewards' population standard deviation (GRPO's "
                           "normalisation). The exercise's REINFORCE uses A = R − b unscaled: drop the / σ."),
        "arms_mean": (lambda t, *_: -((rewards - means.mean()) * logp(t)[arms]).mean(),
                      "you subtracted the unweighted mean of the arms' μ_k: the value weights each arm by the "
                      "policy, b = Σ_k π_k μ_k."),
        "undetached_and_sum": (lambda t, *_: -((rewards - value(t)) * logp(t)[arms]).sum(),
                               "two mistakes: the baseline b(θ) was not detached (add `.detach()`), and the loss "
                               "sums over the batch instead of averaging (divide by N)."),
        "sign_and_no_baseline": (lambda t, *_: (rewards * logp(t)[arms]).mean(),
                                 "two mistakes: the sign is flipped (the loss is −A · log π), and no baseline was "
                                 "subtracted (A = R − b with b = Σ_k π_k μ_k)."),
        "grpo": (lambda t, *_: -(whitened(rewards.std()) * logp(t)[arms]).mean(),
                 grpo_hint.format(form="(R − mean(R)) / std(R), torch's default std with Bessel's correction")),
        "grpo_eps": (lambda t, *_: -(whitened(rewards.std() + 1e-4) * logp(t)[arms]).mean(),
                     grpo_hint.format(form="(R − mean(R)) / (std(R) + ε)")),
        "grpo_population": (lambda t, *_: -(whitened(rewards.std(correction=0)) * logp(t)[arms]).mean(),
                            grpo_hint.format(form="(R − mean(R)) / σ with the population σ")),
        "pulled_means_mean": (lambda t, *_: -((rewards - means[arms].mean()) * logp(t)[arms]).mean(),
                              "you subtracted the mean of the pulled arms' μ_a, mean_i μ_{a_i}: an estimate of the "
                              "value from this batch's arms, not the value itself. Weight every arm's mean by the "
                              "policy instead: b = Σ_k π_k μ_k, from the logits."),
        "expected_rewards": (lambda t, *_: -((means[arms] - value(t).detach()) * logp(t)[arms]).mean(),
                             "you used each pulled arm's mean reward μ_{a_i} in place of the sampled reward R_i. "
                             "That is unbiased too, and less noisy (the reward's noise given the arm is averaged "
                             "out: a Rao–Blackwellised estimate), but it is not the estimator asked for: REINFORCE "
                             "weights by the sampled R_i, the only reward a language model's loop has."),
        "expected_rewards_no_baseline": (lambda t, *_: -(means[arms] * logp(t)[arms]).mean(),
                                         "two mistakes: each pulled arm's mean reward μ_{a_i} was used in place of "
                                         "the sampled reward R_i (unbiased, Rao–Blackwellised, but not the "
                                         "estimator asked for), and no baseline was subtracted (A = R − b)."),
        "half": (lambda t, *_: -0.5 * ((rewards - value(t).detach()) * logp(t)[arms]).mean(),
                 "your loss is half the reference (a stray factor ½): the loss is −(1/N) Σ (R_i − b) log π(a_i), "
                 "with no other constant."),
        "exact_objective": (lambda t, *_: -value(t),
                            "your loss is −J(θ) = −Σ_k π_k μ_k, the exact objective: its gradient is the "
                            "true ∇J, not the REINFORCE estimate from these pulls. Build the loss from "
                            "the sampled arms and rewards."),
    }
    mistakes = {}
    for name, (loss_fn, hint) in wrong_losses.items():
        gradient, _ = _loss_gradient(loss_fn, logits, arms, rewards, means)
        mistakes[name] = (gradient, hint)
    return mistakes


def check_reinforce_loss(loss_fn) -> bool | None:
    """Check ``loss_fn(logits, arms, rewards, means) -> scalar loss`` against the reference.

    The loss is −(1/N) Σ_i (R_i − b) log π_θ(a_i) with the value baseline b = Σ_k π_θ(k) μ_k,
    treated as a constant (detached). Its *gradient* is compared (a loss is only defined up to a
    constant), on three fixed batches.
    """
    if _not_attempted(loss_fn, "REINFORCE loss"):
        return None
    for logits, arms, rewards, means in _bandit_cases():
        gradient, error = _loss_gradient(loss_fn, logits, arms, rewards, means)
        if error:
            return _failed(error)
        reference, _ = _loss_gradient(reference_reinforce_loss, logits, arms, rewards, means)
        if not _close(gradient, reference):
            hint = _diagnose(gradient, reference, _reinforce_mistakes(logits, arms, rewards, means))
            return _verdict(False, "", f"the gradient of your loss is wrong — {hint}")
    return _verdict(True, "your REINFORCE loss has the reference gradient on every test batch", "")


# ----------------------------------------------------------------------------------------------
# Lesson 01: the variance-minimising constant baseline


def _baseline_cases():
    return [(logits, means) for logits, _, _, means in _bandit_cases()]


def _reference_baseline(logits, means) -> torch.Tensor:
    return torch.tensor(optimal_constant_baseline(GaussianBandit(tuple(means.tolist())), logits), dtype=DTYPE)


def _baseline_mistakes(logits, means) -> dict[str, tuple[torch.Tensor, str]]:
    probs = torch.softmax(logits, dim=-1)
    squared_scores = 1 - 2 * probs + (probs**2).sum()  # ‖e_a − π‖² for every arm a
    scores = squared_scores.sqrt()
    pulled_coordinate = (1 - probs) ** 2  # only the pulled arm's coordinate of ‖e_a − π‖²
    return {
        "value": ((probs * means).sum(),
                  "that is the value E[R] = Σ π_k μ_k. It is a good baseline but not the best "
                  "constant: weight each arm's mean by π_a ‖∇log π(a)‖², not by π_a alone."),
        "plain_mean": (means.mean(), "that is the plain average of the arms' means; weight each arm by "
                       "π_a ‖∇log π(a)‖² and normalise by the sum of the weights."),
        "unnormalised": ((probs * means * squared_scores).sum(),
                         "the numerator is right but it is not divided by E‖∇log π‖² = Σ π_a ‖e_a − π‖²."),
        "norm_not_squared": ((probs * means * scores).sum() / (probs * scores).sum(),
                             "each arm is weighted by ‖∇log π(a)‖ — it should be the *squared* norm "
                             "(the variance is a second moment)."),
        "unweighted_by_pi": ((means * squared_scores).sum() / squared_scores.sum(),
                             "each arm is weighted by ‖∇log π(a)‖² alone: the expectations are over the "
                             "*pulls*, so each arm also carries its probability π_a — "
                             "b* = Σ π_a μ_a ‖e_a − π‖² / Σ π_a ‖e_a − π‖²."),
        "pulled_coordinate": ((probs * means * pulled_coordinate).sum() / (probs * pulled_coordinate).sum(),
                              "each arm is weighted by (1 − π_a)², the pulled arm's coordinate of the "
                              "score alone. The score e_a − π has every coordinate: "
                              "‖e_a − π‖² = (1 − π_a)² + Σ_{k≠a} π_k²."),
    }


def _one_baseline(result, reference, logits, means) -> str | None:
    if result.numel() == means.numel():
        return (f"you returned {result.numel()} numbers, one per coordinate of the gradient: that is Peters & "
                "Schaal's per-coordinate baseline. The exercise asks for the single constant b* that minimises the "
                "total variance, summed over coordinates.")
    if result.numel() != 1:
        return f"return one number (the baseline), got shape {tuple(result.shape)}"
    return None


check_optimal_baseline = FunctionExercise(
    "check_optimal_baseline", what="optimal baseline", cases=_baseline_cases, reference=_reference_baseline,
    mistakes=_baseline_mistakes, checks=(_one_baseline,),
    prepare=lambda result, *case: result.reshape(()).to(DTYPE) if result.numel() == 1 else result,
    wrong="b* is wrong — ", success="your b* matches rlbook.toys.optimal_constant_baseline on every test bandit",
    doc="""Check ``baseline_fn(logits, means) -> b*``, the constant baseline of least variance.

    b* = Σ_a π_a μ_a ‖e_a − π‖² / Σ_a π_a ‖e_a − π‖²  (``rlbook.toys.optimal_constant_baseline``).
    """)


# ----------------------------------------------------------------------------------------------
# Lesson 02: k3


def _token_cases():
    """Per-token log-probs (B, T) = (3, 5) of a policy and a reference that differ noticeably."""
    generator = torch.Generator().manual_seed(7)
    logp = -3 * torch.rand(3, 5, dtype=DTYPE, generator=generator) - 0.05
    ref_logp = logp + 0.8 * torch.randn(3, 5, dtype=DTYPE, generator=generator)
    return logp, ref_logp


def _k3_mistakes(logp, ref_logp):
    log_r = ref_logp - logp
    return {
        "flipped_ratio": (k3(ref_logp, logp),
                          "you used r = π_θ/π_ref; Schulman's r is π_ref/π_θ, so log r = ref_logp − logp."),
        "k1": (k1(logp, ref_logp), "that is k1 = −log r; k3 adds the zero-mean control variate r − 1."),
        "k2": (k2(logp, ref_logp), "that is k2 = ½ (log r)²; k3 = (r − 1) − log r."),
        "no_minus_one": (torch.exp(log_r) - log_r,
                         "the −1 is missing: k3 = (r − 1) − log r; r − 1 has mean 0 under π_θ, r does not."),
        "negated": (-k3(logp, ref_logp), "the sign is flipped: k3 = (r − 1) − log r ≥ 0 for every r."),
        "log_sign": (torch.expm1(log_r) + log_r, "log r should be subtracted: k3 = (r − 1) − log r."),
    }


def _one_per_token(result, reference, *case):
    if result.shape != reference.shape:
        return (f"return one value per token, shape {tuple(reference.shape)} like logp; got {tuple(result.shape)} "
                "(average later, in the loss)")
    return None


check_k3 = FunctionExercise(
    "check_k3", what="k3", cases=lambda: [_token_cases()], reference=k3, mistakes=_k3_mistakes,
    checks=(_one_per_token,), wrong="your k3 is wrong — ", success="your k3 matches rlbook.kl.k3",
    float32_success=f"your k3 matches rlbook.kl.k3 {FLOAT32_NOTE}",
    doc="""Check ``k3_fn(logp, ref_logp)``: per-token (r − 1) − log r with r = π_ref / π_θ (``rlbook.kl.k3``).""")


# ----------------------------------------------------------------------------------------------
# Lesson 02: k3+, k3's value with k2's gradient


def _value_and_gradient(fn, logp, ref_logp, weights):
    """``fn(logp, ref_logp)`` and ∇_logp Σ weights · fn(…), or an error message."""
    leaf = logp.clone().requires_grad_(True)
    result, error = _call(fn, leaf, ref_logp.clone())
    if error:
        return None, None, error
    if result.shape != logp.shape:
        return None, None, (f"return one value per token, shape {tuple(logp.shape)} like logp; got "
                            f"{tuple(result.shape)} (average later, in the loss)")
    if not result.requires_grad:
        return result, None, ("your k3+ carries no gradient: the value may be detached, but the k2 part must "
                              "stay differentiable (detach only what should not be differentiated)")
    (gradient,) = torch.autograd.grad((weights * result).sum(), leaf, allow_unused=True)
    if gradient is None:
        return result, None, "your k3+ does not depend on logp through anything differentiable"
    return result, gradient, None


def check_k3_straight_through(fn) -> bool | None:
    """Check ``fn(logp, ref_logp)``: per token, k3's value with k2's gradient (``rlbook.kl.k3_straight_through``).

    The value is compared with k3, and the gradient of Σ w · fn(logp, ref_logp) with respect to
    ``logp`` (fixed random weights w) with k2's; each usual mistake is named from which of the
    two is wrong and what it matches instead.
    """
    if _not_attempted(fn, "k3+"):
        return None
    logp, ref_logp = _token_cases()
    weights = torch.rand(logp.shape, dtype=DTYPE, generator=torch.Generator().manual_seed(3)) + 0.5
    value, gradient, error = _value_and_gradient(fn, logp, ref_logp, weights)
    if error and value is None:
        return _failed(error)
    gradients = {}
    for name, estimator in (("k1", k1), ("k2", k2), ("k3", k3)):
        _, gradients[name], _ = _value_and_gradient(estimator, logp, ref_logp, weights)
    values = {"k1": k1(logp, ref_logp), "k2": k2(logp, ref_logp), "k3": k3(logp, ref_logp)}
    value_ok = _close(value, values["k3"])
    value_float32 = not value_ok and _close_in_float32(value, values["k3"])
    if not (value_ok or value_float32):
        if _close(value, values["k2"]):
            if gradient is not None and _close(gradient, gradients["k3"]):
                return _verdict(False, "", "the two parts are swapped: you return k2's value with k3's gradient. "
                                "Keep the value of k3 (detached) and add k2 − sg[k2].")
            return _verdict(False, "", "the value is k2's, ½ (log r)²: the logged number must be k3's, "
                            "(r − 1) − log r, which is unbiased.")
        if _close(value, k3(ref_logp, logp)):
            return _verdict(False, "", "the value is k3 with the ratio upside down (r = π_θ/π_ref); r = π_ref/π_θ.")
        if _close(value, values["k3"] + values["k2"]):
            return _verdict(False, "", "the value is k3 + k2: the k2 part must add zero to the value — "
                            "add k2 − sg[k2], not k2.")
        return _verdict(False, "", _diagnose(value, values["k3"], {}))
    if error:
        return _verdict(False, "", error)
    if not _close(gradient, gradients["k2"]) and not (value_float32 and _close_in_float32(gradient, gradients["k2"])):
        mistakes = {
            "plain_k3": (gradients["k3"], "that is plain k3: its gradient is k3's, the forward-KL one. Keep k3's value "
                         "but take the gradient from k2: detach what carries the value, and add a term that is zero in "
                         "value but has k2's gradient."),
            "undetached_k3": (gradients["k3"] + gradients["k2"], "k3 was not detached: its gradient adds to k2's. "
                              "Use k3.detach() for the value."),
            "k1_gradient": (gradients["k1"], "the gradient is k1's, which is zero in expectation; k3+ takes k2's."),
            "negated": (-gradients["k2"], "the gradient has the wrong sign: add k2 − sg[k2], not sg[k2] − k2."),
            "missing_half": (2 * gradients["k2"], "the gradient is twice k2's: the ½ of k2 = ½ (log r)² is missing, "
                             "so your surrogate (log r)² − sg[(log r)²] pulls twice as hard as k2 does."),
        }
        return _verdict(False, "", f"the value is right but the gradient is not — "
                        f"{_diagnose(gradient, gradients['k2'], mistakes)}")
    return _verdict(True, "your k3+ has k3's value and k2's gradient"
                    + (f" {FLOAT32_NOTE}" if value_float32 else ""), "")


# ----------------------------------------------------------------------------------------------
# Lesson 02: the expected gradient of an estimator, by enumeration


def _categorical_cases():
    generator = torch.Generator().manual_seed(11)
    cases = []
    for _ in range(2):
        logits = torch.randn(5, dtype=DTYPE, generator=generator)
        ref_probs = torch.softmax(torch.randn(5, dtype=DTYPE, generator=generator), dim=0)
        cases.append((logits, ref_probs))
    return cases


def _enumerated_gradient(logits, ref_probs, estimator, *, weights: str, slip: str | None = None):
    """∇ Σ_x w(x) k(x) with w = sg[π] ("detached"), π ("differentiated"), 1 ("uniform") or π_ref ("reference").

    ``slip`` makes one of the usual mistakes instead: "unlogged_ref" passes π_ref for log π_ref,
    "swapped" calls estimator(ref_logp, logp), "wrt_probs" differentiates with respect to the
    probabilities π rather than the logits, "wrt_logp" with respect to log π (a detached
    ``log_softmax`` made a leaf), which drops the softmax's coupling: for k1 it gives π, not 0;
    "raw_logits" passes the logits θ themselves as log π (no ``log_softmax``), the weights still π_θ;
    "raw_logits_exp" does the same with the weights exp(θ) = exp(log π) as written; "probs_as_logp" passes
    the probabilities π (``softmax``) where log π belongs. ``weights="squared"`` weights by sg[π]², π twice.
    """
    theta = logits.clone().requires_grad_(True)
    if slip in ("raw_logits", "raw_logits_exp"):
        values = estimator(theta, ref_probs.log())
        w = (torch.softmax(theta, dim=0) if slip == "raw_logits" else theta.exp()).detach()
        (gradient,) = torch.autograd.grad((w * values).sum(), theta)
        return gradient
    if slip == "wrt_probs":
        leaf = torch.softmax(theta, dim=0).detach().requires_grad_(True)
        logp = leaf.log()
    elif slip == "wrt_logp":
        leaf = torch.log_softmax(theta, dim=0).detach().requires_grad_(True)
        logp = leaf
    elif slip == "probs_as_logp":
        leaf, logp = theta, torch.log_softmax(theta, dim=0)
        values = estimator(logp.exp(), ref_probs.log())
        (gradient,) = torch.autograd.grad((logp.exp().detach() * values).sum(), leaf)
        return gradient
    else:
        leaf, logp = theta, torch.log_softmax(theta, dim=0)
    ref = ref_probs if slip == "unlogged_ref" else ref_probs.log()
    values = estimator(ref, logp) if slip == "swapped" else estimator(logp, ref)
    w = {"detached": logp.exp().detach(), "differentiated": logp.exp(), "uniform": torch.ones_like(logp),
         "reference": ref_probs, "squared": logp.exp().detach() ** 2}[weights]
    (gradient,) = torch.autograd.grad((w * values).sum(), leaf)
    return gradient


NEAR_MONTE_CARLO = 0.15  # distance / the largest of k1, k2, k3's reference norms: a 200-draw estimate sits at 0.05–0.15
                         # on the first estimator checked; π² weights or π passed as log π at 0.2 or more


def _expected_gradient_mistakes(logits, ref_probs, estimator, reference) -> dict[str, tuple[torch.Tensor, str]]:
    """What each usual slip in ``check_expected_gradient`` returns for one estimator, with its hint."""
    return {
        "differentiated": (_enumerated_gradient(logits, ref_probs, estimator, weights="differentiated"),
                           "you differentiated the sampling weights π_θ(x) too. That is ∇E[k], the "
                           "gradient of the *value*; a loss averaged over samples never sees how the "
                           "samples were drawn, so detach the weights: Σ_x sg[π_θ(x)] ∇k(x)."),
        "uniform": (_enumerated_gradient(logits, ref_probs, estimator, weights="uniform"),
                    "you summed ∇k(x) over x without weighting by π_θ(x): an expectation under π_θ "
                    "is Σ_x π_θ(x) (…)."),
        "reference_weighted": (_enumerated_gradient(logits, ref_probs, estimator, weights="reference"),
                               "you weighted each outcome by π_ref(x): the tokens are sampled from the policy, "
                               "so the expectation is under π_θ, Σ_x sg[π_θ(x)] ∇k(x)."),
        "squared_weights": (_enumerated_gradient(logits, ref_probs, estimator, weights="squared"),
                            "you weighted each outcome by π_θ(x) twice (π_θ(x)²): the expectation is "
                            "Σ_x sg[π_θ(x)] ∇k(x), one factor of π_θ."),
        "probs_as_logp": (_enumerated_gradient(logits, ref_probs, estimator, weights="detached", slip="probs_as_logp"),
                          "you passed the probabilities π (softmax) where the estimator takes log-probabilities: "
                          "call estimator(log_softmax(θ), ref_probs.log())."),
        "negated": (-reference, "the sign is flipped: return the gradient of E[k], not its negative."),
        "unlogged_ref": (_enumerated_gradient(logits, ref_probs, estimator, weights="detached",
                                              slip="unlogged_ref"),
                         "you passed ref_probs where the estimator takes ref_logp: call "
                         "estimator(logp, ref_probs.log())."),
        "swapped": (_enumerated_gradient(logits, ref_probs, estimator, weights="detached", slip="swapped"),
                    "the estimator's arguments are swapped: it is estimator(logp, ref_logp), policy first."),
        "wrt_probs": (_enumerated_gradient(logits, ref_probs, estimator, weights="detached", slip="wrt_probs"),
                      "you differentiated with respect to the probabilities π, not the logits θ: "
                      "build log π = log_softmax(θ) from the logits and differentiate with respect to θ."),
        "wrt_logp": (_enumerated_gradient(logits, ref_probs, estimator, weights="detached", slip="wrt_logp"),
                     "you differentiated with respect to log π (a detached log_softmax), not the logits θ: "
                     "that drops the softmax's normaliser, ∂log π(x)/∂θ = e_x − π, so for k1 you get π "
                     "instead of 0. Keep log π = log_softmax(θ) in the graph and differentiate with "
                     "respect to θ."),
        "raw_logits": (_enumerated_gradient(logits, ref_probs, estimator, weights="detached", slip="raw_logits"),
                       "you passed the raw logits θ as log π: log π(x) = θ_x − logsumexp(θ) needs the "
                       "softmax's normaliser (log_softmax), without which ∂log π(x)/∂θ is e_x instead of "
                       "e_x − π, so for k1 you get π instead of 0."),
        "raw_logits_exp": (_enumerated_gradient(logits, ref_probs, estimator, weights="detached", slip="raw_logits_exp"),
                           "you passed the raw logits θ as log π: log π(x) = θ_x − logsumexp(θ) needs the "
                           "softmax's normaliser (log_softmax); without it ∂log π(x)/∂θ is e_x instead of e_x − π, "
                           "and your weights exp(θ) are not π_θ either (they do not sum to 1)."),
        "unweighted_mean": (_enumerated_gradient(logits, ref_probs, estimator, weights="uniform")
                            / logits.numel(),
                            "you took a plain mean of ∇k(x) over the outcomes x: an expectation under π_θ "
                            "weights each outcome by π_θ(x) (detached), Σ_x sg[π_θ(x)] ∇k(x)."),
        "mean": (reference / logits.numel(), "you averaged over the outcomes x: an expectation is the "
                 "π-weighted *sum* Σ_x π_θ(x) ∇k(x), not a mean over x."),
    }


def check_expected_gradient(gradient_fn) -> bool | None:
    """Check ``gradient_fn(logits, ref_probs, estimator) -> E_{x~π_θ}[∇_θ k(x)]``, shape (K,).

    ``estimator`` is one of ``rlbook.kl.k1 / k2 / k3`` (called as ``estimator(logp, ref_logp)``);
    π_θ = softmax(logits). The reference is ∇_θ Σ_x sg[π_θ(x)] k(x), as in
    ``rlbook.toys.expected_estimator_gradient``.
    """
    if _not_attempted(gradient_fn, "expected-gradient function"):
        return None
    for logits, ref_probs in _categorical_cases():
        for name, estimator in (("k1", k1), ("k2", k2), ("k3", k3)):
            result, error = _call(gradient_fn, logits.clone(), ref_probs.clone(), estimator)
            if error:
                return _failed(error)
            reference = _enumerated_gradient(logits, ref_probs, estimator, weights="detached")
            if _close(result, reference):
                continue
            if (isinstance(result, torch.Tensor) and result.shape != reference.shape
                    and result.numel() == reference.numel() and _close(result.reshape(reference.shape), reference)):
                return _verdict(False, "", f"right values, wrong shape for {name}: expected shape "
                                           f"{tuple(reference.shape)} (one entry per logit), got {tuple(result.shape)}; "
                                           "reshape or squeeze it.")
            mistakes = _expected_gradient_mistakes(logits, ref_probs, estimator, reference)
            # Two slips can coincide on one estimator (the raw logits and a detached log π both give π for k1):
            # name the slip that matches the reader's answer for all three estimators, where one does.
            answers = {other: _call(gradient_fn, logits.clone(), ref_probs.clone(), fn)[0]
                       for other, fn in (("k1", k1), ("k2", k2), ("k3", k3))}
            slips = {other: _expected_gradient_mistakes(logits, ref_probs, fn, _enumerated_gradient(
                         logits, ref_probs, fn, weights="detached")) for other, fn in (("k1", k1), ("k2", k2), ("k3", k3))}
            for key, (_, hint) in mistakes.items():
                if all(isinstance(answers[other], torch.Tensor) and _close(answers[other], slips[other][key][0])
                       for other in answers):
                    return _verdict(False, "", f"wrong for {name} — {hint}")
            named = any(isinstance(result, torch.Tensor) and result.shape == wrong.shape and _close(result, wrong)
                        for wrong, _ in mistakes.values())
            # The sampling hint fits an answer near the reference (a Monte Carlo estimate lands within a few
            # percent of the gradients' scale); a far-off answer is some other slip, and gets no hint.
            scale = max(float(_enumerated_gradient(logits, ref_probs, fn, weights="detached").norm()) for fn in (k1, k2, k3))
            near = (isinstance(result, torch.Tensor) and result.shape == reference.shape
                    and float((result.to(reference.dtype) - reference).norm()) < NEAR_MONTE_CARLO * scale)
            hint = "" if named or not near else (" The exercise asks for the exact expectation, by enumeration: the sum over all "
                                     "K outcomes weighted by π_θ(x), not an average over sampled x.")
            return _verdict(False, "", f"wrong for {name} — {_diagnose(result, reference, mistakes)}{hint}")
    return _verdict(True, "your enumeration matches the reference for k1, k2 and k3", "")


# ----------------------------------------------------------------------------------------------
# Lesson 02, §7: k1 in the reward, credited forward


def _credit_cases():
    """(rewards (B,), per-token k1 (B, T), β): sequence rewards and log-ratios of either sign."""
    generator = torch.Generator().manual_seed(13)
    rewards = torch.tensor([1.0, 0.0, 1.0], dtype=DTYPE)
    kl = 0.6 * torch.randn(3, 4, dtype=DTYPE, generator=generator)
    return [(rewards, kl, 0.25), (rewards[:2], kl[:2, :3] + 0.3, 0.1)]


def reference_kl_credit(rewards, kl, beta):
    """Token t's credit R − β Σ_{t'≥t} k1_t': the library's ``kl_in_reward``, then reward-to-go (GAE, γ = λ = 1)."""
    per_token = kl_in_reward(rewards, kl, beta, torch.ones_like(kl))
    credit, _ = gae(per_token, torch.zeros_like(per_token), 1.0, 1.0)
    return credit


def _credit_mistakes(rewards, kl, beta):
    later = kl.flip(1).cumsum(1).flip(1)                     # Σ_{t'≥t} k1_t'
    reward = rewards.unsqueeze(1)
    return {
        "own_token": (reward - beta * kl, "each token is credited with its own log-ratio only: that is the per-token "
                      "placement (\"k1_own_token\"), the partial gradient of §7. Add the log-ratios of every later token."),
        "whole_response": ((reward - beta * kl.sum(1, keepdim=True)).expand_as(kl), "every token is credited with the whole response's "
                           "KL, the tokens before it included: unbiased (a past token's term has a zero-mean score) "
                           "but noisier than reward-to-go, which sums t' ≥ t only."),
        "strictly_later": (reward - beta * (later - kl), "the token's own log-ratio is missing: the sum runs over "
                           "t' ≥ t, the token itself included."),
        "prefix_sum": (reward - beta * kl.cumsum(1), "you summed the tokens up to t (a prefix sum); the credit sums "
                       "the tokens from t to the end: flip, cumsum, flip."),
        "sign": (reward + beta * later, "the penalty has the wrong sign: the credit is R − β Σ_{t'≥t} k1_t'."),
        "no_reward": (-beta * later, "the verifier's reward R is missing: every token's credit includes it."),
        "no_beta": (reward - later, "β is missing: the log-ratios are multiplied by β."),
        "shaped_rewards": (kl_in_reward(rewards, kl, beta, torch.ones_like(kl)),
                           "those are the per-token shaped rewards kl_in_reward returns (−β·k1 per token, R on the "
                           "last): the credit is their reward-to-go, each token's sum from t to the end."),
        "reward_on_last_only": (-beta * later + torch.nn.functional.pad(reward, (kl.shape[1] - 1, 0)),
                                "the KL is carried back but R sits on the last token only: R is part of every "
                                "token's return, so each credit is R − β Σ_{t'≥t} k1_t'."),
        "per_length": (reward - beta * later / kl.shape[1], "the future sum is divided by the length T (GRPO's 1/|o| "
                       "habit): the credit is the sum itself, R − β Σ_{t'≥t} k1_t', with no 1/T."),
        "mean_of_future": (reward - beta * later / torch.arange(kl.shape[1], 0, -1, dtype=kl.dtype),
                           "each credit is the *mean* of the log-ratios still to come (the future sum divided by the "
                           "T − t + 1 tokens left): the credit is their sum, R − β Σ_{t'≥t} k1_t', with no division."),
    }


def _credit_discount(result, reference, rewards, kl, beta):
    """A credit that is the reward-to-go discounted by some γ < 1: fit γ from the last two tokens, then test it.

    With shaped per-token rewards s (``kl_in_reward``: −β·k1, R on the last token), a discounted credit has
    C_{T−1} = s_{T−1} + γ·C_T, so γ = (C_{T−1} − s_{T−1}) / C_T; the fit is named only when the whole answer
    equals ``gae(s, 0, γ, 1)`` at that γ (any γ in (0, 1), not only a few listed values).
    """
    if result.shape != reference.shape or kl.shape[1] < 2:
        return None
    shaped = kl_in_reward(rewards, kl, beta, torch.ones_like(kl))
    last = result[:, -1].to(shaped.dtype)
    row = int(last.abs().argmax())
    if float(last[row].abs()) < 1e-9:
        return None
    gamma = float((result[row, -2].to(shaped.dtype) - shaped[row, -2]) / last[row])
    if not 0.0 < gamma < 1.0 - 1e-6:
        return None
    discounted, _ = gae(shaped, torch.zeros_like(shaped), gamma, 1.0)
    if not _close(result, discounted):
        return None
    return (f"your credit is wrong — that is the return discounted with γ = {gamma:.3g} (a discount γ < 1, or the "
            "product γ·λ of GAE with λ < 1): the sequence tilt needs the undiscounted sum (γ = λ = 1), every later "
            "token's log-ratio at full weight.")


def _credit_shape(result, reference, *case):
    if result.shape != reference.shape:
        return (f"return one credit per token, shape {tuple(reference.shape)} like kl; got {tuple(result.shape)}")
    return None


check_kl_credit = FunctionExercise(
    "check_kl_credit", what="credit", cases=_credit_cases, reference=reference_kl_credit, mistakes=_credit_mistakes,
    checks=(_credit_shape,), partial=_credit_discount, wrong="your credit is wrong — ",
    label=lambda rewards, kl, beta: f"(B, T) = {tuple(kl.shape)}, β = {beta}: ",
    success="your credit is R − β Σ_{t'≥t} k1_t', the reward-to-go of k1 in the reward",
    float32_success=f"your credit is R − β Σ_{{t'≥t}} k1_t' {FLOAT32_NOTE}",
    doc="""Check ``credit_fn(rewards, kl, beta)``: per token, R − β Σ_{t'≥t} kl_t' (§7's credit forward).

    ``rewards`` (B,) are sequence rewards, ``kl`` (B, T) per-token k1 values (no padding), ``beta`` a float.
    The reference is ``rlbook.kl.kl_in_reward`` followed by reward-to-go (``rlbook.advantages.gae`` with
    γ = λ = 1), as ``rlbook.kl_sequence``'s ``"k1_in_reward"`` placement credits it.""")
