"""Near-miss data from references: single-site mutants of each reference (rtlreward_hdl.mutate: a flipped
condition, a swapped operator, a changed constant, a dropped reset, ...) that the `equivalence` stage refutes,
each with the counterexample it found, written as

- preference pairs for DPO (TRL's conversational shape): `{"id", "prompt": [chat], "chosen": [assistant: the
  reference], "rejected": [assistant: the mutant], "mutation", "counterexample"}`;
- repair examples for SFT: `{"id", "messages": [chat..., assistant: the mutant, user: the counterexample and a
  request to fix it, assistant: the reference]}`.

Only refuted mutants are kept: a mutant the proof leaves undecided, or shows equivalent, is no bug. A mutant whose
text another mutant of the same reference already produced is tried once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from rtlreward.model import Candidate, Task

__all__ = ["NearMissSettings", "near_misses", "preference_row", "repair_row"]

# Mutations that read like a designer's slip first; a stuck port last.
_ORDER = ("condition", "binop", "constant", "ternary", "reset", "concat", "stuck_input", "stuck_output")
REPAIR_ASK = "The design above is wrong. A check against the specification found this difference:\n\n{cex}\n\nFix it and give the whole corrected module."


@attrs.frozen
class NearMissSettings:
    per_task: int = 3  # refuted mutants kept per task
    tried: int = 10  # mutants tried per task
    executor: str = "local"
    jobs: int | None = None


def _fence(text: str) -> str:
    return f"```verilog\n{text.strip()}\n```"


def _design(files: dict[str, str]) -> str:
    return "\n".join(v for _, v in sorted(files.items()))


def near_misses(
    tasks: list[Task],
    settings: NearMissSettings = NearMissSettings(),
    *,
    progress: Callable[[int, int], Any] | None = None,
) -> list[dict[str, Any]]:
    """Per task (in order) up to `per_task` refuted mutants: {task, mutation, reference, mutant, counterexample}."""
    from rtlreward.engine import Engine
    from rtlreward_corpus.decontam import EQUIV_PROFILE
    from rtlreward_hdl.mutate import mutants

    items: list[tuple[Task, Candidate]] = []
    meta: list[tuple[Task, Any]] = []
    for t in tasks:
        if not t.reference:
            continue
        seen = {_design(t.reference)}
        muts = sorted(
            mutants(t.reference, limit=settings.tried),
            key=lambda m: _ORDER.index(m.operator) if m.operator in _ORDER else len(_ORDER),
        )
        for m in muts:
            text = _design(m.files)
            if text in seen:
                continue
            seen.add(text)
            items.append((t, Candidate(files=m.files, sample=len(items))))
            meta.append((t, m))
    if not items:
        return []
    with Engine(EQUIV_PROFILE, executor=settings.executor, jobs=settings.jobs, calibrate=False) as eng:
        rewards = eng.score_batch(items, progress)
    out: list[dict[str, Any]] = []
    kept: dict[str, int] = {}
    for (t, m), r in zip(meta, rewards, strict=True):
        eq = r.stages.get("equivalence")
        if eq is None or eq.status.value != "failed" or eq.metrics.get("equivalence") != "refuted":
            continue
        if kept.get(t.id, 0) >= settings.per_task:
            continue
        kept[t.id] = kept.get(t.id, 0) + 1
        out.append(
            {
                "task": t,
                "mutation": m.describe(),
                "operator": m.operator,
                "reference": _design(t.reference or {}),
                "mutant": _design(m.files),
                "counterexample": (eq.feedback or "").strip(),
            }
        )
    return out


def preference_row(nm: dict[str, Any]) -> dict[str, Any]:
    from rtlreward.prompts import chat_for

    t: Task = nm["task"]
    return {
        "id": f"{t.id}/{nm['operator']}-{nm['mutation'].split(':')[1]}",
        "prompt": chat_for(t),
        "chosen": [{"role": "assistant", "content": _fence(nm["reference"])}],
        "rejected": [{"role": "assistant", "content": _fence(nm["mutant"])}],
        "mutation": nm["mutation"],
        "counterexample": nm["counterexample"],
    }


def repair_row(nm: dict[str, Any]) -> dict[str, Any]:
    from rtlreward.prompts import chat_for

    t: Task = nm["task"]
    return {
        "id": f"{t.id}/{nm['operator']}-{nm['mutation'].split(':')[1]}",
        "messages": [
            *chat_for(t),
            {"role": "assistant", "content": _fence(nm["mutant"])},
            {"role": "user", "content": REPAIR_ASK.format(cex=nm["counterexample"])},
            {"role": "assistant", "content": _fence(nm["reference"])},
        ],
    }
