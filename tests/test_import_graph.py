"""No import circles in the source tree.

The graph is read from the source with `ast`, not by importing: every `import` and `from ... import` counts,
lazy imports inside functions included (a circle that only closes at call time still means two modules cannot
be understood, tested or replaced one without the other). Imports under `if TYPE_CHECKING:` are left out: they
never run. An edge goes to the most specific module the statement names (`from a.b import c` points at `a.b.c`
when that is a module, else at `a.b`); the implicit import of parent packages is not an edge, or every package
whose `__init__` imports a submodule would be a circle.

The tinker plugin's part holds now; the whole tree is expected to follow (others are untangling the rest).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_roots() -> list[Path]:
    """The top-level packages of the project: the core, the adapter and every built-in plugin."""
    roots = [ROOT / "rtlreward", ROOT / "cvdp_adapter"]
    roots += sorted(p for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").is_file())
    return [r for r in roots if (r / "__init__.py").is_file()]


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of every package root."""
    out: dict[str, Path] = {}
    for root in package_roots():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root.parent).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            if any(not p.isidentifier() for p in parts):
                continue  # data folders with .py files (examples, harness fixtures) are not modules
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run (TYPE_CHECKING blocks skipped, their `else` kept)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports."""
    files = module_files()
    graph: dict[str, set[str]] = {m: set() for m in files}

    def closest(name: str) -> str | None:
        while name:
            if name in files:
                return name
            name = name.rpartition(".")[0]
        return None

    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for a in node.names:
                    full = f"{base}.{a.name}"
                    targets.append(full if full in files else base)
            for t in targets:
                dep = closest(t)
                if dep is not None and dep != mod:
                    graph[mod].add(dep)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def _show(found: list[list[str]]) -> str:
    return "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_circle_and_only_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_and_relative_imports():
    graph = import_graph()
    assert "rtlreward_tinker.env" in graph
    # the plugin's hook imports its command module inside a function: still an edge
    assert "rtlreward_tinker.cli" in graph["rtlreward_tinker"]


def test_no_import_cycle_touches_the_tinker_plugin():
    found = [c for c in cycles(import_graph()) if any(m.startswith("rtlreward_tinker") for m in c)]
    assert not found, f"import circles through rtlreward_tinker:\n{_show(found)}"


# Circles in the core still being untangled by their owner; anything else in the core fails at once.
KNOWN_CORE_CYCLES: list[list[str]] = []


def test_no_import_cycle_touches_the_cvdp_adapter():
    found = [c for c in cycles(import_graph()) if any(m.startswith("cvdp_adapter") for m in c)]
    assert not found, f"import circles through cvdp_adapter:\n{_show(found)}"


def test_no_import_cycle_in_the_core():
    found = [
        c
        for c in cycles(import_graph())
        if any(m == "rtlreward" or m.startswith("rtlreward.") for m in c) and c not in KNOWN_CORE_CYCLES
    ]
    assert not found, f"import circles through rtlreward/:\n{_show(found)}"


def test_no_import_cycle_anywhere():
    found = cycles(import_graph())
    assert not found, f"import circles:\n{_show(found)}"


# -- the plugin boundary: the core imports no plugin, a plugin imports the core, the shared library and itself --
LIBRARY = "rtlreward_hdl"  # the HDL helpers the stages share; no entry point
CORE = "rtlreward"


def _package(module: str) -> str:
    return module.split(".", 1)[0]


def boundary_violations(graph: dict[str, set[str]]) -> list[str]:
    """`importer -> imported` for every import that crosses the boundary the wrong way: the core importing
    anything but the core; the library importing a plugin; a plugin (cvdp_adapter counts as one) importing
    another plugin."""
    allowed = {CORE: {CORE}, LIBRARY: {CORE, LIBRARY}}
    out = []
    for mod, deps in sorted(graph.items()):
        pkg = _package(mod)
        ok = allowed.get(pkg, {CORE, LIBRARY, pkg})
        out += [f"{mod} -> {dep}" for dep in sorted(deps) if _package(dep) not in ok]
    return out


def test_the_boundary_check_sees_each_kind_of_crossing():
    graph = {
        "rtlreward.engine": {"rtlreward.model", "rtlreward_format"},
        "rtlreward_hdl.files": {"rtlreward.model", "rtlreward_lint.stage"},
        "rtlreward_lint.stage": {"rtlreward_hdl.files", "rtlreward_lint", "rtlreward.stage"},
        "cvdp_adapter.tasks": {"rtlreward_interface.ports", "rtlreward_hdl.interface"},
        "rtlreward_tests": {"cvdp_adapter.runner"},
    }
    assert boundary_violations(graph) == [
        "cvdp_adapter.tasks -> rtlreward_interface.ports",
        "rtlreward.engine -> rtlreward_format",
        "rtlreward_hdl.files -> rtlreward_lint.stage",
        "rtlreward_tests -> cvdp_adapter.runner",
    ]


def test_the_boundary_covers_the_core_the_library_the_adapter_and_the_plugins():
    packages = {_package(m) for m in import_graph()}
    assert {CORE, LIBRARY, "cvdp_adapter", "rtlreward_format", "rtlreward_tests"} <= packages


def test_no_plugin_imports_another_and_the_core_imports_none():
    found = boundary_violations(import_graph())
    assert not found, "imports across the plugin boundary:\n" + "\n".join(found)
