"""Checkers for the exercises of lessons 06 (DPO) and 07 (the preference zoo).

==========================  ==================================================  ==========
checker                     the reader writes                                   lesson
==========================  ==================================================  ==========
``check_optimal_policy``    π* ∝ π_ref · exp(r/β) on a finite set of responses  06
``check_dpo_loss``          DPO's per-pair loss from sequence log-probs         06
``check_ipo_loss``          IPO's per-pair loss from sequence log-probs         07
``check_simpo_loss``        SimPO's per-pair loss from log-probs and lengths    07
==========================  ==================================================  ==========

Each is a ``FunctionExercise`` (``rlbook.exercises.framework``): it runs the reader's function on fixed inputs, compares
with the library (``rlbook.toys.reverse_kl_optimum``, ``rlbook.losses.dpo_loss``,
``rlbook.losses.ipo_loss``, ``rlbook.losses.simpo_loss``), and when they differ tries the usual
mistakes one by one and names the one the reader's answer matches. It prints its verdict (✓ or ✗)
and returns True / False, or None when the exercise is not attempted yet (``None``, or a function
that raises ``NotImplementedError``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlbook.exercises.framework import DTYPE, FunctionExercise
from rlbook.losses import dpo_loss, ipo_loss, simpo_loss
from rlbook.toys import reverse_kl_optimum

__all__ = ["check_optimal_policy", "check_dpo_loss", "check_ipo_loss", "check_simpo_loss",
           "optimal_policy_mistakes", "dpo_loss_mistakes", "ipo_loss_mistakes", "simpo_loss_mistakes"]

# Sequence log-probs of 6 pairs: chosen, rejected, and the reference's of each. Pair 5 has h = 0.
PAIRS = (
    torch.tensor([-12.0, -30.5, -8.2, -20.0, -15.0, -40.0], dtype=DTYPE),
    torch.tensor([-14.0, -28.0, -9.9, -26.0, -15.0, -35.0], dtype=DTYPE),
    torch.tensor([-13.0, -29.0, -8.0, -22.5, -16.0, -41.0], dtype=DTYPE),
    torch.tensor([-13.5, -29.5, -9.0, -23.0, -16.0, -34.0], dtype=DTYPE),
)
# The DPO checker's pairs: the same 6 and a 7th so mis-ordered (h = −2000) that at β = 0.5 σ(β h) underflows
# float64 to 0, so an answer written as log(sigmoid(·)) returns inf where logsigmoid does not.
DPO_PAIRS = tuple(torch.cat([values, torch.tensor([extra], dtype=DTYPE)])
                  for values, extra in zip(PAIRS, (-2020.0, -20.0, -20.0, -20.0)))
REF_PROBS = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=DTYPE)
REWARDS = torch.tensor([0.0, 1.5, -1.0, 3.0], dtype=DTYPE)
OPTIMUM_BETAS = (0.5, 1.0, 2.0, 0.003)   # the last: exp(r/β) overflows float64 unless π* is a softmax
# A last case with a response the reference never writes (π_ref = 0), the best one, at a small β: π* must keep it at
# 0 (lesson 06 §1); an answer that clamps π_ref or adds an ε to it gives it most of the mass instead.
UNREACHABLE_REF_PROBS = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=DTYPE)
UNREACHABLE_BETA = 0.1
DPO_BETAS = (0.1, 0.5)
IPO_TAUS = (0.1, 0.5)
# Response lengths |y_w| and |y_l| of the same 6 pairs (for SimPO), and its (β, γ) cases.
LENGTHS = (
    torch.tensor([20.0, 61.0, 16.0, 25.0, 30.0, 100.0], dtype=DTYPE),
    torch.tensor([35.0, 40.0, 11.0, 52.0, 20.0, 50.0], dtype=DTYPE),
)
SIMPO_SETTINGS = ((2.0, 0.5), (10.0, 1.0))
# A last SimPO case: one pair so mis-ordered (β·Δ − γ = −991 at β = 10, γ = 1) that σ underflows float64 to 0, so an
# answer written as log(sigmoid(·)) returns inf where logsigmoid does not (as the DPO checker's 7th pair).
SIMPO_SATURATED = (torch.tensor([-5000.0], dtype=DTYPE), torch.tensor([-10.0], dtype=DTYPE),
                   torch.tensor([50.0], dtype=DTYPE), torch.tensor([10.0], dtype=DTYPE), 10.0, 1.0)


def _shown(values: torch.Tensor) -> list[float]:
    return [round(v, 4) for v in values.detach().to(DTYPE).flatten().tolist()]


def _one_value_per_pair(result, reference, *case) -> str | None:
    if result.dim() == 0 and reference.dim() == 1:
        return "you returned one number where one value per pair was asked: return the (B,) per-pair losses, without .mean()"
    return None


def _finite(result, reference, *case) -> str | None:
    if torch.isfinite(reference).all() and not torch.isfinite(result.detach()).all():
        return (f"your answer holds inf or NaN at {case[-1]}: an exp of a large number overflowed; work in log "
                f"space (a softmax of log π_ref + r/β, or logsigmoid)")
    return None


def _same_shape(result, reference, *case) -> str | None:
    if result.shape != reference.shape and result.numel() == reference.numel():
        return (f"your answer has shape {tuple(result.shape)}, the expected one {tuple(reference.shape)}: return "
                f"one value per entry of the inputs, in the inputs' shape (drop the extra dimension)")
    return None


def _underflowed_log_sigmoid(result, reference, *case) -> str | None:
    if torch.isfinite(reference).all() and torch.isposinf(result.detach()).any():
        return (f"your loss is inf on a pair with β·h = {float(case[-1] * _log_ratio_margin(*case[:4]).detach().min()):.0f} "
                f"at β = {case[-1]}: σ of a large negative number underflows to 0 and its log is −inf (or an exp "
                f"overflowed); compute log σ(z) with F.logsigmoid(z), or −softplus(−z)")
    return None


def _unreachable_kept_at_zero(result, reference, *case) -> str | None:
    ref_probs = case[0]
    never = ref_probs == 0
    if never.any() and result.shape == reference.shape and (result.detach().to(DTYPE)[never].abs() > 1e-9).any():
        return (f"π_ref = {_shown(ref_probs)}: your π* gives {_shown(result[never])} to the response π_ref never writes; "
                f"π* ∝ π_ref · exp(r/β) keeps it at 0 at every β (do not clamp π_ref or add an ε to it: log 0 = −inf "
                f"is fine inside a softmax)")
    return None


def _simpo_underflowed_log_sigmoid(result, reference, *case) -> str | None:
    if torch.isfinite(reference).all() and torch.isposinf(result.detach()).any():
        chosen, rejected, chosen_lens, rejected_lens, beta, gamma = case
        z = beta * (chosen / chosen_lens - rejected / rejected_lens) - gamma
        return (f"your loss is inf on a pair with β·Δ − γ = {float(z.detach().min()):.0f}: σ of a large negative "
                f"number underflows to 0 and its log is −inf; compute log σ(z) with F.logsigmoid(z), or −softplus(−z)")
    return None


def _keeps_gradient_of(derivative: str):
    """A first check for a loss checker: when the policy's log-probs (the first two arguments) require grad,
    the answer must too; its hint names ``derivative``, that loss's gradient in log π(y_w)."""

    def check(result, reference, *case) -> str | None:
        if any(isinstance(a, torch.Tensor) and a.requires_grad for a in case[:2]) and not result.requires_grad:
            return ("your loss carries no gradient back to the policy's log-probs (computed through .detach(), "
                    ".item(), numpy or a new tensor?): it has the right values but could not train; build it from "
                    f"torch operations on the inputs ({derivative})")
        return None

    return check


