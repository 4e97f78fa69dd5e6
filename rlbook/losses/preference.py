"""Preference losses: DPO and its relatives, as per-example functions of sequence log-probabilities.

Every loss here takes *sequence* log-probabilities, shape (B,): the sum over the response tokens of
log π(y_t | x, y_<t). ``sequence_logps`` turns per-token log-probs and a 0/1 mask into them. Losses
that normalise by length (SimPO, ORPO, CPO's NLL term, IPO as TRL runs it) take the response
lengths explicitly, so the sum-vs-average convention is always visible at the call site.

Each loss returns one value per example; average them (``.mean()``) for the batch loss.

The family, side by side (h is always "chosen minus rejected"):

=========  ===========================================  =========================================
loss       per-example loss                             h
=========  ===========================================  =========================================
DPO        −log σ(β h)                                  log-ratio margin vs the reference
IPO        (h − 1/(2τ))²                                log-ratio margin vs the reference
SimPO      −log σ(β h − γ)                              length-averaged log-prob margin, no ref
CPO        −log σ(β h) + NLL(chosen)                    log-prob margin, no reference
ORPO       NLL(chosen) − λ log σ(h)                     log odds ratio of length-averaged probs
KTO        λ_y (1 − σ(β (±(r − z0))))                   unpaired: one response against z0
=========  ===========================================  =========================================

Mapping to TRL 1.16 (``tests/test_trl_preference_crosscheck.py`` checks each on identical tensors):
``DPOTrainer`` loss_type "sigmoid" is ``dpo_loss``; loss_type "ipo" is ``ipo_loss`` with TRL's
``beta`` as τ and the lengths passed (TRL averages the log-ratios per token); ``KTOTrainer`` is
``kto_loss`` with ``kto_reference_point`` on its mismatched "KL" completions; ``CPOTrainer``
loss_type "simpo" (with ``cpo_alpha=0``) is ``simpo_loss`` with ``simpo_gamma`` as γ, loss_type
"sigmoid" is ``cpo_loss``; ``ORPOTrainer``'s ``beta`` is ORPO's λ.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rlbook._checks import (
    as_float_tensor,
    as_mask,
    check_all_positive,
    check_positive,
    check_same_shape,
)

__all__ = [
    "sequence_logps",
    "dpo_loss",
    "ipo_loss",
    "kto_reference_point",
    "kto_loss",
    "simpo_loss",
    "cpo_loss",
    "orpo_log_odds_ratio",
    "orpo_loss",
    "dpo_implicit_rewards",
    "simpo_implicit_rewards",
    "reward_metrics",
    "bradley_terry_loss",
]


# ----------------------------------------------------------------------------- input checks


def _sequence_tensor(name: str, value) -> torch.Tensor:
    """Check a (B,) tensor of per-example values (sequence log-probs, lengths)."""
    tensor = as_float_tensor(name, value)
    if tensor.dim() != 1:
        raise ValueError(
            f"{name} must be a 1-D tensor with one value per example, shape (B,), got shape "
            f"{tuple(tensor.shape)}; for per-token log-probs (B, T) use sequence_logps(token_logps, mask) first"
        )
    if tensor.numel() == 0:
        raise ValueError(f"{name} must hold at least one example, got an empty tensor")
    return tensor


def _sequence_tensors(**named) -> list[torch.Tensor]:
    """Check several (B,) tensors and that they all have the same shape, in the order given."""
    tensors = {name: _sequence_tensor(name, value) for name, value in named.items()}
    check_same_shape(**tensors)
    return list(tensors.values())


def _lengths(name: str, value, chosen_logps: torch.Tensor) -> torch.Tensor:
    """Check a (B,) tensor of response lengths: one per example, every entry > 0."""
    lengths = _sequence_tensor(name, value)
    check_same_shape(**{"chosen_logps": chosen_logps, name: lengths})
    check_all_positive(name, lengths)
    return lengths


def _label_smoothing(value) -> float:
    """Check the label-smoothing ε: the assumed probability that a preference label is flipped."""
    value = check_positive("label_smoothing", value, allow_zero=True)
    if value >= 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {value}")
    return value


# ----------------------------------------------------------------------------- shared pieces


def sequence_logps(token_logps, mask, *, average: bool = False) -> torch.Tensor:
    """Sequence log-probabilities from per-token ones: Σ_t mask_t · log π(y_t | x, y_<t).

    ``token_logps`` and ``mask`` are (B, T), the mask 1 on response tokens and 0 on prompt and
    padding. Returns (B,). With ``average=True`` returns the per-token mean, sum / mask.sum(-1),
    and every row must then select a token. The length-normalised losses (SimPO, ORPO, CPO's NLL)
    take the sums and the lengths mask.sum(-1) separately, so that convention stays visible.
    """
    token_logps = as_float_tensor("token_logps", token_logps, ndim=(2,))
    mask = as_mask("mask", mask, token_logps)
    totals = torch.where(mask.bool(), token_logps, torch.zeros_like(token_logps)).sum(-1)
    if not average:
        return totals
    lengths = mask.sum(-1)
    if (lengths == 0).any():
        row = int(torch.nonzero(lengths == 0)[0])
        raise ValueError(f"mask row {row} selects no tokens, so its average log-prob is undefined")
    return totals / lengths


def _logistic_loss(logits: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """Bradley–Terry negative log-likelihood with labels flipped with probability ε.

        ℓ(z) = −(1 − ε) log σ(z) − ε log σ(−z)

    ε = 0 is the plain −log σ(z) of DPO, SimPO and CPO; ε > 0 is the conservative form of
    Mitchell (2023), "A note on DPO with noisy preferences & relationship to IPO" (technical note).
    """
    return -(1 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)


def _log_ratios(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps):
    """Check the four (B,) inputs; return log π(y_w)/π_ref(y_w) and log π(y_l)/π_ref(y_l)."""
    chosen, rejected, ref_chosen, ref_rejected = _sequence_tensors(
        chosen_logps=chosen_logps,
        rejected_logps=rejected_logps,
        ref_chosen_logps=ref_chosen_logps,
        ref_rejected_logps=ref_rejected_logps,
    )
    return chosen - ref_chosen, rejected - ref_rejected


# ----------------------------------------------------------------------------- DPO and IPO


def dpo_loss(
    chosen_logps,
    rejected_logps,
    ref_chosen_logps,
    ref_rejected_logps,
    beta: float,
    *,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Direct Preference Optimization, per example (Rafailov et al., 2023, arXiv:2305.18290, eq. 7).

        L_DPO = −log σ(β h),   h = log [π(y_w|x) / π_ref(y_w|x)] − log [π(y_l|x) / π_ref(y_l|x)]

    y_w is the chosen response, y_l the rejected one; log-probs are sums over response tokens.
    When π = π_ref, h = 0 and the loss is log 2 for every example. The gradient (§4 of the paper)
    is  ∂L/∂log π(y_w) = −∂L/∂log π(y_l) = −β σ(−β h):  each pair is weighted by how wrongly the
    implicit reward β log π/π_ref orders it, so pairs already ordered with a wide margin stop
    pulling.

    ``label_smoothing`` = ε > 0 gives conservative DPO (cDPO; Mitchell, 2023), which assumes each
    label is flipped with probability ε:  −(1 − ε) log σ(β h) − ε log σ(−β h).  Its minimum is at
    a finite margin, β h = log((1 − ε)/ε), instead of h → ∞.

    TRL: ``DPOTrainer`` with ``loss_type="sigmoid"`` and the same ``beta`` (ε = 0; TRL 1.16's
    "sigmoid" has no label smoothing, and its "robust" type is a different, unbiased correction).
    """
    beta = check_positive("beta", beta)
    label_smoothing = _label_smoothing(label_smoothing)
    chosen_log_ratio, rejected_log_ratio = _log_ratios(
        chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps
    )
    return _logistic_loss(beta * (chosen_log_ratio - rejected_log_ratio), label_smoothing)


def ipo_loss(
    chosen_logps,
    rejected_logps,
    ref_chosen_logps,
    ref_rejected_logps,
    tau: float,
    *,
    chosen_lens=None,
    rejected_lens=None,
) -> torch.Tensor:
    """Identity Preference Optimization, per example (Azar et al., 2023, arXiv:2310.12036, eq. 17).

        L_IPO = (h − 1/(2τ))²,   h = log [π(y_w|x) π_ref(y_l|x)] / [π(y_l|x) π_ref(y_w|x)]

    A squared loss, so the margin is pulled to the finite target 1/(2τ) rather than pushed to
    infinity as in DPO: a small τ (weak regularisation) means a large target.

    With ``chosen_lens`` and ``rejected_lens`` (both or neither) each log-ratio is first divided by
    its response length, h = (log π(y_w) − log π_ref(y_w))/|y_w| − (log π(y_l) − log π_ref(y_l))/|y_l|.
    This is what TRL's ``DPOTrainer(loss_type="ipo")`` computes, with TRL's ``beta`` playing τ; the
    paper states the loss on sequence log-probs (no lengths), which is the default here.
    """
    tau = check_positive("tau", tau)
    chosen_log_ratio, rejected_log_ratio = _log_ratios(
        chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps
    )
    if (chosen_lens is None) != (rejected_lens is None):
        missing = "rejected_lens" if rejected_lens is None else "chosen_lens"
        raise ValueError(f"{missing} must be given too: pass both chosen_lens and rejected_lens, or neither")
    if chosen_lens is not None:
        chosen_log_ratio = chosen_log_ratio / _lengths("chosen_lens", chosen_lens, chosen_log_ratio)
        rejected_log_ratio = rejected_log_ratio / _lengths("rejected_lens", rejected_lens, chosen_log_ratio)
    return (chosen_log_ratio - rejected_log_ratio - 1 / (2 * tau)) ** 2


# ----------------------------------------------------------------------------- KTO


def kto_reference_point(mismatched_logps, ref_mismatched_logps) -> torch.Tensor:
    """KTO's reference point z0: a batch estimate of KL(π ‖ π_ref), detached and clamped at 0.

        z0 = max(0, mean_j [log π(y_j'|x_j) − log π_ref(y_j'|x_j)])

    (Ethayarajh et al., 2024, arXiv:2402.01306, §4.) The pairs (x_j, y_j') are *mismatched*: each
    prompt with another example's response. The texts are the batch's own responses, only paired
    with another prompt, so where the model barely reads the prompt the estimate is close to the
    batch mean of the log-ratios being trained (undesirable ones included, which the loss pushes
    down). No gradient flows through z0. In TRL these are the "KL" completions its collator builds
    by shifting the responses within the batch. Returns a 0-d tensor.
    """
    logps, ref_logps = _sequence_tensors(
        mismatched_logps=mismatched_logps, ref_mismatched_logps=ref_mismatched_logps
    )
    return (logps - ref_logps).mean().detach().clamp(min=0)


def kto_loss(
    logps,
    ref_logps,
    is_desirable,
    reference_point,
    beta: float,
    *,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> torch.Tensor:
    """Kahneman–Tversky Optimization, per example (Ethayarajh et al., 2024, arXiv:2402.01306, §4).

        r = log π(y|x) − log π_ref(y|x)
        v = λ_D σ(β (r − z0))   if y is desirable,    λ_U σ(β (z0 − r))   if undesirable
        L_KTO = λ_y − v = λ_D (1 − σ(β (r − z0)))  or  λ_U (1 − σ(β (z0 − r)))

    KTO learns from unpaired data: each example is one response with a thumbs up or down
    (``is_desirable``, a (B,) bool or 0/1 tensor). A desirable response is rewarded for rising
    above the reference point z0, an undesirable one for falling below it. ``reference_point`` is
    z0 (a float or 0-d tensor, usually ``kto_reference_point(...)``); it is detached and clamped
    at 0 here as in the paper, so passing a raw KL estimate is also correct. λ_D and λ_U
    (``desirable_weight``, ``undesirable_weight``) trade off the two kinds; the paper suggests
    λ_D n_D / (λ_U n_U) in [1, 4/3] for n_D desirable and n_U undesirable examples.

    Losses come back in input order. TRL's ``KTOTrainer`` (loss_type "kto") returns the same values
    reordered, desirable first, and averages them; its ``beta``, ``desirable_weight`` and
    ``undesirable_weight`` are the same numbers.
    """
    beta = check_positive("beta", beta)
    desirable_weight = check_positive("desirable_weight", desirable_weight, allow_zero=True)
    undesirable_weight = check_positive("undesirable_weight", undesirable_weight, allow_zero=True)
    logps, ref_logps = _sequence_tensors(logps=logps, ref_logps=ref_logps)
    desirable = as_mask("is_desirable", is_desirable, logps, allow_empty=True).bool()
    z0 = as_float_tensor("reference_point", reference_point, ndim=(0,)).detach().clamp(min=0)
    log_ratio = logps - ref_logps
    desirable_loss = desirable_weight * (1 - torch.sigmoid(beta * (log_ratio - z0)))
    undesirable_loss = undesirable_weight * (1 - torch.sigmoid(beta * (z0 - log_ratio)))
    return torch.where(desirable, desirable_loss, undesirable_loss)


# ----------------------------------------------------------------------------- reference-free: SimPO, CPO, ORPO


def simpo_loss(
    chosen_logps,
    rejected_logps,
    chosen_lens,
    rejected_lens,
    beta: float,
    gamma: float,
    *,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Simple Preference Optimization, per example (Meng et al., 2024, arXiv:2405.14734).

        L_SimPO = −log σ( β/|y_w| · log π(y_w|x) − β/|y_l| · log π(y_l|x) − γ )

    No reference model: the implicit reward is the length-averaged log-prob β/|y| log π(y|x), which
    is what generation ranks by and which length alone cannot raise (a summed reward can grow with
    the length; Meng et al. report DPO's outputs lengthening). γ ≥ 0 is a target reward margin. ``label_smoothing`` ε as in ``dpo_loss``.

    TRL: ``CPOTrainer`` with ``loss_type="simpo"``, ``cpo_alpha=0`` (no NLL term), the same
    ``beta`` and ``simpo_gamma`` = γ. TRL writes it as β (avg_w − avg_l − γ/β), the same number.
    """
    beta = check_positive("beta", beta)
    gamma = check_positive("gamma", gamma, allow_zero=True)
    label_smoothing = _label_smoothing(label_smoothing)
    chosen, rejected = _sequence_tensors(chosen_logps=chosen_logps, rejected_logps=rejected_logps)
    chosen_lens = _lengths("chosen_lens", chosen_lens, chosen)
    rejected_lens = _lengths("rejected_lens", rejected_lens, chosen)
    logits = beta * (chosen / chosen_lens - rejected / rejected_lens) - gamma
    return _logistic_loss(logits, label_smoothing)


def cpo_loss(
    chosen_logps,
    rejected_logps,
    chosen_lens,
    beta: float,
    *,
    nll_weight: float = 1.0,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Contrastive Preference Optimization, per example (Xu et al., 2024, arXiv:2401.08417, §3).

        L_CPO   = −log σ( β log π(y_w|x) − β log π(y_l|x) )  +  α · NLL(y_w)
        NLL(y_w) = −log π(y_w|x) / |y_w|

    DPO with the reference model dropped (a uniform reference), plus a behaviour-cloning term on
    the chosen response that keeps the policy close to the preferred data. α is ``nll_weight``.
    The NLL is the per-token mean over the chosen response (the usual SFT loss), so its scale does
    not grow with length; the paper writes −E log π(y_w|x). ``label_smoothing`` ε as in ``dpo_loss``.

    TRL: ``CPOTrainer`` with ``loss_type="sigmoid"``, ``cpo_alpha`` = α. TRL's NLL is one token mean
    pooled over the whole batch, which equals the mean of these per-example terms when the chosen
    responses have equal lengths.
    """
    beta = check_positive("beta", beta)
    nll_weight = check_positive("nll_weight", nll_weight, allow_zero=True)
    label_smoothing = _label_smoothing(label_smoothing)
    chosen, rejected = _sequence_tensors(chosen_logps=chosen_logps, rejected_logps=rejected_logps)
    chosen_lens = _lengths("chosen_lens", chosen_lens, chosen)
    preference = _logistic_loss(beta * (chosen - rejected), label_smoothing)
    return preference + nll_weight * (-chosen / chosen_lens)


def _log1m_exp(x: torch.Tensor) -> torch.Tensor:
    """log(1 − eˣ) for x ≤ 0, accurate at both ends.

    Near 0, log(−expm1(x)); far below, log1p(−eˣ) (Mächler, 2012, "Accurately computing log(1 − exp(−|a|))").
    """
    near_zero = x > -math.log(2)
    return torch.where(near_zero, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def _average_logps(chosen_logps, rejected_logps, chosen_lens, rejected_lens):
    """Length-averaged log-probs log P = log π(y|x)/|y| of both responses; must be ≤ 0 to be probabilities."""
    chosen, rejected = _sequence_tensors(chosen_logps=chosen_logps, rejected_logps=rejected_logps)
    for name, logps in (("chosen_logps", chosen), ("rejected_logps", rejected)):
        if (logps > 0).any():
            raise ValueError(f"{name} must be log-probabilities (<= 0), got a maximum of {logps.max().item():.4g}")
    chosen_avg = chosen / _lengths("chosen_lens", chosen_lens, chosen)
    rejected_avg = rejected / _lengths("rejected_lens", rejected_lens, chosen)
    return chosen_avg, rejected_avg


def _log_odds_ratio(chosen_avg: torch.Tensor, rejected_avg: torch.Tensor) -> torch.Tensor:
    """log odds(y_w) − log odds(y_l) from length-averaged log-probs, with log odds = log P − log(1 − P)."""
    return (chosen_avg - rejected_avg) - (_log1m_exp(chosen_avg) - _log1m_exp(rejected_avg))


def orpo_log_odds_ratio(chosen_logps, rejected_logps, chosen_lens, rejected_lens) -> torch.Tensor:
    """ORPO's log odds ratio, per example (Hong et al., 2024, arXiv:2403.07691, §3).

    In the paper's notation, with |y| the response's length in tokens::

        P(y|x)    = exp( log π(y|x) / |y| )            (length-averaged likelihood)
        odds(y|x) = P / (1 − P)
        log OR    = log odds(y_w|x) − log odds(y_l|x)
                  = (log P_w − log P_l) − (log(1 − P_w) − log(1 − P_l))

    Logged by TRL's ``ORPOTrainer`` (batch mean) as log_odds_chosen.
    """
    return _log_odds_ratio(*_average_logps(chosen_logps, rejected_logps, chosen_lens, rejected_lens))


def orpo_loss(chosen_logps, rejected_logps, chosen_lens, rejected_lens, *, lam: float = 0.1) -> torch.Tensor:
    """Odds Ratio Preference Optimization, per example (Hong et al., 2024, arXiv:2403.07691, eqs. 6-7).

        L_ORPO = L_SFT + λ · L_OR
        L_SFT  = −log P(y_w|x) = −log π(y_w|x) / |y_w|      (token-mean NLL of the chosen response)
        L_OR   = −log σ( log odds(y_w|x) − log odds(y_l|x) )  (see ``orpo_log_odds_ratio``)

    SFT and preference alignment in one stage, with no reference model: the NLL term does
    supervised fine-tuning while the odds-ratio term adds a mild penalty on the rejected style.
    Odds are taken of the length-averaged likelihood P, so ``chosen_logps``/``rejected_logps`` must
    be log-probabilities (≤ 0). λ is ``lam``.

    TRL: ``trl.experimental.orpo.ORPOTrainer`` with ``beta`` = λ; its ``odds_ratio_loss`` returns
    λ log σ(log OR), i.e. −λ L_OR. Its NLL term is computed differently: one token mean of the
    cross-entropy pooled over the batch and over prompt *and* chosen-response tokens.
    """
    lam = check_positive("lam", lam, allow_zero=True)
    chosen_avg, rejected_avg = _average_logps(chosen_logps, rejected_logps, chosen_lens, rejected_lens)
    return -chosen_avg - lam * F.logsigmoid(_log_odds_ratio(chosen_avg, rejected_avg))


# ----------------------------------------------------------------------------- rewards for logging


def dpo_implicit_rewards(
    chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """DPO's implicit rewards r̂(x, y) = β log [π(y|x) / π_ref(y|x)] (Rafailov et al., 2023, eq. 5).

    The partition function Z(x) cancels in every comparison, so these rewards are only meaningful
    as differences: their margin r̂_w − r̂_l = β h is what ``dpo_loss`` scores. Returns detached
    (chosen_rewards, rejected_rewards), each (B,), the numbers TRL logs as rewards/chosen and
    rewards/rejected (for IPO and KTO runs too, with their τ or β as β).
    """
    beta = check_positive("beta", beta)
    chosen_log_ratio, rejected_log_ratio = _log_ratios(
        chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps
    )
    return (beta * chosen_log_ratio).detach(), (beta * rejected_log_ratio).detach()


def simpo_implicit_rewards(
    chosen_logps, rejected_logps, chosen_lens, rejected_lens, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """SimPO's implicit rewards r(x, y) = β/|y| · log π(y|x) (Meng et al., 2024), detached.

    TRL's ``CPOTrainer`` logs β times its (length-averaged, for "simpo") log-probs, the same numbers.
    """
    beta = check_positive("beta", beta)
    chosen, rejected = _sequence_tensors(chosen_logps=chosen_logps, rejected_logps=rejected_logps)
    chosen_lens = _lengths("chosen_lens", chosen_lens, chosen)
    rejected_lens = _lengths("rejected_lens", rejected_lens, chosen)
    return (beta * chosen / chosen_lens).detach(), (beta * rejected / rejected_lens).detach()


def reward_metrics(chosen_rewards, rejected_rewards) -> dict[str, float]:
    """Batch summaries of paired rewards, under TRL's log keys so curves can be laid side by side.

    rewards/chosen and rewards/rejected are means; rewards/margins is mean(r_w − r_l);
    rewards/accuracies is the preference accuracy, the fraction of pairs with r_w > r_l
    (ties count as wrong, as in TRL).
    """
    chosen, rejected = _sequence_tensors(chosen_rewards=chosen_rewards, rejected_rewards=rejected_rewards)
    chosen, rejected = chosen.detach(), rejected.detach()
    return {
        "rewards/chosen": chosen.mean().item(),
        "rewards/rejected": rejected.mean().item(),
        "rewards/margins": (chosen - rejected).mean().item(),
        "rewards/accuracies": (chosen > rejected).float().mean().item(),
    }


def bradley_terry_loss(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> torch.Tensor:
    """The Bradley–Terry negative log-likelihood, mean over pairs (Ouyang et al. 2022, eq. 1):

        L = − (1/B) Σ_i log σ( r(x_i, y_w,i) − r(x_i, y_l,i) )

    ``chosen_rewards`` and ``rejected_rewards`` are (B,) tensors of r for the preferred and the
    other completion of each pair. ``F.logsigmoid`` keeps it finite for any margin.
    """
    if not (isinstance(chosen_rewards, torch.Tensor) and isinstance(rejected_rewards, torch.Tensor)):
        raise ValueError("chosen_rewards and rejected_rewards must be tensors")
    if chosen_rewards.dim() != 1 or chosen_rewards.shape != rejected_rewards.shape or chosen_rewards.numel() == 0:
        raise ValueError(f"chosen_rewards and rejected_rewards must be non-empty (B,) tensors of one shape, got "
                         f"{tuple(chosen_rewards.shape)} and {tuple(rejected_rewards.shape)}")
    return -F.logsigmoid(chosen_rewards - rejected_rewards).mean()
