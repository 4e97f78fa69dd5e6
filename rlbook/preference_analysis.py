"""What the preference losses do to one pair, and what a preference-trained policy learned.

Lessons 06 and 07 read these numbers; ``rlbook.viz.preference`` draws them.

- ``pair_losses_vs_margin``: every loss of ``rlbook.losses`` as a function of one pair's margin, so
  the lesson can find where each loss stops pulling (only IPO's does, at h = 1/(2τ)).
- ``pair_sequence_logps``: log π(y|x) of the chosen and rejected response of every pair, scored as
  ``PreferenceTrainer`` scores them, so per-pair margins of any two models can be compared.
- ``kl_optimum_log_ratio``: what the exact KL-regularised optimum does to a response's log-probability,
  log π*/π_ref = (r − β log Z)/β, with β log Z estimated from the reference's own samples.
- ``ipo_win_rate_targets``: IPO's optimal margin of each pair when one score serves every pair,
  (q(y_w) − q(y_l))/τ with q a response's gold win rate (Azar et al. 2023, §5.1).
- ``parse_rule_accuracy`` and ``gap_matched_accuracy``: the bars a preference accuracy is read against
  (the rule "prefer the parsable review"; another group of pairs with the same gold gaps).
- ``margin_slope`` and ``preference_margin_run``: the slope of a margin curve with its standard
  error, and one training run of DPO, IPO or KTO reduced to the margins lesson 07 reads (the
  batch margins, KTO's reference point, every pair's margin at the end), one seed per call so
  ``rlbook.parallel.run_parallel`` can run seeds side by side.
- ``review_samples_summary``: the gold reward of sampled reviews split into what it is made of
  (the share the parser rejects, the gold reward and the clause count of the parsed ones).
- ``ranked_correctly`` and ``paired_accuracy_gain``: which pairs a scorer ranks right, and the gain of
  one ranker over another on the same pairs with its paired standard error.
- ``sampled_kl``: KL(π ‖ π_ref) of a policy measured on its own samples, with its standard error
  clustered by prompt.
- ``clause_credit``, ``clause_credit_table`` and ``stop_credit_table``: a review's implicit reward
  β log π/π_ref split among its clauses and its stop, set beside the gold reward's rules
  (``rlbook.tasks.reviews``); ``credit_contrasts`` reads the rules' contrasts off it in sentiment steps,
  and ``bootstrap_over_texts`` gives them standard errors.
- ``optimum_by_reward_scale`` and ``optimum_reversal_scale``: how the exact optimum's verdict on the
  chosen responses changes with the reward's scale, which preference labels do not fix.
- ``sample_kl_objective``: the KL-regularised objective J = E[r] − β KL(π ‖ π_ref) of a trained policy,
  estimated from its own samples, to set beside the optimum's value β log Z.
- ``paired_accuracy_gap`` and ``repeat_rule_gap``: a ranker's accuracy against a rule's on the same
  pairs, and on the pairs the repeat rule decides against gap-matched others.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch

from rlbook import losses
from rlbook._checks import check_choice, check_int, check_positive
from rlbook.evidence import clustered_se
from rlbook.rollout import completion_logprobs, rollout_logprobs, sample
from rlbook.tasks import reviews
from rlbook.tasks.verifiers import completion_text
from rlbook.trainers import PreferenceTrainer
from rlbook.trainers.data import collate_prompt_completions, encode_prompt_completions

__all__ = ["CLAUSE_KINDS", "ranked_correctly", "paired_accuracy_gain", "sampled_kl", "clause_credit", "clause_credit_table", "margin_slope", "pair_losses_vs_margin",
           "pair_sequence_logps", "preference_margin_run", "review_samples_summary", "sequence_logps",
           "kl_optimum_log_ratio", "parse_rule_accuracy", "gap_matched_accuracy",
           "clause_credit_by_position", "stop_credit_table", "credit_contrasts", "bootstrap_over_texts",
           "optimum_by_reward_scale", "optimum_reversal_scale", "sample_kl_objective", "kl_to_optimum", "paired_accuracy_gap",
           "repeat_rule_gap"]

CLAUSE_KINDS = ("first 3, new", "repeat", "past the limit")


def pair_losses_vs_margin(margins, *, beta: float = 0.1, tau: float = 0.1, gamma: float = 0.5,
                          simpo_beta: float = 2.0) -> dict[str, np.ndarray]:
    """Each loss of one pair as a function of its margin, through ``rlbook.losses``.

    The margin is the quantity each loss is built on (the x-axis of lesson 07's figure):
    DPO and IPO the log-ratio margin h; KTO the same h split evenly, r_w = h/2 = −r_l, with z0 = 0,
    summing the desirable and undesirable terms; SimPO the length-averaged log-prob margin (a pair
    of one-token responses); ORPO the log odds ratio (its NLL term does not depend on the margin,
    so only λ's term −log σ(h) is given, with λ = 1).
    """
    h = torch.as_tensor(margins, dtype=torch.float64)
    if h.dim() != 1 or h.numel() == 0:
        raise ValueError(f"margins must be a non-empty 1-D array, got shape {tuple(h.shape)}")
    zeros, ones = torch.zeros_like(h), torch.ones_like(h)
    kto_rewards = torch.cat([h / 2, -h / 2])
    kto = losses.kto_loss(kto_rewards, torch.zeros_like(kto_rewards), torch.cat([ones, zeros]), torch.tensor(0.0),
                          beta)
    return {
        "dpo": losses.dpo_loss(h, zeros, zeros, zeros, beta).numpy(),
        "ipo": losses.ipo_loss(h, zeros, zeros, zeros, tau).numpy(),
        "kto": (kto[: len(h)] + kto[len(h):]).numpy(),
        "simpo": losses.simpo_loss(h, zeros, ones, ones, simpo_beta, gamma).numpy(),
        "orpo": -torch.nn.functional.logsigmoid(h).numpy(),
    }


def pair_sequence_logps(model, tokenizer, pairs, *, batch_size: int = 64,
                        per_token: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(y_w|x) and log π(y_l|x), each (N,), for every pair of ``pairs`` (prompt, chosen, rejected).

    Scored as ``PreferenceTrainer`` scores them (the completion followed by end-of-sequence, the
    token log-probs summed over the completion), so per-pair log-ratio margins of any two models are
    ``(chosen − ref_chosen) − (rejected − ref_rejected)``. The trainer's ``evaluate`` reports only
    batch means; this gives the whole distribution. With ``per_token`` each sum is divided by the
    number of tokens scored: the length-averaged log-prob that SimPO and ORPO rank by.
    """
    prompts = list(pairs["prompt"])
    return (sequence_logps(model, tokenizer, prompts, list(pairs["chosen"]), batch_size=batch_size,
                           per_token=per_token),
            sequence_logps(model, tokenizer, prompts, list(pairs["rejected"]), batch_size=batch_size,
                           per_token=per_token))


def ranked_correctly(chosen_scores, rejected_scores) -> np.ndarray:
    """Per pair, True where a scorer ranks the chosen response strictly above the rejected one.

    The scores are whatever a loss ranks by: the log-ratio log π/π_ref for DPO, IPO and KTO (any
    positive scale β or τ leaves the order alone), the length-averaged log-prob for SimPO and ORPO
    (``pair_sequence_logps(..., per_token=True)``). A tie counts as wrong, as in TRL's
    ``rewards/accuracies``; an untrained log-ratio is 0 on every pair, so it ties everywhere.
    """
    chosen = np.asarray(chosen_scores, dtype=np.float64).reshape(-1)
    rejected = np.asarray(rejected_scores, dtype=np.float64).reshape(-1)
    if chosen.shape != rejected.shape or chosen.size == 0:
        raise ValueError(f"chosen_scores and rejected_scores must be non-empty and of one length, got "
                         f"{chosen.size} and {rejected.size}")
    return chosen > rejected


def paired_accuracy_gain(correct, baseline) -> tuple[float, float]:
    """``(gain, se)``: mean(correct) − mean(baseline) over the same pairs, and its paired standard error.

    ``correct``: one 0/1 per pair (``ranked_correctly``); ``baseline``: another ranker's score on the same
    pairs, 0/1 or ½ for a coin (``parse_rule_accuracy``). The differences d_i are paired, so
    se = sd(d)/√n — the normal form of McNemar's test (McNemar 1947), which uses only the pairs the
    two rankers disagree on; a baseline measured on the same pairs is not treated as a fixed number.
    """
    return paired_accuracy_gap(correct, baseline)  # one computation: the gap without clusters


def sampled_kl(policy, reference, tokenizer, prompts, *, num_samples: int = 2, max_new_tokens: int = 96,
               seed: int = 3) -> dict:
    """KL(π ‖ π_ref) of ``policy`` measured on its own samples, and the samples' review summary.

    Draws ``num_samples`` completions per prompt from π (temperature 1, ``rlbook.rollout.sample``), scores
    them under ``reference`` and takes the sequence log-ratio Σ_t log π(y_t|x, y_<t) − log π_ref(y_t|x, y_<t):
    its mean over y ~ π is KL(π ‖ π_ref) of the completion distribution (the k1 estimator, unbiased;
    Schulman 2020, "Approximating KL divergence"), here of completions cut at ``max_new_tokens``. This is
    the quantity the KL-regularised objective (and Azar et al.'s ΨPO, arXiv:2310.12036, §4) charges τ
    per nat for. Returns ``kl``, ``kl s.e.`` (clustered by prompt: a prompt's samples share it) and
    ``review_samples_summary``'s numbers of the same samples.
    """
    rollout = sample(policy, tokenizer, list(prompts), num_samples=num_samples, max_new_tokens=max_new_tokens,
                     seed=seed)
    # the KL term of the regularised objective with no reward: one computation of the sequence k1
    kl = sample_kl_objective(policy, reference, rollout, np.zeros(len(rollout)), beta=1.0)
    lengths = rollout.completion_mask.float().sum(1).numpy()
    return {"kl": kl["kl"], "kl s.e.": kl["kl_se"], **review_samples_summary(rollout.texts, lengths)}


def margin_slope(values, start: int = 0, stop: int | None = None, *, lags: int = 0) -> tuple[float, float]:
    """Least-squares slope of ``values[start:stop]`` against the step index, and its standard error.

    The ordinary least-squares line y = a + b·t through the points (t, y_t). With ``lags`` = 0 the
    standard error is the usual one, sqrt(Σ residual² / (n − 2) / Σ (t − t̄)²), which treats the
    points' deviations from the line as independent (each batch margin is a fresh batch of pairs, but
    the weights drift slowly, so neighbouring deviations are correlated and this s.e. is optimistic).
    With ``lags`` = L > 0 it is Newey and West's (1987, Econometrica 55(3), eq. 2) autocorrelation-robust
    s.e.: Var(b) = [Σ_t u_t² + 2 Σ_{l=1..L} (1 − l/(L + 1)) Σ_t u_t u_{t−l}] / (Σ (t − t̄)²)², u_t = (t − t̄) e_t,
    e_t the residuals (Bartlett weights; a rule of thumb is L ≈ 4 (n/100)^(2/9)).
    Returns (slope per step, its s.e.).
    """
    lags = check_int("lags", lags, minimum=0)
    y = np.asarray(values, dtype=float)[start:stop]
    if y.ndim != 1 or len(y) < 3 or not np.isfinite(y).all():
        raise ValueError(f"margin_slope needs at least 3 finite values in [start, stop), got {len(y)}")
    if lags >= len(y):
        raise ValueError(f"lags must be below the number of values ({len(y)}), got {lags}")
    t = np.arange(len(y), dtype=float)
    t_centred = t - t.mean()
    sxx = (t_centred ** 2).sum()
    slope = float((t_centred * (y - y.mean())).sum() / sxx)
    residuals = y - y.mean() - slope * t_centred
    if lags == 0:
        return slope, float(np.sqrt((residuals ** 2).sum() / (len(y) - 2) / sxx))
    u = t_centred * residuals
    variance = (u ** 2).sum() + 2 * sum((1 - lag / (lags + 1)) * (u[lag:] * u[:-lag]).sum()
                                        for lag in range(1, lags + 1))
    return slope, float(np.sqrt(max(variance, 0.0)) / sxx)


def preference_margin_run(model, tokenizer, pairs, loss: str, seed: int, *, steps: int, lr: float = 2e-4,
                          batch_size: int = 16, reference_logps=None, kl_prompts=None, held_out_pairs=None,
                          held_out_reference_logps=None, **knobs) -> dict:
    """Train a copy of ``model`` with ``PreferenceTrainer(loss=...)`` and return its margins.

    ``loss`` is one of the reference-based losses whose log-ratio margin h is the trained quantity:
    "dpo" or "kto" (``beta`` in ``knobs``) or "ipo" (``tau``). The run is the trainer's, with
    ``steps``, ``lr``, ``batch_size`` and the batch order of ``seed``; ``model`` is not changed.
    ``reference_logps``: (chosen, rejected) log-probs of ``model`` on ``pairs``
    (``pair_sequence_logps``), computed here when None. Returns numpy arrays:

    - ``"h"``: (steps,) the mean log-ratio margin h of each training batch (the logged
      ``rewards/margins``, β h or τ h, divided by β or τ);
    - ``"kl"``: (steps,) KTO's reference point z0 of each batch (zeros for DPO and IPO);
    - ``"pair_h"``: (N,) every pair's h at the end of training;
    - ``"chosen"``, ``"rejected"``: (N,) each pair's change of log π(y_w|x) and log π(y_l|x);
    - with ``kl_prompts`` (a list of prompts), ``"samples"``: ``sampled_kl`` of the trained policy
      against ``model`` on them (KL(π ‖ π_ref) on its own samples, and what the samples are);
    - with ``held_out_pairs`` (a pairs dataset), ``"held_out_correct"``: (M,) True where the trained
      policy's implicit reward, the log-ratio log π/π_ref, ranks a held-out pair's chosen response
      strictly above its rejected one (``ranked_correctly``); ``held_out_reference_logps`` as
      ``reference_logps``, for those pairs.
    """
    check_choice("loss", loss, ("dpo", "ipo", "kto"))
    scale = knobs["tau"] if loss == "ipo" else knobs.get("beta", 0.1)
    trainer = PreferenceTrainer(copy.deepcopy(model), tokenizer, pairs, loss=loss, lr=lr, batch_size=batch_size,
                                steps=steps, seed=seed, progress=False, **knobs)
    frame = trainer.train(live=False).to_pandas()
    if reference_logps is None:
        reference_logps = pair_sequence_logps(model, tokenizer, pairs)
    chosen, rejected = pair_sequence_logps(trainer.model, tokenizer, pairs)
    chosen = (chosen - reference_logps[0]).numpy()
    rejected = (rejected - reference_logps[1]).numpy()
    kl = frame["kl"].to_numpy(dtype=float) if "kl" in frame else np.zeros(len(frame))
    out = {"h": frame["rewards/margins"].to_numpy(dtype=float) / scale, "kl": kl,
           "pair_h": chosen - rejected, "chosen": chosen, "rejected": rejected}
    if kl_prompts is not None:
        out["samples"] = sampled_kl(trainer.model, model, tokenizer, kl_prompts)
    if held_out_pairs is not None:
        if held_out_reference_logps is None:
            held_out_reference_logps = pair_sequence_logps(model, tokenizer, held_out_pairs)
        held_chosen, held_rejected = pair_sequence_logps(trainer.model, tokenizer, held_out_pairs)
        out["held_out_correct"] = ranked_correctly(held_chosen - held_out_reference_logps[0],
                                                   held_rejected - held_out_reference_logps[1])
    return out


def review_samples_summary(texts, lengths=None) -> dict[str, float]:
    """The gold reward of sampled reviews and what it is made of (``rlbook.tasks.reviews``).

    A review the parser rejects scores ``reviews.UNPARSABLE`` (−3) whatever it says, so the mean
    gold reward is (1 − u)·g_parsed + u·(−3), u the unparsable share and g_parsed the mean gold
    reward of the parsed reviews; the clause count of the parsed ones says how much they say (the
    gold reward counts each clause's sentiment and penalises repeats and clauses past the limit).
    Returns ``gold reward``, ``gold s.e.`` (over the samples), ``unparsable``, ``gold (parsed)``,
    ``clauses (parsed)`` and, when ``lengths`` (one per text) is given, their mean ``length``.
    """
    texts = list(texts)
    if not texts:
        raise ValueError("texts must hold at least one sampled review")
    golds = np.array([reviews.gold_reward(text) for text in texts], dtype=float)
    parsed = [reviews.parse_review(text) for text in texts]
    ok = np.array([clauses is not None for clauses in parsed])
    summary = {"gold reward": float(golds.mean()),
               "gold s.e.": float(golds.std(ddof=1) / np.sqrt(len(golds))) if len(golds) > 1 else float("nan"),
               "unparsable": float(1 - ok.mean()),
               "gold (parsed)": float(golds[ok].mean()) if ok.any() else float("nan"),
               "clauses (parsed)": float(np.mean([len(c) for c in parsed if c is not None])) if ok.any() else float("nan")}
    if lengths is not None:
        lengths = np.asarray(lengths, dtype=float)
        if lengths.shape != (len(texts),):
            raise ValueError(f"lengths must hold one number per text ({len(texts)}), got shape {lengths.shape}")
        summary["length"] = float(lengths.mean())
    return summary


def sequence_logps(model, tokenizer, prompts, completions, *, batch_size: int = 64,
                   per_token: bool = False) -> torch.Tensor:
    """log π(y|x) under ``model`` of each completion *text* after its prompt, (N,) float32.

    The completion is followed by end-of-sequence and its token log-probs are summed, as
    ``PreferenceTrainer`` and ``rlbook.coverage.completion_logprob_sums`` score a sampled answer; with
    ``per_token`` the sum is divided by the number of tokens scored (end-of-sequence included). For a
    string no rollout holds — an answer one model wrote, scored under another; Yue et al.'s
    (arXiv:2504.13837) perplexity test asks whether the RL policy's answers were likely under the base.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    encoded = encode_prompt_completions(tokenizer, list(prompts), list(completions))
    rows = _completion_token_logps(model, encoded, tokenizer.pad_token_id, batch_size)
    if not rows:
        return torch.zeros(0)
    return torch.stack([row.sum() / (len(row) if per_token else 1) for row in rows])


def _completion_token_logps(model, encoded, pad_id: int, batch_size: int) -> list[torch.Tensor]:
    """log π(y_t | x, y_<t) of every completion token of ``encoded`` (``encode_prompt_completions``'s
    output), one (length,) tensor per row, scored in batches without gradients."""
    model.eval()
    device = next(model.parameters()).device
    rows = []
    for start in range(0, len(encoded), batch_size):
        batch = collate_prompt_completions(encoded[start:start + batch_size], pad_id, device)
        with torch.no_grad():
            token_logps = completion_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                              batch.completion_mask).cpu()
        rows.extend(token_logps[r, :len(encoded[start + r][1])] for r in range(token_logps.shape[0]))
    return rows


def kl_optimum_log_ratio(rewards, reference_rewards, *, beta: float) -> tuple[np.ndarray, float, float]:
    """``(log_ratios, beta_log_z, se)``: log π*(y)/π_ref(y) for each of ``rewards``, under the exact optimum
    of the KL-regularised objective, π* = π_ref e^{r/β}/Z (Rafailov et al. 2023, arXiv:2305.18290, eq. 4).

    Taking logs, log π*(y)/π_ref(y) = (r(y) − β log Z)/β: the optimum *raises* a response exactly when
    its reward exceeds β log Z = β log E_{y~π_ref}[e^{r(y)/β}], and lowers every other one — a chosen
    response included, if it is only the better of two mediocre samples. β log Z is estimated from
    ``reference_rewards``, the rewards of samples drawn from π_ref (one prompt, or prompts whose Z is
    taken to be the same): β log of the mean of e^{r/β}, computed stably. ``se`` is its delta-method
    standard error, β·sd(w)/(√n·mean(w)) with w = e^{r/β}; the mean is dominated by the few
    highest-reward samples, so the estimate needs many of them at small β.
    """
    beta = check_positive("beta", beta)
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    ref = np.asarray(reference_rewards, dtype=np.float64).reshape(-1)
    if ref.size < 2 or not np.isfinite(ref).all() or not np.isfinite(r).all():
        raise ValueError(f"need at least 2 finite reference rewards and finite rewards, got {ref.size} reference rewards")
    scaled = ref / beta
    top = scaled.max()
    w = np.exp(scaled - top)                                     # e^{r/β} up to the factor e^{top}
    beta_log_z = float(beta * (top + np.log(w.mean())))
    se = float(beta * w.std(ddof=1) / (np.sqrt(ref.size) * w.mean()))
    return (r - beta_log_z) / beta, beta_log_z, se


def ipo_win_rate_targets(chosen_gold, rejected_gold, *, tau: float) -> np.ndarray:
    """Per pair, IPO's optimal margin when one score g(y) serves every pair: (q(y_w) − q(y_l))/τ.

    Azar et al. (2023, arXiv:2310.12036, §5.1) show that regressing h(y, y') = g(y) − g(y') onto the
    label I(y, y')/τ, with y and y' drawn independently from the data's policy μ, has the minimiser
    g(y) = p*(y ≻ μ)/τ + const, so h* = (p*(y_w ≻ μ) − p*(y_l ≻ μ))/τ ∈ [−1/τ, 1/τ]: each pair's
    target is its own, not 1/(2τ). Here p*(y ≻ μ) = q(y) is each response's win rate against the pool
    of all the pairs' responses (both sides), by gold reward, a tie counting ½ — a deterministic
    preference. 1/(2τ) is the value for one pair alone (μ uniform on its two responses); a model that
    could place each pair on its own would reach it, a model whose score generalises across pairs
    is held to these targets. ``chosen_gold`` and ``rejected_gold``: the gold rewards of each pair's
    responses, chosen the better.
    """
    tau = check_positive("tau", tau)
    w = np.asarray(chosen_gold, dtype=np.float64).reshape(-1)
    lose = np.asarray(rejected_gold, dtype=np.float64).reshape(-1)
    if w.shape != lose.shape or w.size == 0:
        raise ValueError(f"chosen_gold and rejected_gold must be non-empty and of one length, got {w.size} and {lose.size}")
    pool = np.sort(np.concatenate([w, lose]))

    def win_rate(g):
        below = np.searchsorted(pool, g, side="left")
        ties = np.searchsorted(pool, g, side="right") - below
        return (below + 0.5 * ties) / pool.size

    return (win_rate(w) - win_rate(lose)) / tau


def parse_rule_accuracy(chosen, rejected) -> np.ndarray:
    """Per pair, the expected preference accuracy of the rule "prefer the review that parses": 1 when
    only ``chosen`` parses (``rlbook.tasks.reviews.parse_review``), 0 when only ``rejected`` does (the
    gold labeller can prefer broken text, −3, to a parsable review scored below −3), ½ (a coin) when
    both or neither do. Its mean is the bar any ranker that reads only well-formedness reaches."""
    chosen, rejected = list(chosen), list(rejected)
    if len(chosen) != len(rejected):
        raise ValueError(f"chosen and rejected must have the same length, got {len(chosen)} and {len(rejected)}")
    ok_w = np.array([reviews.parse_review(t) is not None for t in chosen], dtype=bool)
    ok_l = np.array([reviews.parse_review(t) is not None for t in rejected], dtype=bool)
    return np.where(ok_w == ok_l, 0.5, ok_w.astype(np.float64))


def shorter_rule_accuracy(chosen, rejected) -> np.ndarray:
    """Per pair, the expected preference accuracy of the rule "prefer the shorter review": 1 when
    ``chosen`` has fewer characters than ``rejected`` (the book's tokenizer is character-level, so this
    is the shorter completion in tokens), 0 when it has more, ½ (a coin) at equal length. Its mean is
    the bar any ranker that reads only length reaches; a near-uniform per-token shift of log-probs ranks
    pairs this way, the length exploitation DPO is known for (Park et al. 2024, arXiv:2403.19159)."""
    chosen, rejected = list(chosen), list(rejected)
    if len(chosen) != len(rejected):
        raise ValueError(f"chosen and rejected must have the same length, got {len(chosen)} and {len(rejected)}")
    n_w = np.array([len(t) for t in chosen], dtype=np.int64)
    n_l = np.array([len(t) for t in rejected], dtype=np.int64)
    return np.where(n_w == n_l, 0.5, (n_w < n_l).astype(np.float64))


def gold_by_clause_count(texts, golds) -> dict[int, tuple[float, int]]:
    """``{clauses: (mean gold, n)}`` over the well-formed reviews among ``texts`` (``parse_review`` not
    None), grouped by their number of clauses: the gold reward at matched length. Two policies that write
    reviews of different lengths compare fairly only within a clause count, since the gold reward itself
    changes with length (the penalty past the third clause, more chances to repeat)."""
    texts, golds = list(texts), np.asarray(golds, dtype=np.float64).reshape(-1)
    if len(texts) != golds.size:
        raise ValueError(f"texts and golds must have the same length, got {len(texts)} and {golds.size}")
    groups: dict[int, list[float]] = {}
    for text, gold in zip(texts, golds):
        clauses = reviews.parse_review(text)
        if clauses is not None:
            groups.setdefault(len(clauses), []).append(float(gold))
    return {k: (float(np.mean(v)), len(v)) for k, v in sorted(groups.items())}


def gap_matched_accuracy(correct, gaps, in_group, in_reference) -> tuple[float, float, int]:
    """``(group_accuracy, matched_reference_accuracy, n)``: a group's accuracy beside another group's,
    reweighted to the first group's gold gaps.

    Any ranker orders pairs with a large gold gap more easily, so two groups of pairs compare fairly
    only at the same gaps. For each gap value of the group, the reference group's accuracy at that
    value is weighted by the group's count there (direct standardisation); group pairs whose gap
    value the reference group lacks are left out, and ``n`` is how many group pairs remain.
    ``correct``: 0/1 per pair; ``gaps``: the gold gap per pair (discrete, e.g. multiples of 0.5).
    """
    correct = np.asarray(correct, dtype=np.float64).reshape(-1)
    gaps = np.round(np.asarray(gaps, dtype=np.float64).reshape(-1), 6)
    group, reference = np.asarray(in_group, dtype=bool), np.asarray(in_reference, dtype=bool)
    if not (correct.size == gaps.size == group.size == reference.size):
        raise ValueError("correct, gaps, in_group and in_reference must have one entry per pair")
    shared = [g for g in np.unique(gaps[group]) if (reference & (gaps == g)).any()]
    if not shared:
        raise ValueError("the two groups share no gold-gap value")
    used = group & np.isin(gaps, shared)
    matched = sum((used & (gaps == g)).sum() * correct[reference & (gaps == g)].mean() for g in shared)
    n = int(used.sum())
    return float(correct[used].mean()), float(matched / n), n


def clause_credit(model, reference, tokenizer, prompts, texts, *, beta: float, batch_size: int = 64) -> pd.DataFrame:
    """Split each review's implicit reward β·log π/π_ref among its clauses and its stop: what a DPO policy learned.

    A response's implicit reward (Rafailov et al. 2023, "Direct Preference Optimization",
    arXiv:2305.18290, eq. 5, up to the prompt's constant β log Z) is β times a sum over its tokens of
    log π(y_t|x, y_<t) − log π_ref(y_t|x, y_<t), so it splits exactly into parts. The parts follow the
    decisions the policy takes while writing: clause k > 0 takes the ", " *before* it (the choice to
    go on rather than stop) and its own tokens; the first clause takes its own tokens; and the final
    "." with the end-of-sequence token is a unit of its own, ``stop`` (the choice to end the review
    after this many clauses). So a clause past the limit carries the decision that wrote it, and the
    decision to stop is not credited to whichever clause happened to be last. Setting each clause's
    part beside its term in the gold reward shows which of the labeller's rules the implicit reward
    has picked up.

    Returns one row per unit of every text that parses as a review (others are skipped): ``text``
    (index into ``texts``), ``unit`` ("clause" or "stop"), ``position`` (0-based; for the stop, the
    number of clauses before it), ``aspect``, ``adjective``, ``sentiment`` (+1 / 0 / −1), ``repeat``
    (the aspect or the adjective was used earlier in the review), ``past_limit`` (position ≥
    ``reviews.MAX_CLAUSES``), ``gold`` (the clause's term of ``gold_reward``, 0 for the stop, which
    the gold reward does not score; a text's terms sum to its gold reward) and ``credit`` (the unit's
    part of the implicit reward; a text's parts sum to it). The stop row has an empty aspect and
    adjective, sentiment 0 and ``repeat`` False.
    """
    beta = check_positive("beta", beta)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    prompts, texts = list(prompts), list(texts)
    if len(prompts) != len(texts):
        raise ValueError(f"texts must have one entry per prompt ({len(prompts)}), got {len(texts)}")
    parsed = [(i, reviews.parse_review(text)) for i, text in enumerate(texts)]
    parsed = [(i, clauses) for i, clauses in parsed if clauses is not None]
    encoded = encode_prompt_completions(tokenizer, [prompts[i] for i, _ in parsed], [texts[i] for i, _ in parsed])
    log_ratios = [_completion_token_logps(network, encoded, tokenizer.pad_token_id, batch_size)
                  for network in (model, reference)]
    records, token_chars = [], {}
    for (i, clauses), (_, completion_ids), policy_logps, reference_logps in zip(parsed, encoded, *log_ratios):
        token_credit = beta * (policy_logps - reference_logps).double()
        for token in completion_ids[:-1]:
            if token not in token_chars:
                token_chars[token] = len(tokenizer.decode([token]))
        unit_of_token = _unit_of_each_token(texts[i], [token_chars[t] for t in completion_ids[:-1]])
        credit = torch.zeros(len(clauses) + 1, dtype=torch.float64).index_add_(0, torch.tensor(unit_of_token),
                                                                              token_credit)
        for position, ((aspect, adjective), (repeat, past_limit, gold)) in enumerate(
                zip(clauses, reviews.clause_terms(clauses))):
            records.append({"text": i, "unit": "clause", "position": position, "aspect": aspect,
                            "adjective": adjective, "sentiment": int(reviews.SENTIMENT[adjective]), "repeat": repeat,
                            "past_limit": past_limit, "gold": gold, "credit": credit[position].item()})
        records.append({"text": i, "unit": "stop", "position": len(clauses), "aspect": "", "adjective": "",
                        "sentiment": 0, "repeat": False, "past_limit": len(clauses) > reviews.MAX_CLAUSES,
                        "gold": 0.0, "credit": credit[len(clauses)].item()})
    return pd.DataFrame.from_records(records, columns=["text", "unit", "position", "aspect", "adjective", "sentiment",
                                                       "repeat", "past_limit", "gold", "credit"])


def _unit_of_each_token(text: str, token_chars: list[int]) -> list[int]:
    """The unit of each completion token, given how many characters each decodes to, plus one for the
    end-of-sequence token that follows them: clause k (0-based) for the ", " before clause k and
    clause k's own characters (the first clause: any leading space and its characters), and the
    number of clauses, n, for the stop (the final "." and what follows it, end-of-sequence included)."""
    text = completion_text(text)
    stripped = text.strip()
    clauses = stripped[:-1].split(", ")
    bounds, end = [], len(text) - len(text.lstrip())
    for k, clause in enumerate(clauses):
        end += len(clause) + (2 if k > 0 else 0)  # clause k > 0 starts with the ", " that chose to go on
        bounds.append(end)  # the first character after clause k
    owners, position = [], 0
    for chars in token_chars:
        owners.append(int(np.searchsorted(bounds, position, side="right")))  # past the last clause: the stop
        position += chars
    if position != len(text):
        raise ValueError(f"cannot align the tokens of {text!r} with its characters: they decode to {position} of "
                         f"{len(text)}")
    return owners + [len(clauses)]


def clause_credit_table(credit: pd.DataFrame) -> pd.DataFrame:
    """Mean clause credit and gold term by sentiment (rows) and kind of clause (columns), with counts.

    Only the clause rows of ``clause_credit``'s output are read (``stop_credit_table`` reads the stops).

    The kinds (``CLAUSE_KINDS``): ``first 3, new`` (a clause among the first ``MAX_CLAUSES`` that
    repeats nothing), ``repeat`` (repeats an aspect or adjective, within the first ``MAX_CLAUSES``)
    and ``past the limit`` (a new clause after them). Clauses both repeating and past the limit are
    left out: the table is for reading one rule at a time.
    """
    if "unit" in credit:
        credit = credit[credit["unit"] == "clause"]
    kinds = np.select([~credit["repeat"] & ~credit["past_limit"], credit["repeat"] & ~credit["past_limit"],
                       ~credit["repeat"] & credit["past_limit"]], list(CLAUSE_KINDS), default="")
    frame = credit.assign(kind=kinds)
    frame = frame[frame["kind"] != ""]
    table = frame.groupby(["sentiment", "kind"]).agg(credit=("credit", "mean"), gold=("gold", "mean"),
                                                     clauses=("credit", "size"))
    present = [kind for kind in CLAUSE_KINDS if kind in set(frame["kind"])]
    columns = pd.MultiIndex.from_product([["credit", "gold", "clauses"], present])
    table = table.unstack("kind").reindex(index=[1, 0, -1], columns=columns)
    return table.rename(index={1: "positive", 0: "neutral", -1: "negative"})


def clause_credit_by_position(credit: pd.DataFrame, *, repeat: bool = False) -> pd.DataFrame:
    """Mean credit of the clauses that repeat nothing (or, with ``repeat=True``, of the repeats) by
    position (rows, 0-based) and sentiment (columns: positive, neutral, negative).

    The gold reward's length rule is a step: nothing for the first ``reviews.MAX_CLAUSES`` clauses,
    −``reviews.LENGTH_PENALTY`` for each after them. A policy that learned it would show a drop in
    credit between position MAX_CLAUSES − 1 and MAX_CLAUSES larger than between earlier positions;
    a policy that learned "shorter is better" shows an even decline. Position-matched, it also
    compares repeats with new clauses where both occur.
    """
    clauses = credit[credit["unit"] == "clause"] if "unit" in credit else credit
    clauses = clauses[clauses["repeat"] == repeat]
    table = clauses.groupby(["position", "sentiment"])["credit"].mean().unstack("sentiment")
    table = table.reindex(columns=[1, 0, -1]).rename(columns={1: "positive", 0: "neutral", -1: "negative"})
    return table.rename_axis(index="position", columns=None)


def stop_credit_table(credit: pd.DataFrame) -> pd.DataFrame:
    """Mean credit of the stop (the final "." and end-of-sequence) by the number of clauses before it.

    Reads the ``stop`` rows of ``clause_credit``'s output; one row per clause count, with ``credit``
    (mean) and ``reviews`` (how many). The gold reward scores no stop: a review that ends after
    ``reviews.MAX_CLAUSES`` clauses loses through its extra clauses, not through its full stop.
    """
    if "unit" not in credit:
        raise ValueError("credit must be clause_credit's output, with a 'unit' column")
    stops = credit[credit["unit"] == "stop"]
    table = stops.groupby("position").agg(credit=("credit", "mean"), reviews=("credit", "size"))
    return table.rename_axis("clauses before the stop")


def optimum_by_reward_scale(chosen_rewards, reference_rewards, *, beta: float, scales) -> pd.DataFrame:
    """The exact optimum's verdict on the chosen responses when the reward is c·r, for each c of ``scales``.

    Preference labels fix a reward only up to its scale (Bradley–Terry with temperature T identifies
    r/T; deterministic labels are T → 0), so "what π* does" depends on c. At reward c·r,
    log π*(y)/π_ref(y) = (c·r(y) − β log Z_c)/β with β log Z_c = β log E_ref[e^{c·r/β}]
    (Rafailov et al. 2023, arXiv:2305.18290, eq. 4; ``kl_optimum_log_ratio`` at β/c). In r's units the
    bar a response must clear, b(c) = β log Z_c / c = (1/t) log E_ref[e^{t r}] with t = c/β, rises
    with c (a log-mean-exp grows with its temperature's inverse): from E_ref[r] as c → 0 to max r. So
    the share of chosen responses π* lowers can only grow with c. One row per scale: ``bar (r units)``
    b(c), ``share lowered`` (chosen responses with r < b(c)) and ``mean log π*/π_ref`` over them.
    """
    rows = {}
    for scale in scales:
        scale = check_positive("scale", scale)
        log_ratios, beta_log_z, _ = kl_optimum_log_ratio(chosen_rewards, reference_rewards, beta=beta / scale)
        chosen = np.asarray(chosen_rewards, dtype=np.float64).reshape(-1)
        rows[scale] = {"bar (r units)": beta_log_z, "share lowered": float(np.mean(chosen < beta_log_z)),
                       "mean log π*/π_ref": float(log_ratios.mean())}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("reward scale c")


def optimum_reversal_scale(chosen_rewards, reference_rewards, *, beta: float, statistic: str = "share",
                           low: float = 1e-3, high: float = 1e3, iterations: int = 60) -> float:
    """The reward scale c at which the exact optimum's verdict on the chosen responses turns over.

    ``statistic="share"``: the smallest c at which π* lowers more than half of them (``share lowered``
    of ``optimum_by_reward_scale`` passes ½; it only grows with c). ``statistic="mean"``: the c at which
    their mean log π*/π_ref = (c·mean r − β log Z_c)/β changes sign. That function of c is 0 at c = 0,
    concave (its derivative mean r − E_{π*_c}[r] falls as π*_c tilts to higher rewards), so it rises
    first when the chosen responses beat the reference's mean, and crosses zero once. Found by
    bisection on log c in [``low``, ``high``]; NaN when there is no crossing in that range.
    """
    check_choice("statistic", statistic, ("share", "mean"))

    def past(scale: float) -> bool:
        row = optimum_by_reward_scale(chosen_rewards, reference_rewards, beta=beta, scales=[scale]).iloc[0]
        return row["share lowered"] > 0.5 if statistic == "share" else row["mean log π*/π_ref"] < 0
    if past(low) or not past(high):
        return float("nan")
    lo, hi = np.log(low), np.log(high)
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if past(float(np.exp(mid))) else (mid, hi)
    return float(np.exp(hi))


def sample_kl_objective(policy, reference, rollout, rewards, *, beta: float, reward_scale: float = 1.0) -> dict:
    """The KL-regularised objective of §1 of lesson 06, J = E_π[c·r] − β KL(π ‖ π_ref), from π's own samples.

    ``rollout`` must be sampled from ``policy`` at temperature 1 (``rlbook.rollout.sample``), and
    ``rewards`` holds one reward per row. Per sample, k1 = Σ_t [log π(y_t|·) − log π_ref(y_t|·)] over
    its completion tokens is an unbiased estimate of the sequence KL (Schulman's k1, summed; a sample
    cut off at ``max_new_tokens`` counts its tokens so far, the KL of the length-capped sampler).
    J's value at the optimum is β log Z (Rafailov et al. 2023, arXiv:2305.18290, eq. 4), so
    J ≤ β log Z up to noise. Returns ``reward``, ``kl`` and ``J`` (means; J in the units of
    ``reward_scale`` × r) with ``*_se`` standard errors clustered by prompt (the rollout's groups).
    """
    beta = check_positive("beta", beta)
    reward_scale = check_positive("reward_scale", reward_scale)
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if rewards.size != len(rollout):
        raise ValueError(f"rewards must hold one number per rollout row ({len(rollout)}), got {rewards.size}")
    with torch.no_grad():
        kl = (rollout_logprobs(policy, rollout) - rollout_logprobs(reference, rollout)).sum(dim=1).double().numpy()
    clusters = np.arange(len(rollout)) // rollout.num_samples
    objective = reward_scale * rewards - beta * kl
    out = {}
    for name, values in (("reward", rewards), ("kl", kl), ("J", objective)):
        out[name] = float(values.mean())
        out[f"{name}_se"] = clustered_se(values, clusters) if len(set(clusters)) > 1 else float("nan")
    return out


def kl_to_optimum(objective, beta_log_z, *, beta: float, reward_scale: float = 1.0) -> float:
    """KL(π ‖ π*) in nats from a policy's objective: the identity J(π) = β log Z − β KL(π ‖ π*) of lesson 06 §1
    (Rafailov et al. 2023, arXiv:2305.18290, eq. 4 and the derivation before it), solved for the KL.

    ``objective`` (J, e.g. ``sample_kl_objective(...)["J"]`` divided by its ``reward_scale``) and ``beta_log_z``
    (``kl_optimum_log_ratio``'s second value at β / ``reward_scale``) are both in units of the *unscaled*
    reward r; the optimum is the one for the reward ``reward_scale`` · r, so the KL is
    ``reward_scale`` · (β log Z − J) / β. How far a trained policy is from the optimum it was derived from
    (0 only at π = π*); a sampled J makes this an estimate, with J's SE / β (× ``reward_scale``) as its SE.
    """
    beta = check_positive("beta", beta)
    reward_scale = check_positive("reward_scale", reward_scale)
    return float(reward_scale * (float(beta_log_z) - float(objective)) / beta)


def paired_accuracy_gap(correct, baseline, *, clusters=None) -> tuple[float, float]:
    """``(gap, se)``: mean(correct − baseline) over the same pairs, and its paired standard error.

    ``correct``: 0/1 per pair (a ranker's verdict); ``baseline``: a rule's expected accuracy per pair
    (1, 0, or ½ for a coin, as ``parse_rule_accuracy`` and ``shorter_rule_accuracy`` give). Both are
    read on the same pairs, so the gap's SE comes from the per-pair differences (a paired test, like
    McNemar's), not from either accuracy alone. With ``clusters`` (e.g. the pair's prompt) the SE is
    the larger of the per-pair one and the cluster-robust one (``rlbook.evidence.clustered_se``).
    """
    correct = np.asarray(correct, dtype=np.float64).reshape(-1)
    baseline = np.asarray(baseline, dtype=np.float64).reshape(-1)
    if correct.size != baseline.size or correct.size < 2:
        raise ValueError(f"correct and baseline must hold one number per pair (at least 2), got {correct.size} "
                         f"and {baseline.size}")
    difference = correct - baseline
    se = clustered_se(difference, np.arange(difference.size))
    if clusters is not None:
        se = max(se, clustered_se(difference, clusters))
    return float(difference.mean()), float(se)


def repeat_rule_gap(model, reference, tokenizer, pairs) -> dict:
    """A DPO policy's accuracy on the pairs the repeat rule decides, against the pairs no rule decides
    reweighted to the same gold gaps, both reviews parsable in each pair (lesson 06 §6).

    A pair's implicit-reward order is right when (log π − log π_ref)(y_w) > (log π − log π_ref)(y_l).
    Repeat-decided pairs (``rlbook.tasks.reviews.decided_by_rule``) have small gold gaps by
    construction, and some have broken chosen text, so both are removed from the comparison:
    ``gap_matched_accuracy`` standardises the other group to their gaps. Returns ``repeat`` and
    ``matched`` (the two accuracies), ``n`` (repeat-decided pairs used), ``gap`` and ``se`` (the two
    binomial SEs in quadrature).
    """
    policy_chosen, policy_rejected = pair_sequence_logps(model, tokenizer, pairs)
    ref_chosen, ref_rejected = pair_sequence_logps(reference, tokenizer, pairs)
    correct = ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected) > 0).numpy()
    gaps = np.array(pairs["chosen_gold"]) - np.array(pairs["rejected_gold"])
    parses = lambda texts: np.array([reviews.parse_review(t) is not None for t in texts], dtype=bool)
    both_parse = parses(pairs["chosen"]) & parses(pairs["rejected"])
    decided = {rule: np.array([reviews.decided_by_rule(c, r, rule) for c, r in zip(pairs["chosen"], pairs["rejected"])],
                              dtype=bool) for rule in ("repeat", "length")}
    repeat, matched, n = gap_matched_accuracy(correct, gaps, decided["repeat"] & both_parse,
                                              ~decided["repeat"] & ~decided["length"] & both_parse)
    se = float(np.sqrt((repeat * (1 - repeat) + matched * (1 - matched)) / n))
    return {"repeat": repeat, "matched": matched, "n": n, "gap": repeat - matched, "se": se}


def credit_contrasts(credit: pd.DataFrame) -> dict:
    """The gold rules' contrasts read off ``clause_credit``'s output, in sentiment steps (lesson 06 §6).

    ``step`` s: half the credit gap between a new positive and a new negative clause among the first
    ``reviews.MAX_CLAUSES`` (gold: 1 per step). ``repeat discount``: new minus repeated clauses at the
    same positions, averaged over positions and sentiments (gold: 1.5 s). ``late discount``: new clauses
    among the first MAX_CLAUSES minus new clauses past them, averaged over sentiments (gold: 1 s, but the
    groups stand at different positions). ``slope``: the mean credit lost from one position to the next
    before the limit; ``extra step at the limit``: the loss from position MAX_CLAUSES − 1 to MAX_CLAUSES
    minus that slope (gold: a 1 s step there, no slope). ``positive − neutral`` and ``neutral − negative``:
    the credit gaps between new clauses of adjacent sentiments at the same position, averaged over the
    positions before the limit where both occur (position-matched; gold: 1 s each). All but ``step`` are in
    units of s.
    """
    table = clause_credit_table(credit)
    new = table[("credit", "first 3, new")]
    step = float((new["positive"] - new["negative"]) / 2)
    by_position, repeats = clause_credit_by_position(credit), clause_credit_by_position(credit, repeat=True)
    shared = [p for p in repeats.index if 0 < p < reviews.MAX_CLAUSES and p in by_position.index]
    repeat_discount = float((by_position.loc[shared] - repeats.loc[shared]).stack().mean()) if shared else float("nan")
    late = table[("credit", "past the limit")] if ("credit", "past the limit") in table else None
    late_discount = float((new - late).mean()) if late is not None else float("nan")
    drops = -by_position.loc[:reviews.MAX_CLAUSES].diff().mean(axis=1)
    slope = float(drops.loc[1:reviews.MAX_CLAUSES - 1].mean())
    at_limit = float(drops.get(reviews.MAX_CLAUSES, float("nan")))
    early = by_position.loc[by_position.index < reviews.MAX_CLAUSES]
    matched = {f"{a} − {b}": float((early[a] - early[b]).mean()) / step if {a, b} <= set(early) else float("nan")
               for a, b in (("positive", "neutral"), ("neutral", "negative"))}
    return {"step": step, "repeat discount": repeat_discount / step, "late discount": late_discount / step,
            "slope": slope / step, "extra step at the limit": (at_limit - slope) / step, **matched}


def bootstrap_over_texts(credit: pd.DataFrame, statistic, *, draws: int = 200, seed: int = 0) -> pd.DataFrame:
    """Bootstrap standard errors of ``statistic(credit)`` (a dict of numbers), resampling whole texts.

    The clauses of one review share its history, so the unit of resampling is the review (the
    ``text`` column of ``clause_credit``), drawn with replacement as many times as there are reviews
    (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 6). Returns one row per key:
    ``value`` (on the data), ``se`` (the spread over ``draws`` resamples; NaN draws left out).
    """
    draws = check_int("draws", draws, minimum=2)
    texts = credit["text"].to_numpy()
    labels, inverse = np.unique(texts, return_inverse=True)
    rows_of = [np.flatnonzero(inverse == k) for k in range(len(labels))]
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(draws):
        picked = rng.integers(0, len(labels), size=len(labels))
        index = np.concatenate([rows_of[k] for k in picked])
        resampled = credit.iloc[index].copy()
        resampled["text"] = np.repeat(np.arange(len(picked)), [len(rows_of[k]) for k in picked])
        samples.append(statistic(resampled))
    spread = pd.DataFrame(samples)
    value = statistic(credit)
    return pd.DataFrame({"value": pd.Series(value), "se": spread.std(ddof=1)})
