"""Every lesson's widgets, driven in JupyterLab in Chromium as a reader drives them.

For each lesson in notebooks/ that calls a ``*_widget(`` function: the cells its widgets need
(``lesson_cells.needed_cells``: the setup cell, the widget cells and the cells defining what they
use) are run in JupyterLab at the CI size; then every control of every widget is moved with the
mouse (a slider's handle: dragged to an end; a dropdown: another option; a checkbox: a click),
and after each move the figure the reader sees (the <img> in the widget's output) must be redrawn
with different pixels, with no error in any output and no browser console error. What each widget
printed is checked for errors too, and reported (its text need not change: some knobs only redraw).

The kernel-side counterpart, which fingerprints the figure's data, is tests/test_widgets_respond.py;
this test checks what it cannot: that the widgets render and respond in the browser.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from labtools import (
    REPO, assert_no_console_errors, error_outputs, open_notebook, run_all_cells, wait_kernel_idle,
)
from lesson_cells import needs_cost, trimmed_lesson, widget_cells

RUN_CELLS_S = 300  # the driven widgets' needs at the CI size
REDRAW_S = 60  # one control move to a new figure
# A widget is driven here when the cells it needs (its setup cell aside) took at most this long in the
# lesson's stored full-size run (the CI size costs less); heavier ones (a training run, a sampled pool)
# would take the suite past its budget of about 5 minutes and are listed as skipped, with their cost.
NEEDS_BUDGET_S = 60.0
WIDGET_FOLDER = "widget-lessons"
STRAY_FIGURE = ".jp-Cell-outputArea > .jp-OutputArea-child > .jp-RenderedImage img"  # a figure beside the widget
STRAY_GRACE_MS = 5_000


def _widget_params() -> list:
    """One case per lesson with widgets (its cheap widget cells), and a skipped case per heavy one."""
    params = []
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        driven = []
        for index in widget_cells(notebook):
            cost = needs_cost(notebook, index)
            if cost is not None and cost <= NEEDS_BUDGET_S:
                driven.append(index)
                continue
            why = ("no stored run of the lesson times the cells it needs (make execute stores one)" if cost is None
                   else f"the cells it needs took {cost:.0f} s in the lesson's stored full-size run "
                        f"(budget {NEEDS_BUDGET_S:.0f} s)")
            params.append(pytest.param(path, [index], id=f"{path.stem}-cell{index}",
                                       marks=pytest.mark.skip(reason=f"not driven in the browser: {why}")))
        if driven:
            params.append(pytest.param(path, driven, id=path.stem))
    return params


def _write_trimmed(lab, lesson: Path, targets: list[int]) -> tuple[str, list[int]]:
    """The cells ``targets`` need, as a notebook in the server's folder: its path and the targets'
    indices in it."""
    trimmed, indices = trimmed_lesson(lesson, targets)
    folder = lab.root / WIDGET_FOLDER
    folder.mkdir(exist_ok=True)
    nbformat.write(trimmed, folder / lesson.name)
    return f"{WIDGET_FOLDER}/{lesson.name}", indices


class WidgetView:
    """One interact widget as rendered in a cell's output: its controls and what its output shows."""

    def __init__(self, page, cell_index: int):
        self.page = page
        self.cell = page.locator(".jp-Notebook .jp-Cell").nth(cell_index)
        self.interact = self.cell.locator(".widget-interact").first
        self.output = self.interact.locator(".widget-output").first

    def wait_rendered(self) -> None:
        """Wait for the widget's first figure, inside its output. A figure drawn outside it (under the
        widget, shown at the cell's end because nobody showed it) fails: moving a control would leave
        that figure as it is and draw the new one nowhere the reader sees."""
        self.interact.wait_for(state="visible", timeout=REDRAW_S * 1000)
        inside, outside = self.output.locator("img"), self.cell.locator(STRAY_FIGURE)
        inside.or_(outside).first.wait_for(state="attached", timeout=REDRAW_S * 1000)
        if not inside.count():
            self.page.wait_for_timeout(STRAY_GRACE_MS)  # the run has ended: a late widget render only
        assert inside.count(), "the widget's output shows no figure" + (
            f" ({outside.count()} figure(s) drawn outside it, at the cell's end: the widget's drawing function "
            "does not show its figure itself — add plt.show(); ipywidgets' own flush misses matplotlib's "
            "'inline' backend name)" if outside.count() else "")

    def controls(self):
        """Each control's locator (the interact's children other than its output)."""
        return self.interact.locator(":scope > .lm-Widget:not(.widget-output)").all()

    def images(self) -> list[str]:
        return [img.get_attribute("src") or "" for img in self.output.locator("img").all()]

    def printed(self) -> str:
        return "\n".join(self.output.locator(".jp-RenderedText").all_inner_texts())

    def errors(self) -> list[str]:
        return error_outputs(self.page, ".jp-Notebook")


def _description(control) -> str:
    """The control's label as the reader sees it (a checkbox's is beside its box)."""
    return control.inner_text().replace("\u200b", "").strip().split("\n")[0] or control.get_attribute("class")


def _settled_box(locator, page, *, tries: int = 20) -> dict:
    """The element's bounding box once two reads 100 ms apart agree (the layout has stopped moving)."""
    box = locator.bounding_box()
    for _ in range(tries):
        page.wait_for_timeout(100)
        again = locator.bounding_box()
        if again == box:
            return box
        box = again
    return box


