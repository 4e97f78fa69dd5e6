"""Loss aggregation modes and each token's weight (rlbook.aggregation)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.aggregation import (
    AGGREGATION_MODES,
    TRL_LOSS_TYPES,
    VERL_LOSS_AGG_MODES,
    aggregate,
    global_token_mean,
    masked_mean,
    token_weights,
)

# Two responses of lengths 2 and 4 in a (2, 4) grid.
MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
LOSS = torch.tensor([[1.0, 3.0, 99.0, 99.0], [2.0, 2.0, 2.0, 6.0]])


def test_token_weights_worked_example():
    assert torch.allclose(token_weights(MASK, "token_mean"), MASK / 6)
    assert torch.allclose(token_weights(MASK, "seq_mean_token_mean"), torch.tensor([[1 / 4, 1 / 4, 0, 0], [1 / 8] * 4]))
    assert torch.allclose(token_weights(MASK, "seq_mean_token_sum"), MASK / 2)
    assert torch.allclose(token_weights(MASK, "seq_mean_token_sum_norm", max_len=10), MASK / 20)


def test_aggregate_worked_example():
    # Sequence means 2 and 3; token sums 4 and 12; 16 over 6 tokens.
    assert aggregate(LOSS, MASK, "seq_mean_token_mean").item() == pytest.approx(2.5)
    assert aggregate(LOSS, MASK, "token_mean").item() == pytest.approx(16 / 6)
    assert aggregate(LOSS, MASK, "seq_mean_token_sum").item() == pytest.approx(8.0)
    assert aggregate(LOSS, MASK, "seq_mean_token_sum_norm", max_len=8).item() == pytest.approx(1.0)


def test_sequence_mean_gives_short_responses_more_weight_per_token():
    weights = token_weights(MASK, "seq_mean_token_mean")
    assert weights[0, 0] > weights[1, 0]
    assert torch.allclose(weights.sum(dim=1), torch.tensor([0.5, 0.5]))
    flat = token_weights(MASK, "token_mean")
    assert flat[0, 0] == flat[1, 0] and flat.sum().item() == pytest.approx(1.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.integers(1, 3), st.integers(0, 2**16))
def test_appending_padding_never_changes_any_mode(lengths, extra, seed):
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    loss = torch.randn(len(lengths), width, generator=generator)
    padded_mask = torch.cat([mask, torch.zeros(len(lengths), extra, dtype=mask.dtype)], dim=1)
    padded_loss = torch.cat([loss, 1e6 * torch.randn(len(lengths), extra, generator=generator)], dim=1)
    for mode in AGGREGATION_MODES:
        expected = aggregate(loss, mask, mode, max_len=16)
        assert torch.allclose(aggregate(padded_loss, padded_mask, mode, max_len=16), expected, atol=1e-5)


def test_nan_on_padding_is_ignored_but_nan_on_a_token_is_an_error():
    loss = torch.tensor([[1.0, float("nan")]])
    assert aggregate(loss, torch.tensor([[1, 0]]), "token_mean").item() == 1.0
    with pytest.raises(ValueError, match="per_token_loss"):
        aggregate(loss, torch.ones(1, 2), "token_mean")


def test_gradient_of_aggregate_is_the_token_weight():
    loss = LOSS.clone().requires_grad_()
    for mode in AGGREGATION_MODES:
        (grad,) = torch.autograd.grad(aggregate(loss, MASK, mode, max_len=5), loss)
        assert torch.allclose(grad, token_weights(MASK, mode, max_len=5))


def test_library_name_maps_point_at_known_modes():
    assert set(TRL_LOSS_TYPES.values()) <= set(AGGREGATION_MODES)
    assert set(VERL_LOSS_AGG_MODES.values()) == set(AGGREGATION_MODES)


def test_masked_mean():
    assert masked_mean(LOSS, MASK).item() == pytest.approx(16 / 6)


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: token_weights(MASK, "sum"), "mode"),
        (lambda: token_weights(MASK, "seq_mean_token_sum_norm"), "max_len"),
        (lambda: token_weights(MASK, "seq_mean_token_sum_norm", max_len=0), "max_len"),
        (lambda: token_weights(torch.zeros(2, 3), "token_mean"), "mask"),
        (lambda: token_weights(torch.ones(3), "token_mean"), "mask"),
        (lambda: token_weights(torch.full((2, 2), 0.5), "token_mean"), "mask"),
        (lambda: aggregate(torch.zeros(2, 3), MASK), "mask"),
        (lambda: aggregate(torch.zeros(8), MASK), "per_token_loss"),
    ],
)
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_own_weights_fn_replaces_token_weights_and_never_weights_padding():
    from rlbook.aggregation import aggregate, token_weights

    loss = torch.tensor([[1.0, 2.0, 5.0], [3.0, 4.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    for mode in ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"):
        own = aggregate(loss, mask, mode, max_len=4, weights_fn=lambda m, md, L: token_weights(m, md, max_len=L))
        assert torch.equal(own, aggregate(loss, mask, mode, max_len=4))
    everywhere = aggregate(loss, mask, "token_mean", weights_fn=lambda m, md, L: torch.ones_like(m))
    assert everywhere.item() == 1.0 + 2.0 + 3.0
    with pytest.raises(ValueError, match="weights_fn must return"):
        aggregate(loss, mask, "token_mean", weights_fn=lambda m, md, L: 1.0)


def test_a_token_mean_per_piece_is_not_the_batch_token_mean_and_the_global_count_restores_it():
    # two pieces (ranks or micro-batches) of two responses each: 2 + 1 tokens, then 4 + 4
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.float64)
    loss = torch.tensor([[1.0, 2.0, 0, 0], [3.0, 0, 0, 0], [0.5] * 4, [1.5] * 4], dtype=torch.float64)
    whole = aggregate(loss, mask, "token_mean")
    pieces = (slice(0, 2), slice(2, 4))
    per_piece = sum(aggregate(loss[p], mask[p], "token_mean") for p in pieces) / 2  # DDP's mean of the pieces
    assert whole.item() == pytest.approx(14 / 11)
    assert per_piece.item() == pytest.approx((6 / 3 + 8 / 8) / 2)  # 1.5: the 3-token piece weighs 8/3 × more
    fixed = global_token_mean(mask.sum(), 2)
    restored = sum(aggregate(loss[p], mask[p], "token_mean", weights_fn=fixed) for p in pieces) / 2
    assert restored.item() == pytest.approx(whole.item())
    # the per-sequence mode needs no global count when the pieces hold equal numbers of sequences
    assert (sum(aggregate(loss[p], mask[p]) for p in pieces) / 2).item() == pytest.approx(aggregate(loss, mask).item())
    with pytest.raises(ValueError, match="token_mean"):
        aggregate(loss, mask, "seq_mean_token_mean", weights_fn=fixed)
    with pytest.raises(ValueError, match="shards"):
        global_token_mean(11, 0)
    with pytest.raises(ValueError, match="total_tokens"):
        global_token_mean(0, 2)
