"""The `synth` and `ppa` stages: a design must synthesise, and a correct one is rewarded for being small and fast.

`synth` (Yosys, generic `synth` for the task's top) fails, with the construct, file and line, on what hardware
cannot be or what synthesis reads differently from simulation: a latch the reference does not have, a
combinational loop, multiple drivers, an undriven output, a delay, an `initial` value on a register where the
reference has none, a register that only feeds a `$display`, a module left undefined (a black box), and a netlist
whose simulation differs from the RTL's (Icarus runs both side by side). It reports cells, flip-flops, an area
estimate (CMOS transistors, Yosys's own table; the liberty area with the `liberty` option) and logic depth, the
reference's beside them (computed once per reference and toolchain, cached on disk), and with `ice40 = true` LUTs,
flip-flops and the maximum frequency after place and route (`synth_ice40`, `nextpnr-ice40`).

`ppa` runs only after `synth` and every enabled correctness stage (`equivalence`, `tests`) passed, and pays the
answer's figures against the reference's: the mean of min(cap, reference area / answer area) and min(cap,
reference depth / answer depth), divided by `cap`. See docs/synthesis.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from rtlreward import hookimpl
from rtlreward.model import Diagnostic, StageResult, Status, Task
from rtlreward.sandbox import resource_exhaustion
from rtlreward.stage import Stage, StageContext
from rtlreward_hdl.files import HDL_EXTS, HEADER_EXTS, strip_comments
from rtlreward_hdl.yosys import IDENT_RE, YOSYS_RUNNER, check_path
from rtlreward_hdl.yosys import missing_tool as _missing
from rtlreward_hdl.yosys import pyosys_dir as _pyosys_dir
from rtlreward_hdl.yosys import pyosys_version as _pyosys_version
from rtlreward_hdl.yosys import tool_version as _version

from . import flow, ice40, simcheck

__all__ = ["PpaStage", "SynthStage", "score_ppa"]

FIGURES = "synth_figures"  # the product `synth` publishes and `ppa` needs

DEFAULTS: dict[str, Any] = {
    "yosys_seconds": 30.0,  # Yosys's budget per design
    "yosys_memory_mb": 2048,
    "simulate": True,  # simulate the netlist against the RTL
    "sim_cycles": simcheck.CYCLES,
    "sim_seconds": 20.0,
    "liberty": "",  # a liberty file (path on this machine): area from its cells instead of CMOS transistors
    "ice40": False,  # also place and route for an iCE40 (synth_ice40 + nextpnr-ice40): LUTs, FFs, Fmax
    "ice40_device": "hx8k",
    "ice40_package": "ct256",
    "ice40_seconds": 60.0,
    "initial": "reference",  # "reference": an initial value fails unless the reference has one too; "allow"
}
PPA_DEFAULTS: dict[str, Any] = {"cap": 1.5, "area_weight": 0.5, "depth_weight": 0.5}
CORRECTNESS = ("equivalence", "tests")

_ATTR_RE = re.compile(r"\(\*(?!\s*\))(.*?)\*\)", re.S)
_ERROR_RE = re.compile(r"(?:([\w./+-]+:\d+(?:\.\d+(?:-\d+\.\d+)?)?):\s*)?ERROR:\s*(.*)$", re.M)


def _clean(text: str) -> str:
    """The design as synthesis is to read it: comments (pragmas such as `translate_off`) and attributes
    (`(* blackbox *)`, `(* keep *)`, `(* full_case *)`) blanked, every newline kept."""
    text = strip_comments(text)
    return _ATTR_RE.sub(lambda m: "".join(c if c == "\n" else " " for c in m.group(0)), text)


def shared_context(task: Task) -> dict[str, str]:
    """HDL the task gives every design (its compile sources, else `rtl/` files, and headers), never a testbench."""
    answer = set(task.expected_files) | set(task.reference or {})
    out = {}
    for path, text in (task.context or {}).items():
        low = path.lower()
        if path in answer or not low.endswith(HDL_EXTS):
            continue
        if low.endswith(HEADER_EXTS) or (
            path in task.compile_sources if task.compile_sources else path.startswith("rtl/")
        ):
            out[path] = text
    return out


def hdl(files: Mapping[str, str] | None) -> dict[str, str]:
    return {p: t for p, t in (files or {}).items() if p.lower().endswith(HDL_EXTS)}


_MODULE_RE = re.compile(r"^[ \t]*(?:macromodule|module)\s+(?:(?:static|automatic)\s+)?([A-Za-z_]\w*)", re.M)


def top_of(task: Task, reference: Mapping[str, str], answer: Mapping[str, str]) -> str | None:
    """The task's top: its toplevel, its interface's module, else the one module of the reference (or answer)
    no other module of it instantiates."""
    for name in (task.toplevel, task.interface.module if task.interface else None):
        if name:
            return name
    for files in (reference, answer):
        text = "\n".join(strip_comments(t) for t in files.values())
        declared = list(dict.fromkeys(_MODULE_RE.findall(text)))
        if len(declared) == 1:
            return declared[0]
        body = _MODULE_RE.sub("", text)
        roots = [
            m for m in declared if not re.search(rf"(?<![\w$]){re.escape(m)}\s*(#\s*\(|[A-Za-z_])", body)
        ]
        if len(roots) == 1:
            return roots[0]
    return None


@attrs.frozen
class Run:
    """One design through the flow."""

    ok: bool  # synthesised with figures
    findings: tuple[flow.Finding, ...] = ()
    figures: flow.Figures | None = None
    elab: flow.Elaborated | None = None
    error: str = ""  # why it did not synthesise (Yosys's words, with the answer's file names)
    error_kind: str = ""  # read | blackbox | synth | timeout | missing | resource
    names: dict[str, str] = attrs.field(factory=dict)  # script path -> the design's own path
    netlist_top: str = ""
    seconds: float = 0.0
    limit: Any = None


def _rename(text: str, names: Mapping[str, str]) -> str:
    for script_name, orig in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(script_name, orig)
    return text


# Reference figures, per reference text, top, options and toolchain: in this process and on disk.
_REF: dict[str, dict[str, Any]] = {}
_REF_LOCK = threading.Lock()
_REF_KEY_LOCKS: dict[
    str, threading.Lock
] = {}  # one computation per key: a batch of samples of one task waits


def _ref_dir() -> Path:
    from rtlreward.cache import default_cache_dir

    return default_cache_dir() / "synth-reference"


class SynthStage(Stage):
    name = "synth"
    version = "2"
    requires = ("safety",)
    provides = (FIGURES,)
    description = (
        "Yosys synthesis: no latch, loop, multiple driver, undriven output, delay or initial; netlist = RTL"
    )
    default_timeout = 60.0
    calibrate = False
    codes: ClassVar[dict[str, str]] = {}

    def tool_versions(self) -> dict[str, str]:
        py = _pyosys_version()
        return {
            "yosys": f"pyosys {py}" if py else _version(("yosys", "-V")),
            "iverilog": _version(("iverilog", "-V")),
            "nextpnr": _version(("nextpnr-ice40", "--version")),
        }

    def _yosys_argv(self, ctx: StageContext, script: str) -> list[str]:
        return [ctx.python, "-I", "-S", "-c", YOSYS_RUNNER, script, _pyosys_dir() or "/nonexistent"]

    # -- one design ----------------------------------------------------------------------------------------
    def _flow(
        self, ctx: StageContext, work: Path, files: Mapping[str, str], top: str, opts: Mapping[str, Any]
    ) -> Run:
        run = self._flow_once(ctx, work, files, top, opts, nolatches=False)
        comb = [f for f in run.findings if f.kind == "latch" and "always_comb" in f.what]
        if run.ok or not comb or run.error_kind != "read":
            return run
        # Yosys refuses an always_comb that infers a latch: the latch is a finding; measure the rest without it
        again = self._flow_once(ctx, work, files, top, opts, nolatches=True)
        return attrs.evolve(again, findings=(*comb, *again.findings), seconds=run.seconds + again.seconds)

    def _flow_once(
        self,
        ctx: StageContext,
        work: Path,
        files: Mapping[str, str],
        top: str,
        opts: Mapping[str, Any],
        *,
        nolatches: bool,
    ) -> Run:
        names, units = flow.write_sources(work, files, _clean)
        if not units:
            return Run(False, error="no Verilog/SystemVerilog source", error_kind="read")
        liberty = ""
        if opts.get("liberty"):
            lib = Path(str(opts["liberty"])).expanduser()
            if not lib.is_file():
                return Run(False, error=f"liberty file {lib} not found", error_kind="missing")
            shutil.copyfile(lib, work / "cells.lib")
            liberty = "cells.lib"
        marks = {p: f"m{secrets.token_hex(8)}" for p in flow.PHASES}
        netlist_top = f"n{secrets.token_hex(8)}_syn"
        # headers are found through -I of their folder: Yosys reads `include relative to the including file too
        incdirs = sorted({str(Path(u).parent) for u in names})
        text = flow.script(units, top, netlist_top, marks, liberty=liberty, nolatches=nolatches)
        text = text.replace(
            "read_verilog -sv", "read_verilog -sv " + " ".join(f"-I {check_path(d)}" for d in incdirs), 1
        )
        (work / "synth.ys").write_text(text)
        res = ctx.run(
            self._yosys_argv(ctx, "synth.ys"),
            cwd=work,
            timeout=min(float(ctx.timeout), float(opts["yosys_seconds"])),
            memory_mb=int(opts["yosys_memory_mb"]),
        )
        if _missing(res, "yosys"):
            return Run(
                False,
                error="cannot run Yosys: install pyosys (`pip install pyosys`) or `apt-get install yosys`",
                error_kind="missing",
            )
        seen = {line.strip() for line in res.stderr.splitlines()}
        if (
            marks["read"] not in seen
            and not res.timed_out
            and res.returncode != 0
            and "ERROR" not in res.output
        ):
            limit = resource_exhaustion(
                res.output, res.returncode, limits=ctx.limits(), truncated=res.truncated
            )
            if limit is not None:
                return Run(
                    False,
                    error=limit.message.replace("the simulator", "Yosys"),
                    error_kind="resource",
                    limit=limit,
                )
            return Run(False, error=f"Yosys did not start: exit {res.returncode}", error_kind="missing")
        log = (work / "synth.ys.log").read_text(errors="replace") if (work / "synth.ys.log").is_file() else ""
        elab = None
        findings: list[flow.Finding] = []
        if marks["checked"] in seen:
            try:
                elab = flow.elaborated(work / "rtl.json", top)
                findings += list(elab.latches)
                check = (
                    (work / "check.txt").read_text(errors="replace") if (work / "check.txt").is_file() else ""
                )
                findings += flow.check_findings(check, elab)
            except (OSError, ValueError, KeyError) as e:
                return Run(False, error=f"cannot read Yosys's output: {e}", error_kind="synth", names=names)
        if res.timed_out:
            limit = min(float(ctx.timeout), float(opts["yosys_seconds"]))
            return Run(
                False,
                tuple(findings),
                elab=elab,
                error=f"Yosys did not finish within {limit:g} s",
                error_kind="timeout",
                names=names,
                seconds=res.duration,
            )
        if res.returncode != 0 or marks["synthesised"] not in seen:
            found = _ERROR_RE.findall(res.output + "\n" + log)
            msg = ""
            if found:
                where, m = found[-1]
                msg = (f"{where.strip().rstrip(':')}: " if where.strip() else "") + m.strip()
            kind = "read" if marks["read"] not in seen else "synth"
            if "Assertion failed: selection is not empty" in msg:
                kind = "blackbox"
                msg = "the design instantiates a module it does not define in full (an undefined or empty module, a black box)"
            msg = _rename(msg or f"exit {res.returncode}", names)
            latch = flow.comb_latch(msg)
            if latch is not None:
                findings.append(latch)
            limit = resource_exhaustion(
                res.output, res.returncode, limits=ctx.limits(), truncated=res.truncated
            )
            return Run(
                False,
                tuple(findings),
                elab=elab,
                error=msg[:400],
                error_kind="resource" if limit else kind,
                names=names,
                seconds=res.duration,
                limit=limit,
            )
        try:
            kept = (work / "kept.txt").read_text(errors="replace")
            before = (work / "ffs.txt").read_text(errors="replace")
            findings += flow.display_only(before, kept, elab) if elab else []
            figs = flow.figures(
                work / "stat.json",
                (work / "ltp.txt").read_text(errors="replace"),
                work / "stat_lib.json" if liberty else None,
            )
        except (OSError, ValueError, KeyError) as e:
            return Run(
                False,
                tuple(findings),
                elab=elab,
                error=f"cannot read Yosys's figures: {e}",
                error_kind="synth",
                names=names,
            )
        findings = [attrs.evolve(f, where=_rename(f.where, names)) for f in findings]
        return Run(
            True, tuple(findings), figs, elab, names=names, netlist_top=netlist_top, seconds=res.duration
        )

    def _simulate(
        self, ctx: StageContext, work: Path, run: Run, top: str, opts: Mapping[str, Any]
    ) -> tuple[str, simcheck.Mismatch | None]:
        """('', mismatch or None) after a simulation; (why not, None) when it could not run."""
        elab = run.elab
        assert elab is not None
        if any(not IDENT_RE.match(n) for n in elab.ports) or any(
            d == "inout" for d, _ in elab.ports.values()
        ):
            return "ports the testbench cannot drive (inout or escaped names)", None
        if not any(d == "output" for d, _ in elab.ports.values()):
            return "no outputs", None
        nonce = secrets.token_hex(8)
        tb = simcheck.testbench(
            top,
            run.netlist_top,
            elab.ports,
            elab.clocks,
            elab.resets,
            nonce,
            ctx.seed,
            int(opts["sim_cycles"]),
        )
        (work / "tb.v").write_text(tb)
        units = [u for u in run.names if not run.names[u].lower().endswith(HEADER_EXTS)]
        incdirs = sorted({str(Path(u).parent) for u in run.names})
        argv = [
            "iverilog",
            "-g2012",
            "-o",
            "sim.vvp",
            "-s",
            f"tb_{nonce}",
            *(f"-I{d}" for d in incdirs),
            "tb.v",
            "netlist.v",
            *units,
        ]
        from rtlreward_hdl.simrun import compile_then_run

        res, sim = compile_then_run(
            ctx,
            argv,
            ["vvp", "-n", "sim.vvp"],
            cwd=work,
            run_cwd=work,
            compile_limit=float(ctx.timeout),
            run_limit=float(opts["sim_seconds"]),
        )
        if res is None:
            return f"iverilog did not run ({sim.output.strip()[:200]})", None
        if _missing(res, "iverilog"):
            return "missing", None
        if res.returncode != 0:
            lines = [ln.strip() for ln in res.output.splitlines() if ln.strip()][:3]
            return "Icarus could not compile the RTL with its netlist: " + _rename(
                "; ".join(lines), run.names
            )[:300], None
        done, mismatch = simcheck.parse(sim.stdout, nonce)
        if mismatch is not None:
            return "", mismatch
        if not done and sim.timed_out:
            return f"the simulation did not finish within {float(opts['sim_seconds']):g} s", None
        if not done:
            # the design ended the simulation itself ($finish, $stop, a fatal error) before the last cycle
            return "", simcheck.Mismatch(-1, "", "", "", "ended early")
        return "", None

    def _reference(
        self, ctx: StageContext, files: Mapping[str, str], top: str, opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The reference's figures and facts ({"ok", "figures", "latches", "inits", "problems"}), cached."""
        key_opts: dict[str, Any] = {
            k: opts.get(k) for k in ("ice40", "ice40_device", "ice40_package", "simulate")
        }
        if opts.get("liberty"):  # the library's content, not its path
            try:
                key_opts["liberty"] = hashlib.sha256(
                    Path(str(opts["liberty"])).expanduser().read_bytes()
                ).hexdigest()
            except OSError:
                key_opts["liberty"] = str(opts["liberty"])
        key = hashlib.sha256(
            json.dumps(
                [flow.SCRIPT_VERSION, sorted(files.items()), top, key_opts, self.tool_versions()], default=str
            ).encode("utf-8", "surrogatepass")
        ).hexdigest()[:32]
        with _REF_LOCK:
            if key in _REF:
                return _REF[key]
            key_lock = _REF_KEY_LOCKS.setdefault(key, threading.Lock())
        with key_lock:
            return self._reference_once(ctx, files, top, opts, key)

    def _reference_once(
        self, ctx: StageContext, files: Mapping[str, str], top: str, opts: Mapping[str, Any], key: str
    ) -> dict[str, Any]:
        with _REF_LOCK:
            if key in _REF:  # computed by the candidate this one waited for
                return _REF[key]
        disk = _ref_dir() / f"{key}.json"
        try:
            entry = json.loads(disk.read_text())
        except (OSError, ValueError):
            run = self._flow(ctx, ctx.stage_dir("synth") / "reference", files, top, opts)
            entry = {
                "ok": run.ok,
                "figures": run.figures.as_dict() if run.figures else None,
                "latches": sum(f.kind == "latch" for f in run.findings),
                "inits": len(run.elab.inits) if run.elab else 0,
                "problems": [
                    _describe(f)
                    for f in run.findings
                    if f.kind in ("loop", "multiple-drivers", "undriven", "display-only", "latch")
                ],
                "problem_keys": [
                    [f.kind, f.what]
                    for f in run.findings
                    if f.kind in ("loop", "multiple-drivers", "undriven", "display-only")
                ],
                "error": run.error,
            }
            if run.ok and opts["simulate"] and run.elab is not None:
                why, mismatch = self._simulate(ctx, ctx.stage_dir("synth") / "reference", run, top, opts)
                entry["netlist_agrees"] = None if why else mismatch is None
                if mismatch is not None:
                    entry["problems"].append(
                        "sim-mismatch: its simulation ended before its last cycle"
                        if mismatch.cycle < 0
                        else f"sim-mismatch: its netlist differs from its simulation at output {mismatch.port}, "
                        f"cycle {mismatch.cycle}"
                    )
            if opts.get("ice40") and run.ok:
                entry["ice40"] = ice40.run(
                    ctx, ctx.stage_dir("synth") / "reference_ice40", files, top, opts, self._yosys_argv
                )
            if run.error_kind in ("timeout", "missing", "resource"):
                return entry  # a fact of this machine, not of the reference: not cached
            with contextlib.suppress(OSError):
                disk.parent.mkdir(parents=True, exist_ok=True)
                tmp = disk.with_suffix(f".{secrets.token_hex(4)}.tmp")
                tmp.write_text(json.dumps(entry))
                tmp.replace(disk)
        with _REF_LOCK:
            _REF[key] = entry
        return entry

    # -- the stage -----------------------------------------------------------------------------------------
    def run(self, ctx: StageContext) -> StageResult:
        task = ctx.task
        opts = {**DEFAULTS, **ctx.options}
        answer = hdl(ctx.files)
        if not any(not p.lower().endswith(HEADER_EXTS) for p in answer):
            return self._result(Status.FAILED, "the answer has no Verilog/SystemVerilog file", "no-sources")
        reference = hdl(task.reference)
        top = str(opts.get("top") or top_of(task, reference, answer) or "")
        if not IDENT_RE.match(top):
            return self._result(
                Status.ERROR,
                "cannot tell the design's top module; set the task's toplevel or stage.synth.options.top",
                "no-top",
            )
        shared = shared_context(task)
        ref: dict[str, Any] | None = None
        if reference:
            ref = self._reference(ctx, {**shared, **reference}, top, opts)
        work = ctx.stage_dir("synth") / "answer"
        run = self._flow(ctx, work, {**shared, **answer}, top, opts)
        metrics: dict[str, Any] = {"synth_seconds": round(run.seconds, 4)}
        if ref is not None:
            metrics["reference_synthesises"] = bool(ref.get("ok"))
            if ref.get("figures"):
                rf = ref["figures"]
                metrics.update(
                    reference_cells=rf["cells"],
                    reference_flip_flops=rf["flip_flops"],
                    reference_area=rf["area"],
                    reference_depth=rf["depth"],
                )
        if run.error_kind in ("missing",):
            return self._result(Status.ERROR, run.error, "tool-missing", metrics)
        if run.error_kind == "timeout":
            return self._result(Status.TIMEOUT, run.error, "timeout", metrics)
        diags: list[Diagnostic] = []
        ref_latches = int(ref["latches"]) if ref else 0
        ref_inits = int(ref["inits"]) if ref else 0
        elab = run.elab
        latches = [f for f in run.findings if f.kind == "latch"]
        problems: list[flow.Finding] = []
        if len(latches) > ref_latches:
            problems += latches
        # what the reference has itself (an output it leaves undriven, say) is the task's, not the answer's fault
        shared_faults = {tuple(k) for k in (ref or {}).get("problem_keys", [])}
        for f in run.findings:
            if f.kind not in ("loop", "multiple-drivers", "undriven", "display-only"):
                continue
            if (f.kind, f.what) in shared_faults:
                diags.append(
                    Diagnostic(
                        f"{_describe(f)} (the reference has it too: not counted)",
                        severity="info",
                        code=f.kind,
                    )
                )
            else:
                problems.append(f)
        if (
            elab is not None
            and elab.inits
            and opts["initial"] != "allow"
            and not (ref_inits and opts["initial"] == "reference")
        ):
            problems += [attrs.evolve(f, where=_rename(f.where, run.names)) for f in elab.inits]
        problems += flow.delays(answer)
        problems += flow.tool_macros(answer)
        if elab is not None and elab.prints and not any(f.kind == "display-only" for f in problems):
            diags.append(
                Diagnostic(
                    f"{len(elab.prints)} $display/$write call(s) ignored by synthesis",
                    severity="info",
                    code="display",
                )
            )
        if not run.ok:
            kind = {"blackbox": "blackbox", "resource": "resource-limit"}.get(
                run.error_kind, "not-synthesisable"
            )
            diags.insert(0, Diagnostic(f"the design does not synthesise: {run.error}", code=kind))
            if run.limit is not None:
                metrics["resource_limit"] = run.limit.limit
        for f in problems:
            diags.append(
                Diagnostic(_describe(f), code=f.kind, fields={"construct": f.kind, "where": f.where})
            )
        metrics.update(
            latches=len(latches), loops=sum(f.kind == "loop" for f in problems), problems=len(problems)
        )
        figs = run.figures
        if figs is not None:
            metrics.update(
                cells=figs.cells,
                flip_flops=figs.flip_flops,
                area=figs.area,
                depth=figs.depth,
                area_unit=figs.area_unit,
            )
        if not run.ok or problems:
            text = "\n".join(d.message for d in diags if d.severity == "error")
            return self.result(
                Status.FAILED,
                0.0,
                metrics=metrics,
                diagnostics=diags,
                feedback=text,
                artifacts={FIGURES: None},
            )
        # synthesis agrees with simulation
        if opts["simulate"]:
            why, mismatch = self._simulate(ctx, work, run, top, opts)
            if why == "missing":
                return self._result(
                    Status.ERROR,
                    "Icarus Verilog is not installed: `apt-get install iverilog`",
                    "tool-missing",
                    metrics,
                )
            if mismatch is not None and ref is not None and ref.get("netlist_agrees") is False:
                diags.append(
                    Diagnostic(
                        f"the netlist differs from the RTL's simulation at output {mismatch.port}, as the reference's "
                        "own does (not counted)",
                        severity="info",
                        code="sim-mismatch",
                    )
                )
                mismatch = None
            if mismatch is not None and mismatch.cycle < 0:
                msg = (
                    "the simulation of the RTL beside its synthesised netlist ended before its last cycle (a $finish, "
                    "$stop or $fatal in the design), so synthesis could not be compared with simulation"
                )
                d = Diagnostic(msg, code="sim-mismatch", fields={"construct": "sim-ended"})
                metrics["netlist_agrees"] = False
                return self.result(
                    Status.FAILED,
                    0.0,
                    metrics=metrics,
                    diagnostics=[d, *diags],
                    feedback=msg,
                    artifacts={FIGURES: None},
                )
            if mismatch is not None:
                msg = (
                    f"the synthesised netlist does not behave like the RTL's simulation: output {mismatch.port} at cycle "
                    f"{mismatch.cycle} ({mismatch.phase}) is {mismatch.netlist} after synthesis, {mismatch.rtl} in simulation "
                    "(an incomplete sensitivity list, a delay or race the logic relies on, or code only one of them reads)"
                )
                d = Diagnostic(
                    msg, code="sim-mismatch", fields={"construct": "sim-mismatch", "port": mismatch.port}
                )
                metrics["netlist_agrees"] = False
                return self.result(
                    Status.FAILED,
                    0.0,
                    metrics=metrics,
                    diagnostics=[d, *diags],
                    feedback=msg,
                    artifacts={FIGURES: None},
                )
            metrics["netlist_agrees"] = None if why else True
            if why:
                diags.append(
                    Diagnostic(
                        f"the netlist was not simulated against the RTL: {why}",
                        severity="info",
                        code="no-simulation",
                    )
                )
        product: dict[str, Any] = {
            "answer": figs.as_dict() if figs else None,
            "reference": (ref or {}).get("figures"),
        }
        if opts.get("ice40"):
            ans40 = ice40.run(
                ctx,
                ctx.stage_dir("synth") / "answer_ice40",
                {**shared, **answer},
                top,
                opts,
                self._yosys_argv,
            )
            for k, v in ans40.items():
                metrics[f"ice40_{k}"] = v
            product["ice40"] = ans40
            if ref and isinstance(ref.get("ice40"), dict):
                product["reference_ice40"] = ref["ice40"]
                for k in ("luts", "fmax_mhz"):
                    if k in ref["ice40"]:
                        metrics[f"reference_ice40_{k}"] = ref["ice40"][k]
            if ans40.get("error"):
                diags.append(Diagnostic(f"iCE40 flow: {ans40['error']}", severity="warning", code="ice40"))
        return self.result(
            Status.PASSED, 1.0, metrics=metrics, diagnostics=diags, artifacts={FIGURES: product}
        )

    def _result(
        self, status: Status, msg: str, code: str, metrics: Mapping[str, Any] | None = None
    ) -> StageResult:
        d = Diagnostic(msg, code=code, severity="error")
        return self.result(
            status, 0.0, metrics=metrics, diagnostics=[d], feedback=msg, artifacts={FIGURES: None}
        )


