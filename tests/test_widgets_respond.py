"""Every lesson widget, driven as a reader drives it: each control moved to another value redraws the
figure with different data, and an error inside the drawing function fails the test.

``ipywidgets.interact`` catches what its function raises (it logs a warning outside IPython), so a
widget test that only checks the widget was built cannot fail. Here the interact's function is
wrapped to record every exception and a fingerprint of every figure it draws (line, point, bar,
image and text data), and each control is moved in turn.
"""

from __future__ import annotations

import hashlib


import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from rlbook import kl_sequence, toys
from rlbook.probes import OffPolicyBatch
from rlbook.viz import (
    aggregation, baselines, dapo, entropy, gates, grpo, hacking, kl, pass_at_k, policy_gradient, ppo, preference,
    pipeline, r1_zero, rejection, reward_models, scaling, throughput, timeline,
)
from rlbook.viz.ratios import ratio_spread_widget


def _artist_data(fig) -> list:
    """What a reader sees change: every axis' lines (and their emphasis), collections, patches, images
    and texts."""
    data = []
    for ax in fig.axes:
        for line in ax.get_lines():  # the data, and the emphasis a knob may move (a bold line)
            data += [np.asarray(line.get_xydata(), dtype=float).round(9).tobytes(),
                     f"{line.get_linewidth()}/{line.get_alpha()}/{line.get_color()}"]
        for collection in ax.collections:
            data.append(np.asarray(collection.get_offsets(), dtype=float).round(9).tobytes())
            array = collection.get_array()
            if array is not None:
                data.append(np.asarray(array, dtype=float).round(9).tobytes())
            data += [np.asarray(path.vertices).round(9).tobytes() for path in collection.get_paths()]
        data += [np.asarray(patch.get_path().transformed(patch.get_patch_transform()).vertices).round(9).tobytes()
                 for patch in ax.patches]
        data += [np.asarray(image.get_array(), dtype=float).round(9).tobytes() for image in ax.images]
        data += [text.get_text() for text in ax.texts]
        data += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
    data += [text.get_text() for text in fig.texts]
    if getattr(fig, "_suptitle", None) is not None:
        data.append(fig._suptitle.get_text())
    return data


class _Recorder:
    """Wraps an interact's function: every call's exception and the figures it drew, fingerprinted."""

    def __init__(self, interactive):
        self.interactive, self.inner = interactive, interactive.f
        self.errors: list[BaseException] = []
        self.prints: list[str] = []
        self.fingerprints: list[str] = []
        interactive.f = self

    def __call__(self, **kwargs):
        import contextlib
        import io

        plt.close("all")
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                result = self.inner(**kwargs)
        except BaseException as error:  # interact would swallow it: record it for the test
            self.errors.append(error)
            raise
        digest = hashlib.sha256()
        for number in plt.get_fignums():
            for item in _artist_data(plt.figure(number)):
                digest.update(item if isinstance(item, bytes) else item.encode())
        digest.update(printed.getvalue().encode())
        if result is not None:
            digest.update(repr(result).encode())
        self.fingerprints.append(digest.hexdigest())
        self.prints.append(printed.getvalue())
        plt.close("all")
        return result


def _other_value(control):
    """A value of ``control`` other than its current one (its far end, or another option)."""
    options = getattr(control, "options", None)
    if options:
        values = [option[1] if isinstance(option, tuple) else option for option in options]
        others = [v for v in values if v != control.value]
        return others[-1] if control.value == values[0] else others[0]
    if isinstance(control.value, bool):
        return not control.value
    low, high = control.min, control.max
    far = low if abs(control.value - high) < abs(control.value - low) else high
    if hasattr(control, "base"):  # a log slider: min/max are exponents
        far = control.base ** (low if abs(np.log10(control.value) - high) < abs(np.log10(control.value) - low) else high)
    return far


