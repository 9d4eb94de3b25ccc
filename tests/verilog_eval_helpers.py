"""Shared helpers for the VerilogEval and RTLLM plugin tests: where the benchmark data is, and running a harness
runner on a hand-built StageContext with the real local executor (real Icarus)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from rtlreward.model import Candidate, StageResult, Task
from rtlreward.plugins import get_registry
from rtlreward.stage import StageContext

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
VE_DATA = SHARED_DATA / "verilog-eval"
RTLLM_DATA = SHARED_DATA / "rtllm"

needs_verilog_eval = pytest.mark.skipif(
    not (VE_DATA / "dataset_spec-to-rtl").is_dir(),
    reason="VerilogEval data not at ../shared/data/verilog-eval",
)
needs_rtllm = pytest.mark.skipif(not RTLLM_DATA.is_dir(), reason="RTLLM data not at ../shared/data/rtllm")


def executor():
    return get_registry().executors()["local"]()


def run_harness(
    task: Task,
    files: Mapping[str, str],
    workspace: Path,
    *,
    ex=None,
    timeout: float = 120.0,
    sim_timeout: float | None = None,
    cpu_timeout: float | None = None,
) -> StageResult:
    """The task's harness runner on `files` as the extracted answer (the `tests` stage's job, without the
    engine). `sim_timeout` overrides the harness's simulation limit; `cpu_timeout` is the one the engine sets under
    a calibrated limit."""
    if sim_timeout is not None:
        task = attrs.evolve(
            task, harness=attrs.evolve(task.harness, options={**task.harness.options, "timeout": sim_timeout})
        )
    workspace.mkdir(parents=True, exist_ok=True)
    registry = get_registry()
    ctx = StageContext(
        task=task,
        candidate=Candidate(files=dict(files)),
        workspace=workspace,
        executor=ex or executor(),
        files=dict(files),
        timeout=timeout,
        cpu_timeout=cpu_timeout,
        registry=registry,
    )
    return registry.harnesses()[task.harness.kind].run(ctx)


def run_references(tasks: Sequence[Task], root: Path, workers: int = 2) -> dict[str, StageResult]:
    """Every task's reference through its runner, `workers` at a time (the machine has 2 cores)."""
    ex = executor()

    def one(t: Task) -> tuple[str, StageResult]:
        return t.id, run_harness(t, t.reference or {}, root / t.id, ex=ex)

    with ThreadPoolExecutor(workers) as pool:
        return dict(pool.map(one, tasks))
