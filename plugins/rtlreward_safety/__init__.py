"""The `safety` stage: a gate that decides on what the simulators will see, by allow-list.

Simulators execute what the source asks: Verilator runs `$system`, `$c(...)`, `` `systemc_*`` C++ blocks and DPI
imports; Icarus and Verilator open any path with `$fopen`/`$fopenw`/`$readmemh`; `` `include "/etc/passwd"``
makes tools quote the file in their errors. And the preprocessor can build any of these names (`` `define N
fgets`` then `` $`N(...)``), so a scan of the text as written is not enough. The sandbox limits the damage;
this gate keeps such answers from running at all and tells the model which construct, file and line to remove.

In order:
1. includes: each `` `include`` must name one of the task's or the answer's files (also when pasted together
   or named by a macro); otherwise the answer is refused here and no preprocessor ever runs.
2. what the tools see: Icarus' and Verilator's own preprocessors over the answer with the task's files
   available to `` `include`` (`rtlreward_hdl.preprocess`), each output read as the tools' lexers read it
   (comments, strings and escaped identifiers skipped) and mapped back to the answer's file and line.
3. every `ifdef branch: the answer's text as written, for branches only a harness's own defines select, and
   for constructs that let a preprocessor build a name (`$` next to a macro or ` `` `, a lone `$`, ...).
4. the allow-list below: every other system task or function, a directive Verilator hands to C++, and DPI
   `import`/`export` are refused. `$readmemh`/`$readmemb` need a string literal naming a task or answer file;
   `$dumpfile` a relative waveform file name outside `_rtlreward*` folders.
If a preprocessor fails (an undefined macro, a time limit), nothing passes unchecked: token pasting and escaped
identifiers holding a macro are refused as well, and an info diagnostic says which reading failed.

Diagnostics hold our words, a construct, a file and a line: never a tool's output, never text of a file that
is not the answer's own (a construct from an included task file is reported at the answer's `include line).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import attrs

from rtlreward import hookimpl
from rtlreward.model import Diagnostic, StageResult, Status, Task
from rtlreward.stage import Stage, StageContext
from rtlreward_hdl.files import HDL_EXTS, compile_sources, strip_comments
from rtlreward_hdl.icarus import iverilog_version
from rtlreward_hdl.preprocess import (
    C_NAMES,
    ENV_NAMES,
    FILE_NAMES,
    KNOWN_DIRECTIVES,
    SOURCE,
    SYSTEM_NAMES,
    Scan,
    SystemUse,
    include_problems,
    scan,
    shown_name,
    source_uses,
)
from rtlreward_hdl.slang import resolve_include
from rtlreward_hdl.verilator import verilator_version

__all__ = ["ALLOWED_DIRECTIVES", "ALLOWED_SYSTEM_NAMES", "Finding", "SafetyStage", "scan_files"]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# What a synthesizable design and a normal testbench need. Anything else is refused.
ALLOWED_SYSTEM_NAMES = _words(
    """
    $display $displayb $displayh $displayo $write $writeb $writeh $writeo $strobe $strobeb $strobeh $strobeo
    $monitor $monitorb $monitorh $monitoro $monitoron $monitoroff
    $finish $stop
    $time $stime $realtime $timeformat $printtimescale
    $random $urandom $urandom_range $dist_uniform $dist_normal $dist_exponential $dist_poisson
    $dist_chi_square $dist_t $dist_erlang
    $signed $unsigned $cast $typename $isunbounded
    $clog2 $bits $size $left $right $low $high $increment $dimensions $unpacked_dimensions
    $countones $onehot $onehot0 $isunknown $countbits
    $ln $log10 $exp $sqrt $pow $floor $ceil $sin $cos $tan $asin $acos $atan $atan2 $hypot $sinh $cosh $tanh
    $asinh $acosh $atanh $itor $rtoi $bitstoreal $realtobits $shortrealtobits $bitstoshortreal
    $sformat $sformatf $swrite $swriteb $swriteh $swriteo $sscanf
    $error $warning $info $fatal
    $asserton $assertoff $assertkill $assertcontrol $assertpasson $assertpassoff $assertfailon $assertfailoff
    $assertnonvacuouson $assertvacuousoff
    $past $rose $fell $stable $changed $sampled $past_gclk $rose_gclk $fell_gclk $stable_gclk $changed_gclk
    $future_gclk $rising_gclk $falling_gclk $steady_gclk $changing_gclk $global_clock $inferred_clock
    $inferred_disable
    $dumpvars $dumpon $dumpoff $dumpall $dumpflush $dumplimit
    $readmemh $readmemb $dumpfile
    $test$plusargs $value$plusargs
    $root $unit
    """
)
_READMEM = frozenset({"$readmemh", "$readmemb"})
# Directives a preprocessor leaves for the parser that a design may use.
ALLOWED_DIRECTIVES = _words(
    """
    `timescale `default_nettype `resetall `celldefine `endcelldefine `unconnected_drive `nounconnected_drive
    `pragma `begin_keywords `end_keywords `default_decay_time `default_trireg_strength
    `delay_mode_distributed `delay_mode_path `delay_mode_unit `delay_mode_zero
    """
)
WAVE_EXTS = (".vcd", ".fst", ".lxt", ".lxt2", ".lx2", ".vpd", ".fsdb", ".ghw", ".evcd")

_INCLUDE_RE = re.compile(r'`include\b[ \t]*(?:"([^"\n]*)"|<([^>\n]*)>)')


@attrs.frozen
class Finding:
    code: str
    construct: str
    file: str | None
    line: int | None
    why: str
    severity: str = "error"

    def diagnostic(self) -> Diagnostic:
        # The construct (`$fopen`, `` `include "x" ``) as a field: a report counts refusals by construct without
        # parsing the message; the results row's code is `safety.<category>` (rtlreward.codes).
        fields = {"construct": self.construct}
        if self.severity == "info":
            return Diagnostic(
                self.why, file=self.file, line=self.line, code=self.code, severity="info", fields=fields
            )
        return Diagnostic(
            f"{self.construct} is not allowed: it {self.why}",
            file=self.file,
            line=self.line,
            code=self.code,
            fields=fields,
        )


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


# -- 1. includes, before any tool runs --------------------------------------------------------------------------
_INCLUDE_WHY = {
    "macro": "includes a file named by a macro or pasted together, which cannot be checked",
    "outside": "includes a file that is not one of the task's or the answer's files",
    "unknown": "includes a file that is not one of the task's or the answer's files",
}


def include_findings(files: Mapping[str, str], provided: Iterable[str]) -> list[Finding]:
    """Each `include that names anything but a task or answer file (`rtlreward_hdl.preprocess.include_problems`):
    checked on the text, so no preprocessor ever reads such a path."""
    return [
        Finding("unsafe-include", p.construct, p.file, p.line, _INCLUDE_WHY[p.reason])
        for p in include_problems(files, provided)
    ]


# -- 4. the allow-list ------------------------------------------------------------------------------------------
def _unsafe_dumpfile(path: str) -> bool:
    p = path.replace("\\", "/").strip()
    parts = p.split("/")
    return (
        not p
        or p.startswith(("/", "~"))
        or re.match(r"^[A-Za-z]:", p) is not None
        or any(part in ("", ".", "..") or part.startswith((".", "_rtlreward")) for part in parts)
        or not p.lower().endswith(WAVE_EXTS)
    )


def _name_why(name: str) -> tuple[str, str]:
    if name in SYSTEM_NAMES or name.startswith("$system"):
        return "unsafe-system", "runs a shell command"
    if name in C_NAMES or re.fullmatch(r"\$c(?:pure)?\d*", name):
        return "unsafe-c", "embeds C++ code (Verilator)"
    if name in ENV_NAMES:
        return "unsafe-env", "reads the environment"
    if name in FILE_NAMES or (re.fullmatch(r"\$f[a-z]+", name) and name not in ALLOWED_SYSTEM_NAMES):
        return "unsafe-file-io", "opens, reads or writes files"
    return "unsafe-system-task", "is not one of the system tasks and functions a design or testbench needs"


def _judge(use: SystemUse, provided: list[str], answer_text: str) -> Finding | None:
    """The finding for one use, or None when the allow-list lets it pass."""
    if use.origin is None:
        return _judge_answer(use, provided, answer_text)
    # The construct lies in a task file the answer includes (or a place no `line maps to the answer): judged
    # by the same rules, reported at the answer's include without showing the file's text.
    inner = _judge_answer(attrs.evolve(use, file=use.origin, origin=None), provided, "")
    if inner is None:
        return None
    what = {"system": "a system task", "directive": "a directive", "dpi": "a DPI declaration"}
    why = f"brings in {what.get(use.kind, 'a construct')} the gate does not allow (that file's text is not shown)"
    shown = "`include of a task file" if use.file is not None else "a construct outside the answer's files"
    return Finding(inner.code, shown, use.file, use.line, why)


