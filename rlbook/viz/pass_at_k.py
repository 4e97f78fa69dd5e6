"""Figures and widgets for lesson 18 (sampler or thinker: pass@k before and after RL).

- ``plot_pass_at_k_curves``: pass@k against k (log scale) for the base model and each RL policy, a
  policy's line the mean over its seeds and its band the seeds' range (min to max), each with its
  one-coin curve 1 − (1 − pass@1)^k dashed (``rlbook.coverage.one_coin_curve``: the highest curve a
  policy with that pass@1 can have, reached only when every problem is equally hard for it);
- ``plot_pass_at_k_panels``: those curves beside the miss rate 1 − pass@k on a log scale, where the
  large-k end (0.9 to 1.0 on the left) is spread out;
- ``plot_problem_breakdown``: each problem's pass@k under the base and under one policy, problems
  sorted by the policy's pass@1, so the problems RL gained and lost stand out;
- ``plot_pass_at_k_breakdown`` / ``pass_at_k_widget``: the curves above the per-problem breakdown; the
  widget chooses the problem family, k, the policy and its seed;
- ``plot_logprob_cdfs``: the base model's log-probability per token of sets of answers (its own
  correct answers, the RL policy's), as cumulative distributions, one panel per kind of answer.

Policies are passed as ``{label: [correct table of seed 0, of seed 1, ...]}``, each table the (P, n)
0/1 result of ``rlbook.evaluation.sample_and_verify`` on the base model's P problems.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from rlbook._figures import COLUMN_IN
from rlbook.coverage import one_coin_curve, pass_at_k_curve, per_problem_pass_at_k, powers_of_two

__all__ = ["plot_logprob_cdfs", "plot_pass_at_k_breakdown", "plot_pass_at_k_curves", "plot_pass_at_k_panels",
           "plot_problem_breakdown", "pass_at_k_widget"]

COLORS = ("tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def _check_policies(policies: dict) -> None:
    if not policies or any(len(tables) == 0 for tables in policies.values()):
        raise ValueError("policies must map each label to a non-empty list of correct tables (one per seed)")


def _curves(base_correct, policies: dict):
    """ks, the base's curve, and per policy its (seeds, ks) array of curves."""
    ks = powers_of_two(base_correct.shape[1])
    return ks, np.array(pass_at_k_curve(base_correct, ks)), \
        {label: np.array([pass_at_k_curve(table, ks) for table in tables]) for label, tables in policies.items()}


def _log2_k_axis(ax, ks) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(v) for v in ks])
    ax.set_xlabel("k (samples per problem)")


def plot_pass_at_k_curves(base_correct, policies: dict, *, k: int | None = None, ax=None, one_coin: bool = True):
    """pass@k for k = 1, 2, 4, … n of the base model (black) and of each policy (mean over seeds; band:
    min to max over the seeds); with ``one_coin`` each one's 1 − (1 − pass@1)^k dashed; a dotted line
    marks ``k`` when given."""
    _check_policies(policies)
    ks, base, curves = _curves(base_correct, policies)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(ks, base, "o-", color="black", label="base")
    for color, (label, runs) in zip(COLORS, curves.items()):
        ax.plot(ks, runs.mean(axis=0), "o-", color=color, label=f"{label} (mean of {len(runs)} seeds)")
        ax.fill_between(ks, runs.min(axis=0), runs.max(axis=0), color=color, alpha=0.2,
                        label=f"band: min–max over its {len(runs)} seeds")
        if one_coin:
            ax.plot(ks, one_coin_curve(float(runs[:, 0].mean()), ks), "--", color=color, lw=1,
                    label=f"{label}'s one coin, at its mean pass@1")
    if one_coin:
        ax.plot(ks, one_coin_curve(float(base[0]), ks), "--", color="gray", lw=1.5,
                label="one coin: 1 − (1 − pass@1)^k (dashed)")
    if k is not None:
        ax.axvline(k, color="gray", linestyle=":")
    _log2_k_axis(ax, ks)
    ax.set(ylabel="pass@k (mean over problems)", ylim=(0, 1.02),
           title=f"pass@k on {base_correct.shape[0]} held-out problems")
    ax.legend(fontsize=8, loc="lower right")
    return ax.figure


