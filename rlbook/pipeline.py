"""The full DeepSeek-R1 pipeline at the book's scale, and distillation (lesson 20).

DeepSeek-R1 (DeepSeek-AI 2025, "DeepSeek-R1: Incentivizing Reasoning Capability in LLMs via
Reinforcement Learning", arXiv:2501.12948) trains in four stages (§2.3):

1. **cold start**: SFT on a few thousand curated long chain-of-thought demonstrations, in a
   readable format (the thinking, then a summary);
2. **reasoning-oriented RL**: GRPO on verifiable problems with a rule-based accuracy reward and a
   format / language-consistency reward (§2.3.2);
3. **rejection sampling and SFT**: from the stage-2 policy, sample many answers per prompt and keep
   the correct, well-formatted ones (≈600k), add ≈200k *non-reasoning* examples (writing, factual
   QA, ...), and fine-tune (§2.3.3);
4. **RL for all scenarios**: a second RL stage in which reasoning prompts keep the rule-based reward
   and general prompts are scored by a **reward model** of human preference (§2.3.4).

§2.4 then **distils** the final model into smaller ones by SFT on its outputs alone, and reports that
this beats large-scale RL on the small model directly (§4.1).

This module holds the pieces of that pipeline that are not already trainers of the library (SFT is
``rlbook.trainers.sft``, RL is ``OnlineTrainer``, the reward model ``RewardModel``):

* ``cold_start_data``: the curated demonstrations — the task's own worked solutions, each checked by
  the strict verifier and for the ``<think>`` format (the book's stand-in for R1's human-refined
  chains of thought);
* ``general_data``: the non-reasoning SFT data — review requests answered by the review corpus;
* ``rejection_samples``: stage 3's sampling — n samples per prompt, keep a right, well-formatted one;
  ``solver_agreement``: the share of kept samples whose working is exactly the task's own solution
  (``solver_disagreements``: the others, beside the solver's);
  ``solver_demonstrations``: the solver's worked solutions on given rows (on the prompts a filter kept:
  a control matched on prompts);
* ``mixed_examples`` and ``MixedReward``: stage 4's prompt mix and its routed reward (the verifier
  for reasoning prompts, a reward model for general ones); ``clause_ladder``: a reward model's score of
  the best reviews the gold reward allows at each number of clauses (its length bias, read off);
  ``gold_by_clauses``: the gold reward by clause count in a set of replies (what such a model could learn
  about length); ``fewer_clauses_wins``: the "shorter review wins" heuristic on preference pairs;
  ``sentiment_probe``: the reward model on one-clause praise against one-clause criticism (what it reads
  beyond length); ``clause_mix_split``: a change of the parsed reviews' mean gold split into a shift of
  the clause-count mix and better reviews at a fixed count;
* ``fresh_problems``: held-out problems disjoint from another held-out set (an out-of-sample check);
* ``stage_report``: one row of the lesson's stage-by-stage table (held-out pass@1 / pass@k, length,
  format adherence, the review gold reward, with standard errors clustered by prompt) and ``save_stage``: a stage's policy, saved with
  ``save_pretrained`` so that ``rlbook.models.load_model(folder)`` loads it.

Simplified on purpose: one small task (three-digit addition) stands for "reasoning" and one small
domain (film reviews, ``rlbook.tasks.reviews``) for "general" use; the stages are minutes, not weeks.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from rlbook._checks import check_choice, check_int, check_positive
from rlbook.evidence import cluster_t_critical, clustered_se, paired_minimum_detectable_difference
from rlbook.metrics import mean_pass_at_k
from rlbook.rollout import prompt_text, sample
from rlbook.tasks.reviews import ASPECTS, NEGATIVE, POSITIVE, UNPARSABLE, ReviewTask, gold_reward, parse_review, random_review
from rlbook.tasks.verifiers import THINK_OPEN, is_well_formed

__all__ = ["DOMAINS", "MixedReward", "clause_ladder", "clause_mix_split", "cold_start_data", "fresh_problems", "fewer_clauses_wins", "general_data", "gold_by_clauses", "gold_gain_split", "is_r1_formatted", "keep_first",
           "mixed_examples", "paired_change", "pair_kinds", "prefilled_report", "rejection_samples", "review_readout", "review_trajectory",
           "sample_replies", "save_stage", "sentiment_probe", "show_replies",
           "solver_agreement", "solver_demonstrations", "solver_disagreement_kinds", "solver_disagreements", "stage_report", "t_multiplier"]

DOMAINS = ("reasoning", "general")


def is_r1_formatted(text: str) -> bool:
    """R1's readable format: a well-formed completion whose working is in a ``<think>`` block."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return is_well_formed(text) and THINK_OPEN in text


def cold_start_data(task, n: int, *, seed: int = 0) -> list[tuple[list, str]]:
    """``n`` curated demonstrations ``(prompt, completion)`` on training prompts of ``task``: the first
    ``n`` training rows drawn with ``seed``, through ``solver_demonstrations``.

    This is not how R1 curated its cold start (arXiv:2501.12948 §2.3.1: few-shot long-CoT prompting,
    R1-Zero outputs made readable, human post-processing); keeping only samples a verifier accepts is
    R1's later rejection-sampling stage (§2.3.3).
    """
    check_int("n", n, minimum=1)
    return solver_demonstrations(task, task.dataset(n, seed=seed, split="train"))


