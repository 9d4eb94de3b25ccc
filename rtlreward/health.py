"""Task health reports: which tasks a trainer or an evaluation should trust, skip, or give a shorter time limit.

`rtlreward tasks check` (the `health` plugin) writes the report; this module only reads it, so `eval`, `train` and
the trainers can use it without knowing how health was measured. The report is JSON:

    {"schema": 1, "dataset": "...", "toolchain": {...},
     "tasks": [{"id": "...", "status": "ok" | "weak" | "flaky" | "broken" | "unchecked",
                "cause": "...", "time_limits": {"<stage>": 4.2, ...}, ...}, ...]}

`broken` tasks are those whose reference does not pass its own harness under the installed tools: a model can
never earn their reward, so training on them teaches nothing (and costs a harness run per sample). `time_limits`
are calibrated per-command limits for each stage: max(floor, k x the reference's time in that stage), so a candidate
that hangs is cut in seconds instead of the stage's default minute (the benchmark's own limits stay for conformance
runs, which do not read the report).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from rtlreward.model import Task

__all__ = ["SKIP_BY_DEFAULT", "STAGE_LIMITS", "HealthReport", "load_report"]

SCHEMA = 1
STAGE_LIMITS = "stage_limits"  # Task.metadata key: {stage: seconds}, applied by the engine
# Statuses whose tasks `train` skips by default: their reference fails, so no answer can earn the reward.
SKIP_BY_DEFAULT = frozenset({"broken"})


@attrs.frozen
class HealthReport:
    dataset: str
    toolchain: dict[str, Any]
    tasks: dict[str, dict[str, Any]]  # id -> entry

    def status(self, task_id: str) -> str | None:
        entry = self.tasks.get(task_id)
        return entry.get("status") if entry else None

    def select(
        self, tasks: Iterable[Task], skip: Iterable[str] = SKIP_BY_DEFAULT
    ) -> tuple[list[Task], list[tuple[Task, str]]]:
        """(kept, skipped with the reason) for the given tasks; tasks the report does not know are kept."""
        skip = set(skip)
        kept: list[Task] = []
        skipped: list[tuple[Task, str]] = []
        for t in tasks:
            entry = self.tasks.get(t.id)
            if entry and entry.get("status") in skip:
                skipped.append((t, f"{entry['status']}: {entry.get('cause') or 'no cause recorded'}"))
            else:
                kept.append(t)
        return kept, skipped

    def time_limits(self) -> dict[str, dict[str, float]]:
        """Calibrated per-command limits by task id and stage (only tasks whose reference passed every run)."""
        return {
            tid: {str(s): float(v) for s, v in e["time_limits"].items()}
            for tid, e in self.tasks.items()
            if e.get("time_limits")
        }

    def calibrate(self, tasks: Iterable[Task]) -> list[Task]:
        """The tasks with their calibrated limits in `metadata["stage_limits"]`, which the engine applies as each
        stage's per-command timeout when it is shorter than the profile's."""
        limits = self.time_limits()
        return [
            attrs.evolve(t, metadata={**t.metadata, STAGE_LIMITS: limits[t.id]}) if t.id in limits else t
            for t in tasks
        ]


def load_report(path: str | Path) -> HealthReport:
    """Read a report written by `rtlreward tasks check --out`; a wrong file is a ValueError saying what to do."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"cannot read the task health report {p}: {exc}; write one with `rtlreward tasks check`"
        ) from None
    if (
        not isinstance(data, Mapping)
        or data.get("schema") != SCHEMA
        or not isinstance(data.get("tasks"), list)
    ):
        raise ValueError(
            f"{p} is not a task health report (schema {SCHEMA}); write one with `rtlreward tasks check`"
        )
    tasks = {str(e["id"]): dict(e) for e in data["tasks"] if isinstance(e, Mapping) and "id" in e}
    return HealthReport(
        dataset=str(data.get("dataset", "")), toolchain=dict(data.get("toolchain") or {}), tasks=tasks
    )