def _judge_answer(use: SystemUse, provided: list[str], answer_text: str) -> Finding | None:
    where = {"file": use.file, "line": use.line}
    name = use.name if use.kind != "system" or shown_name(use.name, answer_text) else "a system name"
    if use.kind == "system":
        if use.name in _READMEM or use.name == "$dumpfile":
            shown_arg = use.arg is not None and f'"{use.arg}"' in answer_text
            call = f'{use.name}("{use.arg}", ...)' if shown_arg else use.name
            if use.arg is None:
                why = "takes a file name that is not a string literal, which cannot be checked"
                return Finding("unsafe-file-io", call, **where, why=why)
            if use.name == "$dumpfile":
                if _unsafe_dumpfile(use.arg):
                    why = (
                        "writes a file other than a waveform (.vcd, .fst, ...) in the working folder (no "
                        "absolute path, `..`, hidden or _rtlreward folder)"
                    )
                    return Finding("unsafe-file-io", call, **where, why=why)
                return None
            if resolve_include(use.arg, use.file or "", provided) is None:
                why = "reads a file that is not one of the task's or the answer's files"
                return Finding("unsafe-file-io", call, **where, why=why)
            return None
        if use.name in ALLOWED_SYSTEM_NAMES:
            return None
        code, why = _name_why(use.name)
        return Finding(code, name, **where, why=why)
    if use.kind == "directive":
        if use.seen_by != SOURCE and (use.name in ALLOWED_DIRECTIVES or use.name not in KNOWN_DIRECTIVES):
            return None  # allowed, or a macro the tool did not know: that view failed, the strict reading applies
        if re.match(r"`(systemc_|verilog)", use.name):
            return Finding(
                "unsafe-c", use.name, **where, why="embeds C++ code into the simulator (Verilator)"
            )
        why = (
            "is a directive a design does not need (it changes what the tools see or hand to their compiler)"
        )
        return Finding("unsafe-directive", use.name, **where, why=why)
    if use.kind == "dpi":
        shown = use.name if use.name.split(" ", 1)[-1] in answer_text else use.name.split(" ", 1)[0] + " ..."
        return Finding("unsafe-dpi", shown, **where, why="calls foreign C code (DPI)")
    if use.kind == "include":
        why = "includes a file built by macros that is not one of the task's or the answer's files"
        return Finding("unsafe-include", "`include", **where, why=why)
    if use.kind == "escaped":
        why = (
            "puts a macro in an escaped identifier (Icarus expands it, Verilator does not); use a plain name"
        )
        return Finding("unsafe-macro", use.name, **where, why=why)
    if use.kind == "macro":
        why = (
            "lets the preprocessor build a system task name, which cannot be checked in every `ifdef branch; "
            "write the name out"
        )
        return Finding("unsafe-macro", use.name, **where, why=why)
    if use.kind == "string3":
        why = (
            "is a triple-quoted string, which Verilator and Icarus read differently (each sees other code "
            "outside it); use plain strings"
        )
        return Finding("unsafe-string", use.name, **where, why=why)
    return None


