"""The set-up: every imported package is declared; pyproject.toml and environment.yml list the same
dependencies; make installs them at the versions of constraints.txt; the CI entry runs make test."""

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _normalise(requirement: str) -> str:
    return re.sub(r"\s+", "", requirement).lower()


def _environment_pip_section() -> list[str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    items = []
    for line in lines[start + 1:]:
        stripped = line.strip()
        if not stripped.startswith("- "):
            break
        items.append(stripped[2:])
    return items


EXTRAS = ("scale", "book", "grade", "llm", "test")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    """The distribution a requirement names, normalised (PEP 503): ``Sphinx>=9`` -> ``sphinx``."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement.strip()).group()).lower()


def _declared() -> set[str]:
    project = _project()
    return {_name(r) for r in project["dependencies"]} | {
        _name(r) for extra in project["optional-dependencies"].values() for r in extra}


def _imported_modules(folder: Path) -> set[str]:
    """The top-level names of every absolute import in ``folder``'s Python files, inside functions too."""
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_every_imported_package_is_declared():
    """Each third-party module that rlbook/, tests/, benchmarks/ or book/ imports comes from a declared
    distribution: rlbook's own imports from the dependencies, the others' from the dependencies or an extra."""
    distributions = packages_distributions()
    local = {path.stem for folder in ("tests", "book", "benchmarks", "assignments") for path in (ROOT / folder).rglob("*.py")}
    core = {_name(r) for r in _project()["dependencies"]}
    missing = []
    for folder in ("rlbook", "tests", "benchmarks", "book"):
        allowed = core if folder == "rlbook" else _declared()
        for module in sorted(_imported_modules(ROOT / folder) - set(sys.stdlib_module_names) - local - {"rlbook"}):
            if module not in distributions:
                missing.append(f"{folder}: {module} (installed by no distribution)")
            elif not {_name(d) for d in distributions[module]} & allowed:
                missing.append(f"{folder}: {module} (from {distributions[module]})")
    # rlbook.scaling imports trl only inside the function that runs TRL: the scale extra, not a dependency
    assert missing == ["rlbook: trl (from ['trl'])"], missing


def test_environment_yml_mirrors_pyproject():
    project = _project()
    wanted = project["dependencies"] + [r for extra in EXTRAS for r in project["optional-dependencies"][extra]]
    assert sorted(project["optional-dependencies"]) == sorted(EXTRAS)
    section = _environment_pip_section()
    pip_section = [item for item in section if not item.startswith("-")]
    assert sorted(map(_normalise, pip_section)) == sorted(map(_normalise, [r.split("#")[0] for r in wanted]))
    assert "-c constraints.txt" in section and "-e ." in section


def test_make_installs_every_extra_at_the_constrained_versions():
    makefile = (ROOT / "Makefile").read_text()
    assert f'-c constraints.txt -e ".[{",".join(EXTRAS)}]"' in makefile
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, separator, version = line.partition("==")
            assert separator and re.fullmatch(r"[0-9][0-9A-Za-z.]*", version), f"not an exact pin: {line!r}"
            pins[_name(name)] = version
    assert "rlbook" not in pins and not any(name.startswith("nvidia-") for name in pins)
    assert sorted(_declared() - set(pins)) == [], "declared but not pinned: refresh constraints.txt (README)"
    assert pins["torch"] == "2.13.0"  # no local build label: a CPU or a CUDA build of 2.13.0 both fit


def test_torch_pin_admits_the_cpu_build_on_disk():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch_req = next(r for r in project["dependencies"] if r.startswith("torch"))
    assert ">=2.13" in torch_req and "<2.14" in torch_req  # the tested 2.13.x; refuses a newer CUDA build
    assert "torch==2.13.0" in (ROOT / "Makefile").read_text()


def test_ci_runs_make_test_and_readme_opens_with_the_two_commands():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^make \w+", readme, flags=re.M)
    assert commands[:2] == ["make lab", "make test"]
