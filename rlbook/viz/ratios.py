"""Figures and widgets for lesson 12: token ratios vs GSPO's sequence ratio and GMPO's geometric mean.

The lesson looks at *real* off-policy ratios. ``rlbook.probes.off_policy_batch`` makes them the way a
minibatched trainer does (``rlbook.trainers.preset("gspo")`` splits each batch of 64 completions
into minibatches of 32, so every minibatch after the first is scored by a policy that has already
moved): sample a batch, take a few AdamW steps on it, and recompute the log-probs of the same
tokens after each step. The figures then compare the spread of

    token ratios      r_t = π_θ(y_t)/π_old(y_t)                      (PPO, arXiv:1707.06347)
    sequence ratios   s_i = (π_θ(y_i)/π_old(y_i))^{1/|y_i|}          (GSPO, arXiv:2507.18071)

and what fraction of them each method's clip range cuts off. Every function draws a new figure and
returns it; end a notebook line with ``;`` so Jupyter shows it once.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
import numpy as np
import pandas as pd
import torch

from rlbook._checks import check_positive
from rlbook.losses import policy_loss
from rlbook.ratios import gspo_sequence_ratio
from rlbook.probes import OffPolicyBatch

__all__ = [
    "log_ratios",
    "clip_fraction_table",
    "gspo_clip_fraction",
    "plot_clip_fractions",
    "plot_ratio_spread",
    "ratio_spread_widget",
    "plot_histories",
]

# |log ratio| below this is drawn at this value on the log axis (ratios equal to 1 up to float error).
FLOOR = 1e-7


def log_ratios(batch: OffPolicyBatch, update: int) -> tuple[np.ndarray, np.ndarray]:
    """(log r_t of every completion token, log s_i of every sequence) after ``update`` steps, as arrays."""
    if not 0 <= update <= batch.updates:
        raise ValueError(f"update must be in [0, {batch.updates}], got {update}")
    new = batch.logps[update]
    token = (new - batch.old_logp)[batch.mask > 0]
    sequence = gspo_sequence_ratio(new, batch.old_logp, batch.mask).log()
    return token.numpy(), sequence.numpy()


def clip_fraction_table(batch: OffPolicyBatch) -> pd.DataFrame:
    """One row per number of updates k: the spread of the log-ratios and each method's clip fraction.

    Spreads are standard deviations of log r_t (over tokens) and log s_i (over sequences). The
    clip fractions are ``policy_loss``'s own metric (the fraction of tokens whose gradient the
    clip zeroes) on the same tensors: GRPO at ε = 0.2 on token ratios, GSPO at (3e-4, 4e-4) on
    sequence ratios, GMPO at ±0.4 in log space.
    """
    rows = []
    for update, logp in enumerate(batch.logps):
        token, sequence = log_ratios(batch, update)
        row = {"updates": update, "std log r_t": token.std(), "std log s_i": sequence.std()}
        for variant in ("grpo", "gspo", "gmpo"):
            _, metrics = policy_loss(logp, batch.old_logp, batch.advantages, batch.mask, variant=variant)
            row[f"clip {variant}"] = metrics["clip_frac"]
        rows.append(row)
    return pd.DataFrame(rows).set_index("updates")


def gspo_clip_fraction(batch: OffPolicyBatch, update: int, eps: float, *, variant: str = "gspo",
                       rows=None) -> float:
    """``policy_loss``'s token clip fraction after ``update`` steps with the band ε_low = ε_high = ``eps``.

    The fraction of completion tokens whose gradient the clip zeroes: pessimistic by the sign of the
    advantage, never a token with A = 0. ``variant="grpo"`` gives GRPO's at the same ε on token ratios.
    ``rows``: a boolean mask or indices of the responses to count (default all of them).
    """
    if not 0 <= update <= batch.updates:
        raise ValueError(f"update must be in [0, {batch.updates}], got {update}")
    eps = check_positive("eps", eps)
    picked = torch.arange(len(batch.texts)) if rows is None else torch.as_tensor(np.asarray(rows))
    if picked.dtype == torch.bool:
        if picked.shape != (len(batch.texts),):
            raise ValueError(f"a boolean rows mask needs one entry per response ({len(batch.texts)}), "
                             f"got shape {tuple(picked.shape)}")
        picked = picked.nonzero(as_tuple=True)[0]
    if picked.numel() == 0:
        raise ValueError("rows selects no response")
    _, metrics = policy_loss(batch.logps[update][picked], batch.old_logp[picked], batch.advantages[picked],
                             batch.mask[picked], variant=variant, eps_low=eps, eps_high=eps)
    return float(metrics["clip_frac"])


def plot_clip_fractions(table: pd.DataFrame):
    """Clip fraction of GRPO, GSPO and GMPO against the number of updates since sampling."""
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    styles = {"clip grpo": ("GRPO, token ratio, ε = 0.2", "tab:blue"),
              "clip gspo": ("GSPO, sequence ratio, ε = 3e-4 / 4e-4", "tab:red"),
              "clip gmpo": ("GMPO, log-clip ±0.4", "tab:green")}
    for column, (label, colour) in styles.items():
        ax.plot(table.index, table[column], "o-", color=colour, label=label)
    ax.set(xlabel="optimizer steps since the batch was sampled", ylabel="fraction of tokens clipped",
           ylim=(-0.03, 1.03), xticks=list(table.index))
    ax.set_title("Who clips what, on the same real tokens", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_ratio_spread(batch: OffPolicyBatch, update: int = 1, *, eps_token: float = 0.2, eps_sequence: float = 4e-4):
    """|log r_t| of every token and |log s_i| of every sequence after ``update`` steps, and s_i vs length.

    Left: histograms on a log axis, with the clip bands log(1 + ε) of PPO/GRPO (``eps_token``) and
    GSPO (``eps_sequence``) as vertical lines: whatever lies right of a line is outside its band.
    Right: |log s_i| against the completion length |y_i|, coloured by correctness (long answers here
    are mostly correct scratchpads, so length and correctness go together). Values below 1e-7 (ratios
    equal to 1 up to float error) are drawn at 1e-7, values above 10 in the last bin. "% outside"
    counts |log| > log(1 + ε) on either side, whatever the sign of the advantage: it is not a clip
    fraction (``gspo_clip_fraction`` and ``clip_fraction_table`` give those).
    """
    eps_token = check_positive("eps_token", eps_token)
    eps_sequence = check_positive("eps_sequence", eps_sequence)
    token, sequence = log_ratios(batch, update)
    token, sequence = np.clip(np.abs(token), FLOOR, 10), np.clip(np.abs(sequence), FLOOR, 10)
    bins = np.geomspace(FLOOR, 10, 57)
    fig, (ax_hist, ax_len) = plt.subplots(1, 2, figsize=(10, 3.9))
    ax_hist.hist(token, bins=bins, alpha=0.6, color="tab:blue", density=False,
                 weights=np.full(token.size, 1 / token.size), label=f"tokens |log r_t|  ({token.size})")
    ax_hist.hist(sequence, bins=bins, alpha=0.6, color="tab:red",
                 weights=np.full(sequence.size, 1 / sequence.size), label=f"sequences |log s_i|  ({sequence.size})")
    for eps, colour, name in ((eps_token, "tab:blue", "token band"), (eps_sequence, "tab:red", "GSPO band")):
        outside = (token if name == "token band" else sequence) > np.log1p(eps)
        ax_hist.axvline(np.log1p(eps), color=colour, ls="--",
                        label=f"{name} log(1+{eps:.2g}): {outside.mean():.0%} outside")
    ax_hist.set(xscale="log", xlabel="|log ratio|  (left bar: unchanged, |log| < 1e-7)", ylabel="fraction")
    ax_hist.set_title(f"after {update} update(s): spread of token vs sequence ratios", fontsize=10)
    ax_hist.legend(fontsize=8, loc="upper left")
    lengths = batch.lengths.numpy()
    correct = batch.rewards.numpy() == 1
    ax_len.scatter(lengths[correct], sequence[correct], s=14, color="tab:green", label="correct")
    ax_len.scatter(lengths[~correct], sequence[~correct], s=14, color="tab:gray", label="incorrect")
    ax_len.axhline(np.log1p(eps_sequence), color="tab:red", ls="--", label="GSPO band")
    ax_len.axhline(np.log1p(eps_token), color="tab:blue", ls="--", label="token band")
    ax_len.set(yscale="log", xlabel="completion length |y_i| (tokens)", ylabel="|log s_i|")
    ax_len.set_title("|log s_i| against length (long: mostly correct scratchpads)", fontsize=10)
    ax_len.legend(fontsize=8)
    # Plain "1e-07" tick labels: matplotlib's default log labels are mathtext, whose one global parser
    # failed once (a ParseException at char 0) while this widget was being redrawn in JupyterLab under load.
    for axis in (ax_hist.xaxis, ax_len.yaxis):
        axis.set_major_locator(mticker.LogLocator(base=10, numticks=6))
        axis.set_major_formatter(mticker.LogFormatter())
        axis.set_minor_formatter(mticker.NullFormatter())
    for ax in (ax_hist, ax_len):
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def ratio_spread_widget(batch: OffPolicyBatch):
    """The number of updates and GSPO's ε as knobs of ``plot_ratio_spread`` (an ``ipywidgets.interact``)."""
    import ipywidgets as widgets

    def draw(update, eps_sequence):
        plot_ratio_spread(batch, update, eps_sequence=eps_sequence)
        plt.show()
        print(f"tokens clipped after {update} update(s): GSPO at ε = {eps_sequence:.2g} "
              f"{gspo_clip_fraction(batch, update, eps_sequence):.3f}, GRPO at ε = 0.2 "
              f"{gspo_clip_fraction(batch, update, 0.2, variant='grpo'):.3f}")

    return widgets.interact(
        draw,
        update=widgets.IntSlider(value=1, min=0, max=batch.updates, description="updates"),
        eps_sequence=widgets.FloatLogSlider(value=4e-4, base=10, min=-5, max=0, step=0.25, description="GSPO ε"),
    )


