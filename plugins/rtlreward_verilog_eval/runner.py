"""The `verilog-eval` harness runner: the benchmark's own Icarus flow and verdict.

Official flow (Makefile.in): `iverilog -Wall -Winfloop -Wno-timescale -g2012 -s tb -o test answer.sv
ProbX_test.sv ProbX_ref.sv`, then `timeout 30 ./test`. Official verdict (scripts/sv-iv-analyze) reads the log
line by line: "syntax error" -> S, an explicit-cast error -> e, a zero-size constant -> 0, an always block with
no sensitivities -> n, "is declared here as wire" -> w, "Unknown module type" -> m, "Unable to bind ... `clk'"
-> c, "TIMEOUT" -> T (each ends the scan); otherwise "Unable to bind wire/reg" -> p, any "error" -> C, and only
then a line `Mismatches: 0 in M samples` is a pass. Here the same rules apply, except that the `Mismatches` line
counts only when the testbench printed it (see simrun), and partial credit is 1 - N/M for a run that reached
the verdict line with N mismatches.
"""

from __future__ import annotations

import re

import attrs

from rtlreward.model import Diagnostic, StageResult, Status
from rtlreward.stage import StageContext
from rtlreward_hdl.simrun import (
    SimRun,
    clean_line,
    ended_result,
    limit_diagnostic,
    run_testbench,
    tests_result,
)

__all__ = ["COMPILE_FLAGS", "VerilogEvalRunner", "analyze"]

COMPILE_FLAGS = ("-Wall", "-Winfloop", "-Wno-timescale")
_MISMATCH_RE = re.compile(r"^Mismatches: (\d+) in (\d+) samples$")

# The official analyzer's line rules, in its order; each ends the scan.
_BREAK_RULES: tuple[tuple[str, str, str], ...] = (
    ("syntax error", "S", "syntax error"),
    ("error: This assignment requires an explicit cast", "e", "an assignment needs an explicit cast"),
    (
        "error: Sized numeric constant must have a size greater than zero",
        "0",
        "a sized constant of size zero",
    ),
    (
        "warning: always_comb process has no sensitivities",
        "n",
        "an always_comb block reads no signal (the benchmark fails this; use assign)",
    ),
    (
        "found no sensitivities so it will never trigger",
        "n",
        "an always block reads no signal so it never runs (the benchmark fails this; use assign)",
    ),
    ("is declared here as wire", "w", "a procedural assignment to a wire (declare it logic or reg)"),
    ("Unknown module type", "m", "an instance of a module that is not defined"),
    ("Unable to bind wire/reg/memory `clk'", "c", "the clock signal is not connected or declared"),
    ("TIMEOUT", "T", "the testbench's own time guard fired (TIMEOUT) before the stimulus ended"),
)
CODES = {
    ".": "pass",
    "S": "syntax error",
    "e": "explicit cast required",
    "0": "zero-size constant",
    "n": "always block without sensitivities",
    "w": "assignment to a wire",
    "m": "unknown module",
    "c": "clock not bound",
    "T": "testbench timeout",
    "p": "unbound signal",
    "C": "compile or runtime error",
    "r": "no verdict (reset-sensitive design)",
    "R": "mismatches or no verdict",
}


def analyze(lines: list[tuple[str, bool]], answer_text: str = "") -> tuple[str, int | None, int | None, str]:
    """The official analyzer over (line, printed by the testbench) pairs: (code, mismatches, samples, why).
    mismatches/samples come from the testbench's verdict line (None when it printed none)."""
    error_c = error_p = no_mismatch = False
    mismatches = samples = None
    for line, from_tb in lines:
        for needle, code, why in _BREAK_RULES:
            if needle in line:
                return code, mismatches, samples, why
        if "error" in line:
            error_c = True
        if "Unable to bind wire/reg" in line:
            error_p = True
        m = _MISMATCH_RE.match(line.strip()) if from_tb else None
        if m:
            mismatches, samples = int(m.group(1)), int(m.group(2))
            if mismatches == 0:
                no_mismatch = True
    if error_p:
        return "p", mismatches, samples, "a signal could not be bound"
    if error_c:
        return "C", mismatches, samples, "the compiler or the simulation reported an error"
    if no_mismatch:
        return ".", mismatches, samples, ""
    if any(s in answer_text for s in ("posedge reset", "negedge reset", "posedge r)")):
        return "r", mismatches, samples, "no passing verdict (the design is sensitive to a reset edge)"
    return "R", mismatches, samples, "no passing verdict"


