"""Per-completion policy-gradient estimates on a small set of weights, to measure their variance and bias.

A score-function (REINFORCE) estimate of ∇J from one completion y of a prompt x is

    g(y) = Σ_t w_t ∇_θ log π_θ(y_t | x, y_<t),

with w_t = A (the same advantage on every token: a sequence baseline, Williams 1992) or
w_t = R − V(x, y_<t) (a learned critic's per-token baseline). To compare baselines we need g(y) for
*every* completion separately — thousands of gradient vectors — and then their spread.

A backward pass per completion would cost seconds; on the *output layer* the gradient has a closed
form. With logits z_t = W h_t / T (h_t the last hidden state, W the (V, H) output matrix),

    ∂ log softmax(z_t)[y_t] / ∂W = (e_{y_t} − p_t) h_tᵀ / T,        p_t = softmax(z_t),

so a whole batch needs one forward pass and one ``einsum``: g_i = Σ_t w_{i,t} (e_{y_t} − p_t) h_tᵀ / T.
The identities E[∇log π] = 0 and E[b ∇log π] = 0 hold for any subset of parameters, so what is
unbiased on all weights is unbiased on these V·H coordinates. Their *variances* are another matter:
how ‖s‖² depends on the reward differs from layer to layer, so a variance ratio measured here is the
output layer's, not a sample of the whole network's.

Simplified: with tied input and output embeddings (the book's models), this is the partial
derivative with respect to the matrix *in its role as the output layer*, the input embedding held
fixed — a well-defined parameter of the same network, just not the tied matrix's whole gradient.

``group_gradient_estimates`` forms each baseline's estimate from G completions of a prompt (reusing
``rlbook.advantages.group_advantages``), and ``gradient_statistics`` measures the variance and the
bias of the batch estimate against a reference gradient (Greensmith et al. 2004, "Variance reduction
techniques for gradient estimates in reinforcement learning", JMLR 5; Kool et al. 2019, "Buy 4
REINFORCE samples, get a baseline for free!", ICLR DeepRLStructPred workshop).
"""

from __future__ import annotations

import math

import torch

from rlbook._checks import as_float_tensor, check_choice, check_int, check_positive
from rlbook.advantages import gae, group_advantages
from rlbook.evidence import jackknife_se
from rlbook.rollout import completion_forward, completion_logprobs

__all__ = ["BASELINES", "baseline_statistics", "between_prompt_variance", "completion_hidden_states",
           "critic_explained_variance", "fit_critic_head", "fixed_budget_noise", "gae_baseline_weights",
           "gradient_statistics", "group_gradient_estimates", "grpo_length_factor", "grpo_signal_factor",
           "heuristic_noise_ratios", "max_mean_share", "mean_difference_components", "mean_gradient_share", "noise_ratio",
           "optimal_baseline_margin", "optimal_constant_baseline", "output_layer_gradients", "parameter_gradients",
           "per_problem_baseline_margin", "projected_gradients", "projection_blocks", "prompt_variances", "sweep_group_sizes", "training_noise_factor",
           "value_head_outputs"]

# "none": A = R (vanilla REINFORCE, b = 0; Williams 1992's update carries a reinforcement baseline b); "mean": A = R − mean of the group, self included (Dr.GRPO's advantage);
# "rloo": A = R − mean of the other G − 1 (Kool et al. 2019; Ahmadian et al. 2024); "grpo": (R − μ)/σ
# (Shao et al. 2024); "value": A = R − V(x) with the prompt's value known (pass ``prompt_values``, e.g.
# measured on an independent sample: the usual idealised per-prompt baseline, for comparison; not the
# lowest-variance constant, which is Greensmith et al.'s b* = E[R‖s‖²]/E[‖s‖²], see optimal_constant_baseline);
# "critic": w_t = R − V_t with a learned value model (pass ``value_terms``).
BASELINES = ("none", "mean", "rloo", "grpo", "value", "critic")
_GROUP_METHOD = {"mean": "dr_grpo", "rloo": "rloo", "grpo": "grpo"}


def output_layer_gradients(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, token_weights=None,
                           temperature: float = 1.0, batch_size: int = 64, hidden_states=None) -> torch.Tensor:
    """g_i = Σ_t w_{i,t} ∇_W log π(y_{i,t} | x_i, y_{i,<t}) for every completion i, flattened: (B, V·H).

    W is the output layer (``model.get_output_embeddings().weight``, shape (V, H)); the gradient is
    the closed form (e_y − p) hᵀ / T of the module docstring, float64. ``token_weights``: (B,) one
    weight per completion, (B, C) one per token, or None (all 1: the score function of the whole
    completion). Padding (``completion_mask`` 0) never counts. Inputs as in ``rlbook.rollout.Rollout``.
    ``hidden_states``: this model's ``completion_hidden_states`` of the same batch, when already
    computed (the forward pass is most of the cost; several weightings can share it).
    """
    check_positive("temperature", temperature)
    check_int("batch_size", batch_size, minimum=1)
    if completion_ids.dim() != 2 or completion_mask.shape != completion_ids.shape:
        raise ValueError(f"completion_ids and completion_mask must both be (B, C), got "
                         f"{tuple(completion_ids.shape)} and {tuple(completion_mask.shape)}")
    mask = completion_mask.to(torch.float64)
    weights = _token_weights(token_weights, mask)
    _check_hidden_states(hidden_states, completion_ids)
    head = model.get_output_embeddings().weight.detach()
    gradients = torch.empty(completion_ids.shape[0], head.numel(), dtype=torch.float64)  # filled in place
    for start in range(0, completion_ids.shape[0], batch_size):
        rows = slice(start, start + batch_size)
        hidden = (hidden_states[rows] if hidden_states is not None else
                  completion_hidden_states(model, prompt_ids[rows], prompt_mask[rows], completion_ids[rows],
                                           completion_mask[rows])).to(torch.float64)
        probs = torch.softmax(hidden @ head.to(torch.float64).T / temperature, dim=-1)
        residual = torch.nn.functional.one_hot(completion_ids[rows], head.shape[0]).to(torch.float64) - probs
        residual = residual * (weights[rows] * mask[rows]).unsqueeze(-1) / temperature
        gradients[rows] = torch.einsum("btv,bth->bvh", residual, hidden).flatten(1).cpu()
    return gradients


