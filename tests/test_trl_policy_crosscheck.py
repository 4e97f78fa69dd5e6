"""rlbook's policy losses against TRL 1.16's GRPOTrainer._compute_loss on identical tensors.

A real GRPOTrainer is built around a tiny, locally constructed Qwen2 model and a word-level
PreTrainedTokenizerFast (nothing is downloaded; ``rlbook.scaling.trl_policy_loss``, which lesson 21
shows). Its model forward is replaced by a function that returns *our* per-token log-probs, so TRL's
loss code runs unchanged on the same (B, T) tensors that rlbook gets; both the loss and its gradient
with respect to those log-probs must agree.

Mapping of conventions (rlbook ← TRL):
- loss_type "grpo" / "sapo"  ← aggregation seq_mean_token_mean (TRL: per-sequence mean, then mean).
- loss_type "bnpo"           ← variant "grpo" with aggregation "token_mean" (local-batch token mean).
- loss_type "dapo" / "cispo" ← token_mean: TRL divides by num_items_in_batch (the tokens of the whole
  accumulated batch); with one process and no accumulation that is this batch's token count.
- loss_type "dr_grpo"        ← variant "dr_grpo" with max_len = TRL's max_completion_length.
- CISPO's cap: TRL clamps the ratio at ``epsilon_high`` itself (ScaleRL's ε_max); rlbook follows
  MiniMax-M1's clip(r, ·, 1 + ε_high), so TRL epsilon_high = 1 + rlbook eps_high. Neither has a lower bound.
- importance_sampling_level "sequence" with loss_type "grpo" ← variant "gspo" (TRL computes GSPO's
  sequence ratio; rlbook uses GSPO-token, whose value and gradient are identical for (B,) advantages).
- trl.experimental.gmpo.GMPOTrainer ← variant "gmpo" (both clip log-ratios to [−ε, ε]).
- beta > 0: TRL uses k3 in the loss; with use_bias_correction_kl (its default) k3 is multiplied by the
  differentiable ratio π_θ/π_old ← rlbook's kl_importance_weighted=True.
- TRL's std (Bessel, + 1e-4) only enters its advantages, which are inputs here, so it plays no role.
- delta (INTELLECT-2's two-sided clip) ← dual_clip = delta: TRL's −min(min(r, δ)·A, clip(r)·A) is PPO's dual
  clip when δ ≥ 1 + epsilon_high (for A > 0 the clipped term binds first; for A < 0, r > δ it is −δ·A).
- TRL divides the loss by current_gradient_accumulation_steps (set to 1 here, as outside accumulation).
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.experimental.gmpo import GMPOConfig, GMPOTrainer  # noqa: E402

from rlbook.losses import policy_loss  # noqa: E402
from rlbook.scaling import _tiny_trl_model, trl_policy_loss  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")

BATCH, WIDTH, GROUP, MAX_COMPLETION = 6, 5, 3, 8
LENGTHS = [5, 3, 4, 5, 1, 2]


@pytest.fixture(scope="module")
def tiny_model_and_tokenizer(tmp_path_factory):
    # Saved and reloaded so that the model names a local folder: with beta > 0 TRL loads its reference
    # model from that name, which must not be a hub id.
    return _tiny_trl_model(tmp_path_factory.mktemp("tiny-qwen2"))


def _tensors(seed: int, spread: float):
    generator = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[1] * n + [0] * (WIDTH - n) for n in LENGTHS])
    logp = -2 * torch.rand(BATCH, WIDTH, generator=generator, dtype=torch.float64)
    old_logp = logp + spread * torch.randn(BATCH, WIDTH, generator=generator, dtype=torch.float64)
    ref_logp = logp + 0.3 * torch.randn(BATCH, WIDTH, generator=generator, dtype=torch.float64)
    advantages = torch.tensor([1.2, -0.4, -0.8, 0.7, 0.5, -1.2], dtype=torch.float64)
    entropy = torch.rand(BATCH, WIDTH, generator=generator, dtype=torch.float64)
    return logp, old_logp, ref_logp, advantages, mask, entropy


def _trl_loss_and_grad(model_and_tokenizer, tmp_path, tensors, trainer_class=GRPOTrainer, config_class=GRPOConfig, **config):
    logp, old_logp, ref_logp, advantages, mask, entropy = tensors
    return trl_policy_loss(logp, old_logp, advantages, mask, ref_logp=ref_logp, entropy=entropy,
                           model_and_tokenizer=model_and_tokenizer, output_dir=tmp_path, trainer_class=trainer_class,
                           config_class=config_class, max_completion_length=MAX_COMPLETION, group_size=GROUP, **config)


def _rlbook_loss_and_grad(tensors, **kwargs):
    logp, old_logp, ref_logp, advantages, mask, entropy = tensors
    current = logp.clone().requires_grad_()
    if kwargs.get("beta", 0.0) > 0:
        kwargs["ref_logp"] = ref_logp
    if kwargs.get("entropy_coef", 0.0) > 0:
        kwargs["entropy"] = entropy
    loss, metrics = policy_loss(current, old_logp, advantages, mask, **kwargs)
    loss.backward()
    return loss.detach(), current.grad, metrics


CASES = {
    "grpo": ({"loss_type": "grpo"}, {"variant": "grpo"}),
    "bnpo": ({"loss_type": "bnpo"}, {"variant": "grpo", "aggregation": "token_mean"}),
    "dr_grpo": ({"loss_type": "dr_grpo"}, {"variant": "dr_grpo", "max_len": MAX_COMPLETION}),
    "dapo": ({"loss_type": "dapo", "epsilon_high": 0.28}, {"variant": "dapo"}),
    "cispo": ({"loss_type": "cispo", "epsilon_high": 1.3}, {"variant": "cispo", "eps_high": 0.3}),
    "sapo": ({"loss_type": "sapo"}, {"variant": "sapo"}),
    "sapo_temperatures": (
        {"loss_type": "sapo", "sapo_temperature_pos": 0.5, "sapo_temperature_neg": 2.0},
        {"variant": "sapo", "tau_pos": 0.5, "tau_neg": 2.0},
    ),
    "grpo_kl_k3": (
        {"loss_type": "grpo", "beta": 0.04, "use_bias_correction_kl": False},
        {"variant": "grpo", "beta": 0.04, "kl_estimator": "k3"},
    ),
    "dapo_kl_importance_weighted": (
        {"loss_type": "dapo", "epsilon_high": 0.28, "beta": 0.1},
        {"variant": "dapo", "beta": 0.1, "kl_importance_weighted": True},
    ),
    "grpo_entropy_bonus": ({"loss_type": "grpo", "entropy_coef": 0.01}, {"variant": "grpo", "entropy_coef": 0.01}),
    # TRL's delta clamps r from above inside the clipped min: PPO's dual clip at c = delta when delta >= 1 + eps_high
    "grpo_dual_clip": ({"loss_type": "grpo", "delta": 1.25}, {"variant": "grpo", "dual_clip": 1.25}),
    "dapo_dual_clip": ({"loss_type": "dapo", "epsilon_high": 0.28, "delta": 1.3}, {"variant": "dapo", "dual_clip": 1.3}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_loss_and_gradient_match_trl(case, tiny_model_and_tokenizer, tmp_path):
    trl_config, rlbook_kwargs = CASES[case]
    tensors = _tensors(seed=len(case), spread=0.25)
    trl_loss, trl_grad = _trl_loss_and_grad(tiny_model_and_tokenizer, tmp_path, tensors, **trl_config)
    loss, grad, metrics = _rlbook_loss_and_grad(tensors, **rlbook_kwargs)
    assert loss.item() == pytest.approx(trl_loss.item(), rel=1e-9, abs=1e-12)
    assert torch.allclose(grad, trl_grad, rtol=1e-9, atol=1e-12)
    if rlbook_kwargs["variant"] in ("grpo", "dapo", "cispo") and "beta" not in rlbook_kwargs:
        assert metrics["clip_frac"] > 0, "the tensors should exercise the clipped region"
    if "dual_clip" in rlbook_kwargs:
        assert metrics["clip_frac_dual"] > 0, "the tensors should put some A < 0 tokens past the dual clip"


def test_gspo_matches_trl_sequence_level_importance_sampling(tiny_model_and_tokenizer, tmp_path):
    tensors = _tensors(seed=11, spread=1e-3)  # sequence ratios straddle GSPO's tiny band
    trl_loss, trl_grad = _trl_loss_and_grad(
        tiny_model_and_tokenizer, tmp_path, tensors,
        loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4,
    )
    loss, grad, metrics = _rlbook_loss_and_grad(tensors, variant="gspo")
    assert 0 < metrics["clip_frac"] < 1
    assert loss.item() == pytest.approx(trl_loss.item(), rel=1e-9, abs=1e-12)
    assert torch.allclose(grad, trl_grad, rtol=1e-9, atol=1e-12)


def test_gmpo_matches_trl_experimental_gmpo_trainer(tiny_model_and_tokenizer, tmp_path):
    tensors = _tensors(seed=12, spread=0.6)  # large enough that some log-ratios leave [−0.4, 0.4]
    trl_loss, trl_grad = _trl_loss_and_grad(
        tiny_model_and_tokenizer, tmp_path, tensors, trainer_class=GMPOTrainer, config_class=GMPOConfig, loss_type="grpo",
    )
    loss, grad, metrics = _rlbook_loss_and_grad(tensors, variant="gmpo")
    assert metrics["clip_frac"] > 0
    assert loss.item() == pytest.approx(trl_loss.item(), rel=1e-9, abs=1e-12)
    assert torch.allclose(grad, trl_grad, rtol=1e-9, atol=1e-12)