def _with_grad(cases: list[tuple]) -> list[tuple]:
    # the policy's log-probs (the first two arguments) require grad, as in training
    return [(*(values.clone().requires_grad_(True) for values in case[:2]), *case[2:]) for case in cases]


def _loss_exercise(name: str, what: str, cases, reference, mistakes, *, knob: str, knobs: int, success: str,
                   generic: str, doc: str, first_checks=()) -> FunctionExercise:
    """A checker that runs the reader's function on ``cases``, argument tuples whose last ``knobs`` entries are
    the knobs (β, τ, or SimPO's β and γ, named together by ``knob``); a wrong answer's message shows the
    expected and the returned values, then the hint of the mistake it matches (else ``generic``)."""

    def message(hint, result, reference, *case) -> str:
        setting = case[-1] if knobs == 1 else tuple(case[-knobs:])
        return f"{knob} = {setting}: expected {_shown(reference)}, got {_shown(result)}: {hint}"

    return FunctionExercise(
        name, what=what, cases=lambda: cases, reference=reference, mistakes=mistakes, success=success,
        checks=(_one_value_per_pair, _same_shape, *first_checks, _finite), named=message,
        otherwise=lambda result, reference, *case: message(generic, result, reference, *case),
        doc=doc, module=__name__)


# ----------------------------------------------------------------------------------------------
# Lesson 06: the KL-regularised optimum


