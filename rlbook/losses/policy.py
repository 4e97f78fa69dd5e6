"""Online policy-gradient losses: one entry point, ``policy_loss``, whose variants are configurations.

Every variant estimates the same policy gradient E[A · ∇log π_θ(y_t)] from samples of π_old, and
differs only in three choices, each a function in this library:

1. the per-token surrogate: REINFORCE, PPO's clip, GSPO's sequence ratio, GMPO's geometric mean,
   SAPO's soft gate or CISPO's clipped IS weight (``rlbook.ratios``);
2. how the (B, T) grid of token losses is averaged (``rlbook.aggregation``);
3. optional extras: a KL term toward π_ref (``rlbook.kl``), an entropy bonus, AReaL's
   behaviour-policy weight for stale samples, and Clip-Cov / KL-Cov's treatment of the tokens whose
   log-probability and advantage covary most (``rlbook.entropy``).

=========  ==============================================  ===========================  ==========================
variant    per-token loss (minimised)                      defaults                     aggregation
=========  ==============================================  ===========================  ==========================
reinforce  −A · log π_θ                                    —                            seq_mean_token_sum
ppo        −min(rA, clip(r, 1−ε_low, 1+ε_high) A)          ε = 0.2 / 0.2                token_mean
grpo       as ppo                                          ε = 0.2 / 0.2                seq_mean_token_mean
dr_grpo    as ppo                                          ε = 0.2 / 0.2                seq_mean_token_sum_norm
dapo       as ppo                                          ε_low 0.2, ε_high 0.28       token_mean
gspo       as ppo, with GSPO-token's sequence ratio        ε_low 3e-4, ε_high 4e-4      seq_mean_token_mean
gmpo       −A_i · ρ_i (log-clipped geometric mean)         ε = 0.4 / 0.4 (log space)    seq_mean_token_mean
sapo       −f(r) · A, f(r) = σ(τ(r−1)) · 4/τ               τ_pos 1.0, τ_neg 1.05        seq_mean_token_mean
cispo      −sg[min(r, 1+ε_high)] · A · log π_θ             ε_high 4.0, no ε_low         token_mean
=========  ==============================================  ===========================  ==========================

Where the defaults come from: PPO's ε = 0.2 and its average over all timesteps of the batch
(Schulman et al. 2017, arXiv:1707.06347); GRPO
(Shao et al. 2024, arXiv:2402.03300); Dr.GRPO (Liu et al. 2025, arXiv:2503.20783, which also needs
``max_len``: its constant normaliser, the generation budget); DAPO's clip-higher 0.28 and token-level
loss (Yu et al. 2025, arXiv:2503.14476); GSPO's (3e-4, 4e-4) (Zheng et al. 2025, arXiv:2507.18071);
GMPO's (e^{−0.4}, e^{0.4}) (Zhao et al. 2025, arXiv:2507.20673); SAPO's τ (Gao et al. 2025,
arXiv:2511.20347); CISPO (MiniMax 2025, arXiv:2506.13585) with ScaleRL's cap ε_max = 5 (Khatri et al.
2025, arXiv:2510.13786). Each is overridable by keyword; a knob the variant does not use is an error.
"""

from __future__ import annotations

import torch

from rlbook._checks import as_float_tensor, check_choice, check_positive, check_same_shape
from rlbook.aggregation import AGGREGATION_MODES, aggregate, masked_mean, response_mask
from rlbook.entropy import clip_cov_mask, kl_cov_mask, token_covariance
from rlbook.kl import KL_ESTIMATORS, kl_estimate, kl_in_loss
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

VARIANTS = ("reinforce", "ppo", "grpo", "dr_grpo", "dapo", "gspo", "gmpo", "sapo", "cispo")
# Cui et al. 2025 (arXiv:2505.22617), §4: the share of tokens each control acts on, by default.
COV_CONTROLS = {"clip_cov": 2e-4, "kl_cov": 2e-3}

