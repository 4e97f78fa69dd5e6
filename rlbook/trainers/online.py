"""One online policy-gradient loop; PPO, GRPO, DAPO and the rest are configurations of it.

A step of ``OnlineTrainer``, each stage one short method:

1. **Sample** G completions for each of ``prompts_per_step`` prompts (``rlbook.rollout.sample``),
   keeping the sampling policy's log-probs (``old_logp``).
2. **Score** them: the verifier (``task.reward``) or a reward function, plus an optional format
   reward, reward model and DAPO's soft overlong penalty (``rlbook.shaping``); the per-token KL to
   the frozen reference when there is one (``rlbook.kl``).
3. **Dynamic sampling** (DAPO): while some group has all-equal rewards, sample more prompts and
   keep only groups with varied rewards (or, with ``dynamic_sampling="correct"``, varied
   correctness, DAPO's 0 < #correct < G), for at most ``max_resample_rounds`` extra rounds.
4. **Advantages**: a group baseline, REINFORCE++'s batch whitening, A = R, or a critic with GAE
   (``rlbook.advantages``); the KL goes into the reward here when ``kl_placement="reward"``.
   Then the advantage filter and advantage noise (``rlbook.shaping``).
5. **Update**: ``epochs`` passes over the batch in minibatches; each recomputes log π_θ of the
   sampled tokens and minimises ``rlbook.losses.policy_loss`` (the ratio π_θ/π_old is 1 on the
   first minibatch and moves after it), then an AdamW step; the critic, if any, is fitted with
   ``value_loss`` on the same minibatch.
6. **Log** one tidy row into ``trainer.history``; the progress bar shows reward, entropy, KL,
   clip fraction and length.

Papers: PPO (Schulman et al. 2017, arXiv:1707.06347), GAE (Schulman et al. 2015, arXiv:1506.02438),
GRPO (Shao et al. 2024, arXiv:2402.03300), RLOO (Ahmadian et al. 2024, arXiv:2402.14740),
REINFORCE++ (Hu 2025, arXiv:2501.03262), DAPO (Yu et al. 2025, arXiv:2503.14476); the variants'
losses are cited in ``rlbook.losses.policy``.

Simplified on purpose: one process, sampling and training in turn with the same weights (no
inference engine, no asynchrony: old_logp is the sampling policy's own log-prob; the asynchronous
variant is ``rlbook.trainers.async_rl``); the KL-in-reward used by a group baseline is the
sequence sum Σ_t −β k_t (a return, not per-token credit); the advantage filter drops completions
from the update, so they do not count in the loss's average; the book's models have no dropout,
so the policy is kept in eval mode throughout.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from rlbook.advantages import batch_normalize, gae, group_advantages
from rlbook.aggregation import masked_mean
from rlbook.evaluation import evaluate_pass_at_k
from rlbook.kl import kl_estimate, kl_in_reward
from rlbook.losses.policy import value_loss
from rlbook.metrics import mean_length_by_correctness
from rlbook.models.lora import add_lora
from rlbook.padding import cat_padded
from rlbook.rollout import Rollout, _row_indices, completion_logprobs, sample
from rlbook.shaping import (
    add_advantage_noise,
    advantage_filter_mask,
    combine_rewards,
    dynamic_sampling_mask,
    reward_only_groups,
    soft_overlong_penalty,
)
from rlbook.tasks.verifiers import format_reward
from rlbook.trainers.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from rlbook.trainers.config import GROUP_ESTIMATORS, OnlineConfig
from rlbook.trainers.critic import Critic
from rlbook.trainers.history import History
from rlbook.trainers.harness import OptimConfig, check_checkpoint_every, checkpoint_of, restore_parts, run_steps
from rlbook.trainers.live import ONLINE_PANELS
from rlbook.update import minibatch_plan, policy_step

__all__ = ["OnlineTrainer"]

# Purposes of the seeds derived from (config.seed, counter, purpose): a resumed run re-derives them.
SEED_SAMPLING, SEED_PROMPTS, SEED_MINIBATCHES, SEED_NOISE, SEED_EVALUATION, SEED_COV = range(6)


@dataclass
class ScoredBatch:
    """Sampled completions and everything the update needs about them, one row per completion."""

    rollout: Rollout
    examples: list[dict]
    score: torch.Tensor  # (B,) total reward (verifier + format + reward model + overlong)
    correct: torch.Tensor  # (B,) verifier reward == 1 (NaN without a verifier)
    gold: torch.Tensor | None  # (B,) gold reward, when a gold function is given
    ref_logp: torch.Tensor | None  # (B, C) log π_ref of the sampled tokens, when there is a reference
    kl: torch.Tensor | None  # (B, C) per-token KL estimate of the sampling policy to the reference

    def select(self, rows: torch.Tensor) -> ScoredBatch:
        """The same batch restricted to ``rows`` (in that order), rollout included (``Rollout.select``)."""
        rollout = self.rollout.select(rows)
        rows = _row_indices(rows, len(self.examples))

        def take(tensor):
            return None if tensor is None else tensor[rows]

        return dataclasses.replace(self, rollout=rollout, examples=[self.examples[i] for i in rows.tolist()],
                                   score=self.score[rows], correct=self.correct[rows], gold=take(self.gold),
                                   ref_logp=take(self.ref_logp), kl=take(self.kl))

    @staticmethod
    def concat(parts: list[ScoredBatch], *, pad_id: int) -> ScoredBatch:
        """Stack batches row-wise (``Rollout.concat``); per-token fields are right-padded with 0."""

        def stack(name):
            tensors = [getattr(p, name) for p in parts]
            if tensors[0] is None:
                return None
            return torch.cat(tensors) if tensors[0].dim() == 1 else cat_padded(tensors, 0.0, side="right")

        return ScoredBatch(rollout=Rollout.concat([p.rollout for p in parts], pad_id=pad_id),
                           examples=[e for p in parts for e in p.examples], score=stack("score"),
                           correct=stack("correct"), gold=stack("gold"), ref_logp=stack("ref_logp"), kl=stack("kl"))


class OnlineTrainer:
    """Online RL on a causal LM: ``OnlineTrainer(model, tokenizer, task, preset("grpo")).train(50)``.

    Args:
        - model: a ``transformers`` causal LM (the policy); trained in place (wrapped with LoRA when
          ``config.lora`` is set: then ``trainer.policy`` is the ``peft`` model).
        - tokenizer: its tokenizer.
        - task_or_reward: a task (``rlbook.tasks.get_task(...)``: its ``reward`` is the verifier and
          its train split the default prompts), a function ``reward(text, example) -> float``,
          or None when ``reward_model`` alone gives the reward.
        - config: an ``OnlineConfig`` (``rlbook.trainers.preset(name)``).
        - train_dataset: rows with a ``prompt`` column (and whatever the reward reads); default
          ``task.dataset(2000, split="train", seed=config.seed)``.
        - reference: the frozen reference π_ref; by default, and only when ``config.kl_beta > 0``, a
          frozen copy of ``model`` — or, under LoRA, no copy: the reference is then the policy
          with its adapters switched off (the base weights, which LoRA never trains).
        - reward_model: a reward function in TRL's convention, ``rm(prompts=..., completions=...) -> (B,)
          scores`` (e.g. ``rlbook.trainers.RewardModel``), added to the reward; it is given the
          chat-formatted prompt strings and the completion texts.
        - gold_reward: a function ``(text, example) -> float`` logged as ``gold_reward`` (never trained on).
        - advantage_fn: ``fn(rewards, group_size)`` → the (B,) advantages of the (B,) sequence rewards (groups of
          ``group_size`` consecutive rows), in place of ``config.advantage``'s estimator (not with GAE).
        - token_weights_fn: ``fn(mask, mode, max_len)`` → the (B, T) token weights of the loss's aggregation, in
          place of ``rlbook.aggregation.token_weights`` (``policy_loss(token_weights_fn=...)``).
        - gae_fn, critic_targets_fn (GAE only): ``gae_fn(rewards, values, gamma, lam)`` → the (T,) advantages of
          one response's (T,) token rewards and values (the episode ends after its last token), in place of
          ``rlbook.advantages.gae``, called once per response; ``critic_targets_fn(advantages, values)`` → the
          (T,) targets the critic regresses onto (default A + V, the λ-returns).
          These hooks let a reader train with functions of their own (the course's assignments 2 and 4 do);
          none is saved in a checkpoint: pass them again to a resumed trainer.
    """

    def __init__(self, model, tokenizer, task_or_reward, config: OnlineConfig, *, train_dataset=None,
                 reference=None, reward_model=None, gold_reward=None, advantage_fn=None, token_weights_fn=None,
                 gae_fn=None, critic_targets_fn=None):
        if not isinstance(config, OnlineConfig):
            raise ValueError(f"config must be an OnlineConfig (see rlbook.trainers.preset), "
                             f"got {type(config).__name__}")
        _check_hooks(config, advantage_fn=advantage_fn, token_weights_fn=token_weights_fn, gae_fn=gae_fn,
                     critic_targets_fn=critic_targets_fn)
        self.config = config
        self.advantage_fn, self.token_weights_fn = advantage_fn, token_weights_fn
        self.gae_fn, self.critic_targets_fn = gae_fn, critic_targets_fn
        self.tokenizer = tokenizer
        self.task, self.verifier = _verifier_of(task_or_reward, reward_model)
        if config.dynamic_sampling == "correct" and self.verifier is None:
            raise ValueError('dynamic_sampling="correct" needs a verifier (a task or a reward function) to tell '
                             "right answers from wrong")
        self.reward_model = reward_model
        self.gold_reward = gold_reward
        self.examples = self._training_examples(train_dataset)
        self.reference = self._frozen_reference(model, reference)
        self.critic = Critic(model).eval() if config.has_critic else None
        self.policy = (add_lora(model, r=config.lora, seed=config.seed) if config.lora else model).eval()
        # A linear warm-up, then constant (which needs no step budget); stepped after each update.
        self.optim = OptimConfig.online(config.lr, warmup=config.warmup_steps, grad_clip=config.max_grad_norm)
        self.optimizer, self.scheduler = self.optim.build([p for p in self.policy.parameters() if p.requires_grad])
        self.critic_optim = OptimConfig.online(config.critic_lr, grad_clip=config.max_grad_norm)  # no schedule
        self.critic_optimizer = (self.critic_optim.optimizer(self.critic.parameters())
                                 if self.critic is not None else None)
        self.history = History(config=config.to_dict())
        self.step = 0
        self.sample_calls = 0
        self.wall_time = 0.0

    # --- set-up ----------------------------------------------------------------------------
    def _training_examples(self, train_dataset) -> list[dict]:
        if train_dataset is None:
            if self.task is None:
                raise ValueError("train_dataset is required when task_or_reward is not a task")
            train_dataset = self.task.dataset(2000, seed=self.config.seed, split="train")
        examples = [dict(row) for row in train_dataset]
        if not examples or "prompt" not in examples[0]:
            raise ValueError("train_dataset must be a non-empty dataset with a 'prompt' column")
        return examples

    def _frozen_reference(self, model, reference):
        """A frozen π_ref, or None: without a KL term, and under LoRA when none is given (see
        ``_reference_terms``: the base model then serves, adapters off)."""
        if reference is None and (self.config.kl_beta == 0 or self.config.lora):
            return None
        reference = copy.deepcopy(model) if reference is None else reference
        for parameter in reference.parameters():
            parameter.requires_grad_(False)
        return reference.eval()

    # --- the loop --------------------------------------------------------------------------
    def train(self, steps: int, *, checkpoint_dir=None, checkpoint_every: int | None = None, resume_from=None,
              progress: bool = True, live: bool | None = None) -> History:
        """Run ``steps`` more steps (after restoring ``resume_from``, if given); returns the history.

        With ``checkpoint_dir``, a checkpoint is written every ``checkpoint_every`` steps (None:
        only at the end). ``live``: draw reward, entropy, KL, clip fraction and length live under
        the progress bar (``rlbook.trainers.live``; None: in Jupyter when ``progress``).
        """
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"steps must be a non-negative int, got {steps!r}")
        check_checkpoint_every(checkpoint_every)
        if resume_from is not None:
            self.resume(resume_from)

        def step(index: int) -> None:
            self.train_step()  # it records its own row (it is also called alone)

        run_steps(step, range(self.step, self.step + steps), history=self.history, panels=ONLINE_PANELS,
                  title=self.config.name, progress=progress, live=live, checkpoint_dir=checkpoint_dir,
                  checkpoint_every=checkpoint_every, save=self.save)
        return self.history

    def train_step(self) -> dict:
        """One step: sample, score, advantages, update; returns (and records) its history row."""
        start = time.perf_counter()
        first_round, batch, extra_samples, sampled_tokens = self._collect()
        advantages, returns, old_values = self._advantages(batch)
        rows, advantages = self._filter_and_dither(advantages)
        if self.config.overlong_filter and rows.numel():  # DAPO's overlong filtering: truncated answers get no loss
            rows = rows[~batch.rollout.truncated.to(rows.device)[rows]]
        learning_rate = self.optimizer.param_groups[0]["lr"]
        update = self._optimise(batch, rows, advantages, returns, old_values)
        if rows.numel():  # the warm-up counts steps that updated the policy
            self.scheduler.step()
        self.step += 1
        elapsed = time.perf_counter() - start
        self.wall_time += elapsed
        row = {
            "step": self.step,
            **self._sample_metrics(first_round),
            **update,
            "frac_zero_adv_groups_trained": self._flat_group_fraction(batch),
            "extra_samples": extra_samples,
            "trained_samples": int(rows.numel()),
            "lr": learning_rate,
            "tokens_per_s": sampled_tokens / elapsed,
            "step_time": elapsed,
            "wall_time": self.wall_time,
        }
        self.history.append(row)
        return row

    # --- 1-3: sampling, scoring, dynamic sampling ------------------------------------------
    def _collect(self):
        """The first round (for the logged metrics) and the batch to train on.

        Returns ``(first_round, batch, extra_samples, sampled_tokens)``. Without dynamic sampling
        the batch is the first round. With it, groups whose rewards are all equal are dropped and
        fresh prompts are sampled until ``prompts_per_step`` groups have varied rewards or the
        extra rounds run out; the batch then holds only varied groups (possibly fewer, or none).
        """
        first_round = self._next_round()
        sampled_tokens = int(first_round.rollout.completion_mask.sum())
        if not self.config.dynamic_sampling:
            return first_round, first_round, 0, sampled_tokens
        group_size, wanted = self.config.group_size, self.config.prompts_per_step
        kept = [first_round.select(self._varied_rows(first_round))]
        extra_samples = 0
        for _ in range(self.config.max_resample_rounds):
            if sum(len(part.examples) for part in kept) >= wanted * group_size:
                break
            more = self._next_round()
            extra_samples += len(more.examples)
            sampled_tokens += int(more.rollout.completion_mask.sum())
            kept.append(more.select(self._varied_rows(more)))
        varied = ScoredBatch.concat(kept, pad_id=self._pad_id())
        batch = varied.select(torch.arange(min(len(varied.examples), wanted * group_size)))
        return first_round, batch, extra_samples, sampled_tokens

    def _next_round(self) -> ScoredBatch:
        """Where a round of samples comes from: sampled now, by the policy being trained.

        The hook ``rlbook.trainers.async_rl`` overrides to hand out rounds sampled by a stale policy.
        """
        return self._sample_and_score()

    def _varied_rows(self, scored: ScoredBatch) -> torch.Tensor:
        """Indices of the rows whose group's rewards (as the advantages see them) are not all equal;
        with ``dynamic_sampling="correct"``, whose group's correctness is not all equal (DAPO's filter)."""
        values = scored.correct if self.config.dynamic_sampling == "correct" else self._sequence_rewards(scored)
        return dynamic_sampling_mask(values, self.config.group_size).nonzero().squeeze(1)

    def _sample_and_score(self, policy=None) -> ScoredBatch:
        """Draw ``prompts_per_step`` prompts, sample G completions each with ``policy`` (default: the
        policy being trained; ``rlbook.trainers.async_rl`` passes a stale copy), and score them."""
        rng = np.random.default_rng(self._seed(SEED_PROMPTS, self.sample_calls))
        count = self.config.prompts_per_step
        chosen = rng.choice(len(self.examples), size=count, replace=count > len(self.examples))
        prompt_examples = [self.examples[int(i)] for i in chosen]
        rollout = sample(self.policy if policy is None else policy, self.tokenizer,
                         [e["prompt"] for e in prompt_examples],
                         num_samples=self.config.group_size, max_new_tokens=self.config.max_new_tokens,
                         temperature=self.config.temperature, top_p=self.config.top_p,
                         seed=self._seed(SEED_SAMPLING, self.sample_calls))
        self.sample_calls += 1
        examples = [e for e in prompt_examples for _ in range(self.config.group_size)]
        ref_logp, kl = self._reference_terms(rollout)
        verifier_reward = self._verifier_rewards(rollout.texts, examples)
        gold = None if self.gold_reward is None else torch.tensor(
            [float(self.gold_reward(t, e)) for t, e in zip(rollout.texts, examples)])
        no_verifier = torch.full((len(examples),), math.nan)
        correct = (verifier_reward == 1.0).float() if verifier_reward is not None else no_verifier
        device = rollout.completion_ids.device  # rewards live beside the rollout (a GPU, when the model is on one)
        return ScoredBatch(rollout=rollout, examples=examples,
                           score=self._total_reward(rollout, verifier_reward).to(device), correct=correct.to(device),
                           gold=None if gold is None else gold.to(device), ref_logp=ref_logp, kl=kl)

    def _verifier_rewards(self, texts, examples) -> torch.Tensor | None:
        if self.verifier is None:
            return None
        return torch.tensor([float(self.verifier(text, example)) for text, example in zip(texts, examples)])

    def _total_reward(self, rollout: Rollout, verifier_reward) -> torch.Tensor:
        """Verifier + format_reward_weight × format + reward model + DAPO's soft overlong penalty."""
        components, weights = {}, {}
        if verifier_reward is not None:
            components["verifier"] = verifier_reward
        if self.config.format_reward_weight > 0:
            components["format"] = torch.tensor([format_reward(text) for text in rollout.texts])
            weights["format"] = self.config.format_reward_weight
        if self.reward_model is not None:
            scores = self.reward_model(prompts=rollout.prompt_texts, completions=rollout.texts)
            components["reward_model"] = torch.as_tensor(scores, dtype=torch.float32).reshape(-1)
        if self.config.overlong is not None:
            max_len, cache_len = self.config.overlong
            components["overlong"] = soft_overlong_penalty(rollout.completion_lengths.cpu(), max_len, cache_len)
        return combine_rewards(components, weights)

    @torch.no_grad()
    def _reference_terms(self, rollout: Rollout):
        """log π_ref of the sampled tokens and the per-token KL estimate (None without a reference).

        Under LoRA with no reference given, π_ref is the policy with its adapters disabled.
        """
        if self.reference is not None:
            model, adapters_off = self.reference, contextlib.nullcontext()
        elif self.config.lora and self.config.kl_beta > 0:
            model, adapters_off = self.policy, self.policy.disable_adapter()
        else:
            return None, None
        with adapters_off:
            ref_logp = completion_logprobs(model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                           rollout.completion_mask, temperature=self.config.temperature)
        kl = kl_estimate(rollout.logprobs, ref_logp, self.config.kl_estimator) * rollout.completion_mask
        return ref_logp, kl

    # --- 4: advantages ---------------------------------------------------------------------
    def _kl_in_reward_beta(self) -> float:
        return self.config.kl_beta if self.config.kl_placement == "reward" else 0.0

    def _sequence_rewards(self, scored: ScoredBatch) -> torch.Tensor:
        """The reward a sequence-level estimator sees: the score, minus β Σ_t k_t for KL in the reward."""
        beta = self._kl_in_reward_beta()
        if beta == 0 or scored.kl is None:
            return scored.score
        return scored.score - beta * scored.kl.sum(dim=1)

    def _advantages(self, batch: ScoredBatch):
        """(advantages, returns, old_values): (B,) for sequence estimators; (B, C) for GAE (with returns)."""
        estimator, empty = self.config.advantage, len(batch.examples) == 0
        if estimator == "gae" and not empty:
            return self._gae_advantages(batch)
        rewards = self._sequence_rewards(batch)
        if self.advantage_fn is not None and not empty:
            return _own_advantages(self.advantage_fn, rewards, self.config.group_size), None, None
        if estimator in GROUP_ESTIMATORS and not empty:
            return group_advantages(rewards, self.config.group_size, estimator, self.config.unbiased_std), None, None
        if estimator == "reinforce_pp" and not empty:
            return batch_normalize(rewards), None, None
        return rewards, None, None

    @torch.no_grad()
    def _gae_advantages(self, batch: ScoredBatch):
        """PPO's advantages: per-token rewards (the score on the last token, −β·k per token when the KL
        is in the reward), the critic's values, GAE, then whitening over the batch's tokens."""
        rollout = batch.rollout
        mask = rollout.completion_mask.float()
        kl = batch.kl if batch.kl is not None else torch.zeros_like(mask)
        token_rewards = kl_in_reward(batch.score, kl, self._kl_in_reward_beta(), mask)
        values = self.critic(rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids, rollout.completion_mask)
        if self.gae_fn is None and self.critic_targets_fn is None:
            advantages, returns = gae(token_rewards, values, self.config.gamma, self.config.lam, mask=mask)
        else:
            advantages, returns = _own_gae(self.gae_fn, self.critic_targets_fn, token_rewards, values, mask,
                                           self.config.gamma, self.config.lam)
        return batch_normalize(advantages, mask), returns, values

    def _filter_and_dither(self, advantages):
        """The rows to train on (all, or those with |A| > tol) and their advantages, noise added."""
        rows = torch.arange(advantages.shape[0])
        if self.config.advantage_filter is not None and rows.numel():
            keep = advantage_filter_mask(advantages, tol=self.config.advantage_filter)
            rows = (keep if keep.dim() == 1 else keep.any(dim=1)).nonzero().squeeze(1)
        if self.config.advantage_noise > 0 and rows.numel():
            generator = torch.Generator().manual_seed(self._seed(SEED_NOISE, self.step))
            advantages = advantages.clone()
            noisy = add_advantage_noise(advantages[rows].cpu(), self.config.advantage_noise, generator=generator)
            advantages[rows] = noisy.to(advantages.device)
        return rows, advantages

    # --- 5: the update ---------------------------------------------------------------------
    def _optimise(self, batch: ScoredBatch, rows, advantages, returns, old_values) -> dict:
        """``epochs`` passes over ``rows`` in shuffled minibatches; returns the averaged metrics."""
        if rows.numel() == 0:
            return {"entropy": math.nan}
        generator = torch.Generator().manual_seed(self._seed(SEED_MINIBATCHES, self.step))
        plan = minibatch_plan(rows, self.config.minibatch_size, epochs=self.config.epochs, generator=generator)
        # Clip-Cov's random choice of tokens, from the run's seed and step (not torch's global generator)
        self._cov_generator = torch.Generator().manual_seed(self._seed(SEED_COV, self.step))
        first_pass = len(plan) // self.config.epochs  # the minibatches of epoch 0: each row once
        metrics, entropy_sum, token_count = [], 0.0, 0.0
        for index, minibatch in enumerate(plan):
            step_metrics, entropy = self._update(batch, minibatch, advantages, returns, old_values)
            metrics.append(step_metrics)
            if index < first_pass:
                mask = batch.rollout.completion_mask[minibatch]
                entropy_sum += float((entropy * mask).sum())
                token_count += float(mask.sum())
        return {**_average_metrics(metrics), "entropy": entropy_sum / token_count}

    def _update(self, batch: ScoredBatch, rows, advantages, returns, old_values):
        """One optimizer step of the policy (``rlbook.update.policy_step``), and of the critic, on ``rows``."""
        rollout, config = batch.rollout, self.config
        kl_in_loss = config.kl_placement == "loss" and config.kl_beta > 0
        metrics, entropy = policy_step(
            self.policy, self.optimizer, rollout, rows, advantages[rows], **self._importance_logps(batch, rows),
            max_grad_norm=self.optim.grad_clip, temperature=config.temperature,
            variant=config.variant, **config.loss_overrides(), max_len=config.max_new_tokens,
            ref_logp=batch.ref_logp[rows] if kl_in_loss else None, beta=config.kl_beta if kl_in_loss else 0.0,
            kl_estimator=config.kl_estimator, entropy_coef=config.entropy_coef, cov_control=config.cov_control,
            cov_fraction=config.cov_fraction, cov_bounds=config.cov_bounds, kl_cov_coef=config.kl_cov_coef,
            cov_generator=self._cov_generator if config.cov_control == "clip_cov" else None,
            token_weights_fn=self.token_weights_fn)
        if self.critic is not None:
            picked = rollout.select(rows)
            values = self.critic(picked.prompt_ids, picked.prompt_mask, picked.completion_ids, picked.completion_mask)
            critic_loss = value_loss(values, old_values[rows], returns[rows], picked.completion_mask)
            metrics["value_loss"] = critic_loss.item()
            self.critic_optim.step(self.critic_optimizer, critic_loss, self.critic.parameters())
        return metrics, entropy

    def _importance_logps(self, batch: ScoredBatch, rows) -> dict:
        """The log-probs ``policy_loss`` divides by: here ``old_logp``, the sampling policy's own.

        The hook ``rlbook.trainers.async_rl`` overrides for AReaL's decoupled objective.
        """
        return {"old_logp": batch.rollout.logprobs[rows]}

    def _logprobs(self, prompt_ids, prompt_mask, completion_ids, completion_mask):
        """log π_θ and the entropy of each completion token, (B, C) each, with gradients.

        ``completion_logprobs`` runs each distinct prompt once for its group and scores rows in
        length-sorted chunks, so short answers do not pay for the batch's longest one.
        """
        return completion_logprobs(self.policy, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                   temperature=self.config.temperature, return_entropy=True)

    # --- 6: logging ------------------------------------------------------------------------
    def _sample_metrics(self, scored: ScoredBatch) -> dict:
        """Reward, pass@1, KL to the reference, lengths, truncation and flat groups of one round."""
        rollout = scored.rollout
        lengths = rollout.completion_lengths.float()
        by_correctness = mean_length_by_correctness(lengths, scored.correct.nan_to_num(0.0))
        metrics = {
            "reward": scored.score.mean().item(),
            "reward_std": scored.score.std(correction=0).item(),
            "pass@1": scored.correct.mean().item(),
            "kl_ref": (masked_mean(scored.kl, rollout.completion_mask).item() if scored.kl is not None else math.nan),
            "length_mean": lengths.mean().item(),
            "length_correct": by_correctness["correct"],
            "length_incorrect": by_correctness["incorrect"],
            "truncation_rate": rollout.truncated.float().mean().item(),
            "frac_zero_adv_groups": self._flat_group_fraction(scored),
        }
        if scored.gold is not None:
            metrics["gold_reward"] = scored.gold.mean().item()
        if self.config.overlong is not None:
            metrics.update(self._overlong_metrics(scored))
        return metrics

    def _overlong_metrics(self, scored: ScoredBatch) -> dict:
        """With the soft overlong penalty on: the share of answers it penalises (``frac_overlong_penalised``)
        and the share of groups whose rewards vary only through it (``frac_reward_only_groups``: all
        right or all wrong, yet not flat, so a filter on the reward keeps them and DAPO's drops them)."""
        max_len, cache_len = self.config.overlong
        penalty = soft_overlong_penalty(scored.rollout.completion_lengths.cpu(), max_len, cache_len)
        metrics = {"frac_overlong_penalised": (penalty != 0).float().mean().item()}
        if self.config.group_size > 1 and len(scored.examples) and not scored.correct.isnan().any():
            only = reward_only_groups(self._sequence_rewards(scored).cpu(), scored.correct.cpu(), self.config.group_size)
            metrics["frac_reward_only_groups"] = only.float().mean().item()
        return metrics

    def _flat_group_fraction(self, scored: ScoredBatch) -> float:
        """The fraction of groups whose rewards are all equal (zero advantage); NaN for G = 1 or no groups."""
        group_size = self.config.group_size
        if group_size == 1 or len(scored.examples) == 0:
            return math.nan
        groups = self._sequence_rewards(scored).view(-1, group_size)
        return (groups.max(dim=1).values == groups.min(dim=1).values).float().mean().item()

    # --- evaluation ------------------------------------------------------------------------
    def evaluate(self, dataset, *, n_samples: int = 8, max_new_tokens: int | None = None,
                 temperature: float | None = None, seed: int = 0, batch_size: int = 512,
                 return_correct: bool = False) -> dict:
        """pass@1 and pass@n_samples of the current policy on ``dataset`` (held-out rows with ``prompt``).

        Each prompt gets ``n_samples`` completions (defaults: the config's length and temperature);
        a completion is correct when the verifier gives it 1. pass@k is Chen et al.'s unbiased
        estimator, averaged over prompts (``rlbook.evaluation.evaluate_pass_at_k``). Also returns
        the mean length and the prompt count, and with ``return_correct`` the (prompts, n_samples)
        0/1 table under ``"correct"``.
        """
        if self.verifier is None:
            raise ValueError("evaluate needs a verifier: pass a task or a reward function as task_or_reward")
        return evaluate_pass_at_k(
            self.policy, self.tokenizer, dataset, self.verifier, n_samples=n_samples,
            max_new_tokens=max_new_tokens or self.config.max_new_tokens,
            temperature=self.config.temperature if temperature is None else temperature,
            seed=self._seed(SEED_EVALUATION, seed), batch_size=batch_size, return_correct=return_correct)

    # --- checkpoints -----------------------------------------------------------------------
    def save(self, directory) -> str:
        """Write an atomic checkpoint of everything a resumed run needs; returns its folder."""
        return str(save_checkpoint(directory, self.step, self._checkpoint_state()))

    def resume(self, path) -> OnlineTrainer:
        """Restore a checkpoint written by ``save`` into this trainer (built with the same config)."""
        self._restore_state(load_checkpoint(path))
        return self

    def _checkpoint_state(self) -> Checkpoint:
        """The models' and optimizers' state dicts, and the JSON rest: counters, config, history,
        the scheduler's state and the random states.

        The hook ``rlbook.trainers.async_rl`` extends with its kept policy snapshots.
        """
        return checkpoint_of(**self._parts(),
                             meta={"step": self.step, "sample_calls": self.sample_calls, "wall_time": self.wall_time,
                                   "config": self.config.to_dict(), "history": self.history.rows})

    def _parts(self) -> dict:
        """The live models, optimizers and scheduler a checkpoint holds (``rlbook.trainers.harness``)."""
        models, optimizers = {"policy": self.policy}, {"optimizer": self.optimizer}
        if self.critic is not None:
            models["critic"], optimizers["critic_optimizer"] = self.critic, self.critic_optimizer
        if self.reference is not None:
            models["reference"] = self.reference
        return dict(models=models, optimizers=optimizers, schedulers={"scheduler": self.scheduler})

    def _restore_state(self, checkpoint: Checkpoint) -> None:
        """Load what ``_checkpoint_state`` returned, after checking it fits this trainer."""
        checkpoint.require(models=["policy"], optimizers=["optimizer"],
                           meta=["step", "sample_calls", "wall_time", "config", "history", "scheduler", "rng"])
        meta = checkpoint.meta
        check_config_matches(self.config, meta["config"])
        if (self.critic is None) != ("critic" not in checkpoint.models) or \
                (self.reference is None) != ("reference" not in checkpoint.models):
            raise ValueError("the checkpoint's models (critic, reference) do not match this trainer's")
        restore_parts(checkpoint, **self._parts())
        self.step, self.sample_calls, self.wall_time = meta["step"], meta["sample_calls"], meta["wall_time"]
        self.history = History(meta["history"], config=self.config.to_dict())

    # --- helpers ---------------------------------------------------------------------------
    def _seed(self, purpose: int, counter: int) -> int:
        """A seed derived from (config.seed, purpose, counter): reproducible, and independent per use."""
        return int(np.random.SeedSequence([self.config.seed, purpose, counter]).generate_state(1)[0])

    def _pad_id(self) -> int:
        return self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0


