"""LoRA adapters via ``peft`` (Hu et al. 2021, "LoRA", arXiv:2106.09685).

W x becomes W x + (alpha / r) B A x with A (r × d_in), B (d_out × r) trained and W frozen;
B starts at zero, so the adapted model starts exactly equal to the base model.
"""

from __future__ import annotations

import torch
from peft import LoraConfig, get_peft_model

from rlbook._checks import check_int, check_positive

ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def lora_config(*, r: int = 8, alpha: float = 16.0, dropout: float = 0.0,
                target_modules=ATTENTION_PROJECTIONS) -> LoraConfig:
    """The ``peft.LoraConfig`` rlbook trains with (also handed to TRL's trainers, lesson 21)."""
    check_int("r", r, minimum=1)
    check_positive("alpha", alpha)
    check_positive("dropout", dropout, allow_zero=True)
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(target_modules),
                      task_type="CAUSAL_LM", bias="none")


def add_lora(model, *, r: int = 8, alpha: float = 16.0, dropout: float = 0.0,
             target_modules=ATTENTION_PROJECTIONS, seed: int = 0):
    """Wrap ``model`` with LoRA adapters on ``target_modules``; only the adapters are trainable.

    The adapters' random initialisation (``peft`` draws A from torch's global generator) is drawn from
    ``seed`` and leaves the global generator as it was: the same seed gives the same adapters, whatever
    ran before in the process.
    """
    check_int("seed", seed, minimum=0)
    config = lora_config(r=r, alpha=alpha, dropout=dropout, target_modules=target_modules)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, config)
