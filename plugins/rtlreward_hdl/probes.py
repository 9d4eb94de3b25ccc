"""The parent's side of the HDL probe hooks (`rtlreward_hdl/probe/`, run in the sandbox by `rtlreward.verdict`):
where they live, and the check that a simulator's signed cocotb record is complete.

Authentic is not enough: a record could list fewer tests than the harness defines (a test module that failed to
import half-way, a test filter, a regression cut short before cocotb scored every test) or tests that are not the
harness's. So the test functions are read from the harness's test module with `ast`, on the parent side, from
the harness files as the task gives them (never from the workspace), and every one must appear in the record,
and nothing else may.
"""

from __future__ import annotations

import ast
import functools
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rtlreward.verdict import PROBE_DIR

__all__ = [
    "COCOTB_HOOK",
    "HOOK_DIR",
    "PYTEST_HOOK",
    "CocotbCase",
    "CocotbRun",
    "DefinedTests",
    "check_cocotb",
    "defined_tests",
    "modules_of",
    "probe_dirs",
]

HOOK_DIR = Path(__file__).resolve().parent / "probe"
COCOTB_HOOK = "rtlreward_cocotb_probe"
PYTEST_HOOK = "rtlreward_pytest_probe"


def probe_dirs() -> tuple[Path, Path]:
    """The folders a probed process needs on its PYTHONPATH (read-only in the sandbox): the core probe, then
    the HDL hooks. Each holds only probe modules."""
    return PROBE_DIR, HOOK_DIR


@attrs.frozen(slots=True)
class DefinedTests:
    """The cocotb tests a module defines: test names (a function's name, or `name=` given to the decorator)
    and functions handed to a TestFactory (their generated tests are named after them)."""

    names: frozenset[str] = frozenset()
    factories: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.names or self.factories)


# `ast.parse` from several threads at once (the engine scores candidates side by side) can fail in CPython
# before 3.11.8 with "SystemError: AST constructor recursion depth mismatch" (gh-106905): one parse at a time.
_AST_LOCK = threading.Lock()


def defined_tests(source: str) -> DefinedTests:
    """Read a cocotb test module's tests from its source. Raises SyntaxError for a module that does not parse.

    A test is a module-level function decorated with `cocotb.test` (called or not, under any alias of the
    `cocotb` module or of `cocotb.test` itself); `TestFactory(fn)` adds `fn`'s generated tests. Cached by source
    (every sample of a task has the same test module).
    """
    return _defined_tests(source)


