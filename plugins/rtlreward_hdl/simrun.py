"""What the VerilogEval and RTLLM harness runners share: finding a benchmark's files, and running an answer with
a benchmark's self-checking Verilog testbench under Icarus without letting the answer forge the verdict.

Both benchmarks decide by reading the simulator's text output ("Mismatches: 0 in 20 samples", "Your Design
Passed"). A design can `$display` the same words, and Verilog lets a module reach *up* the hierarchy
(`good1.zero` reads the reference's output, `tb.stats1.errors = 0` zeroes the mismatch counter; both compile and
"pass" under the official flows). So, per run:

1. every `$display`/`$write`/... of the testbench gets a random tag the answer cannot know, and only tagged lines
   count as the testbench speaking;
2. the answer must elaborate on its own (`iverilog -s <top>` over the answer's files alone): an upward reference
   into the testbench or an instance of the reference module cannot resolve there;
3. the answer may not end the simulation itself (`$finish`, `$stop`, `$fatal`, `$exit`): the testbench decides
   how many samples are compared.

How this relates to the signed records of `rtlreward.verdict` (the cocotb and CVDP runners): there, harness
Python signs the results with a key the design cannot read. Here the judge is Verilog in the design's own vvp
process, so the tag plays the key's part and must stay unreadable: it is in the tagged testbench source and in
the compiled `.vvp`, both in the workspace. What keeps it secret is that the answer may not touch files at all:
`control_tasks` refuses every file task (`$fopen`/`$fopenr`/`$fopenw`/`$fopena`, `$fgets`, `$readmemh`, ...)
on Icarus' own preprocessed text, so a pasted `` $`G `` is seen as the `$fgets` it becomes. The guarantee holds
as long as that check does, with or without the safety stage: `tests/test_verdict_channel.py` runs a design that
prints the verdict line, one that reads the tagged testbench (`$fopenr` and a pasted `$fgets`) and one that
writes files.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import shlex
import shutil
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import attrs

from rtlreward.model import Diagnostic, StageResult, Status
from rtlreward.sandbox import CommandResult, Limits, resource_exhaustion
from rtlreward.stage import StageContext, UnsafePath, safe_relpath, write_files
from rtlreward_hdl.files import SOURCE_EXTS, strip_comments, unsafe_includes
from rtlreward_hdl.icarus import (
    CAPTURE_BASE,
    CONFIG_FILE,
    INPUT_FILE,
    capture_setup,
    captured_command,
    iverilog_version,
    ivl_folder,
    line_name,
    local_launcher,
    parse_iverilog,
    place,
)
from rtlreward_hdl.kept import Kept
from rtlreward_hdl.preprocess import (
    FILE_NAMES,
    ICARUS,
    OUTSIDE_NAMES,
    hdl_files,
    include_problems,
    inert,
    scan,
)

__all__ = [
    "SimRun",
    "compile_then_run",
    "control_tasks",
    "cpu_seconds",
    "limit_diagnostic",
    "run_testbench",
    "split_tagged",
    "tag_testbench",
    "tests_result",
]

STAGE = "tests"
# Files an answer never contributes next to the testbench (tools would pick them up instead of ours).
_NO_ANSWER_EXTS = (".py", ".pyc", ".pth", ".so", ".pyd", ".vvp")

_DISPLAY_RE = re.compile(r"(\$(?:display|write|strobe|monitor)[bho]?)(\s*\(\s*)(\)|\")?")
_SIM_CONTROL = frozenset({"$finish", "$stop", "$fatal", "$exit", "$finish_and_return"})
_NAME_RE = re.compile(r"(?<![\w$])\$[A-Za-z_][\w$]*")


# -- the testbench's own words ----------------------------------------------------------------------------------
def new_tag() -> str:
    """A marker the answer cannot predict (fresh per run; it never changes a verdict, only who may state one)."""
    return f"@@rtlreward-{secrets.token_hex(8)}@@"


def tag_testbench(text: str, tag: str) -> str:
    """Prefix every line the testbench prints with `tag`: `$display("x", a)` -> `$display("<tag>x", a)`,
    `$display(a)` -> `$display("<tag>", a)`, `$display()` -> `$display("<tag>")`."""

    def repl(m: re.Match[str]) -> str:
        task, paren, nxt = m.group(1), m.group(2), m.group(3)
        if nxt == '"':
            return f'{task}{paren}"{tag}'
        if nxt == ")":
            return f'{task}{paren}"{tag}")'
        return f'{task}{paren}"{tag}", '

    return _DISPLAY_RE.sub(repl, text)


def split_tagged(output: str, tag: str) -> tuple[list[str], list[str]]:
    """(the testbench's lines with the tag removed, every output line). A line the answer began without a
    newline still counts from the tag on."""
    tb: list[str] = []
    lines = output.splitlines()
    for line in lines:
        i = line.find(tag)
        if i >= 0:
            tb.append(line[i + len(tag) :].replace(tag, ""))
    return tb, lines


def control_tasks(files: Mapping[str, str], ctx: StageContext | None = None) -> list[Diagnostic]:
    """System tasks an answer to these benchmarks has no use for and could cheat with: `$finish`/`$stop`/
    `$fatal`/`$exit` would decide how many samples the testbench compares; `$readmemh`/`$fopen`/... could read
    the testbench's files; `$system`/`$c`/`$getenv` reach outside the simulation.

    Read where Icarus reads them: on Icarus' own preprocessed text (`rtlreward_hdl.preprocess`, through `ctx`;
    without one, slang's preprocessor with Icarus' defines), so `` `define F fin``ish `` then `` $`F`` is
    `$finish`; and on the text as written, with and without token pasting, for every `ifdef branch. A name
    the preprocessor builds from a macro (`` $`F``), and any pasting when Icarus' preprocessor failed on the
    answer, is refused too: it cannot be checked. One diagnostic per file and line."""
    hdl = hdl_files(files)
    diags: list[Diagnostic] = []
    seen: set[tuple[str | None, int | None]] = set()

    def add(name: str, rel: str | None, line: int | None) -> None:
        if name in _SIM_CONTROL:
            msg, code = (
                f"{name} is not allowed in the design: the testbench ends the simulation",
                "sim-control",
            )
        elif name in FILE_NAMES:
            msg, code = (
                f"{name} is not allowed in the design: it could read the testbench's files",
                "file-access",
            )
        elif name in OUTSIDE_NAMES:
            msg, code = (
                f"{name} is not allowed in the design: it reaches outside the simulation",
                "unsafe-call",
            )
        else:
            return
        if (rel, line) not in seen:
            seen.add((rel, line))
            diags.append(Diagnostic(msg, file=rel, line=line, code=code))

    for rel, text in hdl.items():
        clean = strip_comments(text, keep_strings=False)
        for variant in (clean, clean.replace("``", "")):
            for m in _NAME_RE.finditer(variant):
                add(m.group(0), rel, variant.count("\n", 0, m.start()) + 1)
    if not hdl:
        return diags
    # Never ask a preprocessor to follow an include named by a macro or leaving the workspace (the answer is
    # compiled alone, so a plain name that is not one of its files only fails to resolve).
    bad = [p for p in include_problems(hdl, hdl) if p.reason != "unknown"]
    for p in bad:
        msg = "`include of a file named by a macro or outside the answer is not allowed in the design"
        if (p.file, p.line) not in seen:
            seen.add((p.file, p.line))
            diags.append(Diagnostic(msg, file=p.file, line=p.line, code="unsafe-include"))
    if bad:
        return diags
    result = scan(ctx, hdl, {}, tools=(ICARUS,), defines={"__ICARUS__": "1"})
    for use in result.uses():
        if use.kind == "system":
            add(use.name, use.file, use.line)
        elif use.kind == "include" and (use.file, use.line) not in seen:
            seen.add((use.file, use.line))
            msg = "`include of a file built by macros is not allowed in the design"
            diags.append(Diagnostic(msg, file=use.file, line=use.line, code="unsafe-include"))
    strict = bool(result.failed)
    for use in result.source:
        if use.kind == "string3":
            msg = f"{use.name} (a triple-quoted string) is not allowed in the design: the tools read it differently"
            if (use.file, use.line) not in seen:
                seen.add((use.file, use.line))
                diags.append(Diagnostic(msg, file=use.file, line=use.line, code="macro-built"))
        elif use.kind == "macro" or (strict and use.kind in ("paste", "strmacro")):
            msg = (
                f"{use.name} is not allowed in the design: it lets the preprocessor build a system task name "
                "(write the name out)"
            )
            if (use.file, use.line) not in seen:
                seen.add((use.file, use.line))
                diags.append(Diagnostic(msg, file=use.file, line=use.line, code="macro-built"))
    return diags


# -- running ----------------------------------------------------------------------------------------------------
@attrs.frozen
class SimRun:
    """What happened when an answer met a testbench. `stage` is "setup", "isolate", "compile" or "sim": the
    step that ended the run (a finished simulation ends at "sim")."""

    stage: str
    tag: str
    root: Path
    compile: CommandResult | None = None
    sim: CommandResult | None = None
    diagnostics: tuple[Diagnostic, ...] = ()
    status: Status | None = None  # set when the run ended before the simulation produced a verdict
    limits: Limits | None = None  # the simulation's sandbox limits (named when the design runs into one)

    @property
    def tb_lines(self) -> list[str]:
        return split_tagged(self.sim.output if self.sim else "", self.tag)[0]

    @property
    def output_lines(self) -> list[str]:
        return split_tagged(self.sim.output if self.sim else "", self.tag)[1]


RESET_FILE = "_rtlreward_reset.v"
_DEFINE_RE = re.compile(r"`define\s+([A-Za-z_]\w*)")


def answer_macro_reset(files: Mapping[str, str]) -> str:
    """Verilog that `undef`s every macro the answer's files define (headers included through them define theirs
    in the answer's own files or the task's, which the testbench may rely on: only the answer's own names go)."""
    names = sorted({m.group(1) for text in files.values() for m in _DEFINE_RE.finditer(strip_comments(text))})
    return "".join(f"`undef {n}\n" for n in names)


