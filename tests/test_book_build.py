"""The book's build steps that need no Sphinx run: static widget views, docstring handling, the index, the
bibliography."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
import sys
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
sys.path.insert(0, str(BOOK))

import bibliography  # noqa: E402
import build  # noqa: E402
import docstrings  # noqa: E402
import widgets  # noqa: E402


def _model(name, **attrs):
    return {"model_name": name, "state": attrs}


def _interact_state():
    return {
        "box": _model("VBoxModel", children=["IPY_MODEL_beta", "IPY_MODEL_n", "IPY_MODEL_mode", "IPY_MODEL_out"]),
        "beta": _model("FloatLogSliderModel", description="β", min=-2.0, max=1.0, step=0.1, base=10.0,
                       value=0.1, readout=True, readout_format=".3g"),
        "n": _model("SelectionSliderModel", description="n", _options_labels=["1", "2", "4"], index=2, readout=True),
        "mode": _model("DropdownModel", description="mode", _options_labels=["token", "seq<"], index=1),
        "out": _model("OutputModel", outputs=[{"output_type": "stream", "name": "stdout", "text": "a < b\n"}]),
    }


def test_a_slider_is_drawn_disabled_at_its_stored_value_with_its_readout():
    state = {"s": _model("FloatSliderModel", description="ε <high>", min=0.0, max=1.0, step=0.05, value=0.28,
                         readout=True, readout_format=".2f")}
    view = widgets.render_view(state, "s")
    assert 'type="range" disabled min="0.0" max="1.0" step="0.05" value="0.28"' in view
    assert ">0.28<" in view and "ε &lt;high&gt;" in view


def test_an_interact_box_draws_each_control_and_its_output_in_order():
    view = widgets.render_view(_interact_state(), "IPY_MODEL_box")
    assert view.index("β") < view.index(">n<") < view.index("<select") < view.index("a &lt; b")
    assert 'value="-1.0"' in view and ">0.1<" in view  # the log slider sits at log10(0.1); its readout is the value
    assert 'max="2" step="1" value="2"' in view and ">4<" in view  # selection slider: the option's index and label
    assert "<option selected>seq&lt;</option>" in view


def test_a_tqdm_bar_is_a_progress_element_between_its_texts():
    state = {"bar": _model("HBoxModel", children=["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"]),
             "l": _model("HTMLModel", value="step:&nbsp;100%"),
             "p": _model("FloatProgressModel", min=0.0, max=30.0, value=30.0),
             "r": _model("HTMLModel", value="30/30")}
    view = widgets.render_view(state, "bar")
    assert "rlbook-widget-row" in view and '<progress max="30.0" value="30.0">' in view
    assert view.index("step:&nbsp;100%") < view.index("<progress") < view.index("30/30")


def test_a_view_of_a_missing_model_is_refused():
    with pytest.raises(ValueError, match="no widget model"):
        widgets.render_view({}, "IPY_MODEL_gone")


def test_static_notebook_replaces_every_view_and_drops_the_state():
    view = {"output_type": "display_data", "metadata": {},
            "data": {widgets.WIDGET_VIEW: {"model_id": "box", "version_major": 2}, "text/plain": "interactive(...)"}}
    figure = {"output_type": "display_data", "metadata": {}, "data": {"image/png": "iVBOR", "text/plain": "<Figure>"}}
    notebook = {"cells": [{"cell_type": "code", "source": "", "outputs": [view, figure]}],
                "metadata": {"widgets": {widgets.WIDGET_STATE: {"state": _interact_state()}}}}
    assert widgets.static_notebook(notebook) == 1
    outputs = notebook["cells"][0]["outputs"]
    assert widgets.WIDGET_VIEW not in outputs[0]["data"] and "rlbook-widget-view" in outputs[0]["data"]["text/html"]
    assert outputs[1] == figure and "widgets" not in notebook["metadata"]


def test_pipes_are_escaped_outside_inline_literals_only():
    assert docstrings.escape_pipes("|A| and ``x | y``") == r"\|A\| and ``x | y``"


def test_a_docstring_that_parses_is_kept_and_one_that_does_not_is_shown_verbatim():
    lines, parsed = docstrings.as_shown(["Mean of |A| over tokens.", "", "- a bullet"])
    assert parsed and lines[0] == r"Mean of \|A\| over tokens."
    broken = ["A formula:", "    indented with no blank line", "back out."]
    lines, parsed = docstrings.as_shown(broken)
    assert not parsed and lines[:2] == ["::", ""] and lines[2:5] == [f"    {line}" for line in broken]


def _documented(module):
    """``module`` and the functions, classes and methods defined in it, with their docstrings."""
    yield module.__name__, inspect.getdoc(module)
    for name, obj in vars(module).items():
        if getattr(obj, "__module__", None) != module.__name__ or name.startswith("_"):
            continue
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield f"{module.__name__}.{name}", inspect.getdoc(obj)
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if inspect.isfunction(member) and not attr.startswith("_"):
                    yield f"{module.__name__}.{name}.{attr}", inspect.getdoc(member)


def test_every_library_docstring_is_valid_restructuredtext_so_the_api_pages_render_it():
    import rlbook

    invalid = []
    for info in pkgutil.walk_packages(rlbook.__path__, "rlbook."):
        for name, doc in _documented(importlib.import_module(info.name)):
            if doc and docstrings.rst_problems("\n".join(map(docstrings.escape_pipes, doc.splitlines()))):
                invalid.append(name)
    assert not invalid, f"shown verbatim in the book (not valid reStructuredText): {invalid}"


def test_every_library_module_parses_for_the_source_pages_so_each_api_entry_links_to_its_code():
    """viewcode's source pages come from Sphinx's own module analyser; a module it cannot parse (it failed on
    a dict with ``**`` unpacking inside a decorator) gets no page, and the book's module index links to a
    page that does not exist: a fault the browser test finds only after the whole build."""
    import rlbook
    from sphinx.pycode import ModuleAnalyzer

    failed = []
    for info in pkgutil.walk_packages(rlbook.__path__, "rlbook."):
        try:
            ModuleAnalyzer.for_module(info.name).find_tags()
        except Exception as error:  # noqa: BLE001 - any failure means no source page
            failed.append(f"{info.name}: {error}")
    assert not failed, "modules the book's source pages cannot show:\n" + "\n".join(failed)


def test_first_heading_titles_a_lesson_and_a_lesson_without_one_is_refused():
    cell = {"cell_type": "markdown", "source": ["Intro\n", "## 01 · Policy gradient\n", "text"]}
    assert build.first_heading({"cells": [cell]}) == "01 · Policy gradient"
    with pytest.raises(ValueError, match="heading"):
        build.first_heading({"cells": [{"cell_type": "markdown", "source": "no heading"}]})


def test_a_lesson_page_gets_the_jupyterlab_banner_under_its_title(tmp_path):
    path = tmp_path / "07_zoo.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": "# 07 · Zoo\nText."}],
                                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    source = build.book_notebook(path)["cells"][0]["source"]
    assert source.startswith("# 07 · Zoo\n") and source.endswith("Text.")
    assert "notebooks/" in source and 'href="../../lab/tree/07_zoo.ipynb"' in source  # make lab's /static/ -> /lab/tree/
    assert 'data-fallback="http://localhost:8888/lab/tree/07_zoo.ipynb"' in source
    assert 'href="../notebooks/07_zoo.ipynb" download' in source


def test_mentions_of_lessons_and_arxiv_ids_are_linked_outside_code_math_headings_and_links():
    pages = {"03": "03_ppo.ipynb", "09": "09_baselines.ipynb"}
    text = ("# About lesson 03\nSee lesson 03 (Shao et al., arXiv:2402.03300v2), `lesson 03`, $\\text{lesson 03}$, "
            "[lesson 03](x), lesson 07 and lesson 09.\n```\nlesson 03\n```")
    linked = build.cross_linked(text, pages, "09_baselines.ipynb")
    assert linked.startswith("# About lesson 03\nSee [lesson 03](03_ppo.ipynb) (Shao et al., "
                             "[arXiv:2402.03300v2](https://arxiv.org/abs/2402.03300)), `lesson 03`, $\\text{lesson 03}$, "
                             "[lesson 03](x), lesson 07 and lesson 09.\n```\nlesson 03\n```")


def test_progress_bars_are_left_out_of_the_page():
    bar = {"bar": _model("HBoxModel", children=["IPY_MODEL_l", "IPY_MODEL_p"]), "l": _model("HTMLModel", value="x"),
           "p": _model("FloatProgressModel", min=0.0, max=3.0, value=3.0)}
    view = {"output_type": "display_data", "metadata": {}, "data": {widgets.WIDGET_VIEW: {"model_id": "bar"}}}
    text = {"output_type": "stream", "name": "stdout", "text": "done\n"}
    notebook = {"cells": [{"cell_type": "code", "source": "", "outputs": [view, text]},
                          {"cell_type": "markdown", "source": "prose"}],
                "metadata": {"widgets": {widgets.WIDGET_STATE: {"state": bar}}}}
    assert widgets.is_progress_bar(bar, "bar") and not widgets.is_progress_bar(bar, "l")
    assert widgets.static_notebook(notebook) == 0
    assert notebook["cells"][0]["outputs"] == [text] and "outputs" not in notebook["cells"][1]


def test_the_index_links_readme_rows_to_pages_and_adds_lessons_the_readme_lacks(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("| nb | lesson | status |\n|---|---|---|\n"
                      "| 00 | [Tour](notebooks/00_tour.ipynb): a \\| b | ready |\n"
                      "| 17–21 | [R1-Zero](notebooks/17_r1.ipynb), scaling | planned |\n")
    rows = build.readme_rows(readme)
    assert rows == [("00", "[Tour](notebooks/00_tour.ipynb): a \\| b", "ready"),
                    ("17–21", "[R1-Zero](notebooks/17_r1.ipynb), scaling", "planned")]
    lessons = [Path("00_tour.ipynb"), Path("05_best.ipynb")]
    page = build.index_page(lessons, {"00_tour.ipynb": "00 · Tour", "05_best.ipynb": "05 · Best-of-n"}, rows)
    table = page[page.index("| nb |"):].split("\n\n")[0].splitlines()
    assert table[2:] == ["| 00 | [Tour](lessons/00_tour.ipynb): a \\| b | ready |",
                         "| 05 | [05 · Best-of-n](lessons/05_best.ipynb) | |",
                         "| 17–21 | R1-Zero, scaling | planned |"]
    assert "lessons/00_tour\nlessons/05_best" in page


def test_api_pages_document_what_each_module_defines_not_what_it_reexports():
    assert "policy_loss" in build.defined_members("rlbook.losses.policy")
    assert "policy_loss" not in build.defined_members("rlbook.losses")  # a re-export
    modules = build.public_modules()
    assert "rlbook.kl" in modules and not any(part.startswith("_") for m in modules for part in m.split("."))
    pages = build.api_pages(["rlbook", "rlbook.kl", "rlbook.losses", "rlbook.losses.policy"])
    members = re.search(r"\.\. automodule:: rlbook\.kl\n   :members: (.*)\n", pages["api/rlbook.kl.rst"]).group(1)
    assert {"KL_ESTIMATORS", "k1", "k2", "k3"} <= set(members.split(", "))  # constants and functions alike
    assert ":undoc-members:" in pages["api/rlbook.kl.rst"]  # constants without a docstring are shown too
    assert build.api_groups(["rlbook", "rlbook.kl", "rlbook.losses", "rlbook.losses.policy"]) == {
        "rlbook": ["rlbook", "rlbook.kl"], "rlbook.losses": ["rlbook.losses", "rlbook.losses.policy"]}
    index = pages["api/index.rst"]
    assert index.index("rlbook`` and its top-level modules") < index.index("   rlbook.kl\n") < index.index("``rlbook.losses``")


def test_a_notebook_in_jupyterlabs_form_has_whole_floats_as_ints_and_ipykernels_name():
    import notebook_form

    notebook = {"metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
                "cells": [{"outputs": [{"data": {"x": [20.0, 0.5, 1e16, True, "3.0"]}}]}]}
    saved = notebook_form.as_lab_saves(notebook)
    assert saved["cells"][0]["outputs"][0]["data"]["x"] == [20, 0.5, 10**16, True, "3.0"]
    assert all(type(v) is int for v in saved["cells"][0]["outputs"][0]["data"]["x"][0:3:2])
    assert saved["metadata"]["kernelspec"]["display_name"] == "Python 3 (ipykernel)"


def _lesson(*markdown):
    return {"cells": [{"cell_type": "markdown", "source": text} for text in markdown]}


REFERENCES = """## References

