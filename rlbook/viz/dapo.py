"""Figures and widgets for lesson 11 (DAPO, Yu et al. 2025, arXiv:2503.14476).

- ``plot_overlong_penalty``: the soft overlong punishment (``rlbook.shaping.soft_overlong_penalty``)
  against length, with the lengths of a real batch under it;
- ``upclip_stats`` / ``plot_clip_higher`` / ``clip_higher_widget``: the clip region of
  ``rlbook.losses.clipped_surrogate`` for ε_low / ε_high, and the tokens of a real batch whose
  probability rose past π_old · (1 + ε_high), i.e. the tokens whose own gradient the upper clip
  cut off (other tokens' gradients can still move them: the clip is not a cap on π);
- a real batch for those pictures (a rollout, its group advantages, and the log-probs after a few
  minibatch updates of a policy loss) comes from ``rlbook.probes.policy_after_updates``;
- ``upclipped_tokens``: the up-clipped tokens of a real batch as a table (which token, where, how likely);
- ``plot_clip_higher_bandit``: the runs of ``rlbook.toys.clip_higher_bandit`` for several ε_high:
  entropy and the mass on the rare right answers against the step;
- ``plot_dynamic_sampling``: DAPO's dynamic sampling in a run: flat groups before and after the filter,
  and the samples it cost;
- ``plot_ablation_bars``: one bar chart per metric of an ablation table;
- ``label_panels``: titles and y-labels for a figure of ``AblationResult.plot``, its legend under the panels;
- ``plot_against_samples``: a training metric against the completions sampled so far (dynamic sampling
  draws more per step, so a plot against the step flatters it);
- ``plot_paired_differences``: a forest plot of paired differences (mean, 95 % interval, seeds);
- ``plot_paired_gap_by_step``: one run's metric minus another's, seed by seed, against the step.

A real batch is a dict of tensors: ``old_logp`` (B, T) of the sampling policy, ``logp`` (B, T)
after some updates, ``advantages`` (B,) or (B, T), and ``mask`` (B, T).
"""

from __future__ import annotations

import math
import textwrap

import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import torch

from rlbook._checks import as_float_tensor, check_positive
from rlbook.aggregation import response_mask
from rlbook.losses import clipped_surrogate
from rlbook.shaping import soft_overlong_penalty

__all__ = ["plot_overlong_penalty", "upclip_stats", "upclipped_tokens", "plot_clip_higher",
           "clip_higher_widget", "plot_clip_higher_bandit", "plot_dynamic_sampling", "plot_ablation_bars",
           "label_panels", "plot_against_samples",
           "plot_paired_differences", "plot_paired_gap_by_step"]


