"""The core's shape: modules import each other in one direction, never an engine, and adapters use one contract."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).parents[1]
SRC = ROOT / "src" / "tagjit"
PLUGINS = ROOT / "plugins"


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: pathlib.Path) -> tuple[set[str], set[str]]:
    """The tagjit modules a file imports (at any depth, function-local too) and the top-level packages it imports."""
    me = module_name(path) if SRC in path.parents else ""
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    modules, packages = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            packages.add(name.split(".")[0])
            if name.split(".")[0] == "tagjit":
                modules.add(name)
                # "from tagjit.pkg import mod" imports the submodule when one exists
                modules.update(f"{name}.{a.name}" for a in node.names
                               if (SRC.parent / name.replace(".", "/") / f"{a.name}.py").exists()
                               or (SRC.parent / name.replace(".", "/") / a.name / "__init__.py").exists())
        elif isinstance(node, ast.Import):
            packages.update(a.name.split(".")[0] for a in node.names)
            modules.update(a.name for a in node.names if a.name.split(".")[0] == "tagjit")
    return modules, packages


def core_files() -> list[pathlib.Path]:
    return sorted(SRC.rglob("*.py"))


def test_the_core_has_no_import_cycle():
    graph = {module_name(p): imports(p)[0] for p in core_files()}
    # importing a.b.c runs a/__init__ and a/b/__init__ first
    for deps in graph.values():
        deps |= {d.rsplit(".", k)[0] for d in list(deps) for k in range(1, d.count("."))}
    visiting, done = set(), set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in visiting, "import cycle: " + " -> ".join(path + (module,))
        if module in done or module not in graph:
            return
        visiting.add(module)
        for dep in sorted(graph[module] - {module}):
            if not module.startswith(dep + "."):  # a submodule's own package is already importing
                visit(dep, path + (module,))
        visiting.discard(module)
        done.add(module)

    for module in sorted(graph):
        visit(module, ())


def test_the_core_imports_neither_engine():
    for p in core_files():
        assert not imports(p)[1] & {"vllm", "sglang"}, p


def test_adapters_use_tagjit_only_through_the_engine_contract():
    for p in sorted(PLUGINS.rglob("*.py")):
        used = {m for m in imports(p)[0]}
        assert used <= {"tagjit", "tagjit.engine"}, f"{p}: {sorted(used - {'tagjit', 'tagjit.engine'})}"
        for node in ast.walk(ast.parse(p.read_text())):  # "from tagjit import X" takes only the contract itself
            if isinstance(node, ast.ImportFrom) and node.module == "tagjit" and not node.level:
                assert [a.name for a in node.names] == ["engine"], f"{p}: from tagjit import {node.names[0].name}"


def test_no_private_xgrammar_attribute_is_used():
    for p in core_files() + sorted(PLUGINS.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "xgr":
                assert not node.attr.startswith("_"), f"{p}: xgr.{node.attr}"
            if isinstance(node, ast.Attribute) and node.attr in ("_handle", "_init_handle"):
                raise AssertionError(f"{p}: .{node.attr} is xgrammar's private handle")


def test_every_module_opens_with_a_one_line_summary():
    for p in core_files() + sorted(PLUGINS.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(p.read_text()), clean=False)
        assert doc and doc.strip(), f"{p} has no docstring"
        first = doc.strip().splitlines()[0]
        assert first.endswith((".", ":")) or len(doc.strip().splitlines()) == 1, f"{p}: {first!r}"
