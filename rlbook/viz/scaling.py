"""Lesson 21's figures: one recipe through two engines, and the memory each role of a run needs."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from rlbook._figures import panel_grid
from rlbook.scaling import (HUB_SHAPES, MEMORY_ROLES, gated_mlp_activation_coefficient, generation_waves, gpus_needed,
                            kv_bytes_per_token, memory_total, training_memory)

ENGINE_COLOURS = {"rlbook": "tab:blue", "TRL": "tab:orange"}
ROLE_COLOURS = {"policy weights": "tab:blue", "policy gradients": "tab:cyan", "Adam + fp32 master": "tab:purple",
                "reference": "tab:green", "critic": "tab:olive", "weights gathered for generation": "tab:gray",
                "KV cache": "tab:red", "activations": "tab:orange", "logits": "tab:brown"}


def plot_engine_curves(frame, *, metric: str = "pass@1", ax=None):
    """``metric`` over training steps, one line per (engine, seed); ``frame`` has engine, seed, step, metric."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.6))
    rows = frame.dropna(subset=[metric])
    styles = ("-", "--", ":", "-.")  # the seeds of one engine share its colour and differ in line and marker
    markers = ("o", "s", "^", "D")
    for (engine, seed), run in rows.groupby(["engine", "seed"]):
        rank = sorted(rows.loc[rows["engine"] == engine, "seed"].unique()).index(seed)
        ax.plot(run["step"], run[metric], marker=markers[rank % 4], markersize=4,
                color=ENGINE_COLOURS.get(engine, "grey"), linestyle=styles[rank % 4], label=f"{engine}, seed {seed}")
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_ylabel(f"held-out {metric}")
    ax.set_title("The same GRPO + LoRA recipe through rlbook and TRL")
    ax.legend(fontsize=8)
    return ax


