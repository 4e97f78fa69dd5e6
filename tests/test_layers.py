"""The library's imports run one way, floor by floor (DESIGN.md, "Layout"; README, "The library").

Every module of ``rlbook`` is read with ``ast`` (nothing is imported), and every import in it is
collected, those inside functions too: an import inside a function is an edge all the same, only a
later one. Each module belongs to a floor; a module may import modules on its own floor or below,
never above (a back-edge), and the graph has no cycle (on one floor either). A failure names the
edge: ``rlbook.trainers.online -> rlbook.viz.live``.

The package itself (``rlbook/__init__.py``) is the front door, on a floor of its own at the top: it
re-exports a few names for a reader's notebook cell (``rlbook.explain``), imported on first use, and no
module imports it. It is matched by its exact name only, so a module missing from ``FLOORS`` fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rlbook"

# Floors, lowest first: a module's floor is that of the longest prefix listed here.
FLOORS = [
    ("foundation: argument checks, the run size, independent runs side by side, figure sizes",
     ["rlbook._checks", "rlbook.runtime", "rlbook.parallel", "rlbook._figures"]),
    ("math: pure functions on tensors",
     ["rlbook.advantages", "rlbook.aggregation", "rlbook.kl", "rlbook.ratios", "rlbook.losses", "rlbook.metrics",
      "rlbook.shaping", "rlbook.schedules", "rlbook.padding", "rlbook.entropy", "rlbook.timeline",
      "rlbook.token_gradients", "rlbook.evidence"]),
    ("models and tasks",
     ["rlbook.models", "rlbook.tasks", "rlbook.hacking"]),
    ("rollout, update, evaluation",
     ["rlbook.rollout", "rlbook.update", "rlbook.evaluation"]),
    ("trainers: the loops, their live plot and checkpoints",
     ["rlbook.trainers"]),
    ("lesson analysis: the numbers the lessons show, the zoo's build, the ablation harness",
     ["rlbook.probes", "rlbook.toys", "rlbook.kl_sequence", "rlbook.coverage", "rlbook.gradients", "rlbook.throughput", "rlbook.pipeline",
      "rlbook.reasoning", "rlbook.preference_analysis", "rlbook.scaling", "rlbook.ablation", "rlbook.zoo"]),
    ("leaves: figures, widgets and exercise checkers (they draw and check, never train or sample)",
     ["rlbook.viz", "rlbook.exercises"]),
    ("command lines and notebook helpers",
     ["rlbook.cli", "rlbook.__main__", "rlbook.zoo.__main__", "rlbook.execute", "rlbook.notebook"]),
    ("the front door: names re-exported from the package, imported on first use",
     [PACKAGE.name]),
]

# What a leaf must never import, whatever its floor allows: the update step and the trainers train,
# the sampler samples. A figure that needs a run takes its numbers from an analysis module.
LEAVES = ("rlbook.viz", "rlbook.exercises")
NOT_FROM_LEAVES = ("rlbook.update", "rlbook.trainers", "rlbook.ablation")


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The rlbook modules ``name`` (at ``path``) imports anywhere in its source, itself left out."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            # ``from rlbook.viz import live`` imports the module rlbook.viz.live; ``from rlbook.kl import k1`` rlbook.kl
            targets.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)
    found = set()
    for target in targets:
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in known and target != name and target.split(".")[0] == "rlbook":
            found.add(target)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imported(name, path, set(known)) for name, path in known.items()}


def floor_of(name: str) -> int:
    best, floor = -1, None
    for level, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            below = name.startswith(prefix + ".") and prefix != PACKAGE.name  # the package root is no prefix
            if (name == prefix or below) and len(prefix) > best:
                best, floor = len(prefix), level
    if floor is None:
        raise KeyError(name)
    return floor


def back_edges(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module on a higher floor, and each leaf's import of something that trains or samples."""
    problems = []
    for source in sorted(graph):
        for target in sorted(graph[source]):
            if floor_of(target) > floor_of(source):
                problems.append(f"{source} -> {target} (floor {floor_of(source)} '{FLOORS[floor_of(source)][0]}' "
                                f"imports floor {floor_of(target)} '{FLOORS[floor_of(target)][0]}')")
            elif source.startswith(LEAVES) and target.startswith(NOT_FROM_LEAVES):
                problems.append(f"{source} -> {target} (a leaf imports what trains or samples)")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """One cycle per strongly connected group of modules, written as its edges (Tarjan's algorithm)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    found = []
    for group in groups:
        members = set(group)
        path, node = [group[0]], group[0]
        while True:  # walk inside the group until a module repeats: that stretch is a cycle
            node = min(graph[node] & members)
            if node in path:
                path = path[path.index(node):] + [node]
                break
            path.append(node)
        found.append(" -> ".join(path))
    return found


def test_every_module_has_a_floor():
    unplaced = []
    for name in modules():
        try:
            floor_of(name)
        except KeyError:
            unplaced.append(name)
    assert not unplaced, f"modules on no floor (add them to FLOORS): {unplaced}"


def test_no_import_reaches_a_higher_floor():
    problems = back_edges(import_graph())
    assert not problems, "back-edges:\n" + "\n".join(problems)


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(found)


# --- the checker itself, on a made-up package ----------------------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "rlbook"
    for relative, source in {"__init__.py": "", **files}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root


def test_an_import_inside_a_function_is_an_edge_and_relative_imports_resolve(tmp_path):
    root = _package(tmp_path, {
        "kl.py": "def f():\n    from rlbook.trainers import online\n",
        "trainers/__init__.py": "from .online import x\n",
        "trainers/online.py": "from rlbook import kl\nfrom ..viz import live\nx = 1\n",
        "viz/__init__.py": "",
        "viz/live.py": "import rlbook.kl\n",
    })
    graph = import_graph(root)
    assert graph["rlbook.kl"] == {"rlbook.trainers.online"}
    assert graph["rlbook.trainers"] == {"rlbook.trainers.online"}
    assert graph["rlbook.trainers.online"] == {"rlbook.kl", "rlbook.viz.live"}
    assert graph["rlbook.viz.live"] == {"rlbook.kl"}
    problems = back_edges(graph)
    assert any(p.startswith("rlbook.kl -> rlbook.trainers.online") for p in problems)
    assert any(p.startswith("rlbook.trainers.online -> rlbook.viz.live") for p in problems)
    assert cycles(graph) == ["rlbook.kl -> rlbook.trainers.online -> rlbook.kl"]


def test_a_cycle_on_one_floor_is_found():
    graph = {"rlbook.entropy": {"rlbook.losses"}, "rlbook.losses": {"rlbook.kl"}, "rlbook.kl": {"rlbook.entropy"}}
    assert back_edges(graph) == []
    assert cycles(graph) == ["rlbook.entropy -> rlbook.losses -> rlbook.kl -> rlbook.entropy"]


def test_a_leaf_may_not_import_what_trains():
    assert back_edges({"rlbook.viz.ratios": {"rlbook.update"}}) == [
        "rlbook.viz.ratios -> rlbook.update (a leaf imports what trains or samples)"]


@pytest.mark.parametrize("name, floor", [("rlbook.losses.policy", 1), ("rlbook.zoo.build", 5),
                                         ("rlbook.zoo.__main__", 7), ("rlbook.viz.live", 6)])
def test_the_longest_prefix_decides_the_floor(name, floor):
    assert floor_of(name) == floor


def test_the_package_root_is_the_top_floor_and_no_prefix():
    assert floor_of("rlbook") == len(FLOORS) - 1
    with pytest.raises(KeyError):
        floor_of("rlbook.a_module_missing_from_floors")
