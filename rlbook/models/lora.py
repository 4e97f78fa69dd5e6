"""LoRA adapters via ``peft`` (Hu et al. 2021, "LoRA", arXiv:2106.09685).

W x becomes W x + (alpha / r) B A x with A (r × d_in), B (d_out × r) trained and W frozen;
B starts at zero, so the adapted model starts exactly equal to the base model.
"""

from __future__ import annotations

from peft import LoraConfig, get_peft_model

from rlbook._checks import check_int, check_positive

ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def add_lora(model, *, r: int = 8, alpha: float = 16.0, dropout: float = 0.0,
             target_modules=ATTENTION_PROJECTIONS):
    """Wrap ``model`` with LoRA adapters on ``target_modules``; only the adapters are trainable."""
    check_int("r", r, minimum=1)
    check_positive("alpha", alpha)
    check_positive("dropout", dropout, allow_zero=True)
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(target_modules),
                        task_type="CAUSAL_LM", bias="none")
    return get_peft_model(model, config)
