"""Taking a recipe to scale: rlbook's online settings in TRL's and verl's words, and what a run costs in memory.

Lesson 21. Three pieces, each checkable:

* ``trl_grpo_config(config)``: the keyword arguments of TRL's ``GRPOConfig`` (von Werra et al., TRL) that
  express an ``OnlineConfig``. The names are checked against the installed ``trl`` (a test builds a real
  ``GRPOConfig`` from each preset), and the settings TRL has no key for are refused with a ``ValueError``
  naming the field, never dropped in silence.
* ``verl_overrides(config)``: the Hydra overrides of verl's PPO trainer (Sheng et al. 2024, "HybridFlow",
  arXiv:2409.19256) for the same settings, from verl's ``ppo_trainer.yaml`` / ``actor.yaml`` at the time of
  writing. verl is not installed here, so these names are documentation, not tested code: key names move
  between verl releases, check them against the version you run.
* ``training_memory(...)``: bytes per role — policy weights, gradients, Adam's two moments and fp32 master
  weights (mixed precision as in Micikevicius et al. 2018, arXiv:1710.03740; the 16 bytes per parameter that
  ZeRO, Rajbhandari et al. 2020, arXiv:1910.02054, §3, starts from), the frozen reference, a critic, and
  the KV cache of the rollout — for a model whose parameters are counted exactly by building its
  ``transformers`` class on the meta device (no memory, no download).

Where rlbook and TRL use different conventions for the same knob, the mapping converts and says so in a
comment and ``trl_convention_changes(config)`` lists what it changed: CISPO's cap (rlbook caps the ratio at
1 + ε_high; TRL clamps at ``epsilon_high`` itself), GRPO's σ (TRL always uses Bessel's n − 1, rlbook's
``unbiased_std`` chooses) and the KL gradient.
"""

from __future__ import annotations

import copy
import math

import torch

from rlbook.evidence import clustered_se
from rlbook.losses.policy import COV_CONTROLS, VARIANT_DEFAULTS
from rlbook.models import count_parameters
from rlbook.models.lora import lora_config
from rlbook.rollout import rollout_logprobs
from rlbook.tasks.verifiers import completion_text
from rlbook.trainers.config import OnlineConfig

__all__ = ["ACTIVATION_BYTES_PER_LAYER", "ADAM_AND_MASTER_BYTES", "HUB_SHAPES", "MEMORY_ROLES", "activation_bytes",
           "gated_mlp_activation_coefficient", "generation_waves", "gpus_needed", "kv_bytes_per_token",
           "logits_bytes", "measure_step_memory", "memory_total", "optimizer_bytes_per_parameter",
           "paired_ratio_change", "parameters_of_shape", "problem_clusters", "recording", "right_and_wrong_replies",
           "sampler_logprob_mismatch", "train_with_trl", "training_memory", "trl_convention_changes", "trl_grpo_config", "trl_optimizer_steps_per_step",
           "trl_policy_loss",
           "trl_sampler_rewards", "verl_overrides"]

# TRL's ``loss_type`` for each (variant, aggregation) rlbook can hand over.
_TRL_LOSS_TYPE = {
    ("grpo", "seq_mean_token_mean"): "grpo",
    ("ppo", "seq_mean_token_mean"): "grpo",
    ("gspo", "seq_mean_token_mean"): "grpo",      # + importance_sampling_level="sequence"
    ("dr_grpo", "seq_mean_token_sum_norm"): "dr_grpo",
    ("grpo", "seq_mean_token_sum_norm"): "dr_grpo",
    ("dapo", "token_mean"): "dapo",
    ("grpo", "token_mean"): "dapo",
    ("ppo", "token_mean"): "dapo",
    ("cispo", "token_mean"): "cispo",
    ("sapo", "seq_mean_token_mean"): "sapo",
}
# TRL's loss types whose clipped surrogate takes ``delta`` (GRPOTrainer._compute_loss, trl 1.16).
_TRL_DELTA_LOSS_TYPES = ("grpo", "dr_grpo", "dapo")
# rlbook's aggregation modes in verl's words (actor.loss_agg_mode).
_VERL_AGGREGATION = {
    "token_mean": "token-mean",
    "seq_mean_token_mean": "seq-mean-token-mean",
    "seq_mean_token_sum": "seq-mean-token-sum",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}
# rlbook's KL estimators in verl's words (actor.kl_loss_type / algorithm.kl_penalty).
_VERL_KL = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}


def _unsupported(field: str, value, engine: str, why: str) -> ValueError:
    return ValueError(f"{field}={value!r} has no {engine} equivalent: {why}")


def _loss_settings(config: OnlineConfig) -> dict:
    """The variant's defaults with the config's overrides: what ``policy_loss`` will really use."""
    return {**VARIANT_DEFAULTS[config.variant], **config.loss_overrides()}


def _check_config(config) -> OnlineConfig:
    if not isinstance(config, OnlineConfig):
        raise ValueError(f"config must be an rlbook OnlineConfig (rlbook.trainers.preset(...)), got {type(config).__name__}")
    return config


def trl_grpo_config(config: OnlineConfig, *, num_processes: int = 1) -> dict:
    """Keyword arguments of ``trl.GRPOConfig`` for ``config`` (add output_dir, max_steps, logging yourself).

    One rlbook step (``prompts_per_step`` × ``group_size`` completions, ``epochs`` passes in minibatches of
    ``minibatch_size``) is one TRL generation batch: ``steps_per_generation`` = minibatches per batch,
    ``num_iterations`` = epochs, and ``per_device_train_batch_size`` = the minibatch divided by
    ``num_processes`` (the processes ``accelerate launch`` starts: TRL's batch size is per device, so
    without the division N processes would train on an N times larger minibatch). Raises ``ValueError``
    for a setting TRL cannot express (a critic, GMPO, the KL in the reward, Clip-Cov, dynamic sampling,
    advantage filtering or noise, the soft overlong penalty as a config key, a dual clip below 1 + ε_high).
    An entropy bonus maps to ``entropy_coef`` (TRL's is coef × the mean per-token entropy for every
    loss_type, as rlbook's); PPO's dual clip at c (Ye et al. 2020, arXiv:1912.09729) to ``delta=c``, which
    in TRL's clipped loss is the same function of r and A when c ≥ 1 + ε_high.
    """
    config = _check_config(config)
    settings = _loss_settings(config)
    aggregation = settings["aggregation"]
    loss_type = _TRL_LOSS_TYPE.get((config.variant, aggregation))
    if loss_type is None:
        raise _unsupported("variant", f"{config.variant} with aggregation {aggregation}", "TRL GRPOConfig",
                           "GRPOTrainer has no such loss_type")
    if config.advantage not in ("grpo", "dr_grpo"):
        raise _unsupported("advantage", config.advantage, "TRL GRPOConfig",
                           "GRPOTrainer's advantage is the group mean, scaled or not (RLOO has its own trainer)")
    refused = {
        # TRL's ``delta`` clamps r from above before the clipped min: −min(min(r, δ)·A, clip(r)·A). For A > 0 the
        # clipped term binds first when δ ≥ 1 + ε_high; for A < 0 and r > δ the loss is the constant −δ·A, PPO's
        # dual clip at c = δ (Ye et al. 2020, arXiv:1912.09729, eq. 6). Below 1 + ε_high δ would also cap A > 0.
        "dual_clip": (config.dual_clip is not None and (loss_type not in _TRL_DELTA_LOSS_TYPES
                                                        or config.dual_clip < 1.0 + settings["eps_high"]),
                      f"TRL's delta is PPO's dual clip only for loss_type {'/'.join(_TRL_DELTA_LOSS_TYPES)} and "
                      "delta ≥ 1 + epsilon_high (below that it also caps r where A > 0)"),
        "kl_placement": (config.kl_beta > 0 and config.kl_placement != "loss", "TRL puts β·KL in the loss"),
        "kl_estimator": (config.kl_beta > 0 and config.kl_estimator != "k3", "TRL's KL term is k3"),
        "cov_control": (config.cov_control is not None, "GRPOConfig has no Clip-Cov / KL-Cov"),
        "dynamic_sampling": (config.dynamic_sampling, "GRPOTrainer does not resample flat groups"),
        "advantage_filter": (config.advantage_filter is not None, "no advantage filter in GRPOConfig"),
        "advantage_noise": (config.advantage_noise > 0, "no advantage noise in GRPOConfig"),
        "overlong_filter": (config.overlong_filter, "rlbook does not translate overlong filtering to TRL"),
        "overlong": (config.overlong is not None,
                     "the soft overlong penalty is a reward function in TRL, not a config key"),
        "format_reward_weight": (config.format_reward_weight > 0,
                                 "pass the format reward as a second reward function with reward_weights"),
    }
    for field, (is_set, why) in refused.items():
        if is_set:
            raise _unsupported(field, getattr(config, field), "TRL GRPOConfig", why)
    batch = config.batch_size
    minibatch = config.minibatch_size or batch
    if batch % minibatch:
        raise ValueError(f"minibatch_size must divide prompts_per_step × group_size = {batch}, got {minibatch}")
    if not isinstance(num_processes, int) or isinstance(num_processes, bool) or num_processes < 1:
        raise ValueError(f"num_processes must be a positive int, got {num_processes!r}")
    if minibatch % num_processes:
        raise ValueError(f"num_processes={num_processes} must divide the minibatch of {minibatch} completions "
                         "(per_device_train_batch_size = minibatch / num_processes); change minibatch_size or "
                         "the number of processes")
    kwargs = dict(
        num_generations=config.group_size,
        per_device_train_batch_size=minibatch // num_processes,
        gradient_accumulation_steps=1,
        steps_per_generation=batch // minibatch,
        num_iterations=config.epochs,
        max_completion_length=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        learning_rate=config.lr,
        warmup_steps=config.warmup_steps,
        lr_scheduler_type="constant_with_warmup" if config.warmup_steps else "constant",  # rlbook's schedule
        max_grad_norm=config.max_grad_norm or 0.0,  # the HF Trainer clips only when > 0
        beta=config.kl_beta,
        # rlbook's in-loss KL is β·k3 (its gradient ∇k3); TRL ≥ 1.x multiplies k by a differentiable π_θ/π_old by
        # default (use_bias_correction_kl=True), which changes the KL gradient even on-policy. Turn it off.
        use_bias_correction_kl=False,
        loss_type=loss_type,
        # TRL divides by the group's Bessel std (n − 1); rlbook by the population std unless unbiased_std.
        scale_rewards="group" if config.advantage == "grpo" else "none",
        seed=config.seed,
        activation_checkpointing=False,  # TRL turns it on by default (recomputes activations); rlbook never does
    )
    if config.entropy_coef > 0:
        # TRL subtracts entropy_coef × the mean per-token entropy whatever the loss_type (GRPOConfig, trl 1.16):
        # rlbook's bonus, coef × the masked mean (tests/test_trl_policy_crosscheck.py, "grpo_entropy_bonus")
        kwargs["entropy_coef"] = config.entropy_coef
    if config.dual_clip is not None:
        kwargs["delta"] = config.dual_clip  # PPO's dual clip, for δ ≥ 1 + ε_high (checked above)
    if config.variant == "gspo":
        kwargs["importance_sampling_level"] = "sequence"
    if config.variant == "sapo":
        kwargs.update(sapo_temperature_pos=settings["tau_pos"], sapo_temperature_neg=settings["tau_neg"])
    elif config.variant == "cispo":
        kwargs["epsilon_high"] = 1.0 + settings["eps_high"]  # TRL clamps r at epsilon_high; rlbook at 1 + ε_high
    elif config.variant in ("grpo", "ppo", "gspo", "dr_grpo", "dapo"):
        kwargs.update(epsilon=settings["eps_low"], epsilon_high=settings["eps_high"])
    return kwargs



