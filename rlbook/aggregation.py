"""Loss aggregation: how a (B, T) grid of per-token losses becomes one number.

Every online method computes a loss ``ℓ[i, t]`` for token t of response i and must then average.
*What it divides by* decides how much each token moves the model, and the choice is not neutral:

================================  ===========================================  ======================
mode                              loss                                         each token's weight
================================  ===========================================  ======================
``seq_mean_token_mean`` (GRPO)    (1/B) Σ_i (1/|o_i|) Σ_t ℓ[i, t]              1 / (B · |o_i|)
``token_mean`` (DAPO)             Σ_i Σ_t ℓ[i, t] / Σ_i |o_i|                  1 / Σ_j |o_j|
``seq_mean_token_sum``            (1/B) Σ_i Σ_t ℓ[i, t]                        1 / B
``seq_mean_token_sum_norm``       Σ_i Σ_t ℓ[i, t] / (B · L)   (L a constant)   1 / (B · L)
(Dr.GRPO)
================================  ===========================================  ======================

- ``seq_mean_token_mean`` is GRPO's objective (Shao et al. 2024, arXiv:2402.03300, §4.1): every
  response counts equally, so a token of a long response weighs less than a token of a short one.
  Liu et al. (2025, "Understanding R1-Zero-Like Training", arXiv:2503.20783) show the
  resulting *length bias*: a wrong answer (A < 0) is penalised less per token when it is longer.
- ``token_mean`` is DAPO's token-level loss (Yu et al. 2025, arXiv:2503.14476, §3.3): every
  token in the batch counts equally, whatever response it belongs to.
- ``seq_mean_token_sum_norm`` is Dr.GRPO's fix (Liu et al. 2025): sum each response's
  tokens and divide by a *constant* L (the generation budget, e.g. ``max_new_tokens``), so no weight
  depends on a response's own length. ``max_len`` must be given: it is the budget, not the padded
  width of this batch (which would let padding change the loss).
- ``seq_mean_token_sum`` is the plain REINFORCE estimator Σ_t ∇log π · A per response (Williams
  1992), averaged over responses; it is unbiased for the sequence-level policy gradient.

Rows whose mask is all zero get weight 0 but still count in B (the same convention as TRL).
``TRL_LOSS_TYPES`` and ``VERL_LOSS_AGG_MODES`` map the two libraries' names onto these modes.
"""

from __future__ import annotations

import torch

from rlbook._checks import as_float_tensor, as_mask, check_choice, check_positive

__all__ = [
    "AGGREGATION_MODES",
    "AGGREGATION_RULES",
    "TRL_LOSS_TYPES",
    "VERL_LOSS_AGG_MODES",
    "token_weights",
    "aggregate",
    "global_token_mean",
    "masked_mean",
    "response_mask",
]

AGGREGATION_MODES = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")
# Each mode in words, as ``rlbook.losses.explain`` prints it (the table above has the weights).
AGGREGATION_RULES = {
    "seq_mean_token_mean": "sequence mean of token means, (1/B) Σ_i (1/|o_i|) Σ_t ℓ_it: each response counts "
                           "equally (GRPO)",
    "token_mean": "token mean, Σ_i Σ_t ℓ_it / Σ_i |o_i|: each token of the batch counts equally (DAPO)",
    "seq_mean_token_sum": "sequence mean of token sums, (1/B) Σ_i Σ_t ℓ_it (REINFORCE)",
    "seq_mean_token_sum_norm": "token sum over a fixed constant, Σ_i Σ_t ℓ_it / (B·L), L = max_len the "
                               "generation budget (Dr.GRPO)",
}

# TRL 1.16 GRPOConfig.loss_type -> mode. "bnpo" normalises by the local batch's tokens and "dapo" /
# "cispo" by the whole accumulated batch's tokens: on one process without accumulation they coincide.
TRL_LOSS_TYPES = {
    "grpo": "seq_mean_token_mean",
    "sapo": "seq_mean_token_mean",
    "bnpo": "token_mean",
    "dapo": "token_mean",
    "cispo": "token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",  # L = max_completion_length
    "luspo": "seq_mean_token_sum",
}

# verl actor.loss_agg_mode -> mode ("seq-mean-token-sum-norm" divides by loss_scale_factor or T).
VERL_LOSS_AGG_MODES = {
    "token-mean": "token_mean",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "seq-mean-token-sum": "seq_mean_token_sum",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}


def token_weights(mask, mode: str = "seq_mean_token_mean", *, max_len: int | None = None) -> torch.Tensor:
    """Each token's weight w[i, t] under ``mode``, so that the aggregated loss is Σ w · ℓ.

    ``mask`` is the (B, T) 0/1 response mask; padding gets weight 0. See the module docstring for
    the formula of each mode; ``max_len`` is the constant L of ``seq_mean_token_sum_norm``.
    """
    check_choice("mode", mode, AGGREGATION_MODES)
    mask = response_mask(mask)
    n_seqs = mask.shape[0]
    if mode == "token_mean":
        return mask / mask.sum()
    if mode == "seq_mean_token_sum":
        return mask / n_seqs
    if mode == "seq_mean_token_sum_norm":
        if max_len is None:
            raise ValueError(
                "max_len is required for mode 'seq_mean_token_sum_norm': Dr.GRPO divides by a constant, "
                "the generation budget (e.g. max_new_tokens), not by this batch's padded width"
            )
        max_len = check_positive("max_len", max_len)
        return mask / (n_seqs * max_len)
    lengths = mask.sum(dim=1, keepdim=True).clamp(min=1.0)
    return mask / (n_seqs * lengths)


