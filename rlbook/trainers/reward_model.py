"""A Bradley–Terry reward model: a language model with a scalar head, trained on preference pairs.

Bradley & Terry (1952) model a comparison as P(y_w ≻ y_l | x) = σ(r(x, y_w) − r(x, y_l)); fitting
r by maximum likelihood on human comparisons is the reward-model stage of RLHF (Ouyang et al.
2022, arXiv:2203.02155, eq. 1):

    L_RM(r) = − E_(x, y_w, y_l) log σ( r(x, y_w) − r(x, y_l) )

Here r is ``transformers``' ``AutoModelForSequenceClassification`` with one label (for the zoo:
``Qwen2ForSequenceClassification``), its backbone initialised from a causal LM (the policy it will
judge, as in InstructGPT) and a fresh linear head that reads the hidden state of the last token of
prompt + completion + end-of-sequence. Only differences of r are identified (adding a constant to
every reward changes no probability), so its absolute level means nothing.

Simplified on purpose: one comparison per prompt (InstructGPT batches all K-choose-2 comparisons of
a prompt together), no reward-centring term, constant learning rate.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import torch
from transformers import AutoModelForSequenceClassification

from rlbook._checks import check_bool, check_columns, check_int, check_optional_int, check_positive, check_settings
from rlbook.losses.preference import bradley_terry_loss
from rlbook.models.loading import load_model, load_tokenizer, resolve
from rlbook.padding import stack_padded
from rlbook.runtime import seed_everything
from rlbook.tasks.verifiers import completion_text
from rlbook.trainers.data import prompt_text, shuffled_batches
from rlbook.trainers.harness import LoopConfig, OptimConfig, postfix_of, restore_run, run_steps, save_run
from rlbook.trainers.history import History
from rlbook.trainers.live import REWARD_MODEL_PANELS

__all__ = ["RewardModel", "RewardModelConfig", "check_reward_model_settings", "pairwise_accuracy", "train_reward_model"]


class RewardModel:
    """A scalar reward r(x, y) from a sequence-classification model and its tokenizer.

    ``score(prompts, completions)`` returns a (N,) tensor of rewards; calling the object follows
    TRL's reward-function convention, ``rm(prompts=..., completions=...) -> list[float]``, so it can
    stand wherever a task's reward function does (``best_of_n``, the online trainer).
    """

    def __init__(self, model, tokenizer, *, max_length: int = 256):
        if getattr(model.config, "pad_token_id", None) is None:
            raise ValueError("model.config.pad_token_id must be set: the head reads the last non-padding token")
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = check_int("max_length", max_length, minimum=2)

    @classmethod
    def from_causal_lm(cls, causal_lm, tokenizer=None, *, seed: int = 0, max_length: int = 256) -> RewardModel:
        """A reward model whose backbone is a copy of ``causal_lm``'s (a zoo name, hub id, folder or a
        loaded model, then with its ``tokenizer``) and whose one-output head is freshly initialised."""
        if isinstance(causal_lm, str):
            causal_lm, tokenizer = load_model(causal_lm)
        if tokenizer is None:
            raise ValueError("tokenizer must be given with a loaded causal_lm")
        config = copy.deepcopy(causal_lm.config)
        config.num_labels = 1
        config.pad_token_id = tokenizer.pad_token_id
        torch.manual_seed(seed)
        model = AutoModelForSequenceClassification.from_config(config)
        backbone = getattr(model, model.base_model_prefix)
        backbone.load_state_dict(getattr(causal_lm, causal_lm.base_model_prefix).state_dict())
        return cls(model.eval(), tokenizer, max_length=max_length)

    @classmethod
    def from_pretrained(cls, folder, *, max_length: int = 256) -> RewardModel:
        """A reward model saved with ``save_pretrained`` (model and tokenizer), as ``rlbook reward-model``
        writes it into ``OUT/model``."""
        _, location = resolve(folder)
        model = AutoModelForSequenceClassification.from_pretrained(location)
        return cls(model.eval(), load_tokenizer(location), max_length=max_length)

    def texts(self, prompts, completions) -> list[str]:
        """The text the model reads for each pair: formatted prompt, completion, end of turn."""
        if len(prompts) != len(completions):
            raise ValueError(f"completions must have one entry per prompt ({len(prompts)}), got {len(completions)}")
        eos = self.tokenizer.eos_token if self.tokenizer.eos_token_id != self.tokenizer.pad_token_id else ""
        return [prompt_text(self.tokenizer, p) + completion_text(c) + eos for p, c in zip(prompts, completions)]

    def rewards(self, texts: list[str]) -> torch.Tensor:
        """r of each full text, (N,), in one forward pass, with gradients when enabled.

        The text is right-padded and cut to its *last* ``max_length`` tokens, so the head always
        reads the end of the response."""
        ids = [row[-self.max_length:] for row in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        input_ids, attention_mask = stack_padded(ids, self.tokenizer.pad_token_id, side="right",
                                                 device=next(self.model.parameters()).device)
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0]

    @torch.no_grad()
    def score(self, prompts, completions=None, *, batch_size: int = 64) -> torch.Tensor:
        """Rewards (N,) of ``completions`` after ``prompts``, or of full texts when ``completions`` is None."""
        check_int("batch_size", batch_size, minimum=1)
        texts = list(prompts) if completions is None else self.texts(list(prompts), list(completions))
        if not texts:
            raise ValueError("prompts is empty: there is nothing to score")
        self.model.eval()
        return torch.cat([self.rewards(texts[i:i + batch_size]) for i in range(0, len(texts), batch_size)]).float().cpu()

    def __call__(self, prompts=None, completions=None, **columns) -> list[float]:
        """TRL's reward-function convention: extra dataset columns are accepted and ignored."""
        if prompts is None or completions is None:
            raise ValueError("prompts and completions must both be given")
        return self.score(prompts, completions).tolist()


