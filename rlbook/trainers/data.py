"""Shared data plumbing of the offline trainers (preference, SFT, reward model, rejection sampling).

Every offline trainer scores *completions after prompts*. A prompt is a string (used verbatim) or
a conversation (a list of ``{"role", "content"}`` messages, TRL's conversational format), which
goes through the tokenizer's chat template with the assistant turn opened. A completion is a
string or a list of assistant messages; its tokens are followed by the end-of-sequence token,
which is what the policy emits to stop and so must be learned too.

A batch has the layout of a ``rlbook.rollout.Rollout``: prompts left-padded, completions
right-padded, each with a 0/1 mask. So ``rlbook.rollout.completion_logprobs`` scores a batch of
training pairs exactly as it scores the policy's own samples.

Simplified on purpose: no packing and plain truncation (the prompt's *last* tokens and the
completion's *first* ones are kept), which is enough for the book's short chats.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from rlbook._checks import check_int
from rlbook.padding import stack_padded
from rlbook.rollout import prompt_text, sample  # prompt_text: re-exported, the trainers format prompts with it
from rlbook.tasks.reviews import gold_reward, preference_pairs
from rlbook.tasks.verifiers import completion_text

__all__ = ["PromptCompletionBatch", "collate_prompt_completions", "encode_prompt_completions",
           "policy_preference_pairs", "prompt_text", "shuffled_batches"]


@dataclass
class PromptCompletionBatch:
    """Prompts (B, P) left-padded and completions (B, C) right-padded, with 0/1 masks."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor

    @property
    def completion_lengths(self) -> torch.Tensor:
        """(B,) number of completion tokens per row (end-of-sequence token included), as floats."""
        return self.completion_mask.sum(dim=1).float()


def encode_prompt_completions(tokenizer, prompts, completions, *, max_prompt_length: int = 256,
                              max_completion_length: int = 256) -> list[tuple[list[int], list[int]]]:
    """Token ids ``(prompt_ids, completion_ids + [eos])`` for each pair, truncated to the caps.

    Truncation rule: the prompt keeps its *last* ``max_prompt_length`` tokens (the end of a prompt
    is what the completion follows), the completion its *first* ``max_completion_length`` tokens,
    end-of-sequence included (so a cut completion has none). Prompts go through the chat template
    (``prompt_text``), completions through ``completion_text``. The one (prompt, completion) encoder
    of the preference trainer (chosen and rejected alike) and of ``rlbook.preference_analysis``;
    ``rlbook.trainers.next_token.encode_chats`` cuts a joined sequence instead (see there why), and
    ``RewardModel.rewards`` keeps the *last* tokens of the joined text, since its head reads the last one.
    """
    check_int("max_prompt_length", max_prompt_length, minimum=1)
    check_int("max_completion_length", max_completion_length, minimum=1)
    if len(prompts) != len(completions):
        raise ValueError(f"completions must have one entry per prompt ({len(prompts)}), got {len(completions)}")
    prompt_texts = [prompt_text(tokenizer, p) for p in prompts]
    completion_texts = [completion_text(c) for c in completions]
    prompt_ids = tokenizer(prompt_texts, add_special_tokens=False)["input_ids"] if prompt_texts else []
    completion_ids = tokenizer(completion_texts, add_special_tokens=False)["input_ids"] if completion_texts else []
    encoded = []
    for i, (p_ids, c_ids) in enumerate(zip(prompt_ids, completion_ids)):
        if not p_ids:
            raise ValueError(f"prompts[{i}] is empty: a prompt needs at least one token")
        encoded.append((p_ids[-max_prompt_length:], (c_ids + [tokenizer.eos_token_id])[:max_completion_length]))
    return encoded


def collate_prompt_completions(encoded: list[tuple[list[int], list[int]]], pad_id: int,
                               device: torch.device | str = "cpu") -> PromptCompletionBatch:
    """Pad a list of ``(prompt_ids, completion_ids)`` into a ``PromptCompletionBatch``: prompts on the left,
    completions on the right."""
    prompts = stack_padded([p for p, _ in encoded], pad_id, side="left", device=device)
    completions = stack_padded([c for _, c in encoded], pad_id, side="right", device=device)
    return PromptCompletionBatch(*prompts, *completions)