def _strict(scan_: Scan) -> list[Finding]:
    """When a preprocessor failed: what it would have built is unknown, so token pasting and macros inside
    strings are refused too, and an info diagnostic says why. Notes (a tool read by slang instead) become info diagnostics as well."""
    out = [Finding("preprocess-note", "", None, None, v.note, severity="info") for v in scan_.views if v.note]
    failed = scan_.failed
    if not failed:
        return out
    problems = "; ".join(v.problem for v in failed)
    why = f"checked the source text strictly instead: {problems}"
    out.append(Finding("preprocess-failed", "", None, None, why, severity="info"))
    for use in scan_.source:
        if use.kind == "paste":
            why = "pastes tokens in a file a preprocessor could not read, so the names it builds cannot be checked"
            out.append(Finding("unsafe-macro", "token pasting (``)", use.file, use.line, why))
        elif use.kind == "strmacro":
            why = "uses a macro inside a string (Icarus expands it) in a file a preprocessor could not read"
            out.append(Finding("unsafe-macro", "a macro in a string", use.file, use.line, why))
    return out


def _headers(task: Task | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if task is not None:
        headers.update(task.context)
        if task.harness is not None:
            headers.update(task.harness.files)
    return headers


def scan_files(
    files: Mapping[str, str], task: Task | None = None, ctx: StageContext | None = None
) -> list[Finding]:
    """Every construct the gate refuses in the answer's files, deduplicated by (kind, file, line, construct), plus info
    findings when a preprocessor failed. With `ctx`, Icarus' and Verilator's preprocessors run through its
    executor; without, slang's (in process, with Icarus' defines) stands in."""
    headers = _headers(task)
    provided = list(dict.fromkeys([*headers, *files]))
    answer_text = "\n".join(files.values())
    findings = include_findings(files, provided)
    result: Scan | None = None
    if findings:
        uses = source_uses(files)  # no preprocessor runs on an answer that includes an outside path
    else:
        included = _included_targets(files, provided)
        hdl_headers = {k: v for k, v in headers.items() if k.lower().endswith(HDL_EXTS) or k in included}
        order = compile_sources(task, files, provided) if task is not None else list(files)
        result = scan(ctx, files, hdl_headers, order=order, defines={"__ICARUS__": "1"})
        uses = result.uses()
    for use in uses:
        f = _judge(use, provided, answer_text)
        if f is not None:
            findings.append(f)
    if result is not None:
        findings += _strict(result)
    out: list[Finding] = []
    seen: set[tuple[str, str | None, int | None, str]] = set()
    for f in sorted(findings, key=lambda f: (f.severity == "info", f.file or "", f.line or 0, f.code)):
        key = (f.code, f.file, f.line, f.construct)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _included_targets(files: Mapping[str, str], provided: list[str]) -> set[str]:
    out: set[str] = set()
    for rel, text in files.items():
        if rel.lower().endswith(HDL_EXTS):
            for m in _INCLUDE_RE.finditer(strip_comments(text)):
                target = m.group(1) if m.group(1) is not None else m.group(2)
                if target is not None:
                    r = resolve_include(target, rel, provided)
                    if r is not None:
                        out.add(r)
    return out


class SafetyStage(Stage):
    name = "safety"
    version = "3"  # 3: findings carry their construct as a field
    requires = ("format",)
    description = (
        "gate: the preprocessed design uses only allowed system tasks (no $system, $c, DPI, file I/O)"
    )

    def tool_versions(self) -> dict[str, str]:
        return {"iverilog": iverilog_version(), "verilator": verilator_version()}

    def run(self, ctx: StageContext) -> StageResult:
        files = dict(ctx.files)
        found = scan_files(files, ctx.task, ctx)
        errors = [f for f in found if f.severity != "info"]
        infos = [f for f in found if f.severity == "info"]
        metrics = {
            "files_checked": len(files),
            "unsafe_constructs": len(errors),
            "preprocessors_failed": sum(f.code == "preprocess-failed" for f in infos),
        }
        diags = [f.diagnostic() for f in errors] + [f.diagnostic() for f in infos]
        if not errors:
            return self.result(Status.PASSED, 1.0, metrics=metrics, diagnostics=diags)
        shown = [str(f.diagnostic()) for f in errors[:10]]
        more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
        feedback = "Unsafe constructs, remove them: " + "; ".join(shown) + more
        return self.result(Status.FAILED, 0.0, metrics=metrics, diagnostics=diags, feedback=feedback)


@hookimpl
def rtlreward_register_stages(register):
    register(SafetyStage())
