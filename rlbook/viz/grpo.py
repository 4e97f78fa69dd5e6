"""Figures and widgets for lesson 08 (GRPO and RLVR): group advantages, and the models each method keeps.

``plot_group_advantages`` draws the advantages of one group of 0/1 rewards under GRPO's σ
(population or Bessel), the plain group mean and RLOO, beside the advantage of a right and a wrong
answer as the number of right answers in the group changes; with ``show_push=True`` a third panel
draws the expected push on a prompt solved with probability p, c_G(p) (``rlbook.hacking.advantage_scale``),
beside its large-group limit 1/√(p(1 − p)); ``group_advantages_widget`` puts the knobs on sliders and
shows all three. ``plot_models_in_memory`` compares the models PPO and GRPO keep.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from rlbook._checks import check_int
from rlbook.advantages import group_advantages

__all__ = ["ADVANTAGE_RULES", "plot_group_advantages", "plot_push_by_pass_rate", "group_advantages_widget",
           "plot_models_in_memory"]

# label → (method, unbiased_std) of rlbook.advantages.group_advantages
ADVANTAGE_RULES = {
    "GRPO, population σ": ("grpo", False),
    "GRPO, Bessel σ": ("grpo", True),
    "mean only (Dr.GRPO)": ("dr_grpo", False),
    "RLOO": ("rloo", False),
}
RULE_COLOURS = ("tab:blue", "tab:orange", "tab:gray", "tab:green")


def _binary_group(n_correct: int, group_size: int) -> torch.Tensor:
    """Rewards of a group of ``group_size`` with ``n_correct`` ones first, then zeros."""
    return torch.tensor([1.0] * n_correct + [0.0] * (group_size - n_correct))


def plot_group_advantages(n_correct: int = 3, group_size: int = 4, *, show_push: bool = False):
    """Left: the advantage of every member of a group with ``n_correct`` right answers out of
    ``group_size``, under each rule of ``ADVANTAGE_RULES``. Right: the advantage of a right and of a
    wrong answer against the number right, k = 0 … G (k = 0 and k = G are zero-variance groups).
    ``show_push``: a third panel, below, full width: ``plot_push_by_pass_rate`` at this G."""
    group_size = check_int("group_size", group_size, minimum=2)
    n_correct = check_int("n_correct", n_correct, minimum=0)
    if n_correct > group_size:
        raise ValueError(f"n_correct must be at most group_size={group_size}, got {n_correct}")
    rewards = _binary_group(n_correct, group_size)
    if show_push:
        fig = plt.figure(figsize=(10.5, 6.6))
        grid = fig.add_gridspec(2, 2, height_ratios=(1.0, 0.85))
        left, right = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
        plot_push_by_pass_rate(group_size, ax=fig.add_subplot(grid[1, :]))
    else:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.6))
    width = 0.8 / len(ADVANTAGE_RULES)
    for j, ((label, (method, bessel)), colour) in enumerate(zip(ADVANTAGE_RULES.items(), RULE_COLOURS)):
        advantages = group_advantages(rewards, group_size, method, bessel)
        left.bar(np.arange(group_size) + (j - 1.5) * width, advantages.numpy(), width, label=label, color=colour)
        ks = np.arange(group_size + 1)
        right_answer, wrong_answer = [], []
        for k in ks:
            a = group_advantages(_binary_group(int(k), group_size), group_size, method, bessel)
            right_answer.append(a[0].item() if k > 0 else np.nan)
            wrong_answer.append(a[-1].item() if k < group_size else np.nan)
        right.plot(ks, right_answer, "o-", color=colour, ms=4, label=label)
        right.plot(ks, wrong_answer, "s--", color=colour, ms=4)
    left.axhline(0, color="black", lw=0.8)
    if group_size <= 16:
        left.set_xticks(range(group_size), [f"r={int(r)}" for r in rewards.tolist()], fontsize=8)
    else:  # too many samples to label one by one
        left.set(xlabel=f"sample (the first {n_correct} right, r = 1)")
    left.set(ylabel="advantage A_i", title=f"one group: {n_correct} right out of G = {group_size}")
    left.legend(fontsize=8)
    right.axhline(0, color="black", lw=0.8)
    right.axvline(n_correct, color="0.6", lw=1, ls=":")
    right.set_xticks(range(group_size + 1) if group_size <= 16 else range(0, group_size + 1, group_size // 8))
    right.set(xlabel="k = right answers in the group", ylabel="advantage",
              title="right answers (●, solid) and wrong ones (■, dashed)")
    right.grid(alpha=0.3)
    right.legend(fontsize=8)  # its own key: the colours are the rules, as on the left
    fig.tight_layout()
    return fig


def plot_push_by_pass_rate(group_size: int, *, ax=None, points: int = 199):
    """GRPO's expected push on a prompt against its pass rate p, relative to the push at p = ½.

    For 0/1 rewards a GRPO step pushes a prompt's pass rate with c_G(p) ∇p, where c_G(p) is how much
    more a right answer's advantage is, on average, than a wrong one's (exact for groups of G,
    ``rlbook.hacking.advantage_scale``; population σ). As G grows, c_G(p) → 1/√(p(1 − p)), the
    derivative of 2 arcsin √p (lesson 08, §1); a plain mean baseline (Dr.GRPO) pushes every p alike,
    (G − 1)/G ∇p, flat. Each curve is divided by its value at p = ½, so the panel shows how much more
    a prompt near 0 or 1 is pushed than one near ½. Returns the axes.
    """
    from rlbook.hacking import advantage_scale

    group_size = check_int("group_size", group_size, minimum=2)
    if ax is None:
        _, ax = plt.subplots(figsize=(10.5, 3.0))
    p = np.linspace(0.0, 1.0, points + 2)[1:-1]
    exact = np.array([advantage_scale(float(q), group_size) for q in p]) / advantage_scale(0.5, group_size)
    limit = 0.5 / np.sqrt(p * (1 - p))
    ax.plot(p, exact, color="tab:blue", lw=2, label=f"GRPO at G = {group_size} (exact)")
    ax.plot(p, limit, color="tab:blue", lw=1.2, ls="--", label="GRPO as G → ∞: 1/√(p(1 − p)), arcsin's slope")
    ax.axhline(1.0, color="tab:gray", lw=1.2, label="mean only (Dr.GRPO): every p alike")
    top = max(2.0, 1.15 * float(exact.max()))
    ax.set(xlim=(0, 1), ylim=(0.8, min(top + 1.0, 4.0)), xlabel="p = the prompt's pass rate",
           ylabel="push ÷ push at p = ½",
           title=f"expected push on one prompt's pass rate (at p = 0.02 it is {exact[np.argmin(abs(p - 0.02))]:.2f}× "
                 f"the push at ½ for G = {group_size}, {0.5 / np.sqrt(0.02 * 0.98):.2f}× in the limit)")
    ax.legend(fontsize=8, loc="upper center")
    ax.grid(alpha=0.3)
    return ax


def group_advantages_widget(max_group_size: int = 16, *, group_size: int = 4, n_correct: int = 3):
    """``plot_group_advantages`` with sliders for the group size and the number of right answers, and
    the push panel (``show_push``) at the slider's G; the second slider's range follows the first
    (0…G), so every position of it is a group that exists. ``group_size`` and ``n_correct`` are the
    sliders' starting positions."""
    import ipywidgets as widgets

    def draw(group_size, n_correct):
        plot_group_advantages(min(n_correct, group_size), group_size, show_push=True)
        plt.show()

    group_size = check_int("group_size", group_size, minimum=2)
    if group_size > max_group_size or not 0 <= n_correct <= group_size:
        raise ValueError(f"need 2 ≤ group_size ≤ max_group_size ({max_group_size}) and 0 ≤ n_correct ≤ group_size, "
                         f"got {group_size} and {n_correct}")
    group_slider = widgets.IntSlider(value=group_size, min=2, max=max_group_size)
    correct_slider = widgets.IntSlider(value=n_correct, min=0, max=group_slider.value)

    def follow(change):
        correct_slider.max = change["new"]  # ipywidgets clamps the value into the new range

    group_slider.observe(follow, names="value")
    return widgets.interact(draw, group_size=group_slider, n_correct=correct_slider)


