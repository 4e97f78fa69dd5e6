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
comment: CISPO's cap (rlbook caps the ratio at 1 + ε_high; TRL clamps at ``epsilon_high`` itself) and
GRPO's σ (TRL always uses Bessel's n − 1, rlbook's ``unbiased_std`` chooses).
"""

from __future__ import annotations

import torch

from rlbook.losses.policy import VARIANT_DEFAULTS
from rlbook.models import count_parameters
from rlbook.models.lora import lora_config
from rlbook.trainers.config import OnlineConfig

__all__ = ["ADAM_AND_MASTER_BYTES", "HUB_SHAPES", "optimizer_bytes_per_parameter", "parameters_of_shape", "train_with_trl", "trl_grpo_config", "training_memory",
           "verl_overrides"]

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


def trl_grpo_config(config: OnlineConfig) -> dict:
    """Keyword arguments of ``trl.GRPOConfig`` for ``config`` (add output_dir, max_steps, logging yourself).

    One rlbook step (``prompts_per_step`` × ``group_size`` completions, ``epochs`` passes in minibatches of
    ``minibatch_size``) is one TRL generation batch: ``per_device_train_batch_size`` = the minibatch,
    ``steps_per_generation`` = minibatches per batch, ``num_iterations`` = epochs. Raises ``ValueError``
    for a setting TRL cannot express (a critic, GMPO, the KL in the reward, an entropy bonus, Clip-Cov,
    dynamic sampling, advantage filtering or noise, the soft overlong penalty as a config key).
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
        "dual_clip": (config.dual_clip is not None, "TRL's delta caps r on both signs, not PPO's dual clip"),
        "kl_placement": (config.kl_beta > 0 and config.kl_placement != "loss", "TRL puts β·KL in the loss"),
        "kl_estimator": (config.kl_beta > 0 and config.kl_estimator != "k3", "TRL's KL term is k3"),
        "entropy_coef": (config.entropy_coef > 0, "GRPOConfig has no entropy bonus"),
        "cov_control": (config.cov_control is not None, "GRPOConfig has no Clip-Cov / KL-Cov"),
        "dynamic_sampling": (config.dynamic_sampling, "GRPOTrainer does not resample flat groups"),
        "advantage_filter": (config.advantage_filter is not None, "no advantage filter in GRPOConfig"),
        "advantage_noise": (config.advantage_noise > 0, "no advantage noise in GRPOConfig"),
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
    kwargs = dict(
        num_generations=config.group_size,
        per_device_train_batch_size=minibatch,
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
        loss_type=loss_type,
        # TRL divides by the group's Bessel std (n − 1); rlbook by the population std unless unbiased_std.
        scale_rewards="group" if config.advantage == "grpo" else "none",
        seed=config.seed,
        activation_checkpointing=False,  # TRL turns it on by default (recomputes activations); rlbook never does
    )
    if config.variant == "gspo":
        kwargs["importance_sampling_level"] = "sequence"
    if config.variant == "sapo":
        kwargs.update(sapo_temperature_pos=settings["tau_pos"], sapo_temperature_neg=settings["tau_neg"])
    elif config.variant == "cispo":
        kwargs["epsilon_high"] = 1.0 + settings["eps_high"]  # TRL clamps r at epsilon_high; rlbook at 1 + ε_high
    elif config.variant in ("grpo", "ppo", "gspo", "dr_grpo", "dapo"):
        kwargs.update(epsilon=settings["eps_low"], epsilon_high=settings["eps_high"])
    return kwargs