def plot_overlong_penalty(max_len: int = 64, cache_len: int = 16, *, lengths=None, ax=None):
    """DAPO's soft overlong penalty R(|y|) for the budget ``max_len`` and window ``cache_len``.

    With ``lengths`` (completion lengths of a real batch), their histogram is drawn under the curve.
    """
    grid = torch.arange(0, max_len + max(8, max_len // 8) + 1)
    penalty = soft_overlong_penalty(grid, max_len, cache_len)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(grid.numpy(), penalty.numpy(), color="tab:red", lw=2, label="soft overlong penalty")
    ax.axvspan(max_len - cache_len, max_len, color="tab:red", alpha=0.08, label=f"window L_cache = {cache_len}")
    ax.axvline(max_len, color="black", ls="--", lw=1, label=f"budget L_max = {max_len}")
    if lengths is not None:
        counts = np.asarray(torch.as_tensor(lengths).float().flatten())
        twin = ax.twinx()
        twin.hist(counts, bins=np.arange(0, grid[-1].item() + 2, 2), color="tab:blue", alpha=0.35)
        twin.set_ylabel("completions (a real batch)", color="tab:blue")
    ax.set(xlabel="response length |y| (tokens)", ylabel="reward added", ylim=(-1.1, 0.15),
           title="DAPO's soft overlong punishment")
    ax.legend(fontsize=8, loc="lower left")
    return ax.figure


def _batch_tensors(batch: dict):
    """(old_prob, new_prob, token advantages, mask) as float tensors from a real-batch dict."""
    missing = {"old_logp", "logp", "advantages", "mask"} - set(batch)
    if missing:
        raise ValueError(f"batch must have keys old_logp, logp, advantages, mask; missing {sorted(missing)}")
    old_logp = as_float_tensor("batch['old_logp']", batch["old_logp"], ndim=(2,)).detach()
    logp = as_float_tensor("batch['logp']", batch["logp"], ndim=(2,)).detach()
    mask = response_mask(batch["mask"], name="batch['mask']")
    advantages = as_float_tensor("batch['advantages']", batch["advantages"], ndim=(1, 2)).detach()
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1).expand_as(logp)
    if not (old_logp.shape == logp.shape == mask.shape == advantages.shape):
        raise ValueError("batch tensors must share one (B, T) shape (advantages may be (B,))")
    return old_logp.exp(), logp.exp(), advantages, mask > 0


def upclip_stats(batch: dict, eps_high: float) -> dict:
    """Which tokens with A > 0 rose past π_old · (1 + ε_high): the tokens the upper clip stops.

    Returns the number of A > 0 tokens, how many and what fraction ended past the bound
    (``upclip_count``, ``upclip_frac``), the median and maximum π_old of those (NaN when none are),
    the median π_old of all A > 0 tokens for comparison, and the largest ratio π_θ/π_old of an
    A > 0 token (``max_ratio``: above 1 + ε_high when the other tokens' gradients carried a token past
    the point where its own was cut off). DAPO's Figure 3a: the up-clipped tokens are low-probability ones.
    """
    eps_high = check_positive("eps_high", eps_high, allow_zero=True)
    old_prob, new_prob, advantages, mask = _batch_tensors(batch)
    positive = mask & (advantages > 0)
    clipped = positive & (new_prob > old_prob * (1 + eps_high))
    chosen = old_prob[clipped]
    return {
        "positive_tokens": int(positive.sum()),
        "upclip_count": int(clipped.sum()),
        "max_ratio": float((new_prob / old_prob)[positive].max()) if positive.any() else float("nan"),
        "upclip_frac": float(clipped.sum() / positive.sum().clamp(min=1)),
        "median_old_prob": float(chosen.median()) if chosen.numel() else float("nan"),
        "max_old_prob": float(chosen.max()) if chosen.numel() else float("nan"),
        "positive_median_old_prob": float(old_prob[positive].median()) if positive.any() else float("nan"),
        **_clipped_in_update_stats(batch, old_prob),
    }


def _clipped_in_update_stats(batch: dict, old_prob) -> dict:
    """Counts of the tokens the upper clip switched off while their row was being trained (``batch["clipped_high"]``,
    recorded by ``rlbook.probes.policy_after_updates``); empty when the batch has no such record."""
    if "clipped_high" not in batch:
        return {}
    clipped = torch.as_tensor(batch["clipped_high"]).bool()
    if clipped.shape != old_prob.shape:
        raise ValueError(f"batch['clipped_high'] must have shape {tuple(old_prob.shape)}, got {tuple(clipped.shape)}")
    chosen = old_prob[clipped]
    return {"clipped_in_update_count": int(clipped.sum()),
            "clipped_in_update_median_old_prob": float(chosen.median()) if chosen.numel() else float("nan"),
            "clipped_in_update_max_old_prob": float(chosen.max()) if chosen.numel() else float("nan")}


def upclipped_tokens(batch: dict, completion_ids, tokenizer, eps_high: float):
    """A table of the up-clipped tokens of ``batch``: one row per A > 0 token with π_θ > π_old (1 + ε_high).

    When ``batch`` comes from ``rlbook.probes.policy_after_updates`` it also lists the tokens the clip
    switched off during an update of their row (``clipped_high``), with columns ``ended_above``,
    ``clipped_in_update`` and ``ratio_at_last_update`` (the ratio the row's last update saw).

    Columns: ``row`` and ``position`` in the batch, the ``token`` (decoded), ``old_prob``, ``new_prob``,
    ``ratio`` and ``advantage``; sorted by ``old_prob``. ``completion_ids`` is the batch's (B, T) tokens.
    """
    import pandas as pd

    eps_high = check_positive("eps_high", eps_high, allow_zero=True)
    old_prob, new_prob, advantages, mask = _batch_tensors(batch)
    completion_ids = torch.as_tensor(completion_ids)
    if tuple(completion_ids.shape) != tuple(mask.shape):
        raise ValueError(f"completion_ids must have shape {tuple(mask.shape)}, got {tuple(completion_ids.shape)}")
    ended_above = mask & (advantages > 0) & (new_prob > old_prob * (1 + eps_high))
    in_update = torch.as_tensor(batch["clipped_high"]).bool() if "clipped_high" in batch else torch.zeros_like(mask)
    rows, positions = (ended_above | in_update).nonzero(as_tuple=True)
    extra = {} if "clipped_high" not in batch else {
        "ended_above": ended_above[rows, positions].tolist(),
        "clipped_in_update": in_update[rows, positions].tolist(),
        "ratio_at_last_update": torch.as_tensor(batch["last_ratio"])[rows, positions].tolist()}
    table = pd.DataFrame({
        "row": rows.tolist(),
        "position": positions.tolist(),
        "token": [tokenizer.decode([int(completion_ids[r, t])]) for r, t in zip(rows, positions)],
        "old_prob": old_prob[rows, positions].tolist(),
        "new_prob": new_prob[rows, positions].tolist(),
        "ratio": (new_prob[rows, positions] / old_prob[rows, positions]).tolist(),
        "advantage": advantages[rows, positions].tolist(),
        **extra,
    })
    return table.sort_values("old_prob", kind="stable").reset_index(drop=True)


def plot_clip_higher(eps_low: float = 0.2, eps_high: float = 0.28, *, batch: dict | None = None):
    """Left: the clipped objective vs r = π_θ/π_old for A = ±1. Right: where an A > 0 token loses its gradient.

    Once r > 1 + ε_high the clipped term is constant, so an A > 0 token's *own* term stops pushing
    it up. That is not a cap on π: the other tokens' gradients move the shared parameters and can
    carry it further (a real batch shows it). The right panel draws the ratio r against π_old on a
    logit axis (which spreads out both the unlikely tokens and the near-certain ones): the line
    r = 1 + ε_high, and the ceiling r ≤ 1/π_old that π ≤ 1 sets, which is lower than the clip for
    π_old > 1/(1 + ε_high). With ``batch``, its A > 0 tokens are drawn: red ones ended above the
    line (their own gradient was cut off there), blue ones below it.
    """
    eps_low = check_positive("eps_low", eps_low, allow_zero=True)
    eps_high = check_positive("eps_high", eps_high, allow_zero=True)
    if eps_low >= 1:
        raise ValueError(f"eps_low must be < 1, got {eps_low}")
    fig, (ax_obj, ax_prob) = plt.subplots(1, 2, figsize=(11, 4.4))
    ratio = torch.linspace(0.3, 1.8, 400)
    for sign, colour in ((1.0, "tab:green"), (-1.0, "tab:red")):
        objective = -clipped_surrogate(ratio, torch.full_like(ratio, sign), eps_low=eps_low, eps_high=eps_high)
        ax_obj.plot(ratio.numpy(), objective.numpy(), color=colour, lw=2, label=f"A = {sign:+.0f}")
    ax_obj.axvspan(1 - eps_low, 1 + eps_high, color="0.85", alpha=0.6, label="clip range")
    for edge in (1 - eps_low, 1 + eps_high):
        ax_obj.axvline(edge, color="black", lw=0.8, ls=":")
    ax_obj.set(xlabel="ratio r = π_θ / π_old", ylabel="objective min(rA, clip(r)A)",
               title=f"clip region: [1 − {eps_low:.2f}, 1 + {eps_high:.2f}]")
    ax_obj.legend(fontsize=8)
    ax_obj.grid(alpha=0.3)

    low, high, top = 1e-3, 1 - 1e-5, 1 + eps_high
    old = np.concatenate([np.geomspace(low, 0.5, 100), 1 - np.geomspace(0.5, 1 - high, 100)[1:]])
    ax_prob.axhline(1 + eps_high, color="black", lw=1.5,
                    label=f"r = 1 + ε_high = {1 + eps_high:.2f}: the token's own gradient stops")
    ax_prob.plot(old, 1 / old, color="0.5", lw=1, ls="--", label="r = 1 / π_old (π_θ = 1)")
    ax_prob.axhline(1, color="0.7", lw=0.8)
    title = "where the push stops: the line 1 + ε_high and the ceiling 1/π_old"
    ylabel = "r = π_θ / π_old"
    if batch is not None:
        ylabel = "r = π_θ / π_old after the updates"
        old_prob, new_prob, advantages, mask = _batch_tensors(batch)
        positive = mask & (advantages > 0)
        above = positive & (new_prob > old_prob * (1 + eps_high))
        below = positive & ~above
        ratios = new_prob / old_prob
        clamp = lambda x: x.clamp(low, high).numpy()  # noqa: E731 (a logit axis cannot show 0 or 1)
        ax_prob.scatter(clamp(old_prob[below]), ratios[below].numpy(), s=14, color="tab:blue", alpha=0.5,
                        edgecolors="none", label=f"A > 0 tokens below the line ({int(below.sum())})")
        ax_prob.scatter(clamp(old_prob[above]), ratios[above].numpy(), s=28, color="tab:red",
                        edgecolors="black", linewidths=0.5, label=f"A > 0 tokens above it ({int(above.sum())})")
        # Tokens that land on one spot (the same decision in several rows) would hide behind each other: count them.
        spots = {}
        for old_value, ratio in zip(old_prob[above].tolist(), ratios[above].tolist()):
            key = (round(math.log(old_value), 1), round(ratio, 1))  # about one marker's width on the axes
            spots.setdefault(key, []).append((old_value, ratio))
        for members in spots.values():
            if len(members) > 1:
                spot = (min(max(members[0][0], low), high), max(ratio for _, ratio in members))
                ax_prob.annotate(f"×{len(members)}", spot, xytext=(6, 4), textcoords="offset points", fontsize=8,
                                 color="tab:red")
        if positive.any():
            top = max(top, float(ratios[positive].max()))
        stats = upclip_stats(batch, eps_high)
        title = (f"{stats['upclip_frac']:.1%} of A > 0 tokens ended above 1 + ε_high"
                 + (f"; largest r = {float(ratios[positive].max()):.2f}" if positive.any() else ""))
    ax_prob.set_xscale("logit")
    ticks = [1e-3, 1e-2, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999]
    ax_prob.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=8)
    ax_prob.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax_prob.set(xlim=(low, high), ylim=(0.6, top * 1.08 + 0.05), xlabel="π_old(token)  (logit axis)",
                ylabel=ylabel, title=title)
    ax_prob.title.set_fontsize(10)
    ax_prob.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    ax_prob.grid(alpha=0.3, which="major")
    fig.tight_layout()
    return fig


