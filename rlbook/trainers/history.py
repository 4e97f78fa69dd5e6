"""A training run's history: one tidy row (a dict of numbers) per step, and the live progress bar.

Tidy means one row per step and one column per metric, so ``history.to_pandas()`` plots directly
(``df.plot(x="step", y="reward")``) and a lesson can assert on a column (``df.entropy.iloc[-1]``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

# What the progress bar shows, and its short labels.
POSTFIX_COLUMNS = {"reward": "reward", "entropy": "ent", "kl": "kl", "clip_frac": "clip", "length_mean": "len"}


class History:
    """An append-only list of per-step metric rows."""

    def __init__(self, rows: list[dict] | None = None):
        self.rows: list[dict] = [dict(row) for row in rows or []]

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
        Path(path).write_text(json.dumps(self.rows, indent=1, default=_json_number))

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


def _json_number(value):
    """Numbers JSON cannot hold natively (numpy scalars) as floats."""
    return float(value)
