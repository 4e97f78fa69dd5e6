"""PPO's critic: a value model V(s_t) that predicts, at every completion token, the return to come.

Design (the InstructGPT layout, Ouyang et al. 2022, arXiv:2203.02155, where the value model is a
separate network initialised from a trained model): the critic is a *separate copy* of the
policy's language model with a scalar head ``Linear(hidden, 1)`` on its last hidden state. It
shares no weights with the policy, so the value loss never pushes the policy's features around,
and the policy's LoRA or learning rate do not constrain it. The head starts at zero, so every
initial value is 0 and the first advantages are the plain returns.

Simplified: the copy keeps its language-model head (unused; asked for one position of logits, so
it costs nothing), and the critic is initialised from the policy rather than from a reward model.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from rlbook.rollout import completion_forward

__all__ = ["Critic"]


class Critic(nn.Module):
    """V(prefix) for every completion token: ``critic(prompt_ids, prompt_mask, completion_ids, completion_mask)``."""

    def __init__(self, language_model: nn.Module):
        super().__init__()
        self.body = copy.deepcopy(language_model)
        for parameter in self.body.parameters():
            parameter.requires_grad_(True)
        weight = next(self.body.parameters())
        self.head = nn.Linear(self.body.config.hidden_size, 1, device=weight.device, dtype=weight.dtype)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        """(B, C) values: entry t is V of the sequence up to (not including) completion token t.

        The hidden state at position P − 1 + t is the one that chooses token t, so its value is
        that of the state in which token t is chosen. 0 on padding.
        """
        hidden = completion_forward(self.body, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                    output="hidden_states")
        return self.head(hidden).squeeze(-1) * completion_mask.to(hidden.dtype)