def trl_convention_changes(config: OnlineConfig) -> list[str]:
    """What ``trl_grpo_config(config)`` converts rather than copies, one line each: the changes a port makes.

    * CISPO's cap: rlbook caps the weight at 1 + ε_high (MiniMax-M1, arXiv:2506.13585, eqs. 4–5); TRL's
      ``epsilon_high`` is the cap itself (ScaleRL's ε_max, Khatri et al. 2025, arXiv:2510.13786), so it is set
      to 1 + ε_high.
    * GRPO's σ: TRL divides by the group's Bessel σ (n − 1); with ``unbiased_std=False`` rlbook divides by the
      population σ, and TRL cannot, so every advantage is multiplied by √((n − 1)/n). Alone that rescales the
      loss (Adam nearly ignores it); beside a KL term or entropy bonus it shifts their weight against the
      policy gradient by √(n/(n − 1)), a different algorithm, and the line says so.
    * The KL gradient: TRL's default ``use_bias_correction_kl=True`` weights k3 by a differentiable π_θ/π_old,
      whose expected gradient is the reverse KL's; the mapping turns it off (rlbook's ∇k3).

    Empty when the translation is word for word. Raises ``ValueError`` where ``trl_grpo_config`` would.
    """
    kwargs = trl_grpo_config(config)
    settings = _loss_settings(config)
    changes = []
    if config.variant == "cispo":
        changes.append(f"CISPO cap: rlbook's 1 + eps_high = {1.0 + settings['eps_high']:g} → "
                       f"epsilon_high={kwargs['epsilon_high']!r} (TRL caps at epsilon_high itself)")
    if config.advantage == "grpo" and not config.unbiased_std:
        n = config.group_size
        line = (f"σ: population → Bessel's (TRL has no population σ): advantages × √({n - 1}/{n}) = "
                f"{math.sqrt((n - 1) / n):.3f}")
        terms = [name for name, value in (("KL", config.kl_beta), ("entropy", config.entropy_coef)) if value > 0]
        line += (f"; the {' and '.join(terms)} term weighs √({n}/{n - 1}) = {math.sqrt(n / (n - 1)):.3f} × more "
                 "against the policy gradient: set unbiased_std=True for the same algorithm" if terms
                 else "; a rescale of the loss, no other term")
        changes.append(line)
    if config.kl_beta > 0:
        changes.append("KL gradient: use_bias_correction_kl=False (TRL's default weights k3 by π_θ/π_old, "
                       "the reverse KL's gradient)")
    return changes

# rlbook's variants as verl's ``actor.policy_loss.loss_mode`` (registered in verl's
# ``verl/trainer/ppo/core_algos.py`` with ``@register_policy_loss``): "vanilla" is PPO's clipped surrogate,
# "gpg" the plain −A·log π (REINFORCE), "geo_mean" GMPO, "cispo" and "sapo" as named. GSPO, GMPO and SAPO
# fix their own aggregation in verl (seq-mean-token-mean, or the plain mean over sequences for geo_mean,
# which equals it for one ratio per sequence), so rlbook's must be the same or the variant is refused.
_VERL_LOSS_MODE = {"ppo": "vanilla", "grpo": "vanilla", "dr_grpo": "vanilla", "dapo": "vanilla",
                   "reinforce": "gpg", "gspo": "gspo", "gmpo": "geo_mean", "cispo": "cispo", "sapo": "sapo"}
_VERL_FIXED_AGGREGATION = {"gspo": "seq_mean_token_mean", "gmpo": "seq_mean_token_mean", "sapo": "seq_mean_token_mean"}
_VERL_ESTIMATOR = {"grpo": "grpo", "dr_grpo": "grpo", "rloo": "rloo", "reinforce_pp": "reinforce_plus_plus",
                   "gae": "gae"}


