"""The online trainer's configuration, and the named methods as presets of it.

The book's thesis in code: PPO, REINFORCE, RLOO, GRPO, Dr.GRPO, DAPO, GSPO, GMPO, SAPO and CISPO
are one loop (``rlbook.trainers.online.OnlineTrainer``) with different settings of the same
knobs: which advantage estimator (a critic with GAE, a group baseline, none), which surrogate
(``rlbook.losses.policy_loss``'s ``variant``), where the KL penalty goes, and which batch
filters and reward shaping are on. ``preset("dapo")`` returns DAPO's settings as an
``OnlineConfig``; ``preset("dapo", lr=1e-4)`` changes one of them.

Each preset keeps the choices that define its paper and scales the rest (group size, batch,
generation length, learning rate) to the book's models: a few hundred thousand parameters on a
2-core CPU, where a step must take seconds, not minutes.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, field

from rlbook._checks import check_choice, check_int, check_knob, check_positive
from rlbook.aggregation import AGGREGATION_MODES
from rlbook.kl import KL_ESTIMATORS
from rlbook.losses.policy import COV_CONTROLS
from rlbook.losses.registry import policy_loss_variant

__all__ = ["ADVANTAGE_ESTIMATORS", "GROUP_ESTIMATORS", "OnlineConfig", "PRESETS", "preset"]

# "grpo" / "dr_grpo" / "rloo": group baselines (rlbook.advantages.group_advantages);
# "reinforce_pp": rewards whitened over the whole batch (REINFORCE++, Hu 2025, arXiv:2501.03262);
# "gae": a learned critic and GAE (Schulman et al. 2015, arXiv:1506.02438); "none": A = R.
ADVANTAGE_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_pp", "gae", "none")
GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo")
KL_PLACEMENTS = ("loss", "reward")
# What dynamic sampling tests for a flat group (``True`` means "reward"): the total reward the
# advantages see, or the verifier's correctness (DAPO's constraint 0 < #correct < G, eq. 11).
DYNAMIC_SAMPLING_ON = ("reward", "correct")
# Knobs of policy_loss that a config may override; each must be one the variant uses. A registered
# variant's other knobs go in ``loss_knobs``.
LOSS_KNOBS = ("eps_low", "eps_high", "dual_clip", "tau_pos", "tau_neg", "aggregation")


@dataclass
class OnlineConfig:
    """Every setting of one online RL run. Invalid settings raise ``ValueError`` naming the field.

    Sampling: ``group_size`` G completions for each of ``prompts_per_step`` prompts, at most
    ``max_new_tokens`` tokens, at ``temperature`` / ``top_p``.
    Optimisation: ``epochs`` passes over each batch in minibatches of ``minibatch_size`` completions
    (None: the whole batch, one optimizer step per batch, exactly on-policy); AdamW at ``lr`` with
    ``warmup_steps`` of linear warm-up; gradients clipped to ``max_grad_norm`` (None: no clipping).
    Advantages: ``advantage`` in ``ADVANTAGE_ESTIMATORS``; ``unbiased_std`` for GRPO's σ;
    ``gamma`` / ``lam`` / ``critic_lr`` for "gae".
    Loss: ``variant``, any variant registered with ``policy_loss`` (``rlbook.losses.variant_names()``: the
    built-ins and a reader's own, ``register_policy_loss``), and overrides of its knobs (None: the variant's
    default; ``loss_knobs``: {knob: value} for a registered variant's knobs that have no field here);
    ``entropy_coef`` for an entropy bonus; ``cov_control`` ("clip_cov" / "kl_cov", Cui et al. 2025)
    with ``cov_fraction`` (None: the paper's share), Clip-Cov's ``cov_bounds`` and KL-Cov's
    ``kl_cov_coef`` acts on the tokens whose
    log-probability and advantage covary most (``rlbook.losses.policy_loss``).
    KL to a frozen reference: ``kl_beta`` (0: no reference is built), ``kl_estimator``, and
    ``kl_placement``: "loss" (β·k per token in the loss, GRPO) or "reward" (−β·k per token in the
    reward, InstructGPT). In the reward only k1 gives the reverse-KL gradient, since
    E[k·∇log π] = ∇KL(π‖π_ref) needs k = log(π/π_ref) sample by sample; any other estimator there
    warns (lesson 02, §6; Shah et al. 2025, arXiv:2512.21852, report "K3 in reward" biased).
    Rewards: the verifier's reward plus ``format_reward_weight`` × the format reward, plus DAPO's
    soft overlong penalty when ``overlong`` = (max_len, cache_len). ``overlong_filter``: DAPO's overlong
    filtering (Yu et al. 2025, arXiv:2503.14476, §3.4, Table 1's "Overlong Filtering"): answers that
    reached ``max_new_tokens`` without ending are left out of the update (their loss is masked); they
    still count in their group's advantages.
    Batch filters: ``dynamic_sampling`` (DAPO: resample prompts, at most ``max_resample_rounds``
    extra rounds, until no group in the batch has all-equal rewards; ``True`` or ``"reward"`` tests
    the total reward the advantages see, ``"correct"`` tests the verifier's correctness, DAPO's
    0 < #correct < G, so a group told apart only by a length penalty is dropped), ``advantage_filter`` (drop
    completions with |A| ≤ tol from the update), ``advantage_noise`` (σ of Gaussian noise added
    to the advantages).
    ``lora``: train LoRA adapters of this rank instead of all weights. ``seed``: the run's seed.
    """

    name: str = "custom"
    group_size: int = 8
    prompts_per_step: int = 8
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    epochs: int = 1
    minibatch_size: int | None = None
    lr: float = 1e-4
    warmup_steps: int = 0
    max_grad_norm: float | None = 1.0
    advantage: str = "grpo"
    unbiased_std: bool = False
    variant: str = "grpo"
    eps_low: float | None = None
    eps_high: float | None = None
    dual_clip: float | None = None
    tau_pos: float | None = None
    tau_neg: float | None = None
    aggregation: str | None = None
    loss_knobs: dict = field(default_factory=dict)
    kl_beta: float = 0.0
    kl_estimator: str = "k3"
    kl_placement: str = "loss"
    entropy_coef: float = 0.0
    cov_control: str | None = None
    cov_fraction: float | None = None
    cov_bounds: tuple[float, float] = (1.0, 5.0)
    kl_cov_coef: float = 1.0
    format_reward_weight: float = 0.0
    overlong: tuple[int, int] | None = None
    overlong_filter: bool = False
    dynamic_sampling: bool | str = False
    max_resample_rounds: int = 4
    advantage_filter: float | None = None
    advantage_noise: float = 0.0
    gamma: float = 1.0
    lam: float = 0.95
    critic_lr: float = 1e-4
    lora: int | None = None
    seed: int = 0

    def __post_init__(self):
        self._check_sampling()
        self._check_optimisation()
        self._check_advantages()
        self._check_loss_knobs()
        self._check_kl_and_rewards()

    @property
    def batch_size(self) -> int:
        """Completions per step: prompts_per_step × group_size."""
        return self.prompts_per_step * self.group_size

    @property
    def has_critic(self) -> bool:
        return self.advantage == "gae"

    def loss_overrides(self) -> dict:
        """The policy_loss knobs this config sets (the others keep the variant's defaults)."""
        fields = {knob: getattr(self, knob) for knob in LOSS_KNOBS if getattr(self, knob) is not None}
        return {**fields, **self.loss_knobs}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> OnlineConfig:
        values = dict(values)
        for name in ("overlong", "cov_bounds"):  # JSON turns tuples into lists
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)

    # --- checks, one group of fields each ------------------------------------------------
    def _check_sampling(self):
        check_int("group_size", self.group_size, minimum=1)
        check_int("prompts_per_step", self.prompts_per_step, minimum=1)
        check_int("max_new_tokens", self.max_new_tokens, minimum=1)
        check_positive("temperature", self.temperature)
        if not 0 < check_positive("top_p", self.top_p) <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        check_int("seed", self.seed, minimum=0)

    def _check_optimisation(self):
        check_int("epochs", self.epochs, minimum=1)
        if self.minibatch_size is not None:
            check_int("minibatch_size", self.minibatch_size, minimum=1)
        check_positive("lr", self.lr)
        check_int("warmup_steps", self.warmup_steps, minimum=0)
        if self.max_grad_norm is not None:
            check_positive("max_grad_norm", self.max_grad_norm)
        if self.lora is not None:
            check_int("lora", self.lora, minimum=1)

    def _check_advantages(self):
        check_choice("advantage", self.advantage, ADVANTAGE_ESTIMATORS)
        if not isinstance(self.unbiased_std, bool):
            raise ValueError(f"unbiased_std must be a bool, got {self.unbiased_std!r}")
        if self.advantage in GROUP_ESTIMATORS and self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 for the group baseline {self.advantage!r}, "
                             f"got {self.group_size}")
        if not isinstance(self.dynamic_sampling, bool) and self.dynamic_sampling not in DYNAMIC_SAMPLING_ON:
            raise ValueError(f"dynamic_sampling must be a bool or one of {DYNAMIC_SAMPLING_ON}, "
                             f"got {self.dynamic_sampling!r}")
        if self.dynamic_sampling and self.group_size < 2:
            raise ValueError("group_size must be >= 2 for dynamic_sampling (it filters groups with equal rewards)")
        check_int("max_resample_rounds", self.max_resample_rounds, minimum=0)
        if self.advantage_filter is not None:
            check_positive("advantage_filter", self.advantage_filter, allow_zero=True)
        check_positive("advantage_noise", self.advantage_noise, allow_zero=True)
        for name in ("gamma", "lam"):
            if not 0 <= check_positive(name, getattr(self, name), allow_zero=True) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        check_positive("critic_lr", self.critic_lr)

    def _check_loss_knobs(self):
        entry = policy_loss_variant(self.variant)  # a ValueError listing the registered variants
        defaults = {**entry.defaults, "aggregation": entry.aggregation}
        self._check_extra_knobs(entry)
        for knob, value in self.loss_overrides().items():
            if knob not in defaults:
                raise ValueError(f"{knob} is not used by variant {self.variant!r} (its knobs: {sorted(defaults)})")
            if knob == "aggregation":
                check_choice("aggregation", value, AGGREGATION_MODES)
            elif knob in LOSS_KNOBS:
                check_positive(knob, value, allow_zero=knob in ("eps_low", "eps_high"))
        eps_low = self.eps_low if self.eps_low is not None else defaults.get("eps_low")
        eps_high = self.eps_high if self.eps_high is not None else defaults.get("eps_high")
        if eps_low is not None and eps_high is not None and eps_high < eps_low:
            raise ValueError(f"eps_high must be >= eps_low={eps_low} (clip-higher widens the upper bound), "
                             f"got {eps_high}")
        if entry.sequence_advantages and self.advantage == "gae":
            raise ValueError(f"variant {self.variant!r} needs one advantage per response; advantage 'gae' gives one "
                             "per token")
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1, got {self.dual_clip}")
        check_positive("entropy_coef", self.entropy_coef, allow_zero=True)
        if self.cov_control is not None:
            check_choice("cov_control", self.cov_control, tuple(COV_CONTROLS))
        elif self.cov_fraction is not None:
            raise ValueError("cov_fraction needs cov_control ('clip_cov' or 'kl_cov')")
        if self.cov_fraction is not None and not 0 < self.cov_fraction <= 1:
            raise ValueError(f"cov_fraction must be in (0, 1], got {self.cov_fraction}")
        check_positive("kl_cov_coef", self.kl_cov_coef, allow_zero=True)
        bounds = self.cov_bounds
        if (not isinstance(bounds, (tuple, list)) or len(bounds) != 2
                or not all(isinstance(b, (int, float)) and math.isfinite(b) for b in bounds) or bounds[0] > bounds[1]):
            raise ValueError(f"cov_bounds must be (low, high) with low <= high, got {bounds!r}")

    def _check_extra_knobs(self, entry):
        """``loss_knobs``: {name: number, bool or None} for knobs of the variant that have no field of their own."""
        if not isinstance(self.loss_knobs, dict):
            raise ValueError(f"loss_knobs must be a dict of knob -> value, got {type(self.loss_knobs).__name__}")
        for knob, value in self.loss_knobs.items():
            if knob in LOSS_KNOBS:
                raise ValueError(f"loss_knobs: set {knob} as its own field, OnlineConfig({knob}=...)")
            if knob not in entry.defaults:
                raise ValueError(f"loss_knobs: {knob} is not used by variant {entry.name!r} "
                                 f"(its knobs: {sorted(entry.defaults)})")
            check_knob(f"loss_knobs: {knob}", value)

    def _check_kl_and_rewards(self):
        check_positive("kl_beta", self.kl_beta, allow_zero=True)
        check_choice("kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        check_choice("kl_placement", self.kl_placement, KL_PLACEMENTS)
        if self.kl_beta > 0 and self.kl_placement == "reward" and self.kl_estimator != "k1":
            # E[k3·∇log π] = ∇KL(π‖π_ref) − ∇KL(π_ref‖π): a biased pull, away from π_ref near it
            # (lesson 02, §6). A warning, not a refusal: the configuration is studied (Shah et al. 2025).
            warnings.warn(f"kl_placement='reward' with kl_estimator={self.kl_estimator!r}: only 'k1' in the reward "
                          "gives the reverse-KL gradient; a detached k2/k3 there is biased (lesson 02, §6)",
                          UserWarning, stacklevel=4)
        check_positive("format_reward_weight", self.format_reward_weight, allow_zero=True)
        if not isinstance(self.overlong_filter, bool):
            raise ValueError(f"overlong_filter must be True or False, got {self.overlong_filter!r}")
        if self.overlong is not None:
            if not isinstance(self.overlong, (tuple, list)) or len(self.overlong) != 2:
                raise ValueError(f"overlong must be (max_len, cache_len) or None, got {self.overlong!r}")
            max_len = check_int("overlong max_len", self.overlong[0], minimum=1)
            cache_len = check_int("overlong cache_len", self.overlong[1], minimum=0)
            if cache_len > max_len:
                raise ValueError(f"overlong cache_len must be <= max_len={max_len}, got {cache_len}")
            self.overlong = (max_len, cache_len)


# The book's scale, shared by every preset: 8 prompts × 8 completions of at most 64 tokens.
BOOK_SCALE = dict(group_size=8, prompts_per_step=8, max_new_tokens=64, lr=2e-4)

PRESETS = {
    # Schulman et al. 2017 (arXiv:1707.06347) as used for LMs by Ziegler et al. 2019
    # (arXiv:1909.08593) and InstructGPT (Ouyang et al. 2022, arXiv:2203.02155): four models
    # (policy, frozen reference, critic, reward = the verifier); k1 KL in the reward; a critic with
    # GAE (γ = 1, λ = 0.95); several epochs of minibatch updates with the clipped surrogate, ε = 0.2.
    # One completion per prompt: the critic is the baseline.
    "ppo": dict(group_size=1, prompts_per_step=64, advantage="gae", variant="ppo", epochs=2, minibatch_size=32,
                kl_beta=0.05, kl_estimator="k1", kl_placement="reward", gamma=1.0, lam=0.95, critic_lr=1e-3),
    # Williams 1992: the plain score-function estimator, A = R, no baseline, no clipping.
    "reinforce": dict(group_size=1, prompts_per_step=64, advantage="none", variant="reinforce"),
    # Ahmadian et al. 2024 (arXiv:2402.14740): REINFORCE with the leave-one-out baseline of the
    # other k − 1 samples, sequence-level loss, no clipping and no critic.
    "rloo": dict(advantage="rloo", variant="reinforce"),
    # Shao et al. 2024 (arXiv:2402.03300): group-normalised advantages (r − μ)/σ, PPO's clip
    # ε = 0.2, per-response token mean, k3 KL to the reference in the loss with β = 0.04.
    "grpo": dict(advantage="grpo", variant="grpo", kl_beta=0.04, kl_estimator="k3", kl_placement="loss"),
    # Liu et al. 2025 (arXiv:2503.20783): no σ in the advantage, no 1/|o| (a constant normaliser,
    # the generation budget), and no KL term for rule-based rewards.
    "dr_grpo": dict(advantage="dr_grpo", variant="dr_grpo"),
    # Yu et al. 2025 (arXiv:2503.14476): clip-higher (0.2 / 0.28), token-level loss, dynamic
    # sampling, soft overlong punishment (the last quarter of the budget), no KL term.
    "dapo": dict(advantage="grpo", variant="dapo", dynamic_sampling=True, overlong="budget"),
    # Zheng et al. 2025 (arXiv:2507.18071): the sequence-level ratio with tiny clip bounds
    # (3e-4 / 4e-4); a batch split into minibatches so that later updates are off-policy.
    "gspo": dict(advantage="grpo", variant="gspo", minibatch_size=32),
    # Zhao et al. 2025 (arXiv:2507.20673): the geometric mean of token ratios, clipped in log
    # space at ±0.4.
    "gmpo": dict(advantage="grpo", variant="gmpo", minibatch_size=32),
    # Gao et al. 2025 (arXiv:2511.20347): a soft sigmoid gate instead of the hard clip, with a
    # steeper temperature for negative advantages (τ_pos 1.0, τ_neg 1.05).
    "sapo": dict(advantage="grpo", variant="sapo", minibatch_size=32),
    # MiniMax 2025 (arXiv:2506.13585): REINFORCE with the IS weight clipped and stopped, so that
    # no token loses its gradient; token-level loss.
    "cispo": dict(advantage="grpo", variant="cispo", minibatch_size=32),
}


def preset(name: str, **overrides) -> OnlineConfig:
    """The ``OnlineConfig`` of method ``name`` (a key of ``PRESETS``), with ``overrides`` applied.

    DAPO's overlong window follows the generation budget: (max_new_tokens, max_new_tokens // 4)
    unless ``overlong`` is given.
    """
    check_choice("name", name, PRESETS)
    unknown = set(overrides) - {f.name for f in dataclasses.fields(OnlineConfig)}
    if unknown:
        raise ValueError(f"overrides name unknown OnlineConfig fields: {sorted(unknown)}")
    settings = {"name": name, **BOOK_SCALE, **PRESETS[name], **overrides}
    if settings.get("overlong") == "budget":
        budget = settings["max_new_tokens"]
        settings["overlong"] = (budget, budget // 4)
    if settings.get("minibatch_size") is not None and "minibatch_size" not in overrides:
        batch = settings["prompts_per_step"] * settings["group_size"]
        settings["minibatch_size"] = min(settings["minibatch_size"], batch)
    return OnlineConfig(**settings)