_WHAT = {
    "latch": "a latch the reference does not have (an incomplete assignment in combinational logic: assign every "
    "output in every branch, or add a default)",
    "loop": "a combinational loop (a signal computed from itself without a register between)",
    "multiple-drivers": "multiple drivers",
    "undriven": "an undriven signal",
    "initial": "an initial value synthesis for an ASIC ignores (reset the register instead)",
    "delay": "a delay synthesis ignores (hardware does not wait)",
    "display-only": "logic that only feeds a $display (synthesis drops it)",
    "tool-macro": "a tool's macro tested: synthesis and simulation would read different designs",
}


def _describe(f: flow.Finding) -> str:
    where = f" at {f.where}" if f.where else ""
    return f"{f.kind}: {f.what}{where}: {_WHAT.get(f.kind, '')}".rstrip(": ")


def score_ppa(
    answer: Mapping[str, Any], reference: Mapping[str, Any], opts: Mapping[str, Any]
) -> tuple[float, dict[str, float]]:
    """(score in [0, 1], the ratios): mean of min(cap, reference/answer) over area and depth, weighted, / cap."""
    cap = max(1.0, float(opts.get("cap", PPA_DEFAULTS["cap"])))
    wa = max(0.0, float(opts.get("area_weight", PPA_DEFAULTS["area_weight"])))
    wd = max(0.0, float(opts.get("depth_weight", PPA_DEFAULTS["depth_weight"])))

    def ratio(ref: float, ans: float) -> float:
        if ans <= 0:
            return cap if ref > 0 else 1.0
        return min(cap, max(0.0, ref / ans))

    ra = ratio(float(reference["area"]), float(answer["area"]))
    rd = ratio(float(reference["depth"]), float(answer["depth"]))
    total = wa + wd or 1.0
    score = (wa * ra + wd * rd) / total / cap
    return score, {"area_ratio": round(ra, 4), "depth_ratio": round(rd, 4)}


