"""The interface a task expects, derived from the best source it has: `task.interface`; the reference solution's
module `task.toplevel`; a module header in the spec's code blocks (or VerilogEval-style prose); the `dut.<name>`
signals the harness's cocotb tests touch. The interface stage compares answers against it; dataset loaders (CVDP)
fill `Task.interface` with it."""

from __future__ import annotations

import posixpath
import re
from collections import OrderedDict
from collections.abc import Mapping

import attrs

from rtlreward.model import Interface, Port, Task, hash_json
from rtlreward_hdl.files import HDL_EXTS, toplevel
from rtlreward_hdl.slang import (
    declared_modules,
    find_fenced_blocks,
    header_only_module,
    module_infos,
    parse_modules,
)

__all__ = [
    "UNKNOWN",
    "context_modules",
    "expected_interface",
    "harness_signals",
    "hdl_files",
    "task_headers",
]

UNKNOWN = "unknown"  # direction of a port known only by name (from the harness)
_DUT_RE = re.compile(r"\bdut\s*\.\s*([A-Za-z]\w*)")
_DUT_ITEM_RE = re.compile(
    r"""\bdut\s*\[\s*["']([A-Za-z_]\w*)["']\s*\]|getattr\(\s*dut\s*,\s*["']([A-Za-z_]\w*)["']"""
)
# Attributes of a cocotb handle, not signals.
_HANDLE_ATTRS = {
    "value",
    "name",
    "path",
    "log",
    "setimmediatevalue",
    "get_definition_name",
    "get_definition_file",
}

_CACHE: OrderedDict[str, Interface | None] = OrderedDict()
_CACHE_SIZE = 512


def hdl_files(files: Mapping[str, str] | None) -> dict[str, str]:
    return {p: t for p, t in (files or {}).items() if p.lower().endswith(HDL_EXTS)}


def task_headers(task: Task) -> dict[str, str]:
    headers = hdl_files(task.context)
    if task.harness is not None:
        headers.update(hdl_files(task.harness.files))
    return headers


def _pick(modules: Mapping[str, Interface], task: Task) -> Interface | None:
    top = toplevel(task)
    if top:
        return modules.get(top)
    if len(modules) == 1:
        return next(iter(modules.values()))
    stems = {posixpath.splitext(posixpath.basename(p))[0] for p in task.expected_files}
    named = [m for name, m in modules.items() if name in stems]
    return named[0] if len(named) == 1 else None


def _py_dut_names(text: str) -> list[str]:
    """`dut.x`, `dut["x"]` and `getattr(dut, "x")` in Python source, read from its tokens so that comments and
    strings (`# drive dut.Clk`) do not count."""
    import io
    import tokenize

    try:
        toks = [
            t
            for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type
            not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
        ]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        text = re.sub(r"#[^\n]*", "", text)
        return [m.group(1) for m in _DUT_RE.finditer(text)] + [a or b for a, b in _DUT_ITEM_RE.findall(text)]
    names: list[str] = []

    def literal(tok: tokenize.TokenInfo) -> str | None:
        if tok.type != tokenize.STRING:
            return None
        m = re.fullmatch(r"""[rRbBuU]?(["'])([A-Za-z_]\w*)\1""", tok.string)
        return m.group(2) if m else None

    for i, t in enumerate(toks):
        if t.type != tokenize.NAME or t.string != "dut":
            continue
        nxt = toks[i + 1 : i + 4]
        if len(nxt) >= 2 and nxt[0].string == "." and nxt[1].type == tokenize.NAME:
            names.append(nxt[1].string)
        elif len(nxt) >= 3 and nxt[0].string == "[" and literal(nxt[1]) and nxt[2].string == "]":
            names.append(literal(nxt[1]))
        prev = toks[max(0, i - 2) : i]
        is_getattr = len(prev) == 2 and prev[0].string == "getattr" and prev[1].string == "("
        if is_getattr and len(nxt) >= 2 and nxt[0].string == "," and literal(nxt[1]):
            names.append(literal(nxt[1]))
    return names


def _test_modules(task: Task) -> list[str]:
    """The harness's cocotb test modules: MODULE from the harness options or its .env when known, else files
    named like tests. Helper libraries (`harness_library.py`) hold generic code for many designs, so they are
    read only when nothing else is found."""
    assert task.harness is not None
    py = sorted(p for p in task.harness.files if p.endswith(".py"))
    module = task.harness.options.get("module") or task.harness.options.get("MODULE")
    if not module:
        for path, text in task.harness.files.items():
            if posixpath.basename(path) == ".env":
                for line in text.splitlines():
                    key, _, value = line.partition("=")
                    if key.strip() == "MODULE":
                        module = value.strip()
    if module:
        wanted = {m.strip() + ".py" for m in str(module).split(",") if m.strip()}
        hits = [p for p in py if posixpath.basename(p) in wanted]
        if hits:
            return hits
    tests = [p for p in py if re.match(r"(test_.*|.*_test)\.py$", posixpath.basename(p))]
    tests = [p for p in tests if posixpath.basename(p) != "test_runner.py"]
    return tests or py


