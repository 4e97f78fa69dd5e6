"""The set-up: pyproject.toml and environment.yml list the same dependencies; the CI entry runs make test."""

import re
import tomllib
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


def test_environment_yml_mirrors_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["test"]
    pip_section = [item for item in _environment_pip_section() if not item.startswith("-e")]
    assert sorted(map(_normalise, pip_section)) == sorted(map(_normalise, wanted))


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