_CLIP = {"eps_low": 0.2, "eps_high": 0.2, "dual_clip": None}
VARIANT_DEFAULTS = {
    "reinforce": {"aggregation": "seq_mean_token_sum"},
    "ppo": {**_CLIP, "aggregation": "token_mean"},
    "grpo": {**_CLIP, "aggregation": "seq_mean_token_mean"},
    "dr_grpo": {**_CLIP, "aggregation": "seq_mean_token_sum_norm"},
    "dapo": {**_CLIP, "eps_high": 0.28, "aggregation": "token_mean"},
    "gspo": {**_CLIP, "eps_low": 3e-4, "eps_high": 4e-4, "aggregation": "seq_mean_token_mean"},
    "gmpo": {"eps_low": 0.4, "eps_high": 0.4, "aggregation": "seq_mean_token_mean"},
    "sapo": {"tau_pos": 1.0, "tau_neg": 1.05, "aggregation": "seq_mean_token_mean"},
    "cispo": {"eps_low": None, "eps_high": 4.0, "aggregation": "token_mean"},
}


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
) -> tuple[torch.Tensor, dict[str, float]]:
    """The online surrogate loss of ``variant``, and a dict of metrics. Minimise the loss.

    Args:
        - logp: (B, T) log π_θ of the sampled tokens, with gradient.
        - old_logp: (B, T) log π_old of the same tokens (the sampling policy; detached).
        - advantages: (B,) per-response or (B, T) per-token advantages (detached).
        - mask: (B, T) 0/1, 1 on response tokens; padding never changes the loss.
        - variant: one of ``VARIANTS``; its defaults are ``VARIANT_DEFAULTS[variant]`` (see the table above).
        - eps_low, eps_high, dual_clip, tau_pos, tau_neg: the variant's knobs (None = its default).
        - aggregation, max_len: override the aggregation mode; ``max_len`` is Dr.GRPO's constant.
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
    ``cov_frac`` (share of tokens Clip-Cov / KL-Cov acted on) with ``cov_control``.
    """
    check_choice("variant", variant, VARIANTS)
    check_choice("kl_estimator", kl_estimator, KL_ESTIMATORS)
    settings = _resolve_settings(
        variant,
        eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip, tau_pos=tau_pos, tau_neg=tau_neg,
        aggregation=aggregation,
    )
    logp = as_float_tensor("logp", logp, ndim=(2,))
    old_logp = as_float_tensor("old_logp", old_logp, ndim=(2,)).detach()
    check_same_shape(logp=logp, old_logp=old_logp)
    mask = response_mask(mask).to(logp.dtype)
    check_same_shape(logp=logp, mask=mask)
    token_advantages = _token_advantages(advantages, logp)
    ratio = token_ratio(logp, old_logp)

    if variant == "gmpo" and torch.as_tensor(advantages).dim() != 1:
        raise ValueError("advantages must be per-sequence, shape (B,), for variant 'gmpo' (its ratio is per sequence)")
    per_token, clip_low, clip_high, extra = _SURROGATES[variant](logp, old_logp, token_advantages, mask, settings)
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

    surrogate_value = aggregate(per_token.detach(), mask, settings["aggregation"], max_len=max_len).item()
    if ref_logp is not None or beta != 0.0:
        weight = ratio if kl_importance_weighted else None
        per_token = per_token + _kl_term(logp, ref_logp, mask, beta, kl_estimator, weight, extra)
    loss = aggregate(per_token, mask, settings["aggregation"], max_len=max_len)
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


def _reinforce(logp, old_logp, advantages, mask, settings):
    return reinforce_surrogate(logp, advantages), _nothing(mask), _nothing(mask), {}


def _ppo_family(logp, old_logp, advantages, mask, settings):
    """PPO / GRPO / Dr.GRPO / DAPO: the clipped surrogate on the token ratio."""
    return _clipped(token_ratio(logp, old_logp), advantages, mask, settings, extra={})