def clip_higher_widget(batch: dict | None = None, *, batches: dict | None = None):
    """ε_low and ε_high as sliders over ``plot_clip_higher``.

    ``batches``: ``{ε_high: batch}``, one real batch per ε_high, each updated *under* that ε_high
    (``rlbook.probes.policy_after_updates``): the ε_high slider then steps through those values and
    shows the tokens where that clip left them, so moving it changes what happened to the tokens, not
    only which fixed points lie above a line; the ε_low slider then ends at the smallest ε_high.
    ``batch``: one batch drawn under every ε_high (the line moves, the tokens do not). ε_low moves the
    left panel's flat region only.
    """
    import ipywidgets as widgets

    if batch is not None and batches is not None:
        raise ValueError("pass batch or batches, not both")
    eps_low_slider = widgets.FloatSlider(value=0.2, min=0.0, max=0.5, step=0.01, description="ε_low")
    if batches is None:
        def draw(eps_low, eps_high):
            plot_clip_higher(eps_low, max(eps_high, eps_low), batch=batch)
            plt.show()

        eps_high_slider = widgets.FloatSlider(value=0.28, min=0.0, max=1.0, step=0.01, description="ε_high")
        return widgets.interact(draw, eps_low=eps_low_slider, eps_high=eps_high_slider)
    if not isinstance(batches, dict) or not batches:
        raise ValueError("batches must be a non-empty dict {eps_high: batch}")
    values = sorted(check_positive("eps_high", float(eps), allow_zero=True) for eps in batches)
    by_value = {float(eps): b for eps, b in batches.items()}
    # ε_low stops at the smallest ε_high, so the curve drawn is always the one the slider reads
    eps_low_slider.max = values[0]
    eps_low_slider.value = min(eps_low_slider.value, values[0])

    def draw_probed(eps_low, eps_high):
        plot_clip_higher(eps_low, eps_high, batch=by_value[eps_high])
        plt.show()

    start = min(values, key=lambda v: abs(v - 0.28))
    eps_high_slider = widgets.SelectionSlider(options=[(f"{v:g}", v) for v in values], value=start,
                                              description="ε_high")
    return widgets.interact(draw_probed, eps_low=eps_low_slider, eps_high=eps_high_slider)


