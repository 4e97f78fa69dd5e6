"""Probes: the small real updates and samples whose numbers the lessons' figures draw.

A figure in ``rlbook.viz`` draws and checks; it never samples or trains. When a lesson's picture
needs a real batch moved by a real update (the ratios of lessons 11-13, the push of lesson 10, the
entropy law of lesson 16), the sampling and the update happen here, with the library's own sampler
(``rlbook.rollout``) and update step (``rlbook.update``), and the figure is handed the result.

- ``off_policy_batch`` / ``OffPolicyBatch``: a sampled batch and its tokens' log-probs after each of a
  few minibatch steps (lessons 12-13: token vs sequence ratios, what each clip cuts);
- ``policy_after_updates``: a real batch after a few AdamW steps of DAPO's loss (lesson 11: the
  tokens the upper clip stops); ``ratio_crossings``: whether a token's own updates or the rest of the
  batch's carried it past the clip line;
- ``one_step_logprob_change``: the per-token change of each completion's log-prob after one
  normalised step under an aggregation mode (lesson 10: GRPO's 1/|o| push);
- ``first_token_probabilities``, ``sampled_token_entropies``, ``entropy_step_change``: the policy's
  first decision, its token entropy on prompts of one's choosing, and one update's entropy change
  beside the covariance law of ``rlbook.entropy`` (lesson 16);
- ``tempered_token_log_ratios``: a model sampled at temperature τ against itself at τ = 1, with each
  sampled token's log-ratio and the exact per-position KL (lesson 02: the estimators' tails on real tokens).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from rlbook._checks import as_float_tensor, check_int, check_positive
from rlbook.advantages import group_advantages
from rlbook.entropy import state_covariance, state_vanilla_covariance, token_covariance
from rlbook.losses.registry import Surrogate, policy_loss_variant, register_policy_loss
from rlbook.ratios import coefficient_disagreement, token_ratio
from rlbook.rollout import completion_forward, format_prompts, rollout_logprobs, sample
from rlbook.update import minibatch_plan, policy_step, policy_update

__all__ = [
    "OffPolicyBatch",
    "register_disagreement_variant",
    "off_policy_batch",
    "policy_after_updates",
    "ratio_crossings",
    "clip_relief",
    "one_step_logprob_change",
    "first_token_probabilities",
    "step_law_summary",
    "sampled_token_entropies",
    "answer_spread",
    "entropy_step_change",
    "tempered_token_log_ratios",
]


@dataclass
class OffPolicyBatch:
    """One sampled batch and its log-probs as the policy moves (rows = n_prompts × G, groups contiguous).

    ``old_logp`` (B, C) is the sampling policy's log-prob of each token; ``logps[k]`` (B, C) the
    same tokens' log-prob after k optimizer steps (``logps[0]`` equals ``old_logp`` up to float
    rounding). ``mask`` (B, C) marks completion tokens; ``rewards`` and ``advantages`` are (B,).
    ``trained_rows[k]`` holds the rows step k + 1 was trained on (empty when not recorded).
    ``rescored_logp`` (B, C), when recorded, is the sampling policy's log-prob of each token computed
    with its weights cast to another dtype (a bf16 inference engine's view of the same policy).
    ``variant`` and ``lr``: the loss and learning rate the steps took.
    """

    texts: list[str]
    mask: torch.Tensor
    old_logp: torch.Tensor
    logps: list[torch.Tensor]
    rewards: torch.Tensor
    advantages: torch.Tensor
    trained_rows: list[torch.Tensor] = field(default_factory=list)
    rescored_logp: torch.Tensor | None = None
    variant: str = "grpo"
    lr: float = 2e-4

    @property
    def lengths(self) -> torch.Tensor:
        """(B,) completion lengths |y_i| in tokens."""
        return self.mask.sum(dim=1)

    @property
    def updates(self) -> int:
        """How many optimizer steps the last snapshot is behind the sampling policy."""
        return len(self.logps) - 1


def off_policy_batch(model, tokenizer, task, *, n_prompts: int = 8, group_size: int = 8, updates: int = 4,
                     minibatch_size: int = 32, lr: float = 2e-4, variant: str = "grpo", max_new_tokens: int = 64,
                     seed: int = 0, rescore_dtype: torch.dtype | None = None) -> OffPolicyBatch:
    """Sample a batch from ``model`` and record how its tokens' log-probs move over ``updates`` steps.

    A copy of ``model`` is trained (the given model is left as it is): the batch is shuffled into
    minibatches of ``minibatch_size`` completions, and each of the ``updates`` AdamW steps
    (``rlbook.update.policy_step``, at ``lr``, gradients clipped to norm 1 as the trainers do)
    minimises ``policy_loss(variant=...)`` on the next minibatch, cycling through them. After each step the whole batch is re-scored.
    Prompts are ``task``'s training prompts; advantages are GRPO's group advantages of
    ``task.reward``.

    ``rescore_dtype`` (e.g. ``torch.bfloat16``): also score the sampled tokens with a copy of the
    sampling policy cast to that dtype, before any step, into ``rescored_logp`` (float32). Its gap
    to ``old_logp`` is the training-inference mismatch of a sampler that runs in lower precision
    than the trainer (GSPO, Zheng et al. 2025, arXiv:2507.18071, §5.4).
    """
    check_int("n_prompts", n_prompts, minimum=1)
    check_int("group_size", group_size, minimum=2)
    check_int("updates", updates, minimum=0)
    check_int("minibatch_size", minibatch_size, minimum=1)
    check_positive("lr", lr)
    policy = copy.deepcopy(model).eval()
    examples = list(task.dataset(n_prompts, seed=seed, split="train"))
    rollout = sample(policy, tokenizer, [e["prompt"] for e in examples], num_samples=group_size,
                     max_new_tokens=max_new_tokens, seed=seed)
    repeated = [e for e in examples for _ in range(group_size)]
    rewards = torch.tensor([float(task.reward(text, e)) for text, e in zip(rollout.texts, repeated)])
    advantages = group_advantages(rewards, group_size)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    minibatches = minibatch_plan(torch.arange(len(rollout)), minibatch_size,
                                 generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        logps = [rollout_logprobs(policy, rollout)]
        rescored = None
        if rescore_dtype is not None:
            rescored = rollout_logprobs(copy.deepcopy(policy).to(rescore_dtype), rollout).float()
    for step in range(updates):
        rows = minibatches[step % len(minibatches)]
        policy_step(policy, optimizer, rollout, rows, advantages[rows], max_grad_norm=1.0, variant=variant)
        with torch.no_grad():
            logps.append(rollout_logprobs(policy, rollout))
    return OffPolicyBatch(texts=rollout.texts, mask=rollout.completion_mask.float(), old_logp=rollout.logprobs,
                          logps=logps, rewards=rewards, advantages=advantages,
                          trained_rows=[minibatches[step % len(minibatches)] for step in range(updates)],
                          rescored_logp=rescored, variant=variant, lr=lr)


def policy_after_updates(model, rollout, advantages, *, updates: int = 8, minibatch_size: int = 16,
                         lr: float = 3e-4, eps_low: float = 0.2, eps_high: float = 0.28, seed: int = 0,
                         track_ratios: bool = False, warm_start=None, max_grad_norm: float | None = None) -> dict:
    """A real batch for the clip pictures: ``updates`` AdamW steps of DAPO's loss on minibatches of
    ``rollout``, then every token's log-prob under the moved policy.

    This is what an off-policy PPO-style update does between two samplings (lesson 03): the first
    minibatch sees r = 1, later ones see ratios that have drifted. The minibatches come from
    shuffled passes over the batch (``rlbook.update.minibatch_plan``); the gradient is not clipped.
    ``model`` is trained in place (pass a copy). Returns ``{"old_logp", "logp", "advantages", "mask"}``
    plus what the clip did while each row was in a minibatch (its ratio is scored just before the
    update that trains it, the ratio that update's loss sees):

    - ``clipped_high`` (B, T) bool: an A > 0 token whose ratio was above 1 + ε_high at the start of
      at least one update that contained its row, so its own term gave no gradient in that update
      (DAPO's "up-clipped" tokens, Yu et al. 2025, arXiv:2503.14476, §3.1 and Figure 3a);
    - ``last_ratio`` (B, T): each token's ratio at the start of the last update that contained its row;
    - ``updates_per_row`` (B,): how many of the updates contained each row.

    With ``track_ratios=True`` (one extra forward pass of the whole batch per update; the updates
    themselves are unchanged) it also returns the path of every token's ratio, so that a token's
    own updates can be told apart from the rest of the batch's (``ratio_crossings``):

    - ``ratio_path`` (updates + 1, B, T): the ratios before the first update and after each update;
    - ``in_update`` (updates, B) bool: which rows each update trained.

    By default the AdamW is fresh, so the first update is Adam's bias-corrected first step, about
    ``lr`` times the sign of each gradient coordinate (Kingma & Ba 2015, arXiv:1412.6980, Algorithm 1):
    the largest step Adam takes, as in a trainer's first step. ``warm_start``, a list of
    ``(rollout, advantages)`` pairs of *other* batches, fills Adam's moments first: the same plan of
    minibatches on each, at learning rate 0, so the weights do not move (the ratios of ``rollout``
    stay 1) while ``exp_avg``, ``exp_avg_sq`` and the step count become those of an optimiser that
    has trained on those batches, as in a trainer's later steps. ``max_grad_norm`` clips the
    gradient's norm before each step, as the trainers do (None: no clipping, the default).
    """
    check_int("updates", updates, minimum=1)
    eps_high = check_positive("eps_high", eps_high, allow_zero=True)
    per_pass = math.ceil(len(rollout) / check_int("minibatch_size", minibatch_size, minimum=1))
    plan = minibatch_plan(torch.arange(len(rollout)), minibatch_size, epochs=math.ceil(updates / per_pass),
                          generator=torch.Generator().manual_seed(seed))[:updates]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    for warm_rollout, warm_advantages in warm_start or ():
        for group in optimizer.param_groups:
            group["lr"] = 0.0                       # moments and step count only, the weights stay put
        warm_plan = minibatch_plan(torch.arange(len(warm_rollout)), minibatch_size, epochs=math.ceil(updates / per_pass),
                                   generator=torch.Generator().manual_seed(seed))[:updates]
        policy_update(model, optimizer, warm_rollout, warm_advantages, warm_plan, max_grad_norm=max_grad_norm,
                      variant="dapo", eps_low=eps_low, eps_high=eps_high)
    for group in optimizer.param_groups:
        group["lr"] = lr
    old_logp = rollout.logprobs.detach()
    mask = rollout.completion_mask > 0
    token_advantages = advantages.unsqueeze(1).expand_as(old_logp) if advantages.dim() == 1 else advantages
    clipped_high = torch.zeros_like(mask)
    last_ratio = torch.full_like(old_logp, float("nan"))
    updates_per_row = torch.zeros(len(rollout), dtype=torch.long)
    path, in_update = [], torch.zeros(len(plan), len(rollout), dtype=torch.bool)

    def all_ratios():
        with torch.no_grad():
            return (rollout_logprobs(model, rollout) - old_logp).exp()

    if track_ratios:
        path.append(all_ratios())
    for k, rows in enumerate(plan):
        with torch.no_grad():
            ratio = (rollout_logprobs(model, rollout.select(rows)) - old_logp[rows]).exp()
        clipped_high[rows] = clipped_high[rows] | (mask[rows] & (token_advantages[rows] > 0) & (ratio > 1 + eps_high))
        last_ratio[rows] = ratio
        updates_per_row[rows] += 1
        in_update[k, rows] = True
        policy_update(model, optimizer, rollout, advantages, [rows], max_grad_norm=max_grad_norm, variant="dapo",
                      eps_low=eps_low, eps_high=eps_high)
        if track_ratios:
            path.append(all_ratios())
    with torch.no_grad():
        logp = rollout_logprobs(model, rollout)
    result = {"old_logp": old_logp, "logp": logp, "advantages": advantages, "mask": rollout.completion_mask.float(),
              "clipped_high": clipped_high, "last_ratio": last_ratio, "updates_per_row": updates_per_row}
    if track_ratios:
        result |= {"ratio_path": torch.stack(path), "in_update": in_update}
    return result


def ratio_crossings(batch: dict, eps_high: float, group_size: int | None = None, completion_ids=None):
    """How each A > 0 token that ended above the clip line 1 + ε_high got there, from a batch of
    ``policy_after_updates(..., track_ratios=True)``.

    PPO's clip (Schulman et al. 2017, arXiv:1707.06347, eq. 7; DAPO's ε_high, Yu et al. 2025,
    arXiv:2503.14476, eq. 10) switches a token's own term off only while r > 1 + ε_high at the start of
    an update; it does not stop the ratio there. Each update k moves the token's log-ratio by
    Δ_k = log r_k − log r_{k−1}; the updates that trained the token's row ("own": the token's own term
    and those of the other rows in that minibatch, plus Adam's momentum) are told apart from the rest
    ("carried": the shared weights moved by other rows' gradients and by momentum).

    Returns a DataFrame, one row per A > 0 token with final ratio > 1 + ε_high: ``row``, ``position``,
    ``final_ratio``; ``crossed_in`` (1-based index of the last update across which the ratio went from
    ≤ 1 + ε_high to above it, 0 if it started above), ``crossed_by`` ("own" when that update trained the
    token's row, "carried" when it did not), ``ratio_before`` / ``ratio_after`` that update;
    ``own_rise`` / ``carried_rise``: the sums of Δ_k over the two kinds of update (they add up to log r_final).

    With ``group_size`` and ``completion_ids`` (B, T) it counts by *decision* instead of by row, as
    ``clip_relief`` does: the rows of one group that share a prefix and then the same token are one
    probability at one context, so they are one decision (``rows``: how many rows it stands for; it is
    counted when any of them has A > 0). Each update is then one of three kinds, tested in this order:
    "own" (it trained a row holding this token at this context, of either sign of A: the token's own
    terms), "same context" (it trained a row of the same group with the same prefix but another token
    there: through the softmax at this one context, pushing a sibling down lifts this token, in a
    tabular policy as much as in a network) or "other contexts" (only rows with other contexts: shared
    weights and Adam's momentum). The columns are ``prompt``, ``position``, ``rows``, ``final_ratio``,
    ``crossed_in``, ``crossed_by`` (one of the three kinds), ``ratio_before``, ``ratio_after``,
    ``own_rise``, ``same_context_rise``, ``other_rise`` (adding up to log r_final), and
    ``own_updates``, ``same_context_updates``, ``other_updates``: how many updates of each kind there
    were (they add up to the number of updates), so a kind's rise can be read per update. The kinds
    are bookkeeping, not a controlled split: every update trains a whole minibatch, so an "own" or
    "same context" update also holds rows of other prompts, and a decision shared by many rows of its
    group (the first token) is in an "own" or "same context" update far more often than not.
    """
    import pandas as pd

    eps_high = check_positive("eps_high", eps_high, allow_zero=True)
    if not {"ratio_path", "in_update", "advantages", "mask"} <= set(batch):
        raise ValueError("batch must come from policy_after_updates(..., track_ratios=True)")
    path = torch.as_tensor(batch["ratio_path"]).float()
    in_update = torch.as_tensor(batch["in_update"]).bool()
    mask = torch.as_tensor(batch["mask"]) > 0
    advantages = torch.as_tensor(batch["advantages"]).float()
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1).expand_as(mask)
    if path.dim() != 3 or path.shape[1:] != mask.shape or in_update.shape != (path.shape[0] - 1, mask.shape[0]):
        raise ValueError("ratio_path must be (updates + 1, B, T) and in_update (updates, B) for the batch's (B, T)")
    line = 1 + eps_high
    steps = path.clamp_min(1e-30).log().diff(dim=0)                       # (updates, B, T)
    if group_size is not None:
        return _decision_crossings(path, steps, in_update, mask, advantages, line, group_size, completion_ids)
    own = in_update.unsqueeze(2).expand_as(steps)
    ended = mask & (advantages > 0) & (path[-1] > line)
    records = []
    for row, position in ended.nonzero().tolist():
        trace = path[:, row, position]
        ups = [k for k in range(1, len(trace)) if trace[k - 1] <= line < trace[k]]
        k = ups[-1] if ups else 0
        records.append({
            "row": row, "position": position, "final_ratio": float(trace[-1]), "crossed_in": k,
            "crossed_by": ("own" if bool(in_update[k - 1, row]) else "carried") if k else "started above",
            "ratio_before": float(trace[k - 1]) if k else float("nan"), "ratio_after": float(trace[k]),
            "own_rise": float(steps[:, row, position][own[:, row, position]].sum()),
            "carried_rise": float(steps[:, row, position][~own[:, row, position]].sum())})
    columns = ["row", "position", "final_ratio", "crossed_in", "crossed_by", "ratio_before", "ratio_after",
               "own_rise", "carried_rise"]
    return pd.DataFrame.from_records(records, columns=columns)


def _decision_crossings(path, steps, in_update, mask, advantages, line, group_size, completion_ids):
    """``ratio_crossings`` by decision: one row per (group, prefix, token) with A > 0 ending above ``line``."""
    import pandas as pd

    group_size = check_int("group_size", group_size, minimum=1)
    if completion_ids is None:
        raise ValueError("counting by decision needs completion_ids (B, T) to tell prefixes apart")
    ids = torch.as_tensor(completion_ids)
    if ids.shape != mask.shape or mask.shape[0] % group_size:
        raise ValueError(f"completion_ids must be the batch's (B, T) = {tuple(mask.shape)}, B a multiple of group_size")
    decisions, contexts = {}, {}
    for row, position in mask.nonzero().tolist():
        prompt, prefix = row // group_size, tuple(ids[row, :position].tolist())
        decisions.setdefault((prompt, prefix, int(ids[row, position])), []).append(row)
        contexts.setdefault((prompt, prefix), []).append(row)
    records = []
    for (prompt, prefix, _), rows in decisions.items():
        position, first = len(prefix), rows[0]
        trace = path[:, first, position]
        if not (advantages[rows, position] > 0).any() or not trace[-1] > line:
            continue
        own = in_update[:, rows].any(1)
        siblings = [r for r in contexts[(prompt, prefix)] if r not in rows]
        same = ~own & (in_update[:, siblings].any(1) if siblings else torch.zeros_like(own))
        other = ~own & ~same
        ups = [k for k in range(1, len(trace)) if trace[k - 1] <= line < trace[k]]
        k = ups[-1] if ups else 0
        kind = ("own" if own[k - 1] else "same context" if same[k - 1] else "other contexts") if k else "started above"
        rise = steps[:, first, position]
        records.append({
            "prompt": prompt, "position": position, "rows": len(rows), "final_ratio": float(trace[-1]),
            "crossed_in": k, "crossed_by": kind,
            "ratio_before": float(trace[k - 1]) if k else float("nan"), "ratio_after": float(trace[k]),
            "own_rise": float(rise[own].sum()), "same_context_rise": float(rise[same].sum()),
            "other_rise": float(rise[other].sum()),
            "own_updates": int(own.sum()), "same_context_updates": int(same.sum()), "other_updates": int(other.sum())})
    columns = ["prompt", "position", "rows", "final_ratio", "crossed_in", "crossed_by", "ratio_before", "ratio_after",
               "own_rise", "same_context_rise", "other_rise", "own_updates", "same_context_updates", "other_updates"]
    return pd.DataFrame.from_records(records, columns=columns)


def one_step_logprob_change(model, rollout, advantages, mode: str, *, max_len: int, step_size: float = 0.02):
    """Per-token mean change of log π of each completion after one normalised gradient step.

    The policy-gradient loss of ``rollout`` with ``advantages`` is aggregated with ``mode``
    (``rlbook.losses.policy_loss``, on-policy so the ratio is 1 and no clip acts), and one update
    on the whole batch (``rlbook.update.policy_update``) moves the weights by
    θ ← θ − step_size · g / ‖g‖: the same distance for every mode, so modes that differ only by a
    constant factor (token_mean and seq_mean_token_sum_norm within one batch) give the same step.
    Returns a (B,) tensor Δ_i = (1/|o_i|) Σ_t [log π_new − log π_old]; the model's weights are
    restored before returning.
    """
    step_size = float(step_size)
    if not step_size > 0:
        raise ValueError(f"step_size must be > 0, got {step_size}")
    params = [p for p in model.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    with torch.no_grad():
        old_logp = rollout_logprobs(model, rollout)
    try:
        policy_update(model, _NormalizedGradientDescent(params, lr=step_size), rollout, advantages,
                      [torch.arange(len(rollout))], old_logp=old_logp, max_grad_norm=None, variant="dr_grpo",
                      aggregation=mode, max_len=max_len)
        with torch.no_grad():
            new_logp = rollout_logprobs(model, rollout)
    finally:
        with torch.no_grad():
            for p, value in zip(params, saved):
                p.copy_(value)
        model.zero_grad(set_to_none=True)
    mask = rollout.completion_mask.float()
    return ((new_logp - old_logp) * mask).sum(1) / mask.sum(1)


class _NormalizedGradientDescent(torch.optim.Optimizer):
    """θ ← θ − lr · g / ‖g‖, with ‖g‖ the norm of the gradient over all the parameters: a step of length lr."""

    def __init__(self, params, lr: float):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        params = [(p, group["lr"]) for group in self.param_groups for p in group["params"] if p.grad is not None]
        norm = torch.sqrt(sum((p.grad ** 2).sum() for p, _ in params))
        for p, lr in params:
            p -= lr * p.grad / norm


@torch.no_grad()
def first_token_probabilities(model, tokenizer, prompts, *, temperature: float = 1.0) -> torch.Tensor:
    """The policy's distribution over the first completion token, one row per prompt: (N, V).

    ``prompts`` are strings used verbatim or conversations (lists of ``{"role", "content"}``
    dicts), formatted by ``rlbook.rollout.format_prompts`` as the sampler formats them. Each prompt
    runs alone (no padding), so the row is exactly the next-token softmax(z / ``temperature``) a
    sampler would draw the completion's first token from. Lesson 16 follows one decision through
    training with it: the probability that the answer opens with the scratchpad tag ``<think>``.
    """
    texts = format_prompts(tokenizer, prompts)
    if not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    device = next(model.parameters()).device
    rows = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"].to(device)
        logits = model(input_ids=ids).logits[0, -1].double()
        rows.append(torch.softmax(logits / temperature, dim=0).cpu())
    return torch.stack(rows)


@torch.no_grad()
def sampled_token_entropies(model, tokenizer, prompts, *, num_samples: int = 4, max_new_tokens: int = 64,
                            temperature: float = 1.0, seed: int = 0, return_prompt_index: bool = False):
    """The entropy (nats) of the policy's next-token distribution at every token of completions it
    samples: ``num_samples`` per prompt at ``temperature``, the entropy of softmax(z / temperature)
    at each completion position, returned flat (1-D, padding left out). Its mean is the "token
    entropy" a trainer logs, here measured on prompts of one's choosing (held-out ones, at one
    temperature for every run being compared). With ``return_prompt_index``, returns
    ``(entropies, prompt_index)``: the index into ``prompts`` of each token's prompt, the cluster label a
    standard error of the mean needs (``rlbook.evidence.clustered_se``), since a prompt's tokens are not
    independent draws.
    """
    if not isinstance(return_prompt_index, bool):
        raise ValueError(f"return_prompt_index must be a bool, got {return_prompt_index!r}")
    rollout = sample(model, tokenizer, list(prompts), num_samples=num_samples, max_new_tokens=max_new_tokens,
                     temperature=temperature, seed=seed)
    _, entropy = rollout_logprobs(model, rollout, temperature=temperature, return_entropy=True)
    kept = rollout.completion_mask > 0
    entropies = entropy[kept].detach().double().cpu()
    if not return_prompt_index:
        return entropies
    rows = torch.arange(kept.shape[0], device=kept.device)[:, None].expand_as(kept)
    return entropies, (rows[kept] // num_samples).cpu()


def answer_spread(texts, num_samples: int) -> list[dict]:
    """How spread the final answers of each prompt's samples are: ``texts`` hold ``num_samples``
    completions per prompt, prompt-major (as ``rollout.sample`` returns them). Per prompt: ``distinct``,
    the number of different final answers (``rlbook.tasks.verifiers.extract_answer``; a completion with
    no well-formed answer counts as one more kind, "none"), ``modal_share``, the share of samples that
    give the most common one, and ``answered``, how many samples have a well-formed answer. One
    answer repeated (modal share near 1) is a policy narrowed onto it; many distinct ones are not.
    """
    from collections import Counter

    from rlbook.tasks.verifiers import extract_answer

    check_int("num_samples", num_samples, minimum=1)
    texts = list(texts)
    if not texts or len(texts) % num_samples:
        raise ValueError(f"texts must hold num_samples = {num_samples} completions per prompt, got {len(texts)}")
    rows = []
    for start in range(0, len(texts), num_samples):
        answers = [extract_answer(t) for t in texts[start:start + num_samples]]
        counts = Counter("none" if a is None else a.strip() for a in answers)
        rows.append({"distinct": len(counts), "modal_share": max(counts.values()) / num_samples,
                     "answered": sum(a is not None for a in answers)})
    return rows


def entropy_step_change(model, optimizer, rollout, advantages, *, minibatch_size: int | None = None,
                        temperature: float = 1.0, max_grad_norm: float | None = 1.0, **loss_kwargs) -> dict[str, float]:
    """One policy update on ``rollout``, and its entropy change set beside the covariance law.

    The update is ``rlbook.update.policy_update`` (one pass over the rows in minibatches of
    ``minibatch_size``, default all; ``loss_kwargs`` go to ``policy_loss``, e.g. ``variant``);
    ``model`` and ``optimizer`` are stepped in place. At every completion position t of the batch
    (mask 1) the full next-token distribution π_t = softmax(z_t / T) is read before and after.
    Returns, as floats:

    - ``measured``: the exact change of the mean token entropy, mean_t [H(π_t after) − H(π_t before)];
    - ``first_order``: mean_t −Cov_{a∼π_t}(log π_t(a), Δz_t(a)) with Δz_t the step's real change of
      the scaled logits: the covariance law of the module docstring, position by position;
    - ``natural_cov``: the batch covariance over the sampled tokens of (log π(y_t), A_t), the
      token-level estimator of Cui et al. 2025 (arXiv:2505.22617, §4; the mean of
      ``token_covariance``), the natural-PG term of §3;
    - ``vanilla_cov``: the same covariance with π(y_t)·A_t, the vanilla-PG term of §3;
    - ``state_cov``: the per-state estimate, mean_t (log π(y_t) + H(π_t))·A_t
      (``rlbook.entropy.state_covariance``): each token centred on its own state's mean log-prob
      −H(π_t), as the law has it, where ``natural_cov`` centres on the batch's mean;
    - ``state_vanilla_cov``: the per-state vanilla estimate, mean_t A_t·[π(y_t)(log π(y_t) + H(π_t)) −
      Cov_{π_t}(log π, π)] (``rlbook.entropy.state_vanilla_covariance``), whose negative is the first-order
      change of a one-sample tabular step Δz = A_t·(e_{y_t} − π_t) at each state;
    - ``between_states``: −Cov_t(H(π_t), A_t) over the batch's tokens, and ``centring``:
      −mean_t(A_t)·mean_t(log π(y_t) + H(π_t)); exactly, natural_cov = state_cov + between_states +
      centring;
    - ``entropy_before``, ``entropy_after``: the mean token entropies.

    The law predicts ``measured`` ≈ −η·cov for an unknown effective step η > 0 (a network's logits
    are not free parameters, and the optimizer rescales the gradient), so a covariance predicts
    the sign and the size across steps, not the nats. Holds two (B, C, V) logit tensors.
    """
    mask = rollout.completion_mask.float()
    advantages = as_float_tensor("advantages", advantages).to(mask.device)
    if advantages.shape != (len(rollout),):
        raise ValueError(f"advantages must have shape ({len(rollout)},), one per completion, got {tuple(advantages.shape)}")
    if not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    before = _completion_log_policy(model, rollout, temperature)
    plan = minibatch_plan(torch.arange(len(rollout)), minibatch_size)
    policy_update(model, optimizer, rollout, advantages, plan, temperature=temperature, max_grad_norm=max_grad_norm,
                  **loss_kwargs)
    after = _completion_log_policy(model, rollout, temperature)
    entropy_before, entropy_after = _entropy(before), _entropy(after)
    first_order = -(before.exp() * (before + entropy_before[..., None]) * (after - before)).sum(-1)
    # after − before differs from Δz by a per-position constant, which the centred covariance ignores
    sampled = before.gather(-1, rollout.completion_ids[..., None]).squeeze(-1)
    per_token = advantages[:, None].expand_as(sampled)
    count = mask.sum()

    def mean(x):
        return (x * mask).sum() / count

    centred_logp = sampled + entropy_before
    self_covariance = (before.exp() ** 2 * (before + entropy_before[..., None])).sum(-1)  # Cov_π(log π, π) per state
    return {"measured": float(mean(entropy_after - entropy_before)),
            "first_order": float(mean(first_order)),
            "natural_cov": float(token_covariance(sampled, per_token, mask).sum() / count),
            "vanilla_cov": float(token_covariance(sampled, sampled.exp() * per_token, mask).sum() / count),
            "state_cov": float(state_covariance(sampled, entropy_before, per_token, mask).sum() / count),
            "state_vanilla_cov": float(state_vanilla_covariance(sampled, entropy_before, self_covariance, per_token,
                                                                mask).sum() / count),
            "between_states": float(-mean((entropy_before - mean(entropy_before)) * (per_token - mean(per_token)))),
            "centring": float(-mean(per_token) * mean(centred_logp)),
            "entropy_before": float((entropy_before * mask).sum() / count),
            "entropy_after": float((entropy_after * mask).sum() / count)}


STEP_LAW_COVARIANCES = ("state_cov", "state_vanilla_cov", "natural_cov", "vanilla_cov")


def step_law_summary(steps, *, ends: int = 3) -> dict[str, float]:
    """What one run of ``entropy_step_change`` rows (a table, one row per consecutive step) says, as numbers.

    - ``r first_order`` and ``r <cov>`` for each of ``STEP_LAW_COVARIANCES`` present: Pearson r of the
      measured ΔH with the first-order prediction and with −cov (the law: ΔH ≈ −η·Cov, η > 0);
    - ``slope``: the least-squares slope of measured on first order (1 if the expansion were exact);
    - ``remainder ratio``: RMS(measured − first order) / RMS(measured), the size of the second-order
      remainder beside the change itself (1 = no better than predicting no change);
    - ``sharpening``: Σ measured, the change at fixed states (each step's batch read before and after);
    - ``batch change``: the mean ``entropy_after`` of the last ``ends`` steps minus the mean
      ``entropy_before`` of the first ``ends`` (end means damp one batch's draw of prompts);
    - ``sharpening share``: sharpening / batch change, the part of the fall that is sharpening at the
      states visited; the rest is a change of which states the batches visit.
    """
    for column in ("measured", "first_order", "entropy_before", "entropy_after"):
        if column not in steps:
            raise ValueError(f"steps must have a column {column!r}")
    measured = np.asarray(steps["measured"], dtype=float)
    first_order = np.asarray(steps["first_order"], dtype=float)
    if not isinstance(ends, int) or not 1 <= ends <= len(measured) // 2:
        raise ValueError(f"ends must be an int in [1, {len(measured) // 2}] (half the steps), got {ends!r}")

    def pearson(x, y):
        return float(np.corrcoef(x, y)[0, 1]) if np.std(x) > 0 and np.std(y) > 0 else float("nan")

    summary = {"r first_order": pearson(measured, first_order)}
    for column in STEP_LAW_COVARIANCES:
        if column in steps:
            summary[f"r {column}"] = pearson(measured, -np.asarray(steps[column], dtype=float))
    summary["slope"] = float(np.polyfit(first_order, measured, 1)[0])
    summary["remainder ratio"] = float(np.sqrt(np.mean((measured - first_order) ** 2) / np.mean(measured ** 2)))
    before, after = np.asarray(steps["entropy_before"], dtype=float), np.asarray(steps["entropy_after"], dtype=float)
    summary["sharpening"] = float(measured.sum())
    summary["batch change"] = float(after[-ends:].mean() - before[:ends].mean())
    summary["sharpening share"] = summary["sharpening"] / summary["batch change"]
    return summary


@torch.no_grad()
def _completion_log_policy(model, rollout, temperature: float) -> torch.Tensor:
    """log softmax(z / T) of the full vocabulary at each completion position, (B, C, V) float64."""
    logits = completion_forward(model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                rollout.completion_mask)
    return torch.log_softmax(logits.double() / temperature, dim=-1)


def _entropy(log_policy: torch.Tensor) -> torch.Tensor:
    return -(log_policy.exp() * log_policy).sum(-1)


def clip_relief(low: dict, high: dict, group_size: int, completion_ids=None):
    """The A > 0 decisions of one batch updated twice, under a smaller and a larger ε_high, side by side.

    ``low`` and ``high``: two ``policy_after_updates`` results from the same rollout, advantages,
    minibatch seed and learning rate, differing only in ε_high (DAPO's clip-higher, Yu et al. 2025,
    arXiv:2503.14476, §3.1, eq. 10). Until some token first passes r = 1 + ε_high of the smaller
    clip the two runs are identical; from then on they differ only through what that clip switched off.

    A *decision* is one (prompt, position, token) whose context was sampled: the rows of one group
    that share a prefix share that token's probability, so they are one decision, not several
    (``group_size``: the rows of one prompt are contiguous; ``completion_ids``, (B, T), tells tokens
    apart, otherwise π_old does). Returns a ``pandas.DataFrame``, one row per decision with
    A > 0: ``prompt``, ``position``, ``old_prob``, ``rows`` (how many tokens it stands for),
    ``log_ratio_low`` / ``log_ratio_high`` (log π_θ/π_old after the updates, the mean over its rows),
    ``difference`` (high − low) and ``clipped_low`` (the smaller clip switched it off in some update).
    """
    import pandas as pd

    group_size = check_int("group_size", group_size, minimum=1)
    for name, batch in (("low", low), ("high", high)):
        missing = {"old_logp", "logp", "advantages", "mask", "clipped_high"} - set(batch)
        if missing:
            raise ValueError(f"{name} must come from policy_after_updates; missing {sorted(missing)}")
    if not torch.equal(low["old_logp"], high["old_logp"]) or not torch.equal(low["mask"], high["mask"]):
        raise ValueError("low and high must be the same rollout updated twice (their old_logp and mask differ)")
    mask = low["mask"] > 0
    if mask.shape[0] % group_size:
        raise ValueError(f"the batch has {mask.shape[0]} rows, not a multiple of group_size={group_size}")
    advantages = low["advantages"]
    token_advantages = advantages.unsqueeze(1).expand_as(mask) if advantages.dim() == 1 else advantages
    positive = mask & (token_advantages > 0)
    rows, positions = positive.nonzero(as_tuple=True)
    old_logp = low["old_logp"][rows, positions]
    tokens = (torch.as_tensor(completion_ids)[rows, positions] if completion_ids is not None
              else torch.round(old_logp * 1e6).long())
    table = pd.DataFrame({
        "prompt": (rows // group_size).tolist(), "position": positions.tolist(), "token": tokens.tolist(),
        "old_prob": old_logp.exp().tolist(),
        "log_ratio_low": (low["logp"] - low["old_logp"])[rows, positions].tolist(),
        "log_ratio_high": (high["logp"] - high["old_logp"])[rows, positions].tolist(),
        "clipped_low": torch.as_tensor(low["clipped_high"]).bool()[rows, positions].tolist(),
    })
    table["context"] = old_logp.round(decimals=6).tolist()  # same prompt, position, token and π_old: one context
    decisions = table.groupby(["prompt", "position", "token", "context"], sort=True).agg(
        old_prob=("old_prob", "mean"), rows=("old_prob", "size"), log_ratio_low=("log_ratio_low", "mean"),
        log_ratio_high=("log_ratio_high", "mean"), clipped_low=("clipped_low", "any"))
    decisions = decisions.reset_index(level=["prompt", "position"]).reset_index(drop=True)
    return decisions.assign(difference=decisions["log_ratio_high"] - decisions["log_ratio_low"])


def register_disagreement_variant(variant: str, **disagreement) -> str:
    """Register ``<variant>_measured``: ``variant``'s loss unchanged, logging ``coefficient_disagreement``.

    Each minibatch's metrics gain the ``coef_*`` counts (tokens, cispo_differs, sapo_differs, mass,
    cispo_mass_moved, sapo_mass_moved) of ``rlbook.ratios.coefficient_disagreement``, with
    ``disagreement``'s ε, cap, τ and tolerance) on the ratios and advantages this run trains on, so a
    run can say on how many of its tokens the three losses would have given a different gradient.
    The trainer averages them over a step's minibatches: divide the means, not the shares. Returns the
    new variant's name (registered again, the same, if it exists: a notebook cell run twice). Worker
    processes forked after this call (``rlbook.parallel``) inherit it.
    """
    entry = policy_loss_variant(variant)
    name = f"{variant}_measured"

    def measured(logp, old_logp, advantages, mask, **knobs):
        result = entry.fn(logp, old_logp, advantages, mask, **knobs)
        result = result if isinstance(result, Surrogate) else Surrogate(result)
        counts = coefficient_disagreement(token_ratio(logp, old_logp), advantages, mask, **disagreement)
        return result._replace(metrics={**(result.metrics or {}), **counts})

    register_policy_loss(name, measured, aggregation=entry.aggregation, defaults=entry.defaults, kl=entry.kl,
                         formula=entry.formula, paper=entry.paper,
                         doc=f"{entry.doc} (logging coefficient_disagreement)",
                         sequence_advantages=entry.sequence_advantages, overwrite=True)
    return name


@torch.no_grad()
def tempered_token_log_ratios(model, tokenizer, prompts, *, temperature: float, max_new_tokens: int = 64,
                              seed: int = 0) -> dict:
    """A language model as its own reference: π_θ = softmax(z/τ), π_ref = softmax(z), per sampled token.

    One completion per prompt is sampled from π_θ (``rlbook.rollout.sample`` at ``temperature`` τ, no
    truncation), so every token is a draw from the distribution whose log-probs ``logp`` holds and
    E_{π_θ}[r | prefix] = 1 at every position (Schulman 2020's condition for k1 and k3 to be unbiased).
    τ < 1 sharpens: it stands in for a policy that training has made more peaked than its reference,
    r = π_ref/π_θ being large exactly on the tokens the sharpening made rare. No training is involved.

    Returns a dict of (B, C) tensors, float64, B = len(prompts): ``logp`` = log π_θ(y_t | ·),
    ``ref_logp`` = log π_ref(y_t | ·), ``exact_kl`` = Σ_v π_θ(v | ·) log(π_θ(v | ·)/π_ref(v | ·)), the exact
    per-position KL that k1 and k3 estimate, and ``mask`` (bool, every generated token, the end-of-sequence
    token included); plus ``rollout``. Padding holds 0.
    """
    temperature = check_positive("temperature", temperature)
    rollout = sample(model, tokenizer, list(prompts), num_samples=1, max_new_tokens=max_new_tokens,
                     temperature=temperature, seed=seed)
    logits = completion_forward(model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                rollout.completion_mask).double()
    policy = torch.log_softmax(logits / temperature, dim=-1)
    reference = torch.log_softmax(logits, dim=-1)
    tokens = rollout.completion_ids.unsqueeze(-1)
    mask = rollout.completion_mask.bool()
    exact = (policy.exp() * (policy - reference)).sum(-1)
    return {"logp": policy.gather(-1, tokens).squeeze(-1).where(mask, 0.0),
            "ref_logp": reference.gather(-1, tokens).squeeze(-1).where(mask, 0.0),
            "exact_kl": exact.where(mask, 0.0), "mask": mask, "rollout": rollout}
