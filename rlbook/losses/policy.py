"""Online policy-gradient losses: one entry point, ``policy_loss``, whose variants are registry entries.

Every variant estimates the same policy gradient E[A · ∇log π_θ(y_t)] from samples of π_old, and
differs only in three choices, each a function in this library:

1. the per-token surrogate: REINFORCE, PPO's clip, GSPO's sequence ratio, GMPO's geometric mean,
   SAPO's soft gate or CISPO's clipped IS weight (``rlbook.ratios``);
2. how the (B, T) grid of token losses is averaged (``rlbook.aggregation``);
3. optional extras: a KL term toward π_ref (``rlbook.kl``), an entropy bonus, AReaL's
   behaviour-policy weight for stale samples, and Clip-Cov / KL-Cov's treatment of the tokens whose
   log-probability and advantage covary most (``rlbook.entropy``).

A variant is the first two choices plus its knobs' defaults and its paper, held in one entry of
``rlbook.losses.registry``. The built-ins below are registered exactly as a reader registers a new one
(``register_policy_loss``), each beside its surrogate, so one screen holds a method's whole loss; and
``explain(name)`` prints any entry::

    rlbook.explain("grpo")     # per-token loss, defaults, aggregation, KL placement, paper and equation
    rlbook.losses.variant_names()

Each knob is overridable by keyword; a knob the variant does not use is an error.
"""

from __future__ import annotations

import torch

from rlbook._checks import as_float_tensor, check_choice, check_positive, check_same_shape
from rlbook.aggregation import AGGREGATION_MODES, aggregate, masked_mean, response_mask
from rlbook.entropy import clip_cov_band, clip_cov_mask, kl_cov_mask, token_covariance
from rlbook.kl import KL_ESTIMATORS, kl_estimate, kl_in_loss
from rlbook.losses.registry import VARIANT_DEFAULTS, Surrogate, policy_loss_variant, register_policy_loss, variant_names
from rlbook.ratios import (
    cispo_weight,
    decoupled_behaviour_weight,
    gmpo_sequence_ratio,
    gspo_sequence_ratio,
    gspo_token_ratio,
    sapo_gate,
    token_ratio,
)

__all__ = [
    "VARIANTS",
    "VARIANT_DEFAULTS",
    "COV_CONTROLS",
    "reinforce_surrogate",
    "clipped_surrogate",
    "value_loss",
    "policy_loss",
]

# Cui et al. 2025 (arXiv:2505.22617), §4: the share of tokens each control acts on, by default.
COV_CONTROLS = {"clip_cov": 2e-4, "kl_cov": 2e-3}


def reinforce_surrogate(logp, advantages) -> torch.Tensor:
    """Per-token REINFORCE loss −A · log π_θ(y_t) (Williams 1992): its gradient is −A ∇log π_θ."""
    logp = as_float_tensor("logp", logp)
    advantages = as_float_tensor("advantages", advantages)
    check_same_shape(logp=logp, advantages=advantages)
    return -advantages.detach() * logp


def clipped_surrogate(
    ratio, advantages, *, eps_low: float = 0.2, eps_high: float = 0.2, dual_clip: float | None = None
) -> torch.Tensor:
    """Per-token PPO loss −min(r A, clip(r, 1 − ε_low, 1 + ε_high) A), optionally dual-clipped.

    PPO's clipped surrogate (Schulman et al. 2017, arXiv:1707.06347, eq. 7) with DAPO's decoupled
    bounds ε_low / ε_high (Yu et al. 2025, arXiv:2503.14476). Dual clip (Ye et al. 2020,
    arXiv:1912.09729): for A < 0 the objective is also bounded below by c · A,

        objective = max(min(r A, clip(r) A), c A)   if A < 0,      c > 1,

    so a token with a huge ratio and a negative advantage cannot produce an unbounded update.
    """
    ratio = as_float_tensor("ratio", ratio)
    advantages = as_float_tensor("advantages", advantages).detach()
    check_same_shape(ratio=ratio, advantages=advantages)
    eps_low = check_positive("eps_low", eps_low, allow_zero=True)
    eps_high = check_positive("eps_high", eps_high, allow_zero=True)
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high)
    objective = torch.minimum(ratio * advantages, clipped * advantages)
    if dual_clip is not None:
        dual_clip = check_positive("dual_clip", dual_clip)
        if dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        objective = torch.where(advantages < 0, torch.maximum(objective, dual_clip * advantages), objective)
    return -objective