def answer_sources(ctx: StageContext, harness_names: Iterable[str]) -> dict[str, str]:
    """The answer's files that go next to the testbench: every file but the harness's own names and files a
    tool would load as code."""
    harness_names = {_normal(n) for n in harness_names}
    out: dict[str, str] = {}
    for rel, text in ctx.files.items():
        base = rel.replace("\\", "/").rsplit("/", 1)[-1]
        if (
            _normal(rel) in harness_names
            or rel.lower().endswith(_NO_ANSWER_EXTS)
            or base.startswith("_rtlreward_")
        ):
            continue
        out[rel] = text
    return out


def _normal(rel: str) -> str:
    """The path a file is written to (`./a.sv` and `a.sv` are one file); a path that cannot be written as it is."""
    try:
        return str(safe_relpath(rel))
    except UnsafePath:
        return rel


def run_testbench(
    ctx: StageContext,
    *,
    toplevel: str,
    harness_files: Mapping[str, str],
    testbench: Sequence[str],
    tb_top: str | None,
    compile_flags: Sequence[str] = (),
    prelude: str | None = None,
    sim_timeout: float = 30.0,
) -> SimRun:
    """Write the answer and the (tagged) harness into the stage folder, check the answer on its own, compile it
    with the testbench (answer first, then the harness files in `testbench` order, as the official Makefiles
    do), run `vvp`. `prelude` is Verilog put before every file (RTLLM's VCS `-timescale` default)."""
    tag = new_tag()
    root = ctx.stage_dir(STAGE)
    answer = answer_sources(ctx, harness_files)

    def ended(stage: str, status: Status, diags: list[Diagnostic], **kw) -> SimRun:
        return SimRun(stage=stage, tag=tag, root=root, diagnostics=tuple(diags), status=status, **kw)

    try:
        harness = {str(safe_relpath(k)): v for k, v in harness_files.items()}
    except UnsafePath as e:
        return ended("setup", Status.ERROR, [Diagnostic(f"harness: {e}", code="bad-harness")])
    try:
        answer = {str(safe_relpath(k)): v for k, v in answer.items()}
    except UnsafePath as e:
        return ended("setup", Status.FAILED, [Diagnostic(str(e), code="unsafe-path")])
    sources = [p for p in answer if p.lower().endswith(SOURCE_EXTS)]
    if not sources or not any(answer[p].strip() for p in sources):
        d = Diagnostic("the answer has no Verilog source to test", code="no-answer")
        return ended("setup", Status.FAILED, [d])
    bad = unsafe_includes(answer) or control_tasks(answer, ctx)
    if bad:
        return ended("setup", Status.FAILED, bad)

    # The answer alone first, with no harness file beside it (an `include` of one must not resolve).
    write_files(root, answer)
    pre: list[str] = []
    if prelude:
        pre = ["_rtlreward_prelude.v"]
        write_files(root, {pre[0]: prelude})
    argv_sources = [f"./{p}" for p in sources]  # a file named "-o.v" stays a file name
    limit = min(float(ctx.timeout), 60.0)

    # 1. The answer alone: references into the testbench or to the reference module cannot resolve here. When
    # the compile stage already elaborated exactly these files under this top on their own, that was this check.
    if not _elaborated_alone(ctx, toplevel, sources, answer, prelude):
        iso_run = _isolate(ctx, root, toplevel, pre, argv_sources, limit, ended)
        if iso_run is not None:
            return iso_run

    # 2. The answer with the testbench, the way the benchmark compiles it; the harness wins every name clash.
    write_files(root, {k: (tag_testbench(v, tag) if k in testbench else v) for k, v in harness.items()})
    argv = ["iverilog", *compile_flags, "-g2012"]
    if tb_top:
        argv += ["-s", tb_top]
    # One macro space spans the whole build: whatever the answer `define`s would reach the testbench compiled after
    # it. Undefine it in between (Icarus 11 has no `undefineall).
    reset = answer_macro_reset({p: answer[p] for p in sources})
    if reset:
        write_files(root, {RESET_FILE: reset})
    argv += ["-o", "_rtlreward_sim.vvp", *pre, *argv_sources, *([RESET_FILE] if reset else []), *testbench]
    if not pre and not reset:
        argv = _direct_compile(ctx, root, argv, answer, sources, harness, testbench, tag) or argv
    # 2+3 in one sandboxed command (compile_then_run). The design cannot write files (control_tasks), so what the
    # compile's files say is the compiler's.
    t = max(1.0, min(float(sim_timeout), float(ctx.timeout)))
    # A calibrated limit also bounds the run's CPU time (rtlreward.calibration.cpu_limit): a loop that never
    # advances time is cut at it, well before the wall clock's margin for load.
    cpu = min(ctx.cpu_timeout, t) if ctx.cpu_timeout is not None else None
    comp, both = compile_then_run(
        ctx, argv, ["vvp", "-n", "_rtlreward_sim.vvp"], cwd=root, compile_limit=limit, run_limit=t, run_cpu=cpu
    )
    if comp is None:
        if both.timed_out:
            d = Diagnostic(f"iverilog did not finish within {limit:g} s", code="timeout")
            return ended("compile", Status.TIMEOUT, [d], compile=both)
        d = Diagnostic(f"the compile step did not run: {both.output.strip()[:300]}", code="tool-missing")
        return ended("compile", Status.ERROR, [d], compile=both)
    if comp.timed_out:
        d = Diagnostic(f"iverilog did not finish within {limit:g} s", code="timeout")
        return ended("compile", Status.TIMEOUT, [d], compile=comp)
    if _not_installed(comp, "iverilog"):
        d = Diagnostic("Icarus Verilog is not installed: `apt-get install iverilog`", code="tool-missing")
        return ended("compile", Status.ERROR, [d], compile=comp)
    if comp.returncode != 0:
        diags = [d for d in parse_iverilog(comp.output, root) if d.severity == "error"]
        if not diags:
            diags = [
                Diagnostic(
                    f"iverilog failed with the testbench (exit {comp.returncode})", code="compile-failed"
                )
            ]
        return ended("compile", Status.FAILED, diags, compile=comp)

    sim = both  # 3. the simulation's part of the command
    if sim.timed_out:
        within = f"{t:g} s"
        if cpu is not None and sim.duration < t:  # the kernel ended it at its CPU time, before the wall clock
            within = f"{cpu_seconds(cpu)} s of CPU time"
        d = Diagnostic(
            f"the simulation did not finish within {within} (a loop that never advances time, or a design that "
            "never produces what the testbench waits for)",
            code="timeout",
        )
        return ended("sim", Status.TIMEOUT, [d], compile=comp, sim=sim)
    if _not_installed(sim, "vvp"):
        # The environment, not the answer: an error (never cached, never the candidate's score).
        d = Diagnostic(
            "vvp (Icarus Verilog's simulator) is not installed: `apt-get install iverilog`",
            code="tool-missing",
        )
        return ended("sim", Status.ERROR, [d], compile=comp, sim=sim)
    return SimRun(stage="sim", tag=tag, root=root, compile=comp, sim=sim, limits=ctx.limits())


