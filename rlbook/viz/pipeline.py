"""Figures and the widget of lesson 20 (the full R1 pipeline, and distillation).

- ``plot_rlvr_curves``: held-out pass@1 and R1-format share against RL step, for RL after a cold
  start and RL straight from the base (R1-Zero), each seed a line;
- ``plot_stage_table``: the stage-by-stage table as three panels (pass@1 with pass@k, format share,
  the review gold reward);
- ``plot_rs_yield`` / ``rs_yield_widget``: rejection sampling's yield — the expected share of prompts
  that keep a sample when n are drawn (the unbiased pass@n of the keepable table), and each prompt's
  chance of being kept, prompts sorted by difficulty; the widget's slider is n, its menu the policy;
- ``plot_stage4_reviews``: stage 4's reviews by length — the share of parsed reviews with each clause
  count, per stage, beside the reward model's score of the best review of each length (the clause
  ladder) against the gold reward, best and as in the reward model's training pairs;
- ``plot_stage4_step`` / ``stage4_widget``: stage 4 step by step (``rlbook.pipeline.review_trajectory``):
  the clause counts of the parsed reviews at one step beside the first, and the gold reward, the reward
  model's score, the shares that parse, are garbled or cut off, and the KL to the reference over the steps;
  the widget's slider is the step;
- ``plot_distillation``: the small model's held-out pass@1 over RL steps against the same model
  after SFT on the big policy's outputs (and after any other SFT arm, such as clean data).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from rlbook._checks import check_positive
from rlbook._figures import COLUMN_IN
from rlbook.coverage import pass_at_k_curve, per_problem_pass_at_k
from rlbook.tasks.reviews import UNPARSABLE

__all__ = ["plot_distillation", "plot_rlvr_curves", "plot_rs_yield", "plot_stage4_reviews", "plot_stage4_step", "plot_stage_table",
           "rs_yield_widget", "stage4_widget"]

RUN_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red")


def _check_columns(name: str, frame, columns) -> None:
    missing = [c for c in columns if c not in getattr(frame, "columns", ())]
    if missing:
        raise ValueError(f"{name} must be a DataFrame with columns {list(columns)}; missing {missing}")


def plot_rlvr_curves(curves, *, axes=None):
    """``curves``: a DataFrame with columns run, seed, step, pass@1, format; one colour per run."""
    _check_columns("curves", curves, ("run", "seed", "step", "pass@1", "format"))
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    for color, (run, rows) in zip(RUN_COLORS, curves.groupby("run", sort=False)):
        for i, (seed, seed_rows) in enumerate(rows.groupby("seed")):
            label = run if i == 0 else None
            for ax, column in zip(axes, ("pass@1", "format")):
                ax.plot(seed_rows["step"], seed_rows[column], "-o", ms=3, color=color, alpha=0.85, label=label)
    axes[0].set(xlabel="RL step", ylabel="held-out pass@1", ylim=(0, 1), title="accuracy")
    axes[1].set(xlabel="RL step", ylabel="share in R1's format", ylim=(0, 1.02), title="<think>…</think><answer>…</answer>")
    axes[0].legend(loc="lower right")
    for ax in axes:
        ax.grid(alpha=0.3)
    return axes


def plot_stage_table(table, *, k: int = 8, axes=None, gold_multiplier: float = 2.0, set_apart=()):
    """``table``: a DataFrame indexed by stage with columns pass@1, pass@{k}, format and gold preference
    (and, optionally, reviews parsed, written beside each preference bar, and ``pass@1 SE`` / ``gold SE``,
    drawn as ± 2 SE error bars; the preference bars' as ± ``gold_multiplier`` SE, e.g. Student's t for an
    SE clustered over few films, ``rlbook.pipeline.t_multiplier``). The preference bars start
    at −3, the score of a reply that is no review, so that a longer bar is a better-liked policy.
    ``set_apart``: rows that are not stages of the chain (an ablation), drawn at the bottom, hatched,
    below a gap and a dashed line, so that the eye does not read them as a step of the pipeline."""
    check_positive("gold_multiplier", gold_multiplier)
    _check_columns("table", table, ("pass@1", f"pass@{k}", "format", "gold preference"))
    apart = [name for name in table.index if name in set(set_apart)]
    if len(apart) != len(set(set_apart)):
        raise ValueError(f"set_apart names rows that table does not have: {sorted(set(set_apart) - set(apart))}")
    table = table.loc[[name for name in table.index if name not in apart] + apart]
    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(COLUMN_IN, 0.5 * len(table) + 1.8 + 0.3 * bool(apart)), sharey=True)
    y = np.arange(len(table))[::-1] - np.where(np.isin(np.asarray(table.index), apart), 0.6, 0.0)
    se = table["pass@1 SE"] if "pass@1 SE" in table else None  # ± 2 SE (clustered by problem) when given
    axes[0].barh(y, table["pass@1"], color="tab:blue", xerr=None if se is None else 2 * se, ecolor="black", capsize=2)
    axes[0].plot(table[f"pass@{k}"], y, "k|", ms=14, mew=2)
    axes[0].set(xlim=(0, 1.02), xlabel="held-out addition pass@1" + ("" if se is None else "; ± 2 SE"),
                title=f"accuracy (bar: pass@1, tick: pass@{k})")
    axes[1].barh(y, table["format"], color="tab:green")
    axes[1].set(xlim=(0, 1), xlabel="share in R1's format", title="format adherence")
    gold = table["gold preference"]
    # bars grow rightward from −3 (a reply that is no review): a longer bar is a better-liked policy
    gold_se = gold_multiplier / 2 * table["gold SE"] if "gold SE" in table else None  # drawn at 2 × this
    axes[2].barh(y, gold - UNPARSABLE, left=UNPARSABLE, xerr=None if gold_se is None else 2 * gold_se.fillna(0),
                 ecolor="black", capsize=2,
                 color=["tab:purple" if g > UNPARSABLE + 1e-3 else "lightgray" for g in gold])
    axes[2].axvline(UNPARSABLE, color="gray", lw=1)
    axes[2].axvline(0.0, color="black", lw=0.8, ls=":")
    if "reviews parsed" in getattr(table, "columns", ()):
        caps = np.zeros(len(gold)) if gold_se is None else 2 * gold_se.fillna(0).to_numpy()
        for yi, g, cap, parsed in zip(y, gold, caps, table["reviews parsed"]):  # right of the error bar's cap
            axes[2].text(max(g, UNPARSABLE) + cap + 0.12, yi, f"{parsed:.0%} reviews", va="center", fontsize=8)
    axes[2].set(xlim=(UNPARSABLE - 0.1, max(1.0, float(np.nanmax(gold + (0 if gold_se is None else 2 * gold_se.fillna(0)))) + 1.6)),
                xlabel="mean gold reward of its replies\n(bar starts at −3, no review; a longer bar = better liked)"
                       + ("" if gold_multiplier == 2.0 else f"; ± {gold_multiplier:.2f} SE"),
                title="preference (general)")
    axes[0].set_yticks(y, table.index)
    for ax in axes:
        ax.grid(axis="x", alpha=0.3)
        if apart:  # a dashed line between the chain and the rows set apart, which are hatched
            ax.axhline(y[len(table) - len(apart) - 1] - 0.8, color="gray", ls="--", lw=0.8)
            for bar in ax.patches[len(table) - len(apart):len(table)]:
                bar.set_hatch("//")
                bar.set_alpha(0.6)
    return axes


def plot_stage4_reviews(clause_shares: dict, ladder, *, axes=None, multiplier: float = 2.0):
    """Two panels. Left: for each policy in ``clause_shares`` (name → {clause count: share of its parsed
    reviews}, e.g. ``review_readout``'s ``clauses`` row), the share at each clause count. Right:
    ``ladder`` (a DataFrame indexed by clause count with columns ``gold``, ``rm score``, ``rm SE`` and
    ``gold in RM pairs``: ``clause_ladder`` joined with ``gold_by_clauses``) — the gold reward of the best
    review of each length and the mean gold of the reward model's training replies of that length (left
    axis), and the reward model's score of the best review (right axis, its own units, ± ``multiplier`` SE)."""
    _check_columns("ladder", ladder, ("gold", "rm score", "rm SE", "gold in RM pairs"))
    if not clause_shares:
        raise ValueError("clause_shares must name at least one policy")
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    counts = sorted({int(c) for shares in clause_shares.values() for c in shares} | {int(c) for c in ladder.index})
    width = 0.8 / len(clause_shares)
    for i, (color, (name, shares)) in enumerate(zip(RUN_COLORS, clause_shares.items())):
        x = np.arange(len(counts)) + (i - (len(clause_shares) - 1) / 2) * width
        axes[0].bar(x, [float(shares.get(c, 0.0)) for c in counts], width, color=color, label=name)
    axes[0].set(xticks=range(len(counts)), xticklabels=counts, xlabel="clauses in a parsed review",
                ylabel="share of the parsed reviews", ylim=(0, 1), title="how long the reviews are")
    axes[0].legend(fontsize=8)
    x = [int(c) for c in ladder.index]
    axes[1].plot(x, ladder["gold"], "k-o", label="gold: best review of that length")
    axes[1].plot(x, ladder["gold in RM pairs"], "k--s", label="gold: mean of the RM's training replies")
    axes[1].set(xlabel="clauses", ylabel="gold reward", xticks=x, title="what the reward model learned")
    rm = axes[1].twinx()
    rm.errorbar(x, ladder["rm score"], yerr=multiplier * ladder["rm SE"], color="tab:red", marker="o", capsize=3,
                label=f"reward model on the best review (± {multiplier:g} SE)")
    rm.set_ylabel("reward-model score (its own units)", color="tab:red")
    lines = axes[1].get_legend_handles_labels()
    more = rm.get_legend_handles_labels()
    axes[1].legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="lower left")
    return axes


