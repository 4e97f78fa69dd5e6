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
The variance of an estimator on these V·H coordinates is a sample of its variance on all weights
(the identities E[∇log π] = 0 and E[b ∇log π] = 0 hold for any subset of parameters).

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

import torch

from rlbook._checks import as_float_tensor, check_choice, check_int, check_positive
from rlbook.advantages import group_advantages
from rlbook.rollout import _position_ids

__all__ = ["BASELINES", "baseline_statistics", "completion_hidden_states", "fit_critic_head",
           "gradient_statistics", "group_gradient_estimates", "output_layer_gradients"]

# "none": A = R (Williams 1992); "mean": A = R − mean of the group, self included (Dr.GRPO's advantage);
# "rloo": A = R − mean of the other G − 1 (Kool et al. 2019; Ahmadian et al. 2024); "grpo": (R − μ)/σ
# (Shao et al. 2024); "critic": w_t = R − V_t with a learned value model (pass ``value_terms``).
BASELINES = ("none", "mean", "rloo", "grpo", "critic")
_GROUP_METHOD = {"mean": "dr_grpo", "rloo": "rloo", "grpo": "grpo"}


def output_layer_gradients(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, token_weights=None,
                           temperature: float = 1.0, batch_size: int = 64) -> torch.Tensor:
    """g_i = Σ_t w_{i,t} ∇_W log π(y_{i,t} | x_i, y_{i,<t}) for every completion i, flattened: (B, V·H).

    W is the output layer (``model.get_output_embeddings().weight``, shape (V, H)); the gradient is
    the closed form (e_y − p) hᵀ / T of the module docstring, float64. ``token_weights``: (B,) one
    weight per completion, (B, C) one per token, or None (all 1: the score function of the whole
    completion). Padding (``completion_mask`` 0) never counts. Inputs as in ``rlbook.rollout.Rollout``.
    """
    check_positive("temperature", temperature)
    check_int("batch_size", batch_size, minimum=1)
    if completion_ids.dim() != 2 or completion_mask.shape != completion_ids.shape:
        raise ValueError(f"completion_ids and completion_mask must both be (B, C), got "
                         f"{tuple(completion_ids.shape)} and {tuple(completion_mask.shape)}")
    mask = completion_mask.to(torch.float64)
    weights = _token_weights(token_weights, mask)
    head = model.get_output_embeddings().weight.detach()
    parts = []
    for start in range(0, completion_ids.shape[0], batch_size):
        rows = slice(start, start + batch_size)
        hidden = completion_hidden_states(model, prompt_ids[rows], prompt_mask[rows], completion_ids[rows],
                                     completion_mask[rows]).to(torch.float64)
        probs = torch.softmax(hidden @ head.to(torch.float64).T / temperature, dim=-1)
        residual = torch.nn.functional.one_hot(completion_ids[rows], head.shape[0]).to(torch.float64) - probs
        residual = residual * (weights[rows] * mask[rows]).unsqueeze(-1) / temperature
        parts.append(torch.einsum("btv,bth->bvh", residual, hidden).flatten(1))
    return torch.cat(parts)


