"""The `tests` stage: runs the task's functional tests through the harness runner registered for
`task.harness.kind` (cocotb, cvdp, verilog-eval, rtllm, or a third party's), so the stage works for every dataset
and knows nothing about simulators. Score = the runner's partial credit (tests passed / tests run; VerilogEval:
samples that match), measured above what a do-nothing design earns on the same tests; only "every test passed" is
a pass, and a runner's pass without a complete test count is an `error`.

The do-nothing baseline: a design with the task's interface and its outputs tied to 0, to 1, left undriven or
passing an input through (`rtlreward_hdl.stubs`) earns some partial credit on most harnesses (a VerilogEval testbench whose reference output
is mostly 0 pays a constant-0 module 82 % of its samples). A failing answer's credit is paid above the best stub's:
`max(0, (raw - stub) / (1 - stub))`, so a stub earns 0 and the gradient starts where a design does something. The
baseline is measured once per task, runner toolchain and executor (the stubs run in fresh workspaces of their own,
never the answer's), and cached in the process and under `~/.cache/rtlreward/tests-stub-baseline/`; a stub run that
errs is not cached. `stub_baseline = false` in the stage's options turns it off.
"""

from __future__ import annotations

import json
import secrets
import threading
from pathlib import Path
from typing import Any, ClassVar

import attrs

from rtlreward import hookimpl
from rtlreward.model import Candidate, Diagnostic, StageResult, Status, hash_json
from rtlreward.stage import Stage, StageContext

BASELINE_VERSION = "1"
_BASELINES: dict[str, float | None] = {}
_BASELINE_LOCKS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()

__all__ = ["TestsStage"]


class TestsStage(Stage):
    name = "tests"
    # 2: verdicts come from the signed record of rtlreward.verdict; results cached by version 1 could be forged
    # 3: stable codes (verilog_eval.mismatch, one spelling) and a harness that cannot start is an error
    # 4: partial credit above the do-nothing baseline
    version = "4"
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
        if res.status is Status.FAILED and 0.0 < res.score < 1.0 and ctx.options.get("stub_baseline", True):
            res = self._above_baseline(ctx, runner, res)
        if res.name != self.name or res.version != self.version:
            res = attrs.evolve(res, name=self.name, version=self.version)
        return res

    def _above_baseline(self, ctx: StageContext, runner: Any, res: StageResult) -> StageResult:
        base = stub_baseline(ctx, runner)
        if base is None:
            return res
        raw = res.score
        score = max(0.0, (raw - base) / (1.0 - base)) if base < 1.0 else 0.0
        metrics = {**res.metrics, "tests_score_raw": round(raw, 6), "tests_stub_score": round(base, 6)}
        diags = list(res.diagnostics)
        if base > 0:
            diags.append(
                Diagnostic(
                    f"partial credit is paid above what a design that does nothing earns on these tests "
                    f"({base:.2f} of 1): {raw:.2f} -> {score:.2f}",
                    severity="info",
                    code="stub-baseline",
                )
            )
        return attrs.evolve(res, score=score, metrics=metrics, diagnostics=tuple(diags))


def _baseline_dir() -> Path:
    from rtlreward.cache import default_cache_dir

    return default_cache_dir() / "tests-stub-baseline"


def stub_baseline(ctx: StageContext, runner: Any) -> float | None:
    """The best partial credit a do-nothing design earns on the task's tests with this runner (see the module
    docstring), or None when no stub can be written for the task or a stub run errs."""
    from rtlreward.sandbox.local import remove_workspace
    from rtlreward.sandbox.reaper import make_workspace
    from rtlreward_hdl.stubs import stub_designs

    task = ctx.task
    versions = getattr(runner, "tool_versions", None)
    describe = getattr(ctx.executor, "describe", None)
    opts = {k: v for k, v in ctx.options.items() if k != "stub_baseline"}
    key = hash_json(
        [
            BASELINE_VERSION,
            task.fingerprint(),
            versions() if callable(versions) else {},
            describe() if callable(describe) else type(ctx.executor).__name__,
            opts,
        ]
    )
    with _GUARD:
        if key in _BASELINES:
            return _BASELINES[key]
        lock = _BASELINE_LOCKS.setdefault(key, threading.Lock())
    with lock:  # one measurement per task at a time; the others wait for it
        with _GUARD:
            if key in _BASELINES:
                return _BASELINES[key]
        disk = _baseline_dir() / f"{key[:40]}.json"
        try:
            value = json.loads(disk.read_text())["stub_score"]
            found: float | None = None if value is None else float(value)
        except (OSError, ValueError, KeyError, TypeError):
            found = _measure(ctx, runner, stub_designs(task), make_workspace, remove_workspace)
            if found is not None:
                try:
                    disk.parent.mkdir(parents=True, exist_ok=True)
                    tmp = disk.with_suffix(f".{secrets.token_hex(4)}.tmp")
                    tmp.write_text(json.dumps({"task": task.id, "stub_score": found}))
                    tmp.replace(disk)
                except OSError:
                    pass
        with _GUARD:
            _BASELINES[key] = found
        return found


def _measure(
    ctx: StageContext, runner: Any, stubs: dict[str, dict[str, str]], make_ws: Any, remove_ws: Any
) -> float | None:
    if not stubs:
        return None
    # A fresh workspace per stub from the executor, as the engine makes one per candidate (a warm docker slot,
    # wiped before and after), else a plain private folder.
    maker = getattr(ctx.executor, "make_workspace", None)
    release = getattr(ctx.executor, "release_workspace", None)
    best = 0.0
    for kind, files in stubs.items():
        name = f"{ctx.task.id}-stub-{kind}"
        ws = maker(name, None) if callable(maker) else make_ws(name, None)
        try:
            sub = attrs.evolve(
                ctx,
                candidate=Candidate(files=files),
                workspace=ws,
                files=dict(files),
                results={},
                products={},
                seed=0,
            )
            r = runner.run(sub)
        finally:
            remove_ws(ws)
            if callable(release):
                release(ws)
        if r.status is Status.PASSED:
            return 1.0  # the harness passes a design that does nothing: no partial credit means anything here
        if r.status is not Status.FAILED:
            return None  # an error or a time limit says nothing about the tests: measured again next time
        best = max(best, float(r.score))
    return best


@hookimpl
def rtlreward_register_stages(register):
    register(TestsStage())
