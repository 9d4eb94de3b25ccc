"""Running the equivalence stage on a hand-built StageContext (real Yosys, ABC and Icarus through the executor)."""

from __future__ import annotations

from pathlib import Path

from rtlreward.model import Candidate, StageResult, Task
from rtlreward.stage import StageContext


def run_equivalence(
    stage,
    executor,
    workspace: Path,
    task: Task,
    files: dict[str, str],
    *,
    seed: int,
    timeout: float,
    **options,
) -> StageResult:
    ctx = StageContext(
        task=task,
        candidate=Candidate(files=files),
        workspace=workspace,
        executor=executor,
        files=dict(files),
        options=options,
        seed=seed,
        timeout=timeout,
    )
    return stage.run(ctx)
