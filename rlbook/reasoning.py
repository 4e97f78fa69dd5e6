"""R1-Zero in miniature (lesson 17): the reward, what a completion spends its tokens on, and where
its length growth comes from.

DeepSeek-R1-Zero (DeepSeek-AI 2025, "DeepSeek-R1: Incentivizing Reasoning Capability in LLMs via
Reinforcement Learning", arXiv:2501.12948, §2.2) is RL straight from a base model, no SFT, with a
rule-based reward of two parts: an **accuracy** reward (the verifier) and a **format** reward (the
thinking goes between ``<think>`` tags). Its training curves show accuracy and response length
rising together. This module gives the lesson what it measures that on:

* ``r1_zero_reward``: w_acc · accuracy + w_fmt · format for one completion (the trainer's
  ``format_reward_weight`` is this sum with w_acc = 1 and the book's format rule);
* ``completion_kind`` / ``outcome_of``: a completion as "scratchpad", "direct" or "malformed", and
  with its correctness ("scratchpad, right", ...);
* ``mean_advantage_by_outcome``: the mean GRPO advantage each outcome gets in a real batch under a
  reward weighting (the lesson's widget);
* ``profile`` and ``length_decomposition``: each kind's share, mean length and accuracy, and the
  change of the mean length split exactly into a *mix* term (more of the longer kind) and a
  *within* term (each kind itself longer); ``clustered_decomposition`` gives each term a standard
  error from resampling the prompts, which two probes on the same prompts share;
* ``first_decision_push``: the expected push on the first token's "open ``<think>``" logit under
  GRPO's 1/|o| normaliser and under Dr.GRPO's constant one (zero, under both, without a reward gap);
* ``format_constant_in_every_group``: whether a format reward is cancelled by every group's mean;
* ``scratchpad_opening_probability``, ``opens_scratchpad`` and ``kl_mode_split``: whether a completion
  works its sum out is its first token's choice, so its probability is exact, and a policy's KL from
  another splits into what switching to (or from) the scratchpad costs and what changed inside it
  (lesson 05); ``success_conditioned_mode_split`` makes the same split for the policy conditioned on
  success, the most best-of-n can move it (lesson 05);
* ``audit_addition_scratchpad``: for the arithmetic task, how many scratchpad lines are the school
  algorithm's column steps, how many are wrong or extra, and whether the answer is the one the
  working computes (the book's corpus has no self-check line, so this is what "checking" can mean
  here).

Simplified on purpose: R1's format reward asks for the ``<think>`` block; the book's
``format_reward`` accepts a direct answer too. ``think_required=True`` gives R1's rule.
"""

from __future__ import annotations

import math
import re

import numpy as np
import torch

from rlbook._checks import check_bool, check_group_size, check_int, check_positive
from rlbook.advantages import group_advantages
from rlbook.evaluation import sample_and_verify
from rlbook.evidence import clustered_se
from rlbook.kl import bernoulli_kl
from rlbook.probes import first_token_probabilities
from rlbook.tasks.arithmetic import addition_steps
from rlbook.tasks.verifiers import THINK_CLOSE, THINK_OPEN, extract_answer, format_reward, is_well_formed

__all__ = ["KINDS", "OUTCOMES", "r1_zero_reward", "completion_kind", "outcome_of", "mean_advantage_by_outcome",
           "profile", "probe_profile", "length_decomposition", "clustered_decomposition", "first_token_kl_by_prompt",
           "exact_first_token_kl_by_prompt",
           "first_decision_push",
           "normaliser_push_ratio",
           "format_constant_in_every_group", "scratchpad_token_id", "scratchpad_opening_probability",
           "opens_scratchpad", "kl_mode_split", "success_conditioned_mode_split", "mode_model_rounds", "scratchpad_lines", "audit_addition_scratchpad"]

KINDS = ("scratchpad", "direct", "malformed")
COLUMN_LINE = re.compile(r"[0-9]\+[0-9](\+1)?=[0-9]+")  # the shape of one column step, "4+7+1=12"
OUTCOMES = ("scratchpad, right", "scratchpad, wrong", "direct, right", "direct, wrong", "malformed")


def _check_text(name: str, text) -> str:
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a str, got {type(text).__name__}")
    return text


def completion_kind(text: str) -> str:
    """"malformed" unless ``is_well_formed(text)``; else "scratchpad" with a ``<think>`` block, "direct" without."""
    _check_text("text", text)
    if not is_well_formed(text):
        return "malformed"
    return "scratchpad" if THINK_OPEN in text else "direct"


def outcome_of(text: str, correct: bool) -> str:
    """The completion's kind and correctness, one of ``OUTCOMES``. A malformed completion is
    "malformed" whatever ``correct`` says: the strict verifier reads only the final answer block and
    ignores the text before it, so it can score a malformed completion right (``<think>5+8=13</think>
    so <answer>623</answer>`` for 345+278); this outcome does not split such completions by correctness."""
    kind = completion_kind(text)
    return kind if kind == "malformed" else f"{kind}, {'right' if correct else 'wrong'}"


def r1_zero_reward(text: str, example: dict, task, *, accuracy_weight: float = 1.0, format_weight: float = 0.5,
                   think_required: bool = False) -> float:
    """R1-Zero's rule-based reward: ``accuracy_weight`` × accuracy + ``format_weight`` × format.

    accuracy: the task's **strict** verifier (1 when the single final answer block is right);
    format: 1 for a well-formed completion (``format_reward``), and with ``think_required`` only for
    one that also has its ``<think>`` block (R1's template, arXiv:2501.12948 §2.2.2).
    """
    _check_text("text", text)
    check_positive("accuracy_weight", accuracy_weight, allow_zero=True)
    check_positive("format_weight", format_weight, allow_zero=True)
    check_bool("think_required", think_required)
    accuracy = task.reward(text, example, strict=True)
    formatted = format_reward(text) if not think_required else float(completion_kind(text) == "scratchpad")
    return accuracy_weight * accuracy + format_weight * formatted