class PpaStage(Stage):
    name = "ppa"
    version = "1"
    requires = (
        "synth",
        *CORRECTNESS,
    )  # every enabled one must have passed: a wrong design earns nothing here
    needs = ("files", FIGURES)
    description = "area and depth against the reference's, for a correct design only, capped"
    default_timeout = 5.0
    calibrate = False

    def run(self, ctx: StageContext) -> StageResult:
        opts = {**PPA_DEFAULTS, **ctx.options}
        judged = [n for n in CORRECTNESS if n in ctx.results]
        if not judged:
            msg = "ppa pays only a correct design: enable `equivalence` or `tests` in the profile"
            return self.result(
                Status.ERROR, 0.0, diagnostics=[Diagnostic(msg, code="no-correctness")], feedback=msg
            )
        if not all(ctx.results[n].passed for n in judged):
            msg = "not correct, so no PPA credit"
            return self.result(
                Status.FAILED, 0.0, diagnostics=[Diagnostic(msg, code="not-correct")], feedback=msg
            )
        product = ctx.products.get(FIGURES) or {}
        ans, ref = product.get("answer"), product.get("reference")
        if not ans:
            msg = "no synthesis figures for the answer"
            return self.result(
                Status.FAILED, 0.0, diagnostics=[Diagnostic(msg, code="no-figures")], feedback=msg
            )
        if not ref:
            msg = "the task's reference has no synthesis figures (none given, or it does not synthesise): nothing to compare with"
            return self.result(
                Status.SKIPPED,
                0.0,
                diagnostics=[Diagnostic(msg, code="no-reference", severity="info")],
                feedback=msg,
            )
        score, ratios = score_ppa(ans, ref, opts)
        metrics = {
            **ratios,
            "area": ans["area"],
            "reference_area": ref["area"],
            "depth": ans["depth"],
            "reference_depth": ref["depth"],
            "cap": float(opts["cap"]),
        }
        fb = (
            f"area {ans['area']:g} vs the reference's {ref['area']:g}, logic depth {ans['depth']} vs {ref['depth']}: "
            f"{score:.2f} of the PPA credit (a design the reference's size earns {1 / max(1.0, float(opts['cap'])):.2f})"
        )
        return self.result(Status.PASSED, score, metrics=metrics, feedback=fb)


@hookimpl
def rtlreward_register_stages(register):
    register(SynthStage())
    register(PpaStage())


@hookimpl
def rtlreward_register_profiles(register):
    """The `ppa` preset lives with the core's presets (rtlreward/presets/ppa.toml); registered here, never twice."""
    from rtlreward.profiles import PRESETS, preset_path

    if "ppa" not in PRESETS:
        register("ppa", preset_path("ppa"))