def verl_overrides(config: OnlineConfig) -> dict:
    """Hydra overrides of verl's PPO trainer for ``config`` (names from verl's ``ppo_trainer.yaml``).

    Documentation, not a tested interface: verl is not a dependency. Raises ``ValueError`` for a setting
    with no verl key here (GMPO, SAPO, CISPO's loss modes, advantage filtering or noise).
    """
    config = _check_config(config)
    settings = _loss_settings(config)
    actor, algorithm = "actor_rollout_ref.actor", "algorithm"
    estimators = {"grpo": "grpo", "dr_grpo": "grpo", "rloo": "rloo", "reinforce_pp": "reinforce_plus_plus",
                  "gae": "gae"}
    if config.advantage not in estimators:
        raise _unsupported("advantage", config.advantage, "verl", "verl always uses an advantage estimator")
    loss_modes = {"ppo": "vanilla", "grpo": "vanilla", "dr_grpo": "vanilla", "dapo": "vanilla",
                  "reinforce": "vanilla", "gspo": "gspo"}
    if config.variant not in loss_modes:
        raise _unsupported("variant", config.variant, "verl", "no policy_loss.loss_mode for it in ppo_trainer.yaml")
    for field, is_set in (("advantage_filter", config.advantage_filter is not None),
                          ("advantage_noise", config.advantage_noise > 0)):
        if is_set:
            raise _unsupported(field, getattr(config, field), "verl", "no key for it in ppo_trainer.yaml")
    loss_mode = {"clip_cov": "clip_cov", "kl_cov": "kl_cov"}.get(config.cov_control, loss_modes[config.variant])
    overrides = {
        f"{algorithm}.adv_estimator": estimators[config.advantage],
        f"{algorithm}.norm_adv_by_std_in_grpo": config.advantage != "dr_grpo",
        "data.train_batch_size": config.prompts_per_step,
        "actor_rollout_ref.rollout.n": config.group_size,
        "data.max_response_length": config.max_new_tokens,
        "actor_rollout_ref.rollout.temperature": config.temperature,
        "actor_rollout_ref.rollout.top_p": config.top_p,
        f"{actor}.ppo_mini_batch_size": (config.minibatch_size or config.batch_size) // config.group_size,
        f"{actor}.ppo_epochs": config.epochs,
        f"{actor}.optim.lr": config.lr,
        f"{actor}.grad_clip": config.max_grad_norm or 0.0,
        f"{actor}.loss_agg_mode": _VERL_AGGREGATION[settings["aggregation"]],
        f"{actor}.policy_loss.loss_mode": loss_mode,
        f"{actor}.entropy_coeff": config.entropy_coef,
    }
    if settings.get("eps_low") is not None:
        overrides.update({f"{actor}.clip_ratio_low": settings["eps_low"], f"{actor}.clip_ratio_high": settings["eps_high"]})
    if config.dual_clip is not None:
        overrides[f"{actor}.clip_ratio_c"] = config.dual_clip
    if config.kl_beta > 0 and config.kl_placement == "loss":
        overrides.update({f"{actor}.use_kl_loss": True, f"{actor}.kl_loss_coef": config.kl_beta,
                          f"{actor}.kl_loss_type": _VERL_KL[config.kl_estimator]})
    elif config.kl_beta > 0:
        overrides.update({f"{algorithm}.use_kl_in_reward": True, f"{algorithm}.kl_ctrl.kl_coef": config.kl_beta,
                          f"{algorithm}.kl_penalty": _VERL_KL[config.kl_estimator]})
    if config.cov_control is not None and config.cov_fraction is not None:
        key = "clip_cov_ratio" if config.cov_control == "clip_cov" else "kl_cov_ratio"
        overrides[f"{actor}.policy_loss.{key}"] = config.cov_fraction
    if config.dynamic_sampling:
        overrides[f"{algorithm}.dynamic_filter.enable"] = True
    if config.advantage == "gae":
        overrides.update({f"{algorithm}.gamma": config.gamma, f"{algorithm}.lam": config.lam,
                          "critic.optim.lr": config.critic_lr})
    return overrides


ADAM_AND_MASTER_BYTES = 12  # per trained parameter: fp32 master weights + Adam's two fp32 moments, 4 bytes each


def optimizer_bytes_per_parameter(weight_bytes: int) -> int:
    """Bytes the optimizer keeps per trained parameter beside its weight and gradient: Adam's two fp32
    moments (8), plus an fp32 master copy (4) when the weights are narrower than fp32 (mixed precision).
    fp32 weights are their own master copy: 4 + 4 + 8 = 16 bytes in all, as bf16's 2 + 2 + 12."""
    return ADAM_AND_MASTER_BYTES if weight_bytes < 4 else ADAM_AND_MASTER_BYTES - 4

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


