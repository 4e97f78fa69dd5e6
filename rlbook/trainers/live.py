"""Live training plots: a run's metrics redrawn in place under its progress bar while it trains.

Every trainer's loop opens one, ``plot = live_plot(history.rows, panels, live=..., progress=...)``,
and calls ``plot.update()`` after each step and ``plot.finish()`` after the last. In a Jupyter
kernel, with the progress bar on, the reader then sees the curves (for online RL: reward, entropy,
KL, clip fraction, response length) grow during the run, not only a bar and a figure at the end.
How it is drawn, and what it costs:

- one IPython display with a ``display_id``, updated in place, holding a PNG that matplotlib's Agg
  canvas renders from a ``Figure`` made without pyplot, so the lesson's own figures (and pyplot's
  current figure) are untouched;
- drawing is budgeted: a draw happens only while the time spent drawing, this draw included
  (expected to cost what the last one did), stays within ``MAX_DRAW_SHARE`` of the time the run
  has taken, and at most once per ``MIN_INTERVAL_S``. So the first figure appears once the run
  has taken ``FIRST_DRAW_GUESS_S / MAX_DRAW_SHARE`` (5 s; a shorter run draws nothing: its
  progress bar suffices), a 50 ms draw then comes every 2.5 s, and on a busy machine, where
  drawing is slower, less often. The first draw, which builds the figure and warms matplotlib's
  caches (about 0.6 s, once), is not counted against the budget: counted, it would hold the
  second draw back for the better part of a minute. The last step is always drawn (one draw over the budget at
  most), and that last image stays, so a stored notebook shows the final curves as one static
  image per run;
- outside a kernel (the command line, pytest, plain python) nothing is drawn.

``live=None`` (every trainer's default) means on in a Jupyter kernel when the progress bar is on;
``live=True`` turns it on in a kernel even without the bar; ``live=False`` or the environment
variable ``RLBOOK_LIVE=0`` turns it off.
"""

from __future__ import annotations

import io
import math
import os
import time

__all__ = ["LivePlot", "ONLINE_PANELS", "PREFERENCE_PANELS", "REWARD_MODEL_PANELS", "SFT_PANELS", "in_kernel",
           "live_enabled", "live_plot"]

ENV_VAR = "RLBOOK_LIVE"
MIN_INTERVAL_S = 1.0
MAX_DRAW_SHARE = 0.02
FIRST_DRAW_GUESS_S = 0.1  # about a first draw's cost (figure built, text laid out): 0.11-0.13 s CPU measured
OFF_VALUES, ON_VALUES = ("0", "false", "no", "off"), ("1", "true", "yes", "on")

# Each trainer's panels: a panel's title → {history column: its legend label} (a panel whose
# columns the run does not log is left out; eval/ columns are drawn as points where they were measured).
ONLINE_PANELS = {
    "reward": {"reward": "reward"}, "entropy": {"entropy": "entropy"},
    "KL": {"kl_ref": "to π_ref", "approx_kl": "to π_old (approx.)"}, "clip fraction": {"clip_frac": "clip fraction"},
    "response length": {"length_mean": "length"}, "staleness": {"staleness_mean": "staleness"},
}
PREFERENCE_PANELS = {
    "loss": {"loss": "loss"}, "accuracy": {"rewards/accuracies": "train", "eval/rewards/accuracies": "held-out"},
    "margin": {"rewards/margins": "train", "eval/rewards/margins": "held-out"},
    "log-probs": {"logps/chosen": "chosen", "logps/rejected": "rejected"},
}
REWARD_MODEL_PANELS = {
    "loss": {"loss": "loss"}, "accuracy": {"accuracy": "train", "eval/accuracy": "held-out"},
    "margin": {"margin": "train", "eval/margin": "held-out"},
}
SFT_PANELS = {"loss": {"loss": "loss"}}

PANEL_SIZE_IN, MAX_COLUMNS, DPI = (3.2, 2.1), 3, 72