def solver_demonstrations(task, examples, *, matching=None) -> list[tuple[list, str]]:
    """The task's own worked solution ``(prompt, completion)`` for each row of ``examples``
    (``task.solution(example, style="scratchpad")``), kept only if the strict verifier accepts it and it
    is in R1's format: a check that the solver and the verifier agree.

    ``matching``: ``(prompt, completion)`` pairs on those rows, such as ``rejection_samples``' kept
    output; then one demonstration for each pair's prompt, in the pairs' order, and none for the rows
    no pair holds. That is the solver's working on exactly the prompts the filter kept a sample for: a
    control for SFT on the kept samples that is matched on prompts (the filter drops the prompts the
    sampled policy failed, the hard ones; a control on as many fresh rows would keep them).
    """
    rows = [dict(row) for row in examples]
    if matching is not None:
        rows = _rows_for(matching, rows)
    pairs = []
    for example in rows:
        completion = task.solution(example, style="scratchpad")
        if task.reward(completion, example) == 1.0 and is_r1_formatted(completion):
            pairs.append((example["prompt"], completion))
    if not pairs:
        raise ValueError(f"task={getattr(task, 'name', task)!r} gave no demonstration its own verifier accepts")
    return pairs


def _rows_for(pairs, examples) -> list[dict]:
    """The row of ``examples`` behind each ``(prompt, completion)`` pair, in the pairs' order; a
    ``ValueError`` names a pair whose prompt no row holds."""
    by_prompt = {repr(e["prompt"]): e for e in (dict(row) for row in examples)}
    missing = [prompt for prompt, _ in pairs if repr(prompt) not in by_prompt]
    if missing:
        raise ValueError(f"pairs holds prompts that no row of examples has, e.g. {missing[0]!r}")
    return [by_prompt[repr(prompt)] for prompt, _ in pairs]


def general_data(n: int, *, seed: int = 0) -> list[tuple[list, str]]:
    """``n`` non-reasoning SFT examples: a request for a film review (train films) and a review written
    the way the review corpus writes them (``random_review``: 1–5 clauses, any sentiment) — the
    general writing that R1's stage 3 mixes in beside the reasoning samples."""
    check_int("n", n, minimum=1)
    rng = random.Random(seed)
    prompts = ReviewTask().dataset(n, seed=seed, split="train")["prompt"]
    return [(prompt, random_review(rng)) for prompt in prompts]


def keep_first(texts, example, task):
    """The first of ``texts`` that is right (``task.reward(text, example) == 1``, the strict verifier) and
    in R1's format (``is_r1_formatted``), or None: stage 3's filter for one prompt's samples."""
    for text in texts:
        if task.reward(text, example) == 1.0 and is_r1_formatted(text):
            return text
    return None


