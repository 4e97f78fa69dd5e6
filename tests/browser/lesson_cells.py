"""Which cells of a lesson a widget needs: the widget cell (the one that calls ``*_widget(``), the
lesson's setup cell (its first code cell), and, recursively, the last earlier cell that defines each
name a needed cell reads (plus the earlier cells that change that name in place by ``x[...] =``,
``x.a =`` or ``x += ``). Found from the cells' source with ``ast``, so a lesson can be edited freely.

A name changed by a method call (``x.append(...)``) is not seen as changed: a lesson that builds a
widget's input that way needs the building cell to define the name too (``x = ...``).
"""

from __future__ import annotations

import ast
from datetime import datetime
from pathlib import Path

import nbformat


def code_cells(notebook) -> list[int]:
    return [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"]


def widget_cells(notebook) -> list[int]:
    """Indices of the code cells that call a ``*_widget(`` function (not the ones only defining one)."""
    return [i for i in code_cells(notebook)
            if any(isinstance(node, ast.Call) and _called_name(node).endswith("_widget")
                   for node in ast.walk(_parse(notebook.cells[i].source)))]


def _called_name(call: ast.Call) -> str:
    function = call.func
    return function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")


def _parse(source: str) -> ast.Module:
    """The cell as Python, its IPython magics and shell lines (``%...``, ``!...``) left out."""
    from IPython.core.inputtransformer2 import TransformerManager

    return ast.parse(TransformerManager().transform_cell(source))


def _names(tree: ast.Module) -> tuple[set[str], set[str], set[str]]:
    """(names the cell defines, names it changes in place, names it reads before defining them).

    Statement by statement: a statement's reads come before its own assignments (``x = f(x)`` reads
    the earlier ``x``); loop, comprehension, ``with`` and argument names bound inside a statement
    are not reads from elsewhere."""
    defined, changed, read = set(), set(), set()
    for statement in tree.body:
        bound_inside = _bound_inside(statement)
        stored, loaded = set(), set()
        for node in ast.walk(statement):
            if isinstance(node, ast.Name):
                (loaded if isinstance(node.ctx, ast.Load) else stored).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stored.add(node.name)
            elif isinstance(node, ast.alias):
                stored.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
                changed.add(_base_name(node))
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                changed.add(node.target.id)
        read |= loaded - bound_inside - defined
        defined |= stored
    return defined, changed - {""}, read


def _bound_inside(statement) -> set[str]:
    """Names a statement binds for its own body: loop and comprehension targets, function and lambda
    arguments, ``with ... as`` and ``except ... as`` names, and any name a compound statement assigns."""
    bound = set()
    for node in ast.walk(statement):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            bound |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            bound |= {n.id for n in ast.walk(node.optional_vars) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    if isinstance(statement, (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try,
                              ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        bound |= {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return bound


def _base_name(node) -> str:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def needed_cells(notebook, targets: list[int]) -> list[int]:
    """The code cells (indices, in order) that running ``targets`` needs, the first code cell included."""
    cells = code_cells(notebook)
    names = {i: _names(_parse(notebook.cells[i].source)) for i in cells}
    needed, queue = set(), list(targets) + cells[:1]
    while queue:
        index = queue.pop()
        if index in needed:
            continue
        needed.add(index)
        for name in names[index][2]:
            queue += _providers(name, index, cells, names)
    return sorted(needed)


def _providers(name: str, before: int, cells: list[int], names: dict) -> list[int]:
    """The last cell before ``before`` that defines ``name``, and the cells after it that change it."""
    earlier = [i for i in cells if i < before]
    definitions = [i for i in earlier if name in names[i][0]]
    if not definitions:
        return []
    last = definitions[-1]
    return [last] + [i for i in earlier if i > last and name in names[i][1]]


def stored_seconds(cell) -> float | None:
    """How long the cell took when the lesson's outputs were stored (nbclient's timing metadata, which
    ``make execute`` records), or None when the file holds no timing for it."""
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not start or not end:
        return None
    return (datetime.fromisoformat(end.replace("Z", "+00:00"))
            - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()


def needs_cost(notebook, target: int) -> float | None:
    """Seconds the cells ``target`` needs (the setup cell left out: every kernel pays it) took in the
    lesson's stored run; None when a cell has no stored timing."""
    setup = code_cells(notebook)[:1]
    seconds = [stored_seconds(notebook.cells[i]) for i in needed_cells(notebook, [target]) if i not in setup]
    return None if None in seconds else sum(seconds)


def trimmed_lesson(path: Path, targets: list[int]):
    """A copy of the lesson at ``path`` with only the cells ``targets`` need, outputs cleared, and the
    targets' indices in it."""
    notebook = nbformat.read(path, as_version=4)
    keep = needed_cells(notebook, targets)
    trimmed = nbformat.v4.new_notebook(metadata=notebook.metadata)
    trimmed.cells = [notebook.cells[i] for i in keep]
    for cell in trimmed.cells:
        cell.outputs, cell.execution_count = [], None
    return trimmed, [keep.index(target) for target in targets]