def check_config_matches(config: OnlineConfig, saved: dict) -> None:
    """Raise ``ValueError`` naming the fields in which ``config`` differs from a checkpoint's saved
    config (a dict): a resumed run must go on with the settings it was saved with.

    ``OnlineTrainer.resume`` checks this, and ``rlbook train --resume`` before it loads any model.
    """
    try:
        saved_config = OnlineConfig.from_dict(saved)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the checkpoint's config is not a valid OnlineConfig ({error})") from None
    differences = [f.name for f in dataclasses.fields(OnlineConfig)
                   if getattr(saved_config, f.name) != getattr(config, f.name)]
    if differences:
        raise ValueError(f"config differs from the checkpoint's in {differences}: "
                         "build the trainer with the saved config")


def _check_hooks(config: OnlineConfig, **hooks) -> None:
    for name, fn in hooks.items():
        if fn is not None and not callable(fn):
            raise ValueError(f"{name} must be None or a function, got {fn!r}")
    if hooks["advantage_fn"] is not None and config.advantage == "gae":
        raise ValueError("advantage_fn replaces a sequence-level estimator: it cannot replace GAE "
                         "(config.advantage='gae', per-token advantages from the critic): use gae_fn")
    for name in ("gae_fn", "critic_targets_fn"):
        if hooks[name] is not None and config.advantage != "gae":
            raise ValueError(f"{name} needs config.advantage='gae' (a preset with a critic, e.g. 'ppo'), "
                             f"got {config.advantage!r}")


