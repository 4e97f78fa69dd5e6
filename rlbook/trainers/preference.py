"""One preference loop, whose variants are loss functions: DPO, IPO, KTO, SimPO, CPO, ORPO.

Each step takes a batch of B pairs (prompt, chosen y_w, rejected y_l) and:

1. scores chosen and rejected in **one** forward pass of the policy (2B rows: the B chosen
   completions, then the B rejected ones, each after its prompt), giving per-token log-probs of
   the completion tokens only (the prompt is context, never a target);
2. sums them into sequence log-probs log π(y|x) (``rlbook.losses.sequence_logps``) and counts the
   completion lengths |y|;
3. for the losses that need one (DPO, IPO, KTO), does the same with the frozen reference π_ref,
   without gradients;
4. takes the per-example loss from ``rlbook.losses`` and averages it over the batch.

It logs what TRL's trainers log, under the same keys: the loss, the implicit rewards of chosen and
rejected (``rewards/chosen``, ``rewards/rejected``), their margin and the preference accuracy (the
fraction of pairs whose implicit reward ranks chosen above rejected), the policy's sequence
log-probs (``logps/chosen``, ``logps/rejected``), and, every ``eval_every`` steps when
``eval_pairs`` is given, the same accuracy, margin and log-probs on held-out pairs (``eval/...``).

Papers: DPO, Rafailov et al. 2023 (arXiv:2305.18290); IPO, Azar et al. 2023 (arXiv:2310.12036);
KTO, Ethayarajh et al. 2024 (arXiv:2402.01306); SimPO, Meng et al. 2024 (arXiv:2405.14734);
CPO, Xu et al. 2024 (arXiv:2401.08417); ORPO, Hong et al. 2024 (arXiv:2403.07691).

Simplified on purpose, compared with TRL's ``DPOTrainer`` and friends: AdamW with an optional
linear warm-up and a constant, linear or cosine learning rate after it, gradient clipping at 1.0,
no gradient accumulation, no mixed precision, one process. Two of TRL's speed options are here:
the reference's log-probs of the training pairs can be computed once, before training
(``precompute_ref_log_probs``), and pairs of similar length can be batched together
(``group_by_length``), which cuts the compute spent on padding.

KTO is run on the preference pairs *unpaired* (each chosen response is a desirable example, each
rejected one undesirable), and its reference point z0 comes from mismatched pairs inside the
batch: example i's prompt with example i+1's response (TRL's "KL" completions). With LoRA the
reference is the base model itself (adapters switched off), so no copy is made.
"""

from __future__ import annotations

import copy
import inspect
import math
import random
from functools import partial

import torch

from rlbook import losses
from rlbook._checks import (check_bool, check_choice, check_columns, check_int, check_optional_int, check_positive,
                            check_settings)
from rlbook.models.lora import add_lora
from rlbook.rollout import completion_logprobs
from rlbook.runtime import seed_everything
from rlbook.schedules import SCHEDULES as LR_SCHEDULES
from rlbook.trainers.data import collate_prompt_completions, encode_prompt_completions, shuffled_batches
from rlbook.trainers.harness import (OptimConfig, check_checkpoint_every, postfix_of, restore_run, run_steps,
                                     save_run)
from rlbook.trainers.history import History
from rlbook.trainers.live import PREFERENCE_PANELS

__all__ = ["LR_SCHEDULES", "PREFERENCE_LOSSES", "PreferenceTrainer", "check_preference_settings"]

PREFERENCE_LOSSES = ("dpo", "ipo", "kto", "simpo", "cpo", "orpo")
LOSSES_WITH_REFERENCE = ("dpo", "ipo", "kto")
PAIR_COLUMNS = ("prompt", "chosen", "rejected")
# The few live metrics the progress bar shows, and their short labels.
POSTFIX_KEYS = {"loss": "loss", "rewards/accuracies": "acc", "rewards/margins": "margin",
                "eval/rewards/accuracies": "eval_acc"}