- R. J. Williams (1992). *Simple statistical gradient-following algorithms for connectionist
  reinforcement learning.* Machine Learning 8, 229–256 — REINFORCE and its baseline.
- J. Schulman, F. Wolski, P. Dhariwal, A. Radford, O. Klimov (2017). *Proximal Policy Optimization Algorithms.* arXiv:1707.06347 — eq. 7.
- J. Schulman, S. Levine (2015). *Trust Region Policy Optimization.* arXiv:1502.05477.
- J. Schulman, P. Moritz (2015). *Generalized Advantage Estimation.* arXiv:1506.02438 — eq. 16.
- J. Schulman (2020). *Approximating KL Divergence.* Blog note, http://joschu.net/blog/kl-approx.html — the table.
"""


def test_a_reference_list_item_gives_authors_year_title_id_and_link_but_not_the_lessons_note():
    williams, ppo, *_, blog = bibliography.reference_list(REFERENCES)
    assert (williams.authors, williams.year, williams.arxiv) == ("R. J. Williams", "1992", "")
    assert williams.title == "Simple statistical gradient-following algorithms for connectionist reinforcement learning"
    assert williams.reference.endswith("Machine Learning 8, 229–256")  # the note after " — " is the lesson's own
    assert ppo.arxiv == "1707.06347" and blog.url == "http://joschu.net/blog/kl-approx.html"


def test_prose_citations_take_the_id_and_title_of_their_own_citation_and_skip_years_that_cite_nothing():
    text = ("GRPO (Shao et al. 2024, \"DeepSeekMath\", arXiv:2402.03300) divides twice; Liu et al. (2025,\n"
            "\"Understanding R1-Zero-Like Training\", arXiv:2503.20783) call it Dr.GRPO. PPO (Schulman et al.\n"
            "2017). GRPO got 30 points on AIME 2024. Two 2025 methods; conservative DPO (Mitchell 2023); "
            "(Bradley & Terry 1952); Hoeffding's (1948) formula. `Smith et al. 2020` and $Smith 2021$ are code and "
            "math.\n\n## References\n\n- A. B. Cited (1999). *Listed, not prose.*")
    found = [(c.authors, c.year, c.arxiv, c.title) for c in bibliography.prose_citations(text)]
    assert found == [("Shao et al.", "2024", "2402.03300", "DeepSeekMath"),
                     ("Liu et al.", "2025", "2503.20783", "Understanding R1-Zero-Like Training"),
                     ("Schulman et al.", "2017", "", ""), ("Mitchell", "2023", "", ""),
                     ("Bradley & Terry", "1952", "", ""), ("Hoeffding", "1948", "", "")]
    cited = bibliography.prose_citations("**GSPO** (Group Sequence Policy Optimization; Zheng et al. 2025, arXiv:2507.18071)"
                                         " and AReaL (Fu et al. 2025, arXiv:2505.24298)")
    assert [c.subject for c in cited] == ["Group Sequence Policy Optimization", "AReaL"]


def test_a_citation_without_an_id_is_the_paper_its_lesson_lists_and_an_ambiguous_one_adds_nothing():
    lessons = {"03_ppo.ipynb": _lesson("PPO (Schulman et al. 2017) and GAE (Schulman et al. 2015).", REFERENCES),
               "08_grpo.ipynb": _lesson("REINFORCE (Williams 1992); PPO (Schulman et al. 2017, arXiv:1707.06347); "
                                        "a paper no lesson lists (Nobody et al. 2021, \"A Title\")."),
               "09_x.ipynb": _lesson("Schulman (2020) derived the table.")}
    papers = {p.key: p for p in bibliography.bibliography(lessons)}
    assert papers["arxiv-1707.06347"].lessons == {"03_ppo.ipynb", "08_grpo.ipynb"}
    assert papers["williams-1992"].lessons == {"03_ppo.ipynb", "08_grpo.ipynb"}  # the list's item, by author and year
    assert papers["schulman-2020"].lessons == {"03_ppo.ipynb", "09_x.ipynb"}  # listed only in 03: found book-wide
    assert papers["arxiv-1502.05477"].lessons == papers["arxiv-1506.02438"].lessons == {"03_ppo.ipynb"}
    assert papers["nobody-2021"].title == "A Title" and papers["nobody-2021"].lessons == {"08_grpo.ipynb"}
    assert len(papers) == 6


def test_the_bibliography_page_links_each_paper_and_the_lessons_citing_it():
    lessons = {"03_ppo.ipynb": _lesson(REFERENCES), "08_grpo.ipynb": _lesson("PPO (Schulman et al. 2017).")}
    page = bibliography.bibliography_page(bibliography.bibliography(lessons),
                                          {name: f"lessons/{name}" for name in lessons})
    ppo = next(line for line in page.splitlines() if "Proximal" in line)
    assert ppo == ("J. Schulman, F. Wolski, P. Dhariwal, A. Radford, O. Klimov (2017). *Proximal Policy Optimization "
                   "Algorithms.* [arXiv:1707.06347](https://arxiv.org/abs/1707.06347) — cited in lessons "
                   "[03](lessons/03_ppo.ipynb), [08](lessons/08_grpo.ipynb).")
    blog = next(line for line in page.splitlines() if "KL Divergence" in line)
    assert blog.count("joschu.net") == 2 and "Blog note. [http://joschu.net" in blog  # shown once, as the link
    williams = next(line for line in page.splitlines() if "Williams" in line)
    assert "[search for it](https://scholar.google.com/scholar?q=Simple+statistical" in williams
    assert page.index("Schulman, F.") < page.index("Williams") and "(bib-arxiv-1707-06347)=" in page
    assert "*Trust Region Policy Optimization.* [arXiv:1502.05477]" in page  # the item's own "." is not doubled


def test_every_arxiv_id_in_the_lessons_is_in_the_bibliography_with_the_lessons_that_cite_it():
    lessons = {path.name: json.loads(path.read_text(encoding="utf-8")) for path in build.lesson_paths()}
    by_id = {paper.arxiv: paper.lessons for paper in bibliography.bibliography(lessons) if paper.arxiv}
    for name, notebook in lessons.items():
        text = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown")
        for arxiv in bibliography.ARXIV_ID.findall(text):
            assert name in by_id.get(arxiv, set()), f"{name} cites arXiv:{arxiv}"
