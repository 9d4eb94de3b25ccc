"""What the equivalence check compares: the two designs' files, the top module, its ports, clock and reset.

Everything here is read from the reference (and the task), never from the candidate, except the candidate's own
port list, which is only compared with the reference's. Port and module names end up in generated Yosys scripts
and testbenches, so only plain identifiers are accepted there (`IDENT_RE`); a design whose interface needs escaped
identifiers is compared by simulation with the names the testbench can spell, or not at all.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping

import attrs

from rtlreward.model import Port, Task
from rtlreward_hdl.files import HDL_EXTS, HEADER_EXTS, strip_comments
from rtlreward_hdl.slang import bounded_compilation, check_expansion

IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_EDGE_RE = re.compile(r"\b(posedge|negedge)\s*\(?\s*([A-Za-z_][A-Za-z0-9_$]*)")
_RESET_NAME_RE = re.compile(r"(?i)(rst|reset|clr|clear)")
# `always @(posedge clk or posedge ar) if (ar) ...`: the event signal the block tests first is an async reset,
# whatever its name.
_ASYNC_TESTED_RE = re.compile(
    r"@\s*\(\s*(?:posedge|negedge)\s+(\w+)\s*(?:or|,)\s*(?:posedge|negedge)\s+(\w+)\s*\)\s*"
    r"(?:begin\b\s*(?::\s*\w+)?)?\s*if\s*\(\s*[!~]?\s*(\w+)"
)
_CLOCK_NAME_RE = re.compile(r"(?i)(clk|clock)")
_INCLUDE_RE = re.compile(r'`include\b[ \t]*(?:"([^"\n]*)"|<([^>\n]*)>)?')
_MODULE_RE = re.compile(r"^[ \t]*(?:macromodule|module)\s+(?:(?:static|automatic)\s+)?([A-Za-z_]\w*)", re.M)


def is_hdl(path: str) -> bool:
    return path.lower().endswith(HDL_EXTS)


def is_header(path: str) -> bool:
    return path.lower().endswith(HEADER_EXTS)


def hdl_only(files: Mapping[str, str] | None) -> dict[str, str]:
    return {p: t for p, t in (files or {}).items() if is_hdl(p)}


def shared_context(task: Task) -> dict[str, str]:
    """HDL files of the task that both designs elaborate with (submodules, packages, headers), never testbench
    code: the task's `compile_sources` when it names them, else HDL files under `rtl/`; headers always."""
    context = hdl_only(task.context)
    answer = set(task.expected_files) | set(task.reference or {})
    chosen: dict[str, str] = {}
    for path, text in context.items():
        if path in answer:
            continue
        if is_header(path):
            chosen[path] = text
        elif task.compile_sources:
            if path in task.compile_sources:
                chosen[path] = text
        elif path.startswith("rtl/"):
            chosen[path] = text
    return chosen


def design_files(task: Task, answer: Mapping[str, str]) -> dict[str, str]:
    """One side of the comparison: the task's shared HDL with the answer's HDL files in place."""
    files = shared_context(task)
    files.update(hdl_only(answer))
    return files


def declared_modules(files: Mapping[str, str]) -> list[str]:
    names: list[str] = []
    for text in files.values():
        names += _MODULE_RE.findall(strip_comments(text))
    return list(dict.fromkeys(names))


def inline_includes(files: Mapping[str, str], rel: str, depth: int = 8) -> str:
    """`rel`'s text with each `include of a given file replaced by that file's text, and any other `include
    blanked: the parser never opens a file on disk."""
    text = files[rel]

    def resolve(target: str) -> str | None:
        base = posixpath.dirname(rel)
        for cand in (posixpath.normpath(posixpath.join(base, target)), posixpath.normpath(target)):
            if cand in files:
                return cand
        hits = [p for p in files if posixpath.basename(p) == posixpath.basename(target)]
        return hits[0] if len(hits) == 1 else None

    def repl(m: re.Match[str]) -> str:
        target = m.group(1) or m.group(2)
        hit = resolve(target) if target else None
        if hit is None or depth <= 0 or hit == rel:
            return " " * len(m.group(0))
        return inline_includes(files, hit, depth - 1)

    return _INCLUDE_RE.sub(repl, text)


@attrs.frozen
class PortInfo:
    name: str
    direction: str  # input | output | inout
    width: int | None
    simple: bool  # a packed vector or scalar (a testbench reg/wire can connect to it)

    def port(self) -> Port:
        return Port(self.name, self.direction, self.width)


