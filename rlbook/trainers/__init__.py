"""Trainers: one online policy-gradient loop whose methods are presets, and (below) the offline ones.

- ``OnlineTrainer`` + ``OnlineConfig`` / ``preset(name)``: PPO, REINFORCE, RLOO, GRPO, Dr.GRPO,
  DAPO, GSPO, GMPO, SAPO, CISPO (``rlbook.trainers.online``, ``rlbook.trainers.config``).
- ``AsyncTrainer`` + ``AsyncConfig``: the same loop with a generator up to η versions stale, naive or
  AReaL's decoupled objective (``rlbook.trainers.async_rl``).
- ``History``: the tidy per-step log (``history.save(folder)``: history.csv, history.json, config.json);
  ``Checkpoint`` / ``save_checkpoint`` / ``load_checkpoint``: atomic checkpoints (safetensors + JSON).
- ``rlbook.trainers.harness``: the scaffold every loop runs its steps through (progress bar, live plot,
  history, checkpoint and resume) and ``OptimConfig``, each loop's optimiser as data;
  ``rlbook.trainers.live``: the live plot under every loop's progress bar; ``rlbook.trainers.next_token``:
  the next-token loop that SFT and the zoo's pretraining share.

Trainers import the math, models, tasks, rollout, update and evaluation below them, never the zoo,
the figures or the exercises above them (``tests/test_layers.py``).
"""

from rlbook.trainers.async_rl import ASYNC_OBJECTIVES, AsyncConfig, AsyncTrainer
from rlbook.trainers.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from rlbook.trainers.config import ADVANTAGE_ESTIMATORS, PRESETS, OnlineConfig, preset
from rlbook.trainers.critic import Critic
from rlbook.trainers.harness import OptimConfig
from rlbook.trainers.history import History
from rlbook.trainers.online import OnlineTrainer

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ASYNC_OBJECTIVES",
    "AsyncConfig",
    "AsyncTrainer",
    "Checkpoint",
    "Critic",
    "History",
    "OnlineConfig",
    "OnlineTrainer",
    "OptimConfig",
    "PRESETS",
    "load_checkpoint",
    "preset",
    "save_checkpoint",
]

# --- Offline trainers (preference, SFT, reward model, rejection sampling) ---------------------
# Their owner adds their imports here, e.g. ``from rlbook.trainers.preference import ...``, and
# extends ``__all__`` with their names.
from rlbook.trainers.preference import PREFERENCE_LOSSES, PreferenceTrainer  # noqa: E402
from rlbook.trainers.rejection import BestOfN, best_of_n, rejection_sampling_finetune, task_reward_fn  # noqa: E402
from rlbook.trainers.reward_model import (  # noqa: E402
    RewardModel, RewardModelConfig, pairwise_accuracy, train_reward_model)
from rlbook.trainers.sft import SFTConfig, sft, sft_loss  # noqa: E402

__all__ += [
    "BestOfN", "PREFERENCE_LOSSES", "PreferenceTrainer", "RewardModel", "RewardModelConfig", "SFTConfig",
    "best_of_n", "pairwise_accuracy",
    "rejection_sampling_finetune", "sft", "sft_loss", "task_reward_fn", "train_reward_model",
]
