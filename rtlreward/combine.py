"""Combiners: fold one candidate's stage results into (total, max_total).

A combiner is a plain function `fn(results, profile, task) -> (total, max_total)`, registered by a plugin
(`rtlreward_register_combiners`). It does not decide `passed`: the engine computes the strict verdict once
(`profile.verdict_passed`), so whatever shape the training signal has, the pass/fail a trainer logs means what the
benchmark means. (A combiner written for the older contract may still return `(total, passed, max_total)`; the
engine ignores its `passed`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rtlreward.model import StageResult, Task
from rtlreward.profiles import Profile


def weighted(
    results: Mapping[str, StageResult], profile: Profile, task: Task | None = None
) -> tuple[float, float]:
    """Sum of weight x term credit; a failed gate makes the total 0 (a hostile answer earns nothing)."""
    max_total = profile.max_weighted
    if not profile.gates_passed(results):
        return 0.0, max_total
    values = profile.term_values(results)
    total = sum(t.weight * values[t.name] for t in profile.terms)
    return round(total, 9), max_total


def strict(
    results: Mapping[str, StageResult], profile: Profile, task: Task | None = None
) -> tuple[float, float]:
    """1 when the benchmark's own verdict is pass, else 0 (CVDP semantics; weights are ignored)."""
    return (1.0 if profile.verdict_passed(results) else 0.0), 1.0


def normalized(
    results: Mapping[str, StageResult], profile: Profile, task: Task | None = None
) -> tuple[float, float]:
    """The weighted total divided by the sum of the weights: same shape, range [0, 1]."""
    total, max_total = weighted(results, profile, task)
    if max_total <= 0:
        return 0.0, 1.0
    return round(total / max_total, 9), 1.0


BUILTIN: dict[str, Any] = {"weighted": weighted, "strict": strict, "normalized": normalized}