def module_ports(files: Mapping[str, str], top: str) -> list[PortInfo] | None:
    """The ports of module `top` elaborated with default parameters (pyslang, from memory only); None when the
    files do not declare it or it cannot be elaborated. Raises rtlreward_hdl.slang.ExpansionTooLarge when their
    macros expand past what may be read in this process."""
    import pyslang

    units = {p: t for p, t in files.items() if not is_header(p)}
    if not units:
        return None
    check_expansion(
        files.values()
    )  # raises ExpansionTooLarge before pyslang expands anything in this process
    comp = bounded_compilation([top])
    sm = pyslang.SourceManager()
    sm.setDisableLocalIncludes(True)
    po = pyslang.parsing.PreprocessorOptions()
    po.maxIncludeDepth = 0
    bag = pyslang.Bag([po])
    for rel in units:
        text = inline_includes(files, rel)
        comp.addSyntaxTree(pyslang.syntax.SyntaxTree.fromText(text, sm, rel, "", bag))
    for inst in comp.getRoot().topInstances:
        body = inst.body
        if body.definition.name != top:
            continue
        ports = []
        for p in body.portList:
            if not getattr(p, "name", ""):
                continue
            d = str(getattr(p, "direction", "")).rsplit(".", 1)[-1]
            direction = {"In": "input", "Out": "output", "InOut": "inout"}.get(d, d.lower() or "interface")
            ty = getattr(p, "type", None)
            width: int | None = None
            simple = False
            try:
                if ty is not None and not ty.isError and ty.isIntegral:
                    width = int(ty.bitWidth)
                    simple = width > 0
            except Exception:
                width = None
            ports.append(PortInfo(p.name, direction, width if width and width > 0 else None, simple))
        return ports
    return None


def top_module(task: Task, reference: Mapping[str, str]) -> str | None:
    """The module both designs are compared at: the task's toplevel, else the interface's module, else the one
    module of the reference files that no other reference module instantiates."""
    for name in (task.toplevel, task.interface.module if task.interface else None):
        if name:
            return name
    declared = declared_modules(reference)
    if len(declared) == 1:
        return declared[0]
    text = _MODULE_RE.sub("", "\n".join(strip_comments(t) for t in reference.values()))
    roots = [m for m in declared if not re.search(rf"(?<![\w$]){re.escape(m)}\s*(#\s*\(|[A-Za-z_])", text)]
    if len(roots) == 1:
        return roots[0]
    stems = {posixpath.splitext(posixpath.basename(p))[0] for p in task.expected_files}
    named = [m for m in declared if m in stems]
    return named[0] if len(named) == 1 else None


@attrs.frozen
class Reset:
    name: str
    active_low: bool

    @property
    def active(self) -> int:
        return 0 if self.active_low else 1


@attrs.frozen
class Timing:
    clocks: tuple[str, ...]
    reset: Reset | None


def _reset_polarity(name: str, text: str) -> bool:
    """True when the reference treats `name` as active low."""
    n = re.escape(name)
    if re.search(rf"\bnegedge\s*\(?\s*{n}\b", text):
        return True
    if re.search(rf"\bposedge\s*\(?\s*{n}\b", text):
        return False
    if re.search(rf"\bif\s*\(\s*(?:!|~)\s*{n}\s*\)", text) or re.search(
        rf"\b{n}\s*===?\s*(?:1'b0|1'h0|'0|0)\b", text
    ):
        return True
    if re.search(rf"\bif\s*\(\s*{n}\s*\)", text) or re.search(rf"\b{n}\s*===?\s*(?:1'b1|1'h1|'1|1)\b", text):
        return False
    low = name.lower()
    return bool(re.search(r"(_n|n|_b|_ni|_l)$", low) or re.match(r"n_?(rst|reset)", low))


def infer_timing(
    ports: Iterable[PortInfo],
    reference: Mapping[str, str],
    *,
    clock: str | None = None,
    reset: str | None = None,
    reset_active_low: bool | None = None,
) -> Timing:
    """Clock(s) and reset from the reference: 1-bit inputs used as `posedge`/`negedge` events are clocks unless
    named like a reset; the reset is the input named like one (an event signal first), its polarity from how the
    reference uses it (`negedge rst_n`, `if (!rst_n)`), else from its name. Options override either."""
    text = "\n".join(strip_comments(t) for t in reference.values())
    inputs = [p for p in ports if p.direction == "input" and p.width == 1]
    names = {p.name for p in inputs}
    edges = list(dict.fromkeys(m.group(2) for m in _EDGE_RE.finditer(text) if m.group(2) in names))
    tested = {m.group(3) for m in _ASYNC_TESTED_RE.finditer(text) if m.group(3) in (m.group(1), m.group(2))}
    tested &= names

    def reset_like(n: str) -> bool:
        return n in tested or (bool(_RESET_NAME_RE.search(n)) and not _CLOCK_NAME_RE.search(n))

    if clock:
        clocks = tuple(c.strip() for c in clock.split(",") if c.strip())
    else:
        clocks = tuple(e for e in edges if not reset_like(e))
        if not clocks and edges:
            clocks = tuple(e for e in edges if _CLOCK_NAME_RE.search(e))
    if reset == "":
        return Timing(clocks, None)
    rst_name = reset
    if rst_name is None:
        like = [p.name for p in inputs if reset_like(p.name) and p.name not in clocks]
        in_edges = [n for n in like if n in tested] + [n for n in like if n in edges and n not in tested]
        used = [n for n in like if re.search(rf"\b{re.escape(n)}\b", text)]
        pick = in_edges or used or like
        rst_name = pick[0] if pick else None
    if rst_name is None:
        return Timing(clocks, None)
    low = _reset_polarity(rst_name, text) if reset_active_low is None else reset_active_low
    return Timing(clocks, Reset(rst_name, low))