def group_gradient_estimates(scores, rewards, group_size: int, *, baseline: str = "rloo",
                             value_terms=None) -> torch.Tensor:
    """Each group's gradient estimate (1/G) Σ_i A_i s_i, shaped (B / G, D), prompt-major.

    ``scores`` (B, D): each completion's score function s_i = ∇log π(y_i) (``output_layer_gradients``
    with no weights); ``rewards`` (B,). Rows are n_prompts blocks of N completions each, cut into
    N / G groups of G consecutive rows. ``baseline`` in ``BASELINES``: the advantages A_i come from
    ``rlbook.advantages.group_advantages`` ("mean" = its "dr_grpo", "rloo", "grpo"; "none": A = R).
    "critic" needs ``value_terms`` (B, D), Σ_t V_t ∇log π(y_t) (``output_layer_gradients`` with the
    critic's values as token weights): each completion then contributes R_i s_i − value_terms_i.
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
        if value_terms is None:
            raise ValueError("value_terms is required for baseline 'critic' (Σ_t V_t ∇log π(y_t) per completion)")
        value_terms = as_float_tensor("value_terms", value_terms, ndim=(2,)).to(torch.float64)
        if value_terms.shape != scores.shape:
            raise ValueError(f"value_terms must have the shape of scores {tuple(scores.shape)}, "
                             f"got {tuple(value_terms.shape)}")
        terms = rewards.unsqueeze(1) * scores - value_terms
    else:
        advantages = rewards if baseline == "none" else group_advantages(rewards, group_size, _GROUP_METHOD[baseline])
        terms = advantages.unsqueeze(1) * scores
    return terms.view(-1, group_size, scores.shape[1]).mean(dim=1)


def gradient_statistics(estimates, reference, *, n_prompts: int) -> dict[str, float]:
    """Variance and bias of the batch gradient ĝ = (1/P) Σ_x ĝ_x, one group per prompt.

    ``estimates`` (P · M, D): M independent group estimates for each of P prompts, prompt-major (as
    ``group_gradient_estimates`` returns them, flattened or not); ``reference`` (D,): the gradient
    they estimate, measured independently with many samples. Returns

    - ``variance``: E‖ĝ − E ĝ‖² = (1/P²) Σ_x tr Cov(ĝ_x), each Cov from the M groups (divide by M − 1);
    - ``mean_norm``, ``reference_norm``: ‖E ĝ‖ (E ĝ estimated by the mean over all groups) and ‖∇J‖;
    - ``scale``: ⟨E ĝ, ∇J⟩ / ‖∇J‖² (1 for an unbiased estimator), ``cosine`` between the two;
    - ``relative_bias``: ‖E ĝ − ∇J‖ / ‖∇J‖; ``mean_noise``: √(variance / M) / ‖∇J‖, how much of that
      an unbiased estimator shows from the finite sample alone;
    - ``relative_variance``: variance / ‖E ĝ‖², the noise-to-signal of one batch (scale-free).
    """
    n_prompts = check_int("n_prompts", n_prompts, minimum=1)
    estimates = as_float_tensor("estimates", estimates, ndim=(2, 3)).to(torch.float64)
    estimates = estimates.reshape(n_prompts, -1, estimates.shape[-1])
    groups = estimates.shape[1]
    if groups < 2:
        raise ValueError("estimates must hold at least 2 groups per prompt to measure a variance")
    reference = as_float_tensor("reference", reference, ndim=(1,)).to(torch.float64)
    if reference.shape[0] != estimates.shape[-1]:
        raise ValueError(f"reference must have {estimates.shape[-1]} entries, got {reference.shape[0]}")
    per_prompt_mean = estimates.mean(dim=1)
    variance = float(((estimates - per_prompt_mean.unsqueeze(1)) ** 2).sum() / (groups - 1)) / n_prompts**2
    mean = per_prompt_mean.mean(dim=0)
    reference_norm = float(reference.norm())
    mean_norm = float(mean.norm())
    return {
        "variance": variance,
        "relative_variance": variance / mean_norm**2,
        "mean_norm": mean_norm,
        "reference_norm": reference_norm,
        "scale": float(mean @ reference) / reference_norm**2,
        "cosine": float(mean @ reference) / (mean_norm * reference_norm),
        "relative_bias": float((mean - reference).norm()) / reference_norm,
        "mean_noise": (variance / groups) ** 0.5 / reference_norm,
    }


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
def completion_hidden_states(model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
    """(B, C, H): the last hidden state (after the final norm) that predicts each completion token.

    Entry t is the state in which token t is chosen: what the output layer, or a critic's value
    head (``rlbook.trainers.Critic``), reads.
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1).long()
    output = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=_position_ids(attention_mask),
                   output_hidden_states=True, use_cache=False, logits_to_keep=1)
    width = completion_ids.shape[1]
    return output.hidden_states[-1][:, -width - 1:-1]


def fit_critic_head(critic, prompt_ids, prompt_mask, completion_ids, completion_mask, rewards, *,
                    ridge: float = 1e-3):
    """Fit a ``rlbook.trainers.Critic``'s value head by ridge regression; its body stays frozen. In place.

    The target at every completion token is the final reward R (the return with γ = 1, the reward
    paid at the end), so V(x, y_<t) ≈ E[R | x, y_<t]: the least-squares solution of
    min_{w,c} Σ_{i,t} (wᵀh_{i,t} + c − R_i)² + ridge · ‖w‖², over the critic body's hidden states.
    This is what many gradient steps on ``value_loss`` with a frozen body converge to, in one solve.
    Returns the fraction of the reward's variance (over tokens) that the fitted values explain.
    """
    check_positive("ridge", ridge, allow_zero=True)
    rewards = as_float_tensor("rewards", rewards, ndim=(1,)).to(torch.float64)
    if rewards.shape[0] != completion_ids.shape[0]:
        raise ValueError(f"rewards must have one entry per completion ({completion_ids.shape[0]}), "
                         f"got {rewards.shape[0]}")
    real = completion_mask.bool()
    features = completion_hidden_states(critic.body, prompt_ids, prompt_mask, completion_ids,
                                        completion_mask)[real].to(torch.float64)
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


def baseline_statistics(scores, rewards, reference, *, group_size: int, n_prompts: int, value_terms=None,
                        baselines=BASELINES) -> dict[str, dict[str, float]]:
    """``gradient_statistics`` of each baseline's estimate at group size G, on the same completions.

    ``scores``, ``rewards``, ``value_terms`` as in ``group_gradient_estimates`` (n_prompts blocks of
    N completions; G must divide N and leave at least 2 groups per prompt); "critic" is skipped when
    ``value_terms`` is None. Returns {baseline: statistics}.
    """
    return {baseline: gradient_statistics(group_gradient_estimates(scores, rewards, group_size, baseline=baseline,
                                                                   value_terms=value_terms),
                                          reference, n_prompts=n_prompts)
            for baseline in baselines if baseline != "critic" or value_terms is not None}
