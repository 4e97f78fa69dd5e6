"""A reader's first visit, in JupyterLab in Chromium, as ``make lab`` starts it on a fresh clone (no
notebook trusted before): the book read from that JupyterLab (/static/), a lesson opened from its page's
"open in JupyterLab" link shows its stored widget views and their figures before any cell runs, and
reading it leaves the file as it was: JupyterLab does not mark it changed (autosave would rewrite it),
and even an explicit save writes the same bytes.
"""

from __future__ import annotations

import shutil

import pytest
from labtools import REPO, assert_no_console_errors, run_command, wait_kernel_idle

LESSON = "03_ppo.ipynb"  # a lesson with stored interact widgets (the clip regions)
DIRTY_JS = "() => window.jupyterapp.shell.currentWidget.context.model.dirty"


def _stored_views(path) -> int:
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    state = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    views = [output["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
             for cell in notebook.cells for output in cell.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in output.get("data", {})]
    return sum(1 for model_id in views if state[model_id]["model_name"] == "VBoxModel")


@pytest.mark.slow
def test_a_lesson_opened_from_the_book_shows_its_stored_widgets_and_stays_unchanged(lab, page, book_html):
    shutil.copytree(book_html, lab.site, dirs_exist_ok=True)  # the built book, where `make lab` serves it
    page.goto(f"{lab.url}/api/status?token={lab.token}")  # logged in, as `make lab`'s browser tab is
    page.goto(f"{lab.url}/static/lessons/{LESSON.removesuffix('.ipynb')}.html")
    link = page.locator("a.rlbook-lab-link")
    assert link.get_attribute("href") == f"../../lab/tree/{LESSON}", "served by make lab: the link stays relative"
    link.click()
    page.wait_for_function("() => window.jupyterapp !== undefined && !!window.jupyterapp.shell.currentWidget"
                           f" && window.jupyterapp.shell.currentWidget.title.label === '{LESSON}'", timeout=90_000)
    wait_kernel_idle(page, timeout_s=90)
    expected = _stored_views(REPO / "notebooks" / LESSON)
    interacts = page.locator(".jp-Notebook .jp-OutputArea-output .widget-interact")
    page.wait_for_function(f"() => document.querySelectorAll('.jp-Notebook .widget-interact').length >= {expected}",
                           timeout=60_000)
    assert interacts.count() == expected, f"{interacts.count()} of the {expected} stored widget views are shown"
    for index in range(expected):  # each with its controls and its figure, as stored
        view = interacts.nth(index)
        assert view.locator(".widget-slider, .widget-hslider, .widget-dropdown, .widget-checkbox").count() > 0
        assert view.locator(".widget-output img").count() > 0, f"stored widget view {index} shows no figure"
    page.locator(".jp-Notebook .jp-Cell").last.scroll_into_view_if_needed()  # read to the end
    page.wait_for_timeout(3_000)
    assert not page.evaluate(DIRTY_JS), "opening the lesson marked it changed: JupyterLab's autosave would rewrite it"
    before = (lab.root / LESSON).read_bytes()
    assert before == (REPO / "notebooks" / LESSON).read_bytes()
    run_command(page, "docmanager:save")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    page.wait_for_timeout(2_000)
    after = (lab.root / LESSON).read_bytes()
    assert after == before, "saving the lesson just read changed its file (JupyterLab's form differs from the stored one)"

    # A reader whose Python is not the one that stored the lesson: the kernel's version is not written back.
    other = "stored_under_another_python.ipynb"
    stored = before.replace(b'"version": "3.', b'"version": "2.')
    assert stored != before, "the stored lesson records its Python version"
    (lab.root / other).write_bytes(stored)
    run_command(page, "docmanager:open", {"path": other})
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget"
                           f" && window.jupyterapp.shell.currentWidget.title.label === '{other}'", timeout=60_000)
    wait_kernel_idle(page, timeout_s=90)
    run_command(page, "docmanager:save")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    page.wait_for_timeout(2_000)
    assert (lab.root / other).read_bytes() == stored, "a save wrote the reader's Python version into the lesson"
    assert_no_console_errors(page)
