"""A training run's history: one tidy row (a dict of numbers) per step, and the live progress bar.

Tidy means one row per step and one column per metric, so ``history.to_pandas()`` plots directly
(``df.plot(x="step", y="reward")``) and a lesson can assert on a column (``df.entropy.iloc[-1]``).

Every trainer keeps one, together with the settings that produced it (``history.config``), and
every run is saved the same way, ``history.save(folder)``::

    folder/history.csv    one row per step (for a spreadsheet or pandas)
    folder/history.json   the same rows as a JSON list (NaN kept as NaN)
    folder/config.json    the trainer's settings

``History.load(folder)`` reads it back.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

# What the progress bar shows, and its short labels.
POSTFIX_COLUMNS = {"reward": "reward", "entropy": "ent", "kl": "kl", "clip_frac": "clip", "length_mean": "len"}
# The files of a saved run, the same for every trainer.
HISTORY_CSV, HISTORY_JSON, CONFIG_JSON = "history.csv", "history.json", "config.json"


class History:
    """An append-only list of per-step metric rows, and the ``config`` (a dict of settings) of the run."""

    def __init__(self, rows: list[dict] | None = None, *, config: dict | None = None):
        self.rows: list[dict] = [dict(row) for row in rows or []]
        self.config: dict = dict(config or {})

    def append(self, row: dict) -> None:
        self.rows.append(dict(row))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return self.rows[index]

    def __iter__(self):
        return iter(self.rows)

    def column(self, name: str) -> list:
        """Every step's value of metric ``name`` (NaN where a step did not log it)."""
        return [row.get(name, math.nan) for row in self.rows]

    def to_pandas(self):
        """The history as a ``pandas.DataFrame``, one row per step."""
        import pandas as pd

        return pd.DataFrame(self.rows)

    def to_csv(self, path) -> None:
        self.to_pandas().to_csv(path, index=False)

    def to_json(self, path) -> None:
        Path(path).write_text(json.dumps(self.rows, indent=1, default=json_default))

    def save(self, folder) -> Path:
        """Write history.csv, history.json and config.json into ``folder`` (made if needed); returns it."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.to_csv(folder / HISTORY_CSV)
        self.to_json(folder / HISTORY_JSON)
        (folder / CONFIG_JSON).write_text(json.dumps(self.config, indent=1, default=json_default))
        return folder

    @classmethod
    def load(cls, folder) -> History:
        """The history ``save`` wrote into ``folder`` (rows from history.json, settings from config.json)."""
        rows, config = (_read_json(Path(folder) / name) for name in (HISTORY_JSON, CONFIG_JSON))
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise ValueError(f"{Path(folder) / HISTORY_JSON} must hold a list of rows (objects)")
        if not isinstance(config, dict):
            raise ValueError(f"{Path(folder) / CONFIG_JSON} must hold an object of settings")
        return cls(rows, config=config)

    def postfix(self) -> dict[str, str]:
        """The last row's headline metrics, formatted for ``tqdm.set_postfix``."""
        if not self.rows:
            return {}
        last = self.rows[-1]
        kl = last.get("kl_ref", math.nan)
        values = {**last, "kl": kl if not math.isnan(kl) else last.get("approx_kl", math.nan)}
        return {label: f"{values[key]:.3g}" for key, label in POSTFIX_COLUMNS.items() if key in values}

    def __repr__(self) -> str:
        return f"History({len(self.rows)} steps)"


def json_default(value):
    """What ``json.dumps`` calls for a value JSON cannot hold natively: a numpy or 0-d torch number
    becomes a Python one."""
    if isinstance(value, np.generic) or (isinstance(value, torch.Tensor) and value.dim() == 0):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _read_json(path: Path):
    if not path.is_file():
        raise ValueError(f"folder must hold a saved run ({HISTORY_JSON}, {CONFIG_JSON}); {path} is missing")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