def _gspo(logp, old_logp, advantages, mask, settings):
    """GSPO: the clipped surrogate on GSPO-token's ratio (the sequence ratio's value on every token)."""
    sequence_ratio = gspo_sequence_ratio(logp.detach(), old_logp, mask)
    extra = _ratio_stats("seq_ratio", sequence_ratio)
    return _clipped(gspo_token_ratio(logp, old_logp, mask), advantages, mask, settings, extra=extra)


def _clipped(ratio, advantages, mask, settings, *, extra):
    eps_low, eps_high, dual_clip = settings["eps_low"], settings["eps_high"], settings["dual_clip"]
    per_token = clipped_surrogate(ratio, advantages, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip)
    value = ratio.detach()
    low, high = (value < 1 - eps_low) & (advantages < 0), (value > 1 + eps_high) & (advantages > 0)
    if dual_clip is not None:
        extra["clip_frac_dual"] = masked_mean(((value > dual_clip) & (advantages < 0)).to(mask.dtype), mask).item()
    return per_token, low, high, extra


def _gmpo(logp, old_logp, advantages, mask, settings):
    """−A_i · ρ_i on every token of response i; the clip indicators are per token, in log space."""
    sequence_advantages = advantages[:, 0]
    eps_low, eps_high = settings["eps_low"], settings["eps_high"]
    rho = gmpo_sequence_ratio(logp, old_logp, sequence_advantages, mask, eps_low=eps_low, eps_high=eps_high)
    per_token = (-sequence_advantages * rho).unsqueeze(1).expand_as(logp)
    log_ratio = (logp - old_logp).detach()
    low, high = (log_ratio < -eps_low) & (advantages < 0), (log_ratio > eps_high) & (advantages > 0)
    return per_token, low, high, _ratio_stats("seq_ratio", rho.detach())


def _sapo(logp, old_logp, advantages, mask, settings):
    gate = sapo_gate(token_ratio(logp, old_logp), advantages, tau_pos=settings["tau_pos"], tau_neg=settings["tau_neg"])
    return -gate * advantages, _nothing(mask), _nothing(mask), {"gate_mean": masked_mean(gate.detach(), mask).item()}


def _cispo(logp, old_logp, advantages, mask, settings):
    """−sg[r̂] · A · log π_θ; "clipped" here means the IS weight was truncated (any sign of A)."""
    ratio = token_ratio(logp, old_logp).detach()
    weight = cispo_weight(ratio, eps_low=settings["eps_low"], eps_high=settings["eps_high"])
    low = _nothing(mask) if settings["eps_low"] is None else ratio < 1 - settings["eps_low"]
    return -weight * advantages * logp, low, ratio > 1 + settings["eps_high"], {}


def _nothing(mask: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(mask, dtype=torch.bool)


_SURROGATES = {
    "reinforce": _reinforce,
    "ppo": _ppo_family,
    "grpo": _ppo_family,
    "dr_grpo": _ppo_family,
    "dapo": _ppo_family,
    "gspo": _gspo,
    "gmpo": _gmpo,
    "sapo": _sapo,
    "cispo": _cispo,
}


def _resolve_settings(variant: str, **overrides) -> dict:
    """The variant's defaults with the given (non-None) overrides; a knob it does not use is an error."""
    settings = dict(VARIANT_DEFAULTS[variant])
    for name, value in overrides.items():
        if value is None:
            continue
        if name not in settings:
            raise ValueError(f"{name} is not used by variant {variant!r} (its knobs: {sorted(settings)})")
        settings[name] = value
    check_choice("aggregation", settings["aggregation"], AGGREGATION_MODES)
    for name in ("eps_low", "eps_high", "tau_pos", "tau_neg"):
        if settings.get(name) is not None:
            settings[name] = check_positive(name, settings[name], allow_zero=not name.startswith("tau"))
    return settings


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