class VerilogEvalRunner:
    """Harness options: `testbench` (harness files compiled after the answer, in order), `tb_top` ("tb"),
    `timeout` (simulation seconds, 30 as in the benchmark), `problem`."""

    kind = "verilog-eval"

    def run(self, ctx: StageContext) -> StageResult:
        t = ctx.task
        h = t.harness
        opts = dict(h.options)
        testbench = [p for p in opts.get("testbench") or sorted(h.files) if p in h.files]
        toplevel = t.toplevel or opts.get("toplevel") or "TopModule"
        run = run_testbench(
            ctx,
            toplevel=toplevel,
            harness_files=h.files,
            testbench=testbench,
            tb_top=opts.get("tb_top", "tb"),
            compile_flags=COMPILE_FLAGS,
            sim_timeout=float(opts.get("timeout", 30.0)),
        )
        if run.stage != "sim" or run.status is not None:
            res = ended_result(run)
            if (
                run.stage in ("isolate", "compile")
                and run.compile is not None
                and run.status is Status.FAILED
            ):
                lines = [(ln, False) for ln in run.compile.output.splitlines()]
                code = analyze(lines, "\n".join(ctx.files.values()))[0]
                res = attrs.evolve(res, metrics={**res.metrics, "verilog_eval_code": code})
            return res
        return self.verdict(ctx, run)

    def verdict(self, ctx: StageContext, run: SimRun) -> StageResult:
        tag = run.tag
        compile_lines = [(ln, False) for ln in (run.compile.output if run.compile else "").splitlines()]
        sim_lines: list[tuple[str, bool]] = []
        for ln in run.output_lines:
            i = ln.find(tag)
            if i < 0:
                sim_lines.append((ln, False))
                continue
            if i > 0:  # the answer printed text without a newline before the testbench's line
                sim_lines.append((ln[:i], False))
            sim_lines.append((ln[i:].replace(tag, ""), True))
        answer_text = "\n".join(ctx.files.values())
        code, n, m, why = analyze(compile_lines + sim_lines, answer_text)
        hints = [ln[len("Hint: ") :].strip() for ln in run.tb_lines if ln.startswith("Hint: ")]
        metrics = {"verilog_eval_code": code, "mismatches": n, "samples": m}
        if code == ".":
            if not m:
                d = Diagnostic("the testbench compared no samples", code="verilog_eval.no_samples")
                return tests_result(Status.FAILED, 0, 0, [d], d.message, metrics)
            return tests_result(Status.PASSED, m, m, [], "", metrics)
        if code in ("R", "r") and n is not None and m:
            # One spelling for the run's verdict (`verilog_eval.mismatch`, counts as fields) and one for each
            # output the testbench names (`verilog_eval.output_mismatch`, the signal as a field).
            diags = [
                Diagnostic(
                    clean_line(hint, run.root), code="verilog_eval.output_mismatch", fields=_hint_fields(hint)
                )
                for hint in hints
                if "has no mismatches" not in hint and not hint.startswith("Total mismatched")
            ]
            diags.insert(
                0,
                Diagnostic(
                    f"{n} of {m} samples mismatch the reference",
                    code="verilog_eval.mismatch",
                    fields={"mismatches": n, "samples": m},
                ),
            )
            feedback = "\n".join(d.message for d in diags[:6])
            return tests_result(Status.FAILED, max(0, m - n), m, diags, feedback, metrics)
        if code in ("R", "r"):
            tail = [clean_line(ln, run.root) for ln in run.output_lines[-5:] if ln.strip()]
            msg = (
                "the testbench printed no verdict (the simulation crashed or ended before the testbench's final "
                f"report; exit code {run.sim.returncode if run.sim else '?'})"
            )
            diags = [Diagnostic(msg, code="verilog_eval.no_verdict")] + [
                Diagnostic(ln, severity="info", code="verilog_eval.output") for ln in tail
            ]
            limit = limit_diagnostic(run)  # the design ran into a sandbox limit: say which
            if limit is not None:
                diags.insert(0, limit)
                msg = f"{limit.message}; {msg}"
            return tests_result(Status.FAILED, 0, 0, diags, msg, metrics)
        # A rule of the official analyzer failed the run, whatever the mismatch count.
        detail = [
            Diagnostic(clean_line(ln, run.root), severity="info", code="verilog_eval.log")
            for ln, _ in compile_lines + sim_lines
            if _rule_line(ln, code)
        ][:5]
        msg = f"VerilogEval scores this '{code}' ({CODES.get(code, code)}): {why}"
        d = Diagnostic(msg, code="verilog_eval.rule", fields={"rule": code, "meaning": CODES.get(code, code)})
        return tests_result(Status.FAILED, 0, m or 0, [d, *detail], msg, metrics)


_HINT_RE = re.compile(r"Output '([^']+)' has (\d+) mismatches(?:\. First mismatch occurred at time (\d+))?")


def _hint_fields(hint: str) -> dict[str, object]:
    """`Output 'out' has 3 mismatches. First mismatch occurred at time 20.` as structured fields."""
    m = _HINT_RE.search(hint)
    if not m:
        return {}
    fields: dict[str, object] = {"signal": m.group(1), "mismatches": int(m.group(2))}
    if m.group(3):
        fields["first_time"] = int(m.group(3))
    return fields


def _rule_line(line: str, code: str) -> bool:
    needles = [needle for needle, c, _ in _BREAK_RULES if c == code]
    if code == "p":
        needles = ["Unable to bind wire/reg"]
    if code == "C":
        needles = ["error"]
    return any(n in line for n in needles)