def harness_signals(task: Task) -> list[str]:
    """The names the harness's cocotb tests touch on the DUT (`dut.x`, `dut["x"]`, `getattr(dut, "x")`)."""
    if task.harness is None:
        return []
    names: list[str] = []
    for path in _test_modules(task):
        names += _py_dut_names(task.harness.files[path])
    return [n for n in dict.fromkeys(names) if n not in _HANDLE_ATTRS and not n.startswith("_")]


def _from_reference(task: Task) -> Interface | None:
    ref = hdl_files(task.reference)
    if not ref:
        return None
    modules = parse_modules(ref, task_headers(task))
    found = _pick(modules, task)
    if found is None and len(modules) == 1 and toplevel(task) in context_modules(task):
        # The toplevel is one of the task's own files and the answer is a submodule: check the submodule.
        found = next(iter(modules.values()))
    return attrs.evolve(found, source="reference") if found else None


def context_modules(task: Task) -> set[str]:
    return {m for text in hdl_files(task.context).values() for m in declared_modules(text)}


def _from_spec(task: Task) -> tuple[Interface, frozenset[str]] | None:
    """The spec's module header and every name it declares (ports and parameters)."""
    # The prompt, and the specification documents an agentic task ships in its context (docs/*.md).
    texts = [task.prompt or ""] + [
        t for p, t in sorted(task.context.items()) if p.lower().endswith((".md", ".txt"))
    ]
    blocks = [block for text in texts if text for block in find_fenced_blocks(text)]
    if not blocks:
        return None
    headers = task_headers(task)
    modules: dict[str, Interface] = {}
    names: dict[str, frozenset[str]] = {}
    for i, (_lang, body) in enumerate(blocks):
        if not declared_modules(body):
            continue
        infos, _ = module_infos({f"spec_block_{i}.sv": header_only_module(body)}, headers)
        for name, info in infos.items():
            if info.interface.ports and name not in modules:
                modules[name] = info.interface
                names[name] = info.members
    found = _pick(modules, task)
    return (attrs.evolve(found, source="spec"), names[found.module]) if found else None


_PROSE_MODULE_RE = re.compile(r"\bmodule\s+(?:named|called)\s+`?([A-Za-z_]\w*)`?")
_PROSE_PORT_RE = re.compile(
    r"^[ \t]*[-*][ \t]+(input|output|inout)[ \t]+(?:(?:wire|reg|logic)[ \t]+)?`?([A-Za-z_]\w*)`?[ \t]*,?"
    r"(?:[ \t]*\([ \t]*(\d+)[ \t]*bits?[ \t]*\))?",
    re.M,
)


def _from_prose(task: Task) -> Interface | None:
    """VerilogEval-style specs: "implement a module named TopModule with the following interface. All input
    and output ports are one bit unless otherwise specified." followed by `- input in (8 bits)` lines."""
    m = _PROSE_MODULE_RE.search(task.prompt or "")
    top = toplevel(task)
    if not m or (top and m.group(1) != top):
        return None
    default = 1 if re.search(r"one\s+bit\s+unless\s+otherwise\s+specified", task.prompt, re.I) else None
    ports = [
        Port(name, direction, int(width) if width else default)
        for direction, name, width in _PROSE_PORT_RE.findall(task.prompt[m.end() :])
    ]
    ports = list({p.name: p for p in ports}.values())
    return Interface(module=m.group(1), ports=tuple(ports), source="spec") if ports else None


def _from_harness(task: Task) -> Interface | None:
    top = toplevel(task)
    names = harness_signals(task)
    if not top or not names:
        return None
    return Interface(module=top, ports=tuple(Port(n, UNKNOWN, None) for n in names), source="harness")


def expected_interface(task: Task) -> Interface | None:
    """The interface the task expects, from the best source it has (see the module docstring); None if none.
    Cached by the content it is derived from, since a batch scores many candidates of one task."""
    if task.interface is not None:
        return task.interface if task.interface.source else attrs.evolve(task.interface, source="task")
    key = hash_json(
        {
            "top": toplevel(task),
            "ref": task.reference,
            "prompt": task.prompt,
            "expected": list(task.expected_files),
            "context": hdl_files(task.context),
            "harness": task.harness.files if task.harness else None,
        }
    )
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    result = _from_reference(task)
    if result is None:
        spec, harness = _from_spec(task), _from_harness(task)
        if spec is None and (prose := _from_prose(task)) is not None:
            spec = (prose, frozenset(p.name for p in prose.ports))
        result = spec[0] if spec else harness
        # Specs are sometimes out of step with their own harness (a port renamed in one, not the other). The
        # harness is the judge: when it touches names the spec never declares, check the harness's names, with
        # the spec's direction and width where the two agree.
        if (
            spec
            and harness
            and spec[0].module == harness.module
            and not {p.name for p in harness.ports} <= spec[1]
        ):
            by_name = {p.name: p for p in spec[0].ports}
            ports = tuple(by_name.get(p.name, p) for p in harness.ports)
            result = Interface(module=harness.module, ports=ports, source="spec+harness")
    _CACHE[key] = result
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return result