class PreferenceTrainer:
    """Train ``model`` on preference pairs with ``loss`` in {"dpo", "ipo", "kto", "simpo", "cpo", "orpo"}.

    ``pairs`` (and ``eval_pairs``) are ``datasets.Dataset`` objects (or dicts of lists) with
    ``prompt``, ``chosen`` and ``rejected`` columns, TRL's preference format; prompts are strings
    or conversations, completions strings or lists of assistant messages.

    Knobs, each used only by the losses that have it: ``beta`` (DPO, KTO, SimPO, CPO: the inverse
    temperature of the implicit reward), ``tau`` (IPO: the margin target is 1/(2τ)), ``gamma``
    (SimPO: the target reward margin), ``lam`` (ORPO: weight of the odds-ratio term).

    Training runs for ``steps`` optimizer steps, or ``epochs`` passes over ``pairs`` when ``steps``
    is None. ``reference`` is the frozen π_ref (default: a frozen copy of ``model`` as it is now,
    made only for the losses that need one). ``lora`` wraps the model with ``peft`` LoRA first:
    True for ``add_lora``'s defaults or a dict of its arguments; only the adapters then train.
    The same ``seed`` (and model) gives the same history.

    Speed and schedule: ``lr_schedule`` is "constant", or "linear" or "cosine" (falling towards
    zero at the end of the run), after ``warmup_steps`` (``rlbook.schedules``). ``group_by_length`` batches pairs of similar
    length together (``shuffled_batches``). ``precompute_reference`` scores every training pair
    with π_ref once, before the first step, instead of in every step (TRL's
    ``precompute_ref_log_probs``); it saves work when the run sees pairs more than once. Either
    way the reference's numbers are the same, up to floating-point rounding.

    ``loss_fn`` replaces the library's per-pair loss of DPO or IPO by a function of your own with the
    same arguments, ``loss_fn(chosen, rejected, ref_chosen, ref_rejected, beta)`` for DPO (``tau`` for
    IPO), the (B,) sequence log-probs of the pairs under the policy and the reference, returning the (B,)
    losses (``rlbook.losses.dpo_loss`` / ``ipo_loss`` are the defaults); the loop, the logged implicit
    rewards and the evaluation are unchanged. Only DPO and IPO take one (the course's assignment 3 trains
    with the student's own losses through it).

    ``train()`` returns a ``History`` (``.to_pandas()``); ``self.model`` is the trained policy.
    ``save(folder)`` and ``resume(path)`` checkpoint and restore the run, as ``OnlineTrainer``'s do.
    """

    def __init__(self, model, tokenizer, pairs, *, loss: str = "dpo", beta: float = 0.1, tau: float = 0.1,
                 gamma: float = 0.5, lam: float = 0.1, lr: float = 1e-4, warmup_steps: int = 0, batch_size: int = 16,
                 epochs: int = 1, steps: int | None = None, reference=None, lora=None, eval_pairs=None,
                 eval_every: int = 50, max_prompt_length: int = 256, max_completion_length: int = 256,
                 lr_schedule: str = "constant", group_by_length: bool = False, precompute_reference: bool = False,
                 seed: int = 0, progress: bool = True, loss_fn=None):
        _check_loss_fn(loss_fn, loss)
        check_preference_settings(
            loss=loss, beta=beta, tau=tau, gamma=gamma, lam=lam, lr=lr, warmup_steps=warmup_steps,
            batch_size=batch_size, epochs=epochs, steps=steps, lora=lora, eval_every=eval_every,
            max_prompt_length=max_prompt_length, max_completion_length=max_completion_length, lr_schedule=lr_schedule,
            group_by_length=group_by_length, precompute_reference=precompute_reference, seed=seed, progress=progress)
        self.loss, self.lr_schedule, self.group_by_length, self.progress = loss, lr_schedule, group_by_length, progress
        self.loss_fn = loss_fn
        self.beta, self.tau, self.gamma, self.lam = float(beta), float(tau), float(gamma), float(lam)
        self.lr = float(lr)
        self.warmup_steps, self.batch_size, self.eval_every, self.seed = warmup_steps, batch_size, eval_every, seed
        self.tokenizer = tokenizer
        check_columns("pairs", pairs, PAIR_COLUMNS)
        if eval_pairs is not None:
            check_columns("eval_pairs", eval_pairs, PAIR_COLUMNS)
        self._lengths = dict(max_prompt_length=max_prompt_length, max_completion_length=max_completion_length)
        self.train_pairs = _encode_pairs(tokenizer, pairs, **self._lengths)
        self.eval_pairs = _encode_pairs(tokenizer, eval_pairs, **self._lengths) if eval_pairs is not None else None
        self.steps = _total_steps(steps, epochs, len(self.train_pairs[0]), self.batch_size)
        self.model = _with_lora(model, lora)
        self.needs_reference = self.loss in LOSSES_WITH_REFERENCE
        self.reference = self._make_reference(model, reference, lora)
        self.precompute_reference = precompute_reference and self.needs_reference
        self._train_reference_logps = None
        self._eval_reference_logps = None
        self.optim = OptimConfig.preference(self.lr, warmup=warmup_steps, schedule=lr_schedule)
        self.optimizer, self.scheduler = self.optim.build([p for p in self.model.parameters() if p.requires_grad],
                                                          steps=self.steps)
        self.step = 0  # optimizer steps taken
        self.history = History(config=self._config())

    # ------------------------------------------------------------------------------ set-up

    def _make_reference(self, model, reference, lora):
        """The frozen π_ref, or None: for the reference-free losses, and under LoRA, where the reference
        is the policy with its adapters switched off."""
        if not self.needs_reference or (reference is None and lora not in (None, False)):
            return None
        reference = reference if reference is not None else copy.deepcopy(model)
        return reference.eval().requires_grad_(False)

    # ------------------------------------------------------------------------------ scoring

    def _sequence_logps(self, model, prompts, completions) -> tuple[torch.Tensor, torch.Tensor]:
        """Sequence log-probs log π(y|x) (R,) and completion lengths |y| (R,) of R (prompt, completion) rows."""
        batch = collate_prompt_completions(list(zip(prompts, completions)), self.tokenizer.pad_token_id,
                                           next(self.model.parameters()).device)
        token_logps = completion_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                          batch.completion_mask)
        return losses.sequence_logps(token_logps, batch.completion_mask), batch.completion_lengths

    def _reference_logps(self, prompts, completions) -> torch.Tensor:
        """log π_ref(y|x) of the rows, without gradients."""
        with torch.no_grad():
            if self.reference is None:
                with self.model.disable_adapter():
                    return self._sequence_logps(self.model, prompts, completions)[0]
            return self._sequence_logps(self.reference, prompts, completions)[0]

    def _pair_logps(self, pairs, indices, *, with_reference: bool) -> dict:
        """Policy (and reference) sequence log-probs of the chosen and rejected responses of ``indices``,
        chosen and rejected scored in one forward pass."""
        prompts, chosen, rejected = ([column[i] for i in indices] for column in pairs)
        rows_prompts, rows_completions = prompts + prompts, chosen + rejected
        logps, lengths = self._sequence_logps(self.model, rows_prompts, rows_completions)
        n = len(indices)
        out = {"chosen": logps[:n], "rejected": logps[n:], "chosen_lens": lengths[:n], "rejected_lens": lengths[n:]}
        cached = self._train_reference_logps if pairs is self.train_pairs else None
        if with_reference and self.needs_reference and cached is not None:
            out["ref_chosen"], out["ref_rejected"] = cached[0][indices], cached[1][indices]
        elif with_reference and self.needs_reference:
            reference = self._reference_logps(rows_prompts, rows_completions)
            out["ref_chosen"], out["ref_rejected"] = reference[:n], reference[n:]
        if with_reference and self.loss == "kto":
            out["reference_point"] = self._kto_reference_point(rows_prompts, rows_completions)
        return out

    def _kto_reference_point(self, prompts, completions) -> torch.Tensor:
        """KTO's z0 from mismatched rows: row i's prompt with row i+1's completion (no gradient)."""
        mismatched = completions[1:] + completions[:1]
        with torch.no_grad():
            policy = self._sequence_logps(self.model, prompts, mismatched)[0]
        return losses.kto_reference_point(policy, self._reference_logps(prompts, mismatched))

    # ------------------------------------------------------------------------------ loss and rewards

    def _loss(self, logps: dict) -> torch.Tensor:
        """The per-example loss of ``self.loss`` (for KTO: the B desirable then the B undesirable examples)."""
        c, r, c_len, r_len = logps["chosen"], logps["rejected"], logps["chosen_lens"], logps["rejected_lens"]
        if self.loss_fn is not None:
            return _own_loss(self.loss_fn, c, r, logps["ref_chosen"], logps["ref_rejected"],
                             self.tau if self.loss == "ipo" else self.beta)
        if self.loss == "dpo":
            return losses.dpo_loss(c, r, logps["ref_chosen"], logps["ref_rejected"], self.beta)
        if self.loss == "ipo":
            return losses.ipo_loss(c, r, logps["ref_chosen"], logps["ref_rejected"], self.tau)
        if self.loss == "kto":
            desirable = torch.cat([torch.ones_like(c), torch.zeros_like(r)])
            return losses.kto_loss(torch.cat([c, r]), torch.cat([logps["ref_chosen"], logps["ref_rejected"]]),
                                   desirable, logps["reference_point"], self.beta)
        if self.loss == "simpo":
            return losses.simpo_loss(c, r, c_len, r_len, self.beta, self.gamma)
        if self.loss == "cpo":
            return losses.cpo_loss(c, r, c_len, self.beta)
        return losses.orpo_loss(c, r, c_len, r_len, lam=self.lam)

    def _implicit_rewards(self, logps: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Each loss's implicit reward of chosen and rejected, as TRL logs them.

        DPO, KTO: β log π/π_ref; IPO: τ log π/π_ref; SimPO: β/|y| log π; CPO: β log π; ORPO: the
        length-averaged log-prob log π/|y| (TRL logs λ times it; the scale does not change the
        accuracy).
        """
        c, r = logps["chosen"], logps["rejected"]
        if self.loss in LOSSES_WITH_REFERENCE:
            scale = self.tau if self.loss == "ipo" else self.beta
            return losses.dpo_implicit_rewards(c, r, logps["ref_chosen"], logps["ref_rejected"], scale)
        if self.loss == "cpo":
            return (self.beta * c).detach(), (self.beta * r).detach()
        scale = self.beta if self.loss == "simpo" else 1.0
        return losses.simpo_implicit_rewards(c, r, logps["chosen_lens"], logps["rejected_lens"], scale)

    # ------------------------------------------------------------------------------ training

    def train(self, *, checkpoint_dir=None, checkpoint_every: int | None = None, resume_from=None,
              live: bool | None = None) -> History:
        """Run the training loop up to ``steps`` steps; returns (and keeps in ``self.history``) one dict
        of metrics per step.

        With ``resume_from`` (a checkpoint folder, or a ``checkpoint_dir`` of an earlier run) the
        trainer is first restored (``resume``) and training goes on from the saved step: a run of 2
        steps resumed by a trainer built with ``steps=4`` ends where a straight 4-step run ends.
        With ``checkpoint_dir``, an atomic checkpoint (``save``) is written every
        ``checkpoint_every`` steps (None: only at the end). ``live``: draw the loss, accuracy, margin
        and log-probs live under the progress bar (``rlbook.trainers.live``; None: in Jupyter when ``progress``).
        """
        check_checkpoint_every(checkpoint_every)
        if resume_from is not None:
            self.resume(resume_from)
        if self.step == 0:  # a fresh run; a resumed one has its random state back
            seed_everything(self.seed)
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        optimizer, start = self.optimizer, self.step
        lengths = None
        if self.group_by_length:
            prompts, chosen, rejected = self.train_pairs
            lengths = [len(p) + max(len(c), len(r)) for p, c, r in zip(prompts, chosen, rejected)]
        batches = shuffled_batches(len(self.train_pairs[0]), self.batch_size, random.Random(self.seed), lengths=lengths)
        for _ in range(start):  # the batches the restored steps already used
            next(batches)
        if self.precompute_reference and self._train_reference_logps is None:
            self.model.eval()
            self._train_reference_logps = self._reference_pair_logps(self.train_pairs,
                                                                     _chunks(len(self.train_pairs[0]), 64))

        def step(index: int) -> dict:
            epoch, indices = next(batches)
            row = {"step": index, "epoch": epoch, **self._train_step(optimizer, parameters, indices)}
            self.scheduler.step()
            if self.eval_pairs is not None and (index % self.eval_every == 0 or index == self.steps - 1):
                row.update({f"eval/{k}": v for k, v in self.evaluate().items()})
            self.step = index + 1
            return row

        run_steps(step, range(start, self.steps), history=self.history, panels=PREFERENCE_PANELS, title=self.loss,
                  progress=self.progress, live=live, postfix=postfix_of(POSTFIX_KEYS), checkpoint_dir=checkpoint_dir,
                  checkpoint_every=checkpoint_every, save=self.save)
        self.model.eval()
        return self.history

    # ------------------------------------------------------------------------------ checkpoints

    def _settings(self) -> dict:
        """What a resumed run must share with the saved one (the step budget may differ, unless the
        learning rate decays over it)."""
        settings = {"loss": self.loss, "beta": self.beta, "tau": self.tau, "gamma": self.gamma, "lam": self.lam,
                    "lr": self.lr, "warmup_steps": self.warmup_steps, "lr_schedule": self.lr_schedule,
                    "group_by_length": self.group_by_length, "batch_size": self.batch_size, "seed": self.seed,
                    "n_pairs": len(self.train_pairs[0]), **self._lengths,
                    "loss_fn": None if self.loss_fn is None else getattr(self.loss_fn, "__qualname__", repr(self.loss_fn))}
        if self.lr_schedule != "constant":  # a decaying schedule is fixed by the step budget
            settings["steps"] = self.steps
        return settings

    def _config(self) -> dict:
        """Every setting of this run, as ``history.config`` (config.json) records it."""
        return {**self._settings(), "steps": self.steps}

    def _parts(self) -> dict:
        """The live objects a checkpoint holds (``rlbook.trainers.harness.save_run``)."""
        models = {"model": self.model, **({"reference": self.reference} if self.reference is not None else {})}
        return dict(models=models, optimizers={"optimizer": self.optimizer}, schedulers={"scheduler": self.scheduler})

    def save(self, directory) -> str:
        """Write an atomic checkpoint after ``self.step`` steps; returns its folder."""
        return save_run(directory, self.step, **self._parts(),
                        meta={"step": self.step, "settings": self._settings(), "history": self.history.rows})

    def resume(self, path) -> PreferenceTrainer:
        """Restore a checkpoint written by ``save`` (model, reference, optimizer, random state, history
        and step) into this trainer, built with the same settings; ``train()`` then goes on from there."""
        meta = restore_run(path, **self._parts(), meta=["step", "history"], settings=self._settings())
        self.step = check_int("the checkpoint's step", meta["step"], minimum=0)
        self.history = History(meta["history"], config=self._config())
        return self

    def _train_step(self, optimizer, parameters, indices) -> dict:
        """One optimizer step on the pairs ``indices``; returns the step's metrics."""
        self.model.train()
        logps = self._pair_logps(self.train_pairs, indices, with_reference=True)
        loss = self._loss(logps).mean()
        self.optim.step(optimizer, loss, parameters)
        metrics = {"loss": loss.item(), **losses.reward_metrics(*self._implicit_rewards(logps)),
                   "logps/chosen": logps["chosen"].mean().item(), "logps/rejected": logps["rejected"].mean().item()}
        if self.loss == "kto":
            metrics["kl"] = float(logps["reference_point"])
        return metrics

    @torch.no_grad()
    def evaluate(self, pairs=None, *, batch_size: int = 64) -> dict:
        """Preference accuracy and mean margin of the implicit reward on ``pairs`` (default: ``eval_pairs``),
        and the policy's mean sequence log-probs of their chosen and rejected responses.

        Accuracy is measured against the pairs' own labels: the fraction whose implicit reward ranks
        ``chosen`` strictly above ``rejected`` (ties count as wrong, as in TRL).

        The reference's log-probs on ``eval_pairs`` never change, so they are computed once.
        """
        if pairs is None and self.eval_pairs is None:
            raise ValueError("pairs must be given when the trainer has no eval_pairs")
        if pairs is not None:
            check_columns("pairs", pairs, PAIR_COLUMNS)
        encoded = self.eval_pairs if pairs is None else _encode_pairs(self.tokenizer, pairs, **self._lengths)
        self.model.eval()
        chunks = _chunks(len(encoded[0]), batch_size)
        scored = [self._pair_logps(encoded, chunk, with_reference=False) for chunk in chunks]
        logps = {key: torch.cat([s[key] for s in scored]) for key in ("chosen", "rejected", "chosen_lens",
                                                                        "rejected_lens")}
        if self.needs_reference and pairs is not None:
            logps["ref_chosen"], logps["ref_rejected"] = self._reference_pair_logps(encoded, chunks)
        elif self.needs_reference:
            if self._eval_reference_logps is None:
                self._eval_reference_logps = self._reference_pair_logps(encoded, chunks)
            logps["ref_chosen"], logps["ref_rejected"] = self._eval_reference_logps
        metrics = losses.reward_metrics(*self._implicit_rewards(logps))
        return {"rewards/accuracies": metrics["rewards/accuracies"], "rewards/margins": metrics["rewards/margins"],
                "logps/chosen": logps["chosen"].mean().item(), "logps/rejected": logps["rejected"].mean().item()}

    def _reference_pair_logps(self, pairs, chunks) -> tuple[torch.Tensor, torch.Tensor]:
        """log π_ref of the chosen and of the rejected responses of ``pairs``, chunk by chunk."""
        prompts, chosen, rejected = pairs
        ref_chosen = torch.cat([self._reference_logps([prompts[i] for i in c], [chosen[i] for i in c]) for c in chunks])
        ref_rejected = torch.cat([self._reference_logps([prompts[i] for i in c], [rejected[i] for i in c])
                                  for c in chunks])
        return ref_chosen, ref_rejected


# ---------------------------------------------------------------------------------- helpers


def _chunks(n: int, size: int) -> list[list[int]]:
    """Row indices 0 … n−1 cut into consecutive lists of at most ``size``."""
    return [list(range(start, min(n, start + size))) for start in range(0, n, size)]


def _encode_pairs(tokenizer, pairs, **lengths) -> tuple[list, list, list]:
    """Token ids of the prompts, chosen and rejected completions: three aligned lists."""
    prompts = list(pairs["prompt"])
    chosen = encode_prompt_completions(tokenizer, prompts, list(pairs["chosen"]), **lengths)
    rejected = encode_prompt_completions(tokenizer, prompts, list(pairs["rejected"]), **lengths)
    return [p for p, _ in chosen], [c for _, c in chosen], [c for _, c in rejected]


def _total_steps(steps, epochs, n_pairs: int, batch_size: int) -> int:
    """``steps`` when given, else ``epochs`` passes over the pairs."""
    return steps if steps is not None else epochs * math.ceil(n_pairs / batch_size)


def _with_lora(model, lora):
    """``model`` wrapped with LoRA adapters when ``lora`` is True or a dict of ``add_lora`` arguments."""
    if lora is None or lora is False:
        return model
    return add_lora(model) if lora is True else add_lora(model, **lora)


def _check_lora(name: str, lora) -> None:
    """``lora`` must be None, a bool, or a dict of ``add_lora``'s keyword arguments."""
    arguments = set(inspect.signature(add_lora).parameters) - {"model"}
    if not (lora is None or isinstance(lora, bool) or (isinstance(lora, dict) and set(lora) <= arguments)):
        raise ValueError(f"{name} must be None, True or a dict of add_lora arguments ({', '.join(sorted(arguments))}), "
                         f"got {lora!r}")


def _check_loss_fn(loss_fn, loss) -> None:
    if loss_fn is None:
        return
    if not callable(loss_fn):
        raise ValueError(f"loss_fn must be None or a function (chosen, rejected, ref_chosen, ref_rejected, scale), "
                         f"got {loss_fn!r}")
    if loss not in ("dpo", "ipo"):
        raise ValueError(f"loss_fn replaces DPO's or IPO's loss only: loss must be 'dpo' or 'ipo' with a loss_fn, "
                         f"got {loss!r}")


def _own_loss(loss_fn, chosen, rejected, ref_chosen, ref_rejected, scale) -> torch.Tensor:
    """``loss_fn``'s (B,) per-pair losses, checked: a tensor of the batch's shape that carries a gradient."""
    out = loss_fn(chosen, rejected, ref_chosen, ref_rejected, scale)
    if not isinstance(out, torch.Tensor) or out.shape != chosen.shape:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"loss_fn must return the (B,) per-pair losses, a tensor of shape {tuple(chosen.shape)}, "
                         f"got {shape}")
    if not out.requires_grad:
        raise ValueError("loss_fn's losses carry no gradient to the policy: compute them from chosen and rejected "
                         "with torch operations (no .item(), .detach() or new tensors)")
    return out