def value_loss(values, old_values, returns, mask, *, clip_eps: float | None = None, aggregation: str = "token_mean"):
    """Critic loss ½ (V − R)², or PPO's clipped version ½ max((V − R)², (V_clip − R)²).

    V_clip = V_old + clip(V − V_old, −ε, ε) keeps the critic near its previous prediction, as in
    OpenAI Baselines' PPO2 (see Huang et al. 2022, "The 37 Implementation Details of PPO", and
    Engstrom et al. 2020, arXiv:2005.12729, who found it does not help, which is why it is optional).
    All inputs are (B, T); returns a scalar aggregated with ``aggregation``.
    """
    values = as_float_tensor("values", values, ndim=(2,))
    old_values = as_float_tensor("old_values", old_values, ndim=(2,)).detach()
    returns = as_float_tensor("returns", returns, ndim=(2,)).detach()
    check_same_shape(values=values, old_values=old_values, returns=returns)
    loss = (values - returns) ** 2
    if clip_eps is not None:
        clip_eps = check_positive("clip_eps", clip_eps)
        clipped_values = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
        loss = torch.maximum(loss, (clipped_values - returns) ** 2)
    return 0.5 * aggregate(loss, mask, aggregation)


def policy_loss(
    logp,
    old_logp,
    advantages,
    mask,
    *,
    variant: str = "grpo",
    eps_low: float | None = None,
    eps_high: float | None = None,
    dual_clip: float | None = None,
    tau_pos: float | None = None,
    tau_neg: float | None = None,
    aggregation: str | None = None,
    max_len: int | None = None,
    ref_logp=None,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    kl_importance_weighted: bool = False,
    entropy=None,
    entropy_coef: float = 0.0,
    behaviour_logp=None,
    behaviour_weight_cap: float | None = None,
    cov_control: str | None = None,
    cov_fraction: float | None = None,
    cov_bounds: tuple[float, float] = (1.0, 5.0),
    kl_cov_coef: float = 1.0,
    cov_generator: torch.Generator | None = None,
    token_weights_fn=None,
    **knobs,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The online surrogate loss of ``variant``, and a dict of metrics. Minimise the loss.

    Args:
        - logp: (B, T) log π_θ of the sampled tokens, with gradient.
        - old_logp: (B, T) log π_old of the same tokens (the sampling policy; detached).
        - advantages: (B,) per-response or (B, T) per-token advantages (detached).
        - mask: (B, T) 0/1, 1 on response tokens; padding never changes the loss.
        - variant: a registered variant (``rlbook.losses.variant_names()``: the built-ins ``VARIANTS`` and any
          added with ``register_policy_loss``); its defaults are ``VARIANT_DEFAULTS[variant]`` (``explain(variant)``).
        - eps_low, eps_high, dual_clip, tau_pos, tau_neg, and ``**knobs`` (a registered variant's own
          knobs): the variant's knobs (None = its default).
        - aggregation, max_len: override the aggregation mode; ``max_len`` is Dr.GRPO's constant.
        - token_weights_fn: ``fn(mask, mode, max_len)`` → the (B, T) token weights of the aggregation, in place
          of ``rlbook.aggregation.token_weights`` (``aggregate(weights_fn=...)``).
        - ref_logp, beta, kl_estimator: add β · k per token (in-loss KL, ``rlbook.kl.kl_in_loss``);
          ``kl_importance_weighted`` multiplies k by π_θ/π_old as TRL's ``use_bias_correction_kl``.
        - entropy, entropy_coef: subtract coef × the masked mean of the given (B, T) entropies.
        - behaviour_logp, behaviour_weight_cap: AReaL's decoupled objective (Fu et al. 2025,
          arXiv:2505.24298). ``old_logp`` is then the proximal policy and each token's loss is
          weighted by sg[π_prox/π_behav] (``rlbook.ratios.decoupled_behaviour_weight``).
        - cov_control: None, "clip_cov" or "kl_cov" (Cui et al. 2025, arXiv:2505.22617, §4). Each
          token's covariance (log π − mean)(A − mean) over the batch (``rlbook.entropy.token_covariance``)
          picks the tokens that drive the entropy down: Clip-Cov drops the gradient of a random
          ``cov_fraction`` of the tokens (default 2e-4, at least one) whose covariance lies in
          ``cov_bounds`` and that the clip has not already stopped, drawn with ``cov_generator`` (default: torch's global generator); KL-Cov adds ``kl_cov_coef`` ·
          |log π_θ − log π_old| to the top ``cov_fraction`` (default 2e-3, at least one) by covariance.

    Metrics: ``policy_loss`` (the surrogate alone), ``clip_frac_low`` / ``clip_frac_high`` /
    ``clip_frac`` (tokens whose gradient the variant clips, or whose CISPO weight is truncated),
    ``ratio_mean`` / ``ratio_min`` / ``ratio_max`` (token ratio π_θ/π_old), ``seq_ratio_*`` for the
    sequence-level variants, ``approx_kl`` (KL(π_old ‖ π_θ), k3), and ``kl`` / ``entropy`` /
    ``behaviour_weight_mean`` when those inputs are given; ``token_cov`` (the batch covariance) and
    ``cov_frac`` (share of tokens Clip-Cov / KL-Cov acted on) with ``cov_control``, and for Clip-Cov
    ``cov_band_frac`` (share of tokens in its band and not already clipped: the pool it draws from).
    """
    entry = policy_loss_variant(variant)
    check_choice("kl_estimator", kl_estimator, KL_ESTIMATORS)
    settings = _resolve_knobs(entry, dict(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip, tau_pos=tau_pos,
                                          tau_neg=tau_neg, **knobs))
    aggregation = check_choice("aggregation", entry.aggregation if aggregation is None else aggregation,
                               AGGREGATION_MODES)
    logp = as_float_tensor("logp", logp, ndim=(2,))
    old_logp = as_float_tensor("old_logp", old_logp, ndim=(2,)).detach()
    check_same_shape(logp=logp, old_logp=old_logp)
    mask = response_mask(mask).to(logp.dtype)
    check_same_shape(logp=logp, mask=mask)
    token_advantages = _token_advantages(advantages, logp)
    ratio = token_ratio(logp, old_logp)

    if entry.sequence_advantages and torch.as_tensor(advantages).dim() != 1:
        raise ValueError(f"advantages must be per-sequence, shape (B,), for variant {variant!r} "
                         "(its ratio is per sequence)")
    per_token, clip_low, clip_high, extra = _surrogate(entry, logp, old_logp, token_advantages, mask, settings)
    if behaviour_logp is not None:
        behaviour_logp = as_float_tensor("behaviour_logp", behaviour_logp, ndim=(2,))
        weight = decoupled_behaviour_weight(old_logp, behaviour_logp, cap=behaviour_weight_cap)
        per_token = per_token * weight
        extra["behaviour_weight_mean"] = masked_mean(weight, mask).item()
    elif behaviour_weight_cap is not None:
        raise ValueError("behaviour_weight_cap needs behaviour_logp (the decoupled objective)")
    if cov_control is not None:
        per_token = _covariance_control(per_token, logp, old_logp, token_advantages, mask, cov_control,
                                        cov_fraction, cov_bounds, kl_cov_coef, cov_generator, extra,
                                        already_clipped=clip_low | clip_high)
    elif cov_fraction is not None:
        raise ValueError("cov_fraction needs cov_control ('clip_cov' or 'kl_cov')")

    surrogate_value = aggregate(per_token.detach(), mask, aggregation, max_len=max_len,
                                weights_fn=token_weights_fn).item()
    if ref_logp is not None or beta != 0.0:
        weight = ratio if kl_importance_weighted else None
        per_token = per_token + _kl_term(logp, ref_logp, mask, beta, kl_estimator, weight, extra)
    loss = aggregate(per_token, mask, aggregation, max_len=max_len, weights_fn=token_weights_fn)
    if entropy is not None or entropy_coef != 0.0:
        loss = loss - _entropy_bonus(entropy, entropy_coef, logp, mask, extra)

    metrics = {
        "policy_loss": surrogate_value,
        "clip_frac_low": masked_mean(clip_low.to(logp.dtype), mask).item(),
        "clip_frac_high": masked_mean(clip_high.to(logp.dtype), mask).item(),
        **_ratio_stats("ratio", ratio.detach(), mask),
        "approx_kl": masked_mean(kl_estimate(old_logp, logp.detach(), "k3"), mask).item(),
        **extra,
    }
    metrics["clip_frac"] = metrics["clip_frac_low"] + metrics["clip_frac_high"]
    return loss, metrics


def _surrogate(entry, logp, old_logp, advantages, mask, settings):
    """Call the variant's surrogate; return (per-token loss, clipped below, clipped above, extra metrics)."""
    result = entry.fn(logp, old_logp, advantages, mask, **settings)
    result = result if isinstance(result, Surrogate) else Surrogate(result)
    loss = result.loss
    if not isinstance(loss, torch.Tensor) or not loss.is_floating_point() or tuple(loss.shape) != tuple(logp.shape):
        got = f"shape {tuple(loss.shape)}, dtype {loss.dtype}" if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ValueError(f"variant {entry.name!r} must return the per-token loss, a float tensor of shape "
                         f"{tuple(logp.shape)} (or a Surrogate holding one); got {got}")
    if torch.is_grad_enabled() and logp.requires_grad and not loss.requires_grad:
        raise ValueError(f"variant {entry.name!r} returned a per-token loss with no gradient with respect to logp: "
                         "was it computed from detached tensors?")
    clip_low = _nothing(mask) if result.clipped_low is None else result.clipped_low
    clip_high = _nothing(mask) if result.clipped_high is None else result.clipped_high
    return loss, clip_low, clip_high, dict(result.metrics or {})


def _resolve_knobs(entry, overrides: dict) -> dict:
    """The variant's knob defaults with the given (non-None) overrides; a knob it does not use is an error."""
    settings = dict(entry.defaults)
    for name, value in overrides.items():
        if value is None:
            continue
        if name not in settings:
            raise ValueError(f"{name} is not used by variant {entry.name!r} (its knobs: {sorted(settings)})")
        settings[name] = value
    for name in ("eps_low", "eps_high", "tau_pos", "tau_neg"):  # the built-in knobs' meaning is fixed
        if settings.get(name) is not None:
            settings[name] = check_positive(name, settings[name], allow_zero=not name.startswith("tau"))
    return settings


def _covariance_control(per_token, logp, old_logp, advantages, mask, control, fraction, bounds, coef, generator,
                        extra, already_clipped):
    """Clip-Cov (detach the chosen tokens' loss) or KL-Cov (add coef·|log π_θ − log π_old| on them)."""
    check_choice("cov_control", control, tuple(COV_CONTROLS))
    fraction = COV_CONTROLS[control] if fraction is None else fraction
    covariance = token_covariance(logp, advantages, mask)
    extra["token_cov"] = masked_mean(covariance, mask).item()
    if control == "clip_cov":
        if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
            raise ValueError(f"cov_bounds must be (low, high), got {bounds!r}")
        chosen = clip_cov_mask(covariance, mask, fraction=fraction, low=bounds[0], high=bounds[1], generator=generator,
                               already_clipped=already_clipped)
        band = clip_cov_band(covariance, mask, low=bounds[0], high=bounds[1], already_clipped=already_clipped)
        extra["cov_band_frac"] = masked_mean(band.to(logp.dtype), mask).item()
        per_token = torch.where(chosen, per_token.detach(), per_token)
    else:
        coef = check_positive("kl_cov_coef", coef, allow_zero=True)
        chosen = kl_cov_mask(covariance, mask, fraction=fraction)
        per_token = per_token + coef * chosen.to(logp.dtype) * (logp - old_logp).abs()
    extra["cov_frac"] = masked_mean(chosen.to(logp.dtype), mask).item()
    return per_token


def _kl_term(logp, ref_logp, mask, beta, estimator, ratio, extra) -> torch.Tensor:
    """The per-token in-loss KL term β · k (logging the mean k in ``extra["kl"]``)."""
    beta = check_positive("beta", beta, allow_zero=True)
    if ref_logp is None:
        raise ValueError("ref_logp is required when beta > 0 (the KL term needs log π_ref)")
    ref_logp = as_float_tensor("ref_logp", ref_logp, ndim=(2,)).detach()
    check_same_shape(logp=logp, ref_logp=ref_logp)
    extra["kl"] = masked_mean(kl_estimate(logp.detach(), ref_logp, estimator), mask).item()
    return kl_in_loss(logp, ref_logp, beta=beta, estimator=estimator, ratio=ratio)


def _entropy_bonus(entropy, entropy_coef, logp, mask, extra) -> torch.Tensor:
    """coef × the masked mean entropy, to subtract from the loss (logging the mean in ``extra``)."""
    entropy_coef = check_positive("entropy_coef", entropy_coef, allow_zero=True)
    if entropy is None:
        raise ValueError("entropy is required when entropy_coef > 0 (pass the (B, T) token entropies)")
    entropy = as_float_tensor("entropy", entropy, ndim=(2,))
    check_same_shape(logp=logp, entropy=entropy)
    mean_entropy = masked_mean(entropy, mask)
    extra["entropy"] = mean_entropy.item()
    return entropy_coef * mean_entropy


def _nothing(mask: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(mask, dtype=torch.bool)


def _token_advantages(advantages, logp: torch.Tensor) -> torch.Tensor:
    """(B,) or (B, T) advantages as a detached (B, T) tensor."""
    advantages = as_float_tensor("advantages", advantages, ndim=(1, 2)).detach().to(logp.dtype)
    if advantages.dim() == 1:
        if advantages.shape[0] != logp.shape[0]:
            expected = f"({logp.shape[0]},) or {tuple(logp.shape)}"
            raise ValueError(f"advantages must have shape {expected}, got {tuple(advantages.shape)}")
        return advantages.unsqueeze(1).expand_as(logp)
    check_same_shape(logp=logp, advantages=advantages)
    return advantages


def _ratio_stats(prefix: str, ratio: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, float]:
    selected = ratio if mask is None else ratio[mask > 0]
    return {
        f"{prefix}_mean": selected.mean().item(),
        f"{prefix}_min": selected.min().item(),
        f"{prefix}_max": selected.max().item(),
    }


# --- the built-in variants: each registered beside its surrogate, as a reader registers one ----------------
CLIPPED_FORMULA = "ℓ_t = −min(r_t·A, clip(r_t, 1−ε_low, 1+ε_high)·A),  r_t = π_θ(y_t)/π_old(y_t)"
_CLIP = {"eps_low": 0.2, "eps_high": 0.2, "dual_clip": None}


@register_policy_loss(
    "reinforce", aggregation="seq_mean_token_sum", kl="none", formula="ℓ_t = −A·log π_θ(y_t)",
    doc="the score-function estimator: no ratio, no clip; a response's tokens summed, responses averaged",
    paper="Williams 1992 (Machine Learning 8:229–256): the REINFORCE estimator (r − b)·∇log π, its baseline b "
          "carried by the advantage (RLOO's leave-one-out b: Ahmadian et al. 2024, arXiv:2402.14740)")
def _reinforce(logp, old_logp, advantages, mask):
    return reinforce_surrogate(logp, advantages)


def _ppo_family(logp, old_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None) -> Surrogate:
    """PPO / GRPO / Dr.GRPO / DAPO: the clipped surrogate on the token ratio."""
    return _clipped(token_ratio(logp, old_logp), advantages, mask, eps_low, eps_high, dual_clip, metrics={})


register_policy_loss(
    "ppo", _ppo_family, defaults=_CLIP, aggregation="token_mean", kl="reward", formula=CLIPPED_FORMULA,
    doc="PPO's clipped surrogate on the token ratio, every token of the batch counting equally",
    paper="Schulman et al. 2017, arXiv:1707.06347, eq. 7 (L^CLIP, an average over the batch's timesteps), "
          "ε = 0.2 (§6.1); the KL per token in the reward as in InstructGPT, Ouyang et al. 2022, "
          "arXiv:2203.02155, eq. 2")
register_policy_loss(
    "grpo", _ppo_family, defaults=_CLIP, aggregation="seq_mean_token_mean", kl="loss", formula=CLIPPED_FORMULA,
    doc="PPO's clipped surrogate averaged within each response, then over responses; k3 KL in the loss",
    paper="Shao et al. 2024, arXiv:2402.03300, §4.1, eq. 3 (1/G Σ_i 1/|o_i| Σ_t of the clipped term minus β·KL) "
          "with the KL estimator k3 of eq. 4, β = 0.04; ε = 0.2 is PPO's")
register_policy_loss(
    "dr_grpo", _ppo_family, defaults=_CLIP, aggregation="seq_mean_token_sum_norm", kl="none",
    formula=CLIPPED_FORMULA,
    doc="PPO's clipped surrogate summed over each response and divided by a constant, so no token's weight "
        "depends on its response's length",
    paper="Liu et al. 2025, arXiv:2503.20783, §3.1: GRPO's objective with 1/|o_i| replaced by a constant (the "
          "generation budget, max_len) and no σ in the advantage (advantage='dr_grpo'); no KL term")
register_policy_loss(
    "dapo", _ppo_family, defaults={**_CLIP, "eps_high": 0.28}, aggregation="token_mean", kl="none",
    formula=CLIPPED_FORMULA,
    doc="PPO's clipped surrogate with the upper bound raised (clip-higher), every token of the batch counting "
        "equally",
    paper="Yu et al. 2025, arXiv:2503.14476: the DAPO objective of §3, clip-higher ε_low = 0.2, ε_high = 0.28 "
          "(§3.1, values §4.1), the token-level loss 1/Σ_i|o_i| (§3.3), no KL term (§2.3)")


def _clipped(ratio, advantages, mask, eps_low, eps_high, dual_clip, *, metrics) -> Surrogate:
    """``clipped_surrogate`` on ``ratio``, and the tokens whose gradient its clip stops on each side."""
    per_token = clipped_surrogate(ratio, advantages, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip)
    value = ratio.detach()
    low, high = (value < 1 - eps_low) & (advantages < 0), (value > 1 + eps_high) & (advantages > 0)
    if dual_clip is not None:
        metrics["clip_frac_dual"] = masked_mean(((value > dual_clip) & (advantages < 0)).to(mask.dtype), mask).item()
    return Surrogate(per_token, low, high, metrics)


@register_policy_loss(
    "gspo", defaults={"eps_low": 3e-4, "eps_high": 4e-4, "dual_clip": None}, aggregation="seq_mean_token_mean", kl="none",
    formula="ℓ_t = −min(s_t·A, clip(s_t, 1−ε_low, 1+ε_high)·A),  s_t = sg[s_i]·π_θ(y_t)/sg[π_θ(y_t)],  "
            "s_i = (π_θ(y_i)/π_old(y_i))^{1/|y_i|}",
    doc="the clipped surrogate on the length-normalised sequence ratio: a whole response is clipped or not",
    paper="Zheng et al. 2025, arXiv:2507.18071, eq. 5 with the sequence ratio s_i of eq. 7, in GSPO-token's "
          "form (§4.3: GSPO's gradient when each token has its response's advantage); clip range 3e-4 / 4e-4 "
          "(§5.1); no KL term")
def _gspo(logp, old_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None) -> Surrogate:
    """GSPO: the clipped surrogate on GSPO-token's ratio (the sequence ratio's value on every token)."""
    sequence_ratio = gspo_sequence_ratio(logp.detach(), old_logp, mask)
    return _clipped(gspo_token_ratio(logp, old_logp, mask), advantages, mask, eps_low, eps_high, dual_clip,
                    metrics=_ratio_stats("seq_ratio", sequence_ratio))


@register_policy_loss(
    "gmpo", defaults={"eps_low": 0.4, "eps_high": 0.4}, aggregation="seq_mean_token_mean", kl="none",
    sequence_advantages=True,
    formula="ℓ_t = −A_i·ρ_i on every token of response i,  ρ_i = exp((1/|y_i|) Σ_t ℓ*_t),  ℓ*_t = log r_t "
            "clipped to [−ε_low, ε_high] on the side the sign of A_i makes pessimistic",
    doc="the geometric mean of log-clipped token ratios times the response's advantage",
    paper="Zhao et al. 2025, arXiv:2507.20673: the GMPO objective, A_i times the geometric mean of the token "
          "ratios, each clipped in log space (one-sided by the sign of A_i, as PPO's) before the mean; range "
          "(e^−0.4, e^0.4); no KL term")
def _gmpo(logp, old_logp, advantages, mask, *, eps_low, eps_high) -> Surrogate:
    """−A_i · ρ_i on every token of response i; the clip indicators are per token, in log space."""
    sequence_advantages = advantages[:, 0]
    rho = gmpo_sequence_ratio(logp, old_logp, sequence_advantages, mask, eps_low=eps_low, eps_high=eps_high)
    per_token = (-sequence_advantages * rho).unsqueeze(1).expand_as(logp)
    log_ratio = (logp - old_logp).detach()
    low, high = (log_ratio < -eps_low) & (advantages < 0), (log_ratio > eps_high) & (advantages > 0)
    return Surrogate(per_token, low, high, _ratio_stats("seq_ratio", rho.detach()))


@register_policy_loss(
    "sapo", defaults={"tau_pos": 1.0, "tau_neg": 1.05}, aggregation="seq_mean_token_mean", kl="none",
    formula="ℓ_t = −f(r_t)·A,  f(r) = σ(τ(r−1))·4/τ,  τ = τ_pos if A > 0 else τ_neg",
    doc="a smooth sigmoid gate in place of the hard clip, decaying faster for negative advantages",
    paper="Gao et al. 2025, arXiv:2511.20347: SAPO's objective, the soft gate f in place of PPO's clip (f′(1) = 1: "
          "on-policy it is the policy gradient), τ_pos = 1.0, τ_neg = 1.05, averaged as GRPO's (1/G Σ_i 1/|y_i| "
          "Σ_t); no KL term")
def _sapo(logp, old_logp, advantages, mask, *, tau_pos, tau_neg) -> Surrogate:
    gate = sapo_gate(token_ratio(logp, old_logp), advantages, tau_pos=tau_pos, tau_neg=tau_neg)
    return Surrogate(-gate * advantages, metrics={"gate_mean": masked_mean(gate.detach(), mask).item()})


@register_policy_loss(
    "cispo", defaults={"eps_low": None, "eps_high": 4.0}, aggregation="token_mean", kl="none",
    formula="ℓ_t = −sg[min(r_t, 1+ε_high)]·A·log π_θ(y_t)  (sg[clip(r_t, 1−ε_low, 1+ε_high)] when ε_low is set)",
    doc="REINFORCE weighted by the clipped, stopped IS ratio: a clipped token keeps its gradient",
    paper="MiniMax 2025, arXiv:2506.13585, eq. 4 with the clipped weight of eq. 5, no lower bound, normalised "
          "by 1/Σ_i|o_i|; the cap 1 + ε_high = 5 is ScaleRL's ε_max (Khatri et al. 2025, arXiv:2510.13786); "
          "no KL term")
def _cispo(logp, old_logp, advantages, mask, *, eps_low, eps_high) -> Surrogate:
    """−sg[r̂] · A · log π_θ; "clipped" here means the IS weight was truncated (any sign of A)."""
    ratio = token_ratio(logp, old_logp).detach()
    weight = cispo_weight(ratio, eps_low=eps_low, eps_high=eps_high)
    low = _nothing(mask) if eps_low is None else ratio < 1 - eps_low
    return Surrogate(-weight * advantages * logp, low, ratio > 1 + eps_high)


# The book's built-in variants (registered above); variant_names() also lists a reader's.
VARIANTS = variant_names()