def mean_advantage_by_outcome(texts, correct, group_size: int, *, accuracy_weight: float = 1.0,
                              format_weight: float = 0.5, think_required: bool = False) -> dict:
    """The mean GRPO advantage (r − mean)/σ of each outcome in a batch of groups, under the reward
    ``accuracy_weight`` × correct + ``format_weight`` × format (``r1_zero_reward``'s sum).

    ``texts`` (B,) and ``correct`` (B,) 0/1, B = prompts × ``group_size``, groups contiguous.
    Returns {outcome: mean advantage} for the outcomes present (NaN for absent ones). Scaling both
    weights by one factor leaves GRPO's advantages unchanged (σ divides it out); a reward every
    completion earns is cancelled by the group mean.
    """
    texts = [_check_text("texts[i]", t) for t in texts]
    correct = torch.as_tensor(correct, dtype=torch.float64).reshape(-1)
    if correct.numel() != len(texts) or not bool(((correct == 0) | (correct == 1)).all()):
        raise ValueError(f"correct must hold one 0/1 value per text ({len(texts)}), got shape {tuple(correct.shape)}")
    check_group_size("group_size", len(texts), group_size)
    check_positive("accuracy_weight", accuracy_weight, allow_zero=True)
    check_positive("format_weight", format_weight, allow_zero=True)
    check_bool("think_required", think_required)
    kinds = [completion_kind(t) for t in texts]
    formatted = torch.tensor([float(k == "scratchpad" if think_required else k != "malformed") for k in kinds],
                             dtype=torch.float64)
    advantages = group_advantages(accuracy_weight * correct + format_weight * formatted, group_size, "grpo")
    outcomes = [outcome_of(t, bool(c)) for t, c in zip(texts, correct.tolist())]
    return {name: _mean([a for a, o in zip(advantages.tolist(), outcomes) if o == name]) for name in OUTCOMES}


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else math.nan


def profile(texts, lengths, correct) -> dict:
    """Each kind's ``share`` of the completions, ``length`` (mean tokens) and ``accuracy``, plus the
    overall ones: {kind or "all": {"share", "length", "accuracy", "count"}} (NaN for an absent kind)."""
    texts = [_check_text("texts[i]", t) for t in texts]
    lengths = torch.as_tensor(lengths, dtype=torch.float64).reshape(-1)
    correct = torch.as_tensor(correct, dtype=torch.float64).reshape(-1)
    if not texts or lengths.numel() != len(texts) or correct.numel() != len(texts):
        raise ValueError(f"texts, lengths and correct must be non-empty and of one length, got "
                         f"{len(texts)}, {lengths.numel()}, {correct.numel()}")
    kinds = [completion_kind(t) for t in texts]
    result = {}
    for kind in (*KINDS, "all"):
        rows = [i for i, k in enumerate(kinds) if kind in (k, "all")]
        result[kind] = {"share": len(rows) / len(texts), "count": len(rows),
                        "length": _mean(lengths[rows].tolist()), "accuracy": _mean(correct[rows].tolist())}
    return result


def probe_profile(model, tokenizer, examples, verifier, *, n_samples: int = 4, max_new_tokens: int = 64,
                  seed: int = 0):
    """Sample ``n_samples`` completions of each held-out example at temperature 1 and ``profile`` them.

    Returns (profile, rollout, correct): the rollout (groups contiguous) and the (B,) 0/1
    correctness, kept so that a lesson can show the same prompts' completions before and after.
    The same ``seed`` gives every model the same random draws (common random numbers), which makes
    two probes' difference less noisy than two independent samples would be.
    """
    rollout, rewards = sample_and_verify(model, tokenizer, examples, verifier, n_samples=n_samples,
                                         max_new_tokens=max_new_tokens, temperature=1.0, seed=seed)
    correct = (rewards.flatten() == 1.0).double()
    return profile(rollout.texts, rollout.completion_lengths, correct), rollout, correct


def length_decomposition(before: dict, after: dict, *, metric: str = "length", shares: str = "after") -> dict:
    """Split the change of the mean length between two ``probe_profile`` results into mix and within terms.

    With p_k the share and ℓ_k the mean length of kind k, L = Σ_k p_k ℓ_k and exactly::

        L' − L = Σ_k (p'_k − p_k) ℓ_k  [mix: more of the kinds that are long]
               + Σ_k p'_k (ℓ'_k − ℓ_k)  [within: each kind itself longer or shorter].

    A kind absent on one side takes its length from the other (its within term is 0).
    Returns {"before", "after", "change", "mix", "within"} in tokens. ``metric="accuracy"`` splits the
    change of the overall accuracy (pass@1) the same way: mix = more of the kinds that are often right,
    within = each kind itself more or less often right.

    ``shares="before"`` gives the other exact split, which weighs the within term by the base's shares
    and prices the mix at the trained lengths (or accuracies)::

        L' − L = Σ_k (p'_k − p_k) ℓ'_k + Σ_k p_k (ℓ'_k − ℓ_k).
    """
    if metric not in ("length", "accuracy"):
        raise ValueError(f"metric must be 'length' or 'accuracy', got {metric!r}")
    if shares not in ("after", "before"):
        raise ValueError(f"shares must be 'after' or 'before', got {shares!r}")
    for name, side in (("before", before), ("after", after)):
        if not isinstance(side, dict) or any(k not in side for k in KINDS):
            raise ValueError(f"{name} must be a profile (a dict with the kinds {KINDS}), got {side!r:.80}")
    mix = within = 0.0
    for kind in KINDS:
        p, p_new = before[kind]["share"], after[kind]["share"]
        length, length_new = before[kind][metric], after[kind][metric]
        length = length_new if p == 0 else length
        length_new = length if p_new == 0 else length_new
        if p == 0 and p_new == 0:
            continue
        mix += (p_new - p) * (length if shares == "after" else length_new)
        within += (p_new if shares == "after" else p) * (length_new - length)
    total_before = sum(before[k]["share"] * before[k][metric] for k in KINDS if before[k]["share"] > 0)
    total_after = sum(after[k]["share"] * after[k][metric] for k in KINDS if after[k]["share"] > 0)
    return {"before": total_before, "after": total_after, "change": total_after - total_before,
            "mix": mix, "within": within}


