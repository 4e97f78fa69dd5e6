"""Lesson 21's figures: one recipe through two engines, and the memory each role of a run needs."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from rlbook.scaling import HUB_SHAPES, training_memory

ENGINE_COLOURS = {"rlbook": "tab:blue", "TRL": "tab:orange"}
ROLE_COLOURS = {"policy weights": "tab:blue", "policy gradients": "tab:cyan", "Adam + fp32 master": "tab:purple",
                "reference": "tab:green", "critic": "tab:olive", "KV cache": "tab:red"}


def plot_engine_curves(frame, *, metric: str = "pass@1", ax=None):
    """``metric`` over training steps, one line per (engine, seed); ``frame`` has engine, seed, step, metric."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.6))
    rows = frame.dropna(subset=[metric])
    for (engine, seed), run in rows.groupby(["engine", "seed"]):
        ax.plot(run["step"], run[metric], marker="o", color=ENGINE_COLOURS.get(engine, "grey"),
                linestyle="-" if seed == rows["seed"].min() else "--", label=f"{engine}, seed {seed}")
    ax.set_xlabel("training step")
    ax.set_ylabel(f"held-out {metric}")
    ax.set_title("The same GRPO + LoRA recipe through rlbook and TRL")
    ax.legend(fontsize=8)
    return ax


def plot_training_memory(table, *, gpu_gib: float = 80.0, ax=None):
    """Stacked bars of GiB per GPU by role, one bar per row of ``table`` (index: the setting's label),
    with a line at one GPU's memory."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.8))
    roles = [role for role in ROLE_COLOURS if role in table.columns]
    bottom = np.zeros(len(table))
    for role in roles:
        values = table[role].to_numpy(dtype=float)
        ax.bar(range(len(table)), values, bottom=bottom, color=ROLE_COLOURS[role], label=role)
        bottom += values
    for i, total in enumerate(bottom):
        ax.text(i, total, f"{total:,.0f}", ha="center", va="bottom", fontsize=8)
    ax.axhline(gpu_gib, color="black", linestyle=":", label=f"one {gpu_gib:.0f} GiB GPU")
    ax.set_xticks(range(len(table)), table.index, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("GiB per GPU")
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=2)
    return ax


def memory_table(models, *, sequences: int, tokens_per_sequence: int, lora_fraction=None, critic: bool = False,
                 shards: int = 1):
    """``training_memory`` of each hub model named in ``models`` (keys of ``HUB_SHAPES``), one row each."""
    import pandas as pd

    rows = {name.split("/")[-1]: training_memory(HUB_SHAPES[name], sequences=sequences,
                                                 tokens_per_sequence=tokens_per_sequence,
                                                 lora_fraction=lora_fraction, critic=critic, shards=shards)
            for name in models}
    return pd.DataFrame(rows).T


def training_memory_widget():
    """Model, LoRA, critic, rollout size and sharding as knobs of ``plot_training_memory``."""
    import ipywidgets as widgets

    def draw(model, lora, critic, sequences, tokens, shards):
        table = memory_table([model], sequences=sequences, tokens_per_sequence=tokens,
                             lora_fraction=0.01 if lora else None, critic=critic, shards=shards)
        _, ax = plt.subplots(figsize=(6.5, 3.6))
        plot_training_memory(table, ax=ax)
        total = table.drop(columns="parameters (B)").sum(axis=1).iloc[0]
        ax.set_title(f"{model}: {total:,.0f} GiB per GPU ({shards} GPU{'s' if shards > 1 else ''})")
        plt.show()

    return widgets.interact(
        draw,
        model=widgets.Dropdown(options=list(HUB_SHAPES), value="Qwen/Qwen2.5-7B", description="model"),
        lora=widgets.Checkbox(value=False, description="LoRA (1% trained)"),
        critic=widgets.Checkbox(value=False, description="critic (PPO)"),
        sequences=widgets.IntSlider(value=256, min=8, max=1024, step=8, description="rollouts"),
        tokens=widgets.IntSlider(value=4096, min=512, max=32768, step=512, description="tokens each"),
        shards=widgets.IntSlider(value=1, min=1, max=64, description="GPUs (ZeRO-3)"))