# Each setting of train_reward_model and its check, as check(name, value).
SETTING_CHECKS = {
    "steps": partial(check_optional_int, minimum=1), "epochs": partial(check_int, minimum=1),
    "batch_size": partial(check_int, minimum=1), "lr": check_positive, "eval_every": partial(check_int, minimum=1),
    "seed": check_int, "progress": check_bool,
}


@dataclass
class RewardModelConfig(LoopConfig):
    """Every setting of one reward-model run (``train_reward_model``); invalid settings raise ``ValueError``.

    ``steps`` steps (None: ``epochs`` passes over the pairs) on batches of ``batch_size`` pairs at a
    constant rate ``lr`` (``OptimConfig.reward_model``: torch's AdamW defaults, clipping at 1.0);
    held-out pairs are scored every ``eval_every`` steps; ``seed`` fixes the batch order.
    """

    CHECKS: ClassVar[dict] = SETTING_CHECKS
    steps: int | None = None
    epochs: int = 1
    batch_size: int = 16
    lr: float = 1e-4
    eval_every: int = 50
    seed: int = 0

    def optim(self) -> OptimConfig:
        return OptimConfig.reward_model(self.lr)

    def total_steps(self, n_pairs: int) -> int:
        """``steps``, or ``epochs`` passes over ``n_pairs`` pairs."""
        return self.steps if self.steps is not None else self.epochs * math.ceil(n_pairs / self.batch_size)


