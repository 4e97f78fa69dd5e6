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
    "one_step_drift",
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

    Spreads are standard deviations of log r_t (over tokens) and log s_i (over sequences); ``r_t min`` /
    ``r_t max`` the smallest and largest token ratio (the range GMPO's Fig. 1 compares, Zhao et al.
    2025, arXiv:2507.20673). The clip fractions are ``policy_loss``'s own metric (the fraction of
    tokens whose gradient the clip zeroes) on the same tensors: GRPO at ε = 0.2 on token ratios,
    GSPO at (3e-4, 4e-4) on sequence ratios, GMPO at ±0.4 in log space.
    """
    rows = []
    for update, logp in enumerate(batch.logps):
        token, sequence = log_ratios(batch, update)
        row = {"updates": update, "std log r_t": token.std(), "std log s_i": sequence.std(),
               "r_t min": float(np.exp(token.min())), "r_t max": float(np.exp(token.max()))}
        for variant in ("grpo", "gspo", "gmpo"):
            _, metrics = policy_loss(logp, batch.old_logp, batch.advantages, batch.mask, variant=variant)
            row[f"clip {variant}"] = metrics["clip_frac"]
        rows.append(row)
    return pd.DataFrame(rows).set_index("updates")


def one_step_drift(batch: OffPolicyBatch, *, eps_low: float = 3e-4, eps_high: float = 4e-4) -> dict:
    """How far the first step moved the rows it did not train on (the trainer's off-policy minibatch).

    From ``batch.logps[1]`` on the rows outside ``batch.trained_rows[0]``: the median |log s_i|
    (GSPO's sequence ratio, Zheng et al. 2025, arXiv:2507.18071, eq. 7), the share of those sequences
    inside GSPO's band (1 − ε_low ≤ s_i ≤ 1 + ε_high, §5.1's 3e-4 / 4e-4 by default), and the
    fraction of their tokens GSPO's and GRPO's (ε = 0.2) clips zero (``policy_loss``'s ``clip_frac``).
    """
    eps_low, eps_high = check_positive("eps_low", eps_low), check_positive("eps_high", eps_high)
    if batch.updates < 1 or not batch.trained_rows:
        raise ValueError("one_step_drift needs a batch with at least one recorded update (off_policy_batch(updates>=1))")
    untrained = torch.ones(len(batch.texts), dtype=torch.bool)
    untrained[batch.trained_rows[0]] = False
    if not untrained.any():
        raise ValueError("the first step trained on every row: use a minibatch_size below the batch size")
    logp, old_logp = batch.logps[1][untrained], batch.old_logp[untrained]
    mask, advantages = batch.mask[untrained], batch.advantages[untrained]
    log_s = gspo_sequence_ratio(logp, old_logp, mask).log()
    inside = (log_s <= np.log1p(eps_high)) & (log_s >= np.log1p(-eps_low))
    clip = {variant: policy_loss(logp, old_logp, advantages, mask, variant=variant, **knobs)[1]["clip_frac"]
            for variant, knobs in (("gspo", {"eps_low": eps_low, "eps_high": eps_high}), ("grpo", {}))}
    return {"median |log s_i|": float(log_s.abs().median()), "sequences inside GSPO's band": float(inside.float().mean()),
            "clip gspo": clip["gspo"], "clip grpo": clip["grpo"]}


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


def plot_ratio_spread(batch: OffPolicyBatch, update: int = 1, *, eps_token: float = 0.2, eps_sequence: float = 4e-4,
                      eps_sequence_low: float = 3e-4):
    """|log r_t| of every token and |log s_i| of every sequence after ``update`` steps, and s_i vs length.

    Left: histograms on a log axis, each normalised by its own count (the fraction of tokens, the
    fraction of sequences), with the clip bands of PPO/GRPO (``eps_token``, symmetric) and GSPO
    (``eps_sequence_low`` below 1, ``eps_sequence`` above, as |log(1 − ε_low)| and log(1 + ε_high))
    as vertical lines: whatever lies right of a line is outside its band on that side. Right:
    |log s_i| against the completion length |y_i|, coloured by correctness (long answers here are
    mostly correct scratchpads, so length and correctness go together). Values below 1e-7 (ratios
    equal to 1 up to float error) are drawn at 1e-7, values above 10 in the last bin. "% outside"
    counts ratios outside the band on either side, whatever the sign of the advantage: it is not a
    clip fraction (``gspo_clip_fraction`` and ``clip_fraction_table`` give those).
    """
    eps_token = check_positive("eps_token", eps_token)
    eps_sequence = check_positive("eps_sequence", eps_sequence)
    eps_sequence_low = check_positive("eps_sequence_low", eps_sequence_low)
    if eps_sequence_low >= 1:
        raise ValueError(f"eps_sequence_low must be below 1 (the band's lower edge is 1 − ε_low), got {eps_sequence_low}")
    signed_token, signed_sequence = log_ratios(batch, update)
    token, sequence = np.clip(np.abs(signed_token), FLOOR, 10), np.clip(np.abs(signed_sequence), FLOOR, 10)
    sequence_outside = (signed_sequence > np.log1p(eps_sequence)) | (signed_sequence < np.log1p(-eps_sequence_low))
    token_outside = np.abs(signed_token) > np.log1p(eps_token)
    bins = np.geomspace(FLOOR, 10, 57)
    fig, (ax_hist, ax_len) = plt.subplots(1, 2, figsize=(10, 4.6))
    ax_hist.hist(token, bins=bins, alpha=0.6, color="tab:blue", density=False,
                 weights=np.full(token.size, 1 / token.size), label=f"tokens |log r_t|  ({token.size})")
    ax_hist.hist(sequence, bins=bins, alpha=0.6, color="tab:red",
                 weights=np.full(sequence.size, 1 / sequence.size), label=f"sequences |log s_i|  ({sequence.size})")
    ax_hist.axvline(np.log1p(eps_token), color="tab:blue", ls="--",
                    label=f"token band log(1+{eps_token:.2g}): {token_outside.mean():.0%} outside")
    ax_hist.axvline(-np.log1p(-eps_sequence_low), color="tab:red", ls=":",
                    label=f"GSPO band, low side |log(1−{eps_sequence_low:.2g})|")
    ax_hist.axvline(np.log1p(eps_sequence), color="tab:red", ls="--",
                    label=f"GSPO band, high side log(1+{eps_sequence:.2g}): {sequence_outside.mean():.0%} outside")
    ax_hist.set(xscale="log", xlabel="|log ratio|  (left bar: unchanged, |log| < 1e-7)",
                ylabel="fraction of tokens (blue) / of sequences (red)")
    ax_hist.set_title(f"after {update} update(s): spread of token vs sequence ratios", fontsize=10)
    ax_hist.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    lengths = batch.lengths.numpy()
    correct = batch.rewards.numpy() == 1
    ax_len.scatter(lengths[correct], sequence[correct], s=14, color="tab:green", label="correct")
    ax_len.scatter(lengths[~correct], sequence[~correct], s=14, color="tab:gray", label="incorrect")
    ax_len.axhline(np.log1p(eps_sequence), color="tab:red", ls="--", label="GSPO band")
    ax_len.axhline(np.log1p(eps_token), color="tab:blue", ls="--", label="token band")
    ax_len.set(yscale="log", xlabel="completion length |y_i| (tokens)", ylabel="|log s_i|")
    ax_len.set_title("|log s_i| against length (long: mostly correct scratchpads)", fontsize=10)
    ax_len.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4)
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
    """The number of updates and GSPO's ε as knobs of ``plot_ratio_spread`` (an ``ipywidgets.interact``).

    The slider sets ε_low = ε_high (the paper's band is 3e-4 / 4e-4); the snapshots after the first
    update come from a policy trained with ``batch.variant``'s loss, as the printed line says.
    """
    import ipywidgets as widgets

    def draw(update, eps_sequence):
        plot_ratio_spread(batch, update, eps_sequence=eps_sequence, eps_sequence_low=min(eps_sequence, 0.5))
        plt.show()
        print(f"tokens clipped after {update} update(s) of {batch.variant.upper()}'s loss: GSPO at "
              f"ε_low = ε_high = {eps_sequence:.2g} {gspo_clip_fraction(batch, update, eps_sequence):.3f}, "
              f"GRPO at ε = 0.2 {gspo_clip_fraction(batch, update, 0.2, variant='grpo'):.3f}")

    return widgets.interact(
        draw,
        update=widgets.IntSlider(value=1, min=0, max=batch.updates, description="updates"),
        eps_sequence=widgets.FloatLogSlider(value=4e-4, base=10, min=-5, max=0, step=0.25,
                                            description="GSPO ε (both)"),
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
