"""The `compile` stage: does the answer elaborate, with Icarus, together with what the harness compiles?

A gate (score 1 or 0): `iverilog -g2012 -t null -s <toplevel>` (elaboration, no code generation) over the task's
`compile_sources` (or the expected files plus context HDL under rtl/). Diagnostics carry Icarus's file and line so a model can find its mistake.
"""

from __future__ import annotations

from typing import ClassVar

from rtlreward import hookimpl
from rtlreward.model import Diagnostic, StageResult, Status
from rtlreward.stage import Stage, StageContext
from rtlreward_hdl.files import (
    compile_sources,
    include_dirs,
    materialise,
    summarise,
    toplevel,
    unsafe_includes,
)
from rtlreward_hdl.icarus import direct_command, iverilog_version, parse_iverilog
from rtlreward_hdl.preprocess import inert

__all__ = ["CompileStage"]


class CompileStage(Stage):
    name = "compile"
    version = "1"
    # Stable codes of this stage's own ids in results rows (rtlreward.codes).
    codes: ClassVar[dict[str, str]] = {"compile-failed": "error"}
    requires = ("safety",)
    description = "Icarus iverilog -g2012 elaborates the answer with the harness's sources (gate)"
    default_timeout = 30.0

    def tool_versions(self) -> dict[str, str]:
        return {"iverilog": iverilog_version()}

    def run(self, ctx: StageContext) -> StageResult:
        root, files = materialise(ctx, "compile")
        bad = unsafe_includes(files)
        if bad:
            return self.result(
                Status.FAILED, 0.0, metrics={"errors": len(bad)}, diagnostics=bad, feedback=summarise(bad)
            )
        sources = compile_sources(ctx.task, ctx.files, files)
        if not sources:
            d = Diagnostic("no HDL source files to compile", code="no-sources")
            return self.result(Status.FAILED, 0.0, metrics={"errors": 1}, diagnostics=[d], feedback=d.message)
        # `-t null`: elaboration only, without generating the simulation program nothing runs (~30% of Icarus's
        # time on a small module); what fails to elaborate fails the same way (412 VerilogEval and RTLLM files:
        # no verdict differs), and the tests stage compiles for vvp anyway.
        argv = ["iverilog", "-g2012", "-t", "null"]
        top = toplevel(ctx.task)
        if top:
            argv += ["-s", top]
        argv += [f"-I{d}" for d in include_dirs(sources)]
        argv += [str(x) for x in ctx.options.get("flags", ())]
        argv += sources
        res = ctx.run(self._direct(ctx, root, files, sources, top) or argv, cwd=root)
        if res.timed_out:
            d = Diagnostic(f"iverilog did not finish within {ctx.timeout:g} s", code="timeout")
            return self.result(Status.TIMEOUT, 0.0, diagnostics=[d], feedback=d.message)
        diags = parse_iverilog(res.output, root)
        errors = [d for d in diags if d.severity == "error"]
        if res.returncode == 127 and not errors:
            d = Diagnostic("Icarus Verilog is not installed: `apt-get install iverilog`", code="tool-missing")
            return self.result(Status.ERROR, 0.0, diagnostics=[d])
        metrics = {"errors": len(errors), "warnings": sum(d.severity == "warning" for d in diags)}
        if res.returncode == 0:
            # What elaborated, for a later stage that would run the same command again (the tests stage's
            # check that the answer elaborates on its own: rtlreward_hdl.simrun).
            flags = [str(x) for x in ctx.options.get("flags", ())]
            done = {"top": top, "sources": sorted(sources), "flags": flags} if top else None
            return self.result(
                Status.PASSED,
                1.0,
                metrics=metrics,
                diagnostics=diags,
                artifacts={"elaborated": done} if done else None,
            )
        if not errors:
            text = " ".join(
                ln.strip()
                for ln in res.output.splitlines()
                if ln.strip() and "/" not in ln and "I give up" not in ln
            )[:300]
            msg = f"iverilog failed (exit {res.returncode})" + (f": {text}" if text else "")
            if top and "Unable to find the root module" in res.output:
                msg = f"no module named {top} (the task's toplevel) in the answer"
            errors = [Diagnostic(msg, code="compile-failed")]
            diags = errors + diags
        limit = _limit(ctx, res)
        if limit is not None:  # the answer asked Icarus for more than the sandbox gives: say which limit
            errors = [limit, *errors]
            diags = [limit, *diags]
            metrics["resource_limit"] = limit.fields["limit"]
        return self.result(Status.FAILED, 0.0, metrics=metrics, diagnostics=diags, feedback=summarise(errors))

    @staticmethod
    def _direct(
        ctx: StageContext, root, files: dict[str, str], sources: list[str], top: str | None
    ) -> list[str] | None:
        """`ivl` itself in place of the `iverilog` launcher (`rtlreward_hdl.icarus.direct_command`), where the
        tools run on this machine's Icarus, no flag was added and no source is one a preprocessor would change:
        the same elaboration, the same messages, ~3 ms less."""
        if ctx.options.get("flags") or not inert(files.get(s, "") for s in sources):
            return None
        return direct_command(ctx.executor, root, sources, files, top)


def _limit(ctx: StageContext, res) -> Diagnostic | None:
    """A `resource-limit` diagnostic when Icarus died at a sandbox limit while elaborating the answer (memory:
    `std::bad_alloc`, "memory exhausted"; stack: SIGSEGV from recursion too deep; file size; processes), None
    otherwise. The task's reference elaborates under the same limits (rtlreward.sandbox.resource_exhaustion)."""
    from rtlreward.sandbox import resource_exhaustion

    hit = resource_exhaustion(res.output, res.returncode, limits=ctx.limits(), truncated=res.truncated)
    if hit is None:
        return None
    message = hit.message.replace("the simulator", "Icarus").replace(
        "crashed the simulator", "crashed Icarus"
    )
    return Diagnostic(message, code="resource-limit", fields={"limit": hit.limit})


@hookimpl
def rtlreward_register_stages(register):
    register(CompileStage())