def optimal_policy_mistakes(ref_probs, rewards, beta) -> dict[str, tuple[torch.Tensor, str]]:
    """The usual wrong versions of π*, each with the hint that names it."""
    return {
        "unnormalised": (ref_probs * torch.exp(rewards / beta),
                         "not normalised: divide by Z = Σ_y π_ref(y) exp(r(y)/β) so that the probabilities "
                         "sum to 1"),
        "beta_times_reward": (torch.softmax(ref_probs.log() + beta * rewards, 0),
                              "β multiplies the reward instead of dividing it: the optimum is π_ref · exp(r/β), "
                              "so a small β (a weak KL penalty) makes π* greedier, not flatter"),
        "no_reference": (torch.softmax(rewards / beta, 0),
                         "π_ref is missing: the KL penalty pulls π* towards π_ref, so π* ∝ π_ref(y) exp(r(y)/β), "
                         "not softmax(r/β)"),
        "minus_reward": (torch.softmax(ref_probs.log() - rewards / beta, 0),
                         "exp(−r/β) favours the worst responses: maximising the reward gives exp(+r/β)"),
        "ref_not_logged": (torch.softmax(ref_probs + rewards / beta, 0),
                           "π_ref itself was added inside the softmax: the product π_ref · exp(r/β) is "
                           "exp(log π_ref + r/β), so add log π_ref"),
        "no_beta": (torch.softmax(ref_probs.log() + rewards, 0),
                    "β is missing: the reward enters as r/β, so π* ∝ π_ref · exp(r/β); without β every optimum "
                    "is the one at β = 1"),
        "log_probabilities": (torch.log_softmax(ref_probs.log() + rewards / beta, 0),
                              "these are log-probabilities log π*: return the probabilities π* (they sum to 1)"),
        "z_without_reference": (ref_probs * torch.softmax(rewards / beta, 0),
                                "Z is the wrong sum: normalise by Z = Σ_y π_ref(y) exp(r(y)/β), with π_ref inside the "
                                "sum, so that π* sums to 1"),
        "tempered_reference": (torch.softmax((ref_probs.log() + rewards) / beta, 0),
                               "β divides log π_ref too: only the reward is tempered, π* ∝ exp(log π_ref + r/β), "
                               "not exp((log π_ref + r)/β)"),
    }


def _optimal_policy(ref_probs, rewards, beta) -> torch.Tensor:
    """The library's π*, called as the reader's function is: ``(ref_probs, rewards, beta)``; a response with
    π_ref = 0 gets π* = 0 (the library's ``reverse_kl_optimum`` takes a reference with full support)."""
    reachable = ref_probs > 0
    optimum = torch.zeros_like(ref_probs)
    optimum[reachable] = reverse_kl_optimum(ref_probs[reachable], rewards[reachable], beta=beta)
    return optimum


check_optimal_policy = _loss_exercise(
    "check_optimal_policy", "optimal policy",
    [(REF_PROBS, REWARDS, beta) for beta in OPTIMUM_BETAS] + [(UNREACHABLE_REF_PROBS, REWARDS, UNREACHABLE_BETA)],
    _optimal_policy, optimal_policy_mistakes, knob="β", knobs=1, first_checks=(_unreachable_kept_at_zero,),
    success=f"π* = π_ref · exp(r/β) / Z at β = {', '.join(map(str, OPTIMUM_BETAS))}, and π* = 0 where π_ref = 0",
    generic="compare with π_ref(y) exp(r(y)/β) / Σ_y' π_ref(y') exp(r(y')/β)",
    doc="""Check ``fn(ref_probs, rewards, beta)`` → π*(y) = π_ref(y) exp(r(y)/β) / Z, the maximiser of
    E_π[r] − β KL(π ‖ π_ref) (Rafailov et al. 2023, arXiv:2305.18290, eq. 4), at β = 0.5, 1, 2 and
    0.003 (where exp(r/β) overflows unless π* is computed as a softmax of log π_ref + r/β), and at β = 0.1
    with a best response that π_ref never writes (π_ref = 0), which π* must keep at 0.""")


# ----------------------------------------------------------------------------------------------
# Lesson 06: the DPO loss


def _log_ratio_margin(chosen, rejected, ref_chosen, ref_rejected) -> torch.Tensor:
    return (chosen - ref_chosen) - (rejected - ref_rejected)