def verl_overrides(config: OnlineConfig) -> dict:
    """Hydra overrides of verl's PPO trainer for ``config``: every setting translated or refused by name.

    Names are verl's (Sheng et al. 2024, arXiv:2409.19256), checked against its source at the time of writing
    (``ppo_trainer.yaml``, ``actor/actor.yaml``, ``model/hf_model.yaml``, ``core_algos.py``'s policy losses)
    and its DAPO recipe: dynamic sampling is ``algorithm.filter_groups.*`` and the soft overlong penalty
    ``reward_model.overlong_buffer.*`` with the ``dapo`` reward manager (newer verl releases spell the latter
    ``reward_model.reward_kwargs.overlong_buffer_cfg.*``). verl is not a dependency, so these are documentation,
    not a tested interface: check them against the release you run. Raises ``ValueError`` naming the field
    for a setting verl's configuration cannot express: no advantage ("none"), advantage filtering or noise,
    an entropy bonus under an aggregation other than token mean (verl aggregates its entropy term with
    ``loss_agg_mode``, rlbook's is the token mean), a dual clip on a loss other than "vanilla",
    a format reward weight (a reward function in verl), covariance control on a non-PPO loss, an aggregation
    GSPO / GMPO / SAPO do not use in verl, a minibatch that is not whole groups, or an overlong window that
    does not end at the generation budget.

    Conventions that differ without a key to change them (read before comparing runs): verl's GRPO σ is
    Bessel's (n − 1), rlbook's only with ``unbiased_std``; verl's "vanilla" loss always applies the dual clip
    at ``clip_ratio_c`` (default 3) to tokens with A < 0, and its "kl_cov" adds its penalty to the unclipped
    surrogate — both differ from rlbook only on tokens whose ratio has moved, which a single on-policy
    step (one epoch, one minibatch) never has.
    """
    config = _check_config(config)
    settings = _loss_settings(config)
    actor, algorithm = "actor_rollout_ref.actor", "algorithm"
    if config.advantage not in _VERL_ESTIMATOR:
        raise _unsupported("advantage", config.advantage, "verl", "verl always uses an advantage estimator")
    for field, is_set, why in (
            ("advantage_filter", config.advantage_filter is not None, "no key for it in ppo_trainer.yaml"),
            ("advantage_noise", config.advantage_noise > 0, "no key for it in ppo_trainer.yaml"),
            ("overlong_filter", config.overlong_filter, "rlbook does not translate overlong filtering to verl"),
            ("format_reward_weight", config.format_reward_weight > 0,
             "verl's reward is one function (custom_reward_function): add the weighted format reward there")):
        if is_set:
            raise _unsupported(field, getattr(config, field), "verl", why)
    if config.entropy_coef > 0 and settings["aggregation"] != "token_mean":
        # verl aggregates its entropy bonus with loss_agg_mode (dp_actor: agg_loss(entropy, ..., loss_agg_mode));
        # rlbook's is the token mean whatever the aggregation: the same only for token-mean
        raise _unsupported("entropy_coef", f"{config.entropy_coef} with aggregation {settings['aggregation']}",
                           "verl", "verl aggregates the entropy bonus as the loss (loss_agg_mode), rlbook takes its "
                           "token mean: equal only for aggregation token_mean")
    fixed = _VERL_FIXED_AGGREGATION.get(config.variant)
    if fixed is not None and settings["aggregation"] != fixed:
        raise _unsupported("aggregation", settings["aggregation"], "verl",
                           f"verl's {_VERL_LOSS_MODE[config.variant]} loss always aggregates as {fixed}")
    loss_mode = _VERL_LOSS_MODE[config.variant]
    if config.cov_control is not None:
        if loss_mode != "vanilla":
            raise _unsupported("cov_control", f"{config.cov_control} with variant {config.variant}", "verl",
                               "verl's clip_cov / kl_cov loss modes replace the vanilla PPO loss")
        loss_mode = config.cov_control
    batch = config.batch_size
    minibatch = config.minibatch_size or batch
    if minibatch % config.group_size:
        raise _unsupported("minibatch_size", minibatch, "verl",
                           f"ppo_mini_batch_size counts prompts (whole groups of {config.group_size})")
    overrides = {
        f"{algorithm}.adv_estimator": _VERL_ESTIMATOR[config.advantage],
        f"{algorithm}.norm_adv_by_std_in_grpo": config.advantage != "dr_grpo",
        "data.train_batch_size": config.prompts_per_step,
        "actor_rollout_ref.rollout.n": config.group_size,
        "data.max_response_length": config.max_new_tokens,
        "actor_rollout_ref.rollout.temperature": config.temperature,
        "actor_rollout_ref.rollout.top_p": config.top_p,
        f"{actor}.ppo_mini_batch_size": minibatch // config.group_size,
        f"{actor}.ppo_epochs": config.epochs,
        f"{actor}.optim.lr": config.lr,
        f"{actor}.optim.lr_warmup_steps": config.warmup_steps,
        # verl always calls clip_grad_norm_(max_norm=grad_clip): 0 would zero every gradient, inf clips nothing
        f"{actor}.grad_clip": config.max_grad_norm if config.max_grad_norm is not None else float("inf"),
        f"{actor}.loss_agg_mode": _VERL_AGGREGATION[settings["aggregation"]],
        f"{actor}.policy_loss.loss_mode": loss_mode,
        f"{actor}.entropy_coeff": config.entropy_coef,
    }
    if settings["aggregation"] == "seq_mean_token_sum_norm":
        # Dr.GRPO's constant L is the budget; verl divides by loss_scale_factor, or the padded width when unset
        overrides[f"{actor}.loss_scale_factor"] = config.max_new_tokens
    overrides.update(_verl_clip(config, settings, actor, loss_mode))
    if config.kl_beta > 0 and config.kl_placement == "loss":
        overrides.update({f"{actor}.use_kl_loss": True, f"{actor}.kl_loss_coef": config.kl_beta,
                          f"{actor}.kl_loss_type": _VERL_KL[config.kl_estimator]})
    else:
        overrides[f"{actor}.use_kl_loss"] = False
        if config.kl_beta > 0:
            overrides.update({f"{algorithm}.use_kl_in_reward": True, f"{algorithm}.kl_ctrl.kl_coef": config.kl_beta,
                              f"{algorithm}.kl_penalty": _VERL_KL[config.kl_estimator]})
    if config.cov_control is not None:
        policy_loss = f"{actor}.policy_loss"
        fraction = config.cov_fraction if config.cov_fraction is not None else COV_CONTROLS[config.cov_control]
        if config.cov_control == "clip_cov":
            overrides.update({f"{policy_loss}.clip_cov_ratio": fraction,
                              f"{policy_loss}.clip_cov_lb": config.cov_bounds[0],
                              f"{policy_loss}.clip_cov_ub": config.cov_bounds[1]})
        else:
            overrides.update({f"{policy_loss}.kl_cov_ratio": fraction,
                              f"{policy_loss}.ppo_kl_coef": config.kl_cov_coef})
    overrides.update(_verl_dynamic_sampling(config))
    overrides.update(_verl_overlong(config))
    if config.lora:
        model = "actor_rollout_ref.model"
        peft = lora_config(r=config.lora)  # rlbook's LoRA: the same rank, alpha and target modules
        overrides.update({f"{model}.lora_rank": peft.r, f"{model}.lora_alpha": peft.lora_alpha,
                          f"{model}.target_modules": sorted(peft.target_modules)})
    if config.advantage == "gae":
        overrides.update({f"{algorithm}.gamma": config.gamma, f"{algorithm}.lam": config.lam,
                          "critic.optim.lr": config.critic_lr})
    return overrides


def _verl_clip(config: OnlineConfig, settings: dict, actor: str, loss_mode: str = "vanilla") -> dict:
    """verl's clip keys: PPO's bounds (also GSPO's and, in log space, GMPO's: the same in both), CISPO's
    weight bounds, SAPO's temperatures, and the dual clip: ``clip_ratio_c``, which only verl's "vanilla"
    loss reads (max(min(r·A, clip(r)·A), c·A) for A < 0, rlbook's ``dual_clip``); on another loss mode a
    dual clip is refused rather than written to a key that loss ignores."""
    if config.dual_clip is not None and loss_mode != "vanilla":
        raise _unsupported("dual_clip", config.dual_clip, "verl",
                           f"only verl's vanilla loss applies clip_ratio_c; its {loss_mode} loss has no dual clip")
    if config.variant == "sapo":
        return {f"{actor}.tau_pos": settings["tau_pos"], f"{actor}.tau_neg": settings["tau_neg"]}
    if settings.get("eps_high") is None:
        return {}  # REINFORCE: nothing to clip
    # verl's cispo clamps the weight to [1 − clip_ratio_low, 1 + clip_ratio_high]; rlbook's default has no
    # lower bound, which clip_ratio_low = 1 (a floor at 0, below every ratio) expresses exactly.
    low = settings["eps_low"] if settings["eps_low"] is not None else 1.0
    clip = {f"{actor}.clip_ratio_low": low, f"{actor}.clip_ratio_high": settings["eps_high"]}
    if config.dual_clip is not None:
        clip[f"{actor}.clip_ratio_c"] = config.dual_clip
    return clip


def _verl_dynamic_sampling(config: OnlineConfig) -> dict:
    """DAPO's dynamic sampling in verl: ``algorithm.filter_groups`` (verl's DAPO recipe).

    rlbook drops groups whose rewards, as the advantages see them (verifier + format + overlong, minus the
    KL when it is in the reward), are all equal: verl's metric ``seq_final_reward`` (the summed
    ``token_level_rewards``); with ``dynamic_sampling="correct"`` it drops groups whose correctness is all
    equal, verl's metric ``acc`` (DAPO's 0 < #correct < G). rlbook samples ``prompts_per_step`` prompts a round and at most
    ``max_resample_rounds`` extra rounds; verl counts generation batches, the first included. When the
    rounds run out rlbook trains on the groups it has, where verl's recipe stops with an error.
    """
    if not config.dynamic_sampling:
        return {"algorithm.filter_groups.enable": False}
    return {"algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric":
            "acc" if config.dynamic_sampling == "correct" else "seq_final_reward",
            "algorithm.filter_groups.max_num_gen_batches": config.max_resample_rounds + 1,
            "data.gen_batch_size": config.prompts_per_step}


def _verl_overlong(config: OnlineConfig) -> dict:
    """DAPO's soft overlong penalty in verl: ``reward_model.overlong_buffer`` with the ``dapo`` reward manager.

    verl's buffer ends at ``data.max_response_length`` and adds min(−(|y| − (L_max − len)) / len × factor, 0)
    (DAPO recipe), which is rlbook's ``soft_overlong_penalty`` (Yu et al. 2025, arXiv:2503.14476, "Soft
    Overlong Punishment") with len = cache_len and factor 1 when rlbook's max_len is the generation budget.
    Other windows are refused.
    """
    if config.overlong is None:
        return {"reward_model.overlong_buffer.enable": False}
    max_len, cache_len = config.overlong
    if max_len != config.max_new_tokens:
        raise _unsupported("overlong", config.overlong, "verl",
                           f"verl's overlong buffer ends at data.max_response_length = max_new_tokens = "
                           f"{config.max_new_tokens}, not at {max_len}")
    if cache_len < 1:
        raise _unsupported("overlong", config.overlong, "verl", "verl's overlong_buffer.len must be at least 1")
    return {"reward_model.reward_manager": "dapo", "reward_model.overlong_buffer.enable": True,
            "reward_model.overlong_buffer.len": cache_len, "reward_model.overlong_buffer.penalty_factor": 1.0}


ADAM_AND_MASTER_BYTES = 12  # per trained parameter: fp32 master weights + Adam's two fp32 moments, 4 bytes each


def optimizer_bytes_per_parameter(weight_bytes: int, *, moment_bytes: int = 4) -> int:
    """Bytes the optimizer keeps per trained parameter beside its weight and gradient: Adam's two
    moments at ``moment_bytes`` each (4: fp32, 8 in all; 1: 8-bit Adam, Dettmers et al. 2022,
    arXiv:2110.02861, its small block-wise quantisation constants left out), plus an fp32 master copy (4)
    when the weights are narrower than fp32 (mixed precision). fp32 weights are their own master copy:
    4 + 4 + 8 = 16 bytes in all, as bf16's 2 + 2 + 12."""
    if isinstance(moment_bytes, bool) or not isinstance(moment_bytes, int) or moment_bytes < 1:
        raise ValueError(f"moment_bytes must be a positive int (bytes per Adam moment), got {moment_bytes!r}")
    master = ADAM_AND_MASTER_BYTES - 8  # the fp32 master copy beside fp32 moments' 8 bytes
    return 2 * moment_bytes + (master if weight_bytes < 4 else 0)