def plot_pass_at_k_panels(base_correct, policies: dict, *, title: str | None = None, caption: str | None = None,
                          references: dict | None = None):
    """``plot_pass_at_k_curves`` beside the miss rate 1 − pass@k on a log scale (same lines and bands;
    a miss rate of 0, every problem solved, is left off the log axis, and the right panel's title says
    so). ``caption``: text under both panels, part of the figure (what the band is, how far the curves
    are told apart), given room below the axis labels. ``references``: ``{label: (P, m) table}`` drawn
    dashed on both panels, each at k = 1, 2, 4, … m (say, the base model restricted to one kind of
    answer, ``rlbook.coverage.kind_subtable``)."""
    _check_policies(policies)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    plot_pass_at_k_curves(base_correct, policies, ax=left)
    ks, base, curves = _curves(base_correct, policies)
    for color, (label, table) in zip(("tab:blue", "tab:cyan", "tab:olive"), (references or {}).items()):
        ref_ks = powers_of_two(table.shape[1])
        ref = np.array(pass_at_k_curve(table, ref_ks))
        left.plot(ref_ks, ref, "s--", color=color, lw=1.5, markersize=4, label=label)
        right.plot(ref_ks, np.where(1 - ref > 0, 1 - ref, np.nan), "s--", color=color, lw=1.5, markersize=4,
                   label=label)
    if references:
        left.legend(fontsize=8, loc="lower right")
    floor = 0.5 / base_correct.shape[0]  # below one problem's worth: the axis' lower end
    right.plot(ks, np.where(1 - base > 0, 1 - base, np.nan), "o-", color="black", label="base")
    right.plot(ks, 1 - np.array(one_coin_curve(float(base[0]), ks)), "--", color="gray", lw=1.5,
               label="base's one coin")
    for color, (label, runs) in zip(COLORS, curves.items()):
        miss = 1 - runs
        right.plot(ks, np.where(miss.mean(axis=0) > 0, miss.mean(axis=0), np.nan), "o-", color=color, label=label)
        right.fill_between(ks, np.maximum(miss.min(axis=0), floor), np.maximum(miss.max(axis=0), floor),
                           color=color, alpha=0.2)
    right.set_yscale("log")
    right.set_ylim(floor, 1.0)
    _log2_k_axis(right, ks)
    right.set(ylabel="1 − pass@k (log scale)", title="the share of problems still unsolved after k samples\n"
                                                     "(a line stops where it reaches 0, every problem solved: "
                                                     "0 is off a log axis)")
    right.axhline(1 / base_correct.shape[0], color="gray", lw=0.8, linestyle=":")
    right.text(ks[0], 1.08 / base_correct.shape[0], "one problem", fontsize=8, color="gray")
    right.legend(fontsize=8, loc="upper right")
    if title:
        fig.suptitle(title)
    if caption:
        lines = caption.count("\n") + 1 + len(caption) // 170  # explicit lines, and those wrap=True adds
        fig.tight_layout(rect=(0, 0.03 + 0.045 * lines, 1, 1))
        fig.text(0.5, 0.01, caption, ha="center", va="bottom", fontsize=9, wrap=True)
    else:
        fig.tight_layout()
    return fig


def plot_problem_breakdown(base_correct, policy_correct, k: int, *, label: str = "RL", ax=None):
    """Each problem's pass@k under the base (gray bars) and the policy (dots), problems sorted by the
    policy's pass@1; the title counts the problems where the policy is ahead and behind by more than 0.05."""
    base, policy = per_problem_pass_at_k(base_correct, k), per_problem_pass_at_k(policy_correct, k)
    order = np.argsort(per_problem_pass_at_k(policy_correct, 1).numpy(), kind="stable")
    x = np.arange(len(order))
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3.6))
    ax.bar(x, base.numpy()[order], width=1.0, color="lightgray", label="base")
    ax.plot(x, policy.numpy()[order], "o", markersize=4, color=COLORS[0], label=label, clip_on=False)
    ahead, behind = int((policy > base + 0.05).sum()), int((policy < base - 0.05).sum())
    ax.set(xlabel="problem (sorted by the policy's pass@1)", ylabel=f"pass@{k}", ylim=(0, 1.05),
           xlim=(-0.5, len(order) - 0.5),
           title=f"{label} vs the base, pass@{k} per problem: ahead on {ahead}, behind on {behind} of {len(order)} "
                 "(by > 0.05)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax.figure


def plot_pass_at_k_breakdown(base_correct, policies: dict, k: int, *, policy: str | None = None, seed: int = 0,
                             seed_names=None):
    """``plot_pass_at_k_curves`` with a marker at ``k``, above ``plot_problem_breakdown`` of one policy's
    seed (``policy`` a key of ``policies``, default the first; ``seed`` an index into its tables;
    ``seed_names``, the training seeds of those tables in order, labels the panel "seed <name>" instead
    of "seed index <seed>")."""
    _check_policies(policies)
    policy = next(iter(policies)) if policy is None else policy
    if policy not in policies:
        raise ValueError(f"policy must be one of {list(policies)}, got {policy!r}")
    if not 0 <= seed < len(policies[policy]):
        raise ValueError(f"seed must index the {len(policies[policy])} tables of {policy!r}, got {seed}")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(COLUMN_IN, 8), gridspec_kw={"height_ratios": [1.1, 1]})
    plot_pass_at_k_curves(base_correct, policies, k=k, ax=top)
    plot_problem_breakdown(base_correct, policies[policy][seed], k, ax=bottom,
                           label=f"{policy} seed index {seed}" if seed_names is None else f"{policy} seed {seed_names[seed]}")
    fig.tight_layout()
    return fig


