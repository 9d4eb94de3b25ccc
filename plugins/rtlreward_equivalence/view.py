"""One view of a design for every tool that judges it: the text Icarus simulates, as Yosys is to read it.

Yosys has a preprocessor of its own (it defines `YOSYS` and `SYNTHESIS`), honours comments Icarus ignores
(`// synopsys translate_off`, `full_case`, `parallel_case`) and attributes that change what it builds
(`(* blackbox *)`, `(* keep_hierarchy *)`, `(* parallel_case *)`). Each lets an answer show the proof one design
and the simulator another. So the proof never reads the answer's source: it reads Icarus's own preprocessed text
(`iverilog -E`, the program and defines every simulation of the answer runs), with every comment and attribute
blanked out and no directive left that a preprocessor could act on (`neutralise` refuses a text with one, or with a
backtick in a string or an escaped identifier), so Yosys's own preprocessor, which still runs (`read_verilog -nopp`
crashes libyosys 0.70), finds nothing to do. Newlines are
kept, so Yosys's line numbers are the preprocessed file's; `line_map` maps those to the answer's files.

Nothing here passes a tool's text on: `neutralise` returns the cleaned text and our own notes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import pyslang

_SYNTAX = pyslang.syntax
K = _SYNTAX.SyntaxKind
NODE = _SYNTAX.SyntaxNode

MAX_TEXT = 8 * 1024 * 1024  # a preprocessed text larger than this (a macro bomb) is not read

# Directives that may stay (Yosys's lexer reads them with -nopp and they change nothing a proof sees); every other
# directive in a preprocessed text means the preprocessor left something for a second one to act on.
KEEP_DIRECTIVES = frozenset({"default_nettype"})
DROP_DIRECTIVES = frozenset(
    {
        "timescale",
        "resetall",
        "celldefine",
        "endcelldefine",
        "unconnected_drive",
        "nounconnected_drive",
        "line",
        "begin_keywords",
        "end_keywords",
    }
)
# Comments that tell a synthesis tool to read the code differently from a simulator.
PRAGMA_RE = re.compile(
    r"\b(?:synopsys|synthesis|pragma|cadence|ambit|xilinx)\b|translate_(?:off|on)|(?:full|parallel)_case",
    re.I,
)
# Macros that name a tool: an answer that tests them shows each tool the branch it wants it to see.
TOOL_MACROS = frozenset(
    {
        "YOSYS",
        "SYNTHESIS",
        "VERILATOR",
        "verilator",
        "verilator3",
        "__ICARUS__",
        "IVERILOG",
        "FORMAL",
        "SIMULATION",
        "COCOTB_SIM",
        "XILINX_SIMULATOR",
        "MODEL_TECH",
        "VCS",
        "XCELIUM",
        "INCA",
        "RIVIERA",
        "SYNOPSYS",
    }
)
_TOOL_TEST_RE = re.compile(r"`(?:ifdef|ifndef|elsif)\s+([A-Za-z_]\w*)")

_TOKEN_RE = re.compile(
    r"""
     (?P<lc>//[^\n]*)
    |(?P<bc>/\*.*?(?:\*/|\Z))
    |(?P<str>"(?:\\[^\n]|[^"\\\n])*")
    |(?P<esc>\\[^\s]+)
    |(?P<event>\(\s*\*\s*\))
    |(?P<attr>\(\*.*?(?:\*\)|\Z))
    |(?P<dir>`[A-Za-z_][\w$]*)
    |(?P<other>[^/"\\(`]+|.)
    """,
    re.S | re.X,
)


@attrs.frozen
class Neutralised:
    text: str  # what Yosys reads (newlines where the preprocessed text had them)
    attributes: int = 0  # attributes blanked out
    pragmas: int = 0  # comments a synthesis tool would have acted on
    problem: str = ""  # why the text cannot be given to Yosys (a directive left behind); our words


def _blank(text: str) -> str:
    """`text` as spaces, its newlines kept."""
    return re.sub(r"[^\n]", " ", text)


def neutralise(text: str) -> Neutralised:
    """Blank out comments and attributes of a preprocessed text and drop harmless directives; refuse it when a
    directive a preprocessor would act on is left (a macro that expanded to one)."""
    out: list[str] = []
    attributes = pragmas = 0
    problem = ""
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        assert m is not None  # `.` matches anything but a newline, which `other` takes
        kind, tok = m.lastgroup, m.group(0)
        pos = m.end()
        if kind in ("lc", "bc"):
            if PRAGMA_RE.search(tok):
                pragmas += 1
            out.append(_blank(tok))
        elif kind == "attr":
            attributes += 1
            out.append(_blank(tok))
        elif kind == "dir":
            name = tok[1:]
            if name in KEEP_DIRECTIVES:
                out.append(tok)
            elif name in DROP_DIRECTIVES:
                # the rest of the directive's line goes too (`timescale 1ns/1ps, `line 3 "f" 0)
                end = text.find("\n", pos)
                end = len(text) if end < 0 else end
                out.append(_blank(tok + text[pos:end]))
                pos = end
            else:
                problem = problem or f"a compiler directive (`{name}) is left after preprocessing"
                out.append(tok)
        else:
            if kind in ("str", "esc") and "`" in tok:
                # Yosys runs its own preprocessor over what it reads: nothing in the text may look like a directive
                problem = problem or "a backtick inside a string or an escaped identifier"
            out.append(tok)
    return Neutralised("".join(out), attributes, pragmas, problem)


def tool_tests(text: str) -> list[str]:
    """The tool-naming macros a source text tests (`` `ifdef YOSYS``...), in order, once each."""
    found = [m.group(1) for m in _TOOL_TEST_RE.finditer(text) if m.group(1) in TOOL_MACROS]
    return list(dict.fromkeys(found))


def line_map(units: list[tuple[str, str]]) -> dict[int, tuple[str, int]] | None:
    """Line of `iverilog -E`'s output -> (file, line) of the unit it came from. The preprocessor writes the units
    one after another, a line for each line (a directive's line is left blank); an `include breaks that, so with
    one in sight there is no map (None) and messages keep the preprocessed line."""
    out: dict[int, tuple[str, int]] = {}
    n = 0
    for name, text in units:
        if "`include" in text:
            return None
        count = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        for k in range(1, count + 1):
            out[n + k] = (name, k)
        n += count
    return out


_XZ_LITERAL = re.compile(r"'[sS]?(?:[bBoOhH]\s*[0-9a-fA-F_]*[xXzZ?]|[dD]\s*[xXzZ?])|'[xXzZ]")


def _case_items_with_xz(nodes: list[Any]) -> bool:
    """Whether a plain `case` (not `casez`/`casex`) has an item holding an x or z literal. The simulator compares a
    `case` exactly (`===`: an x item matches an x selector); Yosys reads such an item as one no value matches."""
    case_kw = pyslang.parsing.TokenKind.CaseKeyword
    for node in nodes:
        if node.kind != K.CaseStatement or node.caseKeyword.kind != case_kw:
            continue
        for item in node.items:
            if item.kind == K.StandardCaseItem and any(_XZ_LITERAL.search(str(e)) for e in item.expressions):
                return True
    return False


# -- constructs the proof reads one way and the simulator another -------------------------------------------------
# Yosys reads a design as synthesis does: no delays, every register stepped by its clock once a frame, a
# combinational block evaluated whatever its sensitivity list says, clocked blocks updated at once. The simulator
# runs the text. An answer that differs only behind a rare trigger through one of these (third red-team pass) would
# be proved while the simulator shows it wrong, so such an answer gets no proof: the simulation decides.


def _walk(node: Any) -> list[Any]:
    out = []

    def v(n):
        if isinstance(n, NODE):
            out.append(n)

    node.visit(v)
    return out


def _occurrences(node: Any) -> list[tuple[str, Any]]:
    """(name, node) of every identifier use under `node`."""
    occ = []
    for n in _walk(node):
        if n.kind in (K.IdentifierName, K.IdentifierSelectName):
            occ.append((n.identifier.valueText, n))
    return occ


def _span(node: Any) -> tuple[int, int]:
    r = node.sourceRange
    return (r.start.offset, r.end.offset)


_COMPOUND = frozenset(
    getattr(K, k)
    for k in dir(K)
    if k.endswith("AssignmentExpression")
    and k not in ("AssignmentExpression", "NonblockingAssignmentExpression")
)
_ALWAYS = frozenset((K.AlwaysBlock, K.AlwaysCombBlock, K.AlwaysFFBlock, K.AlwaysLatchBlock))
# Where a function call is evaluated by the simulator only when its arguments change (outside clocked blocks).
_CALL_SITES = frozenset(
    (
        K.ContinuousAssign,
        K.AlwaysBlock,
        K.AlwaysCombBlock,
        K.AlwaysLatchBlock,
        K.NetDeclaration,
        K.NamedPortConnection,
        K.OrderedPortConnection,
    )
)
# System functions that write an argument: `$random(seed)` in a `$display` changed `seed` in the simulator only
# (the proof drops prints), a third red-team pass of 2026-11-29.
_SEEDED = frozenset({"$random", "$urandom"})
_WRITING_SYSTEM_CALLS = frozenset(
    {
        "$urandom_range",
        "$value$plusargs",
        "$sscanf",
        "$dist_uniform",
        "$dist_normal",
        "$dist_exponential",
        "$dist_poisson",
        "$dist_chi_square",
        "$dist_t",
        "$dist_erlang",
    }
)
_QUERIES = frozenset({"$size", "$dimensions", "$unpacked_dimensions", "$left", "$right", "$low", "$high", "$increment"})
_ARITHMETIC = frozenset(
    (
        K.AddExpression,
        K.SubtractExpression,
        K.MultiplyExpression,
        K.DivideExpression,
        K.ModExpression,
        K.PowerExpression,
        K.UnaryMinusExpression,
        K.LogicalShiftLeftExpression,
        K.LogicalShiftRightExpression,
        K.ArithmeticShiftLeftExpression,
        K.ArithmeticShiftRightExpression,
    )
)


def _untyped(decl: Any) -> bool:
    """A parameter declaration with no type and no range (`localparam K = ...`, `parameter signed S = ...`)."""
    t = getattr(decl, "type", None)
    return t is not None and t.kind == K.ImplicitType and len(t.dimensions) == 0


def _unpacked(nodes: list[Any]) -> set[str]:
    """Names declared with an unpacked dimension (`wire [7:0] b [0:3]`)."""
    return {
        d.name.valueText
        for d in nodes
        if d.kind == K.Declarator and any(isinstance(x, NODE) for x in getattr(d, "dimensions", ()))
    }


def _width_sensitive(expr: Any) -> bool:
    """Arithmetic on a sized literal, or a power: where an untyped parameter's width decides its value."""
    inner = _walk(expr)
    if not any(x.kind in _ARITHMETIC for x in inner):
        return False
    return any(x.kind in (K.IntegerVectorExpression, K.PowerExpression) for x in inner)


_CASE_EQUALITY = frozenset(
    (
        K.CaseEqualityExpression,
        K.CaseInequalityExpression,
        K.WildcardEqualityExpression,
        K.WildcardInequalityExpression,
    )
)
_STEPS = frozenset(
    (
        K.PostincrementExpression,
        K.PostdecrementExpression,
        K.UnaryPreincrementExpression,
        K.UnaryPredecrementExpression,
    )
)


def _writes(node: Any, *, blocking_only: bool = False) -> list[tuple[Any, Any]]:
    """(target identifier node, the writing expression) of every write under `node`: `=`, `<=` (unless
    `blocking_only`), compound assignments (`|=`...) and `++`/`--`, through concatenations on the left."""
    idents = (K.IdentifierName, K.IdentifierSelectName)
    return [(x, n) for x, n in _write_targets(node, blocking_only=blocking_only) if x.kind in idents]


def _write_targets(
    node: Any, *, blocking_only: bool = False, through_selects: bool = False
) -> list[tuple[Any, Any]]:
    """(target, the writing expression) of every write under `node`, through concatenations and parentheses on
    the left (and, `through_selects`, to the variable under an element select or a member access): an identifier,
    or whatever else the target is (a hierarchical name)."""
    out = []
    for n in _walk(node):
        nonblocking = n.kind == K.NonblockingAssignmentExpression
        if n.kind == K.AssignmentExpression or n.kind in _COMPOUND or (nonblocking and not blocking_only):
            roots = [n.left]
        elif n.kind in _STEPS:
            roots = [n.operand]
        else:
            continue
        while roots:
            x = roots.pop()
            if x.kind == K.ConcatenationExpression:
                roots.extend(e for e in x.expressions if isinstance(e, NODE))
            elif x.kind == K.ParenthesizedExpression:
                roots.append(x.expression)
            elif through_selects and x.kind in (K.ElementSelectExpression, K.MemberAccessExpression):
                roots.append(x.left)
            else:
                out.append((x, n))
    return out


def _root_name(target: Any) -> str:
    """The variable a write target names: `t` of `t`, `t[3]`, `t.v`, `t.v[1]` (the leftmost identifier of a
    scoped name); "" for anything else."""
    while target.kind == K.ScopedName:
        target = target.left
    if target.kind in (K.IdentifierName, K.IdentifierSelectName):
        return target.identifier.valueText
    return ""


def _reads_writes(body: Any) -> tuple[set[str], set[str]]:
    """Names `body` reads and names it writes (a compound write or `++` both)."""
    targets = {_span(x): w for x, w in _writes(body)}
    reads, writes = set(), set()
    for name, n in _occurrences(body):
        w = targets.get(_span(n))
        if w is None:
            reads.add(name)
            continue
        writes.add(name)
        if w.kind in _COMPOUND or w.kind in _STEPS:
            reads.add(name)
    return reads, writes


def _in_system_call(node: Any) -> bool:
    p = node.parent
    while p is not None and p.kind not in _ALWAYS:
        if p.kind == K.InvocationExpression and p.left.kind == K.SystemName:
            return True
        p = p.parent
    return False


def _read_before_write(body: Any, consts: set[str]) -> str:
    """A name a combinational block reads before its first write in the text (the simulator reads the old value:
    a block's own writes do not wake it; Yosys connects the new one)."""
    writes = _writes(body)
    targets = {_span(x): w for x, w in writes}
    inner = _walk(body)
    local = {d.name.valueText for d in inner if d.kind == K.Declarator}  # `for (int i = 0; ...)`...
    local |= {d.declarator.name.valueText for d in inner if d.kind == K.ForVariableDeclaration}
    first_write: dict[str, int] = {}
    for x, w in writes:
        name = x.identifier.valueText
        first_write[name] = min(first_write.get(name, 1 << 62), _span(w)[1])
    for name, n in _occurrences(body):
        w = targets.get(_span(n))
        if w is not None and w.kind not in _COMPOUND and w.kind not in _STEPS:
            continue  # the target of a plain write
        if name in first_write and name not in consts | local and _span(n)[0] < first_write[name]:
            if _in_system_call(n):  # `$bits(out)`: a query of the declaration, not a read of the value
                continue
            return name
    return ""


def _events(expr: Any) -> list[tuple[str | None, Any]]:
    """(edge keyword or None, expression) of each event of an event expression."""
    out = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if e.kind == K.BinaryEventExpression:
            stack += [e.left, e.right]
        elif e.kind == K.ParenthesizedEventExpression:
            stack.append(e.expr)
        elif e.kind == K.SignalEventExpression:
            edge = e.edge.valueText if e.edge and e.edge.valueText else None
            out.append((edge, e.expr))
        else:
            out.append((None, e))
    return out


def _mismatch(text: str, top: str | None) -> str:
    """See `simulation_mismatch`."""
    tree = _SYNTAX.SyntaxTree.fromText(text)
    nodes = _walk(tree.root)
    if _case_items_with_xz(nodes):
        return "a `case` item holding an x or z, which the simulator matches exactly (`===`) and the proof cannot"
    for n in nodes:
        # First red-team pass of 2026-11-29: Icarus applies a `defparam` over an instance's own `#(...)` and the last
        # of two, Yosys the other; and picks a generate `case` item that is x exactly (`===`, an x made by a
        # constant division by zero), where Yosys takes the `default`. Each chose a trigger-gated bug for the
        # simulator only, and the answer was proved.
        if n.kind == K.DefParam:
            return "a `defparam`: the simulator and the proof apply parameter overrides in different orders"
        if n.kind == K.CaseGenerate:
            return "a generate `case`: the simulator matches its items exactly (`===`, an x item too), the proof not"
        # Second pass of 2026-11-29: an undriven net or a z constant is z to the simulator and x to the proof, and
        # `u !== 1'bx` turned that into a definite value behind a trigger (proved, 1.0). Two VerilogEval references hold
        # `|state === 1'bx` (outputs x before reset); an answer that copies it is judged by simulation.
        # Fourth pass of 2026-11-29: Yosys's constant evaluator and Icarus's fold some constants differently (an
        # untyped `localparam K = 8'hFF + 8'h01` is 0 to Yosys, 0x100 to Icarus; a size cast of a constant; `$size`
        # of a vector, `$bits` of an unpacked array; a constant function whose `casez` selector holds x), and a
        # trigger-gated bug ANDed with a test of such a constant was proved while the simulator ran it.
        if n.kind == K.InvocationExpression and n.left.kind == K.SystemName:
            query = n.left.systemIdentifier.valueText
            arrays = query == "$bits" and {name for name, _ in _occurrences(n)} & _unpacked(nodes)
            if query in _QUERIES or arrays:  # `$bits` of a packed vector agrees (three VerilogEval references)
                return f"`{query}`, a query Yosys and the simulator may answer differently"
        called = n.kind == K.InvocationExpression and n.left.kind != K.SystemName and n.arguments is not None
        if called and _XZ_LITERAL.search(str(n.arguments)):
            return "a function called with an x or z constant, which Yosys and the simulator match differently"
        if n.kind == K.ParameterDeclaration and _untyped(n):
            for d in n.declarators:
                init = getattr(d, "initializer", None) if isinstance(d, NODE) else None
                if init is not None and _width_sensitive(init):
                    return (
                        f"`{d.name.valueText}`, a parameter of no declared width computed from sized constants: Yosys "
                        "and the simulator give it different widths and values"
                    )
        if n.kind in _CASE_EQUALITY:
            return (
                f"`{n.operatorToken.valueText}`, which tells z from x: the simulator keeps z (an undriven net, a z "
                "constant), the proof has only x"
            )
    for n in nodes:
        if n.kind in (K.DelayControl, K.Delay3, K.OneStepDelay, K.CycleDelay):
            return "a delay (`#`): the proof ignores it, the simulator waits"
    consts = set()
    for n in nodes:
        if n.kind in (K.ParameterDeclaration, K.TypeParameterDeclaration):
            for d in getattr(n, "declarators", []):
                if isinstance(d, NODE) and d.kind == K.Declarator:
                    consts.add(d.name.valueText)
        elif n.kind == K.GenvarDeclaration:
            for d in n.identifiers:
                if isinstance(d, NODE):
                    consts.add(str(d).strip().split("=")[0].strip())
        elif n.kind in (K.FunctionDeclaration, K.TaskDeclaration):
            consts.add(str(n.prototype.name).strip())
        elif n.kind == K.TypedefDeclaration:  # a type's name, not a signal
            consts.add(n.name.valueText)
    free = _subroutine_free_names(nodes, consts)
    impure = {name for name, names in free.items() if names}
    for n in nodes:
        # Anywhere but a clocked block (a net's declaration assignment, a port connection too: third pass of
        # 2026-11-29): the simulator re-evaluates the call only when its arguments change.
        if n.kind in _CALL_SITES and not (n.kind in _ALWAYS and _edge_block(n)) and not _inside_subroutine(n):
            called = sorted({name for name, _ in _occurrences(n)} & impure)
            if called and not _inside_edge_block(n):
                return (
                    f"a call of `{called[0]}`, which reads module signals besides its arguments, outside a clocked "
                    "block: the simulator re-evaluates it only when its arguments change"
                )
        if n.kind == K.DataDeclaration and not _inside_subroutine(n):
            for d in n.declarators:
                init = getattr(d, "initializer", None) if isinstance(d, NODE) else None
                if init is None:
                    continue
                names = {name for name, _ in _occurrences(init)}
                if names - consts or names & impure:  # a function reading a signal too (third pass)
                    return (
                        f"`{d.name.valueText}` initialised from a signal: the simulator assigns it once, at time 0, "
                        "the proof drives it"
                    )
        if n.kind in (K.CastExpression, K.SignedCastExpression):
            # a cast of a constant (`16'(8'hFF + 8'h01)`: Yosys folds it to 0, Icarus to 0x100); of a signal both agree
            operand = n.right if n.kind == K.CastExpression else n.inner
            if not {name for name, _ in _occurrences(operand)} - consts:
                return f"a cast of a constant (`{str(n).strip()[:40]}`), which Yosys and the simulator fold differently"
        if n.kind == K.InitialBlock:
            reads = _reads_writes(n)[0] - consts - {d.name.valueText for d in _walk(n) if d.kind == K.Declarator}
            if reads:
                return (
                    f"an `initial` block that reads `{sorted(reads)[0]}`: the simulator runs it once, at time 0, "
                    "the proof reads it as a constant start value"
                )
        if n.kind == K.InvocationExpression and n.left.kind == K.SystemName:
            task = n.left.systemIdentifier.valueText
            if task in _WRITING_SYSTEM_CALLS or (task in _SEEDED and n.arguments is not None):
                return (
                    f"`{task}` with an argument it writes: the simulator runs it (a print too), the proof does not"
                )
    modules = [n for n in nodes if n.kind == K.ModuleDeclaration]
    tasks = {str(n.prototype.name).strip() for n in nodes if n.kind == K.TaskDeclaration}
    for m in modules:
        # every block of the module, in generate blocks too
        members = [x for x in _walk(m) if x.kind in _ALWAYS or x.kind == K.ContinuousAssign]
        written = _written(m)
        why = _module_level(m, members, consts, tasks, written)
        if why:
            return why
        # variables only a declaration initialises never change: a block reading only them never runs (third pass)
        idle = consts | _frozen(m, written)
        for mem in members:
            if mem.kind not in _ALWAYS:
                continue
            if not _edge_block(mem):
                inner = (
                    mem.statement.statement
                    if mem.statement.kind == K.TimingControlStatement
                    else mem.statement
                )
                early = _read_before_write(inner, consts)
                if early:
                    return (
                        f"a combinational block that reads `{early}` before writing it: the simulator reads the old "
                        "value (a block's own writes do not wake it), the proof the new one"
                    )
            kw = mem.keyword.valueText
            st = mem.statement
            if kw != "always" or st.kind != K.TimingControlStatement:
                continue
            tc = st.timingControl
            body = st.statement
            reads, writes = _reads_writes(body)
            need = reads - writes - idle
            if tc.kind == K.ImplicitEventControl or (
                tc.kind == K.EventControlWithExpression
                and tc.expr.kind == K.ParenthesizedEventExpression
                and str(tc.expr).strip().replace(" ", "") == "(*)"
            ):
                if not need:
                    return "an `always @*` that reads no signal: the simulator never runs it, the proof drives it"
                continue
            if tc.kind != K.EventControlWithExpression:
                continue
            evs = _events(tc.expr)
            if any(e for e, _ in evs):
                continue
            listed = set()
            for _, e in evs:
                if e.kind != K.IdentifierName:
                    return f"a sensitivity list entry `{str(e).strip()[:40]}` that is not a plain signal name"
                listed.add(e.identifier.valueText)
            if need - listed:
                return (
                    f"a sensitivity list without `{sorted(need - listed)[0]}`, which the block reads: the simulator "
                    "runs it only on the listed signals"
                )
            if not need:
                # `always @(spare) fake = 1'b1;`: a decoy only the proof drives (second pass of 2026-11-29)
                return (
                    "a block with a sensitivity list that reads no signal: the simulator runs it only when a listed "
                    "signal changes, the proof drives it"
                )
        shared = _driven_ports(m) if top is not None and m.header.name.valueText != top else set()
        shared |= _connected(m)
        race = _race(members, free, shared)
        if race:
            return race
    return ""


def _written(module: Any) -> set[str]:
    """Names something in `module` may drive: its ports, the targets of its assignments (continuous and
    procedural, through selects and members) and what its instances are connected to."""
    out = _connected(module) | set(_ports(module))
    out |= {_root_name(x) for x, _ in _write_targets(module, through_selects=True)}  # `assign` targets too
    return out - {""}


def _frozen(module: Any, written: set[str]) -> set[str]:
    """Variables of `module` a declaration initialises and nothing writes (`written`: `_written(module)`)."""
    out = set()
    for n in _walk(module):
        if n.kind == K.DataDeclaration and not _inside_subroutine(n):
            for d in n.declarators:
                if isinstance(d, NODE) and getattr(d, "initializer", None) is not None:
                    out.add(d.name.valueText)
    return out - written


def _module_level(
    module: Any, members: list[Any], consts: set[str], tasks: set[str], written: set[str]
) -> str:
    """Third pass of 2026-11-29: a task called from a clocked block (its blocking writes race with the other
    blocks, which the race rule does not follow into it); a net nothing drives (z to the simulator, x to the
    proof: an `if` on it takes the `else` in the simulator, while the proof found a difference there only it
    sees)."""
    for mem in members:
        if mem.kind in _ALWAYS and _edge_block(mem):
            called = sorted({name for name, _ in _occurrences(mem)} & tasks)
            if called:
                return (
                    f"a call of the task `{called[0]}` from a clocked block: the simulator runs its writes in the "
                    "order of the blocks, the proof in one frame"
                )
    nets = set()
    for n in _walk(module):
        if n.kind == K.NetDeclaration:
            for d in n.declarators:
                if isinstance(d, NODE) and getattr(d, "initializer", None) is None:
                    nets.add(d.name.valueText)
    undriven = nets - written - consts
    if undriven:
        used = {name for name, _ in _occurrences(module)}
        read = sorted(undriven & used)
        if read:
            return (
                f"`{read[0]}`, a net nothing drives: z to the simulator (an `if` on it takes the `else`), x to the "
                "proof"
            )
    return ""


def _connected(module: Any) -> set[str]:
    """The names a module's instances connect to their ports (by name or position): the instance's clocked blocks
    read what it is given (the second red-team pass of 2026-11-29 fed a blocking write of the parent to a
    submodule's input)."""
    out: set[str] = set()
    for n in _walk(module):
        if n.kind in (K.NamedPortConnection, K.OrderedPortConnection):
            out.update(name for name, _ in _occurrences(n))
    return out


def _ports(module: Any) -> dict[str, str]:
    """A module's port names and their directions as written (`input a, b`: b is an input too; "" where the text
    gives none, an explicit ANSI port `.p(x)` included)."""
    out: dict[str, str] = {}
    direction = ""
    for n in _walk(module):
        if n.kind == K.ImplicitAnsiPort:
            d = getattr(n.header, "direction", None)
            direction = d.valueText if d is not None and d.valueText else direction
            out[n.declarator.name.valueText] = direction
        elif n.kind == K.PortDeclaration:
            d = getattr(n.header, "direction", None)
            for x in n.declarators:
                if isinstance(x, NODE):
                    out[x.name.valueText] = d.valueText if d is not None else ""
        elif n.kind == K.ExplicitAnsiPort:
            out[n.name.valueText] = ""
    return out


def _driven_ports(module: Any) -> set[str]:
    """The names of a module's output and inout ports (and of any port whose direction is not plainly written)."""
    return {name for name, direction in _ports(module).items() if direction != "input"}


def _function_side_effect(nodes: list[Any]) -> str:
    """A function that writes a variable it does not declare (a module signal, through a hierarchical name or
    not): the simulator runs the write only where it evaluates the call (not in the arm of a `?:` it does not
    take), the proof wherever the call appears (a red-team answer cleared a trigger's latch in an arm never
    taken, and was proved equal to the reference while the simulator kept it set)."""
    for fn in nodes:
        if fn.kind != K.FunctionDeclaration:
            continue
        name = str(fn.prototype.name).strip()
        declared = {d.name.valueText for d in _walk(fn) if d.kind == K.Declarator} | {name}
        for x, _ in _write_targets(fn, through_selects=True):
            if x.kind in (K.IdentifierName, K.IdentifierSelectName) and x.identifier.valueText in declared:
                continue
            return (
                f"a function `{name}` that writes `{str(x).strip()[:40]}`, which it does not declare: the "
                "simulator runs the write only where it evaluates the call, the proof wherever it appears"
            )
    return ""


def _static_local(nodes: list[Any]) -> str:
    """A variable of a function or task (a local, or a function's own result) read where no write of the whole
    variable surely came before it in the same call: Icarus keeps a function's or task's variables from one call to
    the next (static), Yosys starts each call afresh (x). A red-team answer set a local on a trigger and read it
    with `===` in later calls: Icarus inverted the output from then on, the proof saw x `===` 1 as false, always,
    and proved it. "Surely" is read coarsely: a whole-variable assignment at the body's top level, or a `for`
    loop's initialiser for its counter."""
    for fn in nodes:
        if fn.kind not in (K.FunctionDeclaration, K.TaskDeclaration):
            continue
        name = str(fn.prototype.name).strip()
        ports = set()
        if fn.prototype.portList is not None:
            ports |= {d.name.valueText for d in _walk(fn.prototype.portList) if d.kind == K.Declarator}
        body: list[Any] = []
        for item in fn.items:
            if item.kind == K.PortDeclaration:
                ports |= {d.name.valueText for d in _walk(item) if d.kind == K.Declarator}
            elif item.kind != K.DataDeclaration:
                body.append(item)
        local = {d.name.valueText for d in _walk(fn) if d.kind == K.Declarator} - ports
        local |= {name} if fn.kind == K.FunctionDeclaration else set()
        local -= {d.declarator.name.valueText for d in _walk(fn) if d.kind == K.ForVariableDeclaration}
        sure: set[str] = set()
        for st in body:
            read, sure = _surely(st, local, sure)
            if read:
                return _static_message(name, read)
    return ""


def _surely(st: Any, local: set[str], sure: set[str]) -> tuple[str, set[str]]:
    """(a local `st` reads before a sure write of it, the locals surely written after `st`): a whole-variable
    assignment; both arms of an `if` with an `else`; every item of a `case` with a `default`; a `for` loop's
    initialisers (its body may run no time)."""
    if st.kind == K.SequentialBlockStatement:
        for item in st.items:
            if item.kind == K.DataDeclaration:
                continue
            read, sure = _surely(item, local, sure)
            if read:
                return read, sure
        return "", sure
    if st.kind == K.ExpressionStatement and st.expr.kind in (
        K.AssignmentExpression,
        K.NonblockingAssignmentExpression,
    ):
        read = _early(st.expr, local, sure)
        left = st.expr.left
        if read:
            return read, sure
        if left.kind == K.IdentifierName:
            return "", sure | {left.identifier.valueText}
        parts = [e for e in left.expressions if isinstance(e, NODE)] if left.kind == K.ConcatenationExpression else []
        if parts and all(e.kind == K.IdentifierName for e in parts):  # `{b3, b2, b1, b0} = a;` writes each whole
            return "", sure | {e.identifier.valueText for e in parts}
        return read, sure
    if st.kind == K.ConditionalStatement:
        read = _early(st.predicate, local, sure)
        if read:
            return read, sure
        read, then = _surely(st.statement, local, sure)
        if read or st.elseClause is None:
            return read, sure
        read, other = _surely(st.elseClause.clause, local, sure)
        return read, then & other
    if st.kind == K.CaseStatement:
        read = _early(st.expr, local, sure)
        arms, default = [], False
        for item in st.items:
            read = read or "".join(_early(e, local, sure) for e in getattr(item, "expressions", ()) if isinstance(e, NODE))
            if read:
                return read, sure
            default = default or item.kind == K.DefaultCaseItem
            r, after = _surely(item.clause, local, sure)
            if r:
                return r, sure
            arms.append(after)
        return read, (set.intersection(*arms) if default and arms else sure)
    if st.kind == K.ForLoopStatement:
        after = set(sure)
        for init in st.initializers:
            if isinstance(init, NODE) and init.kind == K.AssignmentExpression:
                read = _early(init.right, local, after)
                if read:
                    return read, sure
                if init.left.kind == K.IdentifierName:
                    after.add(init.left.identifier.valueText)
        rest = [x for x in (st.stopExpr, *st.steps, st.statement) if isinstance(x, NODE)]
        for x in rest:
            read = _early(x, local, after) if x is not st.statement else _surely(x, local, after)[0]
            if read:
                return read, sure
        return "", after
    return _early(st, local, sure), sure


def _early(node: Any, local: set[str], sure: set[str]) -> str:
    """A local read under `node` that no sure write came before (a write's own target is not a read)."""
    targets = {_span(x) for x, w in _writes(node) if w.kind not in _COMPOUND and w.kind not in _STEPS}
    for n_name, n in _occurrences(node):
        if n_name not in local or n_name in sure or _span(n) in targets or _in_system_call(n):
            continue
        if n.parent is not None and n.parent.kind == K.InvocationExpression and _span(n.parent.left) == _span(n):
            continue  # a call of the function (a recursive one calls itself), not a read of its result
        return n_name
    return ""


def _static_message(subroutine: str, name: str) -> str:
    return (
        f"`{name}` read in `{subroutine}` before a write of it in the same call: the simulator keeps it from the "
        "last call, the proof starts each call afresh"
    )


def _subroutine_free_names(nodes: list[Any], consts: set[str]) -> dict[str, set[str]]:
    """Per function and task, the names its body reads or writes without declaring them (module signals)."""
    out: dict[str, set[str]] = {}
    for fn in nodes:
        if fn.kind not in (K.FunctionDeclaration, K.TaskDeclaration):
            continue
        name = str(fn.prototype.name).strip()
        declared = {d.name.valueText for d in _walk(fn) if d.kind == K.Declarator}
        used = {n for n, _ in _occurrences(fn)}
        out[name] = used - declared - consts - {name}
    return out


def _inside(node: Any, around: Callable[[Any], bool]) -> bool:
    """Whether a node enclosing `node` is one `around` accepts."""
    p = node.parent
    while p is not None:
        if around(p):
            return True
        p = p.parent
    return False


def _inside_subroutine(node: Any) -> bool:
    return _inside(node, lambda p: p.kind in (K.FunctionDeclaration, K.TaskDeclaration))


def _inside_edge_block(node: Any) -> bool:
    return _inside(node, lambda p: p.kind in _ALWAYS and _edge_block(p))


def _inside_loop_generate(node: Any) -> bool:
    return _inside(node, lambda p: p.kind == K.LoopGenerate)


def _edge_block(mem: Any) -> bool:
    if mem.kind not in _ALWAYS or mem.statement.kind != K.TimingControlStatement:
        return False
    tc = mem.statement.timingControl
    return tc.kind == K.EventControlWithExpression and any(e for e, _ in _events(tc.expr))


def _race(members: list[Any], free: dict[str, set[str]], shared: set[str]) -> str:
    """A variable written with a blocking assignment in one edge-triggered block and read, directly, through
    combinational logic or through a function or task, by another edge-triggered block, or reaching `shared` (the
    ports of a module the design instantiates, whose clocked blocks read them, and the names connected to an
    instance's ports: the first and second red-team passes of 2026-11-29): the simulator's order of the two blocks
    decides. A write to a member or an element (`t.v = d`, `t[i] = d`) is a write of the variable."""
    edge = [m for m in members if _edge_block(m)]
    comb = [m for m in members if (m.kind == K.ContinuousAssign or m.kind in _ALWAYS) and not _edge_block(m)]
    comb_rw = [_reads_writes(m) for m in comb]

    def reads(block: Any) -> set[str]:
        direct = _reads_writes(block)[0]
        return direct.union(*(free[n] for n in direct if n in free))

    edge_reads = [reads(m) for m in edge]
    for w in edge:
        targets = _write_targets(w, blocking_only=True, through_selects=True)
        reached = {_root_name(x) for x, _ in targets} - {""}
        if not reached:
            continue
        grew = True
        while grew:
            grew = False
            for comb_reads, comb_writes in comb_rw:
                if comb_reads & reached and not comb_writes <= reached:
                    reached |= comb_writes
                    grew = True
        for other, other_reads in zip(edge, edge_reads, strict=True):
            # a block a generate loop replicates is several blocks (third pass of 2026-11-29)
            if (other is not w or _inside_loop_generate(w)) and other_reads & reached:
                return (
                    f"`{sorted(reached)[0]}`, written with a blocking assignment in one clocked block, is read by "
                    "another: the simulator's order of the two decides"
                )
        if reached & shared:
            return (
                f"`{sorted(reached & shared)[0]}`, written with a blocking assignment in a clocked block and shared "
                "with another module (an output of an instantiated module, or connected to an instance's port): the "
                "simulator's order of that block and the other module's clocked blocks decides"
            )
    return ""


# System tasks that only print (Icarus runs them and goes on): the proof drops their statements (`without_prints`).
PRINT_TASKS = frozenset(
    f"${base}{suffix}"
    for base in ("display", "write", "strobe", "monitor")
    for suffix in ("", "b", "h", "o")
) | {"$info", "$warning", "$error"}


def without_prints(text: str) -> str:
    """`text` with every procedural statement that calls a print task (`PRINT_TASKS`) blanked to `;`, line for
    line: Yosys cannot read every format Icarus prints (`%p`, too few arguments) nor the SystemVerilog severity
    tasks, and a formal step that fails on a debug print paid a correct answer as undecided and bought a wrong one
    that share. Only statements whose arguments write nothing (no assignment, no `++`): a print changes no state
    (a function called in it writes none: `function_side_effect` refuses such an answer first). Text that does not
    parse is returned as it is."""
    try:
        nodes = _walk(_SYNTAX.SyntaxTree.fromText(text).root)
    except Exception:  # pyslang's own limits: Yosys reads the text as it is
        return text
    spans = []
    for n in nodes:
        if n.kind != K.ExpressionStatement or n.expr.kind != K.InvocationExpression:
            continue
        callee = n.expr.left
        if callee.kind != K.SystemName or callee.systemIdentifier.valueText not in PRINT_TASKS:
            continue
        if any(x.kind in _STEPS or x.kind in _COMPOUND or x.kind == K.AssignmentExpression for x in _walk(n.expr)):
            continue
        start, end = _span(n)
        if text[start : start + 1] == "$" and text[end - 1 : end] == ";":
            spans.append((start, end))
    out, pos = [], 0
    for start, end in sorted(spans):
        if start < pos:
            continue
        out += [text[pos:start], ";", _blank(text[start + 1 : end])]
        pos = end
    return "".join(out) + text[pos:]


def subroutine_state(text: str) -> str:
    """Why `text` holds a function or task the simulator runs with state the proof does not have: a function that
    writes a variable it does not declare (`_function_side_effect`), a variable of a function or task read before
    a sure write in the same call (`_static_local`); or ""."""
    try:
        nodes = _walk(_SYNTAX.SyntaxTree.fromText(text).root)
        return _function_side_effect(nodes) or _static_local(nodes)
    except Exception:  # text these rules cannot read: the proof's own checks decide
        return ""


def simulation_mismatch(text: str, top: str | None = None) -> str:
    """Why `text` holds a construct the proof reads otherwise than the simulator runs, or "" when it holds none:
    x or z `case` items and case equality (`===`: z against x), delays, `defparam`, a generate `case`, constants
    the two fold differently (an untyped parameter of sized constants, a cast of a constant, size queries, a
    function called with x), combinational blocks that read nothing, miss a signal in their list or read a variable
    before writing it, blocking writes one clocked block makes and another (a generate copy of it, a task it calls,
    a module it shares the name with: an output of a module other than `top`, an instance connection) reads,
    impure calls outside clocked blocks, initialisers and `initial` blocks that read signals, system calls that
    write their argument, and nets nothing drives. Each is a red-team answer that was proved while the simulator
    ran a bug (docs/equivalence.md, *Semantics*). Text that does not parse as expected counts as such a construct."""
    try:
        return _mismatch(text, top)
    except Exception:  # hostile text read in a shape these rules do not expect: no proof, not a crash
        return "a design this check cannot read"


# -- clocks as the elaborated design receives them ------------------------------------------------------------------
# The syntax rules above read names: an edge of `clk` passed wherever the module's text said `clk`. The first
# red-team pass of 2026-11-29 gated the clock into a submodule whose port is called `clk`, or into a generate
# block's own `wire clk`, and mixed the clock's two edges: the proof steps every register once a frame whatever
# drives its clock, the simulator skipped the edge on a trigger no random run draws, and both answers were proved
# (1.0). So the edges are read on the elaborated design (pyslang: generate blocks, parameters and port connections
# resolved), where each names the object it waits on.

_EDGE_NAMES = {
    pyslang.ast.EdgeKind.PosEdge: ("posedge",),
    pyslang.ast.EdgeKind.NegEdge: ("negedge",),
    pyslang.ast.EdgeKind.BothEdges: ("posedge", "negedge"),
}


def clock_edges(
    text: str, top: str, clocks: Iterable[str], resets: Iterable[str]
) -> tuple[str, frozenset[str]]:
    """(why a proof of `text` would not bind what the simulator runs, or ""; the edges of the clocks it waits on).

    Elaborated under `top`: every edge event must wait on one of `clocks` or `resets` as `top` receives it, the port
    itself or, in a module `top` instantiates, an input port that every instance connects to such a signal by name
    (no logic, no select, no alias in between), with no `iff` condition; and no design reads a signal of another
    instance by a hierarchical name (`u.t`: the simulator's order of the two modules' blocks decides what it reads).
    An edge of a reset must sit in an event list beside an edge of a clock (an asynchronous reset), never alone.
    The edges (`posedge`, `negedge`) the design takes of `clocks` come back for the caller to compare with the
    reference's: the proof steps a register on either edge once a frame."""
    from rtlreward_hdl.slang import bounded_compilation

    comp = bounded_compilation([top])
    comp.addSyntaxTree(_SYNTAX.SyntaxTree.fromText(text))
    inst = next((i for i in comp.getRoot().topInstances if i.name == top), None)
    if inst is None:
        return f"no module `{top}` that elaborates", frozenset()
    clock_names = set(clocks)
    names = clock_names | set(resets)
    # hierarchical path of a port's own symbol -> the top's clock or reset it carries
    carries: dict[str, str] = {}
    for port in inst.body.portList:
        sym = getattr(port, "internalSymbol", None)
        if port.name in names and sym is not None and port.direction == pyslang.ast.ArgumentDirection.In:
            carries[sym.hierarchicalPath] = port.name
    found: list[str] = []
    edges: set[str] = set()

    def connections(x: Any) -> bool:
        # pre-order: an instance's connections are read before anything inside it
        if isinstance(x, pyslang.ast.InstanceSymbol) and x is not inst:
            for pc in x.portConnections:
                ex, sym = pc.expression, getattr(pc.port, "internalSymbol", None)
                if (
                    sym is not None
                    and pc.port.direction == pyslang.ast.ArgumentDirection.In
                    and ex is not None
                    and ex.kind == pyslang.ast.ExpressionKind.NamedValue
                    and ex.symbol.hierarchicalPath in carries
                ):
                    carries[sym.hierarchicalPath] = carries[ex.symbol.hierarchicalPath]
        return True

    def carried(ev: Any) -> str | None:
        ex = ev.expr
        if ev.iffCondition is not None or ex.kind != pyslang.ast.ExpressionKind.NamedValue:
            return None
        return carries.get(ex.symbol.hierarchicalPath)

    in_lists: set[int] = set()  # the events of a list that takes a clock edge, as their source offsets

    def events(x: Any) -> bool:
        if found:
            return False
        if isinstance(x, pyslang.ast.Expression) and x.kind == pyslang.ast.ExpressionKind.HierarchicalValue:
            found.append(
                f"a hierarchical reference (`{str(x.syntax).strip()[:40]}`): the simulator's order of the blocks "
                "of two modules decides what it reads, the proof's one frame does not"
            )
        elif isinstance(x, pyslang.ast.EventListControl):
            # pre-order: the list is seen just before its events
            members = [e for e in x.events if isinstance(e, pyslang.ast.SignalEventControl)]
            if any(e.edge in _EDGE_NAMES and carried(e) in clock_names for e in members):
                in_lists.update(e.sourceRange.start.offset for e in members)
        elif isinstance(x, pyslang.ast.SignalEventControl) and x.edge in _EDGE_NAMES:
            name = carried(x)
            beside_clock = x.sourceRange.start.offset in in_lists
            in_lists.discard(x.sourceRange.start.offset)
            what = str(x.syntax).strip()[:60] if x.syntax is not None else "an edge"
            if name is None:
                found.append(
                    f"an edge (`{what}`) of a signal that is not the reference's clock or reset as the top module "
                    "receives it (a gated, derived or renamed clock, a port connected to logic, an `iff`): the proof "
                    "steps every register on its one clock"
                )
            elif name in clock_names:
                edges.update(_EDGE_NAMES[x.edge])
            elif not beside_clock:
                found.append(
                    f"an edge of the reset (`{what}`) with no edge of the clock beside it: the proof steps a register "
                    "clocked by it every frame, the simulator only when the reset changes"
                )
        return True

    inst.visit(connections)
    inst.visit(events)
    return (found[0] if found else ""), frozenset(edges)