def training_memory(config, *, sequences: int, tokens_per_sequence: int, weight_bytes: int = 2,
                    reference: bool = True, critic: bool = False, lora_fraction: float | None = None,
                    shards: int = 1) -> dict:
    """GiB per GPU for each role in full fine-tuning (or LoRA) of the model ``config`` describes.

    Policy weights at ``weight_bytes`` (2: bf16); its gradients at the same width; Adam's two moments and
    fp32 master weights, 12 bytes per *trained* parameter (mixed precision: 2 + 2 + 12 = 16 bytes per
    parameter, ZeRO §3; at ``weight_bytes=4`` the weights are their own master: 4 + 4 + 8 = 16, see
    ``optimizer_bytes_per_parameter``). ``lora_fraction``: the share of parameters LoRA trains (gradients and Adam only
    for those). The frozen reference holds weights only; a critic (PPO) is a second trained model of the
    same size. The KV cache holds keys and values of every layer for ``sequences`` × ``tokens_per_sequence``
    tokens at ``weight_bytes``. ``shards``: GPUs the run is spread over — model states fully sharded (ZeRO stage 3 /
    FSDP: weights, gradients and optimizer states each divided by it) and the rollout's sequences split
    between them (data-parallel generation), so every role is divided by ``shards``.
    Activations are left out: they depend on checkpointing and micro-batching.
    """
    from transformers import PretrainedConfig

    model_config = _config_from_shape(config) if isinstance(config, dict) else config
    if not isinstance(model_config, PretrainedConfig):
        raise ValueError(f"config must be a transformers config or a shape dict, got {type(config).__name__}")
    for name, value in (("sequences", sequences), ("tokens_per_sequence", tokens_per_sequence),
                        ("weight_bytes", weight_bytes), ("shards", shards)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if lora_fraction is not None and not 0 < lora_fraction <= 1:
        raise ValueError(f"lora_fraction must be in (0, 1], got {lora_fraction!r}")
    params = parameters_of_shape(model_config)
    trained = params * (lora_fraction or 1.0)
    per_gpu = 1024 ** 3 * shards
    head_dim = getattr(model_config, "head_dim", None) or model_config.hidden_size // model_config.num_attention_heads
    kv_per_token = 2 * model_config.num_hidden_layers * model_config.num_key_value_heads * head_dim * weight_bytes
    optimizer_bytes = optimizer_bytes_per_parameter(weight_bytes)
    trained_model = params * weight_bytes + trained * (weight_bytes + optimizer_bytes)
    return {
        "parameters (B)": params / 1e9,
        "policy weights": params * weight_bytes / per_gpu,
        "policy gradients": trained * weight_bytes / per_gpu,
        "Adam + fp32 master": trained * optimizer_bytes / per_gpu,
        "reference": params * weight_bytes / per_gpu if reference else 0.0,
        "critic": trained_model / per_gpu if critic else 0.0,
        "KV cache": kv_per_token * sequences * tokens_per_sequence / per_gpu,
    }


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
    row. Each row: ``step``, TRL's logged ``reward`` and ``entropy`` where logged.
    """
    import tempfile

    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlbook.models import checkpoint_location, load_tokenizer

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
            if evaluate is not None and (state.global_step % eval_every == 0 or state.global_step == steps):
                rows.setdefault(state.global_step, {"step": state.global_step}).update(evaluate(model))

    dataset = train_dataset if train_dataset is not None else task.dataset(2000, seed=config.seed, split="train")
    with tempfile.TemporaryDirectory() as scratch:
        args = GRPOConfig(output_dir=str(output_dir or scratch), use_cpu=not torch.cuda.is_available(),
                          report_to="none", save_strategy="no", logging_steps=1, max_steps=steps,
                          disable_tqdm=True, dataloader_num_workers=0, **trl_grpo_config(config))
        trainer = GRPOTrainer(model=checkpoint_location(str(model_folder)), reward_funcs=[task.reward_fn()], args=args,
                              train_dataset=dataset, processing_class=load_tokenizer(model_folder),
                              peft_config=lora_config(r=config.lora) if config.lora else None,
                              callbacks=[Evaluate()])
        trainer.remove_callback(PrinterCallback)  # with its progress bar off, the Trainer prints every log
        trainer.train()
    for log in trainer.state.log_history:
        if "step" in log and "reward" in log:
            row = rows.setdefault(log["step"], {"step": log["step"]})
            row["reward"] = log["reward"]
            if "entropy" in log:
                row["entropy"] = log["entropy"]
    return [rows[step] for step in sorted(rows)]


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

    What lesson 21 launches: the zoo model saved to a temporary folder, rlbook's verifier as the reward,
    the preset mapped by ``trl_grpo_config``; prints one line per logged step and the final held-out pass@1.
    """
    import argparse
    import json
    import tempfile

    from rlbook.evaluation import evaluate_pass_at_k
    from rlbook.models import load_model
    from rlbook.tasks import get_task
    from rlbook.trainers import preset

    parser = argparse.ArgumentParser(prog="python -m rlbook.scaling", description=main.__doc__)
    parser.add_argument("--model", default="arith-base", help="zoo name or folder")
    parser.add_argument("--task", default="arithmetic")
    parser.add_argument("--preset", default="grpo")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--lora", type=int, default=8, help="LoRA rank (0: train every weight)")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        config = preset(args.preset, kl_beta=0.0, lora=args.lora or None, lr=args.lr, seed=args.seed,
                        max_new_tokens=48, unbiased_std=True)
        task = get_task(args.task)
        model, tokenizer = load_model(args.model)
    except ValueError as error:
        parser.error(str(error))
    held_out = list(task.dataset(32, seed=0, split="test"))

    def evaluate(policy):
        return {"held-out pass@1": evaluate_pass_at_k(policy, tokenizer, held_out, task.reward, n_samples=4,
                                                      max_new_tokens=48)["pass@1"]}

    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        rows = train_with_trl(folder, task, config, steps=args.steps, evaluate=evaluate, eval_every=args.steps)
    for row in rows:
        print(json.dumps({key: round(value, 4) if isinstance(value, float) else value for key, value in row.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