def plot_clip_higher_bandit(runs: dict):
    """``runs`` maps ε_high to a result of ``rlbook.toys.clip_higher_bandit``; draws, per ε_high, the
    mean over seeds of the entropy (left) and of π on the rare right arms (right) against the step,
    each with a band of ± one standard error of the mean."""
    if not isinstance(runs, dict) or not runs:
        raise ValueError("runs must be a non-empty dict of eps_high -> clip_higher_bandit(...) result")
    for eps_high, run in runs.items():
        if not isinstance(run, dict) or not {"entropy", "rare_mass"} <= set(run):
            raise ValueError(f"runs[{eps_high!r}] must be a clip_higher_bandit result (keys entropy, rare_mass)")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    for (eps_high, run), colour in zip(sorted(runs.items()), plt.cm.viridis(np.linspace(0.1, 0.85, len(runs)))):
        for ax, key in zip(axes, ("entropy", "rare_mass")):
            values = np.asarray(run[key], dtype=float)
            mean, sem = values.mean(0), values.std(0) / np.sqrt(len(values))
            steps = np.arange(values.shape[1])
            ax.plot(steps, mean, color=colour, lw=2, label=f"ε_high = {eps_high:g}")
            ax.fill_between(steps, mean - sem, mean + sem, color=colour, alpha=0.25)
    axes[0].set(xlabel="step", ylabel="entropy of π (nats)", title="entropy, mean over seeds (± s.e.)")
    axes[1].set(xlabel="step", ylabel="π on the rare right arms", title="the rare right answers")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_dynamic_sampling(frame, *, batch_size: int):
    """Dynamic sampling in a run, from its history ``frame`` (one seed, or several: averaged by step).

    Left: the fraction of groups with all-equal rewards in the first round of sampling (what GRPO
    would train on) and in the batch actually trained on. Right: completions sampled per step, the
    ``batch_size`` of one round plus the extra rounds that refilled the batch.
    """
    needed = {"step", "frac_zero_adv_groups", "frac_zero_adv_groups_trained", "extra_samples"}
    missing = needed - set(frame.columns)
    if missing:
        raise ValueError(f"frame must have columns {sorted(needed)}; missing {sorted(missing)}")
    batch_size = check_positive("batch_size", batch_size)
    by_step = frame.groupby("step")[sorted(needed - {"step"})].mean()
    fig, (ax_flat, ax_cost) = plt.subplots(1, 2, figsize=(10, 3.2))
    ax_flat.plot(by_step.index, by_step["frac_zero_adv_groups"], "o-", color="tab:red", ms=3,
                 label="first round (before the filter)")
    ax_flat.plot(by_step.index, by_step["frac_zero_adv_groups_trained"], "o-", color="tab:green", ms=3,
                 label="trained batch (after)")
    seeds = frame["seed"].nunique() if "seed" in frame.columns else 1
    ax_flat.set(xlabel="step", ylabel="fraction of groups", ylim=(-0.05, 1.05),
                title="groups with zero advantage (all rewards equal)" if seeds == 1
                else f"zero-advantage groups (mean of {seeds} seeds)")
    ax_flat.legend(fontsize=8)
    samples = batch_size + by_step["extra_samples"]
    ax_cost.bar(by_step.index, samples, color="tab:blue", alpha=0.6, label="sampled")
    ax_cost.axhline(batch_size, color="black", ls="--", lw=1, label=f"one round = {batch_size:g}")
    ax_cost.set(xlabel="step", ylabel="completions sampled",
                title="the cost: extra rounds of sampling" if seeds == 1 else f"extra sampling (mean of {seeds} seeds)")
    ax_cost.legend(fontsize=8)
    for ax in (ax_flat, ax_cost):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_ablation_bars(table, metrics=("reward", "entropy", "length_incorrect"), *, points=None, xlabels=None):
    """One horizontal bar chart per metric (column of ``table``, indexed by run label).

    ``xlabels``: optional ``{metric: x-axis label}`` (e.g. the unit); a metric without one gets none.
    ``points``: optional ``{metric: Series indexed by (label, seed)}`` (e.g. ``AblationResult.per_run``), drawn
    as one black dot per seed on its row's bar, so the spread between seeds shows beside the mean.
    """
    metrics = list(metrics)
    missing = [m for m in metrics if m not in table.columns]
    if missing:
        raise ValueError(f"metrics {missing} are not columns of table (it has {list(table.columns)})")
    points = dict(points or {})
    unknown = sorted(set(points) - set(metrics))
    if unknown:
        raise ValueError(f"points has metrics {unknown} that are not in metrics {metrics}")
    rows = {str(label): i for i, label in enumerate(table.index)}
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 0.6 + 0.4 * len(table)), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        ax.barh(list(rows), table[metric].to_numpy(dtype=float), color="tab:blue")
        if metric in points:
            for (label, _seed), value in points[metric].items():
                if str(label) not in rows:
                    raise ValueError(f"points[{metric!r}] has label {label!r}, not a row of table")
                ax.plot(float(value), rows[str(label)], "o", color="black", ms=3.5)
        title = metric + (" (dots: seeds)" if metric in points else "")
        ax.set_title("\n".join(textwrap.wrap(title, 34)), fontsize=10)  # side by side, long titles would overlap
        if xlabels and metric in xlabels:
            ax.set_xlabel(xlabels[metric])
        ax.grid(axis="x", alpha=0.3)
        ax.invert_yaxis()
    for ax in axes[0, 1:]:
        ax.set_yticklabels([])
    fig.tight_layout()
    return fig


