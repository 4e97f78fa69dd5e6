"""The offline trainers' batch order: every row once per epoch, and length grouping when asked."""

from __future__ import annotations

import random

import pytest

from rlbook.trainers.data import shuffled_batches


def _epoch(batches, n_batches):
    return [next(batches) for _ in range(n_batches)]


def test_plain_batches_cover_every_row_once_per_epoch():
    batches = shuffled_batches(10, 4, random.Random(0))
    first = _epoch(batches, 3)
    assert [e for e, _ in first] == [0, 0, 0] and [len(b) for _, b in first] == [4, 4, 2]
    assert sorted(i for _, b in first for i in b) == list(range(10))
    assert next(batches)[0] == 1


def test_length_grouping_batches_similar_lengths_and_still_covers_every_row():
    rng = random.Random(1)
    lengths = [rng.randint(1, 100) for _ in range(64)]
    batches = shuffled_batches(64, 4, random.Random(0), lengths=lengths, group_size=4)  # groups of 16 rows
    epoch = _epoch(batches, 16)
    assert all(e == 0 for e, _ in epoch)
    assert sorted(i for _, b in epoch for i in b) == list(range(64))
    grouped_spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for _, b in epoch)
    plain = _epoch(shuffled_batches(64, 4, random.Random(0)), 16)
    plain_spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for _, b in plain)
    assert grouped_spread < plain_spread / 2  # far less padding inside a batch


def test_same_seed_same_batches():
    lengths = list(range(20))
    a = _epoch(shuffled_batches(20, 3, random.Random(5), lengths=lengths), 14)
    b = _epoch(shuffled_batches(20, 3, random.Random(5), lengths=lengths), 14)
    assert a == b


@pytest.mark.parametrize("kwargs, name", [(dict(lengths=[1, 2]), "lengths"), (dict(group_size=0), "group_size")])
def test_bad_grouping_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        next(shuffled_batches(5, 2, random.Random(0), **kwargs))


def test_across_epochs_gives_full_batches_from_back_to_back_shuffles():
    batches = shuffled_batches(5, 3, random.Random(2), across_epochs=True)
    first = _epoch(batches, 5)  # 15 rows: exactly three shuffled epochs of 5
    assert all(len(b) == 3 for _, b in first)
    rows = [i for _, b in first for i in b]
    assert [sorted(rows[k:k + 5]) for k in (0, 5, 10)] == [list(range(5))] * 3
    assert [e for e, _ in first] == [0, 0, 1, 1, 2]  # the epoch of each batch's first row
    rng = random.Random(2)  # the stream is the seeded shuffles, one per epoch, in order
    expected = []
    for _ in range(3):
        order = list(range(5))
        rng.shuffle(order)
        expected += order
    assert rows == expected


def test_a_batch_larger_than_the_corpus_is_one_shuffled_pass():
    batches = shuffled_batches(3, 8, random.Random(0), across_epochs=True)
    assert sorted(next(batches)[1]) == [0, 1, 2]


@pytest.mark.parametrize("args, kwargs, name", [((0, 2), {}, "n_rows"), ((5, 0), {}, "batch_size"),
                                                ((5, 2), dict(across_epochs=True, lengths=[1] * 5), "lengths")])
def test_bad_sizes_name_themselves(args, kwargs, name):
    with pytest.raises(ValueError, match=name):
        next(shuffled_batches(*args, random.Random(0), **kwargs))
