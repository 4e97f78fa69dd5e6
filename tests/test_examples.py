"""The single-file references in examples/: each one's math equals the library's, and each one trains.

The examples restate the library's formulas on purpose (a reader holds the whole method in one file),
so these tests are what keeps the two copies the same: value and gradient on identical random tensors.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest
import torch

from rlbook.advantages import gae, group_advantages
from rlbook.losses import dpo_loss, policy_loss, value_loss
from rlbook.models import load_model
from rlbook.tasks import get_task

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = {"atol": 1e-6, "rtol": 1e-6}


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


grpo, ppo, dpo = (load_example(name) for name in ("grpo", "ppo", "dpo"))


def token_batch(seed: int, rows: int = 6, width: int = 7):
    """Random (B, T) log-probs of three policies and a ragged mask, one row empty."""
    generator = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(rows, width, generator=generator, dtype=torch.float64) * 2).requires_grad_()
    old_logp = logp.detach() + 0.3 * torch.randn(rows, width, generator=generator, dtype=torch.float64)
    ref_logp = logp.detach() + 0.3 * torch.randn(rows, width, generator=generator, dtype=torch.float64)
    lengths = torch.randint(1, width + 1, (rows,), generator=generator)
    lengths[-1] = 0
    mask = (torch.arange(width) < lengths.unsqueeze(1)).to(torch.float64)
    return logp, old_logp, ref_logp, mask, generator


def assert_same_value_and_gradient(mine: torch.Tensor, library: torch.Tensor, wrt: torch.Tensor) -> None:
    (mine_grad,) = torch.autograd.grad(mine, wrt)
    (library_grad,) = torch.autograd.grad(library, wrt)
    torch.testing.assert_close(mine, library, **TOLERANCE)
    torch.testing.assert_close(mine_grad, library_grad, **TOLERANCE)
    assert library_grad.abs().sum() > 0  # the comparison is not between two zeros


# ---------------------------------------------------------------------------------------------- GRPO


@pytest.mark.parametrize("seed", range(3))
def test_grpo_group_advantages_equal_the_library(seed):
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 2, (16,), generator=generator).to(torch.float64)
    rewards[:4] = 1.0  # one group with all rewards equal: zeros, not NaN
    rewards[4:8] = torch.rand(4, generator=generator, dtype=torch.float64)
    mine = grpo.group_advantages(rewards, 4)
    torch.testing.assert_close(mine, group_advantages(rewards, 4, method="grpo"), **TOLERANCE)
    assert torch.equal(mine[:4], torch.zeros(4, dtype=torch.float64))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kl_beta", [0.0, 0.05])
def test_grpo_loss_equals_the_library(seed, kl_beta):
    logp, old_logp, ref_logp, mask, generator = token_batch(seed)
    advantages = torch.randn(logp.shape[0], generator=generator, dtype=torch.float64)
    mine = grpo.grpo_loss(logp, old_logp, advantages, mask, clip_eps=0.2, ref_logp=ref_logp, kl_beta=kl_beta)
    library, _ = policy_loss(logp, old_logp, advantages, mask, variant="grpo", ref_logp=ref_logp, beta=kl_beta,
                             kl_estimator="k3")
    assert_same_value_and_gradient(mine, library, logp)


# ---------------------------------------------------------------------------------------------- PPO


@pytest.mark.parametrize("seed", range(3))
def test_ppo_gae_equals_the_library(seed):
    _, _, _, mask, generator = token_batch(seed)
    rewards = torch.randn(mask.shape, generator=generator, dtype=torch.float64)
    values = torch.randn(mask.shape, generator=generator, dtype=torch.float64)
    mine = ppo.gae(rewards, values, mask, gamma=0.97, lam=0.9)
    library = gae(rewards, values, 0.97, 0.9, mask=mask)
    for a, b in zip(mine, library):
        torch.testing.assert_close(a.to(b.dtype), b, **TOLERANCE)


@pytest.mark.parametrize("seed", range(3))
def test_ppo_policy_and_value_losses_equal_the_library(seed):
    logp, old_logp, _, mask, generator = token_batch(seed)
    advantages = torch.randn(mask.shape, generator=generator, dtype=torch.float64)
    mine = ppo.ppo_policy_loss(logp, old_logp, advantages, mask, clip_eps=0.2)
    library, _ = policy_loss(logp, old_logp, advantages, mask, variant="ppo")
    assert_same_value_and_gradient(mine, library, logp)

    values = torch.randn(mask.shape, generator=generator, dtype=torch.float64).requires_grad_()
    old_values = values.detach() + 0.3 * torch.randn(mask.shape, generator=generator, dtype=torch.float64)
    returns = torch.randn(mask.shape, generator=generator, dtype=torch.float64)
    mine = ppo.ppo_value_loss(values, old_values, returns, mask, clip_eps=0.2)
    library = value_loss(values, old_values, returns, mask, clip_eps=0.2)
    assert_same_value_and_gradient(mine, library, values)


# ---------------------------------------------------------------------------------------------- DPO


@pytest.mark.parametrize("seed", range(3))
def test_dpo_loss_equals_the_library(seed):
    generator = torch.Generator().manual_seed(seed)
    chosen, rejected, ref_chosen, ref_rejected = (-20 * torch.rand(8, generator=generator, dtype=torch.float64)
                                                  for _ in range(4))
    chosen.requires_grad_()
    mine = dpo.dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.1)
    library = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.1)
    assert_same_value_and_gradient(mine.sum(), library.sum(), chosen)


# ---------------------------------------------------------------------------------------------- training


def held_out_samples():
    """64 completions that arith-base samples for held-out problems (fixed seed), and their rewards."""
    model, tokenizer = load_model("arith-base")
    task = get_task("arithmetic", digits=3)
    rows = list(task.dataset(64, seed=123, split="test"))
    torch.manual_seed(123)
    batch = grpo.sample(model, tokenizer, [row["question"] for row in rows], grpo.Args())
    texts = tokenizer.batch_decode(batch[2] * batch[3].long(), skip_special_tokens=True)
    rewards = torch.tensor([task.reward(text, row) for text, row in zip(texts, rows)])
    return model, batch, rewards


def right_minus_wrong(example, model, batch, rewards) -> float:
    """Mean log-probability of the right completions minus that of the wrong ones, under ``model``.

    Training on the verifier's reward should move probability from wrong answers to right ones, so
    this gap should widen on completions the run never saw. It is computed on fixed text, so it is
    deterministic: a run that learned nothing leaves it exactly unchanged and fails.
    """
    with torch.no_grad():
        sequence_logp = (example.token_logprobs(model, *batch) * batch[3]).sum(dim=1)
    return (sequence_logp[rewards == 1].mean() - sequence_logp[rewards == 0].mean()).item()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_online_example_moves_probability_to_right_answers(name):
    example = {"grpo": grpo, "ppo": ppo}[name]
    base, batch, rewards = held_out_samples()
    assert 0 < rewards.mean() < 1  # both kinds present, so the gap is defined
    before = right_minus_wrong(example, base, batch, rewards)
    model, curve = example.main(example.Args(steps=8 if name == "grpo" else 6))
    after = right_minus_wrong(example, model, batch, rewards)
    assert after > before, (before, after, curve)


@pytest.mark.slow
def test_dpo_example_lowers_the_loss_and_orders_the_pairs():
    curve = dpo.main(dpo.Args(steps=10, pairs=16, eval_samples=4))
    assert curve["loss"][0] == pytest.approx(math.log(2), abs=1e-4)  # π = π_ref at the start
    assert curve["loss"][-1] < curve["loss"][0] - 0.05, curve["loss"]
    assert curve["accuracy"][-1] > 0.5, curve["accuracy"]


def test_readme_lists_each_example_with_a_command_that_exists():
    readme = (ROOT / "README.md").read_text()
    for name in ("grpo", "ppo", "dpo"):
        command = re.search(rf"python (examples/{name}\.py)", readme)
        assert command is not None, f"README.md has no command for examples/{name}.py"
        assert (ROOT / command.group(1)).is_file()
