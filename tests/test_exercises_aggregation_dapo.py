"""The checkers of lessons 10 and 11: they pass the reference, and name each classic mistake."""

import pytest
import torch

from rlbook.aggregation import token_weights
from rlbook.exercises.aggregation import check_token_weights
from rlbook.exercises.dapo import check_soft_overlong_penalty
from rlbook.shaping import soft_overlong_penalty


def _capture(capsys, checker, fn):
    result = checker(fn)
    return result, capsys.readouterr().out


def test_token_weights_reference_passes(capsys):
    result, out = _capture(capsys, check_token_weights, lambda m, mode, L: token_weights(m, mode, max_len=L))
    assert result is True and out.startswith("✓")


def _swap(mode_for):
    return lambda m, mode, L: token_weights(m, mode_for.get(mode, mode), max_len=L)


@pytest.mark.parametrize("wrong, words", [
    (_swap({"seq_mean_token_sum_norm": "seq_mean_token_mean"}), "GRPO's seq_mean_token_mean"),
    (_swap({"token_mean": "seq_mean_token_mean"}), "GRPO's seq_mean_token_mean"),
    (_swap({"seq_mean_token_mean": "token_mean"}), "DAPO's token_mean"),
    (_swap({"seq_mean_token_sum_norm": "seq_mean_token_sum"}), "seq_mean_token_sum (1/B"),
    (lambda m, mode, L: (m / (m.shape[0] * m.shape[1]) if mode == "seq_mean_token_sum_norm"
                         else token_weights(m, mode, max_len=L)), "padded width T"),
    # GRPO's classic slip, a mean over the padded token axis: the hint must send the reader to |o_i|, not to L
    (lambda m, mode, L: (m / (m.shape[0] * m.shape[1]) if mode == "seq_mean_token_mean"
                         else token_weights(m, mode, max_len=L)), "its own length |o_i|"),
    (lambda m, mode, L: token_weights(m, mode, max_len=L) * (m.shape[0] if mode != "token_mean" else 1),
     "divide by B"),
    (lambda m, mode, L: torch.ones_like(m) / m.numel() if mode == "token_mean" else token_weights(m, mode, max_len=L),
     "padding tokens got a weight"),
    # token_mean divided by B as well (a hybrid of GRPO's batch mean and DAPO's token count)
    (lambda m, mode, L: token_weights(m, mode, max_len=L) / (m.shape[0] if mode == "token_mean" else 1),
     "do not divide by B as well"),
    (lambda m, mode, L: -token_weights(m, mode, max_len=L), "wrong sign"),
    (lambda m, mode, L: token_weights(m, mode, max_len=L)[:, :3], "expected shape"),
    (lambda m, mode, L: 1 / 0, "ZeroDivisionError"),
])
def test_token_weight_mistakes_are_named(capsys, wrong, words):
    result, out = _capture(capsys, check_token_weights, wrong)
    assert result is False and words in out, out


def test_penalty_reference_passes(capsys):
    result, out = _capture(capsys, check_soft_overlong_penalty, soft_overlong_penalty)
    assert result is True and out.startswith("✓")


def _plain_python_penalty(n, max_len, cache_len):
    if n <= max_len - cache_len:
        return 0.0
    if n <= max_len:
        return (max_len - cache_len - n) / cache_len
    return -1.0


def test_a_plain_python_penalty_passes(capsys):
    """The library computes in float32; an exact float64 answer must still pass."""
    result, out = _capture(capsys, check_soft_overlong_penalty, _plain_python_penalty)
    assert result is True and out.startswith("✓"), out


def test_a_plain_python_late_ramp_is_named(capsys):
    def late(n, max_len, cache_len):
        return 0.0 if n <= max_len - cache_len + 1 else max(-1.0, (max_len - cache_len - n) / cache_len)
    result, out = _capture(capsys, check_soft_overlong_penalty, late)
    assert result is False and "one token late" in out, out


def _ramp(n, max_len, cache_len):
    return (max_len - cache_len - n) / cache_len


@pytest.mark.parametrize("wrong, words", [
    (lambda n, L, c: -soft_overlong_penalty(n, L, c), "sign is flipped"),
    (lambda n, L, c: 0.0 if n <= L - c + 1 else soft_overlong_penalty(n, L, c), "one token late"),
    (lambda n, L, c: -1 / c if n == L - c else soft_overlong_penalty(n, L, c), "one token early"),
    (lambda n, L, c: _ramp(n, L, c) if n > L - c else 0.0, "exactly −1 for every |y| > L_max"),
    (lambda n, L, c: max(-1.0, (L - c - n) / L) if n > L - c else 0.0, "divides by L_cache"),
    (lambda n, L, c: (L - n) / c if L - c < n <= L else soft_overlong_penalty(n, L, c), "measured from L_max"),
    # DAPO's "expected maximum length" read as L_max, the cache added after it
    (lambda n, L, c: max(-1.0, (L - n) / c) if n > L else 0.0, "placed after L_max"),
    # the off-by-one a reader actually writes shifts the whole ramp, and // floors it to −1
    (lambda n, L, c: 0.0 if n <= L - c else (max(-1.0, (L - c + 1 - n) / c) if n <= L else -1.0), "shifted one token late"),
    (lambda n, L, c: 0.0 if n <= L - c else (max(-1.0, (L - c - 1 - n) / c) if n <= L else -1.0), "shifted one token early"),
    (lambda n, L, c: 0.0 if n <= L - c else (max(-1, (L - c - n) // c) if n <= L else -1.0), "integer division"),
    (lambda n, L, c: 0.0 if n <= L - c else max(-1.0, (L - c - n) / max(c - 1, 1)), "divides by L_cache − 1"),
    (lambda n, L, c: 0.5, "expected 0.0000, got 0.5000"),
    (lambda n, L, c: [0.0, 1.0], "one number"),
])
def test_penalty_mistakes_are_named(capsys, wrong, words):
    result, out = _capture(capsys, check_soft_overlong_penalty, wrong)
    assert result is False and words in out, out
