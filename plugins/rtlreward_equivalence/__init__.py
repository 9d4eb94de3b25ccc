"""The `equivalence` stage: does the answer behave like the task's reference design, output by output, cycle by cycle?

A harness only checks what its tests check (the official CVDP LFSR harness passes a design whose output is constant
0); the reference design is a complete specification. This stage compares the two:

1. formal first (Yosys builds a miter of the two designs, ABC's PDR proves it or finds a counterexample; when PDR
   does not decide within its budget, BMC checks a bound): `proved`, `bounded(N)` or a counterexample;
2. differential simulation (Icarus, seeded random stimulus after reset, several seeds, every output every cycle)
   where Yosys cannot read a design, the proof does not decide, or to replay a formal counterexample with the
   simulator's values (x in the reference is a don't-care);
3. partial credit: the share of output bits that never differed, so one wrong output of four earns more than four;
4. the first differing cycle, the inputs up to it, and expected/actual per output, as feedback a model can act on.

Verdict metric `equivalence`: `proved` | `bounded(N)` | `refuted` | `unknown` (no difference found, nothing
proved: simulation only); `method`: `formal`, `simulation` or `formal+simulation`. Status: passed unless refuted
(failed); skipped without a reference; error when a tool is missing or the reference itself cannot be read.

Semantics and limits are in docs/equivalence.md.
"""

from __future__ import annotations

import functools
import secrets
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from rtlreward import hookimpl
from rtlreward.model import Diagnostic, StageResult, Status
from rtlreward.stage import Stage, StageContext, UnsafePath, safe_relpath

from . import diffsim, formal
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
    "sat_timeout": 5.0,  # seconds per SAT call of the x-aware proof (after an unconfirmed PDR counterexample)
    "sat_maxsteps": 4,
    "simulate": True,
    "seeds": 3,
    "cycles": 256,  # per seed
    "reset_cycles": 1,
    "reset_probability": 0.02,  # reset asserted in mid-run, per cycle, after the first seed
    "sim_timeout": 20.0,  # seconds per simulation of the reference; the candidate's is calibrated from it
    "yosys": "yosys",  # the commands to run (e.g. another install's path)
    "yosys_abc": "yosys-abc",
}
MAX_ROWS = 16  # input rows shown in a counterexample


@functools.cache
def _version(argv: tuple[str, ...]) -> str:
    exe = shutil.which(argv[0])
    if exe is None:
        return "missing"
    try:
        out = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0][:80] if text else "unknown"


def _missing_tool(res: Any, tool: str) -> bool:
    text = res.stderr or ""
    return res.returncode == 127 or (f"execvp {tool}" in text and "No such file" in text)


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
        if formal.SAFE_PATH_RE.match(d) and d not in script_incdirs:
            script_incdirs.append(d)
        if is_header(rel):
            continue
        units.append(name)
        if formal.SAFE_PATH_RE.match(name):
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


@attrs.frozen
class _Sim:
    trace: diffsim.Trace | None
    error: str = ""  # compile error or why it did not run
    seconds: float = 0.0
    timed_out: bool = False