# Each setting of PreferenceTrainer and its check, as check(name, value).
SETTING_CHECKS = {
    "loss": partial(check_choice, choices=PREFERENCE_LOSSES),
    "beta": check_positive, "tau": check_positive, "lr": check_positive,
    "gamma": partial(check_positive, allow_zero=True), "lam": partial(check_positive, allow_zero=True),
    "warmup_steps": partial(check_int, minimum=0), "batch_size": partial(check_int, minimum=1),
    "epochs": partial(check_int, minimum=1), "steps": partial(check_optional_int, minimum=1), "lora": _check_lora,
    "eval_every": partial(check_int, minimum=1), "max_prompt_length": partial(check_int, minimum=1),
    "max_completion_length": partial(check_int, minimum=1),
    "lr_schedule": partial(check_choice, choices=LR_SCHEDULES),
    "group_by_length": check_bool, "precompute_reference": check_bool, "seed": check_int, "progress": check_bool,
}


def check_preference_settings(**settings) -> None:
    """Check any of ``PreferenceTrainer``'s settings; ``ValueError`` names the first bad one.

    The trainer checks its arguments here, and ``rlbook preference`` checks its ``--set`` values
    here before it samples a single pair. A setting left out keeps its (valid) default.
    """
    check_settings("PreferenceTrainer", SETTING_CHECKS, settings)
    if settings.get("loss") == "kto" and settings.get("batch_size", 2) < 2:
        raise ValueError(f"batch_size must be >= 2 for loss 'kto' (its reference point pairs each row with the next), "
                         f"got {settings['batch_size']}")
