"""The `format` stage: find the answer's files in a model's raw reply.

Partial credit is files found / files expected, so a reply that gets one of two files right is told which one
is missing instead of scoring like an empty reply. The extraction rules live in `extract.py`.
"""

from __future__ import annotations

from rtlreward import hookimpl
from rtlreward.model import Diagnostic, StageResult, Status, Task
from rtlreward.stage import FILES, Stage, StageContext, well_formed

from .extract import MAX_REPLY_CHARS, ReplyError, expected_modules, extract, pass_through

__all__ = ["FormatStage", "expected_paths", "extract"]


def expected_paths(task) -> list[str]:
    """The files the answer must provide. A task that names none expects one file named after its toplevel."""
    if task.expected_files:
        return list(task.expected_files)
    return [f"{task.toplevel}.sv" if task.toplevel else "answer.sv"]


class FormatStage(Stage):
    name = "format"
    # 2: a lone surrogate in the files becomes its \uXXXX escape (results cached by 1 kept it, and later stages raised)
    # 3: a task that asks for [BEGIN]/[DONE] is told of those in the finding and feedback, not of fences
    version = "3"
    requires = ()
    provides = (FILES,)  # the engine hands these files (restricted to the task's answer paths) to every stage
    needs = ()  # it reads the raw candidate
    description = "extract the answer's files from the reply (fences, <think>, CVDP JSON, headers, bare code)"

    def run(self, ctx: StageContext) -> StageResult:
        expected = expected_paths(ctx.task)
        base = {"files_expected": len(expected), "think_stripped": 0, "truncated": 0, "blocks_found": 0}
        if ctx.candidate.files is not None:
            return self._pass_through(ctx, expected, base)
        max_chars = int(ctx.options.get("max_chars", MAX_REPLY_CHARS))
        try:
            ex = extract(ctx.candidate.text or "", ctx.task, expected, max_chars=max_chars)
        except ReplyError as e:
            return self.result(
                Status.FAILED,
                0.0,
                metrics={**base, "files_found": 0},
                diagnostics=[Diagnostic(str(e), code="bad-reply")],
                feedback=str(e),
                artifacts={"files": {}},
            )
        found = [p for p in expected if p in ex.files]
        metrics = {
            **base,
            "files_found": len(found),
            "blocks_found": ex.blocks_found,
            "think_stripped": int(ex.think_stripped),
            "truncated": int(ex.truncated),
            "blocks_merged": ex.merged,
        }
        diags = [Diagnostic(w, severity="warning", code="module-name") for w in ex.warnings]
        notes = list(ex.warnings)
        if ex.truncated:
            msg = (
                "the reply was cut off (unclosed code block or module without endmodule): kept what was there"
            )
            diags.append(Diagnostic(msg, severity="warning", code="truncated"))
            notes.append(msg)
        for path in expected:
            if path in ex.files:
                continue
            wanted = ex.missing.get(path) or expected_modules(ctx.task, path, len(expected))
            msg = f"{_asked_form(ctx.task)[0]} declaring module {' / '.join(wanted)} (for {path})"
            if ex.declared:
                msg += f"; the reply declares: {', '.join(ex.declared)}"
            diags.append(Diagnostic(msg, file=path, code="missing-file"))
            notes.append(msg)
        score = len(found) / len(expected)
        status = Status.PASSED if len(found) == len(expected) else Status.FAILED
        if status is Status.PASSED and not notes:
            feedback = ""
        else:
            feedback = "; ".join(notes)
            if status is not Status.PASSED:
                feedback += (
                    ". "
                    + _asked_form(ctx.task)[1]
                    + (", preceded by its path" if len(expected) > 1 else "")
                    + "."
                )
        return self.result(
            status,
            score,
            metrics=metrics,
            diagnostics=diags,
            feedback=feedback,
            artifacts={"files": _well_formed(ex.files)},
        )

    def _pass_through(self, ctx: StageContext, expected: list[str], base: dict) -> StageResult:
        files, refused = pass_through(ctx.candidate.files or {})
        diags = [
            Diagnostic(
                f"refusing file path {p!r}: it must be relative and stay inside the workspace",
                code="unsafe-path",
            )
            for p in refused
        ]
        found = [p for p in expected if p in files]
        for p in expected:
            if p not in files:
                diags.append(Diagnostic(f"the answer has no file {p}", file=p, code="missing-file"))
        score = len(found) / len(expected) if expected else float(bool(files))
        status = Status.PASSED if len(found) == len(expected) and not refused else Status.FAILED
        feedback = "; ".join(d.message for d in diags)
        return self.result(
            status,
            score,
            metrics={**base, "files_found": len(found)},
            diagnostics=diags,
            feedback=feedback,
            artifacts={"files": _well_formed(files)},
        )


def _well_formed(files: dict[str, str]) -> dict[str, str]:
    """The answer's files as every later stage sees them: a lone surrogate in a reply (half an emoji, JSON's
    "\\ud83d") becomes its `\\uXXXX` escape, the bytes `write_files` writes, so no stage raises on it."""
    return {path: well_formed(text) if isinstance(text, str) else text for path, text in files.items()}


@hookimpl
def rtlreward_register_stages(register):
    register(FormatStage())


def _asked_form(task: Task) -> tuple[str, str]:
    """How the task asked for the code, for the finding and the advice: between VerilogEval's `[BEGIN]` and
    `[DONE]` when its prompt says so (a model told of fences there would learn the wrong wrapper), else in a
    ```verilog fence."""
    asked = f"{getattr(task, 'system_prompt', '') or ''}\n{getattr(task, 'prompt', '') or ''}"
    if "[BEGIN]" in asked and "[DONE]" in asked:
        return (
            "no code between [BEGIN] and [DONE]",
            "Put the code between [BEGIN] and [DONE], declaring the module",
        )
    return "no ```verilog block", "Put each file in its own ```verilog block that declares the module"