class EquivalenceStage(Stage):
    name = "equivalence"
    version = "1"
    # Stable codes of this stage's own ids in results rows (rtlreward.codes).
    codes: ClassVar[dict[str, str]] = {"sim-timeout": "timeout", "compile-failed": "compile_error"}
    requires = ("safety",)
    weight = 1.0
    description = "formal (Yosys/ABC) and simulated (Icarus) equivalence to the task's reference design"
    default_timeout = 30.0

    def tool_versions(self) -> dict[str, str]:
        return {"yosys": _version(("yosys", "-V")), "iverilog": _version(("iverilog", "-V"))}

    # -- helpers -------------------------------------------------------------------------------------------
    def _fail(
        self, status: Status, msg: str, code: str, verdict: str = "unknown", **metrics: Any
    ) -> StageResult:
        d = Diagnostic(msg, code=code, severity="error" if status is not Status.SKIPPED else "info")
        return self.result(
            status, 0.0, metrics={"equivalence": verdict, **metrics}, diagnostics=[d], feedback=msg
        )

    def _formal(
        self, ctx: StageContext, work: Path, plan: diffsim.SimPlan, gold: _Side, gate: _Side
    ) -> _Formal:
        opts = {**DEFAULTS, **ctx.options}
        wrapper = formal.wrapper(plan.inputs, plan.reset, plan.reset_cycles)
        (work / "wrapper.sv").write_text(wrapper)
        yosys, abc = str(opts.get("yosys") or "yosys"), str(opts.get("yosys_abc") or "yosys-abc")
        seconds = 0.0
        for nolatches in (False, True):
            script = formal.miter_script(
                gold.script_units,
                gate.script_units,
                plan.top,
                "wrapper.sv",
                gold_incdirs=gold.script_incdirs,
                gate_incdirs=gate.script_incdirs,
                nolatches=nolatches,
            )
            (work / "eq.ys").write_text(script)
            res = ctx.run([yosys, "-q", "-s", "eq.ys"], cwd=work)
            seconds += res.duration
            if res.returncode == 0 or formal.LATCH_ERROR not in formal.yosys_error(res.output):
                break
        if _missing_tool(res, yosys):
            return _Formal("missing", note=f"cannot run {yosys!r}: install Yosys (`apt-get install yosys`)")
        if res.timed_out:
            return _Formal(
                "timeout", note=f"Yosys did not build the miter within {ctx.timeout:g} s", seconds=seconds
            )
        if res.returncode != 0 or not (work / formal.AIG).is_file():
            msg = formal.yosys_error(res.output) or f"exit {res.returncode}"
            for name, orig in sorted(gold.names.items(), key=lambda kv: -len(kv[0])):
                msg = msg.replace(name, f"reference {orig}")
            for name, orig in sorted(gate.names.items(), key=lambda kv: -len(kv[0])):
                msg = msg.replace(name, orig)
            return _Formal(
                "error", note=f"Yosys could not read or compare the designs: {msg}", seconds=seconds
            )
        budget = float(opts.get("formal_timeout", DEFAULTS["formal_timeout"]))
        res = ctx.run([abc, "-c", formal.abc_pdr(budget)], cwd=work, timeout=budget + 10)
        seconds += res.duration
        if _missing_tool(res, abc):
            return _Formal("missing", note=f"cannot run {abc!r}: install yosys-abc (`apt-get install yosys`)")
        pdr = formal.parse_abc(res.stdout) if not res.timed_out else formal.AbcResult("undecided")
        engine, cex_file, found = "pdr", "pdr.cex", pdr
        if pdr.verdict == "undecided":
            t = float(opts.get("bmc_timeout", DEFAULTS["bmc_timeout"]))
            frames = int(opts.get("bmc_frames", DEFAULTS["bmc_frames"]))
            res = ctx.run([abc, "-c", formal.abc_bmc(t, frames)], cwd=work, timeout=t + 10)
            seconds += res.duration
            engine, cex_file = "bmc", "bmc.cex"
            found = formal.parse_abc(res.stdout) if not res.timed_out else formal.AbcResult("undecided")
        if found.verdict == "proved":
            return _Formal("proved", engine, seconds=seconds)
        if found.verdict == "bounded" and found.frame:
            return _Formal("bounded", engine, bound=found.frame, seconds=seconds)
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

    def _sat_prove(
        self, ctx: StageContext, work: Path, plan: diffsim.SimPlan, gold: _Side, gate: _Side, fres: _Formal
    ) -> bool:
        """The x-aware proof (see `formal.sat_script`): True only when Yosys exits 0 after `sat -verify`."""
        opts = {**DEFAULTS, **ctx.options}
        t = float(opts["sat_timeout"])
        marker = f"rtlreward_proved_{secrets.token_hex(8)}"
        script = formal.sat_script(
            gold.script_units,
            gate.script_units,
            plan.top,
            plan.reset,
            plan.reset_cycles,
            maxsteps=int(opts["sat_maxsteps"]),
            timeout=t,
            gold_incdirs=gold.script_incdirs,
            gate_incdirs=gate.script_incdirs,
            nolatches=fres.nolatches,
            marker=marker,
        )
        (work / "sat.ys").write_text(script)
        res = ctx.run([str(opts.get("yosys") or "yosys"), "-q", "-s", "sat.ys"], cwd=work, timeout=3 * t + 10)
        proved_line = any(line.strip() == marker for line in res.stderr.splitlines())
        return res.returncode == 0 and not res.timed_out and proved_line

    def _simulate(
        self,
        ctx: StageContext,
        work: Path,
        side: str,
        files: _Side,
        plan: diffsim.SimPlan,
        stim: diffsim.Stimulus,
        timeout: float,
    ) -> _Sim:
        nonce = secrets.token_hex(8)
        sim_dir = work / f"sim_{side}"
        sim_dir.mkdir(parents=True, exist_ok=True)
        (sim_dir / "stim.hex").write_text(diffsim.stimulus_hex(plan, stim))
        tb_name, tb = diffsim.testbench(plan, nonce, len(stim), "stim.hex")
        (sim_dir / "tb.sv").write_text(tb)
        rel = f"sim_{side}"
        argv = ["iverilog", "-g2012", "-o", f"{rel}/tb.vvp", "-s", tb_name]
        argv += [f"-I{d}" for d in files.incdirs]
        argv += [f"{rel}/tb.sv", *files.units]
        res = ctx.run(argv, cwd=work)
        if _missing_tool(res, "iverilog"):
            return _Sim(None, "missing")
        if res.returncode != 0 or res.timed_out:
            lines = [ln.strip() for ln in res.output.splitlines() if ln.strip() and "I give up" not in ln]
            msg = "; ".join(lines[:4])[:400] or f"iverilog exit {res.returncode}"
            for name, orig in files.names.items():
                msg = msg.replace(name, orig)
            return _Sim(None, msg, res.duration)
        run = ctx.run(["vvp", "-n", "tb.vvp"], cwd=sim_dir, timeout=timeout)
        trace = diffsim.parse_trace(run.stdout, nonce, plan, len(stim))
        return _Sim(trace, "", run.duration, run.timed_out)

    # -- the stage -----------------------------------------------------------------------------------------
    def run(self, ctx: StageContext) -> StageResult:
        task = ctx.task
        opts = {**DEFAULTS, **ctx.options}
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
        cand_ports = module_ports(gate_files, top)
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

        # 1. formal
        same_ports = {(p.name, p.direction, p.width) for p in ref_ports} == {
            (p.name, p.direction, p.width) for p in cand_ports
        }
        why_not = ""
        if not opts["formal"]:
            why_not = "formal check disabled by the profile"
        elif odd:
            why_not = f"port {odd[0].name} is not a plain input/output vector"
        elif len(timing.clocks) > 1:
            why_not = f"several clocks ({', '.join(timing.clocks)})"
        elif not same_ports:
            why_not = "the answer's ports differ from the reference's in width or number"
        if why_not:
            fres = _Formal("skipped", note=f"no formal check: {why_not}")
        else:
            fres = self._formal(ctx, work, plan, gold, gate)
        if fres.outcome == "missing":
            return self._fail(Status.ERROR, fres.note, "tool-missing")
        metrics["formal_seconds"] = round(fres.seconds, 4)
        metrics["formal"] = fres.outcome
        if fres.note:
            notes.append(Diagnostic(fres.note, severity="info", code=f"formal-{fres.outcome}"))
        if fres.outcome == "proved":
            return self.result(
                Status.PASSED,
                1.0,
                metrics={
                    **metrics,
                    "equivalence": "proved",
                    "method": "formal",
                    "formal_engine": fres.engine,
                    "output_bits_mismatched": 0,
                    "outputs_mismatched": 0,
                },
                diagnostics=notes,
            )

        # 2. simulation: replay a formal counterexample, then seeded random stimulus
        if odd or not opts["simulate"]:
            reason = (
                "simulation disabled by the profile"
                if not opts["simulate"]
                else (f"port {odd[0].name} cannot be driven by the generated testbench")
            )
            return self._undecided(fres, metrics, notes, reason)
        sim_timeout = float(opts["sim_timeout"])
        random_stim = diffsim.random_stimulus(
            plan,
            ctx.seed,
            seeds=int(opts["seeds"]),
            cycles=int(opts["cycles"]),
            reset_probability=float(opts["reset_probability"]),
        )
        replay_cycles = 0
        stim = random_stim
        if fres.outcome == "cex":
            # One simulation: the formal counterexample first, then the random runs (each starts with reset).
            replay = diffsim.directed_stimulus(plan, fres.frames)
            replay_cycles = len(replay)
            stim = diffsim.concat(replay, random_stim)
        metrics["sim_seeds"] = int(opts["seeds"])
        metrics["sim_cycles"] = len(random_stim)
        comparison: diffsim.Comparison | None = None
        gold_error = gate_error = ""
        g = self._simulate(ctx, work, "gold", gold, plan, stim, sim_timeout)
        if g.error == "missing":
            return self._fail(
                Status.ERROR, "Icarus Verilog is not installed: `apt-get install iverilog`", "tool-missing"
            )
        if g.trace is None or g.timed_out:
            gold_error = g.error or f"its simulation did not finish within {sim_timeout:g} s"
            notes.append(
                Diagnostic(f"the reference could not be simulated: {gold_error}", code="reference-sim")
            )
        else:
            # A hung candidate is cut at a multiple of the reference's own time, not at the full budget.
            limit = min(sim_timeout, max(2.0, 20 * g.seconds + 1.0))
            a = self._simulate(ctx, work, "gate", gate, plan, stim, limit)
            metrics["sim_seconds"] = round(g.seconds + a.seconds, 4)
            if a.trace is None:
                gate_error = a.error
                notes.append(
                    Diagnostic(f"Icarus could not compile the answer: {gate_error}", code="compile-failed")
                )
            else:
                if a.timed_out:
                    notes.append(
                        Diagnostic(
                            f"the simulation of the answer did not finish within {limit:g} s (the reference took "
                            f"{g.seconds:.2f} s): cycles it never reached count as different",
                            code="sim-timeout",
                        )
                    )
                comparison = diffsim.compare(plan, stim, g.trace, a.trace)
        # PDR's counterexample did not show in simulation (or could not be replayed): it may rest on an x of the
        # reference. Prove again with x modelled, an x of the reference being a don't-care.
        unconfirmed = fres.outcome == "cex" and (comparison is None or comparison.first is None)
        if unconfirmed and not gold_error and self._sat_prove(ctx, work, plan, gold, gate, fres):
            notes.append(
                Diagnostic(
                    "proved with x in the reference as a don't-care (Yosys sat); PDR's counterexample rested "
                    "on such an x",
                    severity="info",
                    code="formal-x-proof",
                )
            )
            metrics.update(
                formal="proved",
                formal_engine="sat",
                equivalence="proved",
                method="formal",
                output_bits_mismatched=0,
                outputs_mismatched=0,
            )
            return self.result(Status.PASSED, 1.0, metrics=metrics, diagnostics=notes)
        return self._verdict(
            fres, plan, stim, replay_cycles, comparison, metrics, notes, gold_error, gate_error
        )

    def _undecided(self, fres: _Formal, metrics: dict, notes: list[Diagnostic], reason: str) -> StageResult:
        notes.append(Diagnostic(reason, severity="info", code="no-simulation"))
        if fres.outcome == "bounded":
            verdict = f"bounded({fres.bound})"
            return self.result(
                Status.PASSED,
                1.0,
                metrics={**metrics, "equivalence": verdict, "method": "formal", "bound": fres.bound},
                diagnostics=notes,
            )
        msg = "equivalence could not be checked: " + "; ".join(d.message for d in notes)
        return self.result(
            Status.ERROR, 0.0, metrics={**metrics, "equivalence": "unknown"}, diagnostics=notes, feedback=msg
        )

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
    ) -> StageResult:
        """Fold the formal outcome and the simulation's comparison into one result (see the module docstring)."""
        formal_used = fres.outcome in ("cex", "bounded", "undecided")
        if fres.engine:
            metrics["formal_engine"] = fres.engine
        if cmp is not None:
            bits_bad = sum(len(v) for v in cmp.mismatched_bits.values())
            metrics.update(
                output_bits_mismatched=bits_bad,
                outputs_mismatched=sum(1 for v in cmp.mismatched_bits.values() if v),
                sim_compared_cycles=cmp.compared_cycles,
            )
            if cmp.first is not None:
                replayed = cmp.first.cycle < replay_cycles
                how = (
                    f"a formal counterexample ({fres.engine}) replayed in simulation"
                    if replayed
                    else "seeded random simulation"
                )
                method = "formal" if replayed else ("formal+simulation" if formal_used else "simulation")
                score = 1.0 - bits_bad / plan.output_bits if plan.output_bits else 0.0
                text, diags = _describe(plan, stim, cmp.first, how)
                metrics.update(equivalence="refuted", method=method, first_mismatch_cycle=cmp.first.cycle)
                return self.result(
                    Status.FAILED, score, metrics=metrics, diagnostics=[*diags, *notes], feedback=text
                )
            if fres.outcome == "cex":
                notes.append(
                    Diagnostic(
                        "the formal counterexample does not show in simulation (it rests on an x of the reference, "
                        "a don't-care, or on a construct synthesis and simulation read differently)",
                        severity="info",
                        code="formal-cex-unconfirmed",
                    )
                )
            if fres.outcome == "bounded":
                verdict = f"bounded({fres.bound})"
                metrics["bound"] = fres.bound
            else:
                verdict = "unknown"
            if fres.outcome in ("error", "skipped", "timeout"):
                notes.append(
                    Diagnostic(
                        "checked by differential simulation only (no proof)", severity="info", code="fallback"
                    )
                )
            metrics.update(equivalence=verdict, method="formal+simulation" if formal_used else "simulation")
            return self.result(Status.PASSED, 1.0, metrics=metrics, diagnostics=notes)
        # No simulation to compare: the formal outcome alone.
        if fres.outcome == "bounded":
            metrics.update(equivalence=f"bounded({fres.bound})", method="formal", bound=fres.bound)
            return self.result(Status.PASSED, 1.0, metrics=metrics, diagnostics=notes)
        if fres.outcome == "cex":
            metrics.update(equivalence="refuted", method="formal")
            text = _describe_frames(plan, fres)
            d = Diagnostic(text, code="not-equivalent")
            return self.result(Status.FAILED, 0.0, metrics=metrics, diagnostics=[d, *notes], feedback=text)
        metrics.update(equivalence="unknown")
        if gate_error:
            msg = "the answer could not be compared with the reference: " + "; ".join(
                d.message for d in notes if d.code in ("compile-failed", "formal-error")
            )
            return self.result(Status.FAILED, 0.0, metrics=metrics, diagnostics=notes, feedback=msg)
        msg = (
            "equivalence could not be checked (a problem of the task or the tools, not of the answer): "
            + "; ".join(d.message for d in notes)
        )
        return self.result(Status.ERROR, 0.0, metrics=metrics, diagnostics=notes, feedback=msg)


def _input_rows(plan: diffsim.SimPlan, stim: diffsim.Stimulus, start: int, end: int) -> list[str]:
    names = [p.name for p in plan.inputs]
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
        rows.append(
            f"  cycle {c - start}: "
            + (" ".join(f"{n}={v}" for n, v in zip(names, vals, strict=True)) or "(no inputs)")
            + (" (reset)" if in_reset else "")
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