def plot_held_out_evidence(rows, *, k: int, title: str | None = None, z: float = 1.96):
    """Held-out pass@1 and pass@k with z·SE intervals (1.96: 95 %, normal approximation), one point per run.

    ``rows``: a list of ``(label, engine, pass@1, SE, pass@k, SE@k)``; ``engine`` picks the colour
    (``ENGINE_COLOURS``; "base" black). Two panels side by side, runs along x in the given order, the base
    run's value as a dotted line across each panel so that every trained run is read against it. The
    intervals are each run's own (clustered SEs), not of a difference: the paired gain's SE is smaller.
    Returns the two axes."""
    rows = list(rows)
    if not rows or any(len(row) != 6 for row in rows):
        raise ValueError("rows must be a non-empty list of (label, engine, pass@1, SE, pass@k, SE@k)")
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.4), sharey=True)
    for axis, (column, name) in zip(axes, ((2, "pass@1"), (4, f"pass@{k}"))):
        for i, row in enumerate(rows):
            colour = "black" if row[1] == "base" else ENGINE_COLOURS.get(row[1], "grey")
            axis.errorbar(i, row[column], yerr=z * row[column + 1], fmt="o", color=colour, capsize=4, markersize=5)
            if row[1] == "base":
                axis.axhline(row[column], color="black", linestyle=":", linewidth=1)
        axis.set_xticks(range(len(rows)), [row[0] for row in rows], fontsize=8, rotation=30, ha="right")
        axis.set_title(f"held-out {name}", fontsize=10)
        axis.set_ylim(0, 1)
        axis.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel(f"share right (± {z:g} SE)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return axes



def plot_paired_gains(rows, *, bar_se: float = 3.0, z: float = 1.96, recipe=None, title: str | None = None, ax=None):
    """Each run's paired gain over the base model with its z·SE interval, and the bar a claim holds it to.

    ``rows``: a list of ``(label, engine, gain, SE of gain)``, the gain paired by prompt against one base
    measurement (so its SE is the paired one, smaller than either run's own). A short black dash marks
    ``bar_se`` × SE on each run: a gain above its dash clears the bar (the claim "gain > 3 SE" when bar_se = 3).
    ``recipe``: an optional ``(label, mean, low, high)``, e.g. ``evidence.seed_mean_interval`` over the seeds,
    drawn last as a hollow point with its interval. A dotted line marks no gain. Returns the axis."""
    rows = list(rows)
    if not rows or any(len(row) != 4 for row in rows):
        raise ValueError("rows must be a non-empty list of (label, engine, gain, SE of gain)")
    if recipe is not None and len(recipe) != 4:
        raise ValueError(f"recipe must be (label, mean, low, high), got {recipe!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.4))
    for i, (_, engine, gain, se) in enumerate(rows):
        colour = ENGINE_COLOURS.get(engine, "grey")
        ax.errorbar(i, gain, yerr=z * se, fmt="o", color=colour, capsize=4, markersize=5)
        ax.plot([i - 0.25, i + 0.25], [bar_se * se] * 2, color="black", linewidth=2,
                label=f"{bar_se:g} SE of that gain (the bar)" if i == 0 else None)
    labels = [row[0] for row in rows]
    if recipe is not None:
        label, mean, low, high = recipe
        ax.errorbar(len(rows), mean, yerr=[[mean - low], [high - mean]], fmt="o", mfc="white",
                    color=ENGINE_COLOURS["rlbook"], capsize=4, markersize=6)
        labels.append(label)
    ax.axhline(0, color="black", linestyle=":", linewidth=1)
    ax.set_xticks(range(len(labels)), labels, fontsize=8, rotation=30, ha="right")
    ax.set_ylabel(f"gain in held-out pass@1\n(paired, ± {z:g} SE)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_ylim(top=ax.get_ylim()[1] * 1.15)  # room for the legend above the intervals
    ax.legend(fontsize=8, loc="best")
    if title:
        ax.set_title(title, fontsize=10)
    return ax

def plot_training_memory(table, *, gpu_gib: float = 80.0, title: str | None = None, ax=None,
                         ylabel: str = "GiB (every role on one device)"):
    """Stacked bars of GiB per GPU by role, on linear axes: one panel per model, every bar's total written on it.

    ``table``: rows as ``memory_table`` returns them. With a (model, setting) index each model gets its own
    panel and y-axis, one bar per setting; with a flat index each row gets its own panel (sizes a hundred
    times apart cannot share a linear axis, and a log axis hides all but the largest role). A dotted line
    marks one GPU's memory in the panels whose bars reach at least half of it. The panels wrap into rows that fit
    the book's column (``rlbook._figures``). ``title``: the figure's, above every panel (the legend then goes
    below them; ``plt.title`` would replace the last panel's). ``ax``: draw a one-panel table there.
    ``ylabel``: the y axis's label (say "per GPU" when the table's rows are sharded).
    Returns the list of axes.
    """
    roles = [role for role in ROLE_COLOURS if role in table.columns and float(table[role].abs().sum()) > 0]
    if not roles:
        raise ValueError(f"table has none of the roles {list(ROLE_COLOURS)} (got columns {list(table.columns)})")
    if table.index.nlevels > 1:
        panels = [(model, table.xs(model, level=0)) for model in dict.fromkeys(table.index.get_level_values(0))]
    else:
        panels = [(label, table.loc[[label]]) for label in table.index]
    if ax is not None and len(panels) != 1:
        raise ValueError(f"ax draws one panel; table has {len(panels)} (pass ax=None for a figure of panels)")
    if ax is None:
        fig, axes = panel_grid(len(panels), panel=(4.0 if len(panels) == 1 else 3.2, 3.6))
    else:
        fig, axes = ax.figure, [ax]
    for axis, (name, rows) in zip(axes, panels):
        bottom = np.zeros(len(rows))
        for role in roles:
            values = rows[role].to_numpy(dtype=float)
            axis.bar(range(len(rows)), values, bottom=bottom, color=ROLE_COLOURS[role], label=role)
            bottom += values
        for i, total in enumerate(bottom):
            axis.text(i, total, f"{total:,.1f}", ha="center", va="bottom", fontsize=8)
        top = bottom.max() * 1.15
        if gpu_gib <= 2 * bottom.max():  # within reach of the bars: worth the axis range it takes
            axis.axhline(gpu_gib, color="black", linestyle=":", label=f"one {gpu_gib:.0f} GiB GPU")
            top = max(top, gpu_gib * 1.1)
        axis.set_ylim(0, top)
        labels = [str(label) for label in rows.index] if table.index.nlevels > 1 else [""]
        axis.set_xticks(range(len(rows)), labels, fontsize=8)
        axis.set_title(str(name), fontsize=9)
        axis.set_ylabel(ylabel)
    handles = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.legend(handles.values(), handles.keys(), fontsize=7, ncol=min(5, len(handles)), frameon=False,
               **(dict(loc="upper center", bbox_to_anchor=(0.5, 0.0)) if title else
                  dict(loc="lower center", bbox_to_anchor=(0.5, 1.0))))
    return axes


def memory_table(models, *, sequences: int, tokens_per_sequence: int, settings: dict | None = None,
                 plan_tensor_parallel=None, gpu_gib: float = 80.0, swiglu_plan: bool = False, **options):
    """``training_memory`` of each hub model named in ``models`` (keys of ``HUB_SHAPES``), one row each,
    in GiB per GPU, with two more columns: ``total`` (every role resident at once) and ``largest role``.

    ``plan_tensor_parallel``: a tensor-parallel degree t (an int, or a dict of model name → int) adds the
    columns ``TP degree`` and ``GPUs needed``: ``gpus_needed`` for ``gpu_gib`` GPUs at that t, with the
    row's other options (the role columns stay as ``options`` give them, one GPU by default). With
    ``swiglu_plan`` one more, ``GPUs needed, SwiGLU``: the same plan with the activations charged at the
    model's own ``gated_mlp_activation_coefficient`` instead of Korthikanti et al.'s 34, since the plan is
    only as exact as that coefficient.

    With ``in_flight`` (the sequences an engine's KV pool holds at once) two more columns: ``KV, one wave``,
    the KV cache an engine would need to hold its whole share of the rollout at once (the pool that generates
    it in one wave), and ``waves``, ``generation_waves`` on the planned GPUs (each tensor-parallel group one
    engine) or, without a plan, on the row's own.

    ``options`` are ``training_memory``'s (``lora_fraction``, ``reference``, ``critic``, ``shards``,
    ``micro_batch``, ``gradient_checkpointing``, ``weight_bytes``); under LoRA the reference costs nothing.
    ``settings``, e.g. ``{"full": {}, "LoRA 1%": {"lora_fraction": 0.01}}``, gives one row per (model,
    setting), each setting's options over ``options``, indexed (model, setting): the layout
    ``plot_training_memory`` draws as one panel per model.
    """
    import pandas as pd

    unknown = [name for name in models if name not in HUB_SHAPES]
    if isinstance(models, str) or unknown:
        raise ValueError(f"models must be a list of names from {list(HUB_SHAPES)}, got {models!r}")
    if settings is not None and (not isinstance(settings, dict) or not settings):
        raise ValueError(f"settings must be a non-empty dict of label -> training_memory options, got {settings!r}")
    if isinstance(plan_tensor_parallel, dict) and set(plan_tensor_parallel) != set(models):
        raise ValueError(f"plan_tensor_parallel must give a degree for each of {list(models)}, "
                         f"got {plan_tensor_parallel!r}")
    rows = {}
    for name in models:
        for label, extra in (settings or {None: {}}).items():
            memory = training_memory(HUB_SHAPES[name], sequences=sequences, tokens_per_sequence=tokens_per_sequence,
                                     **{**options, **extra})
            row = {**memory, "total": memory_total(memory),
                   "largest role": max(MEMORY_ROLES, key=lambda role: memory[role])}
            row_options = {**options, **extra}
            row_t = row_options.get("tensor_parallel", 1)  # the row's own layout (a plan below may change t)
            row_engines = row_options.get("shards", 1) // row_t
            t, engines = row_t, row_engines
            if plan_tensor_parallel is not None:
                t = plan_tensor_parallel[name] if isinstance(plan_tensor_parallel, dict) else plan_tensor_parallel
                plan = {key: value for key, value in row_options.items() if key not in ("shards", "tensor_parallel")}
                row["TP degree"] = t
                row["GPUs needed"] = gpus_needed(HUB_SHAPES[name], gpu_gib=gpu_gib, tensor_parallel=t,
                                                 sequences=sequences, tokens_per_sequence=tokens_per_sequence, **plan)
                engines = row["GPUs needed"] // t
                if swiglu_plan:
                    row["GPUs needed, SwiGLU"] = gpus_needed(
                        HUB_SHAPES[name], gpu_gib=gpu_gib, tensor_parallel=t, sequences=sequences,
                        tokens_per_sequence=tokens_per_sequence,
                        **{**plan, "activation_coefficient": gated_mlp_activation_coefficient(HUB_SHAPES[name])})
            if row_options.get("in_flight") is not None:
                per_token = kv_bytes_per_token(HUB_SHAPES[name], weight_bytes=row_options.get("weight_bytes", 2),
                                               tensor_parallel=row_t)
                row["KV, one wave"] = per_token * tokens_per_sequence * sequences / row_engines / 1024 ** 3
                row["waves"] = generation_waves(sequences, in_flight=row_options["in_flight"], engines=engines)
            rows[name.split("/")[-1] if label is None else (name.split("/")[-1], label)] = row
    table = pd.DataFrame(rows).T
    counts = [column for column in ("TP degree", "GPUs needed", "GPUs needed, SwiGLU", "waves") if column in table.columns]
    numeric = [column for column in table.columns if column != "largest role" and column not in counts]
    table[numeric] = table[numeric].astype(float)
    table[counts] = table[counts].astype(int)
    return table


MODEL_STATES = ("policy weights", "policy gradients", "Adam + fp32 master", "reference", "critic")


def draw_training_memory(model, *, reference=True, lora=False, critic=False, sequences=256, tokens=4096,
                         micro_batch=1, checkpointing=False, tensor_parallel=1, replicas=1, in_flight=None):
    """One state of ``training_memory_widget``: the roles per GPU of ``model`` on tensor_parallel × replicas
    GPUs (tensor parallelism inside each group, ZeRO-3 across the groups), as one bar; the title gives the
    total and the model states per GPU, the generation waves (each group one engine holding ``in_flight``
    sequences at once; None: all at once) and ``gpus_needed``'s answer at this tensor-parallel degree.
    Returns the axes (the widget draws it; a static page shows it as it is)."""
    options = dict(sequences=sequences, tokens_per_sequence=tokens, lora_fraction=0.01 if lora else None,
                   reference=reference, critic=critic, micro_batch=micro_batch, gradient_checkpointing=checkpointing,
                   in_flight=in_flight)
    shards = tensor_parallel * replicas
    table = memory_table([model], shards=shards, tensor_parallel=tensor_parallel, **options)
    _, ax = plt.subplots(figsize=(6.5, 4.0))
    plot_training_memory(table, ax=ax, ylabel="GiB per GPU")
    ax.set_xticks([0], [f"one of {shards} GPU{'s' if shards > 1 else ''}"], fontsize=8)
    waves = generation_waves(sequences, in_flight=in_flight, engines=replicas)
    try:
        needed = (f"fits on {gpus_needed(HUB_SHAPES[model], tensor_parallel=tensor_parallel, **options)} "
                  f"× 80 GiB at TP {tensor_parallel}")
    except ValueError:
        needed = f"fits on no number of 80 GiB GPUs at TP {tensor_parallel}: raise it"
    states = float(table[list(MODEL_STATES)].iloc[0].sum())
    ax.set_title(f"{model}: {table['total'].iloc[0]:,.1f} GiB per GPU on {shards} GPU{'s' if shards > 1 else ''} "
                 f"(TP {tensor_parallel} × {replicas} ZeRO-3 group{'s' if replicas > 1 else ''})\n"
                 f"model states {states:,.1f} GiB per GPU; largest: {table['largest role'].iloc[0]}; "
                 f"{waves} generation wave{'s' if waves > 1 else ''}; {needed}",
                 fontsize=9)
    return ax


def training_memory_widget():
    """Model, reference, LoRA (under which the reference is free), critic, rollout size, the sequences an
    engine's KV pool holds at once (more rollouts than that take more waves, not more memory), micro-batch,
    checkpointing, tensor-parallel degree and ZeRO-3 groups as knobs of ``draw_training_memory``."""
    import ipywidgets as widgets

    def draw(model, reference, lora, critic, sequences, in_flight, tokens, micro_batch, checkpointing,
             tensor_parallel, replicas):
        draw_training_memory(model, reference=reference, lora=lora, critic=critic, sequences=sequences,
                             tokens=tokens, micro_batch=micro_batch, checkpointing=checkpointing,
                             tensor_parallel=tensor_parallel, replicas=replicas, in_flight=in_flight)
        plt.show()

    return widgets.interact(
        draw,
        model=widgets.Dropdown(options=list(HUB_SHAPES), value="Qwen/Qwen2.5-7B", description="model"),
        reference=widgets.Checkbox(value=True, description="reference (KL)"),
        lora=widgets.Checkbox(value=False, description="LoRA (1% trained)"),
        critic=widgets.Checkbox(value=False, description="critic (PPO)"),
        sequences=widgets.IntSlider(value=256, min=8, max=1024, step=8, description="rollouts"),
        in_flight=widgets.IntSlider(value=64, min=8, max=1024, step=8, description="in flight"),
        tokens=widgets.IntSlider(value=4096, min=512, max=32768, step=512, description="tokens each"),
        micro_batch=widgets.IntSlider(value=1, min=1, max=16, description="micro-batch"),
        checkpointing=widgets.Checkbox(value=False, description="activation checkpointing"),
        tensor_parallel=widgets.Dropdown(options=[1, 2, 4, 8], value=1, description="TP degree"),
        replicas=widgets.IntSlider(value=1, min=1, max=32, description="ZeRO-3 groups"))