def plot_stage4_step(trajectory, step: int, *, kl=None, axes=None, multiplier: float = 2.0):
    """Stage 4 at ``step``, from ``trajectory`` (``rlbook.pipeline.review_trajectory``: indexed by step, with
    ``clauses``, ``gold``, ``rm score``, ``parsed``, ``garbled`` and ``cut``). Four panels, two by two. Top left:
    the share of the parsed reviews with each clause count at ``step``, beside the first step's (grey). Top
    right: the mean gold reward over the steps, with a band of ± ``multiplier`` × ``gold SE`` when the
    trajectory has it (``review_readout``'s, clustered by request: with few films, pass Student's t,
    ``rlbook.pipeline.t_multiplier``). Bottom left: the reward model's mean score, on its own axes (its units are
    not gold's, so the two curves are never drawn on one panel). Bottom right: the shares of replies that parse,
    are garbled (neither parse nor were cut off) and were cut off at the cap, and, with ``kl`` (a sequence:
    entry i the per-token KL to the reference on the training samples of the policy after i updates, e.g. the
    trainer's ``kl_ref`` history), that KL (right axis). A vertical line marks ``step``. Returns the four axes."""
    _check_columns("trajectory", trajectory, ("clauses", "gold", "rm score", "parsed", "garbled", "cut"))
    if not multiplier > 0:
        raise ValueError(f"multiplier must be positive, got {multiplier!r}")
    steps = [int(s) for s in trajectory.index]
    if int(step) not in steps:
        raise ValueError(f"step must be one of the trajectory's steps {steps}, got {step!r}")
    if axes is None:
        _, grid = plt.subplots(2, 2, figsize=(12, 7.4))
        axes = grid.ravel()
    first, now = trajectory.loc[steps[0], "clauses"], trajectory.loc[int(step), "clauses"]
    counts = sorted({int(c) for shares in trajectory["clauses"] for c in shares})
    x = np.arange(len(counts))
    axes[0].bar(x - 0.2, [float(first.get(c, 0.0)) for c in counts], 0.4, color="lightgray", label=f"step {steps[0]}")
    axes[0].bar(x + 0.2, [float(now.get(c, 0.0)) for c in counts], 0.4, color="tab:orange", label=f"step {int(step)}")
    axes[0].set(xticks=x, xticklabels=counts, xlabel="clauses in a parsed review", ylabel="share of the parsed reviews",
                ylim=(0, 1), title=f"step {int(step)}: mean {trajectory.loc[int(step), 'mean clauses']:.2f} clauses"
                if "mean clauses" in trajectory else f"step {int(step)}")
    axes[0].legend(fontsize=9)
    gold = trajectory["gold"].astype(float).to_numpy()
    axes[1].plot(steps, gold, "k-o", ms=4, label="gold reward (mean; no review = −3)")
    if "gold SE" in trajectory:
        se = trajectory["gold SE"].astype(float).to_numpy()
        axes[1].fill_between(steps, gold - multiplier * se, gold + multiplier * se, color="0.8", alpha=0.7,
                             label=f"± {multiplier:.2f} SE (clustered by request)")
    axes[1].set(xlabel="stage-4 step", ylabel="gold reward", title="the hidden gold reward")
    axes[1].legend(fontsize=9, loc="lower right")
    axes[2].plot(steps, trajectory["rm score"], "-s", ms=4, color="tab:red", label="reward model (mean score)")
    axes[2].set(xlabel="stage-4 step", ylabel="reward-model score (its own units)", title="the proxy: the reward model's score")
    axes[2].legend(fontsize=9, loc="lower right")
    for name, color in (("parsed", "tab:blue"), ("garbled", "tab:purple"), ("cut", "tab:gray")):
        axes[3].plot(steps, trajectory[name], "-o", ms=4, color=color, label={"parsed": "parse as a review",
                     "garbled": "garbled (no review, not cut off)", "cut": "cut off at the cap"}[name])
    axes[3].set(xlabel="stage-4 step", ylabel="share of the replies", ylim=(0, 1), title="what the replies are")
    lines, more = axes[3].get_legend_handles_labels(), ([], [])
    if kl is not None:
        right = axes[3].twinx()
        right.plot(np.arange(len(kl)), np.asarray(kl, dtype=float), "--", color="tab:green",
                   label="KL to the reference (per token, training samples)")
        right.set_ylabel("KL (nats per token)", color="tab:green")
        more = right.get_legend_handles_labels()
    # the legend under the panel, off every trace (the KL spikes anywhere along the steps) and off the right axis' label
    axes[3].legend(lines[0] + more[0], lines[1] + more[1], fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                   ncol=2)
    for ax in axes[1:]:
        ax.axvline(int(step), color="tab:orange", lw=1.5, alpha=0.8)
        ax.grid(alpha=0.3)
    return axes


