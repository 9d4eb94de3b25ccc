"""The `equivalence` stage: does the answer behave like the task's reference design, output by output, cycle by cycle?

A harness only checks what its tests check (the official CVDP LFSR harness passes a design whose output is constant
0); the reference design is a complete specification. This stage compares the two:

1. differential simulation first (Icarus, seeded random stimulus after reset, several seeds, every output every
   cycle in both phases of the clock; x in the reference is a don't-care): an answer it refutes needs no proof
   (`order = "formal-first"` puts the proof first);
2. formal (Yosys builds a miter of the two designs, which the warm server decides or ABC's PDR proves or refutes;
   when PDR does not decide within its budget, BMC checks a bound): `proved`, `bounded(N)` or a counterexample,
   replayed in a second simulation; a proof counts only where the simulation of the same text agrees;
3. partial credit: the share of output bits that never differed, so one wrong output of four earns more than four;
4. the first differing cycle, the inputs up to it, and expected/actual per output, as feedback a model can act on.

Verdict metric `equivalence`: `proved` | `bounded(N)` | `refuted` | `unknown` (no difference found, nothing
proved: simulation only); `method`: `formal`, `simulation` or `formal+simulation`. Status: passed unless refuted
(failed); skipped without a reference; error when a tool is missing or the reference itself cannot be read.

Semantics and limits are in docs/equivalence.md.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from rtlreward import hookimpl
from rtlreward.calibration import cpu_limit
from rtlreward.model import Diagnostic, StageResult, Status, hash_json
from rtlreward.sandbox import CommandResult, resource_exhaustion
from rtlreward.stage import Stage, StageContext, UnsafePath, safe_relpath
from rtlreward_hdl.icarus import direct_command
from rtlreward_hdl.kept import Kept
from rtlreward_hdl.preprocess import inert
from rtlreward_hdl.simrun import compile_then_run, cpu_seconds
from rtlreward_hdl.slang import ExpansionTooLarge
from rtlreward_hdl.yosys import SAFE_PATH_RE, YOSYS_RUNNER
from rtlreward_hdl.yosys import missing_tool as _missing_tool
from rtlreward_hdl.yosys import pyosys_dir as _pyosys_dir
from rtlreward_hdl.yosys import pyosys_version as _pyosys_version
from rtlreward_hdl.yosys import tool_version as _version

from . import diffsim, formal, view, warm, yosys_server
from .design import (
    IDENT_RE,
    Timing,
    design_files,
    hdl_only,
    infer_timing,
    is_header,
    module_ports,
    top_module,
)

__all__ = ["EquivalenceStage"]

# Defaults of the stage options (docs/stages.md#equivalence).
DEFAULTS: dict[str, Any] = {
    "formal": True,
    "formal_timeout": 5.0,  # seconds for PDR (proofs that close here take well under a second)
    "bmc_timeout": 3.0,  # seconds for the bounded check when PDR does not decide
    "bmc_frames": 64,
    "simulate": True,
    # "simulation-first": the random runs before the proof, which every answer gets but one they refute with no
    # credit to pay or Icarus rejects; "formal-first": the proof first (its counterexample as the feedback)
    "order": "simulation-first",
    "seeds": 3,
    "cycles": 256,  # per seed
    "reset_cycles": 1,
    "reset_probability": 0.02,  # reset asserted in mid-run, per cycle, after the first seed
    "sim_timeout": 20.0,  # seconds per simulation of the reference; the candidate's is calibrated from it
    # Yosys: "auto" = Yosys 0.70 from the `pyosys` wheel (libyosys, run by the executor's Python) wherever it is
    # installed, so every executor reads answers with the same current Yosys; else the `yosys` binary on PATH. Any
    # other value is the binary to run.
    "yosys": "auto",
    # ABC: "auto" = the yosys-abc the pyosys wheel ships (the same ABC on every executor), else `yosys-abc` on PATH
    "yosys_abc": "auto",
    # What is paid for what was decided (docs/equivalence.md#what-each-verdict-pays):
    "undecided": 0.25,  # score of an answer nothing refuted and nothing proved, where the reference proves itself
    "refuted_max": 0.5,  # the most a refuted answer earns: this times its output-bit credit above a constant stub
    "simulation_only_factor": 4,  # more random runs where the reference does not prove against itself in budget
    "yosys_seconds": 10.0,  # Yosys's budget to read and flatten both designs and build the miter
    "yosys_memory_mb": 2048,  # and its memory: a design that instantiates itself is cut here, not at the limit
}
ORDERS = ("simulation-first", "formal-first")
MAX_ROWS = 16  # input rows shown in a counterexample


# Runs the ABC the pyosys wheel ships (`yosys-abc` beside libyosys), else `yosys-abc` on PATH, with the arguments given.
ABC_RUNNER = (
    "import os, sys\n"
    "try:\n"
    "    import pyosys\n"
    "    exe = os.path.join(os.path.dirname(pyosys.__file__), 'yosys-abc')\n"
    "except ImportError:\n"
    "    exe = 'yosys-abc'\n"
    "if not os.path.isfile(exe):\n"
    "    exe = 'yosys-abc'\n"
    "os.execvp(exe, [exe, *sys.argv[1:]])\n"
)
# ABC sources `abc.rc` from its working folder and the two above it, and `$HOME/.abc.rc`, before its -c command:
# a file there (left by an earlier simulation of the answer) could print "Property proved." `-s` reads none.
ABC_FLAGS = ("-s", "-c")
# The wheel's ABC where this machine's path to it exists where the command runs (no interpreter in front: ~60 ms
# a run), else ABC_RUNNER in the executor's Python. Arguments: the path, the Python, then ABC's own.
_ABC_DIRECT = 'b=$1; py=$2; shift 2; if [ -x "$b" ]; then exec "$b" "$@"; fi; exec "$py" -c "$0" "$@"'


@attrs.frozen
class _Side:
    """One design written into the stage folder: the names Yosys and Icarus are given."""

    units: tuple[str, ...]  # compilation units, relative to the stage folder
    incdirs: tuple[str, ...]
    script_units: tuple[str, ...]  # the same units under names safe to write into a Yosys script
    script_incdirs: tuple[str, ...]
    names: dict[str, str]  # stage-relative name -> the file's own path (for messages)


def _materialise(root: Path, side: str, files: Mapping[str, str]) -> _Side:
    units, incdirs, script_units, script_incdirs, names = [], [], [], [], {}
    for i, (rel, text) in enumerate(sorted(files.items())):
        try:
            clean = safe_relpath(rel).as_posix()
        except UnsafePath:
            clean = f"_unsafe_{i}.sv"
        name = f"{side}/{clean}"
        dest = root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        names[name] = rel
        d = str(Path(name).parent)
        if d not in incdirs:
            incdirs.append(d)
        if SAFE_PATH_RE.match(d) and d not in script_incdirs:
            script_incdirs.append(d)
        if is_header(rel):
            continue
        units.append(name)
        if SAFE_PATH_RE.match(name):
            script_units.append(name)
        else:
            # A name a script could misread (spaces, `;`, quotes...): Yosys gets a copy under a name of ours.
            alias = f"{side}/_unit_{i}.sv"
            (root / alias).write_text(text)
            names[alias] = rel
            script_units.append(alias)
    return _Side(tuple(units), tuple(incdirs), tuple(script_units), tuple(script_incdirs), names)


@attrs.frozen
class _Formal:
    outcome: str  # proved | cex | bounded | undecided | error | skipped | timeout
    engine: str = ""  # pdr | bmc
    frames: tuple[dict[str, int], ...] = ()  # a counterexample's inputs per frame
    bound: int = 0
    note: str = ""
    seconds: float = 0.0
    nolatches: bool = False  # Yosys needed -nolatches to read the designs
    answer_side: bool = False  # the answer made the formal step fail or skip (an error only its side has)
    suspect: str = ""  # a counterexample's answer holds a construct the two tools read differently (`_proof_mismatch`)


@attrs.frozen
class _Views:
    """Each side as Icarus preprocessed it and `view.neutralise`d it, with its line map; None where Icarus's
    preprocessor failed."""

    gold: tuple[view.Neutralised, dict[int, tuple[str, int]] | None] | None
    gate: tuple[view.Neutralised, dict[int, tuple[str, int]] | None] | None
    missing_tool: bool = False


def _proof_mismatch(text: str, gold_text: str, top: str, timing: Any) -> str:
    """Why a proof of the answer's `text` does not bind what the simulator runs (`view.simulation_mismatch`, then
    its clocks on the elaborated design, `view.clock_edges`), or "". An edge of the clock the reference never takes
    counts too: the proof steps a register of either edge in the same frame, the simulator half a cycle apart (a
    red-team answer compared a `negedge` and a `posedge` copy of an input behind a trigger and was proved)."""
    resets = (timing.reset.name,) if timing.reset else ()
    clocks = tuple(timing.clocks)
    why = view.simulation_mismatch(text, top)
    if why:
        return why
    try:
        why, edges = view.clock_edges(text, top, clocks, resets)
    except Exception:  # hostile text pyslang cannot elaborate as these rules expect: no proof, no crash
        return "a design whose clocks this check cannot follow"
    if why:
        return why
    extra = edges - _reference_edges(gold_text, top, clocks, resets)
    if extra:
        return (
            f"a `{sorted(extra)[0]}` of the clock, which the reference never takes: the proof steps the registers of "
            "either edge in the same frame, the simulator half a cycle apart"
        )
    return ""


@functools.lru_cache(maxsize=64)
def _reference_edges(text: str, top: str, clocks: tuple[str, ...], resets: tuple[str, ...]) -> frozenset[str]:
    """The edges of its clocks the reference takes (both, where they cannot be read: the answer is not held to
    what the reference's own text could not show)."""
    try:
        why, edges = view.clock_edges(text, top, clocks, resets)
    except Exception:
        return frozenset({"posedge", "negedge"})
    return edges if not why else frozenset({"posedge", "negedge"})


# The reference's compiled testbench (`EquivalenceStage._simulate`), per reference, plan and stimulus capacity, and
# the nonce its trace lines carry (this process's own: the reference is trusted and runs alone).
_GOLD_VVPS = Kept(128)
_GOLD_VVP_MAX = 8 << 20
_GOLD_NONCE = secrets.token_hex(8)

# The reference's trace (`EquivalenceStage._simulate`) per testbench and stimulus: the task's own random runs are the
# same for every sample of a task (`EquivalenceStage._stimulus`), so the reference runs them once per task. Kept only
# from a run before any code of an answer ran in its workspace; a trace of more output than this is not kept.
_GOLD_TRACES = Kept(64)
_GOLD_TRACE_MAX = 1 << 20
# The task's random runs and their stimulus file, per seed, plan and options (generated in Python: ~1-2 ms).
_TASK_STIMULI = Kept(64)


def _within(limit: float, seconds: float) -> str:
    """The limit an answer's run ended at: its wall-clock `limit`, or the CPU time (`cpu_limit`, whole seconds)
    when it ended before the wall clock could."""
    if seconds < limit:
        return f"{cpu_seconds(cpu_limit(limit))} s of CPU time"
    return f"{limit:g} s"


def task_seed(task: Any) -> int:
    """The seed of a task's random runs: from the parts of the task that define its checks
    (`Task.stimulus_fingerprint`), the same for every sample, so the samples of a group are compared on the same
    inputs and the reference runs them once."""
    digest = hashlib.sha256(f"equivalence\0{task.stimulus_fingerprint()}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def answer_seed(task: Any, files: Mapping[str, str], salt: int = 0) -> int:
    """The seed of an answer's own random runs: 256 bits of the task and the answer's files. The engine's `ctx.seed`
    (31 bits) is as public, and narrow enough that an answer could be ground (a comment changed until its seed is
    one whose inputs it was built to match: ~2 CPU-hours in Python, a red-team pass, 2026-11-29); no text can be
    searched to a chosen one of these."""
    digest = hashlib.sha256(
        f"equivalence-answer\0{task.stimulus_fingerprint()}\0{hash_json(dict(files))}\0{salt}".encode()
    ).digest()
    return int.from_bytes(digest, "big")


def _reference_key(ctx: StageContext, work: Path, side: _Side, *what: Any) -> str:
    """What an artifact of the reference kept across candidates (`_GOLD_VIEWS`, `_GOLD_VVPS`) depends on: the
    executor and its image, Icarus's version, the side's units, include folders and every file's text (headers
    too), and `what` the artifact is."""
    every = sorted((n, (work / n).read_text(errors="replace")) for n in side.names)
    return hashlib.sha256(
        json.dumps(
            [
                type(ctx.executor).__name__,
                str(getattr(ctx.executor, "image", "")),
                _version(("iverilog", "-V")),
                side.units,
                side.script_units,
                side.incdirs,
                every,
                *what,
            ],
            ensure_ascii=False,
        ).encode("utf-8", "surrogatepass")
    ).hexdigest()


# The reference's side of the miter (`EquivalenceStage._gold_rtlil`) as Yosys's RTLIL, per reference file, text, script
# and Yosys: read, elaborated and x-encoded once per task, not once per proof. None: the reference's side alone did
# not read (the full script runs, and says why).
_GOLD_RTLILS = Kept(64)
_GOLD_RTLIL_MAX = 4 << 20
GOLD_RTLIL = "gold.il"

# The reference's view (`EquivalenceStage._views`), per its texts and include folders: Icarus preprocesses it once
# per task, not once per sample.
_GOLD_VIEWS = Kept(256)

# Whether a reference proves against itself (`EquivalenceStage._self_proof`), per reference text, plan and toolchain.
SELF_PROOF_VERSION = "3"  # 2: prints dropped from the proof (a reference with a $display proves now); 3: only
# decided outcomes (proved, cex) kept on disk, so older "undecided" entries are read no more
SELF_PROOF_BUDGET = 2  # x `formal_timeout`: the self-proof's PDR budget, and an undecided answer's second try
_SELF_PROOFS: dict[str, bool] = {}
_SELF_LOCK = threading.Lock()


def _self_proof_dir() -> Path:
    from rtlreward.cache import default_cache_dir

    return default_cache_dir() / "equivalence-self-proof"


def _read_bytes(path: Path, limit: int) -> bytes | None:
    """A file of the stage's folder up to `limit` bytes; None when it is missing, larger, or a symlink."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > limit:
            return None
        return path.read_bytes()
    except OSError:
        return None


def _read_small(path: Path, limit: int = 4096) -> str | None:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > limit:
            return None
        return path.read_text(errors="replace")
    except OSError:
        return None


_PP_LINE_RE = re.compile(r"\b(gold|gate)\.ys\.v:(\d+)")


def _map_lines(msg: str, maps: Mapping[str, Mapping[int, tuple[str, int]] | None]) -> str:
    """`gate.ys.v:12` in a Yosys message -> the answer's file and line (the reference's, prefixed); without a map,
    `the answer (preprocessed), line 12`."""

    def sub(m: Any) -> str:
        side, line = m.group(1), int(m.group(2))
        where = (maps.get(f"{side}.ys.v") or {}).get(line)
        who = "reference " if side == "gold" else ""
        if where is None:
            return f"{who or 'the answer '}(preprocessed) line {line}"
        return f"{who}{where[0]}:{where[1]}"

    return _PP_LINE_RE.sub(sub, msg)


@attrs.frozen
class _Sim:
    trace: diffsim.Trace | None
    error: str = ""  # compile error or why it did not run
    seconds: float = 0.0
    timed_out: bool = False
    limit: Any = None  # rtlreward.sandbox.Exhaustion: the compile ended at a sandbox limit (memory, stack)
    high: diffsim.Trace | None = None  # the samples of the clock's high phase (`diffsim.parse_phases`)
    kept: bool = False  # the reference's trace of an earlier sample of the task (`seconds`: that run's)


class EquivalenceStage(Stage):
    name = "equivalence"
    version = "4"  # 2: outputs compared in both phases of the clock; 3: simulation first (`order`), prints out of
    # the proof, functions writing module signals refused; 4: clocks followed through the elaborated design, a
    # `defparam`, a generate `case`, hierarchical references and blocking writes to a submodule's outputs unproved,
    # a design's further clocks rising on random cycles (`diffsim`)
    # Stable codes of this stage's own ids in results rows (rtlreward.codes).
    codes: ClassVar[dict[str, str]] = {"sim-timeout": "timeout", "compile-failed": "compile_error"}
    requires = ("safety",)
    weight = 1.0
    description = "formal (Yosys/ABC) and simulated (Icarus) equivalence to the task's reference design"
    default_timeout = 30.0
    # Its budgets come from the reference already (the self-proof's, the reference's simulation time): the
    # engine's per-task calibration (rtlreward.calibration) leaves its limit alone.
    calibrate = False

    def tool_versions(self) -> dict[str, str]:
        py = _pyosys_version()
        return {
            "yosys": f"pyosys {py}" if py else _version(("yosys", "-V")),
            "yosys_binary": _version(("yosys", "-V")),
            "abc": f"pyosys {py}" if py else _version(("yosys-abc", "-c", "version")),
            "iverilog": _version(("iverilog", "-V")),
        }

    @staticmethod
    def _yosys_argv(ctx: StageContext, script: str) -> list[str]:
        """The command that runs a Yosys script (see YOSYS_RUNNER and the `yosys` option)."""
        chosen = str({**DEFAULTS, **ctx.options}.get("yosys") or "auto")
        if chosen != "auto":
            return [chosen, "-q", "-s", script]
        return [ctx.python, "-I", "-S", "-c", YOSYS_RUNNER, script, _pyosys_dir() or "/nonexistent"]

    @staticmethod
    def _abc_argv(ctx: StageContext, command: str) -> list[str]:
        """The command that runs an ABC script (see ABC_RUNNER and the `yosys_abc` option)."""
        chosen = str({**DEFAULTS, **ctx.options}.get("yosys_abc") or "auto")
        if chosen != "auto":
            return [chosen, *ABC_FLAGS, command]
        base = _pyosys_dir()
        if not base:
            return [ctx.python, "-c", ABC_RUNNER, *ABC_FLAGS, command]
        exe = os.path.join(base, "pyosys", "yosys-abc")
        return ["sh", "-c", _ABC_DIRECT, ABC_RUNNER, exe, ctx.python, *ABC_FLAGS, command]

    # -- helpers -------------------------------------------------------------------------------------------
    def _fail(
        self, status: Status, msg: str, code: str, verdict: str = "unknown", **metrics: Any
    ) -> StageResult:
        d = Diagnostic(msg, code=code, severity="error" if status is not Status.SKIPPED else "info")
        return self.result(
            status, 0.0, metrics={"equivalence": verdict, **metrics}, diagnostics=[d], feedback=msg
        )

    def _views(self, ctx: StageContext, work: Path, gold: _Side, gate: _Side) -> _Views:
        """Both designs as Icarus preprocesses them (`iverilog -g2012 -E`, the program and defines the simulation
        runs), then `view.neutralise`d: the text every tool that judges the answer reads. A side no preprocessor
        would change (`rtlreward_hdl.preprocess.inert`) is its units' texts joined as `iverilog -E` joins them,
        read in this process; the reference's view is remembered per text (it is the same for every sample of a
        task); what is left runs in one sandboxed command."""
        texts = {
            side: [(u, (work / u).read_text(errors="replace")) for u in files.script_units]
            for side, files in (("gold", gold), ("gate", gate))
        }
        gold_key = _reference_key(ctx, work, gold, "view")
        preprocessed: dict[str, str | None] = {}
        known, kept = _GOLD_VIEWS.lookup(gold_key)
        if known:
            preprocessed["gold"] = kept
        for side in ("gold", "gate"):
            if side not in preprocessed and inert(t for _, t in texts[side]):
                preprocessed[side] = "".join(t for _, t in texts[side])
        script = []
        for side, files in (("gold", gold), ("gate", gate)):
            if side in preprocessed:
                continue
            # the units under names safe anywhere (iverilog passes file names on one per line)
            argv = ["iverilog", "-g2012", "-E", "-o", f"{side}.pp.v", *(f"-I{d}" for d in files.incdirs)]
            argv += list(files.script_units)
            quoted = " ".join(shlex.quote(a) for a in argv)
            script.append(f"{quoted} >{side}.pp.err 2>&1; echo $? >{side}.pp.rc")
        missing = False
        if script:
            res = ctx.run(["sh", "-c", "\n".join(script)], cwd=work, timeout=min(float(ctx.timeout), 10.0))
            missing = _missing_tool(res, "sh")
            for side in ("gold", "gate"):
                if side in preprocessed:
                    continue
                rc = _read_small(work / f"{side}.pp.rc")
                missing = missing or (rc or "").strip() == "127"  # the shell found no iverilog
                text = _read_small(work / f"{side}.pp.v", limit=view.MAX_TEXT)
                ok = not res.timed_out and text is not None and (rc or "").strip() == "0"
                preprocessed[side] = text if ok else None
        if preprocessed["gold"] is not None:
            _GOLD_VIEWS.put(gold_key, preprocessed["gold"])
        out: dict[str, Any] = {}
        for side, files in (("gold", gold), ("gate", gate)):
            text = preprocessed[side]
            if text is None or len(text) > view.MAX_TEXT:
                out[side] = None
                continue
            n = view.neutralise(text)
            (work / f"{side}.ys.v").write_text(view.without_prints(n.text))
            units = [(files.names.get(u, u), t) for u, t in texts[side]]
            out[side] = (n, view.line_map(units))
        return _Views(out["gold"], out["gate"], missing)

    def _yosys(self, ctx: StageContext, work: Path, script: str, name: str) -> Any:
        opts = {**DEFAULTS, **ctx.options}
        (work / name).write_text(script)
        return ctx.run(
            self._yosys_argv(ctx, name),
            cwd=work,
            timeout=min(float(ctx.timeout), float(opts["yosys_seconds"])),
            memory_mb=int(opts["yosys_memory_mb"]),
        )

    def _abc_chain(self, ctx: StageContext, command: str) -> list[str] | None:
        """ABC's argv to run from the Yosys runner's process when the miter is written (YOSYS_RUNNER's chain):
        only with both tools on "auto" and the wheel's ABC binary found here."""
        opts = {**DEFAULTS, **ctx.options}
        if str(opts.get("yosys") or "auto") != "auto" or str(opts.get("yosys_abc") or "auto") != "auto":
            return None
        base = _pyosys_dir()
        exe = os.path.join(base, "pyosys", "yosys-abc") if base else ""
        return [exe, *ABC_FLAGS, command] if exe and os.path.isfile(exe) else None

    def _warm_proof(
        self,
        ctx: StageContext,
        work: Path,
        name: str,
        reads: tuple[str, ...],
        limit: float,
        abc: list[str],
        abc_limit: float,
    ) -> tuple[Any, Any] | None:
        """The chain of `_yosys_then_abc` on a warm Yosys server (`warm`): the files the script reads are sent,
        what the proof wrote comes back into `work`. None where no server runs or one failed to answer."""
        opts = {**DEFAULTS, **ctx.options}
        pool = warm.pool_for(ctx.executor, int(opts["yosys_memory_mb"]), _pyosys_dir())
        if pool is None:
            return None
        try:
            files = {
                n: (work / n).read_text(encoding="utf-8", errors="surrogateescape") for n in (*reads, name)
            }
        except OSError:
            return None
        if any("/" in n for n in files):
            return None
        wanted = (formal.AIG, formal.MAP, "pdr.cex")
        probe = getattr(ctx.executor, "is_cancelled", None)
        cancelled = (lambda: bool(probe(ctx.workspace))) if callable(probe) else None
        got = pool.prove(
            files,
            name,
            limit,
            abc,
            abc_limit,
            wanted,
            cancelled,
            abc_unless_decided=formal.AIG,
            builtin_techmap=True,
        )
        if got is None:
            return None
        for n in wanted:
            (work / n).unlink(missing_ok=True)
            if got["files"].get(n) is not None:
                (work / n).write_bytes(got["files"][n])
        rc, timed_out = int(got["rc"]), bool(got["timed_out"])
        argv = ("yosys-server", name)
        common = {"argv": argv, "duration": float(got["duration"]), "sandboxed": True}
        if not got["yosys_done"]:
            cut = timed_out or rc in (-signal.SIGALRM, 128 + signal.SIGALRM)
            res = CommandResult(returncode=rc, stdout="", stderr=got["stderr"], timed_out=cut, **common)
            return res, None
        yosys_res = CommandResult(returncode=0, stdout="", stderr=got["stderr"], **common)
        abc_res = CommandResult(returncode=rc, stdout=got["stdout"], timed_out=timed_out, **common)
        return yosys_res, abc_res

    def _yosys_then_abc(
        self,
        ctx: StageContext,
        work: Path,
        script: str,
        name: str,
        abc: list[str],
        abc_limit: float,
        reads: tuple[str, ...] = (),
    ) -> tuple[Any, Any]:
        """The miter's Yosys script and, when it succeeds, ABC, in one sandboxed command (YOSYS_RUNNER's chain).
        Returns (Yosys's result, ABC's result or None when ABC did not run in it). Yosys keeps its own limit
        (SIGALRM in the runner, reported as a timeout); ABC gets `abc_limit` on top."""
        opts = {**DEFAULTS, **ctx.options}
        (work / name).write_text(script)
        limit = min(float(ctx.timeout), float(opts["yosys_seconds"]))
        served = self._warm_proof(ctx, work, name, reads, limit, abc, abc_limit)
        if served is not None:
            return served
        nonce = f"rtlreward-abc-{secrets.token_hex(8)}"
        res = ctx.run(
            [*self._yosys_argv(ctx, name), f"{limit:g}", nonce, *abc],
            cwd=work,
            timeout=limit + abc_limit,
            memory_mb=int(opts["yosys_memory_mb"]),
            # ABC is not started for a miter decided from its file, where this folder is visible to the command
            env={
                "RTLREWARD_DECIDE_WITH": str(Path(yosys_server.__file__).parent),
                "RTLREWARD_DECIDE_FILE": formal.AIG,
            },
        )
        head, sep, tail = res.stdout.partition(nonce + "\n")
        if not sep:  # Yosys failed or was cut, or ABC is not where the command ran: Yosys's result alone
            cut = res.returncode in (
                -signal.SIGALRM,
                128 + signal.SIGALRM,
            )  # the alarm, as the sandbox reports it
            return attrs.evolve(res, timed_out=res.timed_out or cut), None
        yosys_res = attrs.evolve(res, returncode=0, stdout=head, timed_out=False)
        return yosys_res, attrs.evolve(res, stdout=tail, stderr="")

    def _formal(
        self,
        ctx: StageContext,
        work: Path,
        plan: diffsim.SimPlan,
        gold_file: str,
        gate_file: str,
        *,
        drop_ports: tuple[str, ...] = (),
        budget: float | None = None,
        maps: Mapping[str, Mapping[int, tuple[str, int]] | None] | None = None,
    ) -> _Formal:
        """Build the miter of `gold_file` and `gate_file` (single preprocessed files in `work`) and prove it. The
        names the proof adds are fresh (`formal.Names.fresh`); Yosys's messages are rewritten before anyone sees
        them. `answer_side` says whether a failure lay in reading the answer."""
        opts = {**DEFAULTS, **ctx.options}
        names = formal.Names.fresh()
        wrapper = formal.wrapper(plan.inputs, plan.outputs, plan.reset, plan.reset_cycles, names, plan.clocks)
        (work / "wrapper.sv").write_text(wrapper)
        yosys = self._yosys_argv(ctx, "eq.ys")[0]
        mark_start, mark_gold, mark_gate = (f"m{secrets.token_hex(8)}" for _ in range(3))
        seconds = 0.0
        budget = float(opts["formal_timeout"]) if budget is None else budget
        chain = self._abc_chain(ctx, formal.abc_pdr(budget))
        abc_res = None
        for nolatches in (False, True):
            gold_rtlil, took = self._gold_rtlil(ctx, work, gold_file, plan.top, nolatches)
            seconds += took
            script = formal.miter_script(
                [gold_file],
                [gate_file],
                plan.top,
                "wrapper.sv",
                names,
                nolatches=nolatches,
                drop_ports=drop_ports,
                marks=(mark_gold, mark_gate),
                gold_rtlil=gold_rtlil,
            )
            script = f"log -stderr {mark_start}\n" + script
            if chain:
                reads = (gold_rtlil or gold_file, gate_file, "wrapper.sv")
                res, abc_res = self._yosys_then_abc(ctx, work, script, "eq.ys", chain, budget + 10, reads)
            else:
                res = self._yosys(ctx, work, script, "eq.ys")
            seconds += res.duration
            if res.returncode == 0 or formal.LATCH_ERROR not in formal.yosys_error(res.output):
                break
        if _missing_tool(res, yosys) or _missing_tool(res, "yosys"):
            return _Formal(
                "missing",
                note="cannot run Yosys: install the pyosys wheel (`pip install pyosys`) or Yosys (`apt-get install yosys`)",
            )
        marks = {line.strip() for line in res.stderr.splitlines()}
        gold_read, gate_read = mark_gold in marks, mark_gate in marks
        if not res.timed_out and res.returncode != 0 and mark_start not in marks:
            # Yosys failed before reading anything: the tool, not a design (no share folder, a broken install)
            msg = formal.yosys_error(res.output, names) or f"exit {res.returncode}"
            return _Formal("missing", note=f"Yosys does not start where the design runs: {msg}")
        if res.timed_out or res.returncode != 0 or not (work / formal.AIG).is_file():
            answer_side = gold_read and not gate_read
            if res.timed_out:
                limit = min(float(ctx.timeout), float(opts["yosys_seconds"]))
                what = "reading the answer" if answer_side else "building the miter"
                note = f"Yosys did not finish {what} within {limit:g} s or its memory budget"
                return _Formal("timeout", note=note, seconds=seconds, answer_side=answer_side)
            msg = formal.yosys_error(res.output, names) or f"exit {res.returncode}"
            msg = _map_lines(msg, maps or {})
            whose = "the answer" if answer_side else "the designs"
            return _Formal(
                "error",
                note=f"Yosys could not read or compare {whose}: {msg}",
                seconds=seconds,
                answer_side=answer_side,
            )
        decided = self._decided(work, seconds, nolatches)
        if decided is not None:
            return decided
        if abc_res is not None:  # ABC ran in Yosys's command (its time is in that command's duration)
            res = abc_res
        else:
            res = ctx.run(self._abc_argv(ctx, formal.abc_pdr(budget)), cwd=work, timeout=budget + 10)
            seconds += res.duration
        if _missing_tool(res, "yosys-abc") or (
            res.returncode != 0 and "yosys-abc" in res.stderr and "No such file" in res.stderr
        ):
            return _Formal(
                "missing",
                note="cannot run ABC: install pyosys (`pip install pyosys`) or `apt-get install yosys`",
            )
        pdr = formal.parse_abc(res.stdout) if not res.timed_out else formal.AbcResult("undecided")
        engine, cex_file, found = "pdr", "pdr.cex", pdr
        if pdr.verdict == "undecided":
            t = float(opts.get("bmc_timeout", DEFAULTS["bmc_timeout"]))
            frames = int(opts.get("bmc_frames", DEFAULTS["bmc_frames"]))
            res = ctx.run(self._abc_argv(ctx, formal.abc_bmc(t, frames)), cwd=work, timeout=t + 10)
            seconds += res.duration
            engine, cex_file = "bmc", "bmc.cex"
            found = formal.parse_abc(res.stdout) if not res.timed_out else formal.AbcResult("undecided")
        if found.verdict == "proved":
            return _Formal("proved", engine, seconds=seconds, nolatches=nolatches)
        if found.verdict == "bounded" and found.frame:
            return _Formal("bounded", engine, bound=found.frame, seconds=seconds, nolatches=nolatches)
        if found.verdict == "cex":
            try:
                inputs = formal.parse_map((work / formal.MAP).read_text())
                frames = formal.parse_cex((work / cex_file).read_text(), inputs)
            except OSError:
                frames = []
            if frames:
                return _Formal("cex", engine, frames=tuple(frames), seconds=seconds, nolatches=nolatches)
            return _Formal(
                "undecided", engine, note="ABC reported a difference but no trace", seconds=seconds
            )
        return _Formal(
            "undecided", engine, note=f"the proof did not close within {budget:g} s", seconds=seconds
        )

    def _gold_rtlil(
        self, ctx: StageContext, work: Path, gold_file: str, top: str, nolatches: bool
    ) -> tuple[str | None, float]:
        """(the RTLIL file in `work` holding the reference's side of the miter, or None where it is not to be had;
        the seconds a Yosys run for it took). Yosys writes it once per task, reading nothing but the reference, in
        a folder of its own; later proofs read it back instead of the reference's text."""
        opts = {**DEFAULTS, **ctx.options}
        try:
            text = (work / gold_file).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            return None, 0.0
        script = formal.reference_script([gold_file], top, GOLD_RTLIL, nolatches=nolatches)
        key = hashlib.sha256(
            repr(
                (
                    type(ctx.executor).__name__,
                    str(getattr(ctx.executor, "image", "")),
                    str(opts.get("yosys") or "auto"),
                    _pyosys_version(),
                    _pyosys_dir(),
                    gold_file,
                    text,
                    script,
                )
            ).encode("utf-8", "surrogatepass")
        ).hexdigest()
        seconds = 0.0
        known, raw = _GOLD_RTLILS.lookup(key)
        if not known:
            sub = work / f"gold_rtlil_{secrets.token_hex(4)}"
            sub.mkdir()
            (sub / gold_file).write_text(text, encoding="utf-8", errors="surrogateescape")
            res = self._yosys(ctx, sub, script, "gold.ys")
            seconds = res.duration
            raw = _read_bytes(sub / GOLD_RTLIL, _GOLD_RTLIL_MAX) if res.returncode == 0 else None
            if raw is not None or not res.timed_out:  # a machine's time limit is asked again next time
                _GOLD_RTLILS.put(key, raw)
            shutil.rmtree(sub, ignore_errors=True)
        if raw is None:
            return None, seconds
        (work / GOLD_RTLIL).write_bytes(raw)
        return GOLD_RTLIL, seconds

    @staticmethod
    def _decided(work: Path, seconds: float, nolatches: bool) -> _Formal | None:
        """The miter decided from its AIGER file without ABC (`yosys_server.aiger_decide`): its output the constant 0
        after Yosys's optimisation (`structural`), a combinational miter with few inputs evaluated on every input
        pattern (`exhaustive`), a sequential one with few inputs walked through every reachable state (`explicit`),
        or a random input sequence that sets the output (`random`, a counterexample only). The warm server does not
        start ABC for these; where ABC ran in the one-shot command its verdict is the same."""
        got = yosys_server.aiger_decide(str(work / formal.AIG))
        if got is None:
            return None
        verdict, engine, steps = got
        if verdict == "proved":
            return _Formal("proved", engine, seconds=seconds, nolatches=nolatches)
        try:
            inputs = formal.parse_map((work / formal.MAP).read_text())
        except OSError:
            return None
        frames = []
        for bits in steps:
            frame: dict[str, int] = {}
            for idx, (name, pos) in inputs.items():
                frame[name] = frame.get(name, 0) | (bits.get(idx, 0) << pos)
            frames.append(frame)
        return _Formal("cex", engine, frames=tuple(frames), seconds=seconds, nolatches=nolatches)

    def _self_proof(self, ctx: StageContext, work: Path, plan: diffsim.SimPlan, gold_file: str) -> bool:
        """Whether the reference proves against a renamed copy of itself within the answer's budget (twice it,
        to be fair to the task): where it does, an answer that is neither proved nor refuted is suspect. Cached
        per reference text, plan and toolchain, in this process and on disk."""
        opts = {**DEFAULTS, **ctx.options}
        text = (work / gold_file).read_text(errors="replace")
        budget = SELF_PROOF_BUDGET * float(opts["formal_timeout"])
        key = hashlib.sha256(
            repr((SELF_PROOF_VERSION, text, plan, budget, opts["yosys"], self.tool_versions())).encode(
                "utf-8", "surrogatepass"
            )
        ).hexdigest()[:32]
        with _SELF_LOCK:
            if key in _SELF_PROOFS:
                return _SELF_PROOFS[key]
        disk = _self_proof_dir() / f"{key}.json"
        try:
            proved = bool(json.loads(disk.read_text())["proved"])
        except (OSError, ValueError, KeyError, TypeError):
            sub = work / "self"
            sub.mkdir(exist_ok=True)
            shutil.copyfile(work / gold_file, sub / "gold.v")
            shutil.copyfile(work / gold_file, sub / "gate.v")
            fres = self._formal(ctx, sub, plan, "gold.v", "gate.v", budget=budget)
            proved = fres.outcome == "proved"
            # On disk only what the logic decided: "undecided" and "bounded" end at ABC's time limit, which a slower
            # or busier machine reaches sooner, and one kept for good made the task simulation-only for good (every
            # undecided answer then passes on a simulation: red-team reading, 2026-11-29). Those stay in this process.
            if fres.outcome in ("proved", "cex"):
                with contextlib.suppress(OSError):
                    disk.parent.mkdir(parents=True, exist_ok=True)
                    tmp = disk.with_suffix(f".{secrets.token_hex(4)}.tmp")
                    tmp.write_text(json.dumps({"proved": proved, "outcome": fres.outcome}))
                    tmp.replace(disk)
            if fres.outcome in ("proved", "cex", "undecided", "bounded"):  # a Yosys time limit is asked again
                with _SELF_LOCK:
                    _SELF_PROOFS[key] = proved
            return proved
        with _SELF_LOCK:
            _SELF_PROOFS[key] = proved
        return proved

    def _simulate(
        self,
        ctx: StageContext,
        work: Path,
        side: str,
        files: _Side,
        plan: diffsim.SimPlan,
        stim: diffsim.Stimulus,
        timeout: float,
        stim_hex: str,
        *,
        keep: bool = False,
    ) -> _Sim:
        """One design's run of the testbench on `stim`. The reference's: its trace is kept per testbench and
        stimulus where `keep` says no code of the answer has run in this workspace yet, and a kept one is used."""
        sim_dir = work / f"sim_{side}"
        rel = f"sim_{side}"
        run_argv = ["vvp", "-n", "tb.vvp"]
        key = trace_key = None

        def kept_from(run: CommandResult, low: diffsim.Trace, high: diffsim.Trace | None) -> None:
            """Keep the reference's trace for the task's other samples: from a run before any code of the answer
            ran here (`keep`) that ended by itself with output of a size worth holding."""
            small = len(run.stdout) <= _GOLD_TRACE_MAX
            if trace_key is not None and keep and not run.timed_out and run.returncode == 0 and small:
                _GOLD_TRACES.put(trace_key, (low, high, run.duration))

        if side == "gold":
            # The reference's testbench is compiled once per task, plan and stimulus length bucket and kept in this
            # process (the reference is trusted, and nothing of the answer has run in this workspace yet); the
            # nonce of its trace lines is this process's own.
            nonce, capacity = _GOLD_NONCE, 1 << max(8, (len(stim) - 1).bit_length())
            run_argv.append(f"+{diffsim.CYCLES_PLUSARG}={len(stim)}")
            key = _reference_key(ctx, work, files, "testbench", repr(plan), capacity)
            trace_key = hashlib.sha256(f"{key}\0{len(stim)}\0{stim_hex}".encode()).hexdigest()
            kept = _GOLD_TRACES.get(trace_key)
            if kept is not None:
                low, high, seconds = kept
                return _Sim(low, "", seconds, high=high, kept=True)
        sim_dir.mkdir(parents=True, exist_ok=True)
        (sim_dir / "stim.hex").write_text(stim_hex)
        if side == "gold":
            program = _GOLD_VVPS.get(key)
            if program is not None:
                (sim_dir / "tb.vvp").write_bytes(program)
                run = ctx.run(
                    ["timeout", "-s", "KILL", f"{timeout:g}", *run_argv], cwd=sim_dir, timeout=timeout + 5
                )
                if _missing_tool(run, "vvp") or run.returncode == 127:
                    return _Sim(None, "missing")
                cut = run.timed_out or run.returncode in (124, 137)
                low, high = diffsim.parse_phases(run.stdout, nonce, plan, len(stim))
                kept_from(run, low, high)
                return _Sim(low, "", run.duration, cut, high=high)
            tb_name, tb = diffsim.testbench(plan, nonce, len(stim), "stim.hex", capacity=capacity)
        else:
            nonce = secrets.token_hex(8)
            tb_name, tb = diffsim.testbench(plan, nonce, len(stim), "stim.hex")
        (sim_dir / "tb.sv").write_text(tb)
        argv = ["iverilog", "-g2012", "-o", f"{rel}/tb.vvp", "-s", tb_name]
        argv += [f"-I{d}" for d in files.incdirs]
        argv += [f"{rel}/tb.sv", *files.units]
        argv = self._direct_compile(ctx, work, rel, tb_name, tb, files) or argv
        # The compile and the run in one sandboxed command (rtlreward_hdl.simrun.compile_then_run).
        res, run = compile_then_run(
            ctx,
            argv,
            run_argv,
            cwd=work,
            run_cwd=sim_dir,
            compile_limit=float(ctx.timeout),
            run_limit=timeout,
            # The answer's run is also cut at half its limit in CPU time (a loop that never advances time burns
            # nothing else), however loaded the machine; the reference's run has the wall clock alone.
            run_cpu=cpu_limit(timeout) if side == "gate" else None,
        )
        if key is not None and res is not None and res.returncode == 0 and not run.timed_out:
            program = _read_bytes(sim_dir / "tb.vvp", _GOLD_VVP_MAX)
            if program is not None:
                _GOLD_VVPS.put(key, program)
        if res is None:
            if _missing_tool(run, "sh"):
                return _Sim(None, "missing")
            what = "did not finish" if run.timed_out else f"did not run ({run.output.strip()[:200]})"
            return _Sim(None, f"iverilog {what}", run.duration)
        if _missing_tool(res, "iverilog"):
            return _Sim(None, "missing")
        if res.returncode != 0:
            lines = [ln.strip() for ln in res.output.splitlines() if ln.strip() and "I give up" not in ln]
            msg = "; ".join(lines[:4])[:400] or f"iverilog exit {res.returncode}"
            for name, orig in files.names.items():
                msg = msg.replace(name, orig)
            hit = resource_exhaustion(
                res.output, res.returncode, limits=ctx.limits(), truncated=res.truncated
            )
            return _Sim(None, msg, run.duration, limit=hit)
        if _missing_tool(run, "vvp"):
            return _Sim(None, "missing")
        trace, high = diffsim.parse_phases(run.stdout, nonce, plan, len(stim))
        kept_from(run, trace, high)
        return _Sim(trace, "", run.duration, run.timed_out, high=high)

    @staticmethod
    def _direct_compile(
        ctx: StageContext, work: Path, rel: str, tb_name: str, tb: str, files: _Side
    ) -> list[str] | None:
        """Icarus's compiler (`ivl`) itself in place of the `iverilog` launcher where nothing of the testbench or
        the design is one a preprocessor would change (`rtlreward_hdl.icarus.direct_elaboration`): the same
        program, ~3 ms less. None: the launcher runs."""
        texts = {f"{rel}/tb.sv": tb}
        for u in files.units:
            try:
                texts[u] = (work / u).read_text()
            except (OSError, UnicodeDecodeError):
                return None
        if not inert(texts.values()):
            return None
        sources = [f"{rel}/tb.sv", *files.units]
        return direct_command(
            ctx.executor, work, sources, texts, tb_name, target="vvp", out=f"{rel}/tb.vvp", folder=rel
        )

    # -- the stage -----------------------------------------------------------------------------------------
    def run(self, ctx: StageContext) -> StageResult:
        task = ctx.task
        opts = {**DEFAULTS, **ctx.options}
        if opts["order"] not in ORDERS:
            return self._fail(
                Status.ERROR,
                f"stage.equivalence.options.order is {opts['order']!r}; it is one of {', '.join(ORDERS)}",
                "bad-option",
            )
        reference = hdl_only(task.reference)
        if not reference:
            return self._fail(
                Status.SKIPPED,
                "the task has no reference design, so there is nothing to compare with (equivalence needs "
                "task.reference: a task folder's reference/, VerilogEval, RTLLM, CVDP records with solutions)",
                "no-reference",
                verdict="none",
            )
        if not hdl_only(ctx.files):
            return self._fail(Status.FAILED, "the answer has no Verilog/SystemVerilog file", "no-sources")
        top = str(opts.get("top") or top_module(task, reference) or "")
        if not IDENT_RE.match(top):
            return self._fail(
                Status.ERROR,
                "cannot tell which module of the reference to compare; set the task's toplevel or "
                "stage.equivalence.options.top",
                "no-top",
            )
        gold_files = design_files(task, task.reference or {})
        gate_files = design_files(task, ctx.files)
        ref_ports = module_ports(gold_files, top)
        if not ref_ports:
            return self._fail(
                Status.ERROR, f"the reference does not declare a module {top} with ports", "no-top"
            )
        try:
            cand_ports = module_ports(gate_files, top)
        except ExpansionTooLarge as e:  # pyslang reads the answer in this process: its macros are refused first
            d = Diagnostic(e.message, code="resource-limit", fields={"limit": e.limit})
            metrics_ = {"equivalence": "unknown", "resource_limit": e.limit}
            return self.result(Status.FAILED, 0.0, metrics=metrics_, diagnostics=[d], feedback=e.message)
        except RuntimeError:  # pyslang's own limits (nesting: ~2,000 parentheses, ~1,100 `else if` or `begin`)
            return self._fail(
                Status.FAILED,
                "the answer nests deeper than the SystemVerilog parser reads (thousands of parentheses, `begin` "
                "blocks or `else if` branches), so its ports cannot be read; write it flatter (a `case`)",
                "parse-limit",
            )
        if cand_ports is None:
            return self._fail(Status.FAILED, f"no module named {top} in the answer", "missing-module")
        by_name = {p.name: p for p in cand_ports}
        missing = [p for p in ref_ports if p.name not in by_name or by_name[p.name].direction != p.direction]
        if missing:
            names = ", ".join(f"{p.direction} {p.name}" for p in missing)
            return self._fail(
                Status.FAILED,
                f"{top} lacks ports of the reference ({names}), so the two cannot be compared",
                "missing-port",
            )
        timing: Timing = infer_timing(
            ref_ports,
            gold_files,
            clock=opts.get("clock"),
            reset=opts.get("reset"),
            reset_active_low=opts.get("reset_active_low"),
        )
        outputs = tuple(p for p in ref_ports if p.direction == "output")
        inputs = tuple(p for p in ref_ports if p.direction == "input" and p.name not in timing.clocks)
        plan = diffsim.SimPlan(
            top, inputs, outputs, timing.clocks, timing.reset, max(1, int(opts["reset_cycles"]))
        )
        odd = [p for p in ref_ports if p.direction not in ("input", "output") or not p.simple]
        odd += [p for p in ref_ports if not IDENT_RE.match(p.name)]
        if not outputs:
            return self._fail(Status.ERROR, f"the reference's {top} has no output to compare", "no-outputs")
        metrics: dict[str, Any] = {
            "clock": ",".join(timing.clocks),
            "reset": timing.reset.name if timing.reset else "",
            "outputs_total": len(outputs),
            "output_bits_total": plan.output_bits,
        }
        notes: list[Diagnostic] = []
        work = ctx.stage_dir("equivalence")
        gold = _materialise(work, "gold", gold_files)
        gate = _materialise(work, "gate", gate_files)

        # 0. one view: what Icarus simulates, as every tool reads it
        views = self._views(ctx, work, gold, gate)
        if views.missing_tool:
            return self._fail(
                Status.ERROR, "Icarus Verilog is not installed: `apt-get install iverilog`", "tool-missing"
            )
        if views.gate is None:
            return self._fail(
                Status.FAILED,
                "Icarus's preprocessor rejects the answer (an undefined macro, a bad directive or an include it "
                "cannot find), so it cannot be simulated",
                "compile-failed",
                formal="skipped",
            )
        gate_view, gate_map = views.gate
        if gate_view.attributes or gate_view.pragmas:
            notes.append(
                Diagnostic(
                    f"the answer's attributes ({gate_view.attributes}) and synthesis pragmas in comments "
                    f"({gate_view.pragmas}) are ignored: the proof reads what the simulator runs",
                    severity="info",
                    code="neutralised",
                )
            )
        tested = sorted({m for text in hdl_only(ctx.files).values() for m in view.tool_tests(text)})
        if tested:
            notes.append(
                Diagnostic(
                    f"the answer tests tool macros ({', '.join(tested)}): every check reads the branch Icarus "
                    "compiles, the one the simulation runs",
                    severity="info",
                    code="tool-macro",
                )
            )
        impure = view.subroutine_state(gate_view.text)
        if impure:
            # No reference of VerilogEval or RTLLM holds one; a proof could not bind what the simulator runs, and
            # paying it as undecided would buy a hidden bug 0.25 (red-team passes, 2026-11-28).
            return self._fail(
                Status.FAILED,
                f"the answer holds {impure}; keep state in module registers written by always blocks, and write "
                "every variable of a function or task before reading it",
                "impure-function",
            )
        if views.gold is None:
            # The reference is trusted: Yosys reads its files itself (its simulation will say if Icarus cannot).
            gold_file, gold_map = "gold.raw.v", None
            gold_text = "\n".join((work / u).read_text(errors="replace") for u in gold.units) + "\n"
            (work / gold_file).write_text(gold_text)
        else:
            gold_file, gold_map = "gold.ys.v", views.gold[1]
            gold_text = views.gold[0].text
        maps = {"gold.ys.v": gold_map, "gate.ys.v": gate_map}

        # 1. what can run: the formal step's and the simulation's preconditions
        cand = {p.name: p for p in cand_ports}
        extra = tuple(p.name for p in cand_ports if p.name not in {r.name for r in ref_ports})
        widths_differ = [p.name for p in ref_ports if (cand[p.name].width or 1) != (p.width or 1)]
        why_not, answer_side = "", False
        if not opts["formal"]:
            why_not = "formal check disabled by the profile"
        elif odd:
            why_not = f"port {odd[0].name} is not a plain input/output vector"
        elif len(timing.clocks) > 1:
            why_not = f"several clocks ({', '.join(timing.clocks)})"
        elif widths_differ:
            why_not, answer_side = (
                f"the answer's port {widths_differ[0]} differs in width from the reference's",
                True,
            )
        elif any(not IDENT_RE.match(n) for n in extra):
            why_not, answer_side = "the answer has an extra port that is not a plain identifier", True
        elif gate_view.problem:
            why_not, answer_side = gate_view.problem, True
        simulates = not odd and bool(opts["simulate"])
        if extra:
            metrics["extra_ports"] = len(extra)

        def formal_step() -> _Formal:
            if why_not:
                return _Formal("skipped", note=f"no formal check: {why_not}", answer_side=answer_side)
            fres = self._formal(ctx, work, plan, gold_file, "gate.ys.v", drop_ports=extra, maps=maps)
            mismatch = (
                _proof_mismatch(gate_view.text, gold_text, plan.top, timing)
                if fres.outcome in ("proved", "cex")
                else ""
            )
            if mismatch and fres.outcome == "cex":
                return attrs.evolve(fres, suspect=mismatch)  # counted, unless the simulation does not show it
            if mismatch:
                # A proof of this text does not bind what the simulator runs, so it is not counted. A counterexample
                # still is (the simulation replays it): a construct like this never turns a refutation into the
                # undecided share.
                note = f"no proof counted: the answer holds {mismatch}"
                return _Formal("skipped", note=note, seconds=fres.seconds, answer_side=True)
            return fres

        def record(fres: _Formal) -> None:
            metrics["formal_seconds"] = round(metrics.get("formal_seconds", 0.0) + fres.seconds, 4)
            metrics["formal"] = fres.outcome
            if fres.note:
                notes.append(Diagnostic(fres.note, severity="info", code=f"formal-{fres.outcome}"))

        # 2. Simulation first (`order`): the seeded random runs through both designs. An answer they refute with
        # no credit to pay, or one Icarus rejects, earns 0 whatever a proof would say, so it costs no proof; the
        # others are proved, and a formal counterexample is then replayed in a second simulation, before the same
        # random runs (so such an answer is compared on the same stimulus as under `formal-first`).
        sim: Any = None
        skipped: _Formal | None = None
        if simulates and opts["order"] == "simulation-first" and not why_not:
            stim, replay_cycles, stim_hex = self._stimulus(
                ctx, plan, _Formal("skipped"), factor=1, per_answer=False
            )
            sim = self._compare(ctx, work, gold, gate, plan, stim, metrics, notes, stim_hex, keep=True)
            if isinstance(sim, StageResult):
                return sim
            # Refuted with no credit to pay (or rejected by Icarus): nothing a proof finds can change the reward.
            # With credit, the proof runs: a bug behind a trigger the random runs miss must cost the credit it
            # would cost with the proof first (an answer could otherwise hide one behind a cheap visible bug).
            comparison, gold_error, gate_error, gold_trace = sim
            decided = bool(gate_error) or (
                comparison is not None
                and comparison.first is not None
                and _refuted_score(plan, stim, comparison, gold_trace, opts)[0] == 0.0
            )
            if decided:  # the verdict below, as for any refuted answer
                skipped = _Formal("skipped", note="no formal check: the simulation already refutes the answer")
        fres = skipped if skipped is not None else formal_step()
        if fres.outcome == "missing":
            return self._fail(Status.ERROR, fres.note, "tool-missing")
        record(fres)

        # 3. simulation: replay a formal counterexample, then seeded random stimulus. Always, after a proof too: a
        # proof is trusted only when a simulation of the same text agrees (an incomplete sensitivity list, a
        # latch, a delay is read one way by Yosys and another by the simulator).
        if not simulates:
            reason = (
                "simulation disabled by the profile"
                if not opts["simulate"]
                else (f"port {odd[0].name} cannot be driven by the generated testbench")
            )
            return self._unsimulated(fres, plan, metrics, notes, reason, opts)
        if sim is None and fres.outcome == "proved":
            # The proof first: it is checked on the task's runs (the reference's trace kept from the first; nothing
            # of the answer has run in this workspace yet).
            stim, replay_cycles, stim_hex = self._stimulus(ctx, plan, fres, factor=1, per_answer=False)
            sim = self._compare(ctx, work, gold, gate, plan, stim, metrics, notes, stim_hex, keep=True)
            if isinstance(sim, StageResult):
                return sim
        if not _settled(sim, fres, skipped is not None):
            # The task's runs settle a pass or nothing. Anything paid in between (a refuted answer's credit, the
            # undecided share) is measured on the answer's own runs, after a formal counterexample's replay: the
            # task's inputs are the same for every sample and can be learned (from feedback, or computed from the
            # task), and an answer that matches the reference only on them earns nothing for it (red-team pass,
            # 2026-11-29: a lookup table of the task's inputs, and a replay of the reference's outputs, were paid
            # the undecided share and up to 0.55 of credit).
            stim, replay_cycles, stim_hex = self._stimulus(ctx, plan, fres, factor=1, per_answer=True)
            sim = self._compare(ctx, work, gold, gate, plan, stim, metrics, notes, stim_hex)
            if isinstance(sim, StageResult):
                return sim
        comparison, gold_error, gate_error, gold_trace = sim
        simulation_only = False
        if comparison is not None and comparison.first is None and fres.outcome != "proved":
            # Undecided: pay it in full only where the reference itself cannot be proved in budget (then
            # simulation is all there is, and it runs longer); elsewhere it is suspect.
            proves = bool(opts["formal"]) and not odd and len(timing.clocks) <= 1
            proves = proves and self._self_proof(ctx, work, plan, gold_file)
            metrics["reference_proves"] = proves
            if proves and fres.outcome in ("bounded", "undecided"):
                # The reference proved against itself with the self-proof's budget: the answer gets the same
                # before it is called undecided (a correct answer shaped like the reference then proves too).
                again = self._formal(
                    ctx,
                    work,
                    plan,
                    gold_file,
                    "gate.ys.v",
                    drop_ports=extra,
                    budget=SELF_PROOF_BUDGET * float(opts["formal_timeout"]),
                    maps=maps,
                )
                metrics["formal_seconds"] = round(metrics["formal_seconds"] + again.seconds, 4)
                if again.outcome == "proved":
                    fres = again
                    metrics["formal"] = "proved"
                    notes.append(
                        Diagnostic(
                            "proved with the reference's own budget (the first budget did not close the proof)",
                            severity="info",
                            code="formal-retry",
                        )
                    )
            if not proves and opts["formal"]:
                factor = max(1, int(opts["simulation_only_factor"]))
                more, _, more_hex = self._stimulus(
                    ctx, plan, _Formal("skipped"), factor=factor, per_answer=True, salt=1
                )
                sim = self._compare(ctx, work, gold, gate, plan, more, metrics, notes, more_hex)
                if isinstance(sim, StageResult):
                    return sim
                if sim[0] is not None:  # the longer run decides (and its counts are the ones reported)
                    stim, replay_cycles = more, 0
                    comparison, gold_error, gate_error, gold_trace = sim
            simulation_only = not proves
        return self._verdict(
            fres,
            plan,
            stim,
            replay_cycles,
            comparison,
            metrics,
            notes,
            gold_error,
            gate_error,
            gold_trace,
            opts,
            simulation_only=simulation_only,
        )

    def _stimulus(
        self,
        ctx: StageContext,
        plan: diffsim.SimPlan,
        fres: _Formal,
        *,
        factor: int,
        per_answer: bool,
        salt: int = 0,
    ) -> tuple[diffsim.Stimulus, int, str | None]:
        """The random runs, after a formal counterexample's replay when there is one; how many cycles the replay
        takes; the stimulus file's text where it is known already. The task's own runs (`per_answer=False`:
        seeded from the task, `task_seed`, the same for every sample, so the reference's trace is kept per task)
        only settle a pass (a proof they agree with) or nothing (an answer they refute with no credit); the
        answer's own (`answer_seed`: its files, and `salt`) decide everything paid in between, so an answer that knows
        the task's inputs gains nothing by matching only them."""
        opts = {**DEFAULTS, **ctx.options}
        seeds = int(opts["seeds"]) * factor
        cycles, reset_probability = int(opts["cycles"]), float(opts["reset_probability"])
        seed = answer_seed(ctx.task, ctx.files, salt) if per_answer else task_seed(ctx.task)
        key = None if per_answer else repr((seed, plan, seeds, cycles, reset_probability))
        got = None if key is None else _TASK_STIMULI.get(key)
        if got is None:
            random_stim = diffsim.random_stimulus(
                plan, seed, seeds=seeds, cycles=cycles, reset_probability=reset_probability
            )
            got = (random_stim, diffsim.stimulus_hex(plan, random_stim))
            if key is not None:
                _TASK_STIMULI.put(key, got)
        random_stim, random_hex = got
        if fres.outcome == "cex":
            # One simulation: the formal counterexample first, then the random runs (each starts with reset).
            replay = diffsim.directed_stimulus(plan, fres.frames)
            return diffsim.concat(replay, random_stim), len(replay), None
        return random_stim, 0, random_hex

    def _compare(
        self,
        ctx: StageContext,
        work: Path,
        gold: _Side,
        gate: _Side,
        plan: diffsim.SimPlan,
        stim: diffsim.Stimulus,
        metrics: dict[str, Any],
        notes: list[Diagnostic],
        stim_hex: str | None = None,
        *,
        keep: bool = False,
    ) -> StageResult | tuple[diffsim.Comparison | None, str, str, diffsim.Trace | None]:
        """Simulate both designs on `stim` and compare: (comparison, the reference's error, the answer's error,
        the reference's trace), or a result when Icarus is missing. `keep`: no code of the answer has run in this
        workspace yet, so the reference's trace may be kept for the task's other samples."""
        opts = {**DEFAULTS, **ctx.options}
        sim_timeout = float(opts["sim_timeout"])
        metrics["sim_seeds"] = metrics.get("sim_seeds", 0) + len(stim.segments)
        metrics["sim_cycles"] = metrics.get("sim_cycles", 0) + len(stim)
        gold_error = gate_error = ""
        if stim_hex is None:
            stim_hex = diffsim.stimulus_hex(plan, stim)
        g = self._simulate(ctx, work, "gold", gold, plan, stim, sim_timeout, stim_hex, keep=keep)
        if g.error == "missing":
            return self._fail(
                Status.ERROR, "Icarus Verilog is not installed: `apt-get install iverilog`", "tool-missing"
            )
        if g.trace is None or g.timed_out:
            gold_error = g.error or f"its simulation did not finish within {sim_timeout:g} s"
            notes.append(
                Diagnostic(f"the reference could not be simulated: {gold_error}", code="reference-sim")
            )
            return None, gold_error, "", None
        # A hung candidate is cut at a multiple of the reference's own time, not at the full budget.
        limit = min(sim_timeout, max(2.0, 20 * g.seconds + 1.0))
        a = self._simulate(ctx, work, "gate", gate, plan, stim, limit, stim_hex)
        ran = a.seconds + (0.0 if g.kept else g.seconds)
        metrics["sim_seconds"] = round(metrics.get("sim_seconds", 0.0) + ran, 4)
        if a.trace is None:
            gate_error = a.error
            if a.limit is not None:  # the answer asked Icarus for more than the sandbox gives: named
                notes.append(
                    Diagnostic(
                        a.limit.message.replace("the simulator", "Icarus"),
                        code="resource-limit",
                        fields={"limit": a.limit.limit},
                    )
                )
                metrics["resource_limit"] = a.limit.limit
            notes.append(
                Diagnostic(f"Icarus could not compile the answer: {gate_error}", code="compile-failed")
            )
            return None, "", gate_error, g.trace
        if a.timed_out:
            notes.append(
                Diagnostic(
                    f"the simulation of the answer did not finish within {_within(limit, a.seconds)} (the reference took "
                    f"{g.seconds:.2f} s): cycles it never reached count as different",
                    code="sim-timeout",
                )
            )
        return diffsim.compare_phases(plan, stim, g.trace, a.trace, g.high, a.high), "", "", g.trace

    def _unsimulated(
        self,
        fres: _Formal,
        plan: diffsim.SimPlan,
        metrics: dict,
        notes: list[Diagnostic],
        reason: str,
        opts: Mapping[str, Any],
    ) -> StageResult:
        """No simulation (disabled, or ports a testbench cannot drive): the formal outcome alone decides, and only
        a proof passes."""
        notes.append(Diagnostic(reason, severity="info", code="no-simulation"))
        if fres.engine:
            metrics["formal_engine"] = fres.engine
        if fres.outcome == "proved":
            metrics.update(
                equivalence="proved", method="formal", output_bits_mismatched=0, outputs_mismatched=0
            )
            return self.result(Status.PASSED, 1.0, metrics=metrics, diagnostics=notes)
        if fres.outcome == "cex":
            metrics.update(equivalence="refuted", method="formal")
            text = _describe_frames(plan, fres)
            d = Diagnostic(text, code="not-equivalent")
            return self.result(Status.FAILED, 0.0, metrics=metrics, diagnostics=[d, *notes], feedback=text)
        if fres.outcome == "bounded":
            metrics.update(equivalence=f"bounded({fres.bound})", method="formal", bound=fres.bound)
            msg = f"no difference within {fres.bound} cycles, but nothing proved ({reason})"
            return self._pay_undecided(metrics, notes, msg, opts)
        if fres.answer_side:
            metrics["equivalence"] = "unknown"
            return self._pay_undecided(metrics, notes, "the answer could not be proved or simulated", opts)
        msg = "equivalence could not be checked: " + "; ".join(d.message for d in notes)
        return self.result(
            Status.ERROR, 0.0, metrics={**metrics, "equivalence": "unknown"}, diagnostics=notes, feedback=msg
        )

    def _pay_undecided(
        self, metrics: dict, notes: list[Diagnostic], why: str, opts: Mapping[str, Any]
    ) -> StageResult:
        share = min(1.0, max(0.0, float(opts["undecided"])))
        msg = (
            f"Not proved equivalent to the reference and not refuted: {why}. An undecided answer earns {share:g} "
            "of this stage and does not pass; make the design match the reference so the proof closes."
        )
        d = Diagnostic(msg, code="undecided")
        return self.result(Status.FAILED, share, metrics=metrics, diagnostics=[d, *notes], feedback=msg)

    def _verdict(
        self,
        fres: _Formal,
        plan: diffsim.SimPlan,
        stim: diffsim.Stimulus,
        replay_cycles: int,
        cmp: diffsim.Comparison | None,
        metrics: dict,
        notes: list[Diagnostic],
        gold_error: str,
        gate_error: str,
        gold_trace: diffsim.Trace | None,
        opts: Mapping[str, Any],
        *,
        simulation_only: bool,
    ) -> StageResult:
        """Fold the formal outcome and the simulation's comparison into one result (docs/equivalence.md#what-each-
        verdict-pays): a proof the simulation agrees with passes; a difference fails with credit above a constant
        stub's, at most `refuted_max`; anything undecided fails with `undecided`, unless the reference itself
        cannot be proved (then the longer simulation decides)."""
        formal_used = fres.outcome in ("cex", "bounded", "undecided")
        if fres.engine:
            metrics["formal_engine"] = fres.engine
        if gate_error:
            metrics.update(equivalence="unknown" if fres.outcome != "cex" else "refuted")
            msg = (
                "the answer could not be simulated (Icarus rejects it), so it cannot be accepted: "
                + gate_error
            )
            return self.result(Status.FAILED, 0.0, metrics=metrics, diagnostics=notes, feedback=msg)
        if cmp is not None:
            bits_bad = sum(len(v) for v in cmp.mismatched_bits.values())
            metrics.update(
                output_bits_mismatched=bits_bad,
                outputs_mismatched=sum(1 for v in cmp.mismatched_bits.values() if v),
                sim_compared_cycles=cmp.compared_cycles,
            )
            if cmp.first is not None:
                replayed = cmp.first.cycle < replay_cycles
                if fres.outcome == "proved":
                    how = (
                        "simulation of the same text after a proof: Yosys and the simulator read this design "
                        "differently (an incomplete sensitivity list, a latch, a delay, initial state); the "
                        "simulation is what counts"
                    )
                    method = "simulation"
                    notes.append(Diagnostic(how, code="proof-simulation-mismatch"))
                else:
                    how = (
                        f"a formal counterexample ({fres.engine}) replayed in simulation"
                        if replayed
                        else "seeded random simulation"
                    )
                    method = "formal" if replayed else ("formal+simulation" if formal_used else "simulation")
                score, credit, base = _refuted_score(plan, stim, cmp, gold_trace, opts)
                text, diags = _describe(plan, stim, cmp.first, how)
                metrics.update(
                    equivalence="refuted",
                    method=method,
                    first_mismatch_cycle=cmp.first.cycle,
                    bit_credit=round(credit, 6),
                    stub_bit_credit=round(base, 6),
                )
                return self.result(
                    Status.FAILED, score, metrics=metrics, diagnostics=[*diags, *notes], feedback=text
                )
            if fres.outcome == "proved":
                metrics.update(equivalence="proved", method="formal", sim_agrees=True)
                return self.result(Status.PASSED, 1.0, metrics=metrics, diagnostics=notes)
            if fres.outcome == "cex":
                notes.append(
                    Diagnostic(
                        "the formal counterexample does not show in simulation (it rests on an x of the reference, "
                        "a don't-care, or on a construct synthesis and simulation read differently)",
                        severity="info",
                        code="formal-cex-unconfirmed",
                    )
                )
            if fres.outcome == "cex" and fres.suspect:
                # The difference the proof found is one the simulator does not run, in an answer that holds a
                # construct the two read differently: a decoy only Yosys sees bought a hidden bug the undecided
                # share (second red-team pass, 2026-11-29). Not paid.
                metrics.update(equivalence="unknown", method="formal+simulation")
                msg = (
                    "Not proved: the proof found a difference that the simulation does not show, and the answer holds "
                    f"{fres.suspect}. A difference only one tool sees is not paid; write the design so that synthesis "
                    "and simulation read it the same way."
                )
                d = Diagnostic(msg, code="undecided")
                return self.result(Status.FAILED, 0.0, metrics=metrics, diagnostics=[d, *notes], feedback=msg)
            verdict = f"bounded({fres.bound})" if fres.outcome == "bounded" else "unknown"
            if fres.outcome == "bounded":
                metrics["bound"] = fres.bound
            metrics.update(equivalence=verdict, method="formal+simulation" if formal_used else "simulation")
            if simulation_only:
                metrics["simulation_only"] = True
                notes.append(
                    Diagnostic(
                        "decided by simulation: the reference does not prove against itself within the budget, so "
                        "this task is simulation-only and ran a longer random simulation",
                        severity="info",
                        code="simulation-only",
                    )
                )
                return self.result(Status.PASSED, 1.0, metrics=metrics, diagnostics=notes)
            why = {
                "bounded": f"no difference within {fres.bound} cycles of BMC nor in simulation",
                "undecided": "the proof did not close in its budget and simulation found no difference",
                "cex": "the formal counterexample did not show in simulation",
            }.get(fres.outcome, f"the formal step ended `{fres.outcome}` and simulation found no difference")
            return self._pay_undecided(metrics, notes, why, opts)
        # No simulation of the reference to compare with (a problem of the task): the formal outcome alone.
        if fres.outcome == "proved":
            metrics.update(
                equivalence="proved", method="formal", output_bits_mismatched=0, outputs_mismatched=0
            )
            return self.result(Status.PASSED, 1.0, metrics=metrics, diagnostics=notes)
        if fres.outcome == "cex":
            # Reported only once a simulation shows it: it may rest on an x of the reference (a don't-care).
            notes.append(
                Diagnostic(
                    "a formal counterexample could not be confirmed: the reference cannot be simulated",
                    severity="info",
                    code="formal-cex-unconfirmed",
                )
            )
        metrics.update(equivalence="unknown")
        msg = (
            "equivalence could not be checked (a problem of the task or the tools, not of the answer): "
            + "; ".join(d.message for d in notes)
        )
        return self.result(Status.ERROR, 0.0, metrics=metrics, diagnostics=notes, feedback=msg)


def _settled(sim: Any, fres: _Formal, refuted_at_zero: bool) -> bool:
    """Whether a simulation on the task's own runs settles the verdict: an answer they refute with no credit (or
    Icarus rejects), a proof they agree with, a reference that cannot be simulated at all (no comparison pays
    anything). Anything else is decided on the answer's own runs (`EquivalenceStage._stimulus`)."""
    if sim is None:
        return False
    comparison, gold_error, gate_error, _ = sim
    if refuted_at_zero or gold_error:
        return True
    return fres.outcome == "proved" and not gate_error and comparison is not None and comparison.first is None


def _refuted_score(
    plan: diffsim.SimPlan,
    stim: diffsim.Stimulus,
    cmp: diffsim.Comparison,
    gold_trace: diffsim.Trace | None,
    opts: Mapping[str, Any],
) -> tuple[float, float, float]:
    """(score, output-bit credit, the best constant stub's credit) of an answer `cmp` refutes: `refuted_max` x its
    credit above the stub's (docs/equivalence.md#what-each-verdict-pays)."""
    bits_bad = sum(len(v) for v in cmp.mismatched_bits.values())
    credit = 1.0 - bits_bad / plan.output_bits if plan.output_bits else 0.0
    base = diffsim.constant_share(plan, stim, gold_trace) if gold_trace is not None else 0.0
    above = max(0.0, (credit - base) / (1.0 - base)) if base < 1.0 else 0.0
    return min(1.0, max(0.0, float(opts["refuted_max"]))) * above, credit, base


def _input_rows(plan: diffsim.SimPlan, stim: diffsim.Stimulus, start: int, end: int) -> list[str]:
    """One line per cycle from `start` to `end` (the last `MAX_ROWS`): the inputs, whether the reset is active,
    and, with several clocks, the further clocks that do not rise at the end of that cycle (`Stimulus.rises`)."""
    names = [p.name for p in plan.inputs]
    further = plan.clocks[1:] if stim.rises else ()
    rows = []
    first = max(start, end - MAX_ROWS + 1)
    if first > start:
        rows.append(f"  ... {first - start} earlier cycles not shown")
    for c in range(first, end + 1):
        vals = [diffsim.fmt_int(v, p.width or 1) for p, v in zip(plan.inputs, stim.vectors[c], strict=True)]
        in_reset = plan.reset is not None and any(
            n == plan.reset.name and v == plan.reset.active
            for n, v in zip(names, stim.vectors[c], strict=True)
        )
        notes = ["reset"] if in_reset else []
        if further:
            notes += [f"{k} does not rise" for k, up in zip(further, stim.rises[c], strict=True) if not up]
        rows.append(
            f"  cycle {c - start}: "
            + (" ".join(f"{n}={v}" for n, v in zip(names, vals, strict=True)) or "(no inputs)")
            + (f" ({'; '.join(notes)})" if notes else "")
        )
    return rows


def _describe(
    plan: diffsim.SimPlan, stim: diffsim.Stimulus, diff: diffsim.Difference, how: str
) -> tuple[str, list[Diagnostic]]:
    """The counterexample as text a model can act on, and one diagnostic per differing output."""
    start = stim.segment_start(diff.cycle)
    cycle = diff.cycle - start
    clock = f" (cycle n = after n rising edges of {plan.clocks[0]})" if plan.clocks else ""
    lines = [
        f"Not equivalent to the reference (found by {how}). First difference at cycle {cycle}{clock}.",
        "Inputs:" if plan.inputs else "The design has no inputs besides the clock.",
        *(_input_rows(plan, stim, start, diff.cycle) if plan.inputs else []),
        f"Outputs at cycle {cycle} (expected = the reference):",
    ]
    diags = []
    for p in plan.outputs:
        exp = diffsim.fmt_bits(diff.expected[p.name])
        got = diffsim.fmt_bits(diff.actual[p.name])
        mark = "  <-- differs" if p.name in diff.differing else ""
        lines.append(f"  {p.name}: expected {exp}, got {got}{mark}")
        if p.name in diff.differing:
            diags.append(
                Diagnostic(
                    f"output {p.name} differs from the reference at cycle {cycle}: expected {exp}, got {got}",
                    code="not-equivalent",
                )
            )
    return "\n".join(lines), diags


def _describe_frames(plan: diffsim.SimPlan, fres: _Formal) -> str:
    """A formal counterexample that could not be replayed: its inputs only."""
    stim = diffsim.directed_stimulus(plan, fres.frames)
    rows = _input_rows(plan, stim, 0, len(stim) - 1)
    return "\n".join(
        [
            f"Not equivalent to the reference (formal counterexample, {fres.engine}): the outputs differ at cycle "
            f"{len(stim) - 1} after these inputs (the answer could not be simulated to show the values):",
            *rows,
        ]
    )


@hookimpl
def rtlreward_register_stages(register):
    register(EquivalenceStage())


@hookimpl
def rtlreward_register_profiles(register):
    """The `equiv` and `trusted` presets live with the core's presets (rtlreward/presets/); they are registered
    here until the core lists them itself, and never twice."""
    from rtlreward.profiles import PRESETS, preset_path

    for name in ("equiv", "trusted"):
        if name not in PRESETS:
            register(name, preset_path(name))
