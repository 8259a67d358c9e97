"""The back-test's modules import one way: no import cycle (not even through an import
inside a function), and the options and the report stand without the job or the CLI."""

from __future__ import annotations

import ast
import subprocess
import sys

import paths
import pytest

PACKAGE = paths.ROOT / "python"


def import_graph() -> dict[str, set[str]]:
    """Every ``kquota`` module and the ``kquota`` modules it imports anywhere in its code."""
    files = {}
    for file in PACKAGE.joinpath("kquota").rglob("*.py"):
        parts = file.relative_to(PACKAGE).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    graph: dict[str, set[str]] = {}
    for name, file in files.items():
        imported: set[str] = set()
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    imported.add(full if full in files else node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        graph[name] = {m for m in imported if m in files and m != name}
    return graph


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path of imports from ``start`` back to itself, if there is one."""
    stack = [(start, [start])]
    seen: set[str] = set()
    while stack:
        name, path = stack.pop()
        for imported in sorted(graph[name]):
            if imported == start:
                return [*path, start]
            if imported not in seen:
                seen.add(imported)
                stack.append((imported, [*path, imported]))
    return None


def test_the_backtest_and_the_cli_import_without_cycles() -> None:
    graph = import_graph()
    names = [n for n in graph if n.startswith(("kquota.backtest", "kquota.cli"))]
    assert "kquota.backtest.options" in names and "kquota.cli.backtest" in names
    cycles = {name: cycle_through(graph, name) for name in names}
    assert {name: path for name, path in cycles.items() if path} == {}


@pytest.mark.parametrize("module", ["kquota.backtest.options", "kquota.backtest.report"])
def test_options_and_report_import_without_the_job_or_the_cli(module: str) -> None:
    code = (
        f"import sys, {module}; "
        "print(sorted(m for m in sys.modules if m in ('kquota.cli', 'kquota.backtest.job')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