@functools.lru_cache(maxsize=256)
def _defined_tests(source: str) -> DefinedTests:
    with _AST_LOCK:
        tree = ast.parse(source)
    cocotb_names, test_names, factory_names = {"cocotb"}, set(), {"TestFactory"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "cocotb":
                    cocotb_names.add(a.asname or "cocotb")
        elif isinstance(node, ast.ImportFrom) and node.module in ("cocotb", "cocotb.regression"):
            for a in node.names:
                if a.name == "test":
                    test_names.add(a.asname or "test")
                elif a.name == "TestFactory":
                    factory_names.add(a.asname or "TestFactory")

    def is_test(dec: ast.expr) -> bool:
        f = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(f, ast.Attribute) and f.attr == "test":
            return isinstance(f.value, ast.Name) and f.value.id in cocotb_names
        return isinstance(f, ast.Name) and f.id in test_names

    names: set[str] = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for dec in node.decorator_list:
            if is_test(dec):
                name = node.name
                if isinstance(dec, ast.Call):
                    for kw in dec.keywords:
                        if (
                            kw.arg == "name"
                            and isinstance(kw.value, ast.Constant)
                            and isinstance(kw.value.value, str)
                        ):
                            name = kw.value.value
                names.add(name)
                break
    factories: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if fname in factory_names:
                factories.add(node.args[0].id)
    return DefinedTests(frozenset(names), frozenset(factories))


@attrs.frozen(slots=True)
class CocotbCase:
    name: str
    outcome: str  # passed | failed | skipped
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    @property
    def skipped(self) -> bool:
        return self.outcome == "skipped"


@attrs.frozen(slots=True)
class CocotbRun:
    """One simulation's verified results; `problem` is set (and `cases` are not to be trusted) when the record is
    incomplete or not the harness's."""

    cases: tuple[CocotbCase, ...] = ()
    problem: str = ""

    @property
    def ok(self) -> bool:
        ran = [c for c in self.cases if not c.skipped]
        return not self.problem and bool(ran) and all(c.passed for c in ran)


_OUTCOMES = ("passed", "failed", "skipped")


def check_cocotb(payload: Mapping[str, Any], defined: Mapping[str, DefinedTests]) -> CocotbRun:
    """Check an authentic cocotb record against the tests of its modules (`defined`: module name -> tests, from
    the harness's files). Every defined test must appear (after cocotb's own test filter, if any), every
    recorded test must be one of them, each once."""
    if payload.get("kind") != "cocotb" or not isinstance(payload.get("tests"), list):
        return CocotbRun(problem="the record is not a cocotb regression")
    modules = [m.strip() for m in str(payload.get("modules") or "").split(",") if m.strip()]
    if not modules:
        return CocotbRun(problem="the record names no test module")
    missing_src = [m for m in modules if m not in defined]
    if missing_src:
        return CocotbRun(problem=f"test module {missing_src[0]!r} is not one of the harness's files")
    if payload.get("testcase"):
        return CocotbRun(problem="cocotb ran with a test case selection the runner did not set")
    flt = str(payload.get("filter") or "")
    try:
        selected = re.compile(flt) if flt else None
    except re.error:
        return CocotbRun(problem="cocotb ran with an invalid test filter")

    cases: list[CocotbCase] = []
    seen: dict[tuple[str, str], int] = {}
    for t in payload["tests"]:
        if not isinstance(t, dict) or t.get("outcome") not in _OUTCOMES:
            return CocotbRun(problem="the record has a malformed test entry")
        name, module = str(t.get("name") or ""), str(t.get("module") or "")
        if module not in modules:
            return CocotbRun(
                problem=f"the record has test {name!r} from module {module!r}, which was not run"
            )
        if _base(name, defined[module]) is None:
            return CocotbRun(problem=f"the record has test {name!r}, which {module} does not define")
        seen[(module, name)] = seen.get((module, name), 0) + 1
        if seen[(module, name)] > 1:
            return CocotbRun(problem=f"the record lists test {name!r} twice")
        cases.append(CocotbCase(name=name, outcome=t["outcome"], message=str(t.get("message") or "")))
    for module in modules:
        got = {_base(n, defined[module]) for (m, n) in seen if m == module}
        want = set(defined[module].names) | set(defined[module].factories)
        if selected is not None:
            want = {w for w in want if selected.search(f"{module}.{w}")}
        if not want and not got:
            return CocotbRun(problem=f"{module} defines no cocotb test")
        lost = sorted(want - got)
        if lost:
            return CocotbRun(problem=f"the record lacks test {lost[0]!r} of {module} ({len(lost)} missing)")
    return CocotbRun(cases=tuple(cases))


def _base(name: str, tests: DefinedTests) -> str | None:
    """The defined test a recorded test name belongs to: itself, a parametrised variant (`name/x=1`), or a
    TestFactory product (`fn_001`, with the factory's prefix/postfix); None when it is none of these."""
    head = name.split("/", 1)[0]
    if head in tests.names:
        return head
    for fn in tests.factories:
        if re.fullmatch(rf"\w*{re.escape(fn)}\w*_\d+", head):
            return fn
    return None


def modules_of(
    files: Mapping[str, str], modules: Sequence[str], roots: Sequence[str] = ("",)
) -> dict[str, DefinedTests]:
    """{module: its tests} for dotted module names found among `files` ({relative path: text}): under one of
    `roots` (e.g. "src/" for CVDP), else the one file whose path ends with the module's path (a harness with its
    own PYTHONPATH below src/). A module missing, ambiguous or not parsing is left out (the check reports it)."""
    out: dict[str, DefinedTests] = {}
    for module in modules:
        rel = module.replace(".", "/") + ".py"
        text = next((files[f"{root}{rel}"] for root in roots if f"{root}{rel}" in files), None)
        if text is None:
            found = [p for p in files if p.endswith("/" + rel)]
            text = files[found[0]] if len(found) == 1 else None
        if text is None:
            continue
        try:
            out[module] = defined_tests(text)
        except SyntaxError:
            continue
    return out
