"""Problems that teach, from what a model already did on them (results files of `rtlreward eval`, or a training
run's own rows in that shape): per task the samples seen, the pass rate and the reward spread (population standard
deviation over its samples).

- A GRPO group whose rewards are all equal has zero advantage everywhere: it teaches nothing. `select` keeps the
  tasks whose samples disagree (spread above `min_spread`), and, unless told otherwise, the tasks never tried.
- `schedule` orders tasks easy to hard: by pass rate, highest first (never-tried tasks rank by their declared
  difficulty, between the solved and the unsolved), ties broken by a hash of the id so the order is stable.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rtlreward.model import Task

__all__ = ["schedule", "select", "task_stats"]

_DECLARED = {"easy": 0.75, "medium": 0.5, "hard": 0.25}


def task_stats(paths: Iterable[str | Path]) -> dict[str, dict[str, Any]]:
    """{task id: {samples, pass_rate, mean, spread}} over every row of the results files."""
    from rtlreward.evaluate.results import read_results

    rewards: dict[str, list[float]] = {}
    passes: dict[str, int] = {}
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such results file")
        rows, _ = read_results(path)
        for row in rows:
            value = row.get("reward", row.get("total", 0.0))
            rewards.setdefault(str(row["id"]), []).append(float(value or 0.0))
            passes[str(row["id"])] = passes.get(str(row["id"]), 0) + int(bool(row.get("passed")))
    out = {}
    for tid, vals in rewards.items():
        mean = sum(vals) / len(vals)
        spread = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        out[tid] = {
            "samples": len(vals),
            "pass_rate": round(passes[tid] / len(vals), 4),
            "mean": round(mean, 4),
            "spread": round(spread, 4),
        }
    return out


def select(
    tasks: list[Task],
    stats: Mapping[str, Mapping[str, Any]],
    *,
    min_spread: float = 1e-6,
    keep_unseen: bool = True,
) -> list[Task]:
    """The tasks whose past samples disagree (and the unseen ones, with `keep_unseen`)."""
    kept = []
    for t in tasks:
        s = stats.get(t.id)
        if s is None:
            if keep_unseen:
                kept.append(t)
        elif s["samples"] > 1 and s["spread"] > min_spread:
            kept.append(t)
    return kept


def _ease(task: Task, stats: Mapping[str, Mapping[str, Any]]) -> float:
    s = stats.get(task.id)
    if s is not None:
        return float(s["pass_rate"])
    return _DECLARED.get(task.difficulty.lower(), 0.5)


def schedule(tasks: list[Task], stats: Mapping[str, Mapping[str, Any]]) -> list[Task]:
    """Easy to hard (see the module docstring)."""

    def key(t: Task) -> tuple[float, str]:
        return (-_ease(t, stats), hashlib.sha256(t.id.encode()).hexdigest())

    return sorted(tasks, key=key)
