"""The widgets of lessons 04–07 draw exactly one figure per change of a control, inside the widget, and
leave no figure open.

In a live notebook a control's change runs the widget's function from a comm message, after which
nothing flushes pyplot: a function that only *returns* its figure, or draws without showing it,
leaves the figure open (and, with matplotlib's "inline" backend name, ipywidgets' own flush does
not fire). Open figures then pile up and are dumped under the next cell that runs, and a function
that never shows its figure leaves the widget blank. This test runs the widgets in a real IPython
kernel with the inline backend, counts the PNGs each change publishes and the figures left open.
"""

from __future__ import annotations

import json

import nbformat
import pytest

CHECK = """
import json
import matplotlib.pyplot as plt
import torch
from rlbook.viz import preference, rejection, reward_models

published = []
_publish = get_ipython().display_pub.publish
def _record(data, *args, **kwargs):
    published.append("image/png" in data)
    return _publish(data, *args, **kwargs)
get_ipython().display_pub.publish = _record

generator = torch.Generator().manual_seed(0)
proxy = torch.randn(4, 64, generator=generator)
gold = torch.randint(-3, 4, (4, 64), generator=generator).float()
WIDGETS = {
    "04 bradley_terry_widget": (reward_models.bradley_terry_widget, [(0, 1.0), (0, 0.2)]),
    "04 best_of_n_winners_widget": (lambda: reward_models.best_of_n_winners_widget(proxy, gold), [(0, 4), (0, 64)]),
    "05 best_of_n_toy_widget": (rejection.best_of_n_toy_widget, [(0, 4), (1, 0.5), (2, 5), (3, 7)]),
    "06 optimum_widget": (preference.optimum_widget, [(0, 2.0)]),
    "06 dpo_beta_widget": (preference.dpo_beta_widget, [(0, 0.3)]),
    "07 losses_vs_margin_widget": (preference.losses_vs_margin_widget, [(0, 0.3), (1, 0.5), (2, 1.0)]),
    "07 kto_value_widget": (preference.kto_value_widget, [(0, 0.3), (1, 1.0)]),
}
report = {}
for name, (make, changes) in WIDGETS.items():
    plt.close("all")
    published.clear()
    widget = make()
    counts = [(sum(published), len(plt.get_fignums()))]
    for index, value in changes:
        published.clear()
        widget.widget.children[index].value = value
        counts.append((sum(published), len(plt.get_fignums())))
    report[name] = counts
print("REPORT" + json.dumps(report))
"""


@pytest.mark.slow
def test_each_change_of_a_control_draws_one_figure_and_leaves_none_open():
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%matplotlib inline"),
                                               nbformat.v4.new_code_cell(CHECK)])
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    text = "".join(output.get("text", "") for output in notebook.cells[1].outputs)
    report = json.loads(text.split("REPORT", 1)[1])
    for name, counts in report.items():
        # (PNGs published, figures left open) when the widget is built, then after each change
        assert counts == [[1, 0]] * len(counts), f"{name}: {counts}"