def _kind_masks(texts) -> np.ndarray:
    kinds = [completion_kind(_check_text("texts[i]", t)) for t in texts]
    return np.array([[k == kind for k in kinds] for kind in KINDS], dtype=float)  # (kinds, samples)


def clustered_decomposition(before, after, clusters, *, metric: str = "length", n_resamples: int = 2000,
                            seed: int = 0, keep=None, shares: str = "after") -> dict:
    """``length_decomposition`` of two probes of the same samples' prompts, with standard errors from
    resampling the prompts.

    ``before`` and ``after``: (texts, lengths, correct) of each probe, one row per sample;
    ``clusters``: the prompt of each sample, the same for both probes (``probe_profile`` samples the
    same prompts in the same order). The terms' uncertainty comes from which prompts were drawn, and
    both probes share them, so the prompts are resampled with replacement, both probes together (the
    cluster bootstrap, e.g. Cameron & Miller, J. Human Resources 50(2), 2015, §VI), and each term
    recomputed. Returns {"before", "after", "change", "mix", "within"} as ``length_decomposition``
    gives them, and "{term}_se" for each, the resampled terms' standard deviation.

    ``keep``: optionally (keep_before, keep_after), one 0/1 per sample of each probe; only the kept
    samples are decomposed (e.g. the wrong answers, ``correct == 0``: the split of their mean length),
    while the prompts are still resampled whole, so the two probes may keep different samples.

    ``shares``: which exact split, as in ``length_decomposition``: "after" prices the within term at
    the new shares (the mix at the old means), "before" at the old shares (the mix at the new means).
    The two are the index-number choice of Laspeyres vs Paasche; their average is the symmetric
    (Shapley) split, also exact.
    """
    if metric not in ("length", "accuracy"):
        raise ValueError(f"metric must be 'length' or 'accuracy', got {metric!r}")
    if shares not in ("after", "before"):
        raise ValueError(f"shares must be 'after' or 'before', got {shares!r}")
    check_positive("n_resamples", n_resamples)
    if keep is not None and (not isinstance(keep, (tuple, list)) or len(keep) != 2):
        raise ValueError(f"keep must be (keep_before, keep_after), got {type(keep).__name__}")
    sides = []
    for i, (name, side) in enumerate((("before", before), ("after", after))):
        if not isinstance(side, (tuple, list)) or len(side) != 3:
            raise ValueError(f"{name} must be (texts, lengths, correct), got {type(side).__name__}")
        texts, lengths, correct = side
        values = np.asarray(lengths if metric == "length" else correct, dtype=float).reshape(-1)
        if len(texts) != values.size:
            raise ValueError(f"{name}: texts and {metric} must be of one length, got {len(texts)} and {values.size}")
        kept = None
        if keep is not None:
            kept = np.asarray(keep[i], dtype=float).reshape(-1)
            if kept.size != values.size or not np.isin(kept, (0.0, 1.0)).all() or not kept.any():
                raise ValueError(f"keep[{i}] must be 0/1, one per sample of {name} ({values.size}), "
                                 f"keeping at least one")
        sides.append((_kind_masks(texts) * (1.0 if kept is None else kept), values, kept))
    labels = list(clusters)
    if len(labels) != sides[0][1].size or len(labels) != sides[1][1].size:
        raise ValueError(f"clusters must name the prompt of every sample of both probes ({sides[0][1].size}), "
                         f"got {len(labels)}")
    names = sorted(set(labels), key=labels.index)
    if len(names) < 2:
        raise ValueError("clusters must hold at least two prompts")
    index = np.array([names.index(label) for label in labels])
    rng = np.random.default_rng(seed)
    counts = np.vstack([np.ones(len(names)),  # row 0: the sample as drawn
                        rng.multinomial(len(names), np.full(len(names), 1 / len(names)), size=n_resamples)])
    weights = counts[:, index]  # (1 + resamples, samples)
    terms = []
    for masks, values, kept in sides:
        kind_weight = weights @ masks.T  # (resamples, kinds)
        with np.errstate(invalid="ignore", divide="ignore"):
            total_weight = weights.sum(axis=1, keepdims=True) if kept is None else (weights @ kept)[:, None]
            share = kind_weight / total_weight
            mean = (weights @ (masks * values).T) / kind_weight
        terms.append((share, mean))
    (p, m), (p_new, m_new) = terms
    m, m_new = np.where(p == 0, m_new, m), np.where(p_new == 0, m, m_new)
    present = (p > 0) | (p_new > 0)
    mix = np.where(present, (p_new - p) * (m if shares == "after" else m_new), 0.0).sum(axis=1)
    within = np.where(present, (p_new if shares == "after" else p) * (m_new - m), 0.0).sum(axis=1)
    total = np.where(p > 0, p * m, 0.0).sum(axis=1)
    total_new = np.where(p_new > 0, p_new * m_new, 0.0).sum(axis=1)
    result = {"before": total, "after": total_new, "change": total_new - total, "mix": mix, "within": within}
    return {**{k: float(v[0]) for k, v in result.items()},
            **{f"{k}_se": float(np.nanstd(v[1:], ddof=1)) for k, v in result.items()}}