def train_reward_model(reward_model: RewardModel, pairs, *, steps: int | None = None, epochs: int = 1,
                       batch_size: int = 16, lr: float = 1e-4, eval_pairs=None, eval_every: int = 50, seed: int = 0,
                       progress: bool = True, live: bool | None = None, checkpoint_dir=None,
                       checkpoint_every: int | None = None, resume_from=None) -> History:
    """Fit ``reward_model`` to ``pairs`` (prompt, chosen, rejected) by the Bradley–Terry loss; returns the history.

    Each step scores the B chosen and B rejected texts in one forward pass and logs the loss, the
    accuracy (fraction of pairs with r(chosen) > r(rejected)), the mean margin and, every
    ``eval_every`` steps, the accuracy and margin on ``eval_pairs``. Runs ``steps`` steps, or
    ``epochs`` passes over ``pairs`` when ``steps`` is None (the settings make a
    ``RewardModelConfig``). The same seed gives the same history. ``live``: draw the metrics live
    under the progress bar (``rlbook.trainers.live``; None: in Jupyter when ``progress``).

    With ``checkpoint_dir`` a checkpoint is written every ``checkpoint_every`` steps (None: at the
    end). ``resume_from`` (a checkpoint folder or such a ``checkpoint_dir``) restores the model,
    optimizer, random state and history first and goes on from the saved step: a run of 2 steps
    resumed with ``steps=4`` ends where a straight 4-step run ends (the rate is constant, so the
    step budget may grow; the other settings must be the saved ones).
    """
    check_columns("pairs", pairs, ("prompt", "chosen", "rejected"))
    if eval_pairs is not None:
        check_columns("eval_pairs", eval_pairs, ("prompt", "chosen", "rejected"))
    config = RewardModelConfig(steps=steps, epochs=epochs, batch_size=batch_size, lr=lr, eval_every=eval_every,
                               seed=seed)
    check_bool("progress", progress)
    n_pairs = len(pairs["prompt"])
    steps = config.total_steps(n_pairs)
    chosen_texts = reward_model.texts(list(pairs["prompt"]), list(pairs["chosen"]))
    rejected_texts = reward_model.texts(list(pairs["prompt"]), list(pairs["rejected"]))
    seed_everything(seed)
    batches = shuffled_batches(n_pairs, batch_size, random.Random(seed))
    parameters = [p for p in reward_model.model.parameters() if p.requires_grad]
    optim = config.optim()
    optimizer, scheduler = optim.build(parameters)
    # What a resumed run must share with the saved one: all but the step budget (the rate is constant).
    settings = {**{key: value for key, value in config.to_dict().items() if key != "steps"}, "n_pairs": n_pairs}
    history = History(config={"steps": steps, **settings})
    parts = dict(models={"model": reward_model.model}, optimizers={"optimizer": optimizer},
                 schedulers={"scheduler": scheduler})
    if resume_from is not None:
        meta = restore_run(resume_from, **parts, meta=["step", "history"], settings=settings)
        history = History(meta["history"], config={"steps": steps, **settings})
        for _ in range(check_int("the checkpoint's step", meta["step"], minimum=0)):  # the batches already used
            next(batches)

    def step(index: int) -> dict:
        epoch, indices = next(batches)
        reward_model.model.train()
        rewards = reward_model.rewards([chosen_texts[i] for i in indices] + [rejected_texts[i] for i in indices])
        margins = rewards[:len(indices)] - rewards[len(indices):]
        loss = bradley_terry_loss(rewards[:len(indices)], rewards[len(indices):])
        optim.step(optimizer, loss, parameters)
        scheduler.step()
        row = {"step": index, "epoch": epoch, "loss": loss.item(), **_pair_metrics(margins.detach())}
        if eval_pairs is not None and (index % eval_every == 0 or index == steps - 1):
            row.update({f"eval/{k}": v for k, v in pairwise_accuracy(reward_model, eval_pairs).items()})
        return row

    def save(directory) -> None:
        save_run(directory, len(history), **parts, meta={"step": len(history), "settings": settings,
                                                          "history": history.rows})

    run_steps(step, range(len(history), steps), history=history, panels=REWARD_MODEL_PANELS, title="reward model",
              progress=progress, live=live, postfix=postfix_of({"loss": "loss", "accuracy": "accuracy",
                                                                "eval/accuracy": "eval/accuracy"}),
              checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, save=save)
    reward_model.model.eval()
    return history


def check_reward_model_settings(**settings) -> None:
    """Check any of ``train_reward_model``'s settings; ``ValueError`` names the first bad one.

    ``train_reward_model`` checks its arguments here, and ``rlbook reward-model`` checks its
    ``--set`` values here before it loads a model. A setting left out keeps its (valid) default.
    """
    check_settings("train_reward_model", SETTING_CHECKS, settings)


def pairwise_accuracy(reward_model: RewardModel, pairs, *, batch_size: int = 64) -> dict:
    """Accuracy (r(chosen) > r(rejected)) and mean margin of ``reward_model`` on ``pairs``."""
    chosen = reward_model.score(pairs["prompt"], pairs["chosen"], batch_size=batch_size)
    rejected = reward_model.score(pairs["prompt"], pairs["rejected"], batch_size=batch_size)
    return _pair_metrics(chosen - rejected)


def _pair_metrics(margins: torch.Tensor) -> dict:
    return {"accuracy": (margins > 0).float().mean().item(), "margin": margins.mean().item()}