def pass_at_k_widget(families: dict, *, seed_names=None):
    """``plot_pass_at_k_breakdown`` with a problem-family dropdown, a k slider (powers of two up to n),
    the policy (a menu only when there is more than one; a family without the chosen policy shows its first) and
    its seed. ``families``: ``{family label: (base_correct, policies)}``;
    ``seed_names`` as in ``plot_pass_at_k_breakdown``."""
    import ipywidgets as widgets

    if not isinstance(families, dict) or not families:
        raise ValueError("families must map each family's label to (base_correct, policies)")
    for base_correct, policies in families.values():
        _check_policies(policies)
    first_base, _ = next(iter(families.values()))
    every_policy = list(dict.fromkeys(label for _, policies in families.values() for label in policies))

    def draw(family, k, policy, seed):
        base_correct, policies = families[family]
        k = min(k, base_correct.shape[1])
        policy = policy if policy in policies else next(iter(policies))  # a family need not have every policy
        plot_pass_at_k_breakdown(base_correct, policies, k, policy=policy, seed=min(seed, len(policies[policy]) - 1),
                                 seed_names=seed_names)
        plt.show()

    return widgets.interact(
        draw, family=widgets.Dropdown(options=list(families), description="problems"),
        k=widgets.SelectionSlider(options=powers_of_two(first_base.shape[1]), value=1, description="k"),
        # A policy menu only when there is a choice: one recipe gets no dead control.
        policy=(widgets.Dropdown(options=list(every_policy), description="policy") if len(every_policy) > 1
                else widgets.fixed(every_policy[0])),
        seed=widgets.IntSlider(value=0, min=0, max=max(len(t) for _, p in families.values() for t in p.values()) - 1,
                               description="seed"))


def plot_logprob_cdfs(samples: dict, *, kinds=("scratchpad", "direct"),
                      xlabel: str = "log π_base(y | x) per token", tail: float | None = None):
    """Cumulative distributions of ``{label: (values, kinds of the answers)}``, one panel per kind in
    ``kinds``: how the base model scores each set of answers, the scratchpads apart from the direct
    answers (a kind a set does not have is left out of its panel). ``tail`` (a share in (0, 1)): each
    kind also gets a second panel, the same curves with the y axis cut at ``tail`` and the x axis at
    the highest value any set reaches below that share: the low end, where sets whose bulk coincides
    can still differ."""
    if not samples or any(len(values) == 0 or len(values) != len(labels) for values, labels in samples.values()):
        raise ValueError("samples must map each label to (values, kinds), non-empty and of one length")
    if tail is not None and not 0.0 < tail < 1.0:
        raise ValueError(f"tail must be a share in (0, 1), got {tail!r}")
    panels = [(kind, None) for kind in kinds] if tail is None else [(kind, z) for kind in kinds for z in (None, tail)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4), squeeze=False)
    styles = ("-", "--", ":", "-.")
    for ax, (kind, zoom) in zip(axes[0], panels):
        right_end = -np.inf
        for i, (color, (label, (values, labels))) in enumerate(zip(("black", *COLORS), samples.items())):
            chosen = np.sort(np.asarray(values, dtype=float)[np.asarray(labels) == kind])
            if chosen.size == 0:
                continue
            share = np.arange(1, chosen.size + 1) / chosen.size
            ax.step(chosen, share, where="post", color=color,
                    linestyle=styles[i % len(styles)], lw=1.8, label=f"{label} (n = {chosen.size})")
            if zoom is not None:
                right_end = max(right_end, chosen[min(int(np.searchsorted(share, zoom)), chosen.size - 1)])
        if zoom is None:
            ax.set(xlabel=xlabel, ylabel="share of answers at or below", ylim=(0, 1.02), title=f"{kind} answers")
        else:
            left_end = min(float(np.min(np.asarray(values, dtype=float)[np.asarray(labels) == kind]))
                           for values, labels in samples.values() if (np.asarray(labels) == kind).any())
            ax.set(xlabel=xlabel, ylabel="share of answers at or below", ylim=(0, zoom),
                   xlim=(left_end - 0.02 * abs(left_end), right_end), title=f"{kind} answers: the lowest {zoom:.0%}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