def _drive(widget_function):
    """Move each control of ``widget_function``'s interact once; return the recorder."""
    interactive = widget_function.widget
    recorder = _Recorder(interactive)
    interactive.update()
    assert not recorder.errors, f"the widget's first draw raised {recorder.errors[0]!r}"
    assert recorder.fingerprints, "the widget drew nothing"
    for control in interactive.kwargs_widgets:
        before = recorder.fingerprints[-1]
        control.value = _other_value(control)  # the interact redraws on the change, as in JupyterLab
        assert not recorder.errors, f"moving {control.description or control._kwarg!r} raised {recorder.errors[-1]!r}"
        assert recorder.fingerprints[-1] != before, (
            f"moving {control.description or control._kwarg!r} to {control.value!r} did not change the figure")
    return recorder


def _stage4_trajectory():
    from rlbook.pipeline import review_trajectory

    def readout(parsed, cut, clauses, gold, rm):
        return {"parsed": parsed, "cut": cut, "garbled": 1 - parsed - cut, "gold": gold, "rm score": rm, "clauses": clauses}
    return review_trajectory({0: readout(0.7, 0.2, {1: 0.3, 2: 0.7}, -1.5, -1.7), 5: readout(0.6, 0.0, {1: 0.9, 2: 0.1}, -0.5, -0.3)})


def _bandit_inputs():
    bandit = toys.GaussianBandit(means=(1.0, 1.4, 2.0, 0.6, 1.2), noise=0.5)
    return bandit, torch.tensor([0.5, 0.0, -0.5, 1.0, 0.0], dtype=torch.float64)


def _baseline_sweep():
    generator = np.random.default_rng(0)
    names = ("none", "mean", "rloo", "critic")
    return {g: {name: {key: float(generator.uniform(0.5, 2.0) / g) for key in
                       ("variance", "relative_variance", "scale", "scale_noise", "cosine", "relative_bias",
                        "mean_noise")} for name in names} for g in (2, 4, 8)}


def _off_policy_batch():
    generator = torch.Generator().manual_seed(0)
    rows, length = 8, 6
    mask = torch.ones(rows, length)
    mask[::2, 4:] = 0
    old = -torch.rand(rows, length, generator=generator) * 2
    logps = [old.clone()] + [old + 0.3 * k * torch.randn(rows, length, generator=generator) for k in (1, 2, 3)]
    rewards = (torch.arange(rows) % 3 == 0).float()
    return OffPolicyBatch(texts=[f"t{i}" for i in range(rows)], mask=mask, old_logp=old, logps=logps,
                          rewards=rewards, advantages=rewards - rewards.mean())


def _frontier_points():
    import pandas as pd

    return pd.DataFrame([{"control": control, "seed": seed, "step": step,
                          "entropy": 0.4 - 0.05 * step + 0.02 * seed + 0.01 * i,
                          "reward": 0.8 - 0.4 * np.exp(0.4 - 0.05 * step) + 0.03 * i * seed}
                         for i, control in enumerate(("none", "KL", "temperature")) for seed in (0, 1)
                         for step in range(1, 6)])


def _pass_at_k_tables(seed=0):
    generator = torch.Generator().manual_seed(seed)
    base = (torch.rand(10, 16, generator=generator) < 0.2).int()
    policies = {name: [(torch.rand(10, 16, generator=generator) < p).int() for p in rates]
                for name, rates in (("RL", (0.5, 0.6)), ("RL + KL", (0.4, 0.45)))}
    return base, policies


