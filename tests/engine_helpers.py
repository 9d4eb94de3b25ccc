"""In-process test stages and registries for the engine tests: real Stage subclasses registered through a real
plugin manager (`make_plugin_manager(extra_plugins=...)`), so gating, caching and batching are exercised without
the HDL tools."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from rtlreward import Candidate, Harness, Stage, StageContext, Status, Task, hookimpl
from rtlreward.plugins import make_plugin_manager

RUNS: Counter[str] = Counter()
RUNS_LOCK = threading.Lock()


def count(name: str) -> None:
    with RUNS_LOCK:
        RUNS[name] += 1


class FormatStage(Stage):
    """Extracts `FILE <path>\\n<text>`; a reply starting with BAD fails."""

    name = "format"
    version = "t1"
    provides = ("files",)
    needs = ()

    def run(self, ctx: StageContext):
        count(self.name)
        if ctx.candidate.files is not None:
            return self.result(Status.PASSED, 1.0, artifacts={"files": dict(ctx.candidate.files)})
        text = ctx.candidate.text or ""
        if not text or text.startswith("BAD"):
            return self.result(Status.FAILED, 0.0, feedback="no code found")
        path = (ctx.task.expected_files or ("rtl/top.sv",))[0]
        return self.result(Status.PASSED, 1.0, artifacts={"files": {path: text}})


class SafetyStage(Stage):
    name = "safety"
    version = "t1"
    requires = ("format",)

    def run(self, ctx):
        count(self.name)
        bad = any("$system" in t for t in ctx.files.values())
        return self.result(Status.FAILED if bad else Status.PASSED, 0.0 if bad else 1.0)


class _Keyword(Stage):
    """Passes unless the files contain `<NAME>_FAIL`; `<NAME>_RAISE` raises; `<NAME>_SLEEP` sleeps 0.3 s."""

    requires = ("safety",)
    version = "t1"

    def run(self, ctx):
        count(self.name)
        text = "\n".join(ctx.files.values())
        tag = self.name.upper()
        if f"{tag}_SLEEP" in text:
            time.sleep(0.3)
        if f"{tag}_HANG" in text:
            time.sleep(5)
        if f"{tag}_RAISE" in text:
            raise RuntimeError(f"{self.name} blew up")
        if f"{tag}_HALF" in text:
            return self.result(Status.FAILED, 0.5, metrics={"seed": ctx.seed})
        failed = f"{tag}_FAIL" in text
        return self.result(
            Status.FAILED if failed else Status.PASSED,
            0.0 if failed else 1.0,
            metrics={
                "seed": ctx.seed,
                "thread": threading.current_thread().name,
                "timeout": ctx.timeout,
                "options": dict(ctx.options),
            },
        )


class InterfaceStage(_Keyword):
    name = "interface"


class LintStage(_Keyword):
    name = "lint"


class CompileStage(_Keyword):
    name = "compile"


class TestsStage(_Keyword):
    name = "tests"
    requires = ("compile",)

    def run(self, ctx):
        res = super().run(ctx)
        passed = 4 if res.status is Status.PASSED else (2 if res.score == 0.5 else 0)
        return self.result(
            res.status, res.score, metrics={**res.metrics, "tests_passed": passed, "tests_total": 4}
        )


STAGES = [FormatStage(), SafetyStage(), InterfaceStage(), LintStage(), CompileStage(), TestsStage()]


class TestStagesPlugin:
    @hookimpl
    def rtlreward_register_stages(self, register):
        for s in STAGES:
            register(s)


class Recorder:
    """Observer plugin: records what the engine reports."""

    def __init__(self) -> None:
        self.stages: list[tuple[str, str]] = []
        self.rewards: list[Any] = []
        self.lock = threading.Lock()

    @hookimpl
    def rtlreward_stage_finished(self, task, candidate, result):
        with self.lock:
            self.stages.append((task.id, result.name))

    @hookimpl
    def rtlreward_reward_computed(self, task, candidate, reward):
        with self.lock:
            self.rewards.append(reward)


def registry(extra: dict[str, Any] | None = None):
    """The core's combiners, profiles and executors (always registered), plus the test stages in-process (no
    entry points)."""
    return make_plugin_manager(
        extra_plugins={
            "test-stages": TestStagesPlugin(),
            **(extra or {}),
        },
        load_entrypoints=False,
    )


def task(tid: str = "t1", **kw: Any) -> Task:
    return Task(
        id=tid, prompt="p", expected_files=("rtl/top.sv",), toplevel="top", harness=Harness(kind="none"), **kw
    )


def cand(text: str, sample: int = 0) -> Candidate:
    return Candidate(text=text, sample=sample)