# -- the compile without Icarus's launcher -------------------------------------------------------------------------
# `iverilog` writes two configuration files and runs `sh -c "ivlpp ... | ivl ..."`: four processes where the
# compiler proper is one (~4 of 13 ms for a VerilogEval testbench here). The testbench is the same for every
# answer to a task, and an answer no preprocessor would change (`inert`) passes through the preprocessor as it is:
# so the launcher runs once per task on the testbench alone, with an `ivl` that records what it was given
# (`rtlreward_hdl.icarus.captured_command`), and every answer is compiled by `ivl` itself on its own text followed
# by that preprocessed testbench. The testbench is tagged with a placeholder there, replaced by the run's tag.
_TB_CAPTURES = Kept(64)  # per Icarus, flags and testbench: (ivl's argv, configuration, text), or None
_PLACEHOLDER = "@@rtlreward-" + "0" * 16 + "@@"  # the shape of `new_tag()`'s tags


def _direct_compile(
    ctx: StageContext,
    root: Path,
    argv: Sequence[str],
    answer: Mapping[str, str],
    sources: Sequence[str],
    harness: Mapping[str, str],
    testbench: Sequence[str],
    tag: str,
) -> list[str] | None:
    """`ivl`'s own command for the launcher's `argv` (answer sources first, then the testbench files, nothing
    else), or None where the launcher must run: another executor than this machine's, no launcher on its PATH,
    an answer a preprocessor would change, a name a `` `line`` directive cannot carry, a testbench the launcher
    did not preprocess cleanly."""
    launcher = local_launcher(ctx.executor)
    if ivl_folder(launcher) is None or not inert(answer[p] for p in sources):
        return None
    if not all(line_name(p) for p in sources) or any(_PLACEHOLDER in v for v in harness.values()):
        return None
    n = len(sources)
    if list(argv[len(argv) - len(testbench) - n : len(argv) - len(testbench)]) != [f"./{p}" for p in sources]:
        return None
    flags = list(argv[1 : len(argv) - len(testbench) - n])
    key = hashlib.sha256(
        json.dumps(
            [iverilog_version(), launcher, flags, list(testbench), sorted(harness.items())],
            ensure_ascii=False,
        ).encode("utf-8", "surrogatepass")
    ).hexdigest()
    known, got = _TB_CAPTURES.lookup(key)
    if not known:
        got = _capture_testbench(ctx, root, flags, harness, testbench, launcher)
        _TB_CAPTURES.put(key, got)
    if got is None:
        return None
    ivl, config, tb_text = got
    # ivlpp -L: each file after a `line directive naming it as the launcher was given it, a newline between files
    head = "\n".join(f'`line 1 "./{p}" 0\n{answer[p]}' for p in sources)
    text = head + "\n" + tb_text.replace(_PLACEHOLDER, tag)
    if not place(root, {CONFIG_FILE: config, INPUT_FILE: text}):
        return None
    return [{"-C{config}": f"-C{CONFIG_FILE}", "{input}": INPUT_FILE}.get(a, a) for a in ivl]