def _own_gae(gae_fn, targets_fn, rewards, values, mask, gamma: float, lam: float):
    """(advantages, returns), (B, T), from a reader's one-response ``gae_fn`` and ``targets_fn`` applied to each
    row's response tokens (the mask's leading ones); 0 on padding, as ``rlbook.advantages.gae`` gives."""
    advantages, returns = torch.zeros_like(rewards), torch.zeros_like(rewards)
    for row in range(rewards.shape[0]):
        n = int(mask[row].sum().item())
        if n == 0:
            continue
        r, v = rewards[row, :n], values[row, :n].detach()
        a = gae(r, v, gamma, lam)[0] if gae_fn is None else gae_fn(r, v, gamma, lam)
        a = _checked_row("gae_fn", a, n)
        advantages[row, :n] = a
        returns[row, :n] = a + v if targets_fn is None else _checked_row("critic_targets_fn", targets_fn(a, v), n)
    return advantages, returns


def _checked_row(name: str, out, n: int) -> torch.Tensor:
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (n,):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"{name} must return a tensor of the response's shape ({n},), got {shape}")
    if not torch.isfinite(out).all():
        raise ValueError(f"{name} returned a NaN or infinite value")
    return out.detach()


def _own_advantages(advantage_fn, rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """``advantage_fn``'s (B,) advantages of ``rewards``, checked (a (B,) tensor of finite numbers), detached."""
    out = advantage_fn(rewards, group_size)
    if not isinstance(out, torch.Tensor) or out.shape != rewards.shape:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"advantage_fn must return a tensor of the rewards' shape {tuple(rewards.shape)}, got {shape}")
    if not torch.isfinite(out).all():
        raise ValueError("advantage_fn returned a NaN or infinite advantage (a group whose rewards are all equal?)")
    return out.detach().to(rewards.dtype)


def _verifier_of(task_or_reward, reward_model):
    """(task or None, verifier function or None) from what the caller passed."""
    if task_or_reward is None:
        if reward_model is None:
            raise ValueError("task_or_reward must be a task or a reward function unless reward_model is given")
        return None, None
    if hasattr(task_or_reward, "reward") and hasattr(task_or_reward, "dataset"):
        return task_or_reward, task_or_reward.reward
    if callable(task_or_reward):
        return None, task_or_reward
    raise ValueError(f"task_or_reward must be a task, a function (text, example) -> float, or None; "
                     f"got {type(task_or_reward).__name__}")


def _average_metrics(metrics: list[dict]) -> dict:
    """Mean of each metric over the minibatches; min of the minimum ratios and max of the maximum ones."""
    combined = {}
    for key in metrics[0]:
        values = [m[key] for m in metrics if key in m]
        if key.endswith("_min"):
            combined[key] = min(values)
        elif key.endswith("_max"):
            combined[key] = max(values)
        else:
            combined[key] = float(np.mean(values))
    return combined
