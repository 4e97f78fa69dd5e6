"""Static HTML for a notebook's stored widget views: what the book shows instead of live widgets.

A lesson stores its widgets' state in the notebook's metadata (``rlbook.execute``: nbclient keeps
it). In JupyterLab that state is drawn by the widget manager; a static site would need the
ipywidgets HTML manager, a JavaScript bundle normally loaded from a CDN, and even then a slider
could not redraw its figure without a kernel. The book instead draws each stored view here, at build
time: a slider as a disabled range input at its stored value with its readout, a dropdown or
checkbox in its stored state, a progress bar as ``<progress>``, boxes as flex rows and columns, and
an Output widget's stored outputs. The figure an ``interact`` drew is a normal cell output after
the view, so the page shows the controls at the values that figure was drawn with.
"""

from __future__ import annotations

import html
from math import log

__all__ = ["WIDGET_VIEW", "is_progress_bar", "render_view", "static_notebook"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
REFERENCE = "IPY_MODEL_"


def _model(state: dict, reference: str) -> dict:
    model_id = reference.removeprefix(REFERENCE)
    if model_id not in state:
        raise ValueError(f"state has no widget model {model_id!r}")
    return state[model_id]


def _label(attrs: dict) -> str:
    description = attrs.get("description", "")
    return f'<span class="rlbook-widget-label">{html.escape(description)}</span>' if description else ""


def _readout(attrs: dict, model_name: str) -> str:
    if "_options_labels" in attrs:
        return attrs["_options_labels"][attrs["index"]]
    spec = attrs.get("readout_format", "d" if model_name == "IntSliderModel" else ".2f")
    try:
        return format(attrs["value"], spec)
    except (TypeError, ValueError):
        return str(attrs["value"])


def _slider(attrs: dict, model_name: str) -> str:
    if "_options_labels" in attrs:  # SelectionSlider: positions are option indices
        low, high, step, position = 0, len(attrs["_options_labels"]) - 1, 1, attrs["index"]
    elif model_name == "FloatLogSliderModel":  # min / max / step are exponents of ``base``
        low, high, step = attrs["min"], attrs["max"], attrs["step"]
        position = round(log(attrs["value"], attrs["base"]), 12)
    else:
        low, high, step, position = attrs["min"], attrs["max"], attrs["step"], attrs["value"]
    readout = _readout(attrs, model_name) if attrs.get("readout", True) else ""
    return (f'<div class="rlbook-widget rlbook-widget-slider">{_label(attrs)}'
            f'<input type="range" disabled min="{low}" max="{high}" step="{step}" value="{position}"'
            f' aria-label="{html.escape(attrs.get("description", ""))}">'
            f'<span class="rlbook-widget-readout">{html.escape(readout)}</span></div>')


def _dropdown(attrs: dict) -> str:
    options = "".join(f'<option{" selected" if i == attrs["index"] else ""}>{html.escape(label)}</option>'
                      for i, label in enumerate(attrs["_options_labels"]))
    return f'<div class="rlbook-widget">{_label(attrs)}<select disabled>{options}</select></div>'


def _checkbox(attrs: dict) -> str:
    checked = " checked" if attrs["value"] else ""
    return (f'<div class="rlbook-widget"><label><input type="checkbox" disabled{checked}> '
            f'{html.escape(attrs.get("description", ""))}</label></div>')


def _progress(attrs: dict) -> str:
    return (f'<div class="rlbook-widget">{_label(attrs)}'
            f'<progress max="{attrs["max"] - attrs["min"]}" value="{attrs["value"] - attrs["min"]}"></progress></div>')


def _output(attrs: dict) -> str:
    parts = []
    for output in attrs.get("outputs", []):
        data = output.get("data", {})
        if "image/png" in data:
            parts.append(f'<img alt="widget output" src="data:image/png;base64,{data["image/png"]}">')
        elif "text/html" in data:
            parts.append(_joined(data["text/html"]))
        elif "text" in output or "text/plain" in data:
            parts.append(f"<pre>{html.escape(_joined(output.get('text', data.get('text/plain', ''))))}</pre>")
    return f'<div class="rlbook-widget-output">{"".join(parts)}</div>'


def _joined(text) -> str:
    return "".join(text) if isinstance(text, list) else text


def render_view(state: dict, model_id: str) -> str:
    """HTML for the widget ``model_id`` and its children, from a notebook's stored widget ``state``.

    ``state`` maps model ids to ``{"model_name": ..., "state": {...}}`` as in the notebook's
    ``metadata.widgets[WIDGET_STATE]["state"]``. A model of a kind not drawn here is shown by its name.
    """
    model = _model(state, model_id)
    name, attrs = model["model_name"], model["state"]
    if name in ("VBoxModel", "HBoxModel", "BoxModel"):
        children = "".join(render_view(state, child) for child in attrs["children"])
        direction = "row" if name == "HBoxModel" else "column"
        return f'<div class="rlbook-widget-box rlbook-widget-{direction}">{children}</div>'
    if name.endswith("SliderModel"):
        return _slider(attrs, name)
    if name == "DropdownModel":
        return _dropdown(attrs)
    if name == "CheckboxModel":
        return _checkbox(attrs)
    if name in ("FloatProgressModel", "IntProgressModel"):
        return _progress(attrs)
    if name == "HTMLModel":
        return f'<div class="rlbook-widget">{_label(attrs)}{attrs["value"]}</div>'
    if name == "OutputModel":
        return _output(attrs)
    return f'<div class="rlbook-widget"><code>{html.escape(name)}</code></div>'


def is_progress_bar(state: dict, model_id: str) -> bool:
    """Whether the view ``model_id`` is a progress bar (tqdm's: a box of texts around a progress model)."""
    model = _model(state, model_id)
    if model["model_name"] in ("FloatProgressModel", "IntProgressModel"):
        return True
    children = model["state"].get("children", []) if model["model_name"].endswith("BoxModel") else []
    return any(_model(state, child)["model_name"] in ("FloatProgressModel", "IntProgressModel") for child in children)


def static_notebook(notebook: dict) -> int:
    """Replace every widget view in ``notebook`` (nbformat JSON, changed in place) by its static HTML,
    and drop every progress bar: on a page, a bar frozen at 100 % ("Loading weights", a training run's
    steps) says nothing the outputs around it do not, and a lesson that loads and trains often shows dozens.

    The stored widget state is dropped from the metadata afterwards (nothing on the page reads it).
    Returns how many views were replaced. A view whose model is missing from the state raises ValueError.
    """
    state = notebook.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    replaced = 0
    for cell in notebook.get("cells", []):
        if "outputs" not in cell:
            continue
        cell["outputs"] = [output for output in cell["outputs"] if not (
            WIDGET_VIEW in output.get("data", {}) and is_progress_bar(state, output["data"][WIDGET_VIEW]["model_id"]))]
        for output in cell["outputs"]:
            data = output.get("data", {})
            if WIDGET_VIEW not in data:
                continue
            view = render_view(state, data.pop(WIDGET_VIEW)["model_id"])
            data["text/html"] = f'<div class="rlbook-widget-view">{view}</div>'
            replaced += 1
    notebook.get("metadata", {}).pop("widgets", None)
    return replaced