def stage4_widget(trajectory, *, kl=None, replies=None, multiplier: float = 2.0):
    """``plot_stage4_step`` with a slider over the trajectory's steps (``rlbook.pipeline.review_trajectory``);
    ``kl`` and ``multiplier`` as there. ``replies``: {step: text}, e.g. ``rlbook.pipeline.show_replies`` of a
    few replies the policy of that step wrote (the same requests and sampling seed at every step), printed
    under the figure, so that the slider shows what the policy writes, not only counts."""
    import ipywidgets as widgets

    steps = [int(s) for s in trajectory.index]
    if len(steps) < 2:
        raise ValueError(f"the trajectory needs at least two steps for a slider, got {steps}")
    if replies is not None and set(map(int, replies)) != set(steps):
        raise ValueError(f"replies must have one entry per step of the trajectory {steps}, got {sorted(replies)}")

    def draw(step):
        plot_stage4_step(trajectory, step, kl=kl, multiplier=multiplier)
        plt.tight_layout()
        plt.show()
        if replies is not None:
            print(f"the policy at step {step}:\n{replies[step]}")

    return widgets.interact(draw, step=widgets.SelectionSlider(options=steps, value=steps[-1], description="step"))


def plot_rs_yield(keepable, n: int, *, axes=None, hardest: int | None = None):
    """The yield of rejection sampling with ``n`` samples per prompt, from the (P, N) 0/1 table
    ``keepable`` (N ≥ n samples per prompt; 1 where the filter would keep that sample). ``hardest``: draw
    only that many of the hardest prompts in the right panel (for a policy that keeps nearly every prompt,
    the few it leaves out are otherwise a sliver at the left edge)."""
    keepable = np.asarray(keepable, dtype=float)
    if keepable.ndim != 2 or keepable.size == 0:
        raise ValueError(f"keepable must be a non-empty (prompts, samples) table, got shape {keepable.shape}")
    total = keepable.shape[1]
    if not 1 <= int(n) <= total:
        raise ValueError(f"n must be in 1..{total} (the samples per prompt of keepable), got {n}")
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(13, 3.6), gridspec_kw={"width_ratios": [1, 1.6]})
    ns = np.arange(1, total + 1)
    curve = pass_at_k_curve(keepable, ns.tolist())
    axes[0].plot(ns, curve, "-o", ms=3, color="tab:blue")
    axes[0].plot([n], [curve[n - 1]], "o", ms=9, color="tab:red")
    axes[0].set(xlabel="samples per prompt n", ylabel="expected share of prompts kept", ylim=(0, 1.02),
                title=f"n = {n}: {curve[n - 1]:.0%} of prompts keep a sample")
    axes[0].grid(alpha=0.3)
    difficulty = keepable.mean(axis=1)
    order = np.argsort(difficulty, kind="stable")
    kept = per_problem_pass_at_k(keepable, int(n)).numpy()[order]
    if hardest is not None:
        if not isinstance(hardest, int) or hardest < 1:
            raise ValueError(f"hardest must be a positive int, got {hardest!r}")
        order, kept = order[:hardest], kept[:hardest]
    axes[1].bar(np.arange(len(order)), kept, width=1.0, color="tab:blue", alpha=0.8, label=f"P(kept) at n = {n}")
    axes[1].plot(np.arange(len(order)), difficulty[order], color="black", lw=1, label="P(kept) at n = 1: the share of its samples kept")
    shown = "prompts, hardest first" if hardest is None or hardest >= len(difficulty) else \
        f"the {len(order)} hardest of {len(difficulty)} prompts, hardest first"
    axes[1].set(xlabel=shown, ylabel="P(prompt kept)", ylim=(0, 1.02),
                title="who is left out: the prompts the policy rarely solves")
    axes[1].legend(loc="lower right", fontsize=8)
    return axes


