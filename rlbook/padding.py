"""Padding: rows of different lengths made into one rectangular batch.

One convention runs through the package (it is ``transformers``'): a causal LM reads a batch of
sequences padded to a common width, with a 0/1 attention mask that is 1 on real tokens. Prompts
are padded on the *left*, so every prompt ends in the last column and generation continues from
the same position in every row; completions, and whole texts, are padded on the *right*. A
``rlbook.rollout.Rollout`` is laid out that way, and so is every training batch.

- ``stack_padded``: token lists → (ids, mask), the first step of every batch;
- ``pad_to``: a (B, T) tensor widened to (B, width);
- ``cat_padded``: several (b_i, T_i) tensors → one (Σ b_i, max T_i), e.g. two rollouts joined.
"""

from __future__ import annotations

import torch

from rlbook._checks import check_choice

__all__ = ["SIDES", "cat_padded", "pad_to", "stack_padded"]

SIDES = ("left", "right")


def stack_padded(token_lists, pad_id: int, *, side: str = "right",
                 device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)``, each (B, W) of dtype long, from B token lists; W is the longest list.

    Row i holds ``token_lists[i]`` at its right end (``side="left"``: padded on the left) or at its
    left end (``side="right"``), ``pad_id`` elsewhere; ``mask`` is 1 on the list's tokens, 0 on padding.
    """
    check_choice("side", side, SIDES)
    token_lists = [list(tokens) for tokens in token_lists]
    if not token_lists:
        raise ValueError("token_lists must hold at least one list of token ids")
    width = max(len(tokens) for tokens in token_lists)
    padded, real = [], []
    for tokens in token_lists:  # plain lists first: one tensor is built at the end, not one per row
        padding, ones = [pad_id] * (width - len(tokens)), [1] * len(tokens)
        padded.append(padding + tokens if side == "left" else tokens + padding)
        real.append([0] * len(padding) + ones if side == "left" else ones + [0] * len(padding))
    return (torch.tensor(padded, dtype=torch.long, device=device),
            torch.tensor(real, dtype=torch.long, device=device))


def pad_to(tensor: torch.Tensor, width: int, value=0, *, side: str = "right") -> torch.Tensor:
    """``tensor`` (B, T) widened to (B, ``width``) with ``value`` on the ``side`` ("left" or "right")."""
    check_choice("side", side, SIDES)
    if tensor.dim() != 2:
        raise ValueError(f"tensor must be 2-D (B, T), got shape {tuple(tensor.shape)}")
    missing = width - tensor.shape[1]
    if missing < 0:
        raise ValueError(f"width must be at least the tensor's width {tensor.shape[1]}, got {width}")
    return torch.nn.functional.pad(tensor, (missing, 0) if side == "left" else (0, missing), value=value)


def cat_padded(tensors, value=0, *, side: str = "right") -> torch.Tensor:
    """The rows of (b_i, T_i) ``tensors`` in one (Σ b_i, max T_i) tensor, each padded with ``value`` on ``side``."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("tensors must hold at least one tensor")
    width = max(tensor.shape[1] for tensor in tensors)
    return torch.cat([pad_to(tensor, width, value, side=side) for tensor in tensors])
