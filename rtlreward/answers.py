"""Answers write only where answers go: the one rule every candidate's files pass through.

A candidate's files come from a model (the format stage's extraction of a reply, a CVDP `files` completion, an
HTTP request's `files`, an agent's workspace). Each path is a place the candidate asks to write in the workspace
where the harness then runs, so an unchecked path is a way to plant code the harness executes
(`src/conftest.py` next to a pytest harness, a `.pth` file, a `Makefile`) or to shadow a harness file. The engine
applies `restrict_answer` to the files before any stage sees them; what it drops never reaches a workspace and is
reported with a diagnostic.

The rule:
- a path must be relative and stay inside the workspace (`rtlreward.stage.safe_relpath`); it is normalised
  (`./rtl//a.sv` is `rtl/a.sv`);
- when the task declares `expected_files`, only those paths are kept (an expected path may replace a context file
  of the same name: that is how CVDP's code-modification tasks work);
- when it declares none, only HDL sources are kept (`ANSWER_SUFFIXES`, no hidden path component such as
  `.git/` or `.env`), and never over a context file: nothing executable by a harness (`.py`, `.pth`, `conftest`,
  `Makefile`, scripts) can get in;
- either way, a harness file always wins: an answer path equal to a harness file, inside a folder named like a
  harness file, or naming a folder that holds a harness file, is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

import attrs

from rtlreward.model import Diagnostic, Task

# The answer files a task with no `expected_files` may receive: hardware sources, headers and memory images.
ANSWER_SUFFIXES = (".v", ".sv", ".vh", ".svh", ".vhd", ".vhdl", ".svi", ".inc", ".mem", ".hex")

UNEXPECTED_PATH = "answer.unexpected_path"
UNSAFE_PATH = "answer.unsafe_path"
TASK_FILE = "answer.task_file"
NOT_TEXT = "answer.not_text"
DUPLICATE_PATH = "answer.duplicate_path"
MAX_REPORTED = 20  # one diagnostic per dropped file up to this many, then one that counts the rest


@attrs.frozen(slots=True)
class Answer:
    """The files a candidate may write (normalised paths) and a diagnostic per file that was dropped (at most
    `MAX_REPORTED`, then one for the rest, so a reply of a million paths cannot flood the reward)."""

    files: dict[str, str] = attrs.field(factory=dict, converter=dict)
    dropped: tuple[Diagnostic, ...] = attrs.field(default=(), converter=tuple)
    dropped_count: int = 0  # every file dropped, reported or not


def _norm(path: str) -> str | None:
    from rtlreward.stage import UnsafePath, safe_relpath

    if not isinstance(path, str) or "\x00" in path:
        return None
    try:
        return str(safe_relpath(path))
    except UnsafePath:
        return None


def _norm_all(paths: Iterable[str]) -> set[str]:
    return {n for p in paths if (n := _norm(p)) is not None}


def _parents(path: str) -> list[str]:
    return [str(p) for p in PurePosixPath(path).parents if str(p) != "."]


def allowed_paths(task: Task) -> tuple[str, ...] | None:
    """The normalised paths an answer to `task` may write, or None when the task declares none (then the HDL rule
    of the module docstring applies)."""
    if not task.expected_files:
        return None
    return tuple(dict.fromkeys(n for p in task.expected_files if (n := _norm(p)) is not None))


def restrict_answer(task: Task, files: Mapping[str, Any] | None) -> Answer:
    """Keep the files `task` lets an answer write; drop the rest with a diagnostic that says what to do."""
    allowed = allowed_paths(task)
    harness = _norm_all(task.harness.files) if task.harness is not None else set()
    context = _norm_all(task.context)
    # Files the task writes that an answer may never replace (context files only when nothing is expected).
    protected = harness | (context if allowed is None else set())
    protected_dirs = {d for p in protected for d in _parents(p)}
    kept: dict[str, str] = {}
    dropped: list[Diagnostic] = []
    count = 0

    def drop(path: Any, message: str, code: str) -> None:
        nonlocal count
        count += 1
        if count <= MAX_REPORTED:
            dropped.append(
                Diagnostic(
                    f"answer file {str(path)[:200]!r} dropped: {message}",
                    file=str(path)[:200],
                    severity="warning",
                    code=code,
                )
            )

    for path, text in (files or {}).items():
        rel = _norm(path)
        if rel is None:
            drop(path, "a path must be relative and stay inside the workspace", UNSAFE_PATH)
            continue
        if not isinstance(text, str):
            drop(path, "an answer file must be text", NOT_TEXT)
            continue
        if rel in protected or rel in protected_dirs or any(d in protected for d in _parents(rel)):
            drop(path, "the task provides this path itself (task and harness files always win)", TASK_FILE)
            continue
        if allowed is not None and rel not in allowed:
            drop(
                path,
                f"the task expects only {', '.join(allowed)}; write the answer to those paths",
                UNEXPECTED_PATH,
            )
            continue
        if allowed is None and (
            not rel.lower().endswith(ANSWER_SUFFIXES) or any(part.startswith(".") for part in rel.split("/"))
        ):
            drop(
                path,
                "this task names no answer files, so an answer may only provide HDL sources "
                f"({', '.join(ANSWER_SUFFIXES)}) outside hidden folders",
                UNEXPECTED_PATH,
            )
            continue
        if rel in kept:
            drop(
                path,
                f"it names the same file as an earlier answer file ({rel}); the first one is kept",
                DUPLICATE_PATH,
            )
            continue
        kept[rel] = text
    if count > MAX_REPORTED:
        rest = count - MAX_REPORTED
        dropped.append(
            Diagnostic(
                f"{rest} more answer file(s) dropped; write only the paths the task expects",
                severity="warning",
                code=UNEXPECTED_PATH,
            )
        )
    return Answer(files=kept, dropped=tuple(dropped), dropped_count=count)


__all__ = [
    "ANSWER_SUFFIXES",
    "DUPLICATE_PATH",
    "MAX_REPORTED",
    "NOT_TEXT",
    "TASK_FILE",
    "UNEXPECTED_PATH",
    "UNSAFE_PATH",
    "Answer",
    "allowed_paths",
    "restrict_answer",
]
