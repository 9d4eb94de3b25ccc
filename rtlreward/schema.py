"""The one JSON shape of a reward: `rtlreward score --json`, the reward server's answers (`POST /score`,
`/score_batch`) and the rows of a results file (`rtlreward eval`) all write `reward_record` (docs/schema.md).

    {"id", "sample", "reward", "passed", "max_total", "profile",
     "stages": {name: {"status", "score", "seconds", "cached", "metrics", "diagnostics": [...], "feedback"}},
     "metrics", "diagnostics", "feedback"}

Every diagnostic, a stage's or the engine's own, is `{"code", "severity", "message", "file", "line", "fields"}`
with the stable, namespaced code of `rtlreward.codes` (a stage's own id under `fields.tool_code`). A results row
adds what only a bulk run knows (`category`, `difficulty`, `task_hash`, `seconds`, `tests`, `reply`/`files`).

`score --json` and the server also keep the names `Reward.to_dict()` used before this schema, for trainers that
read them (deprecated): `task_id` (= `id`), `total` (= `reward`), and per stage `name`, `duration`
(= `seconds`) and `version`. `Reward.from_dict` reads both spellings.
"""

from __future__ import annotations

from typing import Any

from rtlreward.codes import diagnostic_row

# deprecated name -> the schema's name, top level and per stage (kept in score --json and the server's answers)
LEGACY_KEYS = {"task_id": "id", "total": "reward"}
LEGACY_STAGE_KEYS = {"duration": "seconds"}


def _status(r: Any) -> str:
    return str(getattr(r.status, "value", r.status))


def _num(x: Any, digits: int | None) -> float:
    return float(x) if digits is None else round(float(x), digits)


def stage_record(name: str, r: Any, *, legacy: bool = False, digits: int | None = None) -> dict[str, Any]:
    """One stage's entry: status, score, its own wall time (`seconds`; a cached result's is the run that made
    it), cached, metrics, diagnostics (stable codes) and feedback."""
    out: dict[str, Any] = {
        "status": _status(r),
        "score": _num(r.score, digits),
        "seconds": round(float(getattr(r, "duration", 0.0) or 0.0), 4),
        "cached": bool(getattr(r, "cached", False)),
        "metrics": dict(getattr(r, "metrics", None) or {}),
        "diagnostics": [diagnostic_row(name, d) for d in getattr(r, "diagnostics", ()) or ()],
        "feedback": str(getattr(r, "feedback", "") or ""),
    }
    if legacy:
        out["name"] = name
        out["duration"] = out["seconds"]
        out["version"] = str(getattr(r, "version", "") or "")
    return out


def reward_record(
    reward: Any, *, sample: int | None = None, legacy: bool = False, digits: int | None = None
) -> dict[str, Any]:
    """The reward as the schema spells it. `legacy` adds the deprecated names (`task_id`, `total`, per stage
    `name`, `duration`, `version`) next to the schema's, for clients written against `Reward.to_dict()`.
    `digits`: round the reward and the stage scores (a results file keeps 6), else exact."""
    stages = reward.stages or {}
    reported = {d for r in stages.values() for d in (getattr(r, "diagnostics", ()) or ())}
    own = [d for d in (getattr(reward, "diagnostics", ()) or ()) if d not in reported]
    feedback = reward.feedback() if callable(getattr(reward, "feedback", None)) else ""
    out: dict[str, Any] = {
        "id": reward.task_id,
        "sample": reward.sample if sample is None else sample,
        "reward": _num(reward.total, digits),
        "passed": bool(reward.passed),
        "max_total": reward.max_total,
        "profile": reward.profile,
        "stages": {name: stage_record(name, r, legacy=legacy, digits=digits) for name, r in stages.items()},
        "metrics": dict(reward.metrics or {}),
        "diagnostics": [diagnostic_row("answer", d) for d in own],
        "feedback": feedback,
    }
    if legacy:
        for old, new in LEGACY_KEYS.items():
            out[old] = out[new]
    return out


__all__ = ["LEGACY_KEYS", "LEGACY_STAGE_KEYS", "reward_record", "stage_record"]