def dpo_loss_mistakes(chosen, rejected, ref_chosen, ref_rejected, beta) -> dict[str, tuple[torch.Tensor, str]]:
    """The usual wrong versions of the DPO loss, each with the hint that names it."""
    h = _log_ratio_margin(chosen, rejected, ref_chosen, ref_rejected)
    return {
        "no_reference": (-F.logsigmoid(beta * (chosen - rejected)),
                         "the reference is missing: the implicit reward is β log π/π_ref, so h subtracts the "
                         "reference's log-prob of each response"),
        "flipped": (-F.logsigmoid(-beta * h),
                    "the sign is flipped: −log σ(−β h) rewards the rejected response; chosen minus rejected goes "
                    "inside σ"),
        "no_beta": (-F.logsigmoid(h), "β is missing: the implicit-reward margin is β·h, not h"),
        "no_minus": (F.logsigmoid(beta * h), "the minus sign is missing: the loss is −log σ(β h), which is ≥ 0"),
        "weight": (torch.sigmoid(-beta * h),
                   "this is σ(−β h), the gradient's weight, not the loss; the loss is −log σ(β h)"),
        "weight_times_beta": (beta * torch.sigmoid(-beta * h),
                              "this is β σ(−β h), the gradient's weight of §3 (how hard a pair pulls), not the loss; "
                              "the loss is −log σ(β h)"),
        "scaled_by_beta": (-beta * F.logsigmoid(beta * h),
                           "the loss is multiplied by β: it is −log σ(β h), with β only inside σ"),
        "ratios_added": (-F.logsigmoid(beta * ((chosen - ref_chosen) + (rejected - ref_rejected))),
                         "the two log-ratios were added: h is the chosen one's minus the rejected one's"),
        "ratio_of_ratios": (-F.logsigmoid(beta * (chosen / ref_chosen - rejected / ref_rejected)),
                            "you divided log-probs: the log-ratio is log π − log π_ref (a difference of logs), "
                            "not log π / log π_ref"),
        "beta_divides": (-F.logsigmoid(h / beta), "β divides the margin: the implicit reward is β · log π/π_ref, "
                                                  "so the loss is −log σ(β·h)"),
        "reference_sign": (-F.logsigmoid(beta * ((chosen + ref_chosen) - (rejected + ref_rejected))),
                           "ref_chosen and ref_rejected are swapped (each response must be divided by its own "
                           "reference log-prob), or, the same numbers, the reference's log-probs were added: each "
                           "log-ratio is log π(y) − log π_ref(y) of one response"),
    }


def _dpo_cases() -> list[tuple]:
    # the policy's log-probs (chosen, rejected) require grad, as in training: a loss that drops the graph is caught
    policy = tuple(values.clone().requires_grad_(True) for values in DPO_PAIRS[:2])
    return [(*policy, *DPO_PAIRS[2:], beta) for beta in DPO_BETAS]


check_dpo_loss = _loss_exercise(
    "check_dpo_loss", "DPO loss", _dpo_cases(), dpo_loss, dpo_loss_mistakes, knob="β",
    knobs=1, first_checks=(_underflowed_log_sigmoid, _keeps_gradient_of("§3: ∂ℓ/∂log π(y_w) = −β σ(−β h)")),
    success="your DPO loss matches rlbook.losses.dpo_loss on 7 pairs at β = 0.1 and 0.5 (the pair with h = 0 "
            "scores ln 2; the one with β·h = −1000 stays finite)",
    generic="compare with −log σ(β [(log π_w − log π_ref,w) − (log π_l − log π_ref,l)])",
    doc="""Check ``fn(chosen, rejected, ref_chosen, ref_rejected, beta)`` → the (B,) per-pair DPO loss
    −log σ(β h) against ``rlbook.losses.dpo_loss`` on 7 pairs at β = 0.1 and 0.5, the last so mis-ordered
    (β h = −1000 at β = 0.5) that log(sigmoid(·)) underflows where logsigmoid does not. The policy's
    log-probs require grad, so a loss computed through ``.detach()`` or numpy (right values, no gradient) fails.""")


# ----------------------------------------------------------------------------------------------
# Lesson 07: the IPO loss


