"""The contract between the engine and a reward stage.

A stage is an object with a name, a version, the stages it `requires` (they must have passed), what it `provides`
and `needs`, and `run(ctx) -> StageResult`. Subclass `Stage` for the defaults. `ctx` is everything the stage may
touch: the task, the candidate, the answer's files, a private workspace, earlier results, the stage's options, and
`ctx.run(...)` for commands, which go through the engine's executor and its limits.

Products: a stage that `provides = (FILES,)` turns the raw candidate into the answer's files (the built-in
`format` stage does); it publishes them as `result.artifacts["files"]`. Every stage `needs = (FILES,)` unless it
says otherwise, so it waits for the provider and reads `ctx.files`; the engine names no stage, it follows these
declarations. A stage that needs the files is cached on the files, not on the raw reply, so it must not read
`ctx.candidate.text`. Other products work the same way (`provides = ("netlist",)` publishes
`artifacts["netlist"]`; a stage that needs it reads `ctx.products["netlist"]`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import attrs

from rtlreward.model import Candidate, Diagnostic, StageResult, Status, Task
from rtlreward.sandbox import CommandResult, Executor, Limits

log = logging.getLogger("rtlreward")


FILES = "files"  # the product every stage needs by default: the answer's {path: text}


class UnsafePath(ValueError):
    """A file path from a model or a dataset that would land outside the workspace."""


def safe_relpath(path: str) -> PurePosixPath:
    """Normalise a workspace-relative path, refusing absolute paths, `..` and empty names."""
    p = PurePosixPath(path.strip().replace("\\", "/"))  # "./a" normalises to "a"
    if p.is_absolute() or not p.parts or any(part in ("..", "") for part in p.parts):
        raise UnsafePath(f"refusing path {path!r}: it must be relative and stay inside the workspace")
    return p


# How a candidate's text becomes bytes on disk. A reply can hold a lone surrogate (JSON's "\ud83d", a model
# that cut an emoji in half): no character, so UTF-8 cannot encode it and a plain write raises. "backslashreplace"
# writes it as the ASCII text `\ud83d`: deterministic (same text, same bytes, so cache keys and verdicts stay
# stable), valid UTF-8 every tool and our own readers accept, and a well-formed text is written unchanged.
# Not "surrogateescape": it round-trips only \udc80-\udcff and still raises on \ud83d. Not "surrogatepass": it
# writes invalid UTF-8 that the tools' and our own UTF-8 readers then trip over.
TEXT_ERRORS = "backslashreplace"


def well_formed(text: str) -> str:
    """`text` as `write_files` puts it on disk: each lone surrogate as its `\\uXXXX` escape (`TEXT_ERRORS`),
    anything else unchanged. Stages that hand text to a parser (pyslang refuses a lone surrogate) or compare it
    with the written files then see the same characters the tools read."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", TEXT_ERRORS).decode("utf-8")
    return text


def write_files(root: Path, files: Mapping[str, str]) -> list[Path]:
    """Write {relative path: text} under root; every path is checked with `safe_relpath`; text as UTF-8, a
    lone surrogate as its `\\uXXXX` escape (`TEXT_ERRORS`)."""
    written = []
    for rel, text in files.items():
        dest = root / safe_relpath(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8", errors=TEXT_ERRORS)
        written.append(dest)
    return written


@attrs.define
class StageContext:
    task: Task
    candidate: Candidate
    workspace: Path  # private to this candidate; the only place commands may write
    executor: Executor
    files: dict[str, str] = attrs.field(factory=dict)  # extracted answer files {relative path: text}
    results: dict[str, StageResult] = attrs.field(factory=dict)  # earlier stages, by name
    options: dict[str, Any] = attrs.field(factory=dict)  # this stage's options from the profile
    seed: int = 0  # derived from task and candidate: same input, same seed
    timeout: float = 60.0  # this stage's per-command wall-clock limit
    # A simulation's CPU-time limit (seconds), set only where `timeout` was calibrated from the task's reference
    # (rtlreward.calibration): a loop that never advances time is cut when it has burnt this much CPU, however
    # loaded the machine is, while the wall-clock limit keeps its margin for load. None: the wall clock alone.
    cpu_timeout: float | None = None
    memory_mb: int | None = 4096
    registry: Any = None  # the engine's rtlreward.plugins.Registry (harness runners, datasets, ...)
    products: dict[str, Any] = attrs.field(factory=dict)  # what the stage `needs`, by product name

    @property
    def python(self) -> str:
        """The Python interpreter to run harness code with, as the executor sees it."""
        return self.executor.python

    def limits(self, **overrides: Any) -> Limits:
        base = {"timeout": self.timeout, "memory_mb": self.memory_mb}
        base.update(overrides)
        return Limits(**base)

    def stage_dir(self, name: str) -> Path:
        """A fresh folder inside the workspace for one stage's files."""
        d = self.workspace / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        memory_mb: int | None = None,
        stdin: str | None = None,
        read_only: Sequence[Path] = (),
        path_prepend: Sequence[str] = (),
    ) -> CommandResult:
        limits = self.limits(
            timeout=timeout if timeout is not None else self.timeout,
            memory_mb=memory_mb if memory_mb is not None else self.memory_mb,
        )
        return self.executor.run(
            argv,
            workspace=self.workspace,
            cwd=cwd,
            env=env,
            limits=limits,
            stdin=stdin,
            read_only=read_only,
            path_prepend=path_prepend,
        )


class Stage:
    """Base class for reward stages. Override `run`; set the class attributes."""

    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    requires: ClassVar[tuple[str, ...]] = ()  # stages that must have PASSED (else this one is skipped)
    provides: ClassVar[tuple[str, ...]] = ()  # products it publishes in result.artifacts (e.g. (FILES,))
    needs: ClassVar[tuple[str, ...]] = (FILES,)  # products it waits for (whatever their provider's status)
    description: ClassVar[str] = ""
    default_timeout: ClassVar[float] = 60.0

    def tool_versions(self) -> dict[str, str]:
        """Versions of the external tools this stage runs; part of the cache key."""
        return {}

    def run(self, ctx: StageContext) -> StageResult:  # pragma: no cover - abstract
        raise NotImplementedError

    # Helpers so a stage's results read the same everywhere.
    def result(
        self,
        status: Status,
        score: float = 0.0,
        *,
        metrics: Mapping[str, Any] | None = None,
        diagnostics: Sequence[Diagnostic] = (),
        feedback: str = "",
        artifacts: Mapping[str, Any] | None = None,
    ) -> StageResult:
        return StageResult(
            name=self.name,
            status=status,
            score=max(0.0, min(1.0, float(score))),
            metrics=dict(metrics or {}),
            diagnostics=tuple(diagnostics),
            feedback=feedback,
            version=self.version,
            artifacts=dict(artifacts or {}),
        )
