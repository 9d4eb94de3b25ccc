"""Private helpers for the CVDP harness and conformance tests: read ../shared CVDP records into Tasks and run the
cvdp harness runner through a hand-built StageContext (the engine drives it the same way)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rtlreward.model import Candidate, Task

SHARED = Path(__file__).parents[1].parent / "shared"
CVDP = SHARED / "data" / "cvdp"
EXAMPLE_AGENTIC = CVDP / "cvdp_v1.1.0_example_agentic_code_generation_no_commercial_with_solutions.jsonl"
EXAMPLE_NONAGENTIC = (
    CVDP / "cvdp_v1.1.0_example_nonagentic_code_generation_no_commercial_with_solutions.jsonl"
)
RECONSTRUCTED = CVDP / "reconstructed"
AGENTIC_92 = CVDP / "cvdp_v1.0.2_agentic_code_generation_no_commercial.jsonl"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared data)")
    return path


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in need(path).read_text().splitlines() if line.strip()]


def problem(path: Path, index: int = 0) -> tuple[Task, dict[str, str]]:
    """(task, reference answer files) of one record, as the cvdp dataset loads them."""
    from cvdp_adapter.conformance import reference_files
    from cvdp_adapter.records import parse_record
    from cvdp_adapter.tasks import record_to_task

    rec = parse_record(records(path)[index])
    return record_to_task(rec), reference_files(rec)


def run_harness(
    task: Task,
    files: dict[str, str],
    tmp: Path,
    *,
    executor: Any = None,
    seed: int = 1234,
    options: dict[str, Any] | None = None,
):
    from cvdp_adapter.runner import CvdpHarnessRunner
    from rtlreward.sandbox.local import LocalExecutor
    from rtlreward.stage import StageContext

    tmp.mkdir(parents=True, exist_ok=True)
    ctx = StageContext(
        task=task,
        candidate=Candidate(files=files),
        workspace=tmp,
        executor=executor or LocalExecutor(),
        files=files,
        options=options or {},
        seed=seed,
        timeout=600,
    )
    return CvdpHarnessRunner().run(ctx)
