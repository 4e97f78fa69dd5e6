"""The policy update (rlbook.update): minibatch plans, the clipped optimizer step, and k steps on one rollout
that match the hand-written loop they replaced."""

from __future__ import annotations

import copy

import pytest
import torch

from rlbook.losses import policy_loss
from rlbook.models import build_char_tokenizer, build_tiny_model
from rlbook.rollout import completion_logprobs, sample
from rlbook.update import minibatch_plan, optimizer_step, policy_step, policy_update


@pytest.fixture(scope="module")
def model_and_rollout():
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, shape="test", seed=0)
    rollout = sample(model, tokenizer, ["1+2=", "3+4=", "5+6="], num_samples=4, max_new_tokens=6, seed=0)
    advantages = torch.linspace(-1.0, 1.0, len(rollout))
    return model, rollout, advantages


def _rollout_tensors(rollout, rows):
    return [t[rows] for t in (rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids, rollout.completion_mask)]


def test_each_pass_of_a_plan_trains_on_every_row_once():
    rows = torch.arange(10)
    plan = minibatch_plan(rows, 4, epochs=3, generator=torch.Generator().manual_seed(0))
    assert [len(m) for m in plan] == [4, 4, 2] * 3
    for epoch in range(3):
        assert sorted(torch.cat(plan[3 * epoch:3 * epoch + 3]).tolist()) == list(range(10))
    assert plan[0].tolist() != plan[3].tolist()  # each pass shuffles afresh


def test_one_minibatch_per_pass_keeps_the_rows_in_order():
    rows = torch.tensor([7, 2, 5])
    for size in (None, 3, 8):
        assert [m.tolist() for m in minibatch_plan(rows, size, epochs=2)] == [[7, 2, 5], [7, 2, 5]]


def test_the_optimizer_step_clips_and_reports_the_norm_before_clipping():
    weight = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    norm = optimizer_step(optimizer, (weight * torch.tensor([3.0, 4.0])).sum(), [weight], max_grad_norm=1.0)
    assert norm == pytest.approx(5.0)
    assert weight.detach().tolist() == pytest.approx([-0.6, -0.8], rel=1e-5)  # the step has length 1
    optimizer_step(optimizer, (weight * torch.tensor([3.0, 4.0])).sum(), [weight], max_grad_norm=None)
    assert weight.detach().tolist() == pytest.approx([-3.6, -4.8], rel=1e-5)


@pytest.mark.parametrize("max_grad_norm", [None, 0.5])
def test_policy_update_is_the_hand_written_loop(model_and_rollout, max_grad_norm):
    model, rollout, advantages = model_and_rollout
    minibatches = [torch.tensor([0, 5, 9, 2]), torch.arange(len(rollout)), torch.tensor([11, 1])]
    ref_logp = rollout.logprobs - 0.1
    by_hand, routine = copy.deepcopy(model), copy.deepcopy(model)
    optimizer = torch.optim.AdamW(by_hand.parameters(), lr=1e-2, weight_decay=0.0)
    for rows in minibatches:
        logp = completion_logprobs(by_hand, *_rollout_tensors(rollout, rows))
        loss, _ = policy_loss(logp, rollout.logprobs[rows], advantages[rows], rollout.completion_mask[rows],
                              variant="grpo", ref_logp=ref_logp[rows], beta=0.05)
        optimizer.zero_grad()
        loss.backward()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(by_hand.parameters(), max_grad_norm)
        optimizer.step()
    steps = policy_update(routine, torch.optim.AdamW(routine.parameters(), lr=1e-2, weight_decay=0.0), rollout,
                          advantages, minibatches, ref_logp=ref_logp, max_grad_norm=max_grad_norm,
                          variant="grpo", beta=0.05)
    assert len(steps) == 3 and {"loss", "grad_norm", "clip_frac", "kl"} <= set(steps[0])
    for a, b in zip(by_hand.parameters(), routine.parameters()):
        assert torch.equal(a, b)


def test_the_first_step_is_on_policy_and_later_ones_are_not(model_and_rollout):
    model, rollout, advantages = model_and_rollout
    policy = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    rows = torch.arange(len(rollout))
    first, entropy = policy_step(policy, optimizer, rollout, rows, advantages, variant="grpo")
    second, _ = policy_step(policy, optimizer, rollout, rows, advantages, variant="grpo")
    assert first["ratio_min"] == pytest.approx(1.0, abs=1e-4) and first["ratio_max"] == pytest.approx(1.0, abs=1e-4)
    assert second["ratio_max"] - second["ratio_min"] > 1e-3
    assert entropy.shape == rollout.completion_ids.shape and not entropy.requires_grad
    assert first["grad_norm"] > 0


def test_bad_plans_name_the_argument():
    with pytest.raises(ValueError, match="minibatch_size"):
        minibatch_plan(torch.arange(4), 0)
    with pytest.raises(ValueError, match="epochs"):
        minibatch_plan(torch.arange(4), 2, epochs=0)
