"""Supervised fine-tuning: maximise log π(y|x) of given completions, the prompt being context only.

    L_SFT(θ) = − Σ_{rows} Σ_t mask_t log π_θ(y_t | x, y_<t) / Σ_{rows} Σ_t mask_t

(the token mean over the batch's completion tokens, end-of-sequence token included; prompt tokens
carry no loss). This is the first stage of the RLHF pipeline (Ouyang et al. 2022,
arXiv:2203.02155, §3.5) and the inner step of rejection-sampling fine-tuning (``rejection``).

The loop is the next-token loop the zoo's models are pretrained with
(``rlbook.trainers.next_token.run_chats``: seeded
shuffled batches, AdamW, warm-up then cosine decay, gradient clipping), reused rather than
copied; this module only turns prompts and completions in TRL's formats into its chats. Wrap the
model with ``rlbook.models.add_lora`` first to train adapters only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from rlbook._checks import check_bool, check_columns, check_int, check_positive, check_settings
from rlbook.tasks.verifiers import completion_text
from rlbook.trainers.data import prompt_text
from rlbook.trainers.history import History
from rlbook.trainers.next_token import NextTokenConfig, collate, encode_chats, run_chats

__all__ = ["SFTConfig", "check_sft_settings", "sft", "sft_loss"]


@dataclass
class SFTConfig(NextTokenConfig):
    """Every setting of one SFT run (``sft``): the next-token loop's, with SFT's defaults.

    ``steps`` AdamW steps on batches of ``batch_size`` (prompt, completion) pairs cut to
    ``max_length`` tokens, peak rate ``lr`` after ``warmup`` steps (then the zoo's cosine to 10 %),
    ``weight_decay``; ``seed`` fixes the batch order. SFT starts from a trained model, so its rate
    is lower than pretraining's, its batches smaller and it has no warm-up; the optimiser is the
    same (``OptimConfig.next_token``). Invalid settings raise ``ValueError`` naming the field.
    """

    lr: float = 1e-3
    batch_size: int = 16
    warmup: int = 0


def sft(model, tokenizer, data, *, steps: int, lr: float = 1e-3, batch_size: int = 16, warmup: int = 0,
        max_length: int = 256, seed: int = 0, progress: bool = True, live: bool | None = None,
        checkpoint_dir=None, checkpoint_every: int | None = None, resume_from=None,
        stop_after: int | None = None) -> History:
    """Fine-tune ``model`` in place on ``data`` for ``steps`` steps; returns the loss per step.

    ``data`` is a list of ``(prompt, completion)`` pairs or a ``datasets.Dataset`` (or dict of
    lists) with ``prompt`` and ``completion`` columns (TRL's prompt-completion format). Prompts are
    strings (verbatim) or conversations (through the chat template); completions are strings or
    lists of assistant messages. The same seed gives the same weights. The history's ``config``
    holds the settings (an ``SFTConfig``) and the number of examples. ``live``: draw the loss live
    under the progress bar (``rlbook.trainers.live``; None: in Jupyter when ``progress``).

    With ``checkpoint_dir`` a checkpoint is written every ``checkpoint_every`` steps (None: at the
    end); ``resume_from`` goes on from one, to the weights and losses of an uninterrupted run;
    ``stop_after`` stops (and checkpoints) after that many steps (``rlbook.trainers.next_token.run_chats``).
    """
    config = SFTConfig(steps=steps, lr=lr, batch_size=batch_size, warmup=warmup, max_length=max_length, seed=seed)
    check_bool("progress", progress)
    chats = [(prompt_text(tokenizer, prompt), completion_text(completion)) for prompt, completion in _pairs(data)]
    run = run_chats(model, tokenizer, chats, config, progress=progress, desc="sft", live=live,
                    checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, resume_from=resume_from,
                    stop_after=stop_after)
    return History([{"step": row["step"], "loss": row["loss"]} for row in run.rows],
                   config={**config.to_dict(), "examples": len(chats)})


def sft_loss(model, tokenizer, data, *, max_length: int = 256, batch_size: int = 64) -> float:
    """``sft``'s loss on ``data`` without a step: the token mean of −log π(y_t | x, y_<t) over every
    completion token of every pair (end-of-sequence included), the L_SFT of this module's docstring.

    On held-out pairs from the training data's distribution it is the validation loss whose gap to
    the training loss measures over-fitting (Goodfellow, Bengio and Courville, *Deep Learning*, 2016,
    §5.2). ``data`` as ``sft`` takes it; the pairs are encoded exactly as ``sft`` encodes them, so on
    the pairs of one full batch it equals the loss ``sft`` logs before its first step.
    """
    check_int("max_length", max_length, minimum=2)
    check_int("batch_size", batch_size, minimum=1)
    chats = [(prompt_text(tokenizer, prompt), completion_text(completion)) for prompt, completion in _pairs(data)]
    encoded = encode_chats(tokenizer, chats, max_length=max_length)
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(encoded), batch_size):
            input_ids, attention, labels = collate(encoded[start:start + batch_size], tokenizer.pad_token_id)
            scored = int((labels[:, 1:] != -100).sum())   # the model's loss predicts token t + 1 from tokens ≤ t
            if scored:
                total += float(model(input_ids=input_ids, attention_mask=attention, labels=labels).loss) * scored
                tokens += scored
    model.train(was_training)
    if not tokens:
        raise ValueError("data has no completion token within max_length: the loss is undefined")
    return total / tokens


# Each setting of sft and its check, as check(name, value).
SETTING_CHECKS = {
    "steps": partial(check_int, minimum=1), "lr": check_positive, "batch_size": partial(check_int, minimum=1),
    "warmup": partial(check_int, minimum=0), "max_length": partial(check_int, minimum=2), "seed": check_int,
    "progress": check_bool,
}


def check_sft_settings(**settings) -> None:
    """Check any of ``sft``'s settings; ``ValueError`` names the first bad one.

    ``sft`` checks its arguments here, and ``rlbook sft`` checks its ``--set`` values here before
    it loads a model. A setting left out keeps its (valid) default.
    """
    check_settings("sft", SETTING_CHECKS, settings)


def _pairs(data) -> list[tuple]:
    """``(prompt, completion)`` pairs from a list of pairs or a prompt-completion dataset."""
    if isinstance(data, (list, tuple)):
        if not data:
            raise ValueError("data is empty: it must hold at least one (prompt, completion) pair")
        if not all(isinstance(row, (list, tuple)) and len(row) == 2 for row in data):
            raise ValueError("data must be a list of (prompt, completion) pairs or a dataset with "
                             "'prompt' and 'completion' columns")
        return list(data)
    check_columns("data", data, ("prompt", "completion"))
    return list(zip(data["prompt"], data["completion"]))
