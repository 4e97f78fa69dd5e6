"""Tiny causal language models of a real family (Qwen2), built from a config.

The zoo's models are ``transformers.Qwen2ForCausalLM`` instances, the same class as
``Qwen/Qwen2.5-0.5B-Instruct``, only with a character vocabulary and a few hundred thousand
parameters, so every lesson runs on a laptop CPU and the same code runs on a hub model on a GPU.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM

from rlbook._checks import check_choice

# Named shapes: "test" for unit tests (builds in milliseconds), "small" for the shipped zoo, "tiny" for
# the zoo's smaller student (lesson 20's distillation).
MODEL_SHAPES = {
    "test": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    "tiny": dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    "small": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2),
}


def tiny_qwen2_config(tokenizer: PreTrainedTokenizerBase, *, shape: str = "small", max_length: int = 256) -> Qwen2Config:
    """A Qwen2 config sized by ``shape`` (see ``MODEL_SHAPES``) for ``tokenizer``'s vocabulary."""
    check_choice("shape", shape, MODEL_SHAPES)
    return Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_length,
        tie_word_embeddings=True,
        rope_theta=10_000.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **MODEL_SHAPES[shape],
    )


def build_tiny_model(tokenizer: PreTrainedTokenizerBase, *, shape: str = "small", seed: int = 0,
                     max_length: int = 256) -> Qwen2ForCausalLM:
    """A freshly initialised ``Qwen2ForCausalLM`` for ``tokenizer`` (same seed, same weights)."""
    config = tiny_qwen2_config(tokenizer, shape=shape, max_length=max_length)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def count_parameters(model: torch.nn.Module, *, trainable_only: bool = False) -> int:
    """Number of (trainable) parameters; tied weights count once."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total