def ipo_loss_mistakes(chosen, rejected, ref_chosen, ref_rejected, tau) -> dict[str, tuple[torch.Tensor, str]]:
    """The usual wrong versions of the IPO loss, each with the hint that names it."""
    h = _log_ratio_margin(chosen, rejected, ref_chosen, ref_rejected)
    return {
        "target_one_over_tau": ((h - 1 / tau) ** 2, "the target is 1/τ; IPO's is 1/(2τ) (Azar et al. 2023, eq. 17)"),
        "target_tau": ((h - tau) ** 2,
                       "the target is τ itself; it is 1/(2τ): a weaker regulariser (small τ) means a larger margin"),
        "no_square": (h - 1 / (2 * tau),
                      "the square is missing: IPO regresses the margin onto its target, (h − 1/(2τ))²"),
        "no_reference": ((chosen - rejected - 1 / (2 * tau)) ** 2,
                         "the reference is missing: h is a difference of log-ratios log π − log π_ref"),
        "dpo": (-F.logsigmoid(tau * h), "this is the DPO loss −log σ(τ h), not IPO's squared loss"),
        "flipped": ((h + 1 / (2 * tau)) ** 2,
                    "the margin is pulled towards −1/(2τ): either chosen and rejected are swapped (h is the chosen "
                    "response's log-ratio minus the rejected one's) or the target's sign is, (h − 1/(2τ))²"),
        "scaled_margin": ((tau * h - 1 / 2) ** 2,
                          "you regressed τ·h onto ½: that is τ² times IPO's loss, (h − 1/(2τ))²; the scale "
                          "changes the effective step size"),
        "precedence": ((h - 1 / 2 * tau) ** 2,
                       "the target came out as τ/2: in Python 1/2*tau is (1/2)·τ; write 1/(2*tau)"),
        "constant_kept": ((h - 1 / (2 * tau)) ** 2 + 1 / (4 * tau ** 2),
                          "right up to a constant: this is ½[(h − 1/τ)² + h²], the two orderings' squared errors "
                          "before the constant 1/(4τ²) is dropped; it has the same gradient, but IPO's loss (Azar et "
                          "al. 2023, eq. 17) is (h − 1/(2τ))², which is 0 at the target"),
        "both_orderings_summed": ((h - 1 / tau) ** 2 + h ** 2,
                                  "this is (h − 1/τ)² + h², the two orderings summed: it equals 2(h − 1/(2τ))² "
                                  "+ 1/(2τ²); drop the constant and the factor 2 to get IPO's (h − 1/(2τ))²"),
        "halved": (0.5 * (h - 1 / (2 * tau)) ** 2,
                   "right up to a factor ½: IPO's loss (Azar et al. 2023, eq. 17) is (h − 1/(2τ))², with no ½ in front"),
        "doubled": (2 * (h - 1 / (2 * tau)) ** 2,
                    "this is 2(h − 1/(2τ))², the two orderings' sum less its constant: drop the factor 2 as well"),
        "absolute": ((h - 1 / (2 * tau)).abs(),
                     "this is |h − 1/(2τ)|: IPO regresses the margin onto its target with a square, (h − 1/(2τ))²"),
        "reference_swapped": (((chosen + ref_chosen) - (rejected + ref_rejected) - 1 / (2 * tau)) ** 2,
                              "ref_chosen and ref_rejected are swapped (each response must be divided by its own "
                              "reference log-prob), or, the same numbers, the reference's log-probs were added: each "
                              "log-ratio is log π(y) − log π_ref(y) of one response"),
        "tau_scales_loss": (tau * (h - 1 / (2 * tau)) ** 2,
                            "τ multiplies the loss: in IPO τ only sets the target, (h − 1/(2τ))², with nothing in "
                            "front"),
        "dpo_over_tau": (-F.logsigmoid(h / tau),
                         "this is a logistic loss, −log σ(h/τ): IPO's is the squared loss (h − 1/(2τ))², which has a "
                         "minimum at a finite margin"),
    }


check_ipo_loss = _loss_exercise(
    "check_ipo_loss", "IPO loss", _with_grad([(*PAIRS, tau) for tau in IPO_TAUS]), ipo_loss, ipo_loss_mistakes,
    knob="τ", knobs=1, first_checks=(_keeps_gradient_of("∂ℓ/∂log π(y_w) = 2(h − 1/(2τ))"),),
    success="your IPO loss matches rlbook.losses.ipo_loss on 6 pairs at τ = 0.1 and 0.5",
    generic="compare with (h − 1/(2τ))², h the difference of the log-ratios log π − log π_ref",
    doc="""Check ``fn(chosen, rejected, ref_chosen, ref_rejected, tau)`` → the (B,) per-pair IPO loss
    (h − 1/(2τ))² against ``rlbook.losses.ipo_loss`` (sequence log-probs, no length normalisation). The policy's
    log-probs require grad, so a loss computed through ``.detach()`` or numpy (right values, no gradient) fails.""")