def rs_yield_widget(keepable, *, hardest: int | None = None):
    """``plot_rs_yield`` with a slider for n (1 … the samples per prompt) and, when ``keepable`` is a
    dict ``{policy name: (P, N) table}``, a menu of policies: the yield curve of a policy that is
    usually right saturates within a few samples, one that rarely is keeps climbing with n. ``hardest``
    adds a tick box (on at first) that draws only that many of the hardest prompts on the right; it must be
    below every policy's number of prompts, or the box would change nothing."""
    import ipywidgets as widgets

    tables = dict(keepable) if isinstance(keepable, dict) else {"policy": keepable}
    if not tables:
        raise ValueError("keepable must be a (P, N) table or a non-empty dict of them")
    total = min(int(np.asarray(t).shape[1]) for t in tables.values())

    def draw_one(n, policy, zoom=False):
        axes = plot_rs_yield(tables[policy], n, hardest=hardest if zoom else None)
        if len(tables) > 1:
            axes[0].figure.suptitle(policy, fontsize=10)
        plt.show()

    controls = {"n": widgets.IntSlider(value=1, min=1, max=total, description="n")}
    if len(tables) > 1:
        controls["policy"] = widgets.Dropdown(options=list(tables), value=list(tables)[0], description="policy")
    if hardest is not None:
        if not isinstance(hardest, int) or isinstance(hardest, bool) or hardest < 1:
            raise ValueError(f"hardest must be a positive int, got {hardest!r}")
        fewest = min(int(np.asarray(t).shape[0]) for t in tables.values())
        if hardest >= fewest:  # the tick box would draw every prompt of that policy either way: a dead control
            raise ValueError(f"hardest must be below every policy's number of prompts (the fewest is {fewest}), "
                             f"got {hardest}: with that many the tick box changes nothing")
        controls["zoom"] = widgets.Checkbox(value=True, description=f"only the {hardest} hardest prompts")

    first = list(tables)[0]
    draws = {("policy", "zoom"): draw_one, ("policy",): lambda n, policy: draw_one(n, policy),
             ("zoom",): lambda n, zoom: draw_one(n, first, zoom), (): lambda n: draw_one(n, first)}
    return widgets.interact(draws[tuple(name for name in ("policy", "zoom") if name in controls)], **controls)