def plot_histories(histories: dict[str, pd.DataFrame], keys, *, title: str | None = None,
                   styles: dict[str, dict] | None = None, rolling: int = 1, legend_outside: bool = False):
    """One panel per metric in ``keys``, each run of ``histories`` (name → ``History.to_pandas()``) a line.

    A run that did not log a metric is left out of that panel. ``styles``: matplotlib line keywords per
    run name (e.g. one colour per recipe, a line style per seed); ``rolling``: plot the mean over that many
    steps (trailing window; 1 plots the raw values); ``legend_outside``: the legend right of the panels.
    """
    keys = list(keys)
    if not keys:
        raise ValueError("keys must name at least one metric")
    missing = [key for key in keys if not any(key in frame for frame in histories.values())]
    if missing:
        raise ValueError(f"no run logged {missing}")
    if isinstance(rolling, bool) or not isinstance(rolling, int) or rolling < 1:
        raise ValueError(f"rolling must be a positive int (steps in the window), got {rolling!r}")
    styles = styles or {}
    unknown = sorted(set(styles) - set(histories))
    if unknown:
        raise ValueError(f"styles names runs that histories does not hold: {unknown}")
    fig, axes = plt.subplots(1, len(keys), figsize=(3.6 * len(keys) + (1.8 if legend_outside else 0), 3.0),
                             squeeze=False)
    for ax, key in zip(axes[0], keys):
        for name, frame in histories.items():
            if key in frame:
                values = frame[key].rolling(rolling, min_periods=1).mean() if rolling > 1 else frame[key]
                ax.plot(frame["step"], values, **({"marker": "o", "ms": 3} | styles.get(name, {}) | {"label": name}))
        ax.set_title(key if rolling == 1 else f"{key} (mean of the last {rolling} steps)", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
        if legend_outside:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        else:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig
