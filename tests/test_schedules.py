"""Learning-rate schedules (rlbook.schedules): transformers' schedulers follow the module's equations,
serve every loop, and checkpoint as plain JSON."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlbook.schedules import SCHEDULES, make_scheduler


def _multiplier(schedule, step, steps, warmup_steps, min_lr_rate=0.0):
    """The multiplier of the peak rate at (0-based) ``step``, as the module docstring writes it."""
    if step < warmup_steps:
        return step / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    if schedule == "linear":
        return max(0.0, 1.0 - progress)
    return min_lr_rate + (1.0 - min_lr_rate) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _optimizer(lr=2.0):
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))], lr=lr)


def _rates(scheduler, n_steps):
    """The rate each of ``n_steps`` optimizer steps runs at, stepping the scheduler after each."""
    optimizer = scheduler.optimizer
    rates = []
    for _ in range(n_steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("steps, warmup_steps", [(4, 0), (6, 2), (10, 3), (1000, 50)])
def test_rates_follow_the_equations(schedule, steps, warmup_steps):
    rates = _rates(make_scheduler(_optimizer(2.0), schedule, steps=steps, warmup_steps=warmup_steps), steps)
    expected = [2.0 * _multiplier(schedule, s, steps, warmup_steps) for s in range(steps)]
    assert rates == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_the_zoo_cosine_decays_to_a_tenth_of_the_peak():
    steps, warmup_steps = 20, 4
    scheduler = make_scheduler(_optimizer(3e-3), "cosine", steps=steps, warmup_steps=warmup_steps, min_lr_rate=0.1)
    rates = _rates(scheduler, steps + 1)
    assert rates[:warmup_steps + 1] == pytest.approx([3e-3 * s / warmup_steps for s in range(warmup_steps + 1)])
    assert all(a >= b for a, b in zip(rates[warmup_steps:], rates[warmup_steps + 1:]))
    assert rates[steps] == pytest.approx(3e-4)  # reached just after the last step
    assert rates == pytest.approx([3e-3 * _multiplier("cosine", s, steps, warmup_steps, 0.1) for s in range(steps + 1)])


def test_without_warm_up_the_first_step_runs_at_the_peak():
    for schedule in SCHEDULES:
        assert _rates(make_scheduler(_optimizer(0.5), schedule, steps=8), 1) == [0.5]


def test_a_constant_schedule_needs_no_step_budget():
    assert _rates(make_scheduler(_optimizer(1.0), "constant", warmup_steps=2), 4) == [0.0, 0.5, 1.0, 1.0]


def test_the_state_is_plain_json_and_restores_the_position():
    scheduler = make_scheduler(_optimizer(1.0), "cosine", steps=10, warmup_steps=2, min_lr_rate=0.1)
    _rates(scheduler, 4)
    state = json.loads(json.dumps(scheduler.state_dict()))
    restored = make_scheduler(_optimizer(1.0), "cosine", steps=10, warmup_steps=2, min_lr_rate=0.1)
    restored.optimizer.load_state_dict(scheduler.optimizer.state_dict())
    restored.load_state_dict(state)
    assert _rates(restored, 6) == _rates(scheduler, 6)


@pytest.mark.parametrize("kwargs, name", [
    (dict(schedule="step", steps=4), "schedule"),
    (dict(schedule="linear"), "steps"),
    (dict(schedule="cosine", steps=0), "steps"),
    (dict(schedule="constant", warmup_steps=-1), "warmup_steps"),
    (dict(schedule="cosine", steps=4, min_lr_rate=1.5), "min_lr_rate"),
    (dict(schedule="linear", steps=4, min_lr_rate=0.1), "min_lr_rate"),
])
def test_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        make_scheduler(_optimizer(), **kwargs)