def plot_paired_differences(differences, seed_columns, *, xlabel: str = "held-out pass@1 difference", ax=None):
    """A forest plot of paired differences: one line per row of ``differences``.

    ``differences``: a table like ``AblationResult.paired_differences`` (index: "a − b" labels; columns
    ``mean``, ``CI low``, ``CI high`` and the per-seed differences named in ``seed_columns``). Each row is
    drawn as its 95 % interval (a line), its mean (a diamond) and its seeds (dots), beside a line at 0,
    so an interval that crosses 0 (a difference not separated) is visible as such.
    """
    missing = [c for c in ("mean", "CI low", "CI high", *seed_columns) if c not in differences.columns]
    if missing:
        raise ValueError(f"differences lacks columns {missing}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 0.8 + 0.45 * len(differences)))
    for i, (_, row) in enumerate(differences.iterrows()):
        ax.plot([row["CI low"], row["CI high"]], [i, i], color="tab:blue", lw=2,
                label="95 % interval (t, over seeds)" if i == 0 else None)
        ax.plot(row["mean"], i, "D", color="tab:blue", ms=6, label="mean" if i == 0 else None)
        ax.plot(row[list(seed_columns)].to_numpy(float), [i] * len(seed_columns), "o", color="black", ms=3.5,
                label="seeds" if i == 0 else None)
    ax.axvline(0, color="grey", lw=1, ls="--")
    ax.set_yticks(range(len(differences)), [str(label) for label in differences.index], fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel=xlabel)
    ax.grid(axis="x", alpha=0.3)
    fig = ax.figure  # the legend in a strip above the axes, across the figure: it hides no row
    fig.legend(*ax.get_legend_handles_labels(), loc="upper center", ncol=3, frameon=False, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / fig.get_figheight()))
    return fig