def in_kernel() -> bool:
    """True inside a Jupyter (IPython) kernel, where a display can be updated in place."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def live_enabled(live: bool | None, *, progress: bool) -> bool:
    """Whether a run draws its live plot: ``live`` if given, else ``progress``; never outside a kernel
    or when ``RLBOOK_LIVE`` is off. ``ValueError`` for a ``live`` that is not None/True/False or an
    ``RLBOOK_LIVE`` that is not one of 0/1/false/true/no/yes/off/on."""
    if live is not None and not isinstance(live, bool):
        raise ValueError(f"live must be None, True or False, got {live!r}")
    setting = os.environ.get(ENV_VAR, "").strip().lower()
    if setting and setting not in OFF_VALUES + ON_VALUES:
        raise ValueError(f"{ENV_VAR} must be one of {OFF_VALUES + ON_VALUES}, got {setting!r}")
    wanted = progress if live is None else live
    return wanted and setting not in OFF_VALUES and in_kernel()


class _NoPlot:
    """A run's plot when it is off (and the base of ``LivePlot``): ``update`` and ``finish`` do nothing;
    ``with plot:`` finishes it on leaving the block, also after an error."""

    draws = 0

    def update(self) -> bool:
        return False

    def finish(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.finish()


class LivePlot(_NoPlot):
    """The live figure of one run: ``update()`` after each step (throttled), ``finish()`` at the end.

    ``rows``: the run's list of per-step rows (``History.rows``), read as the run appends to it;
    ``panels``: title → {column: legend label}, as ``ONLINE_PANELS``; ``display``: a function like
    ``IPython.display.display`` (called once with ``display_id=True``; the handle it returns gets
    ``update(image)``); ``clock``: seconds; ``min_interval_s``, ``max_draw_share``: the throttle
    (tests change these three).
    """

    def __init__(self, rows: list, panels: dict, *, title: str = "", display=None, clock=time.perf_counter,
                 min_interval_s: float = MIN_INTERVAL_S, max_draw_share: float = MAX_DRAW_SHARE):
        if not (isinstance(panels, dict) and panels and all(isinstance(c, dict) and c for c in panels.values())):
            raise ValueError(f"panels must be a non-empty dict of title -> {{column: label}}, got {panels!r}")
        if not isinstance(min_interval_s, (int, float)) or min_interval_s < 0:
            raise ValueError(f"min_interval_s must be a non-negative number, got {min_interval_s!r}")
        if not isinstance(max_draw_share, (int, float)) or not 0 < max_draw_share <= 1:
            raise ValueError(f"max_draw_share must be in (0, 1], got {max_draw_share!r}")
        if not isinstance(rows, list):
            raise ValueError(f"rows must be the run's list of rows (History.rows), got {type(rows).__name__}")
        self.rows, self.panels, self.title = rows, panels, title
        self._display, self._clock = display, clock
        self.min_interval_s, self.max_draw_share = min_interval_s, max_draw_share
        self._handle, self._figure, self._lines = None, None, {}
        self._drawn_rows, self.draws = 0, 0
        self._start = self._last_draw = clock()
        self._spent, self._expected_cost = 0.0, FIRST_DRAW_GUESS_S

    def update(self) -> bool:
        """Redraw when the budget allows (see the module's docstring); returns whether it drew."""
        now = self._clock()
        if (len(self.rows) == self._drawn_rows or now - self._last_draw < self.min_interval_s
                or self._spent + self._expected_cost > self.max_draw_share * (now - self._start)):
            return False
        self._draw()
        return True

    def finish(self) -> None:
        """Draw the last steps, if the plot was shown at all and steps came after its last draw."""
        if self._handle is not None and len(self.rows) != self._drawn_rows:
            self._draw()

    def _draw(self) -> None:
        start = self._clock()
        first = self._figure is None
        if first:
            self._build(self.rows)
        image = self._image(self._png())
        if self._handle is None:
            self._handle = self._show(image)
        else:
            self._handle.update(image)
        self._drawn_rows, self.draws = len(self.rows), self.draws + 1
        self._last_draw = self._clock()
        if not first:  # the first draw builds the figure and warms matplotlib (~0.6 s): paid once, not budgeted
            self._expected_cost = self._last_draw - start
            self._spent += self._expected_cost

    def _show(self, image):
        display = self._display
        if display is None:
            from IPython.display import display
        return display(image, display_id=True)

    @staticmethod
    def _image(png: bytes):
        from IPython.display import Image

        return Image(data=png, format="png")

    def _png(self) -> bytes:
        """The figure of every row so far, as PNG bytes (built on the first draw, its lines updated after)."""
        rows = self.rows
        for (axes, column), line in self._lines.items():
            steps, values = _series(rows, column)
            line.set_data(steps, values)
        for axes in {axes for axes, _ in self._lines}:
            axes.relim()
            axes.autoscale_view()
        last = rows[-1].get("step", len(rows)) if rows else 0
        self._figure.suptitle(f"{self.title} · step {last}" if self.title else f"step {last}", fontsize=10)
        buffer = io.BytesIO()
        self._figure.canvas.print_png(buffer, pil_kwargs={"compress_level": 1})
        return buffer.getvalue()

    def _build(self, rows) -> None:
        """One axes per panel that the rows so far log, laid out in rows of up to ``MAX_COLUMNS``."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        logged = {key for row in rows for key, value in row.items() if _is_number(value) and math.isfinite(value)}
        shown = {title: {column: label for column, label in columns.items() if column in logged}
                 for title, columns in self.panels.items()}
        shown = {title: columns for title, columns in shown.items() if columns} or {"(nothing logged)": {}}
        n_columns = min(MAX_COLUMNS, len(shown))
        n_rows = math.ceil(len(shown) / n_columns)
        self._figure = Figure(figsize=(PANEL_SIZE_IN[0] * n_columns, PANEL_SIZE_IN[1] * n_rows + 0.4), dpi=DPI)
        FigureCanvasAgg(self._figure)
        for index, (title, columns) in enumerate(shown.items()):
            axes = self._figure.add_subplot(n_rows, n_columns, index + 1)
            axes.set_title(title, fontsize=9, y=1.0, pad=3)  # a fixed title position: no per-draw layout
            axes.tick_params(labelsize=7)
            axes.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
            axes.yaxis.set_major_locator(MaxNLocator(nbins=3))
            axes.grid(alpha=0.3)
            for column, label in columns.items():
                style = dict(marker="o", markersize=3, linestyle="") if column.startswith("eval/") else {}
                (self._lines[(axes, column)],) = axes.plot([], [], label=label, linewidth=1.2, **style)
            if len(columns) > 1:
                axes.legend(fontsize=6, loc="upper left", framealpha=0.6)  # "best" would search each draw
        self._figure.subplots_adjust(left=0.08, right=0.98, bottom=0.12, top=0.85, wspace=0.3, hspace=0.6)


def live_plot(rows: list, panels: dict, *, live: bool | None, progress: bool, title: str = ""):
    """The run's live plot: a ``LivePlot`` of ``rows`` when ``live_enabled(live, progress=progress)``,
    else one that draws nothing. Call ``update()`` after each step and ``finish()`` after the last,
    or use it as a context manager, which finishes it on leaving the block."""
    return LivePlot(rows, panels, title=title) if live_enabled(live, progress=progress) else _NoPlot()


def _series(rows, column: str):
    """(steps, values) of ``column`` over the rows that log it as a finite number."""
    points = [(row.get("step", index), row[column]) for index, row in enumerate(rows)
              if _is_number(row.get(column)) and math.isfinite(row[column])]
    return [p[0] for p in points], [p[1] for p in points]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
