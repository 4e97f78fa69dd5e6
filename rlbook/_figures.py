"""Figure sizes that fit the book's reading column (``make book``), for every figure the library draws.

The book shows a figure at its own size up to the width of the column and scales a wider one down to
fit it (``book/_static/rlbook.css``); ``tests/browser/test_book.py`` counts a figure shown below 80 % of
its size as too small to read (matplotlib's 10 pt labels then fall under the theme's smallest text). The
column is about 1050 px wide in a 1400 px window and the lessons draw at matplotlib's 100 dpi, so a
figure ``COLUMN_IN`` wide is shown whole at full size. A figure of many panels wraps them into rows
(``panel_grid``) rather than drawing one strip wider than that.
"""

from __future__ import annotations

import math

from rlbook._checks import check_int, check_positive

COLUMN_IN = 10.4  # inches: the book's column at the lessons' 100 dpi (1040 px)


def grid_shape(n: int, *, max_columns: int) -> tuple[int, int]:
    """(rows, columns) for ``n`` panels, at most ``max_columns`` a row, the rows as even as they can be:
    7 panels in rows of at most 4 are 4 + 3, not 4 + 4 + ... ; 5 in rows of at most 4 are 3 + 2."""
    n, max_columns = check_int("n", n, minimum=1), check_int("max_columns", max_columns, minimum=1)
    rows = math.ceil(n / max_columns)
    return rows, math.ceil(n / rows)


def panel_grid(n: int, *, panel: tuple[float, float] = (3.4, 2.8), min_width: float = 2.6, title: bool = False,
               **subplots):
    """A figure of ``n`` panels that fits the book's column: each ``panel`` = (width, height) inches, in
    rows of as many as fit ``COLUMN_IN`` at ``min_width`` or more each, a panel narrowed (never below
    ``min_width``) so that a row fits. ``title``: room for a suptitle. ``subplots``: passed to
    ``plt.subplots`` (``sharey=True``, ``gridspec_kw``, ...).

    Returns (figure, axes): a flat list of ``n`` axes, row by row; the cells of the last row left over are
    removed, so ``figure.axes[i]`` is panel ``i``.
    """
    import matplotlib.pyplot as plt

    width, height = (check_positive(f"panel[{i}]", v) for i, v in enumerate(panel))
    min_width = check_positive("min_width", min_width)
    rows, columns = grid_shape(n, max_columns=max(1, math.floor(COLUMN_IN / min_width)))
    width = max(min(width, COLUMN_IN / columns), min(min_width, width))
    fig, grid = plt.subplots(rows, columns, figsize=(width * columns, height * rows + (0.4 if title else 0.0)),
                             squeeze=False, **subplots)
    axes = list(grid.ravel())
    for spare in axes[n:]:
        fig.delaxes(spare)
    return fig, axes[:n]
