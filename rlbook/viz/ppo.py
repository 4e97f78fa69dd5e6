"""Figures and widgets for lesson 03 (PPO): the clip regions of the surrogate, and GAE on a trajectory.

``plot_clipped_objective`` is shared with later lessons (11, DAPO's clip-higher, overlays two
settings on one grid of axes); its signature is stable. Every curve it draws comes from the
library's own loss, through ``rlbook.token_gradients.clipped_objective_curves`` (values from
``clipped_surrogate``, slopes from autograd through ``policy_loss``) — nothing here re-implements
the clip. ``plot_gae`` draws ``rlbook.advantages.gae`` on one real trajectory.

Every function draws a figure and returns it; end a notebook line with ``;`` so Jupyter shows it
once. The widgets are ``ipywidgets.interact`` over these functions.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from rlbook._checks import as_float_tensor, check_same_shape
from rlbook._figures import COLUMN_IN
from rlbook.advantages import gae
from rlbook.token_gradients import clipped_objective_curves

__all__ = [
    "plot_clipped_objective",
    "clipped_objective_widget",
    "plot_gae",
    "gae_widget",
    "plot_run_curves",
]

ADVANTAGE_COLOURS = {1: "tab:green", -1: "tab:red"}
CLIPPED_SHADE = "0.88"


def plot_clipped_objective(eps_low: float = 0.2, eps_high: float = 0.2, dual_clip: float | None = None,
                           ax=None, *, advantage: float = 1.0, r_max: float | None = None, label: str | None = None,
                           colour: str | None = None, shade: bool = True):
    """PPO's clipped objective and its gradient against the ratio r, for A > 0 and for A < 0.

    A 2 × 2 grid: top row the per-token objective J(r) = min(r A, clip(r, 1 − ε_low, 1 + ε_high) A)
    (with dual clip ``c``: max(J, c A) for A < 0, Ye et al. 2020, arXiv:1912.09729) against the
    unclipped r A (dotted); bottom row dJ/dr. Left column A = +|advantage|, right A = −|advantage|.
    Where the slope is zero the clip has removed the token's gradient: those r are shaded.
    Values and slopes come from the library (``clipped_objective_curves``).

    Args:
        - eps_low, eps_high: the clip bounds 1 − ε_low and 1 + ε_high (PPO: 0.2 / 0.2; DAPO: 0.2 / 0.28).
        - dual_clip: the dual-clip constant c > 1, or None.
        - ax: None (a new figure) or a 2 × 2 array of Axes to draw into, e.g. to overlay a second
          setting on the first (pass ``shade=False`` and a ``label`` for it).
        - advantage: |A| of the two tokens drawn (default 1).
        - r_max: the largest ratio drawn (default 3, or 1.5 c with dual clip so its region shows).
        - label, colour: legend label and line colour of this setting (default: the knobs; green for
          A > 0, red for A < 0).
        - shade: shade the r where the gradient is zero.

    Returns the figure.
    """
    magnitude = abs(float(as_float_tensor("advantage", advantage, ndim=(0,))))
    if r_max is None:
        r_max = 3.0 if dual_clip is None else max(3.0, 1.5 * dual_clip)
    if ax is None:
        fig, axes = plt.subplots(2, 2, figsize=(10, 5.6), sharex=True)
    else:
        axes = np.asarray(ax, dtype=object)
        if axes.shape != (2, 2):
            raise ValueError(f"ax must be None or a 2 x 2 array of Axes, got shape {axes.shape}")
        fig = axes[0, 0].figure
    if label is None:
        label = f"ε_low={eps_low:g}, ε_high={eps_high:g}" + (f", c={dual_clip:g}" if dual_clip else "")
    for column, sign in enumerate((1, -1)):
        a = sign * magnitude
        r, objective, slope = clipped_objective_curves(a, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip,
                                                       r_max=r_max)
        line_colour = colour or ADVANTAGE_COLOURS[sign]
        top, bottom = axes[0, column], axes[1, column]
        if shade:
            _shade_zero_gradient(top, r, slope)
            _shade_zero_gradient(bottom, r, slope)
            top.plot(r, r * a, ":", color="0.4", lw=1.2, label="unclipped r·A")
            bottom.axhline(a, color="0.4", ls=":", lw=1.2)
            for axis in (top, bottom):
                for bound in (1 - eps_low, 1 + eps_high):
                    axis.axvline(bound, color="0.6", lw=0.8)
        top.plot(r, objective, color=line_colour, lw=2, label=label)
        bottom.plot(r, slope, color=line_colour, lw=2)
        top.set_title(f"A = {a:+g}" + ("  (raise this token)" if sign > 0 else "  (lower this token)"), fontsize=10)
        top.set_ylabel("objective J(r)")
        bottom.set_ylabel("gradient dJ/dr")
        bottom.set_xlabel("ratio r = π_θ / π_old")
        for axis in (top, bottom):
            axis.grid(alpha=0.3)
        top.legend(fontsize=7.5, loc="upper left" if sign > 0 else "lower left")
    if ax is None:
        fig.suptitle("PPO's clipped surrogate per token (shaded: the clip has zeroed the gradient)", fontsize=11)
        fig.tight_layout()
    return fig


def _shade_zero_gradient(axis, r, slope) -> None:
    """Shade the spans of r where the slope is exactly zero."""
    zero = slope == 0
    edges = np.flatnonzero(np.diff(np.concatenate([[0], zero.astype(int), [0]])))
    for start, stop in zip(edges[::2], edges[1::2]):
        axis.axvspan(r[start], r[stop - 1], color=CLIPPED_SHADE, zorder=0)


def clipped_objective_widget(*, advantage: float = 1.0, r_max: float = 5.0):
    """ε_low, ε_high and the dual-clip c as knobs of ``plot_clipped_objective`` (an ``ipywidgets.interact``)."""
    import ipywidgets as widgets

    def draw(eps_low, eps_high, use_dual_clip, c):
        plot_clipped_objective(eps_low, eps_high, c if use_dual_clip else None, advantage=advantage, r_max=r_max)
        plt.show()

    return widgets.interact(
        draw,
        eps_low=widgets.FloatSlider(value=0.2, min=0.0, max=0.9, step=0.01, description="ε_low"),
        eps_high=widgets.FloatSlider(value=0.2, min=0.0, max=1.5, step=0.01, description="ε_high"),
        use_dual_clip=widgets.Checkbox(value=False, description="dual clip"),
        c=widgets.FloatSlider(value=3.0, min=1.05, max=4.5, step=0.05, description="c"),
    )


def plot_gae(rewards, values, gamma: float = 1.0, lam: float = 0.95, *, tokens=None, last_value: float = 0.0,
             title: str | None = None):
    """GAE on one trajectory: per-token rewards and values (top), advantages at (γ, λ) (bottom).

    ``rewards`` and ``values`` are (T,) for one response (``rlbook.advantages.gae``'s inputs). The
    bottom panel shows A_t at the chosen (γ, λ) as bars, and the two limits as lines: λ = 0, the
    one-step TD error δ_t, and λ = 1, the discounted return minus V_t. ``tokens`` (T strings)
    label the x axis.
    """
    rewards = as_float_tensor("rewards", rewards, ndim=(1,)).detach().double()
    values = as_float_tensor("values", values, ndim=(1,)).detach().double()
    check_same_shape(rewards=rewards, values=values)
    if tokens is not None and len(tokens) != rewards.shape[0]:
        raise ValueError(f"tokens must have one label per reward ({rewards.shape[0]}), got {len(tokens)}")
    advantages, _ = gae(rewards, values, gamma, lam, last_value=last_value)
    td_error, _ = gae(rewards, values, gamma, 0.0, last_value=last_value)
    monte_carlo, _ = gae(rewards, values, gamma, 1.0, last_value=last_value)
    steps = np.arange(rewards.shape[0])
    width = min(COLUMN_IN, max(6.0, 0.28 * len(steps)) + 2.4)   # + the legends, right of the axes
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(width, 5.4), sharex=True)
    top.bar(steps, rewards.numpy(), color="tab:purple", alpha=0.7, label="reward r_t (−β·k1, + R on the last token)")
    top.plot(steps, values.numpy(), "o-", color="tab:blue", ms=3, label="critic's value V_t")
    top.axhline(0, color="black", lw=0.6)
    top.set_ylabel("reward, value")
    top.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # off the data
    bottom.bar(steps, advantages.numpy(), color="tab:orange", alpha=0.8, label=f"GAE, γ={gamma:g}, λ={lam:g}")
    bottom.plot(steps, td_error.numpy(), "--", color="tab:gray", lw=1.2, label="λ = 0: TD error δ_t")
    bottom.plot(steps, monte_carlo.numpy(), "-", color="black", lw=1.0, label="λ = 1: return − V_t")
    bottom.axhline(0, color="black", lw=0.6)
    bottom.set_ylabel("advantage A_t")
    bottom.set_xlabel("completion token t")
    bottom.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for axis in (top, bottom):
        axis.grid(alpha=0.3, axis="y")
    if tokens is not None:
        labels = [_printable(token) for token in tokens]
        bottom.set_xticks(steps)
        # Multi-character labels (</t>, <a>, </a>, end) run into their neighbours at one token per tick: stand them up.
        bottom.set_xticklabels(labels, fontsize=7, rotation=90 if any(len(label) > 2 for label in labels) else 0)
    fig.suptitle(title or "Generalised advantage estimation on one trajectory", fontsize=11)
    fig.tight_layout()
    return fig


def _printable(token: str) -> str:
    """A short tick label for a token: the chat markers abbreviated, whitespace made visible."""
    return SHORT_TOKENS.get(token, token)


SHORT_TOKENS = {" ": "·", "\n": "↵", "<think>": "<t>", "</think>": "</t>", "<answer>": "<a>", "</answer>": "</a>",
                "<|im_end|>": "end"}


def gae_widget(rewards, values, *, tokens=None, last_value: float = 0.0, title: str | None = None):
    """γ and λ as knobs of ``plot_gae`` on one trajectory (an ``ipywidgets.interact``)."""
    import ipywidgets as widgets

    def draw(gamma, lam):
        plot_gae(rewards, values, gamma, lam, tokens=tokens, last_value=last_value, title=title)
        plt.show()

    return widgets.interact(
        draw,
        gamma=widgets.FloatSlider(value=1.0, min=0.5, max=1.0, step=0.01, description="γ"),
        lam=widgets.FloatSlider(value=0.95, min=0.0, max=1.0, step=0.01, description="λ"),
    )


def plot_run_curves(frame, metric: str = "reward", *, label: str = "label", seed: str = "seed", step: str = "step",
                    title: str | None = None, ax=None):
    """Every run's ``metric`` against ``step``, one line per (label, seed): a colour per label, a line
    style per seed, so runs of one seed can be compared across labels. ``frame``: a tidy table such as
    ``rlbook.ablation.AblationResult.frame`` (columns ``label``, ``seed``, ``step`` and the metric)."""
    for column in (label, seed, step, metric):
        if column not in frame:
            raise ValueError(f"frame has no column {column!r}; it has {sorted(frame.columns)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(min(COLUMN_IN, 6.4), 3.4))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    seeds = list(dict.fromkeys(frame[seed]))
    for i, name in enumerate(dict.fromkeys(frame[label])):
        for j, value in enumerate(seeds):
            run = frame[(frame[label] == name) & (frame[seed] == value)].sort_values(step)
            ax.plot(run[step].to_numpy(), run[metric].to_numpy(), styles[j % len(styles)], color=colours[i % len(colours)],
                    lw=1.3, label=f"{name}, seed {value}")
    ax.set(xlabel=step, ylabel=metric, title=title or f"{metric} of every run")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.figure.tight_layout()
    return ax.figure