def _wait_until_drawn(widget, page, *, quiet_s: float = 0.5) -> None:
    """Wait until the widget's figure has stopped changing: a slider drag sends several values, and on a
    busy machine their redraws can still arrive after the first one; the next control is moved only once
    the figure holds still with the kernel idle, so each move's redraw is its own."""
    deadline = time.monotonic() + REDRAW_S
    images = widget.images()
    while time.monotonic() < deadline:
        page.wait_for_timeout(quiet_s * 1000)
        wait_kernel_idle(page, timeout_s=REDRAW_S)
        again = widget.images()
        if again == images:
            return
        images = again


def move(control, page) -> str:
    """Move ``control`` as a reader would; return what was done."""
    classes = control.get_attribute("class") or ""
    if "widget-slider" in classes or "widget-hslider" in classes:
        handle = control.locator(".noUi-handle").first
        now, low, high = (float(handle.get_attribute(a)) for a in ("aria-valuenow", "aria-valuemin", "aria-valuemax"))
        to_low = high - now < now - low
        direction = "low" if to_low else "high"
        # JupyterLab renders a long notebook in windows and a neighbouring widget may still be redrawing,
        # so the page can shift between reading the handle's place and pressing on it: read the place
        # once it holds still, and drag again (as a reader would) if the first press missed the handle.
        for _attempt in range(3):
            handle.scroll_into_view_if_needed()
            grip = _settled_box(handle, page)
            track = control.locator(".noUi-target").first.bounding_box()
            start_x, y = grip["x"] + grip["width"] / 2, grip["y"] + grip["height"] / 2
            end_x = track["x"] - 20 if to_low else track["x"] + track["width"] + 20  # past the end: the slider's bound
            page.mouse.move(start_x, y)
            page.mouse.down()
            page.mouse.move(end_x, y, steps=8)
            page.mouse.up()
            moved_to = float(handle.get_attribute("aria-valuenow"))
            if moved_to != now:
                break
        assert moved_to != now, f"dragging the slider's handle to its {direction} end (3 tries) left it at {now}"
        return f"slider dragged with the mouse to its {direction} end ({now:g} -> {moved_to:g})"
    if "widget-dropdown" in classes:
        select = control.locator("select")
        options = select.locator("option").all_inner_texts()
        current = select.evaluate("s => s.options[s.selectedIndex].text")
        other = next(option for option in options if option != current)
        select.select_option(label=other)
        return f"dropdown {current!r} -> {other!r}"
    if "widget-checkbox" in classes:
        control.locator("input[type=checkbox]").click()
        return "checkbox click"
    if "widget-toggle-buttons" in classes:
        buttons = control.locator("button").all()
        labels = [button.inner_text().strip() for button in buttons]
        active = [i for i, button in enumerate(buttons) if "mod-active" in (button.get_attribute("class") or "")]
        other = next(i for i in range(len(buttons)) if i not in active)
        buttons[other].click()
        return f"toggle buttons {[labels[i] for i in active]} -> {labels[other]!r}"
    raise AssertionError(f"a control this test cannot move yet: {classes}")


@pytest.mark.slow
@pytest.mark.parametrize(("lesson", "widget_cells_in_lesson"), _widget_params())
def test_every_widget_control_redraws_the_figure_in_jupyterlab(lesson, widget_cells_in_lesson, lab, lab_page):
    page = lab_page
    start = time.monotonic()
    path, widget_indices = _write_trimmed(lab, lesson, widget_cells_in_lesson)
    open_notebook(page, path)
    print(f"\n{lesson.stem}: opened in {time.monotonic() - start:.0f} s")
    run_all_cells(page, timeout_s=RUN_CELLS_S)
    print(f"{lesson.stem}: its {len(widget_indices)} widget cell(s) and their needs ran "
          f"at {time.monotonic() - start:.0f} s")
    assert not error_outputs(page), f"{lesson.name}: a cell failed:\n" + "\n".join(error_outputs(page))
    for lesson_index, index in zip(widget_cells_in_lesson, widget_indices):
        widget = WidgetView(page, index)
        widget.wait_rendered()
        controls = widget.controls()
        assert controls, f"{lesson.name} cell {lesson_index}: the widget shows no control"
        for control in controls:
            name, images, printed = _description(control), widget.images(), widget.printed()
            action = move(control, page)
            try:
                page.wait_for_function(
                    "([cell, before]) => { const imgs = Array.from(document.querySelectorAll("
                    "'.jp-Notebook .jp-Cell')[cell].querySelectorAll('.widget-output img'));"
                    " return imgs.length > 0 && imgs.map(i => i.src).join('|') !== before; }",
                    arg=[index, "|".join(images)], timeout=REDRAW_S * 1000, polling=200)
            except Exception as error:
                raise AssertionError(f"{lesson.name} cell {lesson_index}: {action} on {name!r} did not redraw the "
                                     f"figure within {REDRAW_S} s") from error
            wait_kernel_idle(page, timeout_s=REDRAW_S)
            _wait_until_drawn(widget, page)
            assert not widget.errors(), f"{lesson.name}: {action} on {name!r} raised:\n" + "\n".join(widget.errors())
            print(f"{lesson.stem} cell {lesson_index}: {action} on {name!r} redrew the figure "
                  f"at {time.monotonic() - start:.0f} s"
                  + ("; printed text changed" if widget.printed() != printed else ""))
    assert_no_console_errors(page)
