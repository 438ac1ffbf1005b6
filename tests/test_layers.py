"""The house rules, checked on the syntax tree of every module: which package may import which.

engine (model, cluster, fragmentation, scheduler, policies, replay) is pure: nothing of
Slurm, the service, the submit path, the simulator or the command line, and no I/O
module. slurm (backends, parsers, translation) knows nothing of the service or the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "compass_slurm"

#: package -> the first-level parts of compass_slurm it may import (itself included)
ALLOWED = {
    "engine": {"engine"},
    "slurm": {"slurm", "engine", "atomic", "collector", "timeparse"},
    "sim": {"sim", "engine", "slurm", "layout", "atomic", "timeparse", "native_stdout"},
    "service": {"service", "engine", "slurm", "atomic", "collector", "config", "timeparse", "paths"},
    "submit": {"submit", "slurm", "service", "config", "atomic", "timeparse"},
}
#: standard or third-party modules that mean I/O, threads or a clock: never in the engine
ENGINE_FORBIDDEN = {"subprocess", "socket", "sqlalchemy", "click", "rich", "pathlib", "tempfile", "shutil",
                    "threading", "time", "io", "urllib", "logging"}


def _module(path: Path) -> list[str]:
    parts = ["compass_slurm", *path.relative_to(PACKAGE).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, relative ones resolved."""
    here = _module(path)
    package = here if path.name == "__init__.py" else here[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:  # "from . import x": x is a module of that package
                    out += [(node.lineno, f"{name}.{a.name}") for a in node.names]
                    continue
            else:
                name = node.module
            out.append((node.lineno, name))
    return out


def modules_of(package: str) -> list[Path]:
    return sorted((PACKAGE / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(package: str) -> None:
    bad = []
    for path in modules_of(package):
        for line, name in imports(path):
            parts = name.split(".")
            if parts[0] == "compass_slurm" and len(parts) > 1 and parts[1] not in ALLOWED[package]:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def test_engine_does_no_io() -> None:
    bad = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}"
           for path in modules_of("engine") for line, name in imports(path)
           if name.split(".")[0] in ENGINE_FORBIDDEN]
    assert not bad, "\n".join(bad)


def test_the_check_sees_relative_imports() -> None:
    found = dict((name, line) for line, name in imports(PACKAGE / "service" / "daemon.py"))
    assert "compass_slurm.engine.policies.base" in found and "compass_slurm.slurm.translate" in found
    assert "compass_slurm.engine.policies.compass" in {n for _, n in imports(PACKAGE / "engine/policies/base.py")}
