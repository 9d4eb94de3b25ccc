"""The `rtllm` harness runner: the design with its self-checking testbench under Icarus.

The benchmark compiles `<design>.v testbench.v` with VCS (`-sverilog +v2k -timescale=1ns/1ns`) and passes a
design when the simulation output contains "Pass". Here: Icarus `-g2012` with a `timescale 1ns/1ns` default in
front (VCS's `-timescale`), the answer first, then the testbench; a pass is the testbench itself printing
"Your Design Passed" with no failure count. Partial credit where the testbench reports a count: "Test completed
with N / T failures" scores 1 - N/T; a count without a total, or no count, scores 0.
"""

from __future__ import annotations

import re

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

__all__ = ["PRELUDE", "RtllmRunner", "parse_verdict"]

PRELUDE = "`timescale 1ns/1ns\n"
_PASS_RE = re.compile(r"Your Design Passed", re.I)
_COUNT_RE = re.compile(r"Test completed with\s*(\d+)\s*(?:/\s*(\d+)\s*)?(?:failures|errors)", re.I)
_FAIL_WORDS = re.compile(r"\b(error|fail(?:ed|ure|ures)?)\b", re.I)


def parse_verdict(tb_lines: list[str], checks: int | None) -> tuple[bool, int, int, list[str]]:
    """(passed, checks passed, checks run, the testbench's failure lines) from what the testbench printed.
    `checks`: the testbench's check count when its source states one (e.g. "%d / 100 failures")."""
    passed_line = any(_PASS_RE.search(ln) for ln in tb_lines)
    failures = [ln.strip() for ln in tb_lines if _FAIL_WORDS.search(ln) and not _PASS_RE.search(ln)]
    count = None
    for ln in tb_lines:
        m = _COUNT_RE.search(ln)
        if m:
            count = (int(m.group(1)), int(m.group(2)) if m.group(2) else checks)
    if count is not None and count[0] > 0:
        n, total = count
        if total and total > 0:
            return False, max(0, total - n), total, failures
        return False, 0, 1, failures
    if passed_line and (count is not None or not failures):
        total = checks or 1
        return True, total, total, []
    return False, 0, checks or 1, failures


class RtllmRunner:
    """Harness options: `testbench` (["testbench.v"]), `tb_top` (the testbench's module), `checks` (its
    check count when stated), `timeout` (simulation seconds)."""

    kind = "rtllm"

    def run(self, ctx: StageContext) -> StageResult:
        t = ctx.task
        h = t.harness
        opts = dict(h.options)
        testbench = [p for p in opts.get("testbench") or ["testbench.v"] if p in h.files]
        toplevel = t.toplevel or opts.get("toplevel") or opts.get("design")
        if not toplevel or not testbench:
            d = Diagnostic("the rtllm harness needs a toplevel and a testbench.v", code="bad-harness")
            return tests_result(Status.ERROR, 0, 0, [d])
        run = run_testbench(
            ctx,
            toplevel=toplevel,
            harness_files=h.files,
            testbench=testbench,
            tb_top=opts.get("tb_top"),
            prelude=PRELUDE,
            sim_timeout=float(opts.get("timeout", 30.0)),
        )
        if run.stage != "sim" or run.status is not None:
            return ended_result(run)
        return self.verdict(run, opts.get("checks"))

    def verdict(self, run: SimRun, checks: int | None) -> StageResult:
        tb_lines = run.tb_lines
        passed, ok, total, failures = parse_verdict(tb_lines, checks)
        metrics = {"checks_failed": total - ok}
        if passed:
            return tests_result(Status.PASSED, ok, total, [], "", metrics)
        if not tb_lines or not (failures or any(_COUNT_RE.search(ln) for ln in tb_lines)):
            tail = [clean_line(ln, run.root) for ln in run.output_lines[-5:] if ln.strip()]
            msg = (
                "the testbench printed no verdict (the simulation ended before the testbench's report; exit code "
                f"{run.sim.returncode if run.sim else '?'})"
            )
            diags = [Diagnostic(msg, code="no-verdict")]
            limit = limit_diagnostic(run)  # the design ran into a sandbox limit: say which
            if limit is not None:
                diags.insert(0, limit)
                msg = f"{limit.message}; {msg}"
            diags += [Diagnostic(ln, severity="info", code="output") for ln in tail]
            return tests_result(Status.FAILED, 0, total, diags, msg, metrics)
        shown = [clean_line(ln.strip("= "), run.root) for ln in failures[:20]]
        diags = [Diagnostic(ln, code="check-failed") for ln in shown]
        more = f"\n... {len(failures) - 6} more" if len(failures) > 6 else ""
        feedback = "The testbench reports:\n" + "\n".join(shown[:6]) + more
        return tests_result(Status.FAILED, ok, total, diags, feedback, metrics)