def _capture_testbench(
    ctx: StageContext,
    root: Path,
    flags: Sequence[str],
    harness: Mapping[str, str],
    testbench: Sequence[str],
    launcher: str | None,
) -> tuple[list[str], str, str] | None:
    """The launcher run once on the (placeholder-tagged) testbench alone in a fresh folder of its own, its `ivl`
    recording; None unless it ran cleanly (no message: the preprocessor found every file)."""
    folder = root / f"_rtlreward_capture_{secrets.token_hex(6)}"
    folder.mkdir()
    try:
        write_files(
            folder, {k: (tag_testbench(v, _PLACEHOLDER) if k in testbench else v) for k, v in harness.items()}
        )
        if not capture_setup(str(folder), launcher):
            return None
        res = ctx.run(["iverilog", "-B", CAPTURE_BASE, *flags, *testbench], cwd=folder, timeout=60.0)
        if res.returncode != 0 or res.timed_out or res.output.strip():
            return None
        got = captured_command(str(folder), launcher)
        if got is None or got[0].count("-C{config}") != 1 or got[0][-1] != "{input}":
            return None
        return got
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# Compile ("$@": the answer's file names are arguments, never shell text), record its output and exit status in
# files, then, if it built, run the simulation under `timeout` (124: the limit fired; 137: it had to SIGKILL) and,
# where the caller gives one, a soft CPU-time limit (the kernel's SIGXCPU, which `timeout` passes on: 152, or the
# signal itself; no core file).
_COMPILE_THEN_RUN = (
    '"$@" >_rtlreward_compile.log 2>&1; rc=$?; echo "$rc" >_rtlreward_compile.rc; '
    '[ "$rc" -eq 0 ] || exit 0; cd {cwd} || exit 0; {cpu}exec timeout -k 1 {limit} {run}'
)
_RUN_LIMIT_CODES = (124, 137, 128 + signal.SIGXCPU, -signal.SIGXCPU)  # a limit of the run fired
_LOG_LIMIT = 1 << 20
_COMPILE_FILES = ("_rtlreward_compile.rc", "_rtlreward_compile.log")


