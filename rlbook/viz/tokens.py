"""Token-level pictures of one batch: rows are completions, columns are tokens, one panel per quantity.

``plot_token_heatmap`` draws any set of (B, T) per-token tensors — the ratio π_θ/π_old, the
advantage, the clip mask, the KL to the reference, an aggregation weight — as stacked heatmaps
over the same grid, with each cell labelled by its token's text so the reader sees what was
written. ``token_labels`` turns completion ids into those short labels.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.patches import Rectangle

__all__ = ["SHORT_TOKENS", "token_labels", "plot_token_heatmap"]

# Multi-character special tokens of the book's tokenizer, shortened to fit one cell.
SHORT_TOKENS = {"<think>": "<t", "</think>": "t>", "<answer>": "<a", "</answer>": "a>", "<|im_end|>": "⏎",
                "<|im_start|>": "⏵", "<|endoftext|>": "∅"}


def token_labels(tokenizer, completion_ids, completion_mask, *, short=None) -> list[list[str]]:
    """The text of every completion token, one list per row (padding left out).

    Multi-character tokens are shortened with ``short`` (default ``SHORT_TOKENS``); any other token
    longer than 2 characters is cut to its first 2; a space is shown as "␣".
    """
    short = SHORT_TOKENS if short is None else short
    ids = torch.as_tensor(completion_ids)
    mask = torch.as_tensor(completion_mask).bool()
    if ids.dim() != 2 or mask.shape != ids.shape:
        raise ValueError(f"completion_ids and completion_mask must both be (B, T), got {tuple(ids.shape)} "
                         f"and {tuple(mask.shape)}")
    labels = []
    for row, keep in zip(ids.tolist(), mask.tolist()):
        tokens = tokenizer.convert_ids_to_tokens([t for t, k in zip(row, keep) if k])
        labels.append([short.get(tok, tok if len(tok) <= 2 else tok[:2]).replace(" ", "␣") for tok in tokens])
    return labels


def plot_token_heatmap(tokens: list[list[str]], panels: dict, mask, *, row_labels=None, centers=None, cmaps=None,
                       limits=None, max_tokens: int | None = None, cell: float = 0.2, title: str | None = None,
                       fontsize: float = 6.5, row_height: float = 0.26, outlines=None):
    """Stacked heatmaps of per-token quantities over one batch, each cell labelled with its token.

    Args:
        - tokens: ``tokens[i][t]``, the label of token t of completion i (``token_labels``).
        - panels: name → (B, T) values (tensor or array), drawn top to bottom in the given order.
        - mask: (B, T) 0/1, 1 on completion tokens; padding cells are left blank.
        - row_labels: one label per completion (e.g. its reward and advantage), shown on the left.
        - centers: name → a value at which a diverging map is centred (e.g. 1 for a ratio, 0 for
          an advantage); panels without a centre use a sequential map.
        - cmaps: name → a colormap name; limits: name → (vmin, vmax).
        - max_tokens: show at most this many token columns.
        - cell, row_height: a token column's width and a row's height, in inches; fontsize: the tokens' text.
        - outlines: name → (B, T) 0/1 marks drawn as a box around those cells of that panel (e.g. the clip
          mask on the ratio's panel, so that a second panel need not repeat the tokens).

    Returns the figure.
    """
    if not panels:
        raise ValueError("panels must name at least one (B, T) quantity")
    mask = np.asarray(torch.as_tensor(mask).detach().cpu(), dtype=bool)
    if mask.ndim != 2 or len(tokens) != mask.shape[0]:
        raise ValueError(f"mask must be (B, T) with one row per entry of tokens ({len(tokens)}), got {mask.shape}")
    width = mask.shape[1] if max_tokens is None else min(mask.shape[1], max_tokens)
    centers, cmaps, limits = centers or {}, cmaps or {}, limits or {}
    values = {}
    for name, panel in panels.items():
        array = np.asarray(torch.as_tensor(panel).detach().cpu(), dtype=float)
        if array.shape != mask.shape:
            raise ValueError(f"panel {name!r} must have the mask's shape {mask.shape}, got {array.shape}")
        values[name] = np.where(mask, array, np.nan)[:, :width]
    boxes = {}
    for name, marks in (outlines or {}).items():
        if name not in panels:
            raise ValueError(f"outlines names a panel that is not drawn: {name!r}")
        marks = np.asarray(torch.as_tensor(marks).detach().cpu(), dtype=float)
        if marks.shape != mask.shape:
            raise ValueError(f"outline {name!r} must have the mask's shape {mask.shape}, got {marks.shape}")
        boxes[name] = (marks != 0) & mask
    rows = mask.shape[0]
    fig, axes = plt.subplots(len(panels), 1,
                             figsize=(1.6 + cell * width, (0.5 + row_height * rows) * len(panels) + 0.4),
                             squeeze=False)
    for ax, (name, grid) in zip(axes[:, 0], values.items()):
        norm = _norm(grid, centers.get(name), limits.get(name))
        cmap = cmaps.get(name, "RdBu_r" if name in centers else "viridis")
        image = ax.imshow(grid, aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
        for i in range(rows):
            for t, label in enumerate(tokens[i][:width]):
                ax.text(t, i, label, ha="center", va="center", fontsize=fontsize, family="monospace",
                        color=_text_colour(image, grid[i, t]))
        for i, t in zip(*np.nonzero(boxes[name][:, :width])) if name in boxes else ():
            ax.add_patch(Rectangle((t - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.6))
        ax.set_yticks(range(rows), row_labels if row_labels is not None else range(rows), fontsize=7)
        ax.set_xticks([])
        ax.set_title(name, fontsize=9, loc="left")
        fig.colorbar(image, ax=ax, pad=0.01, fraction=0.02)
    axes[-1, 0].set_xlabel("token position →", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _norm(grid: np.ndarray, center, limit):
    finite = grid[np.isfinite(grid)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if limit is not None:
        low, high = limit
    if center is None:
        return Normalize(vmin=low, vmax=high if high > low else low + 1)
    low, high = min(low, center - 1e-6), max(high, center + 1e-6)
    return TwoSlopeNorm(vcenter=center, vmin=low, vmax=high)


def _text_colour(image, value) -> str:
    """Black on light cells, white on dark ones."""
    if not np.isfinite(value):
        return "black"
    red, green, blue, _ = image.cmap(image.norm(value))
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"