def plot_distillation(rl_curves, finals: dict, *, base: float | None = None, rl_finals: dict | None = None,
                      probe_label: str = "probes", prefilled: float | None = None, ax=None):
    """``rl_curves``: a DataFrame with columns seed, step, pass@1 (RL on the small model, one line per
    seed, from the probes ``probe_label`` names); ``finals``: ``{arm: {seed: pass@1}}`` of the small model
    after each SFT arm (e.g. SFT on the teacher's samples, SFT on clean data), each seed drawn as a
    marker in the arm's colour to the right of the curves (an SFT arm has no RL step), the seeds spread
    sideways so that none hides another; ``rl_finals``: ``{seed: pass@1}`` of the RL arm measured the
    way the SFT arms were (the same held-out set), drawn the same way; ``base``: its pass@1 before any
    training; ``prefilled``: its pass@1 before any training with ``<think>`` prefilled (its own scratchpad on
    every problem), a dashed line: the no-training baseline an arm must clear to have taught the working
    anything. (A bare ``{seed: pass@1}`` is read as one arm, "distilled".)"""
    _check_columns("rl_curves", rl_curves, ("seed", "step", "pass@1"))
    if finals and not isinstance(next(iter(finals.values())), dict):
        finals = {"distilled (SFT on the teacher)": finals}
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.8))
    for i, (seed, rows) in enumerate(rl_curves.groupby("seed")):
        ax.plot(rows["step"], rows["pass@1"], "-o", ms=3, color=RUN_COLORS[0], alpha=0.85,
                label=f"RL on the small model, {probe_label} (each seed)" if i == 0 else None)
    last = float(rl_curves["step"].max())
    gap = max(last, 1.0) * 0.08
    arms = ([("RL, end: the final evaluation", rl_finals, RUN_COLORS[0], "s")] if rl_finals else []) + [
        (arm, by_seed, RUN_COLORS[(j + 1) % len(RUN_COLORS)], "D") for j, (arm, by_seed) in enumerate(finals.items())]
    if arms:  # the final evaluations are categories, not RL steps: a band of their own past a separator
        ax.axvline(last + gap * 0.5, color="gray", lw=0.8)
        ax.axvspan(last + gap * 0.5, last + gap * (len(arms) + 0.6), color="0.93", zorder=0)
        ax.text(last + gap * (len(arms) + 1.1) / 2, 0.98, "final\nevaluations", ha="center", va="top", fontsize=8)
        ax.set_xticks([t for t in ax.get_xticks() if 0 <= t <= last])
    for j, (arm, by_seed, color, marker) in enumerate(arms):
        x = last + gap * (j + 1)
        values = list(by_seed.values())
        spread = [x + gap * 0.25 * (i - (len(values) - 1) / 2) for i in range(len(values))]
        ax.plot(spread, values, marker, ms=6, color=color, ls="none", label=f"{arm} (each seed)")
    if base is not None:
        ax.axhline(base, color="gray", ls=":", label="small model before any training")
    if prefilled is not None:
        ax.axhline(prefilled, color="black", ls="--", lw=1,
                   label="small model before any training, <think> prefilled on every problem")
    ax.set(xlabel="RL step on the small model (shaded band on the right: each arm's final evaluation, no step)",
           ylabel="held-out pass@1", ylim=(0, 1))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8)  # below the axes, off the data
    ax.grid(alpha=0.3)
    return ax