def cpu_seconds(limit: float) -> int:
    """A CPU-time limit as the kernel applies it (RLIMIT_CPU): whole seconds, at least 1."""
    return max(1, math.ceil(limit))


def compile_then_run(
    ctx: StageContext,
    compile_argv: Sequence[str],
    run_argv: Sequence[str],
    *,
    cwd: Path,
    compile_limit: float,
    run_limit: float,
    run_cwd: Path | None = None,
    run_cpu: float | None = None,
) -> tuple[CommandResult | None, CommandResult]:
    """An Icarus compile and the simulation it built, in one sandboxed command (one sandbox set-up, not two):
    the compile's output and exit status go to files in `cwd`, then, when it built, `run_argv` runs in `run_cwd`
    under its own `run_limit` with its output on the command's pipes (capped as any command's). Returns (the
    compile's result, None when it never finished; the whole command's result, which is the run's when the
    compile built: `timed_out` then says the run's limit fired). Nothing of the design runs before the
    compile's status is written. `run_argv` is the caller's own command (it is shell text), never the answer's.
    `run_cpu`: the run's CPU-time limit in seconds (rounded up to whole seconds, the kernel's unit), set after the
    compile, so only the simulation has it; reaching it reads as the run's limit firing."""
    for left in _COMPILE_FILES:
        (cwd / left).unlink(missing_ok=True)
    rel = os.path.relpath(run_cwd or cwd, cwd)
    # A shell that cannot set it (a hard limit already lower) runs on under the wall clock alone.
    cpu = f"ulimit -c 0; ulimit -S -t {cpu_seconds(run_cpu)} 2>/dev/null; " if run_cpu is not None else ""
    script = _COMPILE_THEN_RUN.format(
        cwd=shlex.quote(rel), limit=f"{run_limit:g}", run=" ".join(shlex.quote(a) for a in run_argv), cpu=cpu
    )
    both = ctx.run(
        ["sh", "-c", script, "sh", *compile_argv],
        cwd=cwd,
        timeout=compile_limit + run_limit + 5,
    )
    comp = _compile_part(both, compile_argv, cwd)
    if comp is not None and comp.returncode == 0:
        both = attrs.evolve(
            both, argv=tuple(run_argv), timed_out=both.timed_out or both.returncode in _RUN_LIMIT_CODES
        )
    return comp, both