def aggregate(per_token_loss, mask, mode: str = "seq_mean_token_mean", *, max_len: int | None = None,
              weights_fn=None) -> torch.Tensor:
    """Reduce a (B, T) per-token loss to a scalar: Σ_{i,t} w[i, t] · ℓ[i, t] with w from ``token_weights``.

    Padded positions never contribute, whatever value they hold (a NaN there is replaced by 0).
    ``weights_fn(mask, mode, max_len)``, when given, computes the (B, T) weights in place of
    ``token_weights`` (a reader's own, as the course's assignment 4 trains with).
    """
    per_token_loss = torch.as_tensor(per_token_loss)
    if per_token_loss.dim() != 2:
        raise ValueError(f"per_token_loss must have 2 dimensions (B, T), got shape {tuple(per_token_loss.shape)}")
    mask = torch.as_tensor(mask)
    if per_token_loss.is_floating_point():
        mask = mask.to(per_token_loss.dtype)  # so the weights are computed at the loss's precision
    if weights_fn is None:
        weights = token_weights(mask, mode, max_len=max_len)
    else:
        check_choice("mode", mode, AGGREGATION_MODES)
        weights = weights_fn(mask, mode, max_len)
        if not isinstance(weights, torch.Tensor):
            raise ValueError(f"weights_fn must return a (B, T) tensor of token weights, got {type(weights).__name__}")
        if tuple(weights.shape) == tuple(mask.shape):  # padding never counts, whatever weight it was given
            weights = torch.where(mask > 0, weights, torch.zeros_like(weights))
    weights = weights.to(per_token_loss.dtype)
    if tuple(weights.shape) != tuple(per_token_loss.shape):
        raise ValueError(f"mask must have shape {tuple(per_token_loss.shape)}, got {tuple(weights.shape)}")
    padded = weights == 0
    kept = torch.where(padded, torch.zeros_like(per_token_loss), per_token_loss)
    as_float_tensor("per_token_loss", kept)  # finiteness of the tokens that count
    return (weights * kept).sum()



def global_token_mean(total_tokens, shards: int):
    """A ``weights_fn`` for ``aggregate`` (and ``policy_loss(token_weights_fn=...)``): DAPO's token mean kept
    exact when the batch is split into ``shards`` pieces whose losses are then averaged.

    Data parallelism averages the ranks' gradients (DistributedDataParallel), and gradient accumulation over
    k micro-batches divides each micro-batch's loss by k: either way the step's loss is the mean of the
    pieces' losses. A token mean taken inside each piece, Σ_piece ℓ / |tokens in piece|, then gives a token
    of a piece with few tokens more weight than one of a crowded piece: the mean of the pieces' token means
    is not the batch's token mean (Yu et al. 2025, arXiv:2503.14476, §3.3). The fix divides every piece's
    token sum by the *whole* batch's token count over the number of pieces, w = ``shards`` / ``total_tokens``,
    so that the mean over the pieces weighs every token 1 / ``total_tokens`` (TRL's ``loss_type="dapo"`` /
    ``"cispo"``: ``num_items_in_batch / num_processes``; verl's ``agg_loss``: the global batch's token count
    × ``dp_size``). ``total_tokens``: the response tokens of the whole batch, gathered from every piece.
    Only ``mode="token_mean"`` is accepted: the per-sequence modes need no global count when every piece
    holds the same number of sequences.
    """
    total_tokens = check_positive("total_tokens", float(total_tokens))
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        raise ValueError(f"shards must be a positive int, got {shards!r}")

    def weights(mask, mode, max_len):
        if mode != "token_mean":
            raise ValueError(f"global_token_mean is a weights_fn for mode 'token_mean', got mode {mode!r}")
        return response_mask(mask) * (shards / total_tokens)

    return weights

def response_mask(mask, *, name: str = "mask") -> torch.Tensor:
    """Check and return a (B, T) 0/1 float mask that selects at least one token."""
    mask = torch.as_tensor(mask)
    if mask.dim() != 2:
        raise ValueError(f"{name} must have 2 dimensions (B, T), got shape {tuple(mask.shape)}")
    like = torch.empty(mask.shape, dtype=mask.dtype if mask.is_floating_point() else torch.float32)
    return as_mask(name, mask, like)


def masked_mean(values, mask) -> torch.Tensor:
    """Mean of ``values`` over the positions where ``mask`` is 1: Σ m·x / Σ m."""
    values = torch.as_tensor(values)
    mask = as_mask("mask", mask, values if values.is_floating_point() else values.float())
    return (values * mask).sum() / mask.sum()