def plot_paired_gap_by_step(frame, high: str, low: str, metric: str = "entropy", *, ax=None):
    """``metric`` of run ``high`` minus run ``low``, seed by seed (runs of one seed pair up), against the step.

    ``frame``: an ablation's per-step table with columns ``label``, ``seed``, ``step`` and ``metric``
    (``AblationResult.frame``). One thin line per seed, their mean thick, and a line at 0: a gap of one
    sign in every seed shows as all lines on one side. Returns the figure.
    """
    for column in ("label", "seed", "step", metric):
        if column not in frame.columns:
            raise ValueError(f"frame lacks column {column!r}")
    wide = frame[frame["label"].isin([high, low])].pivot_table(index="step", columns=["label", "seed"], values=metric)
    if high not in wide.columns.get_level_values(0) or low not in wide.columns.get_level_values(0):
        raise ValueError(f"frame must hold runs labelled {high!r} and {low!r}")
    gap = wide[high] - wide[low]
    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 3.2))
    for seed in gap.columns:
        ax.plot(gap.index, gap[seed], lw=1, alpha=0.7, label=f"seed {seed}")
    ax.plot(gap.index, gap.mean(axis=1), color="black", lw=2.2, label="mean over seeds")
    ax.axhline(0, color="grey", lw=1, ls="--")
    ax.set(xlabel="step", ylabel=f"{metric} difference", title=f"{metric}: {high} minus {low}, paired by seed")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax.figure


