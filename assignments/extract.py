"""Read a submitted notebook's answers without running it: its definitions, found by parsing its code cells.

The grader never executes a submission's top-level code. It parses every code cell (``ast``), in order,
and keeps only what an answer is made of:

- ``import`` statements (anywhere at the top level of a cell; one that fails is skipped, as in a notebook);
- function definitions: for each name, the LAST definition that is not the untouched stub (a body that
  only raises ``NotImplementedError``), so an answer written in a new cell below the stub counts, and a stub
  re-run below an answer does not erase it. A ``def`` must run nothing when defined: annotations are
  dropped, and one with a decorator or a computed default counts as other code (classes too);
- assignments of a literal (``worked_advantages = [0.58, 0.58, 0.58, -1.73]``): the last one wins.

Everything else (a cell that patches a module, changes directory, rewrites files, trains a model or types
in a result) is dropped, so it cannot change a grade. The notebook's kernel name and outputs are ignored.

Two checks then read an answer function's source (and the helpers it calls, transitively) without running it:
``uses_reference`` finds a call to the library (``rlbook``), whose reference implementation a "write it
yourself" question must not use; ``reaches_outside`` finds what an answer never needs and what could reach
the grader (``os``, ``sys``, ``open``, ``getattr``, private or dunder attributes, ...).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import pathlib

# What an answer to these questions (tensor arithmetic) never needs, and what could reach the grader's process.
OUTSIDE_NAMES = frozenset({
    "os", "sys", "gc", "inspect", "builtins", "importlib", "ctypes", "subprocess", "socket", "shutil", "pathlib",
    "io", "signal", "threading", "multiprocessing", "pickle", "marshal", "types", "open", "exec", "eval",
    "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr", "delattr", "breakpoint", "input",
    "exit", "quit", "environ", "system", "popen", "modules", "fdopen", "write", "fork", "kill", "hub", "library",
    "cpp_extension", "f_back", "f_locals", "f_globals", "f_builtins", "gi_frame", "cr_frame", "ag_frame", "tb_frame",
    "tb_next", "with_traceback",
})


@dataclasses.dataclass
class Submission:
    """What a notebook defines: ``imports`` and ``definitions`` by name (AST nodes), and ``literals`` by name."""

    imports: list[ast.stmt]
    definitions: dict[str, ast.stmt]
    stubs: set[str]
    literals: dict[str, ast.stmt]
    assigned: dict[str, str]  # a name computed by other top-level code (an alias, a training run): that code
    skipped_cells: int  # code cells that do not parse as Python

    def source(self, names: set[str] | None = None, *, also_used: frozenset[str] = frozenset()) -> str:
        """Python source of the literals and the definitions (only ``names`` and what they call), after the imports
        they use: an import none of them (nor ``also_used``, the names of code run beside them) refers to is left
        out, since nothing of the submission runs but its definitions (a notebook's ``load_model`` import costs a
        grading process seconds of imports for a question on tensors). ``from m import *`` is always kept."""
        keep = self.definitions if names is None else {n: self.definitions[n] for n in self.closure(names)}
        kept = [*self.literals.values(), *keep.values()]
        used = set(also_used) | {node.id for stmt in kept for node in ast.walk(stmt) if isinstance(node, ast.Name)}
        imports = [f"try:\n    {ast.unparse(node)}\nexcept Exception:\n    pass" for node in self.imports
                   if _import_binds(node) & used or "*" in _import_binds(node)]
        body = [*imports, *(ast.unparse(node) for node in kept)]
        return "\n".join(body) + "\n"

    def is_placeholder(self, name: str) -> bool:
        """True when ``name``'s last literal value is the stub's ``None`` or ``...`` (``x = None  # replace``)."""
        node = self.literals.get(name)
        return node is not None and isinstance(node.value, ast.Constant) and node.value.value in (None, ...)

    def closure(self, names: set[str]) -> set[str]:
        """``names`` that the submission defines, and every definition they reach by name, transitively."""
        found, todo = set(), [n for n in names if n in self.definitions]
        while todo:
            name = todo.pop()
            if name in found:
                continue
            found.add(name)
            used = {node.id for node in ast.walk(self.definitions[name]) if isinstance(node, ast.Name)}
            todo.extend(n for n in used if n in self.definitions and n not in found)
        return found

    def library_names(self) -> dict[str, str]:
        """Names the top-level imports bind to the library: {local name: 'rlbook.module.name'}."""
        bound = {}
        for node in self.imports:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "rlbook":
                        bound[alias.asname or alias.name.split(".")[0]] = alias.name
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rlbook":
                for alias in node.names:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        return bound

    def uses_reference(self, name: str) -> str | None:
        """The library name that answer ``name`` (or a helper it calls) uses, or None."""
        library = self.library_names()
        for helper in sorted(self.closure({name})):
            for node in ast.walk(self.definitions[helper]):
                if isinstance(node, ast.Name) and node.id in library:
                    return library[node.id]
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                    for module in modules:
                        if module.split(".")[0] == "rlbook":
                            return module
        return None

    def reaches_outside(self, name: str) -> str | None:
        """What answer ``name`` (or a helper it calls) uses that an answer never needs, or None (a name such as
        ``open`` or a module is reported before an attribute such as ``.write``)."""
        names, attributes = [], []
        for helper in sorted(self.closure({name})):
            for node in ast.walk(self.definitions[helper]):
                if isinstance(node, ast.Name) and node.id in OUTSIDE_NAMES:
                    names.append(node.id)
                elif isinstance(node, ast.Attribute) and (node.attr.startswith("_") or node.attr in OUTSIDE_NAMES):
                    attributes.append(f".{node.attr}")
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                    names += [module for module in modules if module.split(".")[0] in OUTSIDE_NAMES]
        return (names + attributes or [None])[0]


def _is_stub(node: ast.stmt) -> bool:
    """A definition whose body is only a docstring and ``raise NotImplementedError`` (the prompt's stub)."""
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _runs_nothing_when_defined(node: ast.FunctionDef) -> bool:
    """Strip what a ``def`` evaluates when it runs (annotations); False if it has decorators or computed
    defaults, which would run code at definition time (such a definition is treated as other code)."""
    arguments = node.args
    defaults = [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]
    if node.decorator_list or not all(_is_literal(d) for d in defaults):
        return False
    node.returns = None
    for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]:
        if argument is not None:
            argument.annotation = None
    return True


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _python_only(source: str) -> str:
    """A cell's source without IPython's line magics and shell escapes (``%time``, ``!ls``), which are not Python."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _stored_names(node: ast.stmt) -> set[str]:
    """Names a statement binds or fills anywhere inside it (``x = f()``, ``x[k] = v``, ``for x in ...``)."""
    names = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.add(child.id)
        elif isinstance(child, ast.Subscript) and isinstance(child.ctx, ast.Store) and isinstance(child.value, ast.Name):
            names.add(child.value.id)
    return names


def code_cells(path: pathlib.Path) -> list[str]:
    """The sources of a notebook's code cells, read as JSON (any kernel name, any nbformat 4 layout)."""
    try:
        notebook = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
        cells = notebook["cells"]
        return ["".join(c["source"]) if isinstance(c["source"], list) else str(c["source"])
                for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path.name} is not a readable .ipynb notebook ({type(error).__name__}: {error})") from None


