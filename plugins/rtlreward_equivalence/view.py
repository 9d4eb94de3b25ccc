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

import attrs

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


def case_items_with_xz(text: str) -> bool:
    """Whether a plain `case` (not `casez`/`casex`) of `text` has an item holding an x or z literal. The simulator
    compares a `case` exactly (`===`: an x item matches an x selector); Yosys reads such an item as one no value
    matches, so a proof of the text would not bind what the simulator runs."""
    import pyslang

    syntax = pyslang.syntax
    case_kw = pyslang.parsing.TokenKind.CaseKeyword
    found = False

    def visit(node: object) -> None:
        nonlocal found
        if found or node.kind != syntax.SyntaxKind.CaseStatement or node.caseKeyword.kind != case_kw:
            return
        for item in node.items:
            if item.kind == syntax.SyntaxKind.StandardCaseItem and any(
                _XZ_LITERAL.search(str(e)) for e in item.expressions
            ):
                found = True
                return

    syntax.SyntaxTree.fromText(text).root.visit(visit)
    return found