# ----------------------------------------------------------------------------------------------
# Lesson 07: the SimPO loss


def simpo_loss_mistakes(chosen, rejected, chosen_lens, rejected_lens, beta,
                        gamma) -> dict[str, tuple[torch.Tensor, str]]:
    """The usual wrong versions of the SimPO loss, each with the hint that names it."""
    average_margin = chosen / chosen_lens - rejected / rejected_lens
    return {
        "sums": (-F.logsigmoid(beta * (chosen - rejected) - gamma),
                 "you used the summed log-probs: SimPO's reward is the per-token average β/|y| · log π(y|x), so "
                 "each response's log-prob is divided by its own length"),
        "common_length": (-F.logsigmoid(beta * (chosen - rejected) / ((chosen_lens + rejected_lens) / 2) - gamma),
                          "you divided the difference by one common length: each response's log-prob is divided by "
                          "its own length, log π(y_w)/|y_w| − log π(y_l)/|y_l|"),
        "chosen_length_for_both": (-F.logsigmoid(beta * (chosen - rejected) / chosen_lens - gamma),
                                   "you divided both log-probs by the chosen response's length: each is divided by "
                                   "its own, log π(y_w)/|y_w| − log π(y_l)/|y_l|"),
        "no_beta": (-F.logsigmoid(average_margin - gamma),
                    "β is missing: the length-averaged margin is scaled by β before γ is subtracted, "
                    "−log σ(β·Δ − γ)"),
        "gamma_scaled": (-F.logsigmoid(beta * (average_margin - gamma)),
                         "γ is multiplied by β: the target margin is subtracted after scaling, β·Δ − γ "
                         "(TRL writes it β(Δ − γ/β))"),
        "no_gamma": (-F.logsigmoid(beta * average_margin),
                     "the target margin γ is missing: SimPO asks the reward margin to exceed γ, "
                     "−log σ(β·Δ − γ)"),
        "plus_gamma": (-F.logsigmoid(beta * average_margin + gamma),
                       "γ has the wrong sign: the margin must *exceed* γ, so γ is subtracted inside σ"),
        "flipped": (-F.logsigmoid(-beta * average_margin - gamma),
                    "chosen and rejected are swapped: the chosen response's average log-prob comes first"),
        "no_minus": (F.logsigmoid(beta * average_margin - gamma),
                     "the minus sign is missing: the loss is −log σ(β·Δ − γ), which is ≥ 0"),
        "weight": (torch.sigmoid(-(beta * average_margin - gamma)),
                   "this is σ(−(β·Δ − γ)), the gradient's weight, not the loss; the loss is −log σ(β·Δ − γ)"),
        "gamma_over_beta": (-F.logsigmoid(beta * average_margin - gamma / beta),
                            "γ is divided by β: TRL writes SimPO as β(Δ − γ/β), which is β·Δ − γ; subtract γ itself "
                            "after scaling by β"),
    }


check_simpo_loss = _loss_exercise(
    "check_simpo_loss", "SimPO loss",
    _with_grad([*((*PAIRS[:2], *LENGTHS, beta, gamma) for beta, gamma in SIMPO_SETTINGS), SIMPO_SATURATED]),
    simpo_loss, simpo_loss_mistakes, knob="(β, γ)", knobs=2,
    first_checks=(_simpo_underflowed_log_sigmoid,
                  _keeps_gradient_of("∂ℓ/∂log π(y_w) = −(β/|y_w|) σ(−(β·Δ − γ))")),
    success="your SimPO loss matches rlbook.losses.simpo_loss on 6 pairs at "
            + " and ".join(f"β = {b:g}, γ = {g:g}" for b, g in SIMPO_SETTINGS)
            + " (and one with β·Δ − γ = −991 stays finite)",
    generic="compare with −log σ(β [log π(y_w)/|y_w| − log π(y_l)/|y_l|] − γ)",
    doc="""Check ``fn(chosen, rejected, chosen_lens, rejected_lens, beta, gamma)`` → the (B,) per-pair SimPO loss
    −log σ(β log π(y_w)/|y_w| − β log π(y_l)/|y_l| − γ) against ``rlbook.losses.simpo_loss``, plus one pair so
    mis-ordered (β·Δ − γ = −991) that log(sigmoid(·)) underflows where logsigmoid does not. The policy's log-probs
    require grad, so a loss computed through ``.detach()`` or numpy (right values, no gradient) fails.""")
