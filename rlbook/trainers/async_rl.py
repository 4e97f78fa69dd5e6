"""Asynchronous RL: a generator that runs ahead of the learner, with bounded staleness η.

In the synchronous loop (``OnlineTrainer``) the policy samples, then trains, then samples again:
while it trains nobody samples, and while it samples nobody trains. An asynchronous system lets
a *generator* keep sampling while the *learner* trains, so a batch the learner takes may have
been sampled by a policy some updates old. Its **staleness** is

    staleness = (learner version when the batch is trained on) − (version that sampled it),

where a version counts the learner's optimizer steps. A bound η on it is the one knob: η = 0 is
the synchronous loop; η = 1 lets generation of batch t+1 overlap training on batch t.

``AsyncTrainer`` runs it two ways (``AsyncConfig.threaded``):

- **Simulated** (default, deterministic): one process, sampling and training in turn, but each
  step samples with a snapshot of the policy as it was η updates ago (the last η + 1 policies
  are kept; early steps use version 0). This is the steady state of a generator that always runs
  η batches ahead, so every batch is exactly min(step, η) stale, and the same seed gives the same
  numbers. The timeline then shows the phases one after the other: the *staleness* is real, the
  overlap is not.
- **Threaded**: a producer thread samples into a bounded ``queue.Queue`` while the learner
  trains. Admission control keeps staleness ≤ η: round i is started only once the learner has
  reached version i − η (rounds are consumed in order, at least one per step). The weights are
  copied into the generator under a lock, so it never sees a half-applied update. Which version
  samples which batch depends on thread timing, so threaded runs are not reproducible; on a
  2-core CPU both threads share the cores, so expect little speed-up: the point is the picture.

The learner's objective (``AsyncConfig.objective``):

- ``"naive"``: PPO/GRPO as if nothing were stale: the ratio π_θ/π_behav against the behaviour
  policy's log-probs, clipped around π_behav. With stale samples the ratio starts far from 1 and
  the clip cuts off much of the gradient (or, for negative advantages, lets it through unbounded).
- ``"decoupled"``: AReaL's decoupled PPO objective (Fu et al. 2025, arXiv:2505.24298, eq. 5):

      J(θ) = E_{y~π_behav}[ Σ_t  sg[π_prox/π_behav] · min(u_t A, clip(u_t, 1 − ε, 1 + ε) A) ],
      u_t = π_θ(y_t)/π_prox(y_t),

  where the proximal policy π_prox is the learner's policy at the start of the step (its
  log-probs recomputed before the update, without gradients). The clip keeps each update near
  the *recent* policy, and the constant weight sg[π_prox/π_behav] corrects for the staleness
  (``rlbook.losses.policy_loss(..., behaviour_logp=...)``; tokens whose weight exceeds
  ``behaviour_weight_cap`` are dropped, as AReaL's cap does). When a batch is not stale at all,
  π_prox = π_behav and the recomputation is skipped, so η = 0 is exactly the synchronous trainer.

Each history row adds ``staleness_mean`` / ``staleness_max`` (over the rounds trained on in the
step), ``generate_time`` and ``train_time``, and, for the decoupled objective,
``behaviour_weight_var``: the per-token variance of w_t = π_prox/π_behav over the batch
(``behaviour_weight_variance``; 0 when the batch is fresh); ``trainer.timeline`` holds one entry per generation
round and per update (phase, start, end in seconds since the trainer was built, policy version),
the data of the lesson's Gantt chart.

How this maps to systems at scale. AReaL and verl run the same loop on many GPUs with Ray:
rollout workers serve the policy in an inference engine (vLLM or SGLang) on their own GPUs,
trainer workers hold the model sharded (FSDP or Megatron), and the two are *disaggregated*, so
neither waits for the other. After a training step the trainer publishes new weights and the
rollout workers load them; that parameter sync is the version bump here (our lock-protected
copy into the generator). AReaL bounds how far generation may run ahead with
``rollout.max_head_offpolicyness`` (0 falls back to synchronous RL), which is η here, and also
supports partial rollouts: a long answer may be continued by a newer policy after a sync, so one
trajectory can span versions, something this one-batch-one-version simplification leaves out.
verl ships a one-step off-policy recipe (generation of the next batch overlaps training on the
current one: η = 1) and a fully asynchronous recipe with a separate "rollouter" and trainer that
stream samples, sync parameters every few steps and bound the staleness; both need an
off-policy-aware loss for the same reason the decoupled objective exists here.

Simplified on purpose: one generator; whole rounds, not streamed samples; the simulated mode
stores η + 1 copies of the weights (fine for the book's models, wasteful for a large one), and
its checkpoints hold them too. ``save`` / ``train(checkpoint_dir=...)`` and ``resume`` work in
both modes: a simulated run interrupted at step k and resumed gives the uninterrupted run's
history (timings aside); a threaded one resumes the learner exactly but drops the rounds that
were in flight, so its later batches differ, as any two threaded runs' do.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import queue
import threading
import time
from dataclasses import dataclass

import torch

from rlbook._checks import check_choice, check_int, check_positive
from rlbook.ratios import decoupled_behaviour_weight
from rlbook.trainers.checkpoint import Checkpoint, check_fits
from rlbook.trainers.config import OnlineConfig
from rlbook.trainers.history import History
from rlbook.trainers.online import OnlineTrainer, ScoredBatch

__all__ = ["ASYNC_OBJECTIVES", "AsyncConfig", "AsyncTrainer", "behaviour_weight_variance"]

ASYNC_OBJECTIVES = ("naive", "decoupled")
# The AsyncConfig fields a resumed trainer must share with the checkpoint (queue_timeout may change).
ASYNC_SETTINGS = ("staleness", "objective", "behaviour_weight_cap", "threaded")
# Seconds between checks of the stop flag while a thread waits (for the queue or a new version).
POLL_SECONDS = 0.05


@dataclass
class AsyncConfig:
    """The asynchrony knobs of ``AsyncTrainer``.

    Args:
        - staleness: η ≥ 0, the most policy versions a batch may lag behind the learner (0: synchronous).
        - objective: "naive" (clip around the behaviour policy) or "decoupled" (AReaL's objective).
        - behaviour_weight_cap: decoupled only: tokens with π_prox/π_behav above it are dropped
          (None: no cap). At least 1, since a fresh sample has weight exactly 1.
        - threaded: sample on a background thread (non-deterministic timing) instead of the
          deterministic simulation.
        - queue_timeout: threaded only: seconds the learner waits for a batch before raising.
    """

    staleness: int = 1
    objective: str = "decoupled"
    behaviour_weight_cap: float | None = None
    threaded: bool = False
    queue_timeout: float = 600.0

    def __post_init__(self):
        check_int("staleness", self.staleness, minimum=0)
        check_choice("objective", self.objective, ASYNC_OBJECTIVES)
        if self.behaviour_weight_cap is not None:
            if self.objective != "decoupled":
                raise ValueError("behaviour_weight_cap is used only by objective='decoupled'")
            if check_positive("behaviour_weight_cap", self.behaviour_weight_cap) < 1:
                raise ValueError(f"behaviour_weight_cap must be >= 1 (a fresh sample has weight 1), "
                                 f"got {self.behaviour_weight_cap}")
        if not isinstance(self.threaded, bool):
            raise ValueError(f"threaded must be a bool, got {self.threaded!r}")
        check_positive("queue_timeout", self.queue_timeout)


class AsyncTrainer(OnlineTrainer):
    """``OnlineTrainer`` whose batches come from a generator up to η policy versions behind.

    ``AsyncTrainer(model, tokenizer, task, preset("grpo"), AsyncConfig(staleness=2)).train(50)``;
    the other keyword arguments are ``OnlineTrainer``'s. Everything but where a round of samples
    comes from and which log-probs the loss divides by is the synchronous loop's.
    """

    def __init__(self, model, tokenizer, task_or_reward, config: OnlineConfig, async_config: AsyncConfig | None = None,
                 **kwargs):
        async_config = AsyncConfig() if async_config is None else async_config
        if not isinstance(async_config, AsyncConfig):
            raise ValueError(f"async_config must be an AsyncConfig, got {type(async_config).__name__}")
        super().__init__(model, tokenizer, task_or_reward, config, **kwargs)
        self.async_config = async_config
        self.policy_version = 0  # learner updates so far, bumped under the weights lock
        self.generator = self._frozen_copy(self.policy) if async_config.threaded or async_config.staleness else None
        self.timeline: list[dict] = []
        self._clock_zero = time.perf_counter()
        self._snapshots = collections.deque(maxlen=async_config.staleness + 1)  # (version, weights), simulated
        self._step_rounds: list[dict] = []  # the rounds (staleness, generate_time) trained on this step
        self._proximal_logp = None
        self._weights_lock = threading.Lock()
        self._version_changed = threading.Condition()
        self._producer = None  # threaded mode: the thread, its queue, stop flag and any error it raised
        self._queue = queue.Queue(maxsize=max(1, async_config.staleness))
        self._stop = threading.Event()
        self._producer_error = None
        self._rounds_produced = 0
        self._rounds_taken = 0  # rounds handed to the learner (a resumed producer starts from there)

    @staticmethod
    def _frozen_copy(policy):
        generator = copy.deepcopy(policy).eval()
        for parameter in generator.parameters():
            parameter.requires_grad_(False)
        return generator

    # --- the loop ---------------------------------------------------------------------------
    def train(self, steps: int, **kwargs) -> History:
        """``OnlineTrainer.train``; in threaded mode the producer thread is stopped and joined at the end."""
        try:
            return super().train(steps, **kwargs)
        finally:
            self.close()

    def train_step(self) -> dict:
        """One learner step on the next (possibly stale) batch; adds staleness and phase times to its row."""
        self._step_rounds = []
        if not self.async_config.threaded and self.async_config.staleness > 0:
            self._snapshots.append((self.policy_version, _cloned_weights(self.policy)))
        train_start = len(self.timeline)
        super().train_step()
        row = self.history.rows[-1]
        staleness = [r["staleness"] for r in self._step_rounds]
        row.update({
            "staleness_mean": sum(staleness) / len(staleness),
            "staleness_max": max(staleness),
            "generate_time": sum(r["generate_time"] for r in self._step_rounds),
            "train_time": sum(e["end"] - e["start"] for e in self.timeline[train_start:] if e["phase"] == "train"),
        })
        return row

    def trained_timeline(self) -> list[dict]:
        """``timeline`` without the rounds that were sampled but never trained on.

        In threaded mode the producer runs up to η rounds ahead, so when ``train`` returns it has
        sampled rounds no step took (the last of them may even end after the last update, since
        ``close`` lets the round in progress finish). Rounds finish and are taken in order, so the
        first ``rounds taken`` generation entries are the ones the learner used; a span or an
        overlap measured on this timeline counts only useful work. In simulated mode it is ``timeline``.
        """
        kept, rounds = [], 0
        for entry in self.timeline:
            if entry["phase"] == "generate":
                rounds += 1
                if rounds > self._rounds_taken:
                    continue
            kept.append(entry)
        return kept

    # --- the generator ----------------------------------------------------------------------
    def _next_round(self) -> ScoredBatch:
        """The next round for the learner: from the queue (threaded) or sampled now by the stale snapshot."""
        scored, version, generate_time = self._queued_round() if self.async_config.threaded else self._simulated_round()
        self._rounds_taken += 1
        self._step_rounds.append({"staleness": self.policy_version - version, "generate_time": generate_time})
        return scored

    def _simulated_round(self):
        """Sample with the oldest kept snapshot, version max(0, current − η) (the policy itself when fresh)."""
        if not self._snapshots or self._snapshots[0][0] == self.policy_version:
            return self._generate(self.policy, self.policy_version)
        version, weights = self._snapshots[0]
        self.generator.load_state_dict(weights)
        return self._generate(self.generator, version)

    def _generate(self, policy, version: int):
        """One round sampled and scored by ``policy`` (of ``version``); logged on the timeline."""
        start = self._clock()
        scored = self._sample_and_score(policy)
        end = self._clock()
        self.timeline.append({"phase": "generate", "start": start, "end": end, "version": version})
        return scored, version, end - start

    # --- threaded producer ------------------------------------------------------------------
    def _queued_round(self):
        """Take the next finished round off the queue, starting the producer on first use."""
        if self._producer is None:
            self._start_producer()
        deadline = time.monotonic() + self.async_config.queue_timeout
        while True:
            if self._producer_error is not None:
                raise RuntimeError("the generator thread failed") from self._producer_error
            try:
                return self._queue.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no batch from the generator in {self.async_config.queue_timeout} s")

    def _start_producer(self):
        self._stop.clear()
        self._producer = threading.Thread(target=self._produce, name="rlbook-generator", daemon=True)
        self._producer.start()

    def _produce(self):
        """The producer thread: admit round i once the learner reaches version i − η, sample it, queue it.

        Rounds are counted since the trainer was built (a later ``train`` call goes on counting), and
        the learner takes them in order, at least one per step, so round i is trained on at a version
        ≤ i: its staleness is at most i − (i − η) = η.
        """
        try:
            while self._wait_for_version(self._rounds_produced - self.async_config.staleness):
                with self._weights_lock:
                    self.generator.load_state_dict(self.policy.state_dict())
                    version = self.policy_version
                if self._put(self._generate(self.generator, version)):
                    self._rounds_produced += 1
        except Exception as error:  # handed to the learner, which raises it
            self._producer_error = error

    def _wait_for_version(self, version: int) -> bool:
        """Block until the learner reaches ``version``; False when asked to stop."""
        with self._version_changed:
            while not self._stop.is_set():
                if self._version_changed.wait_for(lambda: self.policy_version >= version, timeout=POLL_SECONDS):
                    return not self._stop.is_set()
        return False

    def _put(self, item) -> bool:
        """Queue ``item``, waiting while the queue is full; False when asked to stop."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def close(self, timeout: float = 60.0) -> None:
        """Stop and join the producer thread (threaded mode); a no-op otherwise or when already stopped."""
        if self._producer is None:
            return
        self._stop.set()
        self._producer.join(timeout)
        if self._producer.is_alive():
            raise RuntimeError(f"the generator thread did not stop within {timeout} s")
        self._producer = None

    # --- the learner ------------------------------------------------------------------------
    def _optimise(self, batch: ScoredBatch, rows, advantages, returns, old_values) -> dict:
        """The synchronous update, under the weights lock, after recomputing π_prox (decoupled objective)."""
        start = self._clock()
        with self._weights_lock:
            self._proximal_logp = self._proximal_logps(batch) if rows.numel() else None
            metrics = OnlineTrainer._optimise(self, batch, rows, advantages, returns, old_values)
            if self.async_config.objective == "decoupled":
                metrics["behaviour_weight_var"] = (behaviour_weight_variance(
                    self._proximal_logp[rows], batch.rollout.logprobs[rows], batch.rollout.completion_mask[rows])
                    if rows.numel() else float("nan"))
            self.policy_version += 1
        with self._version_changed:
            self._version_changed.notify_all()
        self.timeline.append({"phase": "train", "start": start, "end": self._clock(), "version": self.policy_version})
        return metrics

    @torch.no_grad()
    def _proximal_logps(self, batch: ScoredBatch):
        """log π_prox of the sampled tokens: the policy before this step's update (None for "naive").

        A batch that is not stale was sampled by this very policy, so π_prox = π_behav and its
        sampling log-probs are used as they are.
        """
        if self.async_config.objective == "naive":
            return None
        if max(r["staleness"] for r in self._step_rounds) == 0:
            return batch.rollout.logprobs
        rollout = batch.rollout
        return self._logprobs(rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                              rollout.completion_mask)[0]

    def _importance_logps(self, batch: ScoredBatch, rows) -> dict:
        """Naive: old_logp = π_behav. Decoupled: old_logp = π_prox, and π_behav for sg[π_prox/π_behav]."""
        if self._proximal_logp is None:
            return super()._importance_logps(batch, rows)
        return {"old_logp": self._proximal_logp[rows], "behaviour_logp": batch.rollout.logprobs[rows],
                "behaviour_weight_cap": self.async_config.behaviour_weight_cap}

    # --- checkpoints ------------------------------------------------------------------------
    def _checkpoint_state(self) -> Checkpoint:
        """The synchronous trainer's checkpoint, plus the generator's state.

        Simulated mode: the kept snapshots (the last η + 1 policies, the stale ones the next
        steps sample with, as models ``snapshot_0``, ``snapshot_1``, ... and their versions), so a
        resumed run samples with exactly the weights the uninterrupted one would. Both modes: the
        learner's version, the rounds taken, and the timeline. Threaded mode saves no rounds in
        flight (see ``resume``).
        """
        checkpoint = super()._checkpoint_state()
        for index, (_, weights) in enumerate(self._snapshots):
            checkpoint.models[f"snapshot_{index}"] = weights
        checkpoint.meta["async"] = {
            "config": dataclasses.asdict(self.async_config), "policy_version": self.policy_version,
            "rounds_taken": self._rounds_taken, "timeline": list(self.timeline),
            "snapshot_versions": [version for version, _ in self._snapshots]}
        return checkpoint

    def _restore_state(self, checkpoint: Checkpoint) -> None:
        """Restore a checkpoint of an ``AsyncTrainer`` built with the same ``OnlineConfig`` and ``AsyncConfig``.

        Simulated mode resumes to the same numbers as the uninterrupted run. Threaded mode resumes
        the learner exactly (weights, optimizer, version, history) but not the generator: rounds
        that were queued or being sampled when the checkpoint was written are dropped, and the
        producer restarts from the restored policy. The staleness bound still holds, but which
        version samples which batch differs (as it does between any two threaded runs).
        """
        if "async" not in checkpoint.meta:
            raise ValueError("path must hold a checkpoint written by an AsyncTrainer (it has no generator state)")
        state = checkpoint.meta["async"]
        saved = state["config"]
        differences = [name for name in ASYNC_SETTINGS if saved[name] != getattr(self.async_config, name)]
        if differences:
            raise ValueError(f"async_config differs from the checkpoint's in {differences}: "
                             "build the trainer with the saved AsyncConfig")
        snapshot_names = [f"snapshot_{index}" for index in range(len(state["snapshot_versions"]))]
        checkpoint.require(models=snapshot_names)
        for name in snapshot_names:
            check_fits(self.policy, checkpoint.models[name], name=name)
        super()._restore_state(checkpoint)
        self.close()
        self._drain_queue()
        self._snapshots.clear()
        self._snapshots.extend(zip(state["snapshot_versions"], (checkpoint.models[name] for name in snapshot_names)))
        self.policy_version = state["policy_version"]
        self._rounds_taken = self._rounds_produced = state["rounds_taken"]
        self.timeline = [dict(entry) for entry in state["timeline"]]
        resumed_at = self.timeline[-1]["end"] if self.timeline else 0.0
        self._clock_zero = time.perf_counter() - resumed_at  # the timeline goes on from where it stopped

    def _drain_queue(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def _clock(self) -> float:
        return time.perf_counter() - self._clock_zero


def behaviour_weight_variance(prox_logp, behaviour_logp, mask) -> float:
    """The variance over tokens of AReaL's behaviour weight w_t = π_prox(y_t)/π_behav(y_t), uncapped.

    ``prox_logp`` and ``behaviour_logp`` are (B, T) log-probs of the sampled tokens, ``mask`` (B, T)
    marks the real ones. A fresh batch has w_t = 1 on every token (variance 0); the further the
    learner has moved from the policy that sampled the batch, the more the weights spread, and the
    noisier the importance-weighted gradient Σ_t w_t A ∇log π(y_t) gets (Fu et al. 2025,
    arXiv:2505.24298, eq. 5, whose weight cap exists for this). Population variance (divide by N).
    """
    prox_logp = torch.as_tensor(prox_logp)
    behaviour_logp = torch.as_tensor(behaviour_logp)
    mask = torch.as_tensor(mask)
    if not (prox_logp.shape == behaviour_logp.shape == mask.shape) or prox_logp.dim() != 2:
        raise ValueError(f"prox_logp, behaviour_logp and mask must be (B, T) of one shape, got "
                         f"{tuple(prox_logp.shape)}, {tuple(behaviour_logp.shape)}, {tuple(mask.shape)}")
    tokens = mask.bool()
    if not bool(tokens.any()):
        raise ValueError("mask must mark at least one token")
    weights = decoupled_behaviour_weight(prox_logp, behaviour_logp)[tokens].double()
    return weights.var(correction=0).item()


def _cloned_weights(model) -> dict:
    """A copy of ``model``'s state dict that later updates do not touch."""
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
