"""A/B of two runs of one model on the same tasks (two prompt styles, say): the difference in pass rate and in mean
reward, B minus A, with a 95% confidence interval from a paired bootstrap over tasks (each task's samples
averaged first, so a task sampled more often weighs no more; the resampling is seeded, so the interval is
reproducible). Only tasks present in both runs count."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["compare_runs", "per_task"]


def per_task(path: str | Path) -> dict[str, tuple[float, float, int]]:
    """{task id: (pass rate, mean reward, samples)} of a results file."""
    from rtlreward.evaluate.results import read_results

    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such results file")
    acc: dict[str, list[tuple[float, float]]] = {}
    rows, _ = read_results(path)
    for row in rows:
        reward = float(row.get("reward", row.get("total", 0.0)) or 0.0)
        acc.setdefault(str(row["id"]), []).append((1.0 if row.get("passed") else 0.0, reward))
    return {k: (sum(p for p, _ in v) / len(v), sum(r for _, r in v) / len(v), len(v)) for k, v in acc.items()}


def _interval(diffs: list[float], resamples: int, rng: random.Random) -> tuple[float, float]:
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return means[int(0.025 * (resamples - 1))], means[int(0.975 * (resamples - 1))]


def compare_runs(
    a: Mapping[str, tuple[float, float, int]],
    b: Mapping[str, tuple[float, float, int]],
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("the two runs share no task id: were they scored on the same dataset?")
    rng = random.Random(seed)
    out: dict[str, Any] = {
        "tasks": len(common),
        "only_a": len(set(a) - set(b)),
        "only_b": len(set(b) - set(a)),
    }
    for i, name in ((0, "pass_rate"), (1, "reward")):
        va = [a[t][i] for t in common]
        vb = [b[t][i] for t in common]
        diffs = [y - x for x, y in zip(va, vb, strict=True)]
        lo, hi = _interval(diffs, resamples, rng)
        out[name] = {
            "a": round(sum(va) / len(va), 4),
            "b": round(sum(vb) / len(vb), 4),
            "diff": round(sum(diffs) / len(diffs), 4),
            "ci95": [round(lo, 4), round(hi, 4)],
            "significant": lo > 0 or hi < 0,
        }
    return out
