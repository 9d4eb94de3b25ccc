"""Shared by tests/test_format_*.py, test_safety_*.py and test_interface_*.py: drive one stage by hand.

These stages run no external command, so a StageContext with the local executor and a temporary workspace is
all they need.
"""

from __future__ import annotations

from pathlib import Path

from rtlreward.model import Candidate, StageResult, Task
from rtlreward.sandbox.local import LocalExecutor
from rtlreward.stage import StageContext

PASSWD_LINES = [line for line in Path("/etc/passwd").read_text().splitlines() if line.strip()]


def make_ctx(
    tmp_path: Path,
    task: Task,
    *,
    text: str | None = None,
    files: dict[str, str] | None = None,
    candidate_files: dict[str, str] | None = None,
) -> StageContext:
    return StageContext(
        task=task,
        candidate=Candidate(text=text, files=candidate_files),
        workspace=tmp_path,
        executor=LocalExecutor(),
        files=dict(files or {}),
    )


def run_stage(stage_name: str, tmp_path: Path, task: Task, **kw) -> StageResult:
    from rtlreward.plugins import get_registry

    stage = get_registry().stages()[stage_name]
    return stage.run(make_ctx(tmp_path, task, **kw))


def all_output(result: StageResult) -> str:
    """Everything a stage shows a human or a model."""
    return "\n".join([result.feedback, *(str(d) for d in result.diagnostics), repr(result.metrics)])


def gate_module(body: str, pre: str = "") -> str:
    """A module for the safety gate's cases: `top` with a clock, a register, an integer and a memory to use."""
    return (
        pre
        + "module top(input clk, output reg [7:0] q);\n  integer fd; reg [7:0] m [0:3];\n"
        + body
        + "endmodule\n"
    )