def label_panels(fig, names):
    """Give each panel of a multi-panel figure (e.g. ``AblationResult.plot``) a title and a y-label, and
    move the first panel's legend to a strip under the panels, so that neither the labels nor the legend
    sit on the curves.

    ``names``: one string per panel, "what (how)": the whole string is the title, the part before " ("
    the y-label. Returns ``fig``.
    """
    axes = [ax for ax in fig.axes if ax.get_visible()]
    names = list(names)
    if len(names) > len(axes):
        raise ValueError(f"{len(names)} names for {len(axes)} panels")
    for ax, name in zip(axes, names):
        ax.set_title("\n".join(textwrap.wrap(name, 34)), fontsize=10)
        ax.set_ylabel(name.split(" (")[0])
    legend = axes[0].get_legend()
    if legend is not None:
        handles, labels = axes[0].get_legend_handles_labels()
        title = legend.get_title().get_text().replace("\n", "; ")
        legend.remove()
        ncol = min(len(labels), 2)
        strip = 0.2 * math.ceil(len(labels) / ncol) + (0.25 if title else 0.05) + 0.1  # inches under the panels
        width, height = fig.get_size_inches()
        fig.set_size_inches(width, height + strip)
        fig.tight_layout(rect=(0, strip / (height + strip), 1, 1))
        fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0), ncol=ncol, fontsize=8,
                   title=title or None, title_fontsize=7, frameon=False)
    else:
        fig.tight_layout()
    return fig


def plot_against_samples(frame, metric: str = "pass@1", *, batch_size: int, smooth: int = 3, ax=None):
    """``metric`` against the completions sampled so far, one line per label (mean over seeds).

    ``frame``: a per-step log like ``AblationResult.frame`` (columns ``label``, ``seed``, ``step``,
    ``extra_samples`` and ``metric``). A step samples ``batch_size`` completions plus its
    ``extra_samples`` (dynamic sampling's extra rounds), so a row that draws more per step is drawn at
    the sample count it actually used. ``smooth`` > 1: a trailing moving average over steps.
    """
    missing = [c for c in ("label", "seed", "step", "extra_samples", metric) if c not in frame.columns]
    if missing:
        raise ValueError(f"frame lacks columns {missing}")
    check_positive("batch_size", batch_size)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 3.4))
    for label, runs in frame.groupby("label", sort=False):
        ys, xs = [], []
        for _, run in runs.sort_values("step").groupby("seed", sort=False):
            xs.append((batch_size + run["extra_samples"]).cumsum().to_numpy(dtype=float))
            ys.append(run[metric].rolling(smooth, min_periods=1).mean().to_numpy(dtype=float))
        length = min(len(v) for v in ys)
        ax.plot(np.mean([v[:length] for v in xs], axis=0), np.mean([v[:length] for v in ys], axis=0), label=str(label))
    ax.set(xlabel="completions sampled so far (mean over seeds)", ylabel=metric,
           title=f"{metric} against samples, not steps")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax.figure.tight_layout()
    return ax.figure