def parameter_gradients(model, parameter: str, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
    """(B, numel) float64: each completion's score ∇_θ log π(y | x) restricted to one named parameter tensor.

    For the layers ``output_layer_gradients`` has no closed form for (a block's MLP or attention weights): one
    forward and one backward pass per completion, by autograd, so meant for a spot check on a subsample. Each
    row is scored on its own (``completion_logprobs`` shares a prompt's pass between its rows, which would mix
    their gradients)."""
    weights = dict(model.named_parameters())
    if parameter not in weights:
        raise ValueError(f"no parameter named {parameter!r}")
    weight = weights[parameter]
    rows = []
    with torch.enable_grad():
        for i in range(completion_ids.shape[0]):
            logp = _row_logprobs(model, i, prompt_ids, prompt_mask, completion_ids, completion_mask)
            (gradient,) = torch.autograd.grad(logp.sum(), weight)
            rows.append(gradient.detach().flatten().to(torch.float64))
    return torch.stack(rows)


def projected_gradients(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, dim: int = 256,
                        seed: int = 0, token_weights=None, chunk_size: int = 32) -> torch.Tensor:
    """(B, dim) float64: each completion's *whole-network* score g_i = Σ_t w_{i,t} ∇_θ log π(y_{i,t} | x_i, y_{i,<t}),
    over every parameter of ``model`` (a tied matrix once, with both its roles), projected as P g_i.

    P is a (dim, D) matrix of i.i.d. N(0, 1/dim) entries drawn from ``seed``: a Gaussian random projection
    (Johnson & Lindenstrauss 1984; Dasgupta & Gupta 2003, Random Struct. Algorithms 22(1)). For fixed vectors u, v,

        E_P ⟨P u, P v⟩ = ⟨u, v⟩,        Var_P ‖P u‖² = 2 ‖u‖⁴ / dim,

    so every statistic of this module that is built from inner products — a variance as a trace, a squared
    length, a scale along ∇J — is, in expectation over P, the whole network's; one vector's squared length is
    off by about √(2/dim) (9 % at dim 256), a trace over many directions by less. The same P for every row, so
    the rows are comparable; independent column blocks (``projection_blocks``) measure the projection's own error.

    Each row needs its own backward pass (autograd has no per-example gradient): row i is scored alone by
    ``completion_logprobs`` (log π at temperature 1, as ``sample`` draws by default; padding masked), and ``chunk_size`` rows are stacked and projected by one matrix product. P is drawn
    once, one block per parameter, in float32: dim × D × 4 bytes (0.8 GB for this book's 0.8 M-weight models at
    dim 256 — choose dim for the memory you have). ``token_weights``: as in ``output_layer_gradients``.
    """
    check_int("dim", dim, minimum=1)
    check_int("chunk_size", chunk_size, minimum=1)
    if completion_ids.dim() != 2 or completion_mask.shape != completion_ids.shape:
        raise ValueError(f"completion_ids and completion_mask must both be (B, C), got "
                         f"{tuple(completion_ids.shape)} and {tuple(completion_mask.shape)}")
    weights = _token_weights(token_weights, completion_mask.to(torch.float64))
    parameters = [w for w in model.parameters() if w.requires_grad]     # model.parameters() lists a tied matrix once
    generator = torch.Generator().manual_seed(seed)
    projection = torch.cat([torch.randn(w.numel(), dim, generator=generator) for w in parameters]) / math.sqrt(dim)
    projected = torch.empty(completion_ids.shape[0], dim, dtype=torch.float64)
    with torch.enable_grad():
        for start in range(0, completion_ids.shape[0], chunk_size):
            rows = []
            for i in range(start, min(start + chunk_size, completion_ids.shape[0])):
                logp = _row_logprobs(model, i, prompt_ids, prompt_mask, completion_ids, completion_mask)
                gradients = torch.autograd.grad((logp[0].double() * weights[i]).sum(), parameters, allow_unused=True)
                rows.append(torch.cat([torch.zeros(w.numel()) if g is None else g.detach().flatten().float()
                                       for g, w in zip(gradients, parameters)]))
            projected[start:start + len(rows)] = (torch.stack(rows) @ projection).to(torch.float64)
    return projected


def _row_logprobs(model, i: int, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
    """(1, C) per-token log π of row ``i`` scored alone (``completion_logprobs`` on a one-row batch), so that a
    backward pass through it is that one completion's gradient (a shared prompt pass would mix rows)."""
    return completion_logprobs(model, prompt_ids[i:i + 1], prompt_mask[i:i + 1], completion_ids[i:i + 1],
                               completion_mask[i:i + 1])


def projection_blocks(projected, blocks: int) -> list[torch.Tensor]:
    """``projected`` (B, dim) cut into ``blocks`` column blocks, each rescaled to an independent projection of its
    own (entries N(0, 1/(dim / blocks))): a statistic computed on each block and spread across them gives the
    random projection's own standard error (the blocks' spread / √blocks for their mean)."""
    projected = as_float_tensor("projected", projected, ndim=(2,))
    blocks = check_int("blocks", blocks, minimum=2)
    if projected.shape[1] % blocks:
        raise ValueError(f"blocks must divide the projection's dim {projected.shape[1]}, got {blocks}")
    return [part * math.sqrt(blocks) for part in projected.chunk(blocks, dim=1)]


def group_gradient_estimates(scores, rewards, group_size: int, *, baseline: str = "rloo",
                             value_terms=None, prompt_values=None) -> torch.Tensor:
    """Each group's gradient estimate (1/G) Σ_i A_i s_i, shaped (B / G, D), prompt-major.

    ``scores`` (B, D): each completion's score function s_i = ∇log π(y_i) (``output_layer_gradients``
    with no weights); ``rewards`` (B,). Rows are n_prompts blocks of N completions each, cut into
    N / G groups of G consecutive rows. ``baseline`` in ``BASELINES``: the advantages A_i come from
    ``rlbook.advantages.group_advantages`` ("mean" = its "dr_grpo", "rloo", "grpo"; "none": A = R).
    "critic" needs ``value_terms`` (B, D), Σ_t V_t ∇log π(y_t) (``output_layer_gradients`` with the
    critic's values as token weights): each completion then contributes R_i s_i − value_terms_i.
    "value" needs ``prompt_values`` (B,), the value V(x) of each completion's prompt: A_i = R_i − V(x_i).
    Pass ``group_size`` = N with one block per prompt for the whole sample of each prompt.
    """
    check_choice("baseline", baseline, BASELINES)
    scores = as_float_tensor("scores", scores, ndim=(2,)).to(torch.float64)
    rewards = as_float_tensor("rewards", rewards, ndim=(1,)).to(torch.float64)
    if rewards.shape[0] != scores.shape[0]:
        raise ValueError(f"rewards must have one entry per row of scores ({scores.shape[0]}), got {rewards.shape[0]}")
    group_size = check_int("group_size", group_size, minimum=2 if baseline in _GROUP_METHOD else 1)
    if scores.shape[0] % group_size:
        raise ValueError(f"group_size must divide the number of completions {scores.shape[0]}, got {group_size}")
    if baseline == "critic":
        value_terms = _required_like("value_terms", value_terms, scores, "scores", baseline,
                                     "Σ_t V_t ∇log π(y_t) per completion")
        return _group_mean(rewards, scores, group_size) - value_terms.view(-1, group_size, scores.shape[1]).mean(dim=1)
    if baseline == "value":
        prompt_values = _required_like("prompt_values", prompt_values, rewards, "rewards", baseline,
                                       "V(x) of each completion's prompt")
        return _group_mean(rewards - prompt_values, scores, group_size)
    advantages = rewards if baseline == "none" else group_advantages(rewards, group_size, _GROUP_METHOD[baseline])
    return _group_mean(advantages, scores, group_size)


def _required_like(name: str, value, like: torch.Tensor, like_name: str, baseline: str, meaning: str) -> torch.Tensor:
    """``value`` as float64 with the shape of ``like``; a ValueError naming ``name`` when missing or misshapen."""
    if value is None:
        raise ValueError(f"{name} is required for baseline {baseline!r} ({meaning})")
    value = as_float_tensor(name, value, ndim=(like.dim(),)).to(torch.float64)
    if value.shape != like.shape:
        raise ValueError(f"{name} must have the shape of {like_name} {tuple(like.shape)}, got {tuple(value.shape)}")
    return value


def _group_mean(advantages: torch.Tensor, scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """(1/G) Σ_i A_i s_i for every group of G consecutive rows, as one batched matrix product
    (no (B, D) temporary: the scores of a large batch take hundreds of megabytes)."""
    groups = scores.view(-1, group_size, scores.shape[1])
    return torch.bmm(advantages.view(-1, 1, group_size), groups).squeeze(1) / group_size


def gradient_statistics(estimates, reference, *, n_prompts: int, reference_noise: float = 0.0) -> dict:
    """Variance and bias of the batch gradient ĝ = (1/P) Σ_x ĝ_x, one group per prompt.

    ``estimates`` (P · M, D): M independent group estimates for each of P prompts, prompt-major (as
    ``group_gradient_estimates`` returns them, flattened or not); ``reference`` (D,): the gradient
    they estimate, measured independently with many samples. Returns

    - ``variance``: E‖ĝ − E ĝ‖² = (1/P²) Σ_x tr Cov(ĝ_x), each Cov from the M groups (divide by M − 1);
    - ``mean_norm``, ``reference_norm``: ‖E ĝ‖ (E ĝ estimated by the mean over all groups) and ‖∇J‖;
    - ``scale``: ⟨E ĝ, ∇J⟩ / ‖∇J‖² (1 for an unbiased estimator), ``cosine`` between the two;
    - ``scale_noise``: the standard error of ``scale`` from the finite sample (the spread of the M
      groups' projections on ∇J), so an unbiased estimator has |scale − 1| within a few of it;
    - ``relative_bias``: ‖E ĝ − ∇J‖ / ‖∇J‖; ``mean_noise``: √(variance / M) / ‖∇J‖, how much of that
      an unbiased estimator shows from the finite sample alone;
    - ``relative_variance``: variance / ‖E ĝ‖², the noise-to-signal of one batch (scale-free);
    - ``scale_se``: √(scale_noise² + reference_noise²). The reference is itself an estimate, and to first
      order scale − 1 ≈ ⟨e_est − e_ref, ∇J⟩ / ‖∇J‖² for an unbiased estimator, the two errors independent;
      ``reference_noise`` is the reference's own projection SE (``gradient_statistics(...)["scale_noise"]``
      of groups cut from the reference sample), 0 when the reference is taken as exact;
    - ``prompt_variances`` (P,) and ``prompt_means`` (P, D): each prompt's tr Cov(ĝ_x) and mean estimate,
      what ``noise_ratio`` needs to put a standard error on the ratio of two estimators' noise-to-signal.
    """
    estimates = _prompt_blocks(estimates, n_prompts)
    n_prompts, groups = estimates.shape[:2]
    reference = as_float_tensor("reference", reference, ndim=(1,)).to(torch.float64)
    if reference.shape[0] != estimates.shape[-1]:
        raise ValueError(f"reference must have {estimates.shape[-1]} entries, got {reference.shape[0]}")
    check_positive("reference_noise", reference_noise, allow_zero=True)
    per_prompt_mean = estimates.mean(dim=1)
    per_prompt_variance = prompt_variances(estimates, n_prompts=n_prompts)
    variance = float(per_prompt_variance.sum()) / n_prompts**2
    mean = per_prompt_mean.mean(dim=0)
    reference_norm = float(reference.norm())
    mean_norm = float(mean.norm())
    projections = estimates @ reference / reference_norm**2  # (P, M): each group's scale along ∇J
    scale_noise = float(projections.var(dim=1, correction=1).sum() / groups) ** 0.5 / n_prompts
    return {
        "variance": variance,
        "relative_variance": variance / mean_norm**2,
        "mean_norm": mean_norm,
        "reference_norm": reference_norm,
        "scale": float(mean @ reference) / reference_norm**2,
        "scale_noise": scale_noise,
        "cosine": float(mean @ reference) / (mean_norm * reference_norm),
        "relative_bias": float((mean - reference).norm()) / reference_norm,
        "mean_noise": (variance / groups) ** 0.5 / reference_norm,
        "scale_se": (scale_noise**2 + reference_noise**2) ** 0.5,
        "prompt_variances": per_prompt_variance,
        "prompt_means": per_prompt_mean,
    }


def noise_ratio(statistics, against) -> tuple[float, float]:
    """``(ratio, se)``: the noise-to-signal of one estimator over another's, measured on the same prompts.

    ``statistics``, ``against``: ``gradient_statistics`` of two estimators (their ``prompt_variances`` and
    ``prompt_means``). ratio = [Σ_x v_a(x) / ‖Σ_x m_a(x)‖²] / [Σ_x v_b(x) / ‖Σ_x m_b(x)‖²], with v the
    per-prompt tr Cov and m the per-prompt mean estimate; for two unbiased estimators (same E ĝ) it is
    the ratio of their variances. The prompts are the independent draws, and both estimators are read
    on each prompt's same completions, so the SE is the delete-one-prompt jackknife of the ratio
    (Quenouille 1956; Efron & Stein 1981, Ann. Statist. 9(3)), paired by prompt: to first order it is
    the delta-method SE of ``rlbook.evidence.ratio_se`` on the variances, with the noise of the two
    ‖E ĝ‖² included. Needs at least 3 prompts.
    """
    variances_a, means_a = _prompt_summary(statistics, "statistics")
    variances_b, means_b = _prompt_summary(against, "against")
    if variances_a.shape[0] != variances_b.shape[0] or means_a.shape != means_b.shape:
        raise ValueError(f"statistics and against must come from the same prompts and coordinates, got "
                         f"{tuple(means_a.shape)} and {tuple(means_b.shape)}")
    n = variances_a.shape[0]
    if n < 3:
        raise ValueError(f"noise_ratio needs at least 3 prompts for a jackknife, got {n}")

    def ratio(keep):
        signal_a = float(means_a[keep].sum(0).norm()) ** 2
        signal_b = float(means_b[keep].sum(0).norm()) ** 2
        return float(variances_a[keep].sum()) / signal_a / (float(variances_b[keep].sum()) / signal_b)

    everything = torch.ones(n, dtype=torch.bool)
    leave_outs = torch.tensor([ratio(everything.index_fill(0, torch.tensor(i), False)) for i in range(n)],
                              dtype=torch.float64)
    se = jackknife_se(leave_outs)
    return ratio(everything), se


def mean_difference_components(estimates, reference, *, n_prompts: int) -> dict:
    """How far an estimator's mean E ĝ is from zero, along ∇J and across it, with standard errors.

    ``estimates`` as in ``gradient_statistics`` (P · M group estimates, prompt-major): typically the
    *difference* of two estimators on the same completions (their paired difference), or an estimator
    minus a known-unbiased one. ``reference`` (D,): ∇J, which fixes the direction u = ∇J/‖∇J‖ (its own
    noise only tilts u; nothing below is measured against its length but the units). Group j of every
    prompt forms one batch estimate b_j = (1/P) Σ_x ĝ_{x,j}; the M batches are independent draws with
    mean μ = E ĝ (given the prompts). Returns, in units of ‖∇J‖ (squared norms in ‖∇J‖²):

    - ``along``, ``along_se``: ⟨μ, u⟩/‖∇J‖ and its SE (the spread of the b_j along u, / √M);
    - ``across_sq``: an unbiased estimate of ‖μ_⊥‖², μ's squared component orthogonal to ∇J, the
      U-statistic Σ_{j≠k} ⟨b_j⊥, b_k⊥⟩ / (M(M − 1)) (Hoeffding 1948, Ann. Math. Statist. 19(3)): the
      plain ‖mean of the b_j⊥‖² would add tr Cov⊥ / M of pure noise in 13,000 dimensions; ``across_sq_se``:
      its delete-one-batch jackknife SE (so 0 lies within a few SE of it when μ_⊥ = 0);
    - ``across``: √max(across_sq, 0); ``across_noise``: √(tr Cov⊥ / M), the norm the plain mean's
      orthogonal part shows from the finite sample alone;
    - ``batches``: M.

    Needs M ≥ 3 groups per prompt.
    """
    estimates = _prompt_blocks(estimates, n_prompts)
    groups = estimates.shape[1]
    if groups < 3:
        raise ValueError(f"mean_difference_components needs at least 3 groups per prompt, got {groups}")
    reference = as_float_tensor("reference", reference, ndim=(1,)).to(torch.float64)
    if reference.shape[0] != estimates.shape[-1]:
        raise ValueError(f"reference must have {estimates.shape[-1]} entries, got {reference.shape[0]}")
    norm = float(reference.norm())
    if not norm > 0:
        raise ValueError("reference must not be zero: it fixes the direction along ∇J")
    unit = reference / norm
    batches = estimates.mean(dim=0) / norm                        # (M, D): the b_j, in units of ‖∇J‖
    along = batches @ unit                                        # (M,)
    across = batches - along[:, None] * unit                      # (M, D): each b_j's part orthogonal to ∇J
    gram = across @ across.T                                      # (M, M)
    total, diagonal = float(gram.sum()), gram.diagonal()

    def u_statistic(keep):
        m = int(keep.sum())
        return (float(gram[keep][:, keep].sum()) - float(diagonal[keep].sum())) / (m * (m - 1))

    everything = torch.ones(groups, dtype=torch.bool)
    across_sq = (total - float(diagonal.sum())) / (groups * (groups - 1))
    leave_outs = torch.tensor([u_statistic(everything.index_fill(0, torch.tensor(j), False)) for j in range(groups)],
                              dtype=torch.float64)
    across_sq_se = jackknife_se(leave_outs)
    centred = across - across.mean(dim=0)
    return {"along": float(along.mean()), "along_se": float(along.std(correction=1)) / groups**0.5,
            "across_sq": across_sq, "across_sq_se": across_sq_se, "across": max(across_sq, 0.0) ** 0.5,
            "across_noise": (float((centred ** 2).sum()) / (groups - 1) / groups) ** 0.5, "batches": groups}


def _prompt_summary(statistics, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(statistics, dict) or "prompt_variances" not in statistics or "prompt_means" not in statistics:
        raise ValueError(f"{name} must be a gradient_statistics result (with prompt_variances and prompt_means)")
    return statistics["prompt_variances"].to(torch.float64), statistics["prompt_means"].to(torch.float64)


def between_prompt_variance(estimates, *, n_prompts: int) -> dict:
    """tr Var_x(∇J_x): how much the prompts' own gradients differ, the term a fresh draw of prompts adds.

    ``estimates`` (P · M, D): M independent unbiased group estimates of each of P prompts (as
    ``group_gradient_estimates`` returns them, prompt-major). Each prompt's mean of its M groups is ∇J_x plus
    noise of trace tr Cov(ĝ_x)/M, so the spread of the P means over-states the prompts' spread by the mean of
    those noises; subtracting it leaves an unbiased estimate (the usual one-way random-effects split, e.g.
    Searle, Casella & McCulloch 1992, *Variance Components*, ch. 3, the one-way classification). Returns ``variance`` (that estimate; it
    can come out negative when the prompts hardly differ), ``raw`` (the spread of the means), ``noise`` (the
    part subtracted), and ``se``: the delete-one-prompt jackknife SE of ``variance``, the prompts being the
    independent draws."""
    blocks = _prompt_blocks(estimates, n_prompts)
    n_prompts, groups = blocks.shape[:2]
    if n_prompts < 3 or groups < 2:
        raise ValueError(f"need at least 3 prompts and 2 groups each, got {n_prompts} and {groups}")
    means = blocks.mean(dim=1)                                              # (P, D)
    noise = prompt_variances(blocks, n_prompts=n_prompts) / groups          # (P,)

    def split(keep):
        kept = means[keep]
        raw = float(((kept - kept.mean(dim=0)) ** 2).sum()) / (len(kept) - 1)
        return raw, float(noise[keep].mean())

    raw, mean_noise = split(torch.arange(n_prompts))
    subsets = (torch.tensor([j for j in range(n_prompts) if j != i]) for i in range(n_prompts))
    leave_out = torch.tensor([raw_i - noise_i for raw_i, noise_i in map(split, subsets)], dtype=torch.float64)
    se = jackknife_se(leave_out)
    return {"variance": raw - mean_noise, "raw": raw, "noise": mean_noise, "se": se}


def fixed_budget_noise(statistics, between_variance: float, *, n_prompts: int, group_size: int,
                       budget: int) -> float:
    """Noise-to-signal of one batch of ``budget`` completions, ``budget``/G prompts × G, prompts redrawn.

    ``statistics``: ``gradient_statistics`` of an unbiased estimator at G = ``group_size`` over ``n_prompts``
    fixed prompts (its ``variance`` is Σ_x tr Cov(ĝ_x)/P², so P · variance is the prompts' mean tr Cov(ĝ_x));
    ``between_variance``: tr Var_x(∇J_x) (``between_prompt_variance``). By the law of total variance a batch of
    P' = budget/G freshly drawn prompts has variance (mean tr Cov(ĝ_x) + tr Var_x(∇J_x))/P'; divided by
    ‖E ĝ‖² as in ``relative_variance``. Only for unbiased estimators: for a biased one the second term is the
    spread of its own per-prompt means, not of ∇J_x."""
    group_size = check_int("group_size", group_size, minimum=2)
    budget = check_int("budget", budget, minimum=group_size)
    if budget % group_size:
        raise ValueError(f"group_size ({group_size}) must divide budget ({budget})")
    within = n_prompts * statistics["variance"]
    return (within + between_variance) * group_size / budget / statistics["mean_norm"] ** 2


def heuristic_noise_ratios(success_rate: float, score_ratio: float, group_sizes, *, mean_share: float = 0.0) -> dict:
    """§1's variance heuristic for 0/1 rewards at success rate p, with the score size allowed to depend on R.

    Pretend the baseline b is independent of the sample (R, s) and that only ‖s‖²'s mean depends on R:
    S₁ = E[‖s‖² | R = 1], S₀ = E[‖s‖² | R = 0], ``score_ratio`` k = S₀/S₁ (k = 1 is the plain heuristic, score
    independent of reward). One sample's second moment E[(R − b)²‖s‖²] = p E(1 − b)² S₁ + (1 − p) E b² S₀, so,
    relative to no baseline's p S₁ (Greensmith et al. 2004, JMLR 5, treat the exact case):

    - value, b = p:       (1 − p)² + p(1 − p) k;
    - leave-one-out in groups of G, E b = p, Var b = v = p(1 − p)/(G − 1):
                          (1 − p)² + v + (1 − p)(p² + v) k / p;
    - a reward offset c earned by all, no baseline: E[(R + c)²‖s‖²] / (p S₁) = (1 + c)² + (1 − p) c² k / p
      (returned for c = 1 as "offset").

    With the default ``mean_share`` = 0 the cross terms between the samples of a group (b_i holds R_j, b_j
    holds R_i) and the mean gradient are left out: the ratios of second moments. That is the exact answer
    when ∇J_x = 0 (a score independent of the reward is pure noise: E[R s] = E[R] E[s] = 0).

    ``mean_share`` m = ‖∇J_x‖² / (p S₁), the squared mean gradient over no baseline's per-sample second moment,
    puts both back, and the ratios become the ratios of the group estimates' *variances* (what
    ``noise_ratio`` measures for unbiased estimators), exact for one prompt whose scores have E[‖s‖² | R] = S_R.
    With 0/1 rewards E[s | R] = (R − p) d, d = ∇J_x / (p(1 − p)) (E s = 0 and E[R s] = ∇J_x), and given the
    rewards the G scores are independent, so two samples' cross term is E⟨A₁s₁, A₂s₂⟩ = ‖d‖² X,
    X = E[A₁A₂(R₁ − p)(R₂ − p)]. Then Var ĝ = M/G + (G − 1)/G · ‖d‖² X − ‖∇J_x‖² for M the per-sample second
    moment; X = p²(1 − p)² for value, none and the offset (the variance is then (M − ‖∇J_x‖²)/G), and for
    leave-one-out X is summed over the binomial rewards (``_leave_one_out_cross``). Relative to no baseline's
    (p S₁ − ‖∇J_x‖²)/G: value (M_v − m)/(1 − m), offset (M_c − m)/(1 − m), leave-one-out
    (M_r + (G − 1) m X / (p(1 − p))² − G m)/(1 − m). At G = 2 leave-one-out's cross term cancels the mean
    exactly: Var = M_r/2. Returns {"value": float, "offset": float, "rloo": {G: float}}.
    """
    p = float(success_rate)
    if not 0 < p < 1:
        raise ValueError(f"success_rate must lie strictly between 0 and 1, got {success_rate!r}")
    k = check_positive("score_ratio", score_ratio)
    m = float(mean_share)
    if not 0 <= m < 1:
        raise ValueError(f"mean_share must lie in [0, 1) (‖∇J‖² is below no baseline's second moment), got {mean_share!r}")
    bound = max_mean_share(p, k)
    if m > bound * (1 + 1e-9):
        raise ValueError(f"mean_share {m!r} exceeds min(p, (1 − p)² S₀/S₁ / p) = {bound:.4g}: no scores with "
                         f"E[s | R] = (R − p) d have it (``max_mean_share``); the formula would give nonsense there")
    rloo = {}
    for g in group_sizes:
        g = check_int("group_sizes", g, minimum=2)
        v = p * (1 - p) / (g - 1)
        second_moment = (1 - p) ** 2 + v + (1 - p) * (p**2 + v) * k / p
        cross = (g - 1) * m * _leave_one_out_cross(p, g) / (p * (1 - p)) ** 2
        rloo[g] = (second_moment + cross - g * m) / (1 - m)
    value = ((1 - p) ** 2 + p * (1 - p) * k - m) / (1 - m)
    offset = (4 + (1 - p) * k / p - m) / (1 - m)
    return {"value": value, "offset": offset, "rloo": rloo}


def max_mean_share(success_rate: float, score_ratio: float) -> float:
    """The largest ``mean_share`` m = ‖∇J_x‖² / (p S₁) any one prompt's scores can have, 0/1 rewards at rate p.

    With E[s | R] = (R − p) d and ∇J_x = p(1 − p) d (``heuristic_noise_ratios``), a second moment is at least its
    mean's square: S₁ ≥ (1 − p)² ‖d‖² and S₀ ≥ p² ‖d‖². So m = p (1 − p)² ‖d‖² / S₁ ≤ p, and, with ‖d‖² ≤ S₀/p²,
    m ≤ (1 − p)² (S₀/S₁) / p. Returns min(p, (1 − p)² k / p) for k = ``score_ratio``; beyond it the completed
    formula describes no scores at all and gives impossible (even negative) variance ratios."""
    p = float(success_rate)
    if not 0 < p < 1:
        raise ValueError(f"success_rate must lie strictly between 0 and 1, got {success_rate!r}")
    k = check_positive("score_ratio", score_ratio)
    return min(p, (1 - p) ** 2 * k / p)


def _leave_one_out_cross(p: float, group_size: int) -> float:
    """X = E[A₁A₂(R₁ − p)(R₂ − p)] for leave-one-out advantages of two samples of one group of G, 0/1 rewards.

    A₁ = R₁ − (R₂ + T)/(G − 1), A₂ = R₂ − (R₁ + T)/(G − 1), T ~ Binomial(G − 2, p) the other rewards: summed
    over R₁, R₂ with E T and E T² in closed form."""
    n, others = group_size - 1, group_size - 2
    mean_t, square_t = others * p, others * p * (1 - p) + (others * p) ** 2
    total = 0.0
    for r1 in (0, 1):
        for r2 in (0, 1):
            weight = (p if r1 else 1 - p) * (p if r2 else 1 - p) * (r1 - p) * (r2 - p)
            a, b = r1 - r2 / n, r2 - r1 / n          # A₁ = a − T/n, A₂ = b − T/n
            total += weight * (a * b - (a + b) * mean_t / n + square_t / n**2)
    return total


def mean_gradient_share(scores, rewards, prompt_gradients, *, n_prompts: int) -> float:
    """m = Σ_x ‖∇J_x‖² / Σ_x E[R² ‖s‖² | x]: ``heuristic_noise_ratios``'s ``mean_share``, pooled over prompts.

    ``scores`` (B, D), ``rewards`` (B,): n_prompts blocks of N completions (as in ``group_gradient_estimates``);
    ``prompt_gradients`` (P, D): each prompt's ∇J_x measured on an *independent* sample (e.g. RLOO over a
    reference sample). ‖∇J_x‖² is read as ⟨ḡ_x, ∇J_x⟩ with ḡ_x = mean of R_i s_i over x's completions: the
    inner product of two independent unbiased estimates is unbiased, where ‖ḡ_x‖² would add ḡ_x's own variance.
    """
    scores = as_float_tensor("scores", scores, ndim=(2,)).to(torch.float64)
    rewards = as_float_tensor("rewards", rewards, ndim=(1,)).to(torch.float64)
    n_prompts = check_int("n_prompts", n_prompts, minimum=1)
    prompt_gradients = as_float_tensor("prompt_gradients", prompt_gradients, ndim=(2,)).to(torch.float64)
    if rewards.shape[0] != scores.shape[0] or scores.shape[0] % n_prompts:
        raise ValueError(f"rewards ({rewards.shape[0]}) must match scores ({scores.shape[0]}) and n_prompts must "
                         f"divide it, got n_prompts={n_prompts}")
    if prompt_gradients.shape != (n_prompts, scores.shape[1]):
        raise ValueError(f"prompt_gradients must be ({n_prompts}, {scores.shape[1]}), got {tuple(prompt_gradients.shape)}")
    blocks, block_rewards = scores.view(n_prompts, -1, scores.shape[1]), rewards.view(n_prompts, -1)
    prompt_means = torch.einsum("pn,pnd->pd", block_rewards, blocks) / blocks.shape[1]   # no (B, D) temporary
    signal = float((prompt_means * prompt_gradients).sum())
    norms = torch.linalg.vector_norm(scores, dim=1) ** 2
    second_moment = float((rewards**2 * norms).view(n_prompts, -1).mean(dim=1).sum())
    return signal / second_moment


def grpo_signal_factor(success_rate: float, group_size: int) -> float:
    """α(p) = E ĝ_GRPO,x / ∇J_x for one prompt with 0/1 rewards at success rate p (population σ).

    Given the group's success count k, E[s_i | R_i] = (R_i − p) d with d = ∇J_x / (p(1 − p)), so RLOO's group
    estimate has E[ĝ_RLOO | k] = k(G − k)/(G(G − 1)) · d, and GRPO's advantage is RLOO's times
    c_k = (G − 1)/(G σ_k) = (G − 1)/√(k(G − k)). Hence E ĝ_GRPO,x = α ∇J_x, parallel to ∇J_x (no direction
    bias within a prompt), with α = Σ_k P(k) k(G − k) c_k / Σ_k P(k) k(G − k), P(k) binomial: the stretch
    averaged with each group weighted by its share of the signal, k(G − k). Since c_k ≥ 2(G − 1)/G, α ≥ 1.5 at
    G ≥ 4 and α = 1 at G = 2. Across prompts α differs with p, which re-weights them: GRPO's only direction
    bias (Shao et al. 2024, arXiv:2402.03300, eq. 3's advantage; Liu et al. 2025, arXiv:2503.20783)."""
    p = float(success_rate)
    if not 0 < p < 1:
        raise ValueError(f"success_rate must lie strictly between 0 and 1, got {success_rate!r}")
    g = check_int("group_size", group_size, minimum=2)
    weights = [math.comb(g, k) * p**k * (1 - p) ** (g - k) * k * (g - k) for k in range(1, g)]
    stretch = [(g - 1) / math.sqrt(k * (g - k)) for k in range(1, g)]
    return sum(w * c for w, c in zip(weights, stretch)) / sum(weights)


def optimal_constant_baseline(rewards, score_norms) -> float:
    """b* = E[R ‖s‖²] / E[‖s‖²], the constant baseline of least variance (Greensmith et al. 2004, JMLR 5,
    lesson 01's exercise 2). ``rewards`` and ``score_norms`` (‖s_i‖²): one per sample."""
    rewards = as_float_tensor("rewards", rewards, ndim=(1,)).to(torch.float64)
    norms = as_float_tensor("score_norms", score_norms, ndim=(1,)).to(torch.float64)
    if norms.shape != rewards.shape:
        raise ValueError(f"score_norms must have one entry per reward ({rewards.shape[0]}), got {norms.shape[0]}")
    if (norms < 0).any() or float(norms.sum()) == 0:
        raise ValueError("score_norms must be non-negative and not all zero")
    return float((rewards * norms).sum() / norms.sum())


def optimal_baseline_margin(rewards, score_norms, clusters) -> dict:
    """Greensmith et al.'s test of no baseline against the value, from one batch of samples.

    For a constant baseline b the one-sample second moment M(b) = E[(R − b)² ‖s‖²] is a quadratic in b
    with its minimum at b* = E[R ‖s‖²] / E‖s‖², so M(b) = M(b*) + (b − b*)² E‖s‖² (Greensmith, Bartlett
    and Baxter 2004, JMLR 5, the optimal-baseline result; the variance is M(b) − ‖∇J‖², the same for
    every b). Hence no baseline (b = 0) has the smaller variance than the value (b = J = E R > 0)
    exactly when b*² < (J − b*)², i.e. b* < J/2. Returns {"b*", "J", "margin": J/2 − b* (> 0: no baseline
    quieter), "SE"}: the margin's standard error clustered by ``clusters`` (one label per sample, e.g.
    its prompt), from the delta-method linearisation
    z_i = (R_i − J)/(2n) − (R_i − b*) ‖s_i‖² / Σ_j ‖s_j‖² and ``evidence``'s cluster-robust sum.
    """
    from rlbook.evidence import _cluster_sandwich  # the same small-sample factor as clustered_se

    best = optimal_constant_baseline(rewards, score_norms)
    r = as_float_tensor("rewards", rewards, ndim=(1,)).to(torch.float64).numpy()
    norms = as_float_tensor("score_norms", score_norms, ndim=(1,)).to(torch.float64).numpy()
    value = float(r.mean())
    if value <= 0:
        raise ValueError(f"rewards must average above zero (the criterion b* < J/2 assumes J > 0), got {value}")
    z = (r - value) / (2 * r.size) - (r - best) * norms / norms.sum()
    return {"b*": best, "J": value, "margin": value / 2 - best, "SE": _cluster_sandwich(z, clusters)}


def per_problem_baseline_margin(rewards, score_norms, *, n_prompts: int) -> dict:
    """Greensmith et al.'s test of no baseline against each problem's own value b = p_x, summed over problems.

    ``rewards`` (B,), ``score_norms`` (B,) = ‖s_i‖²: n_prompts blocks of N consecutive samples, one block per
    problem. ``optimal_baseline_margin`` pools every sample under one constant b; a per-prompt baseline
    (leave-one-out, the group mean, a critic's V(x)) sits near each problem's own pass rate p_x instead. Per
    problem the one-sample second moment is M_x(b) = M_x(b*_x) + (b − b*_x)² S_x (Greensmith, Bartlett and
    Baxter 2004, JMLR 5), with S_x = E_x‖s‖² and b*_x = E_x[R‖s‖²]/S_x, so

        M_x(0) − M_x(p_x) = b*_x² S_x − (p_x − b*_x)² S_x = −2 p_x S_x (p_x/2 − b*_x),

    and summed over problems no baseline has the smaller variance (the ‖∇J_x‖² terms cancel) exactly when the
    weighted margin Σ_x w_x (p_x/2 − b*_x) / Σ_x w_x, w_x = p_x S_x, is positive. Returns {"margin", "SE",
    "share", "share SE", "solved"}: the plug-in margin (each p_x, S_x, b*_x read from its own block) and its
    delta-method SE over problems (``rlbook.evidence.ratio_se``: the problems are the independent draws); and,
    among the ``solved`` problems with p_x > 0 (for the others b*_x = p_x/2 = 0), the share whose own
    b*_x < p_x/2, with its binomial SE over problems.
    """
    from rlbook.evidence import ratio_se

    n_prompts = check_int("n_prompts", n_prompts, minimum=2)
    r = as_float_tensor("rewards", rewards, ndim=(1,)).to(torch.float64)
    norms = as_float_tensor("score_norms", score_norms, ndim=(1,)).to(torch.float64)
    if r.shape != norms.shape or r.shape[0] % n_prompts:
        raise ValueError(f"rewards ({r.shape[0]}) and score_norms ({norms.shape[0]}) must match and n_prompts "
                         f"({n_prompts}) must divide them")
    r, norms = r.view(n_prompts, -1), norms.view(n_prompts, -1)
    p, s, t = r.mean(dim=1), norms.mean(dim=1), (r * norms).mean(dim=1)     # p_x, S_x, E_x[R‖s‖²] = b*_x S_x
    weights = p * s
    if float(weights.sum()) <= 0:
        raise ValueError("some problem must have a right answer with a nonzero score (Σ_x p_x S_x > 0)")
    margin, se = ratio_se((p * (p * s / 2 - t)).numpy(), weights.numpy())  # w_x (p_x/2 − b*_x) = p_x(p_x S_x/2 − b*_x S_x)
    solved = p > 0
    below = (t[solved] < p[solved] * s[solved] / 2).to(torch.float64)         # b*_x S_x < (p_x/2) S_x
    n = int(solved.sum())
    share = float(below.mean()) if n else float("nan")
    share_se = (share * (1 - share) / n) ** 0.5 if n else float("nan")
    return {"margin": margin, "SE": se, "share": share, "share SE": share_se, "solved": n}


def training_noise_factor(estimates_none, estimates_with, *, n_prompts: int) -> dict:
    """A baseline's variance cut for a training batch that draws its problems at random, with its jackknife SE.

    ``estimates_none`` and ``estimates_with`` (P·K, D): K ≥ 2 group estimates of each of P problems from the
    same samples (``group_gradient_estimates`` with baseline "none" and e.g. "rloo"), prompt-major. A probe on
    fixed problems measures only the within-problem variance W_x (``prompt_variances``). A batch whose problem
    x is drawn at random has, per group, the variance E_x W_x + B with B = tr Var_x(∇J_x), the spread of the
    problems' own gradients, which is the same for every unbiased baseline (the law of total variance). B is
    read without bias from the ``estimates_with`` (each group's estimate is unbiased for ∇J_x): ‖∇J_x‖² as
    the mean of ⟨ĝ_k, ĝ_l⟩ over the K(K − 1) ordered pairs of different groups of x, ⟨∇J_x, ∇J_y⟩ as
    ⟨ḡ_x, ḡ_y⟩ for different problems, and B = mean_x ‖∇J_x‖² − mean_{x≠y} ⟨∇J_x, ∇J_y⟩ (the unbiased
    sample variance of the P gradients).

    Returns {"within": mean W_none / mean W_with, "factor": (mean W_none + B)/(mean W_with + B), "SE": the
    factor's leave-one-problem-out jackknife SE, "between": B, "share": B/(mean W_none + B), the share of the
    no-baseline batch variance that lies between problems}.
    """
    n_prompts = check_int("n_prompts", n_prompts, minimum=3)
    none, with_ = _prompt_blocks(estimates_none, n_prompts), _prompt_blocks(estimates_with, n_prompts)
    if none.shape != with_.shape:
        raise ValueError(f"estimates_none {tuple(none.shape)} and estimates_with {tuple(with_.shape)} must match")
    k, p = with_.shape[1], n_prompts
    w_none, w_with = prompt_variances(none, n_prompts=p), prompt_variances(with_, n_prompts=p)
    totals = with_.sum(dim=1)                                                # (P, D)
    own = ((totals ** 2).sum(dim=1) - (with_ ** 2).sum(dim=(1, 2))) / (k * (k - 1))  # unbiased ‖∇J_x‖²
    means = totals / k
    grand, squares = means.sum(dim=0), (means ** 2).sum(dim=1)

    def factor(keep: int, own_sum, cross_sum, none_sum, with_sum):
        between = own_sum / keep - cross_sum / (keep * (keep - 1))
        return (none_sum / keep + between) / (with_sum / keep + between), between, none_sum / keep

    cross = float((grand ** 2).sum() - squares.sum())                        # Σ_{x≠y} ⟨ḡ_x, ḡ_y⟩
    full, between, none_mean = factor(p, float(own.sum()), cross, float(w_none.sum()), float(w_with.sum()))
    # leave problem x out: its own terms and its cross terms 2⟨ḡ_x, Σ_{y≠x} ḡ_y⟩ leave the sums
    cross_out = cross - 2 * ((grand.unsqueeze(0) - means) * means).sum(dim=1)
    leave_out = torch.tensor([factor(p - 1, float(own.sum() - own[x]), float(cross_out[x]),
                                     float(w_none.sum() - w_none[x]), float(w_with.sum() - w_with[x]))[0]
                              for x in range(p)], dtype=torch.float64)
    se = jackknife_se(leave_out)
    return {"within": float(w_none.sum() / w_with.sum()), "factor": full, "SE": se, "between": between,
            "share": between / (none_mean + between)}


def grpo_length_factor(rewards, group_size: int, *, unbiased_std: bool = False) -> float:
    """The mean of (G − 1) / (G σ_g) over the groups whose rewards are not all equal: GRPO's rough length.

    GRPO's advantage is (R_i − R̄)/σ = (G − 1)/G · RLOO_i / σ (the mean baseline is (G − 1)/G × RLOO's, and
    RLOO's estimate is unbiased), so each varied group's estimate is RLOO's stretched by (G − 1)/(G σ_g);
    this averages the stretch over the groups (weighting them equally, not by their share of ∇J). With 0/1
    rewards and the population σ (the default, ``unbiased_std=False``, as in ``group_advantages``) every
    varied group of G = 2 has σ = 1/2 and the factor is exactly 1: GRPO is RLOO; with Bessel's σ (TRL's
    default) it is 1/√2 there. Flat groups have advantage 0 under both and are left out.
    """
    rewards = as_float_tensor("rewards", rewards, ndim=(1,)).to(torch.float64)
    group_size = check_int("group_size", group_size, minimum=2)
    if rewards.shape[0] % group_size:
        raise ValueError(f"group_size must divide the number of rewards {rewards.shape[0]}, got {group_size}")
    groups = rewards.view(-1, group_size)
    sigma = groups.std(dim=1, correction=1 if unbiased_std else 0)
    varied = sigma > 0
    if not varied.any():
        raise ValueError("rewards must hold at least one group whose rewards are not all equal")
    return float(((group_size - 1) / (group_size * sigma[varied])).mean())


def _prompt_blocks(estimates, n_prompts) -> torch.Tensor:
    """``estimates`` as float64 (P, M, D), prompt-major; a ValueError unless M ≥ 2 groups per prompt."""
    n_prompts = check_int("n_prompts", n_prompts, minimum=1)
    estimates = as_float_tensor("estimates", estimates, ndim=(2, 3)).to(torch.float64)
    if (estimates.shape[0] if estimates.dim() == 2 else estimates.shape[0] * estimates.shape[1]) % n_prompts:
        raise ValueError(f"n_prompts must divide the number of group estimates, got {n_prompts}")
    estimates = estimates.reshape(n_prompts, -1, estimates.shape[-1])
    if estimates.shape[1] < 2:
        raise ValueError("estimates must hold at least 2 groups per prompt to measure a variance")
    return estimates


def prompt_variances(estimates, *, n_prompts: int) -> torch.Tensor:
    """(P,): tr Cov(ĝ_x) of each prompt's group estimate, from its M groups (divide by M − 1).

    ``estimates`` as in ``gradient_statistics``. The batch variance there is Σ_x tr Cov(ĝ_x) / P², so
    the ratio of two baselines' batch variances on the same completions is the ratio of the means of
    their per-prompt values: with one independent draw per prompt, ``rlbook.evidence.ratio_se`` of the
    two arrays gives that ratio and its delta-method SE (Greensmith et al. 2004, JMLR 5, §3: the
    variance of a baseline's estimate, here measured instead of bounded).
    """
    estimates = _prompt_blocks(estimates, n_prompts)
    centred = estimates - estimates.mean(dim=1, keepdim=True)
    return (centred ** 2).sum(dim=(1, 2)) / (estimates.shape[1] - 1)


def _token_weights(token_weights, mask: torch.Tensor) -> torch.Tensor:
    """The (B, C) weight of every token: ones, a (B,) weight broadcast, or the given (B, C)."""
    if token_weights is None:
        return torch.ones_like(mask)
    weights = as_float_tensor("token_weights", token_weights, ndim=(1, 2)).to(torch.float64).detach()
    if weights.dim() == 1:
        weights = weights.unsqueeze(1)
    if weights.shape[0] != mask.shape[0] or weights.shape[1] not in (1, mask.shape[1]):
        raise ValueError(f"token_weights must be (B,) or (B, C) with (B, C) = {tuple(mask.shape)}, "
                         f"got {tuple(token_weights.shape)}")
    return weights.expand_as(mask)


@torch.no_grad()
def completion_hidden_states(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *,
                             batch_size: int = 64) -> torch.Tensor:
    """(B, C, H): the last hidden state (after the final norm) that predicts each completion token.

    Entry t is the state in which token t is chosen: what the output layer, or a critic's value
    head (``rlbook.trainers.Critic``), reads. Computed ``batch_size`` rows at a time.
    """
    check_int("batch_size", batch_size, minimum=1)
    parts = []
    for start in range(0, completion_ids.shape[0], batch_size):
        rows = slice(start, start + batch_size)
        parts.append(completion_forward(model, prompt_ids[rows], prompt_mask[rows], completion_ids[rows],
                                        completion_mask[rows], output="hidden_states"))
    return torch.cat(parts)


def _check_hidden_states(hidden_states, completion_ids) -> None:
    if hidden_states is not None and (hidden_states.dim() != 3 or hidden_states.shape[:2] != completion_ids.shape):
        raise ValueError(f"hidden_states must be (B, C, H) with (B, C) = {tuple(completion_ids.shape)}, "
                         f"got {tuple(hidden_states.shape)}")


@torch.no_grad()
def gae_baseline_weights(final_rewards, values, completion_mask, lam: float, *, gamma: float = 1.0) -> torch.Tensor:
    """(B, C) token weights b_t = R − A_t^λ: GAE's advantage written as the final reward minus a per-token baseline.

    GAE (Schulman et al. 2015, arXiv:1506.02438, eq. 16; ``rlbook.advantages.gae``) with the reward R paid at a
    completion's last token: δ_t = r_t + γV_{t+1} − V_t, A_t = Σ_l (γλ)^l δ_{t+l}, V = 0 after the last token.
    With γ = 1 and λ = 1, A_t = R − V_t, so b_t = V_t (the Monte-Carlo critic, ``value_head_outputs``); with
    λ < 1, b_t = R − A_t mixes in the critic's later values V_{t+k}, which depend on the token y_t that b_t
    multiplies, so the estimator is biased unless V is exact. Passed as ``output_layer_gradients``'
    ``token_weights``, it gives the ``value_terms`` of ``group_gradient_estimates(..., baseline="critic")``
    for GAE(λ). ``final_rewards`` (B,), ``values`` and ``completion_mask`` (B, C), padding after each response.
    """
    values = as_float_tensor("values", values, ndim=(2,)).to(torch.float64)
    final_rewards = as_float_tensor("final_rewards", final_rewards, ndim=(1,)).to(torch.float64)
    if completion_mask.shape != values.shape or final_rewards.shape[0] != values.shape[0]:
        raise ValueError(f"values {tuple(values.shape)}, completion_mask {tuple(completion_mask.shape)} and "
                         f"final_rewards {tuple(final_rewards.shape)} must share B (and C)")
    mask = completion_mask.to(torch.float64)
    last = mask.sum(dim=1).long() - 1
    if (last < 0).any():
        raise ValueError("every completion needs at least one token (a row of completion_mask is all 0)")
    token_rewards = torch.zeros_like(values)
    token_rewards[torch.arange(values.shape[0]), last] = final_rewards
    advantages, _ = gae(token_rewards, values, gamma, lam, mask=mask)
    return (final_rewards[:, None] - advantages) * mask


def value_head_outputs(critic, hidden_states, completion_mask) -> torch.Tensor:
    """(B, C) values of a ``rlbook.trainers.Critic`` from its body's hidden states: what ``critic(...)``
    returns (0 on padding), without a second forward pass when the hidden states are at hand."""
    if hidden_states.dim() != 3 or hidden_states.shape[:2] != completion_mask.shape:
        raise ValueError(f"hidden_states must be (B, C, H) with (B, C) = {tuple(completion_mask.shape)}, "
                         f"got {tuple(hidden_states.shape)}")
    return critic.head(hidden_states).squeeze(-1) * completion_mask.to(hidden_states.dtype)


def fit_critic_head(critic, prompt_ids, prompt_mask, completion_ids, completion_mask, rewards, *,
                    ridge: float = 1e-3, hidden_states=None):
    """Fit a ``rlbook.trainers.Critic``'s value head by ridge regression; its body stays frozen. In place.

    The target at every completion token is the final reward R (the return with γ = 1, the reward
    paid at the end), so V(x, y_<t) ≈ E[R | x, y_<t]: the least-squares solution of
    min_{w,c} Σ_{i,t} (wᵀh_{i,t} + c − R_i)² + ridge · ‖w‖², over the critic body's hidden states.
    This is what many gradient steps on ``value_loss`` with a frozen body converge to, in one solve.
    ``hidden_states``: the body's ``completion_hidden_states`` of this batch, when already computed
    (a fresh ``Critic(model)``'s body is a copy of ``model``, so its hidden states are the model's).
    Returns the fraction of the reward's variance (over tokens) that the fitted values explain.
    """
    check_positive("ridge", ridge, allow_zero=True)
    rewards = as_float_tensor("rewards", rewards, ndim=(1,)).to(torch.float64)
    if rewards.shape[0] != completion_ids.shape[0]:
        raise ValueError(f"rewards must have one entry per completion ({completion_ids.shape[0]}), "
                         f"got {rewards.shape[0]}")
    _check_hidden_states(hidden_states, completion_ids)
    real = completion_mask.bool()
    if hidden_states is None:
        hidden_states = completion_hidden_states(critic.body, prompt_ids, prompt_mask, completion_ids, completion_mask)
    features = hidden_states[real].to(torch.float64)
    targets = rewards.unsqueeze(1).expand_as(completion_mask)[real]
    design = torch.cat([features, torch.ones(features.shape[0], 1, dtype=torch.float64)], dim=1)
    penalty = ridge * torch.eye(design.shape[1], dtype=torch.float64)
    penalty[-1, -1] = 0.0  # the bias is not penalised
    solution = torch.linalg.solve(design.T @ design + penalty, design.T @ targets)
    with torch.no_grad():
        critic.head.weight.copy_(solution[:-1].unsqueeze(0).to(critic.head.weight.dtype))
        critic.head.bias.copy_(solution[-1:].to(critic.head.bias.dtype))
    residual = targets - design @ solution
    return float(1 - residual.var() / targets.var())


@torch.no_grad()
def critic_explained_variance(values, rewards, completion_mask) -> float:
    """1 − Σ(V_t − R)² / Σ(R − R̄)² over the real tokens: how much of the final reward's variance (over tokens)
    a critic's values V(x, y_<t) explain on a batch — on a batch it was *not* fitted on, a held-out score
    (``fit_critic_head`` returns the same number on its own fitting batch). ``values`` (B, C), ``rewards`` (B,)."""
    values = as_float_tensor("values", values, ndim=(2,)).to(torch.float64)
    rewards = as_float_tensor("rewards", rewards, ndim=(1,)).to(torch.float64)
    if values.shape != completion_mask.shape or rewards.shape[0] != values.shape[0]:
        raise ValueError(f"values must be (B, C) like completion_mask {tuple(completion_mask.shape)} and rewards "
                         f"(B,), got {tuple(values.shape)} and {tuple(rewards.shape)}")
    real = completion_mask.bool()
    targets = rewards.unsqueeze(1).expand_as(values)[real]
    return float(1 - ((values[real] - targets) ** 2).sum() / ((targets - targets.mean()) ** 2).sum())


def baseline_statistics(scores, rewards, reference, *, group_size: int, n_prompts: int, value_terms=None,
                        prompt_values=None, baselines=BASELINES, reference_noise: float = 0.0) -> dict[str, dict]:
    """``gradient_statistics`` of each baseline's estimate at group size G, on the same completions.

    ``scores``, ``rewards``, ``value_terms``, ``prompt_values`` as in ``group_gradient_estimates``
    (n_prompts blocks of N completions; G must divide N and leave at least 2 groups per prompt);
    "critic" is skipped when ``value_terms`` is None, "value" when ``prompt_values`` is None.
    ``reference_noise``: as in ``gradient_statistics``. Returns {baseline: statistics}.
    """
    given = {"critic": value_terms is not None, "value": prompt_values is not None}
    return {baseline: gradient_statistics(group_gradient_estimates(scores, rewards, group_size, baseline=baseline,
                                                                   value_terms=value_terms,
                                                                   prompt_values=prompt_values),
                                          reference, n_prompts=n_prompts, reference_noise=reference_noise)
            for baseline in baselines if given.get(baseline, True)}


def sweep_group_sizes(scores, rewards, reference, *, group_sizes, n_prompts: int, value_terms=None,
                      prompt_values=None, reference_noise: float = 0.0) -> dict[int, dict[str, dict]]:
    """{G: ``baseline_statistics`` at G} for every G in ``group_sizes``, on the same completions each time."""
    return {int(g): baseline_statistics(scores, rewards, reference, group_size=int(g), n_prompts=n_prompts,
                                        value_terms=value_terms, prompt_values=prompt_values,
                                        reference_noise=reference_noise)
            for g in group_sizes}
