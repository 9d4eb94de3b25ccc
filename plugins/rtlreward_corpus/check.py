"""Corpus health at scale: each reference must parse (done when loading), compile (Icarus), synthesise (the `synth`
stage, when a plugin registers one) and prove against a renamed copy of itself (the `equivalence` stage), all
through the engine: parallel (`jobs`), in the sandbox, and stored in the engine's result cache, so a run cut short
resumes where it stopped and a second run costs nothing.

Duplicates: references identical once comments and whitespace are folded form one group; then references with the
same interface (port names, directions, widths) are proved against each group's first member, and an equivalent
one joins that group. The clean list keeps the first task of each group among those whose reference is healthy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import attrs

from rtlreward.model import Candidate, Reward, Task
from rtlreward_corpus.decontam import renamed_design
from rtlreward_corpus.split import design_key

__all__ = ["CorpusCheck", "check_corpus", "dedup"]


@attrs.frozen
class CorpusCheck:
    executor: str = "local"
    jobs: int | None = None
    cache: bool = True
    prove_duplicates: bool = True
    representatives: int = 4  # groups of one interface a reference is proved against, at most


def _profile(stages: list[str]) -> dict[str, Any]:
    return {
        "name": "corpus-check",
        "combiner": "weighted",
        "stages": ["format", "safety", *stages],
        "gates": ["safety"],
        "verdict": "equivalence",
        "weights": {s: 1.0 for s in stages},
    }


def _design(task: Task) -> str:
    return "\n".join(v for p, v in sorted((task.reference or {}).items()) if p.endswith((".v", ".sv")))


def _cause(reward: Reward) -> str:
    for name, r in reward.stages.items():
        if not r.passed and r.status.value != "skipped":
            msg = next((d.message for d in r.diagnostics), r.feedback or "")
            return f"{name} {r.status.value}: {' '.join(str(msg).split())[:200]}"
    return ""


def check_corpus(
    tasks: list[Task],
    settings: CorpusCheck = CorpusCheck(),
    *,
    progress: Callable[[int, int], Any] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """One entry per task (`ok`, or `broken` with the stage and cause), and the stages that ran."""
    from rtlreward.engine import Engine
    from rtlreward.plugins import get_registry

    registered = get_registry().stages()
    stages = [s for s in ("compile", "synth", "equivalence") if s in registered]
    items = [(t, Candidate(files=dict(t.reference or {}))) for t in tasks]
    with Engine(
        _profile(stages),
        executor=settings.executor,
        jobs=settings.jobs,
        cache=settings.cache,
        calibrate=False,
    ) as eng:
        rewards = eng.score_batch(items, progress)
    entries = []
    for t, r in zip(tasks, rewards, strict=True):
        e: dict[str, Any] = {"id": t.id, "row": t.metadata.get("row")}
        for s in stages:
            st = r.stages.get(s)
            e[s] = st.status.value if st else "missing"
        healthy = r.passed and all(e[s] == "passed" for s in stages)
        e["cached"] = all(r.stages[s].cached for s in stages if s in r.stages)
        e["status"] = "ok" if healthy else "broken"
        eq = r.stages.get("equivalence")
        if eq is not None:
            e["formal"] = eq.metrics.get("formal", "")
        if not healthy:
            e["cause"] = _cause(r)
        entries.append(e)
    return entries, stages


def _interface_key(task: Task) -> tuple | None:
    if task.interface is None:
        return None
    return tuple(sorted((p.name, p.direction, p.width) for p in task.interface.ports))


def dedup(
    tasks: list[Task],
    settings: CorpusCheck = CorpusCheck(),
    *,
    progress: Callable[[int, int], Any] | None = None,
) -> list[list[str]]:
    """Groups of task ids holding one problem (singletons included), in corpus order."""
    by_text: dict[str, list[Task]] = {}
    for t in tasks:
        by_text.setdefault(design_key(t), []).append(t)
    groups = list(by_text.values())  # each: identical reference text
    if settings.prove_duplicates:
        by_iface: dict[tuple, list[int]] = defaultdict(list)
        for gi, g in enumerate(groups):
            key = _interface_key(g[0])
            if key is not None:
                by_iface[key].append(gi)
        items: list[tuple[Task, Candidate]] = []
        pairs: list[tuple[int, int]] = []
        for members in by_iface.values():
            reps = members[: settings.representatives]
            for gi in members[1:]:
                for rep in reps:
                    if rep >= gi:
                        break
                    a, b = groups[rep][0], groups[gi][0]
                    text = renamed_design(_design(b), {b.toplevel or "": a.toplevel or ""})
                    items.append((a, Candidate(files={a.expected_files[0]: text}, sample=len(items))))
                    pairs.append((rep, gi))
        if items:
            from rtlreward.engine import Engine
            from rtlreward_corpus.decontam import EQUIV_PROFILE

            with Engine(
                EQUIV_PROFILE,
                executor=settings.executor,
                jobs=settings.jobs,
                cache=settings.cache,
                calibrate=False,
            ) as eng:
                rewards = eng.score_batch(items, progress)
            parent = list(range(len(groups)))

            def find(i: int) -> int:
                while parent[i] != i:
                    parent[i] = parent[parent[i]]
                    i = parent[i]
                return i

            for (rep, gi), r in zip(pairs, rewards, strict=True):
                if r.passed:
                    parent[find(gi)] = find(rep)
            merged: dict[int, list[Task]] = {}
            for gi, g in enumerate(groups):
                merged.setdefault(find(gi), []).extend(g)
            groups = list(merged.values())
    order = {t.id: i for i, t in enumerate(tasks)}
    out = [sorted((t.id for t in g), key=order.__getitem__) for g in groups]
    return sorted(out, key=lambda g: order[g[0]])