def first_token_kl_by_prompt(logprobs, reference_logprobs, mask, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Each prompt's k3 KL to the reference on its samples' first tokens, and on all their tokens.

    ``logprobs`` and ``reference_logprobs``: (B, C) log-probabilities of the sampled tokens under the
    policy that sampled them and under the reference; ``mask``: (B, C), 1 on completion tokens; the B
    rows are prompts' groups of ``group_size``, contiguous. Per token k3 = π_ref/π − log(π_ref/π) − 1
    (Schulman 2020, ``rlbook.kl.k3``), an unbiased estimate of KL(π‖π_ref) at that state. Returns
    (first, total): (P,) sums over each prompt's group. The first token's share of the KL is
    Σ first / Σ total, and ``rlbook.evidence.ratio_se(first, total)`` its SE clustered by prompt
    (where a completion chooses whether to open ``<think>``, lessons 08 and 17).
    """
    from rlbook.kl import k3

    logprobs, reference_logprobs = torch.as_tensor(logprobs), torch.as_tensor(reference_logprobs)
    mask = torch.as_tensor(mask).to(logprobs.dtype)
    if logprobs.ndim != 2 or logprobs.shape != reference_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(f"logprobs, reference_logprobs and mask must be one (B, C) shape, got "
                         f"{tuple(logprobs.shape)}, {tuple(reference_logprobs.shape)}, {tuple(mask.shape)}")
    group_size = check_group_size("group_size", logprobs.shape[0], group_size)
    return _first_and_total(k3(logprobs, reference_logprobs) * mask, group_size)


def _first_and_total(per_token, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(P,) sums over each prompt's group of a (B, C) per-token quantity: on the first token, on all."""
    first = per_token[:, 0].reshape(-1, group_size).sum(1)
    total = per_token.reshape(-1, group_size, per_token.shape[1]).sum((1, 2))
    return first.double().numpy(), total.double().numpy()


def exact_first_token_kl_by_prompt(policy, reference, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                   group_size: int, *, batch_size: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """``first_token_kl_by_prompt`` with the exact KL at each sampled state instead of the k3 sample.

    At every position t of every sampled completion (the prefix the policy actually reached), the
    full next-token distributions of ``policy`` (π) and ``reference`` give
    KL(π‖π_ref | prefix) = Σ_v π(v) (log π(v) − log π_ref(v)), summed over the vocabulary (the
    quantity k3 estimates from the one sampled token; Schulman 2020). Summed over positions this is
    a per-sample estimate of the sequence KL whose only randomness is the sampled prefixes (the
    Rao-Blackwellised form), and at the first position, where the prefix is the prompt, it is exact.
    Rows as in a Rollout (left-padded prompts, right-padded completions), in contiguous groups of
    ``group_size`` per prompt. Returns (first, total): (P,) sums over each prompt's group.
    """
    from rlbook.rollout import _SharedPrompts

    mask = torch.as_tensor(completion_mask)
    if mask.ndim != 2 or tuple(completion_ids.shape) != tuple(mask.shape):
        raise ValueError(f"completion_ids and completion_mask must be one (B, C) shape, got "
                         f"{tuple(completion_ids.shape)}, {tuple(mask.shape)}")
    group_size = check_group_size("group_size", mask.shape[0], group_size)
    check_positive("batch_size", batch_size)
    per_token = torch.zeros(mask.shape, dtype=torch.float64)
    with torch.no_grad():  # each distinct prompt run once per model, as in ``completion_logprobs``
        prompts = _SharedPrompts(policy, prompt_ids, prompt_mask)
        reference_prompts = _SharedPrompts(reference, prompt_ids, prompt_mask)
        for rows in torch.arange(mask.shape[0]).split(batch_size):
            args = (rows, completion_ids[rows], completion_mask[rows])
            logp = torch.log_softmax(prompts.completion_logits(*args).double(), dim=-1)
            ref_logp = torch.log_softmax(reference_prompts.completion_logits(*args).double(), dim=-1)
            per_token[rows] = (logp.exp() * (logp - ref_logp)).sum(-1) * mask[rows].double()
    return _first_and_total(per_token, group_size)


def kl_off_first_token_against_coin(first, total, worked_after, worked_before) -> dict:
    """The KL a policy carries off its first token, per answer, against the first decision read as a coin.

    ``first`` and ``total``: (P,) per-problem sums of the KL to the reference over each problem's S
    answers, on the first token and on all tokens (``exact_first_token_kl_by_prompt``);
    ``worked_after`` and ``worked_before``: (P, S) tables, 1 where an answer opens the scratchpad, of
    the policy and of the reference on the same problems. Per answer the KL off the first token is
    off = Σ (total − first) / (P·S); the coin is KL(Bernoulli(q_after) ‖ Bernoulli(q_before)) at the
    pooled shares of worked answers (``rlbook.kl.bernoulli_kl``). Merging the first token's outcomes
    into two and pooling the problems can only lower a KL (data processing; joint convexity), so the
    coin is a floor for the first token's own KL, and off < coin says the rest of the answer moved
    less than the first decision alone must have. The floor is exact only when the worked tables are
    a function of the first token alone (e.g. "the first token is ``<think>``"); a partition that
    also reads the rest of the answer (a well-formed scratchpad) is bounded by the whole answer's KL
    instead. Returns {"off", "coin", "margin" = coin − off,
    "se"}: se is the margin's delta-method standard error clustered by problem, with
    ∂coin/∂q_after = log(q_a/q_b) − log((1 − q_a)/(1 − q_b)) and ∂coin/∂q_before = (1 − q_a)/(1 − q_b) − q_a/q_b.
    """
    first, total = np.asarray(first, dtype=np.float64), np.asarray(total, dtype=np.float64)
    after = torch.as_tensor(worked_after, dtype=torch.float64).numpy()
    before = torch.as_tensor(worked_before, dtype=torch.float64).numpy()
    if first.ndim != 1 or first.shape != total.shape or after.ndim != 2 or after.shape != before.shape \
            or after.shape[0] != first.shape[0]:
        raise ValueError(f"first and total must be (P,) and the worked tables (P, S) on the same P problems, got "
                         f"{first.shape}, {total.shape}, {after.shape}, {before.shape}")
    if first.shape[0] < 2:
        raise ValueError("need at least two problems for a clustered SE")
    answers_per_problem = after.shape[1]
    off_by_problem = (total - first) / answers_per_problem
    q_after_by_problem, q_before_by_problem = after.mean(1), before.mean(1)
    q_after, q_before = float(q_after_by_problem.mean()), float(q_before_by_problem.mean())
    if not (0 < q_before < 1 and 0 < q_after < 1):
        raise ValueError(f"the pooled shares must lie strictly between 0 and 1, got {q_after} and {q_before}")
    coin = float(bernoulli_kl(q_after, q_before))
    d_after = math.log(q_after / q_before) - math.log((1 - q_after) / (1 - q_before))
    d_before = (1 - q_after) / (1 - q_before) - q_after / q_before
    margin_by_problem = (d_after * q_after_by_problem + d_before * q_before_by_problem) - off_by_problem
    off = float(off_by_problem.mean())
    return {"off": off, "coin": coin, "margin": coin - off,
            "se": clustered_se(margin_by_problem, range(len(margin_by_problem)))}


def first_decision_push(p: float, scratchpad_advantage: float, scratchpad_length: float, direct_length: float,
                        *, normaliser: float | None = None) -> float:
    """The expected gradient of the GRPO surrogate on the logit z of "open ``<think>``", p = σ(z).

    A completion i puts A_i · w_i on its first token's log-probability, with w_i = 1/|o_i| under
    GRPO's per-response mean and w_i = 1/L under Dr.GRPO's constant normaliser (Liu et al. 2025,
    arXiv:2503.20783, §3). ∂ log π/∂z is 1 − p for ``<think>`` and −p for a direct answer, and the
    group mean makes the advantages sum to zero, p·Ā_s + (1 − p)·Ā_d = 0, so with each kind's
    advantage and length taken as uncorrelated (each kind at its mean length ℓ)::

        1/|o|:  p·Ā_s·[(1 − p)/ℓ_s + p/ℓ_d]          1/L:  p·Ā_s / L.

    Both are proportional to Ā_s, the scratchpad's mean advantage, which is zero when the reward
    does not tell the two kinds apart: the normaliser rescales the reward's push, it does not make
    one. ``normaliser`` None gives the 1/|o| push; a number L the constant one.
    """
    if not 0 <= p <= 1:
        raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
    for name, value in (("scratchpad_length", scratchpad_length), ("direct_length", direct_length)):
        check_positive(name, value)
    if not math.isfinite(scratchpad_advantage):
        raise ValueError(f"scratchpad_advantage must be finite, got {scratchpad_advantage!r}")
    if normaliser is not None:
        check_positive("normaliser", normaliser)
        return p * scratchpad_advantage / normaliser
    return p * scratchpad_advantage * ((1 - p) / scratchpad_length + p / direct_length)


def normaliser_push_ratio(p: float, scratchpad_length: float, direct_length: float, *,
                          constant: float | None = None) -> float:
    """The first-decision push under GRPO's 1/|o| over the push under a constant normaliser 1/L.

    The ratio of the two ``first_decision_push`` formulas, [(1 − p)/ℓ_s + p/ℓ_d] · L, which does not
    depend on the reward (its Ā_s cancels). ``constant`` None takes L = the mean length at share p,
    p·ℓ_s + (1 − p)·ℓ_d: the constant that gives the batch's tokens the same total weight as 1/|o|
    does on average, so the ratio measures 1/|o|'s reweighting of short against long completions
    and not a global rescale (Liu et al. 2025, arXiv:2503.20783, §3, use the budget L instead, which
    makes every 1/|o| weight at least 1/L). An optimiser like AdamW, with gradient clipping, largely
    divides a global rescale out, so neither ratio is a step size.
    """
    if constant is None:
        if not 0 <= p <= 1:
            raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
        constant = p * scratchpad_length + (1 - p) * direct_length
    return (first_decision_push(p, 1.0, scratchpad_length, direct_length)
            / first_decision_push(p, 1.0, scratchpad_length, direct_length, normaliser=constant))


def format_constant_in_every_group(texts, group_size: int, *, think_required: bool = False) -> bool:
    """True when every group's completions all earn the same format reward, so that the group mean
    cancels it and the format weight cannot change any GRPO advantage."""
    masks = _kind_masks(texts)
    check_group_size("group_size", masks.shape[1], group_size)
    formatted = masks[0] if think_required else 1 - masks[2]
    groups = formatted.reshape(-1, group_size)
    return bool((groups == groups[:, :1]).all())


def scratchpad_token_id(tokenizer) -> int:
    """The id of ``<think>`` as one token of ``tokenizer``; ValueError if the tokenizer splits it (then the
    choice "scratchpad or not" is not one decision of the first token, and the functions below do not apply)."""
    ids = tokenizer.encode(THINK_OPEN, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"tokenizer must encode {THINK_OPEN!r} as one token, got the ids {ids}")
    return int(ids[0])


def scratchpad_opening_probability(model, tokenizer, prompts) -> torch.Tensor:
    """(N,) float64: the probability that ``model``'s completion of each prompt opens with ``<think>``.

    The book's completions either open with the scratchpad tag or answer directly, so whether a
    completion works its sum out is the first token's decision, and its probability is exact: the
    first-token softmax (``rlbook.probes.first_token_probabilities``) at the tag's id.
    """
    return first_token_probabilities(model, tokenizer, prompts)[:, scratchpad_token_id(tokenizer)]


def opens_scratchpad(rollout, tokenizer) -> torch.Tensor:
    """(B,) bool: which completions of ``rollout`` open with the ``<think>`` token."""
    return rollout.completion_ids[:, 0] == scratchpad_token_id(tokenizer)


def kl_mode_split(log_ratio, in_mode, policy_mode_prob, reference_mode_prob, clusters) -> dict:
    """Split a sampled KL(π ‖ π_ref) into a *mode* part and a *within-mode* part (the chain rule).

    Each sample y ~ π of a prompt x has a binary mode m(y) (here: it opens a scratchpad or not), with
    probability q = π(m = 1 | x) under π and q_ref under π_ref. Exactly, sample by sample,

        log π(y|x)/π_ref(y|x) = log π(m|x)/π_ref(m|x) + log π(y|x, m)/π_ref(y|x, m),

    and in expectation over y ~ π, KL(π ‖ π_ref) = KL(Bernoulli(q) ‖ Bernoulli(q_ref)) + E_m[KL(π(·|x, m) ‖
    π_ref(·|x, m))] (the chain rule for relative entropy: Cover & Thomas, *Elements of Information
    Theory*, 2nd ed., 2006, Thm 2.5.3). The first term is what switching modes costs, the second what
    the policy changed inside a mode.

    ``log_ratio``: log π(y|x) − log π_ref(y|x) of each sample (its mean is the k1 estimate of the KL);
    ``in_mode``: each sample's mode (bool); ``policy_mode_prob`` and ``reference_mode_prob``: q and q_ref of
    each sample's prompt, in [0, 1]; ``clusters``: each sample's prompt. Returns ``total``, ``mode`` and
    ``within``, each (mean over samples, standard error clustered by prompt), with total = mode + within
    exactly; ``mode_exact``, the mean over samples of their prompt's Bernoulli KL (what ``mode`` estimates,
    without sampling noise); and ``within_per_sample``, the within-mode log-ratio of each sample.
    """
    ratio = torch.as_tensor(log_ratio, dtype=torch.float64).reshape(-1)
    mode = torch.as_tensor(in_mode).reshape(-1)
    q = torch.as_tensor(policy_mode_prob, dtype=torch.float64).reshape(-1)
    q_ref = torch.as_tensor(reference_mode_prob, dtype=torch.float64).reshape(-1)
    labels = list(clusters)
    if not (ratio.numel() == mode.numel() == q.numel() == q_ref.numel() == len(labels)) or ratio.numel() == 0:
        raise ValueError(f"log_ratio, in_mode, policy_mode_prob, reference_mode_prob and clusters must be "
                         f"non-empty and of one length, got {ratio.numel()}, {mode.numel()}, {q.numel()}, "
                         f"{q_ref.numel()}, {len(labels)}")
    if mode.dtype != torch.bool:
        raise ValueError(f"in_mode must hold booleans, got dtype {mode.dtype}")
    for name, probs in (("policy_mode_prob", q), ("reference_mode_prob", q_ref)):
        if not ((probs >= 0) & (probs <= 1)).all():
            raise ValueError(f"{name} must lie between 0 and 1")
    if not torch.isfinite(ratio).all():
        raise ValueError("log_ratio must be finite")
    taken, taken_ref = torch.where(mode, q, 1 - q), torch.where(mode, q_ref, 1 - q_ref)
    if not ((taken > 0) & (taken_ref > 0)).all():
        raise ValueError("each sample's mode must have a positive probability under both policies "
                         "(policy_mode_prob and reference_mode_prob)")
    mode_part = taken.log() - taken_ref.log()
    within = ratio - mode_part
    exact = bernoulli_kl(q, q_ref)  # a mode π never takes costs nothing (0 log 0 = 0)

    def mean_and_se(values):
        return float(values.mean()), clustered_se(values.numpy(), labels)

    return {"total": mean_and_se(ratio), "mode": mean_and_se(mode_part), "within": mean_and_se(within),
            "mode_exact": float(exact.mean()), "within_per_sample": within.numpy()}


def mode_model_rounds(mode_share: float, accuracy_in_mode: float, accuracy_out_of_mode: float, rounds: int) -> dict:
    """Rejection-sampling SFT's rounds if SFT learned only the *mode* (e.g. whether to open a scratchpad).

    A round keeps draws of π(·|x, correct) (the first right answer of K, lesson 05 §3), whose share in
    the mode is, by Bayes' rule, q·a_s / (q·a_s + (1 − q)·a_d), with q the policy's share in the mode and
    a_s, a_d its accuracy in and out of it. If a fit reproduced its data's mode share and nothing else,
    each round would map q to that, and pass@1 would be q·a_s + (1 − q)·a_d. ``mode_share`` is q₀,
    ``accuracy_in_mode`` a_s and ``accuracy_out_of_mode`` a_d (held fixed: the model leaves out any
    change inside a mode). Returns ``share`` and ``pass_at_1``, lists of ``rounds`` + 1 values (round 0 first).
    """
    check_int("rounds", rounds, minimum=0)
    for name, value in (("mode_share", mode_share), ("accuracy_in_mode", accuracy_in_mode),
                        ("accuracy_out_of_mode", accuracy_out_of_mode)):
        if not (isinstance(value, (int, float)) and 0 <= value <= 1):
            raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    if mode_share * accuracy_in_mode + (1 - mode_share) * accuracy_out_of_mode <= 0:
        raise ValueError("the policy is never right: a round keeps nothing, and the model is undefined")
    shares = [float(mode_share)]
    for _ in range(rounds):
        q = shares[-1]
        shares.append(q * accuracy_in_mode / (q * accuracy_in_mode + (1 - q) * accuracy_out_of_mode))
    return {"share": shares, "pass_at_1": [q * accuracy_in_mode + (1 - q) * accuracy_out_of_mode for q in shares]}


def success_conditioned_mode_split(in_mode, correct, *, reference_mode_prob=None) -> dict:
    """Where π(·|x, correct) spends its KL from π: the mode/within split of ``kl_mode_split``, exactly,
    for the policy conditioned on success, from samples of π.

    ``in_mode`` and ``correct``: (P, n) 0/1 tables of n samples of π on each of P prompts (each
    sample's mode, e.g. whether it opens a scratchpad, and whether it is right). On each prompt the
    samples' empirical distribution stands in for π (the plug-in of lesson 05's ceiling): with p̂ the
    share right, q̂ the share in the mode and q̂* the share of the right samples in the mode,
    π(·|x, correct) has KL(π(·|x, correct) ‖ π) = log(1/p̂), which the chain rule for relative entropy
    (Cover & Thomas, *Elements of Information Theory*, 2nd ed., 2006, Thm 2.5.3) splits into

        mode   = KL(Bernoulli(q̂*) ‖ Bernoulli(q̂)),
        within = Σ_m P*(m) log(1/â_m),   â_m the share right among the samples in mode m,

    mode + within = log(1/p̂) exactly, since P*(m) = P(m) â_m / p̂. A prompt never solved counts 0
    (best-of-n leaves it at π). Returns ``total``, ``mode`` and ``within``, each (mean over prompts,
    its standard error over prompts), and ``mode_share`` (mean q̂*) and ``per_problem`` ((P, 3):
    total, mode, within of each prompt).

    ``reference_mode_prob``: optionally (P,) each prompt's exact π(mode | x) (e.g.
    ``scratchpad_opening_probability``). Then ``mode_exact_reference`` (mean, s.e.) is also returned:
    KL(Bernoulli(q̂*) ‖ Bernoulli(q)) with that exact q in place of the sampled q̂, so that only q̂*
    is a plug-in (0 on a prompt never solved). It no longer adds up with ``within`` to ``total``.
    """
    modes = torch.as_tensor(in_mode)
    right = torch.as_tensor(correct)
    for name, table in (("in_mode", modes), ("correct", right)):
        if table.dim() != 2 or table.numel() == 0 or not ((table == 0) | (table == 1)).all():
            raise ValueError(f"{name} must be a non-empty (prompts, samples) table of 0/1, got shape {tuple(table.shape)}")
    if modes.shape != right.shape:
        raise ValueError(f"in_mode and correct must have one shape, got {tuple(modes.shape)} and {tuple(right.shape)}")
    modes, right = modes.double(), right.double()
    p = right.mean(dim=1)
    q = modes.mean(dim=1)
    solved = p > 0
    safe_p = torch.where(solved, p, torch.ones_like(p))
    q_star = torch.where(solved, (modes * right).mean(dim=1) / safe_p, q)
    total = torch.where(solved, -safe_p.log(), torch.zeros_like(p)) + 0.0   # + 0.0: no −0 for p̂ = 1
    mode = bernoulli_kl(q_star, q)
    per_problem = torch.stack([total, mode, total - mode], dim=1)

    def mean_and_se(values):
        spread = float(values.std(unbiased=True)) / math.sqrt(len(values)) if len(values) > 1 else math.nan
        return float(values.mean()), spread

    split = {"total": mean_and_se(total), "mode": mean_and_se(mode), "within": mean_and_se(total - mode),
             "mode_share": float(q_star[solved].mean()) if solved.any() else math.nan, "per_problem": per_problem.numpy()}
    if reference_mode_prob is not None:
        exact_q = torch.as_tensor(reference_mode_prob, dtype=torch.float64).reshape(-1)
        if exact_q.shape != p.shape or not torch.isfinite(exact_q).all() or (exact_q <= 0).any() or (exact_q >= 1).any():
            raise ValueError(f"reference_mode_prob must hold one probability in (0, 1) per prompt ({len(p)}), "
                             f"got shape {tuple(exact_q.shape)}")
        split["mode_exact_reference"] = mean_and_se(bernoulli_kl(torch.where(solved, q_star, exact_q), exact_q))
    return split


def scratchpad_lines(text: str) -> list[str]:
    """The lines of the ``<think>`` block of ``text`` ([] without one)."""
    _check_text("text", text)
    start, end = text.find(THINK_OPEN), text.find(THINK_CLOSE)
    if start < 0 or end < start:
        return []
    return text[start + len(THINK_OPEN):end].split("\n")


def audit_addition_scratchpad(text: str, a: int, b: int) -> dict | None:
    """What the scratchpad of an addition ``a + b`` spends its lines on; None without a scratchpad.

    ``steps``: lines equal to the school algorithm's column step at their position
    (``rlbook.tasks.addition_steps``); ``wrong``: lines in a column's place that differ from it;
    ``extra``: lines beyond the last column; ``missing``: columns with no line; ``other``: lines
    not shaped like a column step at all (a self-check such as "check: 623-278=345" would count
    here); ``follows_work``:
    the answer is the sum the written lines compute (each line's last digit, most significant
    column first, and the last line's carry), whether or not those lines are right.
    """
    for name, value in (("a", a), ("b", b)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    lines = scratchpad_lines(text)
    if not lines:
        return None
    expected = addition_steps(a, b)
    steps = sum(line == want for line, want in zip(lines, expected))
    columns = min(len(lines), len(expected))
    answer = extract_answer(text)
    return {"lines": len(lines), "steps": steps, "wrong": columns - steps,
            "extra": max(0, len(lines) - len(expected)), "missing": max(0, len(expected) - len(lines)),
            "other": sum(COLUMN_LINE.fullmatch(line) is None for line in lines),
            "follows_work": answer is not None and answer.strip() == _sum_the_lines_compute(lines)}


def _sum_the_lines_compute(lines: list[str]) -> str | None:
    """The answer a column-per-line scratchpad implies: each line's last digit, least significant
    line first, with the last line's full total leading (its carry); None if a line has no total."""
    totals = []
    for line in lines:
        total = line.rpartition("=")[2]
        if not total.isdigit():
            return None
        totals.append(total)
    return (totals[-1] + "".join(t[-1] for t in reversed(totals[:-1]))).lstrip("0") or "0"


def paired_ratio_difference(numerators_a, denominators_a, numerators_b, denominators_b) -> tuple[float, float]:
    """``(r_a − r_b, se)``: the change of a ratio of totals between two runs scored on the same clusters.

    Each array holds one total per cluster (e.g. per held-out problem: its right worked answers and its
    worked answers), the i-th entries of all four measured on the same cluster, so the two ratios
    r = Σ numerators / Σ denominators are paired and their errors correlated. The SE is the delta
    method clustered by the unit: each cluster's linearised contribution to r_a minus its contribution
    to r_b, e_i = (x_ai − r_a y_ai)/ȳ_a − (x_bi − r_b y_bi)/ȳ_b, and se = sd(e)/√n (the paired form of
    ``rlbook.evidence.ratio_se``; Cochran 1977, Sampling Techniques, §6.3). Needs two clusters and
    non-zero denominators' totals.
    """
    arrays = [np.asarray(v, dtype=float).ravel() for v in (numerators_a, denominators_a, numerators_b, denominators_b)]
    if len({a.size for a in arrays}) != 1:
        raise ValueError(f"all four arrays must hold one total per cluster, got sizes {[a.size for a in arrays]}")
    if arrays[0].size < 2:
        raise ValueError("need at least two clusters")
    x_a, y_a, x_b, y_b = arrays
    if y_a.mean() == 0 or y_b.mean() == 0:
        raise ValueError("denominators must not total zero")
    r_a, r_b = x_a.mean() / y_a.mean(), x_b.mean() / y_b.mean()
    linear = (x_a - r_a * y_a) / y_a.mean() - (x_b - r_b * y_b) / y_b.mean()
    return float(r_a - r_b), float(linear.std(ddof=1) / math.sqrt(linear.size))


def constant_critic_value_loss(lengths, rewards, lam: float, *, counts=None) -> float:
    """The logged ``value_loss`` of the best constant critic V ≡ c under GAE λ-return targets, γ = 1.

    Setting (the PPO trainer's ``_gae_advantages`` + ``rlbook.losses.policy.value_loss``): response i has
    T_i tokens at positions t = 0 … T_i − 1 and one reward r_i on its last token; V_{T_i} = 0 (it ended).
    With V ≡ c, GAE (Schulman et al. 2015, arXiv:1506.02438, eq. 16) gives δ_t = 0 for t < T_i − 1 and
    δ_{T_i−1} = r_i − c, so A_t = λ^{T_i−1−t}(r_i − c) and the target is G^λ_t = A_t + c. The loss is ½ the
    mean over all the batch's tokens ("token_mean") of (c − G^λ_t)²:

        L(c) = ½ Σ_i w_i (r_i − c)² / Σ_i T_i,    w_i = Σ_{k=0}^{T_i−1} λ^{2k} = (1 − λ^{2T_i}) / (1 − λ²),

    minimised at c* = Σ w_i r_i / Σ w_i. Only at λ = 1 (Monte Carlo returns, w_i = T_i) is this the
    Bernoulli ½ p(1 − p); at λ < 1 every token before the last is damped, so the constant scores far less.
    (A KL penalty in the per-token reward is left out: it adds small per-token terms.) ``counts``
    (default 1 each) repeats response i ``counts[i]`` times, or in those proportions. Returns L(c*).
    """
    lengths = np.asarray(lengths, dtype=float).ravel()
    rewards = np.asarray(rewards, dtype=float).ravel()
    counts = np.ones_like(lengths) if counts is None else np.asarray(counts, dtype=float).ravel()
    if not (lengths.shape == rewards.shape == counts.shape) or lengths.size == 0 or (lengths < 1).any() \
            or (counts < 0).any() or counts.sum() <= 0:
        raise ValueError("need equally many lengths (each ≥ 1), rewards and counts (≥ 0, not all 0), at least one")
    lam = float(lam)
    if not 0 <= lam <= 1:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    weights = counts * (lengths if lam == 1 else (1 - lam ** (2 * lengths)) / (1 - lam ** 2))
    best = float(np.sum(weights * rewards) / np.sum(weights))
    return float(0.5 * np.sum(weights * (rewards - best) ** 2) / np.sum(counts * lengths))


def critic_fit(history, *, window: int = 3, lam: float | None = None) -> dict:
    """Did a PPO critic learn? Its logged ``value_loss`` over the first and last ``window`` steps of a run,
    against the loss a constant value would get over the last ``window`` steps.

    ``value_loss`` is ½ mean over tokens of (V − G)² (``rlbook.losses.policy.value_loss``). By default the
    comparator is ½ p(1 − p) at the last steps' mean reward p: the best constant's loss against Monte Carlo
    returns (G = R on every token, 0/1 terminal reward, γ = 1). The trainer's targets are GAE λ-returns,
    though; pass the run's ``lam`` and the comparator is ``constant_critic_value_loss`` per step (mean
    over the last ``window``), with every right answer taken at the step's ``length_correct`` and every
    wrong one at ``length_incorrect`` (the per-answer lengths are not logged; w(T) is concave, so this
    slightly over-states the constant's loss when lengths vary within a kind). Returns ``first``,
    ``last`` (mean value_loss), ``constant`` and ``ratio`` = last / constant.
    """
    rows = list(history)
    window = int(window)
    if window < 1 or len(rows) < window:
        raise ValueError(f"need at least window={window} ≥ 1 steps, got {len(rows)}")
    if any("value_loss" not in row for row in rows):
        raise ValueError("the history has no value_loss: not a run with a critic")
    loss = [float(row["value_loss"]) for row in rows]
    if lam is None:
        reward = float(np.mean([float(row["reward"]) for row in rows[-window:]]))
        constant = 0.5 * reward * (1 - reward)
    else:
        per_step = []
        for row in rows[-window:]:
            p = float(row["reward"])  # a kind with no answers this step has no length (NaN): leave it out
            kinds = [(share, float(row[key]), r) for share, key, r in
                     ((p, "length_correct", 1.0), (1 - p, "length_incorrect", 0.0)) if share > 0]
            shares, lengths, rewards = zip(*kinds)
            per_step.append(constant_critic_value_loss(lengths, rewards, lam, counts=shares))
        constant = float(np.mean(per_step))
    last = float(np.mean(loss[-window:]))
    return {"first": float(np.mean(loss[:window])), "last": last, "constant": constant,
            "ratio": last / constant if constant > 0 else math.nan}
