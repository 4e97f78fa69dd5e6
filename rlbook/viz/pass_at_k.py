"""Figures and widgets for lesson 18 (sampler or thinker: pass@k before and after RL).

- ``plot_pass_at_k_curves``: pass@k against k (log scale) for the base model and each RL policy, a
  policy's line the mean over its seeds and its band the seeds' range;
- ``plot_problem_breakdown``: each problem's pass@k under the base and under one policy, problems
  sorted by the base's pass@1, so the problems RL gained and lost stand out;
- ``plot_pass_at_k_breakdown`` / ``pass_at_k_widget``: both side by side; the widget's k slider moves
  the marker on the curves and the per-problem bars, and chooses the policy and its seed;
- ``plot_logprob_histograms``: the base model's log-probability of sets of answers (its own correct
  answers, the RL policy's correct answers).

Policies are passed as ``{label: [correct table of seed 0, of seed 1, ...]}``, each table the (P, n)
0/1 result of ``rlbook.evaluation.sample_and_verify`` on the base model's P problems.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from rlbook._figures import COLUMN_IN
from rlbook.coverage import pass_at_k_curve, per_problem_pass_at_k, powers_of_two

__all__ = ["plot_logprob_histograms", "plot_pass_at_k_breakdown", "plot_pass_at_k_curves", "plot_problem_breakdown",
           "pass_at_k_widget"]

COLORS = ("tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def _check_policies(policies: dict) -> None:
    if not policies or any(len(tables) == 0 for tables in policies.values()):
        raise ValueError("policies must map each label to a non-empty list of correct tables (one per seed)")


def plot_pass_at_k_curves(base_correct, policies: dict, *, k: int | None = None, ax=None):
    """pass@k for k = 1, 2, 4, … n of the base model (black) and of each policy (mean over seeds, band:
    min to max over seeds); a dotted line marks ``k`` when given."""
    _check_policies(policies)
    ks = powers_of_two(base_correct.shape[1])
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot(ks, pass_at_k_curve(base_correct, ks), "o-", color="black", label="base")
    for color, (label, tables) in zip(COLORS, policies.items()):
        curves = np.array([pass_at_k_curve(table, ks) for table in tables])
        ax.plot(ks, curves.mean(axis=0), "o-", color=color, label=f"{label} ({len(tables)} seeds)")
        ax.fill_between(ks, curves.min(axis=0), curves.max(axis=0), color=color, alpha=0.2)
    if k is not None:
        ax.axvline(k, color="gray", linestyle=":")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(v) for v in ks])
    ax.set(xlabel="k (samples per problem)", ylabel="pass@k (mean over problems)", ylim=(0, 1.02),
           title=f"pass@k on {base_correct.shape[0]} held-out problems")
    ax.legend(fontsize=8, loc="lower right")
    return ax.figure


def plot_problem_breakdown(base_correct, policy_correct, k: int, *, label: str = "RL", ax=None):
    """Each problem's pass@k under the base (gray) and the policy (colour), problems sorted by the base's
    pass@1; the title counts the problems where the policy is ahead and behind by more than 0.05."""
    base, policy = per_problem_pass_at_k(base_correct, k), per_problem_pass_at_k(policy_correct, k)
    order = np.argsort(per_problem_pass_at_k(base_correct, 1).numpy(), kind="stable")
    x = np.arange(len(order))
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.6))
    ax.bar(x, base.numpy()[order], width=1.0, color="lightgray", label="base")
    ax.plot(x, policy.numpy()[order], "o", markersize=3, color=COLORS[0], label=label, clip_on=False)
    ahead, behind = int((policy > base + 0.05).sum()), int((policy < base - 0.05).sum())
    ax.set(xlabel="problem (sorted by the base's pass@1)", ylabel=f"pass@{k}", ylim=(0, 1.05),
           title=f"pass@{k} per problem: {label} ahead on {ahead}, behind on {behind} (by > 0.05)")
    ax.legend(fontsize=8, loc="upper left")
    return ax.figure


def plot_pass_at_k_breakdown(base_correct, policies: dict, k: int, *, policy: str | None = None, seed: int = 0):
    """``plot_pass_at_k_curves`` with a marker at ``k``, beside ``plot_problem_breakdown`` of one policy's
    seed (``policy`` a key of ``policies``, default the first; ``seed`` an index into its tables)."""
    _check_policies(policies)
    policy = next(iter(policies)) if policy is None else policy
    if policy not in policies:
        raise ValueError(f"policy must be one of {list(policies)}, got {policy!r}")
    if not 0 <= seed < len(policies[policy]):
        raise ValueError(f"seed must index the {len(policies[policy])} tables of {policy!r}, got {seed}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(COLUMN_IN, 4), gridspec_kw={"width_ratios": [1, 1.5]})
    plot_pass_at_k_curves(base_correct, policies, k=k, ax=left)
    plot_problem_breakdown(base_correct, policies[policy][seed], k, label=f"{policy}, seed index {seed}", ax=right)
    for ax in (left, right):  # the two titles side by side in the book's column (rlbook._figures)
        ax.title.set_fontsize(10)
    fig.tight_layout()
    return fig


def pass_at_k_widget(base_correct, policies: dict):
    """``plot_pass_at_k_breakdown`` with a k slider (powers of two up to n), the policy and its seed."""
    import ipywidgets as widgets

    _check_policies(policies)

    def draw(k, policy, seed):
        plot_pass_at_k_breakdown(base_correct, policies, k, policy=policy, seed=min(seed, len(policies[policy]) - 1))
        plt.show()

    return widgets.interact(
        draw, k=widgets.SelectionSlider(options=powers_of_two(base_correct.shape[1]), value=1, description="k"),
        policy=widgets.Dropdown(options=list(policies), description="policy"),
        seed=widgets.IntSlider(value=0, min=0, max=max(len(t) for t in policies.values()) - 1, description="seed"))


def plot_logprob_histograms(samples: dict, *, xlabel: str = "log π_base(y | x) per token", ax=None):
    """Overlaid histograms (densities) of ``{label: values}``, each label with its median."""
    if not samples or any(len(values) == 0 for values in samples.values()):
        raise ValueError("samples must map each label to a non-empty list of values")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.6))
    pooled = np.concatenate([np.asarray(v, dtype=float) for v in samples.values()])
    bins = np.linspace(pooled.min(), pooled.max(), 30)
    for color, (label, values) in zip(("black", *COLORS), samples.items()):
        values = np.asarray(values, dtype=float)
        ax.hist(values, bins=bins, density=True, alpha=0.4, color=color,
                label=f"{label} (n = {len(values)}, median {np.median(values):.2f})")
        ax.axvline(np.median(values), color=color, linestyle="--")
    ax.set(xlabel=xlabel, ylabel="density")
    ax.legend(fontsize=8)
    return ax.figure