def plot_models_in_memory(models: dict[str, dict[str, int]], *, bytes_per_parameter: int = 2, unit: float = 1e9,
                          unit_name: str = "GB", title: str | None = None):
    """Stacked bars: for each method, the parameters each model it keeps holds, in memory.

    ``models``: method → {role (policy, reference, critic, reward model, optimizer state …): parameters}.
    Each parameter costs ``bytes_per_parameter`` bytes; the axis is in ``unit_name``.
    """
    if not models:
        raise ValueError("models must name at least one method")
    roles = list(dict.fromkeys(role for parts in models.values() for role in parts))
    colours = dict(zip(roles, plt.get_cmap("tab10").colors))
    fig, ax = plt.subplots(figsize=(6.4, 0.9 + 0.7 * len(models)))
    for row, (method, parts) in enumerate(models.items()):
        left = 0.0
        for role in roles:
            size = parts.get(role, 0) * bytes_per_parameter / unit
            if size:
                ax.barh(row, size, left=left, color=colours[role], edgecolor="white", label=role)
                left += size
        ax.text(left, row, f"  {left:.3g} {unit_name}", va="center", fontsize=8)
    ax.set_yticks(range(len(models)), list(models))
    ax.invert_yaxis()
    ax.set_xlabel(f"memory ({unit_name}, {bytes_per_parameter} bytes per parameter)")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))  # one legend entry per role
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="lower right")
    ax.margins(x=0.18)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
