"""The core's shape: modules import each other in one direction, and never an engine."""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).parents[1] / "src" / "tagjit"


def imports(path: pathlib.Path) -> tuple[set[str], set[str]]:
    """The tagjit modules a file imports (at any depth, function-local too) and the top-level packages it imports."""
    modules, packages = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            modules.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom) and node.module:
            packages.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            packages.update(a.name.split(".")[0] for a in node.names)
    return modules, packages


def test_the_core_has_no_import_cycle():
    graph = {p.stem: imports(p)[0] for p in SRC.glob("*.py")}
    visiting, done = set(), set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in visiting, "import cycle: " + " -> ".join(path + (module,))
        if module in done or module not in graph:
            return
        visiting.add(module)
        for dep in sorted(graph[module]):
            visit(dep, path + (module,))
        visiting.discard(module)
        done.add(module)

    for module in sorted(graph):
        visit(module, ())


def test_the_core_imports_neither_engine():
    for p in SRC.glob("*.py"):
        assert not imports(p)[1] & {"vllm", "sglang"}, p.name