def parse(cells: list[str]) -> Submission:
    """What the code cells define (see the module docstring), in cell order; nothing is executed."""
    imports, definitions, stubs, literals, assigned, skipped = [], {}, set(), {}, {}, 0
    for source in cells:
        try:
            tree = ast.parse(_python_only(source))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            skipped += 1
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imports.append(node)
            elif isinstance(node, ast.FunctionDef) and _runs_nothing_when_defined(node):
                if not _is_stub(node):
                    definitions[node.name] = node
                    stubs.discard(node.name)
                elif node.name not in definitions:
                    stubs.add(node.name)
            elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets) \
                    and _is_literal(node.value):
                for target in node.targets:
                    literals[target.id] = ast.Assign(targets=[ast.Name(target.id, ast.Store())], value=node.value,
                                                     lineno=0)
                    assigned.pop(target.id, None)
            else:  # other code: which names it computes (assigns, item assignments, loop variables), not run
                named = {node.name} if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else set()
                for name in _stored_names(node) | named:
                    assigned[name] = ast.unparse(node).splitlines()[0][:200]
    return Submission(imports, definitions, stubs, literals, assigned, skipped)


def _import_binds(node: ast.stmt) -> set[str]:
    """The names an ``import`` statement binds (``*`` for a star import)."""
    if isinstance(node, ast.Import):
        return {alias.asname or alias.name.split(".")[0] for alias in node.names}
    return {alias.asname or alias.name for alias in node.names}