# Shapes of three public models, from their config.json files on the Hugging Face hub (Qwen2.5 technical
# report, arXiv:2412.15115; Llama 3, arXiv:2407.21783): enough to build each class on the meta device.
HUB_SHAPES = {
    "Qwen/Qwen2.5-0.5B": dict(model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
                              num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                              tie_word_embeddings=True),
    "Qwen/Qwen2.5-7B": dict(model_type="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                            num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                            tie_word_embeddings=False),
    "meta-llama/Llama-3.1-70B": dict(model_type="llama", vocab_size=128256, hidden_size=8192,
                                     intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                                     num_key_value_heads=8, tie_word_embeddings=False),
}


def _config_from_shape(shape: dict):
    from transformers import AutoConfig

    shape = dict(shape)
    return AutoConfig.for_model(shape.pop("model_type"), **shape)


def parameters_of_shape(config) -> int:
    """Exact parameter count of the causal LM that ``config`` (a transformers config or a ``HUB_SHAPES`` dict)
    describes, built on the meta device: no weights are allocated and nothing is downloaded."""
    from transformers import AutoModelForCausalLM, PretrainedConfig

    if isinstance(config, dict):
        config = _config_from_shape(config)
    if not isinstance(config, PretrainedConfig):
        raise ValueError(f"config must be a transformers config or a shape dict, got {type(config).__name__}")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return count_parameters(model)


# The roles ``training_memory`` charges, in the order the figures stack them. Persistent model states
# first, then what only generation holds (a full copy of the weights, the KV cache), then what only the
# training pass holds (activations, logits).
MEMORY_ROLES = ("policy weights", "policy gradients", "Adam + fp32 master", "reference", "critic",
                "weights gathered for generation", "KV cache", "activations", "logits")
ACTIVATION_BYTES_PER_LAYER = 34  # × s·b·h per layer, 16-bit activations (Korthikanti et al. 2022, eq. 1)


def _model_config(config):
    from transformers import PretrainedConfig

    model_config = _config_from_shape(config) if isinstance(config, dict) else config
    if not isinstance(model_config, PretrainedConfig):
        raise ValueError(f"config must be a transformers config or a shape dict, got {type(config).__name__}")
    return model_config


def _check_memory_options(sequences, tokens_per_sequence, weight_bytes, shards, micro_batch, lora_fraction,
                          tensor_parallel=1, in_flight=None):
    if in_flight is not None and (not isinstance(in_flight, int) or isinstance(in_flight, bool) or in_flight < 1):
        raise ValueError(f"in_flight must be a positive int or None (the whole rollout in one wave), got {in_flight!r}")
    for name, value in (("sequences", sequences), ("tokens_per_sequence", tokens_per_sequence),
                        ("weight_bytes", weight_bytes), ("shards", shards), ("micro_batch", micro_batch),
                        ("tensor_parallel", tensor_parallel)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if shards % tensor_parallel:
        raise ValueError(f"tensor_parallel={tensor_parallel} must divide shards={shards} (the GPUs form "
                         "shards / tensor_parallel tensor-parallel groups)")
    if lora_fraction is not None and not 0 < lora_fraction <= 1:
        raise ValueError(f"lora_fraction must be in (0, 1], got {lora_fraction!r}")


def activation_bytes(config, *, tokens_per_sequence: int, micro_batch: int = 1, weight_bytes: int = 2,
                     gradient_checkpointing: bool = False, tensor_parallel: int = 1,
                     coefficient: float | None = None) -> float:
    """Bytes of activations the backward pass keeps for one micro-batch (``micro_batch`` sequences of
    ``tokens_per_sequence`` tokens) of the model ``config`` describes, on one GPU.

    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
    arXiv:2205.05198, §4.1, eq. 1): a transformer layer stores s·b·h·(34 + 5·a·s/h) bytes with 16-bit
    activations (s tokens, b sequences, h hidden size, a heads). The 5·a·s/h term is the attention
    matrix, which FlashAttention (Dao et al. 2022, arXiv:2205.14135) does not store, so this counts
    34·s·b·h per layer, scaled by ``weight_bytes`` / 2 for other widths. The 34 assumes a 4h MLP and dropout
    masks; a SwiGLU MLP of another width changes it, so read this as an estimate. With
    ``gradient_checkpointing`` (full recomputation, the baseline the same paper's §5 improves on) only each layer's
    input, 2·s·b·h bytes, is kept, plus one layer's activations while it is recomputed. Activations are
    not sharded by ZeRO: every data-parallel GPU holds its own micro-batch's. ``tensor_parallel`` = t:
    tensor parallelism with sequence parallelism divides all of it by t (the same paper, §4.2.2, eq. 4:
    sbh·(34/t + 5as/(ht)) per layer; the checkpointed layer inputs are split along the sequence too).
    ``coefficient``: bytes per token per hidden unit per layer in place of the 34 (e.g. the model's own
    ``gated_mlp_activation_coefficient``); None: 34.
    """
    model_config = _model_config(config)
    _check_memory_options(1, tokens_per_sequence, weight_bytes, tensor_parallel, micro_batch, None, tensor_parallel)
    if coefficient is None:
        coefficient = ACTIVATION_BYTES_PER_LAYER
    if not isinstance(coefficient, (int, float)) or isinstance(coefficient, bool) or not coefficient > 0:
        raise ValueError(f"coefficient must be a positive number of bytes (or None: 34), got {coefficient!r}")
    sbh = tokens_per_sequence * micro_batch * model_config.hidden_size
    per_layer = coefficient * sbh * weight_bytes / 2
    if gradient_checkpointing:
        return (weight_bytes * sbh * model_config.num_hidden_layers + per_layer) / tensor_parallel
    return per_layer * model_config.num_hidden_layers / tensor_parallel


def gated_mlp_activation_coefficient(config) -> float:
    """Bytes per token per hidden unit per layer that a layer with a gated (SwiGLU) MLP and no dropout keeps
    for the backward pass, 16-bit activations, by Korthikanti et al.'s count (2022, arXiv:2205.05198, §4.1)
    with its MLP replaced: the ``ACTIVATION_BYTES_PER_LAYER`` = 34 are attention 11 (dropout mask 1 of
    them), two norms 4 and a 4h GELU MLP 19 (input 2, GELU input 8, GELU output 8, dropout mask 1). Without
    dropout: attention 10, norms 4. A gated MLP of width I keeps its input (2) and four tensors of width I in
    16 bits, the gate's output (SiLU's input), SiLU's output, the up projection and their product (2 · 4 · I/h):
    2 + 8·I/h. So 14 + 2 + 8·I/h in all; Qwen2.5-7B (I/h = 5.3) keeps about 58, Llama-3.1-70B (3.5) 44,
    SmolLM2-135M (2.7) 37, all above 34: a wide SwiGLU MLP keeps more than the 4h GELU MLP, not less.
    Not counted: grouped-query attention's smaller K and V (less), frozen linear layers under LoRA that need
    not keep their inputs (less), an attention kernel that keeps the scores (more)."""
    model_config = _model_config(config)
    width = model_config.intermediate_size / model_config.hidden_size
    return 10 + 4 + 2 + 8 * width


def logits_bytes(config, *, tokens_per_sequence: int, micro_batch: int = 1, tensor_parallel: int = 1) -> float:
    """Bytes of one fp32 copy of the logits of a micro-batch: ``micro_batch`` × tokens × vocabulary × 4.

    The policy-gradient loss needs log π of every sampled token, a log-softmax over the whole vocabulary
    at every position, computed in fp32 for accuracy: for a 152k vocabulary that is ≈ 2.5 GB per
    4,096-token sequence, more than the activations of a small model (Wijmans et al. 2024, "Cut Your
    Losses in Large-Vocabulary Language Models", arXiv:2411.09009). A lower bound: the log-softmax
    output and its gradient are more copies of the same size unless the loss is fused or chunked.
    ``tensor_parallel`` = t: the output layer split along the vocabulary (Megatron-LM's vocabulary-parallel
    embedding and cross-entropy, Shoeybi et al. 2019, arXiv:1909.08053, §3) leaves 1/t of it on each GPU.
    """
    model_config = _model_config(config)
    _check_memory_options(1, tokens_per_sequence, 2, tensor_parallel, micro_batch, None, tensor_parallel)
    return micro_batch * tokens_per_sequence * model_config.vocab_size * 4 / tensor_parallel


def kv_bytes_per_token(config, *, weight_bytes: int = 2, tensor_parallel: int = 1) -> int:
    """Bytes of KV cache one token takes on one GPU: 2 (K and V) × layers × KV heads × head dimension ×
    ``weight_bytes``, the KV heads split ``tensor_parallel`` ways (at least one per GPU: with fewer KV heads
    than GPUs, grouped-query attention, each GPU keeps a copy of one)."""
    model_config = _model_config(config)
    _check_memory_options(1, 1, weight_bytes, tensor_parallel, 1, None, tensor_parallel)
    head_dim = getattr(model_config, "head_dim", None) or model_config.hidden_size // model_config.num_attention_heads
    kv_heads_per_gpu = math.ceil(model_config.num_key_value_heads / tensor_parallel)
    return 2 * model_config.num_hidden_layers * kv_heads_per_gpu * head_dim * weight_bytes


def generation_waves(sequences: int, *, in_flight: int | None, engines: int = 1) -> int:
    """How many waves ``engines`` inference engines, each holding at most ``in_flight`` sequences in its KV
    pool at once, take to generate a rollout of ``sequences``: ⌈sequences / (engines × in_flight)⌉ (1 when
    ``in_flight`` is None: the whole rollout at once).

    An engine with a paged KV cache and continuous batching (vLLM, Kwon et al. 2023, arXiv:2309.06180;
    SGLang) preallocates a fixed pool (vLLM: the share ``gpu_memory_utilization`` of the GPU, less the
    weights) and admits a new sequence when one finishes, so a rollout larger than the pool is generated in
    waves: fewer slots cost time, not memory. Counting waves as if every sequence had the full length is an
    upper bound on the time (sequences that stop early free their slots sooner)."""
    for name, value in (("sequences", sequences), ("engines", engines)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    _check_memory_options(1, 1, 2, 1, 1, None, 1, in_flight)
    return 1 if in_flight is None else math.ceil(sequences / (engines * in_flight))


def _role_bytes(model_config, params: int, *, sequences, tokens_per_sequence, weight_bytes, reference, critic,
                lora_fraction, shards, micro_batch, gradient_checkpointing, tensor_parallel=1,
                in_flight=None, activation_coefficient=None) -> dict:
    """Bytes per GPU of each role in ``MEMORY_ROLES`` (the arithmetic of ``training_memory``)."""
    trained = params * (lora_fraction or 1.0)
    weights = params * weight_bytes
    kv_per_token = kv_bytes_per_token(model_config, weight_bytes=weight_bytes, tensor_parallel=tensor_parallel)
    replicas = shards // tensor_parallel  # tensor-parallel groups: each generates its share of the sequences
    share = sequences / replicas  # an engine's share of the rollout; its pool holds in_flight of them at once
    held = share if in_flight is None else min(in_flight, share)
    optimizer_bytes = optimizer_bytes_per_parameter(weight_bytes)
    tokens = dict(tokens_per_sequence=tokens_per_sequence, micro_batch=micro_batch, tensor_parallel=tensor_parallel)
    return {
        "policy weights": weights / shards,
        "policy gradients": trained * weight_bytes / shards,
        "Adam + fp32 master": trained * optimizer_bytes / shards,
        # Under LoRA the reference is the frozen base with the adapters switched off: no second copy.
        "reference": weights / shards if reference and lora_fraction is None else 0.0,
        "critic": (weights + trained * (weight_bytes + optimizer_bytes)) / shards if critic else 0.0,
        # generation runs tensor-parallel over t GPUs: each needs its 1/t of the whole model, and owns 1/shards
        "weights gathered for generation": weights * (1 / tensor_parallel - 1 / shards),
        "KV cache": kv_per_token * held * tokens_per_sequence,
        "activations": activation_bytes(model_config, weight_bytes=weight_bytes, coefficient=activation_coefficient,
                                        gradient_checkpointing=gradient_checkpointing, **tokens),
        "logits": logits_bytes(model_config, **tokens),
    }


def training_memory(config, *, sequences: int, tokens_per_sequence: int, weight_bytes: int = 2,
                    reference: bool = True, critic: bool = False, lora_fraction: float | None = None,
                    shards: int = 1, tensor_parallel: int = 1, micro_batch: int = 1,
                    gradient_checkpointing: bool = False, in_flight: int | None = None,
                    activation_coefficient: float | None = None) -> dict:
    """GiB per GPU for each role (``MEMORY_ROLES``) of an RL run on the model ``config`` describes, and
    ``"parameters (B)"``.

    Model states: policy weights at ``weight_bytes`` (2: bf16); gradients at the same width; Adam's two
    moments and fp32 master weights, 12 bytes per *trained* parameter (mixed precision: 2 + 2 + 12 = 16
    bytes per parameter, the count ZeRO starts from, Rajbhandari et al. 2020, arXiv:1910.02054, §3; at
    ``weight_bytes=4`` the weights are their own master: 4 + 4 + 8 = 16, see
    ``optimizer_bytes_per_parameter``). ``lora_fraction``: the share of parameters LoRA trains (gradients
    and Adam only for those). ``reference``: the run has a frozen reference policy (a KL term); it holds
    weights only, and under LoRA it costs nothing: it is the base model with the adapters switched off.
    A ``critic`` (PPO) is a second trained model of the same size.

    ``shards``: GPUs the run is spread over, in groups of ``tensor_parallel`` = t (which must divide it).
    Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053, §3) splits every weight
    matrix of a layer t ways inside a group; ZeRO stage 3 / FSDP (ZeRO §5.3) shards each group's slice
    over the shards / t groups. So weights, gradients, optimizer states, reference and critic are divided
    by ``shards``. Generation runs on each tensor-parallel group as an engine (vLLM, SGLang) would: the
    group holds the whole model, 1/t on each GPU, and the rollout's sequences are split between the
    groups. HybridFlow (Sheng et al. 2024, arXiv:2409.19256, §5, the 3D-HybridEngine) reshards the
    actor from its training layout to such a generation layout, still model-parallel; "weights gathered for
    generation" charges the 1/t − 1/shards of the weights each GPU gathers for it (0 when shards = t).

    Rollout: the KV cache holds keys and values of every layer (``kv_bytes_per_token``: 2 × layers × KV
    heads × head dimension values per token at ``weight_bytes``, the KV heads split t ways, at least one per
    GPU) for the sequences an engine holds at once, × ``tokens_per_sequence``. Each of the shards / t groups
    is one engine with its share of the ``sequences``. ``in_flight``: the most sequences an engine's KV pool
    holds at once (a paged engine with continuous batching, vLLM or SGLang, preallocates a fixed pool and
    streams the rollout through it in ``generation_waves``: a smaller pool costs time, not memory). None: the
    whole share at once, one wave: the pool that would generate the rollout in one go, an upper bound on
    what generation needs. Training pass:
    ``activation_bytes`` (with or without ``gradient_checkpointing``) and ``logits_bytes`` of one
    micro-batch of ``micro_batch`` sequences: not divided by ZeRO's sharding, divided by t (sequence
    parallelism and a vocabulary-parallel output layer). Pipeline parallelism (the layers split into p
    stages) is not modelled. It would divide the weights and the other model states by p, at the cost of
    pipeline bubbles, but not the activations: under the 1F1B schedule the first stage keeps p
    micro-batches in flight through its L/p layers, L layers' worth of activations whatever p is
    (Korthikanti et al. 2022, arXiv:2205.05198, §4.2.3, eq. 5), which is why it is paired with activation
    recomputation.

    Every role is charged as if all were resident at once, an upper bound: an engine that frees the KV
    cache before training (verl's hybrid engine does) needs less. ``activation_coefficient``: the bytes per
    token per hidden unit per layer ``activation_bytes`` charges (None: Korthikanti et al.'s 34; the
    model's own SwiGLU count is ``gated_mlp_activation_coefficient``).
    """
    model_config = _model_config(config)
    _check_memory_options(sequences, tokens_per_sequence, weight_bytes, shards, micro_batch, lora_fraction,
                          tensor_parallel, in_flight)
    params = parameters_of_shape(model_config)
    roles = _role_bytes(model_config, params, sequences=sequences, tokens_per_sequence=tokens_per_sequence,
                        weight_bytes=weight_bytes, reference=reference, critic=critic, lora_fraction=lora_fraction,
                        shards=shards, micro_batch=micro_batch, gradient_checkpointing=gradient_checkpointing,
                        tensor_parallel=tensor_parallel, in_flight=in_flight,
                        activation_coefficient=activation_coefficient)
    return {"parameters (B)": params / 1e9, **{role: value / 1024 ** 3 for role, value in roles.items()}}


def memory_total(memory: dict) -> float:
    """GiB per GPU in all: the sum of the ``MEMORY_ROLES`` of a ``training_memory`` result (or table row)."""
    return float(sum(memory[role] for role in MEMORY_ROLES))


def gpus_needed(config, *, gpu_gib: float = 80.0, max_gpus: int = 4096, tensor_parallel: int = 1,
                **options) -> int:
    """The fewest GPUs of ``gpu_gib`` GiB over which ``training_memory(config, shards=N, **options)`` fits,
    N a multiple of ``tensor_parallel`` (the tensor-parallel degree t).

    ZeRO-3 sharding divides the model states (and, with ``in_flight=None``, the one-wave KV cache, whose
    sequences the engines split) but not the activations, the logits, or the
    1/t of the weights each GPU holds to generate; those only t divides. So the answer is not the total
    divided by one GPU's memory, and a model whose weights do not fit one GPU needs t > 1 (Llama-3.1-70B's
    bf16 weights, 131 GiB, fit no single 80 GiB GPU; at t = 8 each GPU generates with 16 GiB of them).
    Raises ``ValueError`` when even ``max_gpus`` GPUs are not enough (the part no sharding divides is too
    large at this t).
    """
    if "shards" in options:
        raise ValueError("shards is what gpus_needed finds: leave it out")
    if not isinstance(gpu_gib, (int, float)) or isinstance(gpu_gib, bool) or not gpu_gib > 0:
        raise ValueError(f"gpu_gib must be a positive number, got {gpu_gib!r}")
    if not isinstance(max_gpus, int) or isinstance(max_gpus, bool) or max_gpus < 1:
        raise ValueError(f"max_gpus must be a positive int, got {max_gpus!r}")
    if isinstance(tensor_parallel, int) and not isinstance(tensor_parallel, bool) and max_gpus < tensor_parallel:
        raise ValueError(f"max_gpus must be at least tensor_parallel={tensor_parallel}, got {max_gpus}")
    model_config = _model_config(config)
    settings = dict(weight_bytes=2, reference=True, critic=False, lora_fraction=None, micro_batch=1,
                    gradient_checkpointing=False, in_flight=None, activation_coefficient=None)
    unknown = set(options) - set(settings) - {"sequences", "tokens_per_sequence"}
    if unknown:
        raise ValueError(f"unknown training_memory options {sorted(unknown)}")
    settings.update(options)
    _check_memory_options(settings.get("sequences"), settings.get("tokens_per_sequence"), settings["weight_bytes"],
                          tensor_parallel, settings["micro_batch"], settings["lora_fraction"], tensor_parallel,
                          settings["in_flight"])
    params = parameters_of_shape(model_config)
    budget = gpu_gib * 1024 ** 3
    for shards in range(tensor_parallel, max_gpus + 1, tensor_parallel):
        if sum(_role_bytes(model_config, params, shards=shards, tensor_parallel=tensor_parallel,
                           **settings).values()) <= budget:
            return shards
    unsharded = _role_bytes(model_config, params, shards=max_gpus - max_gpus % tensor_parallel,
                            tensor_parallel=tensor_parallel, **settings)
    fixed = sum(unsharded[role] for role in ("weights gathered for generation", "policy weights", "activations",
                                             "logits")) / 1024 ** 3
    raise ValueError(f"gpu_gib={gpu_gib} is too small for any number of GPUs up to max_gpus={max_gpus} at "
                     f"tensor_parallel={tensor_parallel}: the weights for generation, activations and logits "
                     f"alone take {fixed:,.1f} GiB per GPU (a larger tensor_parallel divides them)")


def trl_optimizer_steps_per_step(trl_kwargs: dict) -> int:
    """How many of TRL's optimizer steps (``GRPOConfig.max_steps`` and ``state.global_step`` count them) make one
    rlbook step, for the keyword arguments ``trl_grpo_config`` returned: ``GRPOTrainer`` samples a new generation
    batch every ``steps_per_generation × num_iterations`` optimizer steps (with ``gradient_accumulation_steps``
    = 1, as here), so a preset with several minibatches or epochs per batch would otherwise run fewer batches
    under TRL than ``steps`` asks."""
    missing = [key for key in ("steps_per_generation", "num_iterations", "gradient_accumulation_steps")
               if key not in trl_kwargs]
    if missing:
        raise ValueError(f"trl_kwargs must be trl_grpo_config's output; it lacks {missing}")
    if trl_kwargs["gradient_accumulation_steps"] != 1:
        raise ValueError("trl_kwargs must have gradient_accumulation_steps = 1, as trl_grpo_config sets it")
    return int(trl_kwargs["steps_per_generation"]) * int(trl_kwargs["num_iterations"])


def _grpo_trainer(model_folder, task, config: OnlineConfig, *, steps: int, train_dataset, output_dir,
                  reward_funcs=None, callbacks=()):
    """TRL's ``GRPOTrainer`` for ``config`` as ``train_with_trl`` builds it (one place, so that
    ``trl_sampler_rewards`` measures the sampler of the very trainer that trains), the world size, and
    TRL's optimizer steps per rlbook step (``trl_optimizer_steps_per_step``)."""
    import os

    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlbook.models import checkpoint_location, load_tokenizer

    dataset = train_dataset if train_dataset is not None else task.dataset(2000, seed=config.seed, split="train")
    # WORLD_SIZE: the processes accelerate launch (or torchrun) started; 1 when run directly
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    kwargs = trl_grpo_config(config, num_processes=world_size)
    # TRL's max_steps counts optimizer steps; one rlbook step is steps_per_generation × num_iterations of them
    args = GRPOConfig(output_dir=str(output_dir), use_cpu=not torch.cuda.is_available(),
                      report_to="none", save_strategy="no", logging_steps=1,
                      max_steps=steps * trl_optimizer_steps_per_step(kwargs),
                      disable_tqdm=True, dataloader_num_workers=0,
                      bf16=False,  # TRL defaults to bf16 autocast (on the CPU too); rlbook trains in fp32
                      **kwargs)
    trainer = GRPOTrainer(model=checkpoint_location(str(model_folder)),
                          reward_funcs=reward_funcs or [task.reward_fn()], args=args,
                          train_dataset=dataset, processing_class=load_tokenizer(model_folder),
                          peft_config=lora_config(r=config.lora) if config.lora else None,
                          callbacks=list(callbacks))
    trainer.remove_callback(PrinterCallback)  # with its progress bar off, the Trainer prints every log
    return trainer, world_size, trl_optimizer_steps_per_step(kwargs)


def train_with_trl(model_folder, task, config: OnlineConfig, *, steps: int, train_dataset=None,
                   evaluate=None, eval_every: int | None = None, evaluate_at_start: bool = True,
                   output_dir=None) -> list[dict]:
    """Train the model in ``model_folder`` with TRL's ``GRPOTrainer`` under ``config``; returns its history.

    ``model_folder``: a folder, or any name ``load_model`` takes (a zoo or pretrained name, a hub id in the
    local cache). The reward is ``task.reward_fn()`` (rlbook's strict verifier, in TRL's convention); LoRA,
    when ``config.lora`` is set, is rlbook's own ``lora_config`` handed to TRL through ``peft_config``. Runs
    on the CPU unless CUDA is present. ``evaluate(model)`` (e.g. a held-out pass@1), when given, is called
    before training (unless ``evaluate_at_start`` is False: a LoRA run starts as its base model, which the
    caller may have measured already) and every ``eval_every`` steps; its dict is merged into that step's
    row. Each row: ``step``, TRL's logged ``reward`` and ``entropy`` where logged; the last row also
    ``mixed_precision`` (accelerate's: "no" here, since ``bf16=False`` overrides TRL's bf16 default so that
    TRL trains in fp32 as rlbook does), ``world_size`` and ``per_device_train_batch_size``.
    """
    import tempfile

    from transformers import TrainerCallback

    config = _check_config(config)
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if evaluate is not None and (not isinstance(eval_every, int) or eval_every < 1):
        raise ValueError(f"eval_every must be a positive int when evaluate is given, got {eval_every!r}")
    rows: dict[int, dict] = {}

    class Evaluate(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            if evaluate is not None and evaluate_at_start:
                rows.setdefault(0, {"step": 0}).update(evaluate(model))

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % per_step:  # inside an rlbook step (its later minibatches or epochs)
                return
            step = state.global_step // per_step
            if evaluate is not None and (step % eval_every == 0 or step == steps):
                rows.setdefault(step, {"step": step}).update(evaluate(model))

    per_step = 1  # TRL optimizer steps per rlbook step, set once the trainer is built
    with tempfile.TemporaryDirectory() as scratch:
        trainer, world_size, per_step = _grpo_trainer(model_folder, task, config, steps=steps,
                                                      train_dataset=train_dataset, output_dir=output_dir or scratch,
                                                      callbacks=[Evaluate()])
        trainer.train()
    for log in trainer.state.log_history:  # TRL logs every optimizer step; the first of each rlbook step is kept
        if "step" in log and "reward" in log:
            step = (log["step"] - 1) // per_step + 1
            row = rows.setdefault(step, {"step": step})
            if "reward" not in row:
                row["reward"] = log["reward"]
                if "entropy" in log:
                    row["entropy"] = log["entropy"]
    history = [rows[step] for step in sorted(rows)]
    # what the run really used, for the reader to check: the precision accelerate ran the forward in, and the
    # batch each of the world_size processes trained on
    history[-1].update(mixed_precision=str(trainer.accelerator.mixed_precision), world_size=world_size,
                       per_device_train_batch_size=trainer.args.per_device_train_batch_size)
    return history


# TRL's sampling settings that rlbook's sampler has no knob for; TRL's value of each leaves the distribution
# untouched (top_k = 0: no top-k cut; min_p None: none; repetition_penalty 1: none), which trl_sampler_rewards
# reports so that a reader can see it
_TRL_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_new_tokens",
                      "eos_token_id", "do_sample")


def trl_sampler_rewards(model_folder, task, config: OnlineConfig, examples, *, seed: int = 0) -> dict:
    """The rewards TRL's own sampling pipeline gives the untrained model on ``examples``: a diagnostic.

    Builds the ``GRPOTrainer`` that ``train_with_trl`` trains (``_grpo_trainer``: same model, LoRA with
    B = 0, so the policy is the base model) and runs its generate-and-score step — TRL's chat templating,
    left padding, ``model.generate`` with its ``GenerationConfig``, decoding and reward call — on each of
    ``examples``, ``config.group_size`` samples each, without training. That step is TRL's private
    ``_generate_and_score_completions`` (trl 1.16); the rewards are recorded by wrapping the task's reward
    function, so nothing else of TRL's is read. Returns ``{"correct": (P, group_size) 0/1 nested list,
    "settings": TRL's sampling settings}``: compare with rlbook's sampler on the same prompts to tell a
    sampler difference from a training difference.
    """
    import tempfile

    config = _check_config(config)
    examples = [dict(row) for row in examples]
    if not examples:
        raise ValueError("examples must hold at least one row")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")
    recorded: list[float] = []
    reward = task.reward_fn()

    def recording_reward(prompts=None, completions=None, **columns):
        values = reward(prompts=prompts, completions=completions, **columns)
        recorded.extend(values)
        return values

    recording_reward.__name__ = reward.__name__
    n = config.group_size
    with tempfile.TemporaryDirectory() as scratch:
        trainer, _, _ = _grpo_trainer(model_folder, task, config, steps=1, train_dataset=None,
                                   output_dir=scratch, reward_funcs=[recording_reward])
        per_call = max(1, trainer.args.per_device_train_batch_size // n)  # prompts per generation call
        torch.manual_seed(seed)
        for start in range(0, len(examples), per_call):
            trainer._generate_and_score_completions([row for row in examples[start:start + per_call]
                                                     for _ in range(n)])
        settings = {key: getattr(trainer.generation_config, key) for key in _TRL_SAMPLING_KEYS}
    correct = [[int(value >= 1.0) for value in recorded[i * n:(i + 1) * n]] for i in range(len(examples))]
    return {"correct": correct, "settings": settings}


def problem_clusters(task, rows) -> list[str]:
    """One cluster label per row of ``task``'s dataset: the problem up to symmetry, the key the task splits
    train from test by (``_split_key``: for addition a + b and b + a are one problem, "3+7"). Samples of
    one problem, asked in either order, are one cluster of a clustered standard error: a prompt drawn twice,
    or drawn once each way, is not two independent draws."""
    labels = []
    for row in rows:
        if not isinstance(row, dict) or "a" not in row or "b" not in row:
            raise ValueError(f"rows must be the task's dataset rows with operands 'a' and 'b', got {row!r}")
        labels.append(task._split_key((row["a"], row["b"])))
    return labels


def paired_ratio_change(numerators, denominators, base_numerators, base_denominators, clusters) -> tuple[float, float]:
    """``(change, se)``: the change r − r₀ of a ratio of sums, r = Σx / Σy after and r₀ = Σx₀ / Σy₀ before,
    measured on the same prompts, and its delta-method standard error clustered by ``clusters``.

    One number per prompt in each array (e.g. x = right replies that stopped, y = replies that stopped).
    Each ratio is linearised as in ``rlbook.evidence.ratio_se`` (the i-th term (x_i − r·y_i) / ȳ), and the
    SE is that of the mean of the paired difference of the two terms, clustered (``clustered_se``): the two
    measurements share their prompts, so prompt-to-prompt variation cancels where it moves both alike, which
    an SE from the two ratios' separate SEs (√(se² + se₀²)) ignores."""
    arrays = []
    for name, values in (("numerators", numerators), ("denominators", denominators),
                         ("base_numerators", base_numerators), ("base_denominators", base_denominators)):
        array = torch.as_tensor(values, dtype=torch.float64).numpy().ravel()
        if array.size != len(clusters):
            raise ValueError(f"{name} must hold one value per cluster label ({len(clusters)}), got {array.size}")
        arrays.append(array)
    x, y, x0, y0 = arrays
    if y.sum() <= 0 or y0.sum() <= 0:
        raise ValueError("denominators and base_denominators must have a positive sum")
    rate, base_rate = x.sum() / y.sum(), x0.sum() / y0.sum()
    terms = (x - rate * y) / y.mean() - (x0 - base_rate * y0) / y0.mean()
    return float(rate - base_rate), clustered_se(terms, clusters)


def right_and_wrong_replies(texts, correct, rows) -> dict:
    """One right and one wrong reply of a held-out measurement, for showing beside the numbers.

    ``texts``: the P·n replies, prompt by prompt (n samples each); ``correct``: the (P, n) 0/1 table;
    ``rows``: the P dataset rows. Returns ``{"right": (question, reply) or None, "wrong": ...}``: the first
    right and the first wrong sample in the rows' order (None when there is none), so that two policies
    measured on the same prompts and sampling seed are shown on comparable prompts."""
    correct = [list(map(int, row)) for row in correct]
    if len(correct) != len(rows) or not correct or any(len(row) != len(correct[0]) for row in correct):
        raise ValueError(f"correct must be a (P, n) table with P = {len(rows)} rows")
    n = len(correct[0])
    if len(texts) != n * len(rows):
        raise ValueError(f"texts must hold P × n = {n * len(rows)} replies, got {len(texts)}")
    found = {"right": None, "wrong": None}
    for p, (row, outcomes) in enumerate(zip(rows, correct)):
        for j, value in enumerate(outcomes):
            key = "right" if value else "wrong"
            if found[key] is None:
                found[key] = (row["question"].split("?")[0] + "?", texts[p * n + j])
        if all(found.values()):
            break
    return found


def _tiny_trl_model(folder):
    """A one-layer Qwen2 and a word-level tokenizer saved in ``folder`` (nothing downloaded): the model a
    ``GRPOTrainer`` is built around when only its loss code is wanted."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {"<pad>": 0, "<eos>": 1, **{f"w{i}": i + 2 for i in range(38)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    config = Qwen2Config(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Qwen2ForCausalLM.from_pretrained(folder), tokenizer


def trl_policy_loss(logp, old_logp, advantages, mask, *, ref_logp=None, entropy=None, model_and_tokenizer=None,
                    output_dir=None, trainer_class=None, config_class=None, max_completion_length: int = 8,
                    group_size: int = 3, **trl_config):
    """``(loss, gradient)``: TRL's own GRPO loss code (``GRPOTrainer._compute_loss``, trl 1.16) on the given
    tensors, and the gradient of that loss with respect to ``logp``.

    A real trainer is built around a tiny local model (``_tiny_trl_model``, or ``model_and_tokenizer``)
    whose per-token log-prob function is replaced by one returning ``logp`` (and ``entropy``), so TRL's
    loss runs unchanged on the (B, T) tensors rlbook's ``policy_loss`` gets: compare the two on the same
    tensors (``tests/test_trl_policy_crosscheck.py`` does it for every mapped loss; lesson 21 shows one).
    ``trl_config``: ``GRPOConfig`` keywords (``loss_type``, ``epsilon_high``, ``delta``, ``beta``, ...).
    One process, no gradient accumulation: TRL's ``num_items_in_batch`` is this batch's token count."""
    import tempfile

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    logp = torch.as_tensor(logp)
    batch, width = logp.shape
    entropy = torch.zeros_like(logp) if entropy is None else torch.as_tensor(entropy)  # TRL logs its mean
    scratch = tempfile.TemporaryDirectory() if output_dir is None else None
    try:
        folder = output_dir or scratch.name
        model, tokenizer = model_and_tokenizer or _tiny_trl_model(folder)
        args = (config_class or GRPOConfig)(
            output_dir=str(folder), per_device_train_batch_size=batch, num_generations=group_size,
            max_completion_length=max_completion_length, report_to=[], use_cpu=True, bf16=False, **trl_config)
        trainer = (trainer_class or GRPOTrainer)(
            model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=args,
            train_dataset=Dataset.from_dict({"prompt": ["w1 w2"] * batch}), processing_class=tokenizer)
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(); no accumulation here
        current = logp.clone().requires_grad_()
        trainer._get_per_token_logps_and_entropies = lambda *_, **__: (current, entropy, None)
        mask = torch.as_tensor(mask)
        inputs = {
            "prompt_ids": torch.ones(batch, 2, dtype=torch.long), "prompt_mask": torch.ones(batch, 2, dtype=torch.long),
            "completion_ids": torch.full((batch, width), 2, dtype=torch.long), "completion_mask": mask,
            "advantages": torch.as_tensor(advantages), "old_per_token_logps": torch.as_tensor(old_logp),
            "ref_per_token_logps": ref_logp, "num_items_in_batch": mask.sum().to(logp.dtype),
        }
        loss = trainer._compute_loss(trainer.model, inputs)
        loss.backward()
    finally:
        if scratch is not None:
            scratch.cleanup()
    return loss.detach(), current.grad


def recording(task):
    """A copy of ``task`` that records the question of every completion its reward scores, in order, in
    ``.scored_questions``: through ``reward(text, example)`` (rlbook's trainers, one call per completion;
    the example's ``question``) and through ``reward_fn()`` (TRL's convention; the text of each completion's
    prompt, its last message when the prompt is a chat). The completion itself, as text
    (``completion_text``), goes to ``.scored_completions`` in the same order. The rewards are the task's
    own; ``task`` itself is not changed. Lesson 21 reads from it which prompts each engine drew and what
    its training completions wrote."""
    base_class = type(task)

    class Recording(base_class):
        def reward(self, text, example, **kwargs):
            if isinstance(example, dict) and "question" in example:
                self.scored_questions.append(example["question"])
            self.scored_completions.append(completion_text(text))  # both paths score each completion here once
            return super().reward(text, example, **kwargs)

        def reward_fn(self, **kwargs):
            inner = super().reward_fn(**kwargs)

            def reward_function(prompts=None, completions=None, **columns):
                for prompt in prompts or []:
                    self.scored_questions.append(prompt[-1]["content"] if isinstance(prompt, list) else str(prompt))
                return inner(prompts=prompts, completions=completions, **columns)

            reward_function.__name__ = inner.__name__
            return reward_function

    Recording.__name__ = Recording.__qualname__ = f"Recording{base_class.__name__}"
    copied = copy.copy(task)
    copied.__class__ = Recording
    copied.scored_questions = []
    copied.scored_completions = []
    return copied


def sampler_logprob_mismatch(model, rollout, *, temperature: float, dtype=torch.bfloat16) -> dict:
    """How far a trainer's log-probs of a rollout's tokens sit from the sampler's, the training–inference
    mismatch, measured on the CPU with rlbook's own sampler standing in for the inference engine.

    ``rollout``: sampled by ``rlbook.rollout.sample`` from ``model`` at ``temperature``; its ``logprobs`` are
    the sampler's (incremental decoding with a KV cache, fp32). The same tokens are scored again by one
    forward pass over the whole sequences (``completion_logprobs``, what a trainer does), once in fp32 and once
    under ``torch.autocast`` to ``dtype`` (bf16, what a trainer in mixed precision or an engine in bf16
    computes). Returns, for each recompute (``"fp32"``, ``"bf16"``): ``token |Δ| mean`` and ``token |Δ|
    max`` of log π_trainer − log π_sampler per token, ``sequence log-ratio sd`` (the spread of the summed
    Δ per sequence, the log of the sequence's importance weight π_trainer / π_sampler) and ``tokens with
    ratio outside [0.5, 2]`` (share of tokens whose weight a truncated importance-sampling correction with
    C = 2 would cap); ``tokens``: how many were compared. At identical weights the importance weight should be
    1; a real engine (vLLM, SGLang: other kernels, other batching, often bf16) and a trainer differ by more
    than this CPU pair does, which is why RL frameworks correct for it (Yao et al. 2025, "Your efficient RL
    framework secretly brings you off-policy RL training": truncated importance sampling; TRL's
    ``vllm_importance_sampling_correction``)."""
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"temperature must be a positive number (the rollout's), got {temperature!r}")
    mask = rollout.completion_mask.bool()
    device_type = rollout.completion_ids.device.type
    out = {"tokens": int(mask.sum())}
    for name, autocast in (("fp32", False), ("bf16", True)):
        with torch.no_grad(), torch.autocast(device_type, dtype=dtype, enabled=autocast):
            trainer = rollout_logprobs(model, rollout, temperature=temperature)
        delta = (trainer.float() - rollout.logprobs).masked_fill(~mask, 0.0)
        per_token = delta[mask]
        out[name] = {"token |Δ| mean": float(per_token.abs().mean()), "token |Δ| max": float(per_token.abs().max()),
                     "sequence log-ratio sd": float(delta.sum(dim=1).std()),
                     "tokens with ratio outside [0.5, 2]": float((per_token.abs() > math.log(2)).float().mean())}
    return out


_STEP_MEMORY_STAGES = ("before load", "after load", "peak in step")


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _step_memory_worker(model_name, task_name, task_kwargs, config, device):
    import time
    import warnings

    from rlbook.models import load_model
    from rlbook.tasks import get_task
    from rlbook.trainers import OnlineTrainer

    torch.set_num_threads(1)
    # a fresh interpreter does not inherit the caller's warning filters: silence the one deprecation notice
    # transformers prints when ``is_gradient_checkpointing`` is read, so that the caller's stderr stays clean
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    task = get_task(task_name, **task_kwargs)
    on_cuda = str(device).startswith("cuda")
    before = torch.cuda.memory_allocated() if on_cuda else _rss_kib("VmRSS") * 1024
    model, tokenizer = load_model(model_name, device=device)
    trainer = OnlineTrainer(model, tokenizer, task, config)
    loaded = torch.cuda.memory_allocated() if on_cuda else _rss_kib("VmRSS") * 1024
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    else:
        with open("/proc/self/clear_refs", "w") as clear:  # resets VmHWM, the peak, to the current RSS
            clear.write("5")
    trainer.train_step()
    peak = torch.cuda.max_memory_allocated() if on_cuda else _rss_kib("VmHWM") * 1024
    trained = sum(p.numel() for p in trainer.policy.parameters() if p.requires_grad)
    return {"before load": before, "after load": loaded, "peak in step": peak,
            "measured as": "torch.cuda allocator" if on_cuda else "process RSS (VmRSS, VmHWM)",
            "trained parameters": trained, "parameters": count_parameters(trainer.policy),
            "model config": trainer.policy.config.to_dict(), "cpu_s": time.process_time()}


def measure_step_memory(model_name: str, task_name: str, config: OnlineConfig, *, task_kwargs=None,
                        device: str = "cpu") -> dict:
    """Bytes one ``OnlineTrainer`` step takes, measured in a fresh process: to check ``training_memory``.

    A spawned interpreter imports rlbook, records its memory (``before load``), loads ``model_name`` and
    builds the trainer (``after load``), then runs one ``train_step`` — sampling, scoring, the loss, its
    backward pass and the AdamW step — and records the peak during it (``peak in step``). On the CPU the
    numbers are the process's resident set (Linux ``/proc/self/status``: VmRSS, and VmHWM reset after the
    load through ``/proc/self/clear_refs``), which also counts the allocator's slack and whatever the
    Python objects hold; on CUDA they are the caching allocator's own counters
    (``torch.cuda.memory_allocated`` / ``max_memory_allocated``), tensors only. Returns the three byte counts,
    what they measure, the trained and total parameter counts, the model's config (as a dict) and the
    spawned process's CPU seconds (``cpu_s``, its imports included).
    """
    import multiprocessing

    config = _check_config(config)
    task_kwargs = dict(task_kwargs or {})
    if not isinstance(model_name, str) or not model_name:
        raise ValueError(f"model_name must be a non-empty str, got {model_name!r}")
    if str(device) != "cpu" and not str(device).startswith("cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda[:n]', got {device!r}")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_step_memory_worker, (model_name, task_name, task_kwargs, config, device))


def train_with_rlbook(model_folder, task, config: OnlineConfig, *, steps: int, train_dataset=None,
                      evaluate=None, eval_every: int | None = None) -> list[dict]:
    """``train_with_trl``'s twin: the same model folder, task, config and evaluation through rlbook's
    ``OnlineTrainer``; rows of the same shape (``step``, ``reward``, ``entropy``, and the evaluation's keys)."""
    from rlbook.models import load_model
    from rlbook.trainers import OnlineTrainer

    config = _check_config(config)
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if evaluate is not None and (not isinstance(eval_every, int) or eval_every < 1):
        raise ValueError(f"eval_every must be a positive int when evaluate is given, got {eval_every!r}")
    model, tokenizer = load_model(str(model_folder))
    trainer = OnlineTrainer(model, tokenizer, task, config, train_dataset=train_dataset)
    rows = [{"step": 0, **evaluate(trainer.policy)}] if evaluate is not None else []
    for step in range(1, steps + 1):
        logged = trainer.train_step()
        row = {"step": step, "reward": logged["reward"], "entropy": logged["entropy"]}
        if evaluate is not None and (step % eval_every == 0 or step == steps):
            row.update(evaluate(trainer.policy))
        rows.append(row)
    return rows


def main(argv=None) -> int:
    """``accelerate launch --cpu --num_processes 1 -m rlbook.scaling --steps 2``: GRPO through TRL on a zoo model.

    What lesson 21 launches: the model saved to a temporary folder, rlbook's verifier as the reward, the
    preset mapped by ``trl_grpo_config`` (its minibatch divided between the launched processes); prints one
    line per logged step and the final held-out pass@1. The generation budget is the preset's
    ``max_new_tokens`` unless ``--max-new-tokens`` is given; the prompts carry the task's format instruction
    as a system prompt for a model outside the zoo (zoo models learned the format and get none) unless
    ``--system-prompt`` says otherwise ("" for none).
    """
    import argparse
    import json
    import os
    import tempfile

    from rlbook.evaluation import evaluate_pass_at_k
    from rlbook.models import load_model, resolve
    from rlbook.tasks import FORMAT_INSTRUCTION, get_task
    from rlbook.trainers import preset

    parser = argparse.ArgumentParser(prog="python -m rlbook.scaling", description=main.__doc__)
    parser.add_argument("--model", default="arith-base", help="zoo name, folder or hub id")
    parser.add_argument("--task", default="arithmetic")
    parser.add_argument("--preset", default="grpo")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--lora", type=int, default=8, help="LoRA rank (0: train every weight)")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the preset's max_new_tokens")
    parser.add_argument("--system-prompt", default=None,
                        help='default: none for a zoo model, the format instruction otherwise; "" for none')
    args = parser.parse_args(argv)
    try:
        budget = {} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}
        config = preset(args.preset, kl_beta=0.0, lora=args.lora or None, lr=args.lr, seed=args.seed,
                        unbiased_std=True, **budget)
        task = get_task(args.task)
        source, _ = resolve(args.model)
        model, tokenizer = load_model(args.model)
    except ValueError as error:
        parser.error(str(error))
    if args.system_prompt is None:
        system_prompt = None if source == "zoo" else FORMAT_INSTRUCTION
    else:
        system_prompt = args.system_prompt or None
    held_out = list(task.dataset(32, seed=0, split="test", system_prompt=system_prompt))
    train_dataset = task.dataset(2000, seed=config.seed, split="train", system_prompt=system_prompt)

    def evaluate(policy):
        return {"held-out pass@1": evaluate_pass_at_k(policy, tokenizer, held_out, task.reward, n_samples=4,
                                                      max_new_tokens=config.max_new_tokens)["pass@1"]}

    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        rows = train_with_trl(folder, task, config, steps=args.steps, train_dataset=train_dataset,
                              evaluate=evaluate, eval_every=args.steps)
    if rows:
        rows[-1].update({"recipe minibatch": config.minibatch_size or config.batch_size,
                         "held-out": f"{len(held_out)} prompts x 4 samples"})
    if int(os.environ.get("RANK", "0")) == 0:  # every launched process trains; the first one reports
        for row in rows:
            print(json.dumps({key: round(value, 4) if isinstance(value, float) else value
                              for key, value in row.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