def shuffled_batches(n_rows: int, batch_size: int, rng: random.Random, *, lengths=None, group_size: int = 50,
                     across_epochs: bool = False):
    """Endless batches of row indices: each epoch a fresh seeded shuffle, cut into ``batch_size``
    pieces (the last one of an epoch may be shorter). Yields ``(epoch, indices)``.

    With ``lengths`` (one number per row, e.g. its token count) rows of similar length are batched
    together, as ``group_by_length`` does in Hugging Face's Trainer: the epoch's shuffled order is
    cut into groups of ``group_size`` batches, each group is sorted by length and cut into
    batches, and the batches are shuffled. Every row is still seen once per epoch; a batch is
    padded to its longest row, so this wastes far less compute on padding when lengths vary.

    ``across_epochs=True`` is the next-token loop's order (``rlbook.trainers.next_token``): the
    shuffled epochs form one stream, cut into full batches of ``batch_size`` (a batch may end one
    epoch and start the next; the next epoch is shuffled only when the rows left are fewer than a
    batch), so every step sees as many rows; ``epoch`` is then that of the batch's first row. The
    two orders differ on purpose: the offline trainers count epochs (DPO, reward model), the
    pretraining/SFT loop counts steps. Not with ``lengths``.
    """
    check_int("n_rows", n_rows, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    if lengths is not None and len(lengths) != n_rows:
        raise ValueError(f"lengths must have one entry per row ({n_rows}), got {len(lengths)}")
    check_int("group_size", group_size, minimum=1)
    if across_epochs:
        if lengths is not None:
            raise ValueError("lengths must be None with across_epochs=True (length grouping cuts each epoch)")
        yield from _stream_batches(n_rows, batch_size, rng)
        return
    epoch = 0
    while True:
        order = list(range(n_rows))
        rng.shuffle(order)
        if lengths is None:
            batches = [order[start:start + batch_size] for start in range(0, n_rows, batch_size)]
        else:
            span = batch_size * group_size
            batches = []
            for start in range(0, n_rows, span):
                group = sorted(order[start:start + span], key=lambda i: lengths[i], reverse=True)
                batches += [group[k:k + batch_size] for k in range(0, len(group), batch_size)]
            rng.shuffle(batches)
        for indices in batches:
            yield epoch, indices
        epoch += 1


def _stream_batches(n_rows: int, batch_size: int, rng: random.Random):
    """``shuffled_batches(..., across_epochs=True)``: shuffled epochs back to back, cut into full batches."""
    order: list[int] = []
    taken = 0  # rows yielded so far
    while True:
        if len(order) < batch_size:
            fresh = list(range(n_rows))
            rng.shuffle(fresh)
            order += fresh
        yield taken // n_rows, order[:batch_size]
        taken += len(order[:batch_size])
        del order[:batch_size]


def policy_preference_pairs(model, tokenizer, prompts, *, seed: int = 0, noisy_labels: bool = True,
                            max_new_tokens: int = 96, temperature: float = 1.0, batch_size: int = 256,
                            min_gold_gap: float = 0.0, drop_truncated: bool = False):
    """Preference pairs on the policy's own samples: two completions per prompt, labelled by the
    review domain's gold labeller (``rlbook.tasks.reviews.preference_pairs``; ties dropped).

    With ``noisy_labels`` the label is drawn from the gold Bradley–Terry model, like a person's;
    without, chosen is always the completion with the higher gold reward, which is what held-out
    accuracy should be measured against. ``min_gold_gap`` > 0 keeps only the pairs whose gold
    rewards differ by at least that much (clear preferences), and ``drop_truncated`` drops the
    pairs in which either completion was cut off at ``max_new_tokens``. Returns a
    ``datasets.Dataset`` (prompt, chosen, rejected, chosen_gold, rejected_gold).
    """
    if min_gold_gap < 0:
        raise ValueError(f"min_gold_gap must be >= 0, got {min_gold_gap}")
    prompts = list(prompts)
    rollout = sample(model, tokenizer, prompts, num_samples=2, max_new_tokens=max_new_tokens,
                     temperature=temperature, seed=seed, batch_size=batch_size)
    first, second = rollout.texts[0::2], rollout.texts[1::2]
    truncated = rollout.truncated.view(-1, 2).any(dim=1).tolist()
    keep = [i for i in range(len(prompts))
            if abs(gold_reward(first[i]) - gold_reward(second[i])) >= min_gold_gap
            and not (drop_truncated and truncated[i])]
    pairs = preference_pairs([prompts[i] for i in keep], [first[i] for i in keep], [second[i] for i in keep],
                             seed=seed)
    if noisy_labels:
        return pairs
    return pairs.map(_order_by_gold)


def _order_by_gold(row: dict) -> dict:
    """Swap chosen and rejected where the label went against the gold reward."""
    if row["chosen_gold"] >= row["rejected_gold"]:
        return row
    return {**row, "chosen": row["rejected"], "rejected": row["chosen"],
            "chosen_gold": row["rejected_gold"], "rejected_gold": row["chosen_gold"]}
