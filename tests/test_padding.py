"""Padding (rlbook.padding): prompts on the left, completions on the right, masks that mark the real tokens."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.padding import cat_padded, pad_to, stack_padded

token_lists = st.lists(st.lists(st.integers(1, 50), max_size=6), min_size=1, max_size=5).filter(
    lambda rows: any(rows))


def test_stack_padded_on_each_side():
    ids, mask = stack_padded([[5, 6, 7], [8]], 0, side="left")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    ids, mask = stack_padded([[5, 6, 7], [8]], 0, side="right")
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert ids.dtype == mask.dtype == torch.long


@settings(max_examples=50, deadline=None)
@given(token_lists, st.sampled_from(["left", "right"]))
def test_the_mask_recovers_every_list(rows, side):
    ids, mask = stack_padded(rows, -1, side=side)
    assert ids.shape == (len(rows), max(len(r) for r in rows))
    assert [ids[i][mask[i].bool()].tolist() for i in range(len(rows))] == rows
    assert bool((ids[mask == 0] == -1).all())


def test_pad_to_widens_and_never_crops():
    tensor = torch.tensor([[1.0, 2.0]])
    assert pad_to(tensor, 4, 0.5, side="left").tolist() == [[0.5, 0.5, 1.0, 2.0]]
    assert pad_to(tensor, 3).tolist() == [[1.0, 2.0, 0.0]]
    with pytest.raises(ValueError, match="width"):
        pad_to(tensor, 1)


def test_cat_padded_joins_batches_of_different_widths():
    joined = cat_padded([torch.tensor([[1, 2, 3]]), torch.tensor([[4], [5]])], 9, side="left")
    assert joined.tolist() == [[1, 2, 3], [9, 9, 4], [9, 9, 5]]


@pytest.mark.parametrize("call, name", [
    (lambda: stack_padded([], 0), "token_lists"),
    (lambda: stack_padded([[1]], 0, side="middle"), "side"),
    (lambda: pad_to(torch.zeros(3), 4), "tensor"),
    (lambda: cat_padded([]), "tensors"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