def _compile_part(both: CommandResult, argv: Sequence[str], root: Path) -> CommandResult | None:
    """The compile step's result from the files it left; None when it never finished."""
    try:
        rc = int((root / "_rtlreward_compile.rc").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        with open(root / "_rtlreward_compile.log", "rb") as fh:
            raw = fh.read(_LOG_LIMIT + 1)
    except OSError:
        raw = b""
    cut = len(raw) > _LOG_LIMIT
    text = raw[:_LOG_LIMIT].decode(errors="replace") + ("\n[output truncated]" if cut else "")
    return CommandResult(
        argv=tuple(argv), returncode=rc, stdout=text, sandboxed=both.sandboxed, truncated=cut
    )


def _elaborated_alone(
    ctx: StageContext, toplevel: str, sources: Sequence[str], answer: Mapping[str, str], prelude: str | None
) -> bool:
    """The compile stage passed `iverilog -g2012 -t null -s <toplevel>` over exactly the answer's sources, with no
    other file, flag, prelude or `include: the same command as the isolation check, already run."""
    prior = ctx.results.get("compile")
    done = prior.artifacts.get("elaborated") if prior is not None and prior.passed else None
    if not isinstance(done, Mapping) or prelude:
        return False
    return (
        done.get("top") == toplevel
        and not done.get("flags")
        and sorted(str(s) for s in done.get("sources") or ()) == sorted(sources)
        and not any("`include" in answer[p] for p in sources)
    )


def _isolate(
    ctx: StageContext,
    root: Path,
    toplevel: str,
    pre: Sequence[str],
    argv_sources: Sequence[str],
    limit: float,
    ended: Callable[..., SimRun],
) -> SimRun | None:
    """Compile the answer alone: the SimRun that ends the run when it does not elaborate, else None."""
    iso = ctx.run(
        ["iverilog", "-g2012", "-t", "null", "-s", toplevel, *pre, *argv_sources],  # elaboration only
        cwd=root,
        timeout=limit,
    )
    if iso.timed_out:
        d = Diagnostic(f"iverilog did not finish within {limit:g} s", code="timeout")
        return ended("isolate", Status.TIMEOUT, [d], compile=iso)
    if iso.returncode != 0:
        # Every located message: "Include file x not found" carries no "error:" yet is the cause.
        diags = [
            attrs.evolve(d, severity="error")
            for d in parse_iverilog(iso.output, root)
            if d.severity != "warning"
        ]
        if iso.returncode == 127 and not diags:
            d = Diagnostic("Icarus Verilog is not installed: `apt-get install iverilog`", code="tool-missing")
            return ended("isolate", Status.ERROR, [d], compile=iso)
        if "Unable to find the root module" in iso.output and not diags:
            head = Diagnostic(f"the answer does not define module {toplevel}", code="missing-module")
        elif any(s in iso.output for s in ("Unable to bind", "Could not find", "Unknown module type")):
            head = Diagnostic(
                f"module {toplevel} does not elaborate on its own: every name it uses must be defined in the "
                "answer (no references into the testbench, no use of the benchmark's reference module)",
                code="not-self-contained",
            )
        else:
            head = Diagnostic(
                f"the answer does not compile (iverilog -g2012 -s {toplevel})", code="compile-failed"
            )
        return ended("isolate", Status.FAILED, [head, *diags], compile=iso)
    return None


_NOT_FOUND = ("No such file or directory", "not found", "cannot run")


def _not_installed(res, tool: str) -> bool:
    """The command could not start because `tool` is missing where it runs (exit 127 and the executor's or the
    shell's "not found"): the environment's fault, never the answer's. A design cannot make the tools exit 127
    (the safety gate refuses the system tasks that end a simulation)."""
    out = res.output or ""
    return res.returncode == 127 and tool in out and any(s in out for s in _NOT_FOUND)


def limit_diagnostic(run: SimRun) -> Diagnostic | None:
    """When a simulation that printed no verdict ended at a sandbox limit (the design asked for more memory,
    stack or file size than the sandbox gives): a diagnostic naming the limit (`resource-limit`), for the
    runner's `failed`. None when the run ended some other way."""
    sim = run.sim
    if sim is None or sim.returncode == 0:
        return None
    hit = resource_exhaustion(sim.output, sim.returncode, limits=run.limits, truncated=sim.truncated)
    if hit is None:
        return None
    return Diagnostic(hit.message, code="resource-limit", fields={"limit": hit.limit})


def tests_result(
    status: Status,
    passed: int,
    total: int,
    diags: Sequence[Diagnostic],
    feedback: str = "",
    metrics: Mapping[str, object] | None = None,
) -> StageResult:
    """The `tests` stage result: score = passed / total, and 0 unless the run ended as passed or failed."""
    score = passed / total if total else 0.0
    if status not in (Status.PASSED, Status.FAILED):
        score = 0.0
    return StageResult(
        name=STAGE,
        status=status,
        score=max(0.0, min(1.0, score)),
        metrics={"tests_passed": passed, "tests_total": total, **(metrics or {})},
        diagnostics=tuple(diags),
        feedback=feedback,
        version="1",
    )


def ended_result(run: SimRun) -> StageResult:
    """The result of a run that never reached a verdict (setup, isolation, compile or time limit)."""
    diags = list(run.diagnostics)
    feedback = "\n".join(str(d) for d in diags[:3])
    return tests_result(run.status or Status.ERROR, 0, 0, diags, feedback, {"step": run.stage})


def clean_line(text: str, root: Path, limit: int = 300) -> str:
    text = (text or "").replace(str(root) + os.sep, "").replace(str(root), ".")
    return " ".join(text.split())[:limit]
