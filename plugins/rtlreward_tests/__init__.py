"""The `tests` stage: runs the task's functional tests through the harness runner registered for
`task.harness.kind` (cocotb, cvdp, verilog-eval, rtllm, or a third party's), so the stage works for every dataset
and knows nothing about simulators. Score = tests passed / tests run; only "every test passed" is a pass, and a
runner's pass without a complete test count is an `error`.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from rtlreward import hookimpl
from rtlreward.model import Diagnostic, StageResult, Status
from rtlreward.stage import Stage, StageContext

__all__ = ["TestsStage"]


class TestsStage(Stage):
    name = "tests"
    # 2: verdicts come from the signed record of rtlreward.verdict; results cached by version 1 could be forged
    # 3: stable codes (verilog_eval.mismatch, one spelling) and a harness that cannot start is an error
    version = "3"
    # Stable codes in results rows (rtlreward.codes): the harness runners (cocotb, CVDP, VerilogEval/RTLLM
    # testbenches) report one outcome under several ids.
    codes: ClassVar[dict[str, str]] = {
        "test-failed": "failed",
        "cocotb-failed": "failed",
        "service-failed": "failed",
        "check-failed": "failed",
        "sim-timeout": "timeout",
        "build-failed": "build_failed",
        "compile-failed": "build_failed",
        "harness-error": "harness_error",
        "bad-harness": "harness_error",
        "no-record": "no_record",
        "incomplete-record": "no_record",
    }
    requires = ("compile",)
    description = "run the task's harness (cocotb by default): score = tests passed / tests run"
    default_timeout = 60.0

    def tool_versions(self) -> dict[str, str]:
        """Each harness runner reports its own tools (`runner.tool_versions()`); all of them key the cache, since
        the stage does not know here which runner a task will use."""
        from rtlreward.plugins import get_registry

        versions: dict[str, str] = {}
        for kind, runner in sorted(get_registry().harnesses().items()):
            fn = getattr(runner, "tool_versions", None)
            for tool, version in (fn() if callable(fn) else {}).items():
                versions[f"{kind}/{tool}"] = str(version)
        return versions

    def run(self, ctx: StageContext) -> StageResult:
        harness = ctx.task.harness
        if harness is None:
            d = Diagnostic("the task has no test harness", code="no-harness", severity="info")
            return self.result(Status.SKIPPED, 0.0, diagnostics=[d])
        registry = ctx.registry
        if registry is None:
            from rtlreward.plugins import get_registry

            registry = get_registry()
        runner = registry.harnesses().get(harness.kind)
        if runner is None:
            known = ", ".join(sorted(registry.harnesses())) or "none"
            d = Diagnostic(
                f"no harness runner for kind {harness.kind!r} (known: {known}); install the plugin that provides it",
                code="no-harness-runner",
            )
            return self.result(Status.SKIPPED, 0.0, diagnostics=[d], feedback="")
        res = runner.run(ctx)
        # Whatever the runner says, a pass needs a positive count of tests that all passed.
        if res.status is Status.PASSED:
            passed, total = res.metrics.get("tests_passed"), res.metrics.get("tests_total")
            if not total or passed != total:
                d = Diagnostic(
                    "the harness reported a pass without a complete test count", code="no-test-count"
                )
                res = attrs.evolve(res, status=Status.ERROR, score=0.0, diagnostics=(*res.diagnostics, d))
        if res.name != self.name or res.version != self.version:
            res = attrs.evolve(res, name=self.name, version=self.version)
        return res


@hookimpl
def rtlreward_register_stages(register):
    register(TestsStage())