WIDGETS = {
    "01 gradient_spread": lambda: policy_gradient.gradient_spread_widget(*_bandit_inputs(), dims=(2, 3),
                                                                         num_estimates=40, seed=3),
    "02 kl_estimator": lambda: kl.kl_estimator_widget(n_samples=2_000, seed=0),
    "02 optima_beta": lambda: kl.optima_beta_widget(
        torch.tensor([0.40, 0.25, 0.20, 0.10, 0.05], dtype=torch.float64),
        torch.tensor([0.0, 0.2, 0.5, 0.8, 1.0], dtype=torch.float64),
        kl_sequence.TwoTokenToy(
            ref_first=[0.5, 0.5], ref_second=[[0.6, 0.4], [0.05, 0.95]], rewards=[[1.0, 0.0], [1.0, 0.0]])),
    "03 clipped_objective": lambda: ppo.clipped_objective_widget(),
    "03 gae": lambda: ppo.gae_widget([0.0, 0.0, 0.0, 1.0], [0.5, 0.6, 0.7, 0.9], tokens=list("abcd")),
    "04 bradley_terry": lambda: reward_models.bradley_terry_widget(),
    "04 best_of_n_winners": lambda: reward_models.best_of_n_winners_widget(
        torch.randn(30, 16, generator=torch.Generator().manual_seed(0)),
        torch.randn(30, 16, generator=torch.Generator().manual_seed(1))),
    "05 best_of_n_toy": lambda: rejection.best_of_n_toy_widget(),
    "06 optimum": lambda: preference.optimum_widget(),
    "06 dpo_beta": lambda: preference.dpo_beta_widget(),
    "07 kto_value": lambda: preference.kto_value_widget(),
    "07 losses_vs_margin": lambda: preference.losses_vs_margin_widget(),
    "08 group_advantages": lambda: grpo.group_advantages_widget(max_group_size=16),
    "09 group_size": lambda: baselines.group_size_widget(_baseline_sweep()),
    "09 formula": lambda: baselines.formula_widget(0.28, 1.73, 0.19, measured={"rloo": {2: (2.4, 0.1)}}),
    "10 token_weights": lambda: aggregation.token_weights_widget(max_len=64),
    "10 length_toy": lambda: aggregation.length_toy_widget(steps=10),
    "11 clip_higher": lambda: dapo.clip_higher_widget(),
    "12 ratio_spread": lambda: ratio_spread_widget(_off_policy_batch()),
    "13 gate": lambda: gates.gate_widget(),
    "14 flat_groups": lambda: throughput.flat_groups_widget(),
    "14 advantage_noise": lambda: throughput.advantage_noise_widget(pass_rate=0.4),
    "15 schedule": lambda: timeline.schedule_widget(),
    "15 stale_token_weights": lambda: timeline.stale_token_weights_widget(),
    "16 softmax_step": lambda: entropy.softmax_step_widget(),
    "16 entropy_frontier": lambda: entropy.entropy_frontier_widget(_frontier_points()),
    "17 r1_zero_advantage": lambda: r1_zero.advantage_widget(
        ["<think>5+8=13</think><answer>13</answer>", "<answer>12</answer>", "<answer>13</answer> x", "<answer>13</answer>"],
        [1, 0, 0, 1], 4),
    "18 pass_at_k": lambda: pass_at_k.pass_at_k_widget({"3-digit": _pass_at_k_tables(),
                                                        "2+3": _pass_at_k_tables(seed=1)}),
    "19 strategy_advantage": lambda: hacking.strategy_advantage_widget(),
    "20 rs_yield": lambda: pipeline.rs_yield_widget((torch.rand(12, 8, generator=torch.Generator().manual_seed(0)) < 0.3).int()),
    "20 stage4": lambda: pipeline.stage4_widget(_stage4_trajectory(), kl=[0.0, 0.01, 0.02]),
    "21 training_memory": lambda: scaling.training_memory_widget(),
}


@pytest.mark.parametrize("name", sorted(WIDGETS))
def test_every_control_of_every_widget_redraws_the_figure_without_error(name):
    recorder = _drive(WIDGETS[name]())
    assert len(recorder.fingerprints) == 1 + len(recorder.interactive.kwargs_widgets)


def test_an_error_inside_a_widget_fails_the_drive():
    import ipywidgets as widgets

    def draw(x):
        if x > 1:
            raise RuntimeError("broken drawing code")
        plt.plot([0, x])

    with pytest.raises(AssertionError, match="broken drawing code"):
        _drive(widgets.interact(draw, x=widgets.IntSlider(value=1, min=0, max=3)))


def test_a_control_that_changes_nothing_fails_the_drive():
    import ipywidgets as widgets

    def draw(x, ignored):
        plt.plot([0, x])

    with pytest.raises(AssertionError, match="'ignored'.*did not change the figure"):
        _drive(widgets.interact(draw, x=widgets.IntSlider(value=1, min=0, max=3),
                                ignored=widgets.IntSlider(value=1, min=0, max=3, description="ignored")))