def rejection_samples(model, tokenizer, task, examples, *, n: int = 8, max_new_tokens: int = 64,
                      temperature: float = 1.0, seed: int = 0) -> tuple[list[tuple[list, str]], dict]:
    """Stage 3's rejection sampling (arXiv:2501.12948 §2.3.3): ``n`` samples for each of ``examples``
    (rows of ``task``), and for each prompt the one ``keep_first`` keeps.

    Returns the kept ``(prompt, completion)`` pairs and a dict: ``prompts``, ``samples``, ``kept``,
    ``sample_accuracy`` (the share of all samples that were right) and ``keepable``, the (P, n) 0/1
    table of the samples the filter would keep (right and in R1's format; what
    ``rlbook.viz.pipeline.rs_yield_widget`` reads).
    """
    check_int("n", n, minimum=1)
    examples = [dict(row) for row in examples]
    if not examples:
        raise ValueError("examples must hold at least one row")
    rollout = sample(model, tokenizer, [e["prompt"] for e in examples], num_samples=n,
                     max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    kept = []
    for i, example in enumerate(examples):
        chosen = keep_first(rollout.texts[i * n:(i + 1) * n], example, task)
        if chosen is not None:
            kept.append((example["prompt"], chosen))
    right = [task.reward(t, examples[i // n]) == 1.0 for i, t in enumerate(rollout.texts)]
    keepable = torch.tensor([r and is_r1_formatted(t) for r, t in zip(right, rollout.texts)]).view(len(examples), n)
    counts = {"prompts": len(examples), "samples": len(examples) * n, "kept": len(kept),
              "sample_accuracy": sum(right) / len(right), "keepable": keepable}
    return kept, counts


def mixed_examples(task, n_reasoning: int, n_general: int, *, seed: int = 0) -> list[dict]:
    """Stage 4's training prompts: ``n_reasoning`` rows of ``task`` and ``n_general`` review requests,
    shuffled, each with a ``domain`` ("reasoning" or "general") that ``MixedReward`` routes on."""
    check_int("n_reasoning", n_reasoning, minimum=0)
    check_int("n_general", n_general, minimum=0)
    if n_reasoning + n_general == 0:
        raise ValueError("n_reasoning + n_general must be at least 1")
    rows = [{**dict(row), "domain": "reasoning"} for row in task.dataset(n_reasoning, seed=seed, split="train")]
    rows += [{"prompt": row["prompt"], "question": row["question"], "domain": "general"}
             for row in ReviewTask().dataset(n_general, seed=seed, split="train")]
    random.Random(seed).shuffle(rows)
    return rows


class MixedReward:
    """R1's stage-4 reward (arXiv:2501.12948 §2.3.4): rule-based on reasoning prompts, a learned
    reward model on general ones.

    ``MixedReward(task, reward_model)(text, example)``: for ``example["domain"] == "reasoning"`` the
    task's verifier ``task.reward(text, example)``; for "general" ``reward_weight`` × the reward model's
    score of ``text`` after the example's prompt (a ``RewardModel``). It plugs into ``OnlineTrainer`` as
    its reward function; GRPO normalises each prompt's group on its own, so the two scales never meet
    in one group.
    """

    def __init__(self, task, reward_model, *, reward_weight: float = 1.0):
        if not hasattr(task, "reward"):
            raise ValueError(f"task must have a reward(text, example) method, got {type(task).__name__}")
        if not hasattr(reward_model, "score"):
            raise ValueError(f"reward_model must be a RewardModel (with .score), got {type(reward_model).__name__}")
        self.task = task
        self.reward_model = reward_model
        self.reward_weight = check_positive("reward_weight", reward_weight)

    def __call__(self, text: str, example: dict) -> float:
        domain = example.get("domain") if isinstance(example, dict) else None
        check_choice("example['domain']", domain, DOMAINS)
        if domain == "reasoning":
            return float(self.task.reward(text, example))
        return self.reward_weight * float(self.reward_model.score([example["prompt"]], [text])[0])


@torch.no_grad()
def stage_report(model, tokenizer, task, held_out, *, review_prompts=None, n_samples: int = 8, k: int = 8,
                 max_new_tokens: int = 64, review_max_new_tokens: int = 96, seed: int = 0,
                 per_problem: bool = False) -> dict:
    """One row of the stage table: how a policy does on held-out reasoning prompts and review requests.

    Reasoning (``n_samples`` samples for each row of ``held_out``): ``pass@1`` and ``pass@{k}``
    (Chen et al.'s unbiased estimator), ``length`` (mean completion tokens), ``format`` (the share in
    R1's format, ``is_r1_formatted``). General (``n_samples`` samples for each of ``review_prompts``,
    when given): ``gold preference`` (the mean gold reward of the reviews, unparsable ones scoring
    ``rlbook.tasks.reviews.UNPARSABLE``), ``reviews parsed`` (the share that are reviews at all) and
    ``gold of parsed`` (the mean gold reward of the ones that parse; NaN when none does) — the two
    parts ``gold_gain_split`` separates a change of the mean into — and ``reviews in answer format``
    (the share of review replies that are ``is_well_formed``: the arithmetic ``<answer>`` format, which
    a trainer's ``format_reward_weight`` pays on every prompt, review requests included, although
    such a reply never parses as a review). Each mean comes with its standard
    error clustered by prompt (samples of one prompt share it): ``pass@1 SE`` is the standard deviation
    of the per-problem pass rates over √(problems); ``gold SE`` is clustered over the distinct review
    prompts (repeated prompts pooled into one cluster, so clusters differ in size:
    ``rlbook.evidence.clustered_se``, the CR1 form for the sample-weighted mean; NaN with a single
    distinct prompt),
    and ``parsed SE`` for the share that parse, clustered the same way. With ``per_problem``, also
    ``per-problem pass@1``: each held-out problem's share of right samples (a list, in ``held_out``'s
    order), for a paired comparison of two stages on the same problems (``paired_change``).
    """
    check_int("n_samples", n_samples, minimum=1)
    check_int("k", k, minimum=1)
    if k > n_samples:
        raise ValueError(f"k must be at most n_samples={n_samples}, got {k}")
    was_training = model.training
    model.eval()
    rollout, _, correct = _graded_sums(model, tokenizer, task, held_out, n_samples=n_samples,
                                       max_new_tokens=max_new_tokens, seed=seed)
    report = {"pass@1": mean_pass_at_k(correct, 1), "pass@1 SE": _cluster_se(correct.float().mean(1).tolist()),
              f"pass@{k}": mean_pass_at_k(correct, k),
              "length": rollout.completion_lengths.float().mean().item(),
              "format": sum(map(is_r1_formatted, rollout.texts)) / len(rollout.texts)}
    if per_problem:
        report["per-problem pass@1"] = correct.float().mean(1).tolist()
    if review_prompts is not None:
        review_prompts = list(review_prompts)
        reviews = sample(model, tokenizer, review_prompts, num_samples=n_samples,
                         max_new_tokens=review_max_new_tokens, seed=seed + 1)
        golds = [gold_reward(t) for t in reviews.texts]
        parsed = [g for g, t in zip(golds, reviews.texts) if parse_review(t) is not None]
        report["gold preference"] = sum(golds) / len(golds)
        labels = [repr(review_prompts[i // n_samples]) for i in range(len(golds))]
        report["gold SE"] = _by_prompt_se(golds, labels)
        report["parsed SE"] = _by_prompt_se([float(parse_review(t) is not None) for t in reviews.texts], labels)
        report["reviews parsed"] = len(parsed) / len(golds)
        report["gold of parsed"] = sum(parsed) / len(parsed) if parsed else float("nan")
        report["reviews in answer format"] = sum(map(is_well_formed, reviews.texts)) / len(reviews.texts)
    model.train(was_training)
    return report


def _graded_sums(model, tokenizer, task, held_out, *, n_samples, max_new_tokens, seed, prefix=""):
    """``n_samples`` completions of each row of ``held_out`` (after ``prefix``, appended to the chat
    template's opened assistant turn, when given) and the strict verifier's verdicts: ``(rollout, texts,
    correct)``, ``texts`` holding ``prefix`` + each completion, ``correct`` a (problems, n_samples) bool table."""
    rows = [dict(row) for row in held_out]
    if not rows:
        raise ValueError("held_out must hold at least one row")
    prompts = [prompt_text(tokenizer, r["prompt"]) + prefix if prefix else r["prompt"] for r in rows]
    rollout = sample(model, tokenizer, prompts, num_samples=n_samples, max_new_tokens=max_new_tokens, seed=seed)
    texts = [prefix + t for t in rollout.texts]
    correct = torch.tensor([task.reward(t, rows[i // n_samples]) == 1.0 for i, t in enumerate(texts)])
    return rollout, texts, correct.view(len(rows), n_samples)


@torch.no_grad()
def sample_replies(model, tokenizer, task=None, examples=(), *, review_prompts=(), n_samples: int = 1,
                   max_new_tokens: int = 64, review_max_new_tokens: int = 96, seed: int = 0,
                   reward_model=None) -> list[dict]:
    """A few of a policy's completions, to read, sampled as ``stage_report`` samples them (temperature 1).

    ``n_samples`` replies to each row of ``examples`` (rows of ``task``) and to each of ``review_prompts``.
    One dict per reply: ``kind`` ("sum" or "review"), ``request`` (the user's text), ``reply``; a sum adds
    ``right`` (the strict verifier) and ``r1 format`` (``is_r1_formatted``), a review ``parses``
    (``parse_review``), ``gold`` (``gold_reward``: ``UNPARSABLE`` when it does not parse) and ``cut`` (no
    end of sequence within ``review_max_new_tokens``: the reply was cut off at the cap), and, with a
    ``reward_model`` (a ``RewardModel``), ``rm score``: its score of the reply after the request. With
    ``seed`` s the review replies are those ``stage_report(..., seed=s)`` scores (both sample them with s + 1).
    """
    check_int("n_samples", n_samples, minimum=1)
    rows = [dict(row) for row in examples]
    if rows and task is None:
        raise ValueError("examples need their task (to verify the sums)")
    review_prompts = list(review_prompts)
    was_training = model.training
    model.eval()
    out = []
    if rows:
        rollout = sample(model, tokenizer, [r["prompt"] for r in rows], num_samples=n_samples,
                         max_new_tokens=max_new_tokens, seed=seed)
        for i, text in enumerate(rollout.texts):
            row = rows[i // n_samples]
            out.append({"kind": "sum", "request": _request(row["prompt"]), "reply": text,
                        "right": task.reward(text, row) == 1.0, "r1 format": is_r1_formatted(text)})
    if review_prompts:
        rollout = sample(model, tokenizer, review_prompts, num_samples=n_samples, max_new_tokens=review_max_new_tokens,
                         seed=seed + 1)
        for i, text in enumerate(rollout.texts):
            out.append({"kind": "review", "request": _request(review_prompts[i // n_samples]), "reply": text,
                        "parses": parse_review(text) is not None, "gold": gold_reward(text),
                        "cut": bool(rollout.truncated[i])})
        if reward_model is not None:
            scores = reward_model.score([p for p in review_prompts for _ in range(n_samples)], rollout.texts).tolist()
            for row, score in zip(out[len(out) - len(scores):], scores):
                row["rm score"] = float(score)
    model.train(was_training)
    return out


def review_readout(replies) -> dict:
    """What a policy's review replies (``sample_replies``' review rows) are like, beyond their mean gold reward.

    ``replies``: the share that ``parsed`` as reviews; ``gold`` (mean, unparsable = ``UNPARSABLE``), its
    ``gold SE`` clustered by request (as ``stage_report``'s: NaN with one distinct request) and ``gold of parsed``; ``clauses``, the share of parsed reviews with 1, 2, … clauses, and ``mean clauses``
    (the gold reward pays up to ``MAX_CLAUSES`` distinct positive ones, ``rlbook.tasks.reviews``);
    ``distinct``, the mean over requests of (distinct replies / replies), a collapse onto one reply
    giving 1 / replies. With ``rm score`` in the rows (``sample_replies(reward_model=...)``): ``rm score``
    (mean), ``rm of parsed`` / ``rm of unparsed`` and ``unparsed over parsed``, the chance that the reward
    model scores a random reply that is no review above a random review (0.5: it cannot tell them apart;
    NaN when either kind is missing). With ``cut`` in the rows: ``cut`` (the share of replies cut off at
    the token cap), ``garbled`` (the share that neither parse nor were cut off: 1 − parsed − cut, malformed
    or garbled endings) and ``cut of unparsed`` (the share of the replies that do not parse that were cut off);
    with both, ``rm of uncut unparsed``: the reward model's mean score of the replies that do not parse and
    were not cut off (malformed or garbled endings, not long reviews cut short; NaN when there is none).
    """
    rows = [r for r in replies if r.get("kind", "review") == "review"]
    if not rows:
        raise ValueError("replies must hold at least one review reply (sample_replies' rows with kind 'review')")
    parsed = [r for r in rows if r["parses"]]
    counts = [len(parse_review(r["reply"])) for r in parsed]
    by_request = {}
    for r in rows:
        by_request.setdefault(r["request"], []).append(r["reply"])
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    out = {"replies": len(rows), "parsed": len(parsed) / len(rows), "gold": mean([r["gold"] for r in rows]),
           "gold SE": _by_prompt_se([r["gold"] for r in rows], [r["request"] for r in rows]),
           "gold of parsed": mean([r["gold"] for r in parsed]),
           "clauses": {c: counts.count(c) / len(counts) for c in sorted(set(counts))},
           "mean clauses": mean(counts),
           "distinct": mean([len(set(v)) / len(v) for v in by_request.values()])}
    if all("cut" in r for r in rows):
        out["cut"] = mean([float(r["cut"]) for r in rows])
        out["garbled"] = mean([float(not r["parses"] and not r["cut"]) for r in rows])
        out["cut of unparsed"] = mean([float(r["cut"]) for r in rows if not r["parses"]])
    if all("rm score" in r for r in rows):
        good, bad = [r["rm score"] for r in parsed], [r["rm score"] for r in rows if not r["parses"]]
        out.update({"rm score": mean([r["rm score"] for r in rows]), "rm of parsed": mean(good), "rm of unparsed": mean(bad)})
        wins = [(b > g) + 0.5 * (b == g) for b in bad for g in good]
        out["unparsed over parsed"] = mean(wins)
        if "cut" in out:
            out["rm of uncut unparsed"] = mean([r["rm score"] for r in rows if not r["parses"] and not r["cut"]])
    return out


def review_trajectory(readouts: dict):
    """Stage 4's reviews step by step, one row per step, for ``rlbook.viz.pipeline.stage4_widget``.

    ``readouts``: {step: ``review_readout`` of the policy after that many updates}, every one sampled on the
    same requests with the same sampling seed, so that the steps differ only by the policy. Returns a
    DataFrame indexed by step with the readouts' entries, ``clauses`` kept as each step's {clause count:
    share of its parsed reviews}.
    """
    import pandas as pd

    if not readouts:
        raise ValueError("readouts must hold at least one step's review_readout")
    rows = {}
    for step in sorted(readouts):
        if not isinstance(step, (int, np.integer)) or isinstance(step, bool) or step < 0:
            raise ValueError(f"steps must be non-negative ints, got {step!r}")
        readout = readouts[step]
        if "parsed" not in readout or "clauses" not in readout:
            raise ValueError(f"readouts[{step}] must be a review_readout (with 'parsed' and 'clauses')")
        rows[int(step)] = {**readout, "clauses": dict(readout["clauses"])}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("step")


def _scored(reward_model, prompts, texts) -> dict:
    """Probe reviews ``texts`` (two or more), each after one of ``prompts`` in turn: their mean length
    ``chars``, mean ``gold`` reward, and the reward model's mean ``rm score`` with its ``rm SE`` (sd / √n:
    each review drawn independently)."""
    n = len(texts)
    scores = reward_model.score([prompts[i % len(prompts)] for i in range(n)], texts).tolist()
    mu = sum(scores) / n
    sd = (sum((x - mu) ** 2 for x in scores) / (n - 1)) ** 0.5
    return {"chars": sum(map(len, texts)) / n, "gold": sum(map(gold_reward, texts)) / n, "rm score": mu, "rm SE": sd / n ** 0.5}


def clause_ladder(reward_model, prompts, *, clauses=(1, 2, 3, 4, 5), per: int = 16, seed: int = 0) -> list[dict]:
    """The reward model's score of reviews built to be as good as the gold reward allows at each length.

    For each count c in ``clauses``, ``per`` reviews of c clauses, every aspect and every adjective
    distinct and every adjective positive (``rlbook.tasks.reviews``: ASPECTS, POSITIVE), each after one
    of ``prompts`` in turn. Their gold reward is c up to ``MAX_CLAUSES`` and then flat (each clause past
    it costs ``LENGTH_PENALTY`` = 1 and adds 1): the gold optimum is reached at ``MAX_CLAUSES`` clauses.
    One dict per count: ``clauses``, ``chars`` (mean length: the tokenizer is per character, so this is
    the reply's length in tokens, end of sequence aside), ``gold`` (mean) and ``rm score`` (mean) with
    ``rm SE`` (sd / √per: each review drawn independently). Shows whether a reward model pays length
    the way the gold reward does, a probe of a learned reward's length bias.
    """
    check_int("per", per, minimum=2)
    counts = [check_int("clauses", c, minimum=1) for c in clauses]
    if max(counts) > min(len(ASPECTS), len(POSITIVE)):
        raise ValueError(f"clauses must be at most {min(len(ASPECTS), len(POSITIVE))} (distinct aspects and positive "
                         f"adjectives), got {max(counts)}")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts must hold at least one review request")
    rng = random.Random(seed)
    rows = []
    for c in counts:
        texts = [", ".join(f"the {a} was {j}" for a, j in zip(rng.sample(ASPECTS, c), rng.sample(POSITIVE, c))) + "."
                 for _ in range(per)]
        rows.append({"clauses": c, **_scored(reward_model, prompts, texts)})
    return rows


def sentiment_probe(reward_model, prompts, *, per: int = 16, seed: int = 0) -> list[dict]:
    """The reward model's score of one-clause reviews that praise against one-clause reviews that criticise.

    ``per`` reviews "the ⟨aspect⟩ was ⟨adjective⟩." with a random aspect (``ASPECTS``) and a random
    POSITIVE adjective, and ``per`` with a NEGATIVE one (``rlbook.tasks.reviews``), each after one of
    ``prompts`` in turn. All have one clause and nearly the same number of characters, so a length
    heuristic ("fewer clauses wins") cannot tell them apart, while the gold reward gives +1 and −1. One
    dict per sentiment ("positive", "negative"): ``sentiment``, ``chars`` (mean length), ``gold`` (mean),
    ``rm score`` (mean) and ``rm SE`` (sd / √per). A reward model that reads sentiment scores praise higher:
    the probe ``clause_ladder`` (which holds every clause positive) cannot make.
    """
    check_int("per", per, minimum=2)
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts must hold at least one review request")
    rng = random.Random(seed)
    rows = []
    for name, adjectives in (("positive", POSITIVE), ("negative", NEGATIVE)):
        texts = [f"the {rng.choice(ASPECTS)} was {rng.choice(adjectives)}." for _ in range(per)]
        rows.append({"sentiment": name, **_scored(reward_model, prompts, texts)})
    return rows


def clause_mix_split(before_replies, after_replies) -> dict:
    """Split the change of the parsed reviews' mean gold between two policies into length and content.

    ``before_replies``, ``after_replies``: review texts (or ``sample_replies``' rows); the ones that parse
    are grouped by their number of clauses c, with shares m_c and mean gold g_c. The parsed mean is
    Σ_c m_c·g_c, and its change splits exactly (direct standardisation: the later mix at the earlier
    quality, Kitagawa 1955, "Components of a difference between two rates", JASA 50(272)):

        Σ m₁g₁ − Σ m₀g₀ = [Σ m₁g₀ − Σ m₀g₀]  +  [Σ m₁(g₁ − g₀)]
                            ``length``             ``content``

    ``length``: what the shift of the clause-count mix alone would give at the earlier reviews' gold per
    count; ``content``: better (or worse) reviews at the same count, weighted by the later mix. This order
    needs every count of the later replies among the earlier ones (a ValueError names any that is missing).
    Returns ``before``, ``after`` (the two parsed means), ``reweighted`` (Σ m₁g₀), ``length`` and ``content``.
    """
    def by_count(replies, name):
        texts = [r["reply"] if isinstance(r, dict) else r for r in replies]
        rows = {row["clauses"]: row for row in gold_by_clauses(texts)} if any(
            parse_review(t) is not None for t in texts) else {}
        if not rows:
            raise ValueError(f"{name} must hold at least one reply that parses as a review")
        total = sum(row["n"] for row in rows.values())
        return {c: row["n"] / total for c, row in rows.items()}, {c: row["gold"] for c, row in rows.items()}

    m0, g0 = by_count(before_replies, "before_replies")
    m1, g1 = by_count(after_replies, "after_replies")
    missing = sorted(set(m1) - set(m0))
    if missing:
        raise ValueError(f"after_replies has reviews of {missing} clauses, which before_replies lacks: the earlier "
                         "gold at those counts is unknown")
    before = sum(m0[c] * g0[c] for c in m0)
    after = sum(m1[c] * g1[c] for c in m1)
    reweighted = sum(m1[c] * g0[c] for c in m1)
    return {"before": before, "after": after, "reweighted": reweighted, "length": reweighted - before,
            "content": after - reweighted}


def fresh_problems(task, n: int, *, avoid, seed: int, split: str = "test"):
    """``n`` problems of ``task``'s ``split`` drawn with ``seed``, none of whose questions is in ``avoid``
    (a dataset or rows with ``question``): a second held-out set disjoint from the first, for a check
    that must not be read on the problems a lesson's settings were tuned on."""
    check_int("n", n, minimum=1)
    taken = {row["question"] for row in avoid}
    size = n
    while True:
        pool = task.dataset(size + len(taken), seed=seed, split=split)
        keep = [i for i, q in enumerate(pool["question"]) if q not in taken]
        if len(keep) >= n:
            return pool.select(keep[:n])
        if size > 64 * (n + len(taken)):
            raise ValueError(f"{split} split of the task has too few problems outside avoid for n = {n}")
        size *= 2


def fewer_clauses_wins(pairs) -> list[float]:
    """A length heuristic for preference pairs of two reviews: for each pair (a dataset or list of rows
    with ``chosen`` and ``rejected``), 1.0 when the chosen review has fewer clauses than the rejected
    one, 0.0 when it has more, 0.5 (a coin) on a tie in clause count or when either completion does not
    parse as a review. Its mean over pairs ordered by the gold reward is the accuracy of "the shorter
    review wins": the comparator a reward model must beat to show that it reads more than length
    (here the gold labeller's repeat and length penalties, ``rlbook.tasks.reviews.gold_reward``, make
    the corpus's longer reviews worse on average)."""
    rows = _pair_rows(pairs)
    out = []
    for row in rows:
        a, b = parse_review(row["chosen"]), parse_review(row["rejected"])
        out.append(0.5 if a is None or b is None or len(a) == len(b) else float(len(a) < len(b)))
    return out


def gold_by_clauses(texts) -> list[dict]:
    """The gold reward of the replies in ``texts`` that parse as reviews, by their number of clauses:
    one dict per count present (ascending) with ``clauses``, ``n``, ``gold`` (mean) and ``gold SE``
    (sd / √n; NaN for a single reply). Read beside ``clause_ladder``: what a reward model trained on
    these replies could learn about length — if gold falls with the clause count in its training data
    (repeats and clauses past ``MAX_CLAUSES`` cost, ``rlbook.tasks.reviews.gold_reward``), the clause
    count is a proxy for the penalties, whatever the best reviews of each length would score."""
    groups: dict[int, list[float]] = {}
    for text in texts:
        clauses = parse_review(text)
        if clauses is not None:
            groups.setdefault(len(clauses), []).append(gold_reward(text))
    if not groups:
        raise ValueError("texts must hold at least one reply that parses as a review")
    rows = []
    for c in sorted(groups):
        xs = groups[c]
        mu = sum(xs) / len(xs)
        se = (sum((x - mu) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) ** 0.5 if len(xs) > 1 else float("nan")
        rows.append({"clauses": c, "n": len(xs), "gold": mu, "gold SE": se})
    return rows


def paired_change(before, after) -> dict:
    """The change of held-out pass@1 between two stages evaluated on the same problems, paired by problem.

    ``before``, ``after``: the per-problem pass rates (``stage_report(..., per_problem=True)``'s
    ``per-problem pass@1``), in the same order. Returns ``change`` (mean of after − before), ``se`` (sd of
    the per-problem differences / √problems: the problems' shared difficulty cancels, which treating the
    two means as independent does not), ``t`` (change / se) and ``mdd``, the smallest true change a paired
    two-sided 5 % t-test detects with 80 % power (``rlbook.evidence.paired_minimum_detectable_difference``,
    with problems as the pairs).
    """
    a, b = [float(x) for x in before], [float(x) for x in after]
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"before and after must hold the same number (≥ 2) of per-problem rates, got {len(a)} and {len(b)}")
    d = [y - x for x, y in zip(a, b)]
    change = sum(d) / len(d)
    se = _cluster_se(d)  # each problem its own cluster: sd of the differences / √problems
    return {"change": change, "se": se, "t": change / se if se > 0 else float("nan"),
            "mdd": paired_minimum_detectable_difference(d)}


@torch.no_grad()
def prefilled_report(model, tokenizer, task, held_out, *, prefix: str = THINK_OPEN, n_samples: int = 8,
                     max_new_tokens: int = 64, seed: int = 0) -> dict:
    """Held-out pass@1 when every answer is made to start with ``prefix`` (default ``<think>``: the
    scratchpad on every problem, whether or not the model would have chosen it).

    The prompt is the chat template's text with ``prefix`` appended after the opened assistant turn; the
    strict verifier reads ``prefix`` + the sampled continuation. Returns ``pass@1``, ``pass@1 SE``
    (clustered by problem, as ``stage_report``), ``per-problem pass@1`` and ``format`` (the share in R1's format).
    """
    check_int("n_samples", n_samples, minimum=1)
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"prefix must be a non-empty string, got {prefix!r}")
    was_training = model.training
    model.eval()
    _, texts, correct = _graded_sums(model, tokenizer, task, held_out, n_samples=n_samples,
                                     max_new_tokens=max_new_tokens, seed=seed, prefix=prefix)
    rates = correct.float().mean(1).tolist()
    model.train(was_training)
    return {"pass@1": mean_pass_at_k(correct, 1), "pass@1 SE": _cluster_se(rates), "per-problem pass@1": rates,
            "format": sum(map(is_r1_formatted, texts)) / len(texts)}


def show_replies(replies, *, width: int = 110) -> str:
    """``sample_replies``' rows as lines to print: the request, the reply (cut to ``width`` characters,
    newlines shown as ⏎) and its score."""
    lines = []
    for r in replies:
        reply = r["reply"].replace("\n", "⏎")
        reply = reply if len(reply) <= width else reply[:width - 1] + "…"
        score = (f"{'right' if r['right'] else 'wrong'}, {'R1 format' if r['r1 format'] else 'not R1 format'}"
                 if r["kind"] == "sum" else (f"gold {r['gold']:+.2f}" if r["parses"] else "does not parse: gold −3"))
        lines.append(f"  {r['request']!r:<22} → {reply!r}  [{score}]")
    return "\n".join(lines)


def _request(prompt) -> str:
    """The user's text of a prompt (a conversation's last message, or the string itself)."""
    return prompt[-1]["content"] if isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[-1], dict) else str(prompt)


def t_multiplier(clusters: int, *, level: float = 0.975) -> float:
    """Student's t quantile ``level`` with ``clusters`` − 1 degrees of freedom: the multiplier of a standard
    error clustered over few clusters (a cluster-robust SE has about clusters − 1 degrees of freedom, e.g.
    Cameron & Miller 2015, "A Practitioner's Guide to Cluster-Robust Inference", §VI). With 5 clusters it is
    2.78, not the normal's 1.96, so "beyond 2 SE" is too lax there."""
    check_int("clusters", clusters, minimum=2)
    if not 0.5 < level < 1:
        raise ValueError(f"level must be in (0.5, 1), got {level!r}")
    return cluster_t_critical(range(clusters), level=2 * level - 1)  # the one-sided quantile as a two-sided level


def solver_agreement(pairs, examples, task) -> float:
    """The share of kept ``(prompt, completion)`` pairs (``rejection_samples``' output on ``examples``)
    whose completion is exactly the task's own worked solution (``task.solution(example,
    style="scratchpad")``). The filter checks only the final answer and the format, so a kept sample
    can carry working that differs from the solver's — a wrong step, or only a different layout
    (``solver_disagreements`` lists them)."""
    if not pairs:
        raise ValueError("pairs must hold at least one kept sample")
    return 1 - len(solver_disagreements(pairs, examples, task)) / len(pairs)


def solver_disagreements(pairs, examples, task) -> list[tuple[str, str]]:
    """``(completion, solver's)`` for each kept ``(prompt, completion)`` pair whose completion is not
    exactly the task's own worked solution, in the pairs' order (see ``solver_agreement``)."""
    rows = _rows_for(pairs, examples)
    solutions = [task.solution(row, style="scratchpad") for row in rows]
    return [(completion, solution) for (_, completion), solution in zip(pairs, solutions) if completion != solution]


def solver_disagreement_kinds(pairs, examples, task) -> dict[str, int]:
    """Sort the kept samples whose working differs from the solver's (``solver_disagreements``) by how.

    ``layout``: the same text once whitespace is removed. ``false step``: some line of the scratchpad is an
    addition ``x+y(+c)=z`` whose sum is not ``z`` (the filter checks only the final answer, so a sample with
    a false step before a right answer is kept). ``other working``: every such line is true arithmetic, but
    the lines are not the solver's (a wrong digit or carry, a missing or extra line). Returns the three
    counts; they add up to ``len(solver_disagreements(pairs, examples, task))``."""
    import re

    def false_step(text: str) -> bool:
        work = text.split("</think>")[0].split("<think>")[-1]
        for line in work.splitlines():
            m = re.fullmatch(r"\s*(\d+(?:\s*\+\s*\d+)+)\s*=\s*(\d+)\s*", line)
            if m and sum(int(x) for x in m.group(1).split("+")) != int(m.group(2)):
                return True
        return False

    kinds = {"layout": 0, "false step": 0, "other working": 0}
    for completion, solution in solver_disagreements(pairs, examples, task):
        if "".join(completion.split()) == "".join(solution.split()):
            kinds["layout"] += 1
        elif false_step(completion):
            kinds["false step"] += 1
        else:
            kinds["other working"] += 1
    return kinds


def _cluster_se(cluster_means) -> float:
    """The standard error of a mean over equal-sized clusters: sd of the cluster means / √(clusters)."""
    m = len(cluster_means)
    if m < 2:
        return float("nan")
    mu = sum(cluster_means) / m
    return (sum((x - mu) ** 2 for x in cluster_means) / (m - 1) / m) ** 0.5


def _by_prompt_se(values, labels) -> float:
    """``rlbook.evidence.clustered_se`` of the sample-weighted mean of ``values`` clustered by ``labels``
    (clusters of any sizes: the CR1 ratio form), or NaN with fewer than two distinct labels."""
    return clustered_se(values, labels, one_cluster_nan=True)


def gold_gain_split(before: dict, after: dict) -> dict:
    """Split the change of the mean gold reward between two ``stage_report`` rows into its two sources.

    A reply that does not parse as a review scores ``UNPARSABLE`` (−3), so the mean is
    G = U + p·(q − U), with p the share that parse and q their mean gold reward. Its change splits
    exactly (the midpoint, or Shapley, split of a product):
    ΔG = Δp·(q̄ − U) **+** p̄·Δq, with p̄, q̄ the means of the two rows. The first term, ``parsing``, is
    what more replies being reviews at all adds (format); the second, ``content``, is what better
    reviews among those that parse add. When no reply parsed before, q has no value there, and the
    whole change is parsing (q̄ is taken as the later q). Returns ``total``, ``parsing``, ``content``.
    """
    keys = ("gold preference", "reviews parsed", "gold of parsed")
    for name, row in (("before", before), ("after", after)):
        missing = [k for k in keys if k not in row]
        if missing:
            raise ValueError(f"{name} must be a stage_report row with review columns; missing {missing}")
    p0, p1 = float(before["reviews parsed"]), float(after["reviews parsed"])
    q0, q1 = float(before["gold of parsed"]), float(after["gold of parsed"])
    if p0 == 0:
        q0 = q1
    if p1 == 0:
        q1 = q0
    if p0 == 0 and p1 == 0:
        return {"total": 0.0, "parsing": 0.0, "content": 0.0}
    parsing = (p1 - p0) * ((q0 + q1) / 2 - UNPARSABLE)
    content = (p0 + p1) / 2 * (q1 - q0)
    return {"total": parsing + content, "parsing": parsing, "content": content}


def _pair_rows(pairs) -> list[dict]:
    """Preference pairs (a ``datasets.Dataset`` or a list of rows) as a list of dicts with ``chosen`` and ``rejected``."""
    return [dict(row) for row in pairs] if not hasattr(pairs, "column_names") else [
        {"chosen": c, "rejected": r} for c, r in zip(pairs["chosen"], pairs["rejected"])]


def pair_kinds(pairs) -> list[str]:
    """For each preference pair (a dataset or list of rows with ``chosen`` and ``rejected``): "both
    reviews" when both completions parse as reviews (the pair differs in what the review says), "one
    review" when only one does (a parse check alone orders it), "no review" when neither does."""
    rows = _pair_rows(pairs)
    names = {2: "both reviews", 1: "one review", 0: "no review"}
    return [names[(parse_review(row["chosen"]) is not None) + (parse_review(row["rejected"]) is not None)] for row in rows]


def save_stage(model, tokenizer, folder) -> Path:
    """Save a stage's policy and tokenizer with ``save_pretrained`` into ``folder`` (created), a plain
    checkpoint that ``rlbook.models.load_model(folder)`` loads (a ``peft`` policy must be merged first,
    ``model.merge_and_unload()``, so that the folder holds whole weights)."""
    if hasattr(model, "merge_and_unload"):
        raise ValueError("model is a peft (LoRA) model: merge it first (model.merge_and_unload()) so that the "
                         "saved folder holds whole weights")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder

