"""Task health: does a task's reference pass its own harness here, every time, and does the harness fail the bugs a
policy could learn?

For each task with a reference and a harness:
1. the reference is scored `seeds` times with different seeds (a trailing comment changes the derived seed and
   nothing else): all pass -> deterministic; some -> `flaky`; none -> `broken`, with the first failure's cause;
2. mutants of the reference (rtlreward_hdl.mutate) that build are checked by the `equivalence` stage; those it
   refutes are real bugs, and each is run through the harness: a harness that passes one is `weak`, and the report
   names that mutant (the change, and the equivalence counterexample when there is one);
3. the reference's time in each stage gives a calibrated limit, max(floor, k x its median run), so a hung candidate
   is cut in seconds;
4. the reference against a renamed copy of itself through the `equivalence` stage: `proves` (an answer the proof
   leaves undecided is suspect there and earns the stage's `undecided` share) or `simulation-only` (the proof
   does not close in budget: simulation decides, with a longer stimulus);
5. do-nothing stubs with the task's interface (outputs tied to 0, to 1, undriven, an input passed through; `rtlreward_hdl.stubs`) scored
   under `shaped` and, with a reference, `equiv`: a stub that earns credit from `tests` or `equivalence` (more than
   format, syntax and interface) is reported (`stub_credit`), since a policy learns a stub first.

6. the reference through the `synth` stage (where the rtlreward_synth plugin is installed): `synthesis` = `clean`
   | `not clean` (a benchmark bug: a latch, a loop, multiple drivers, an undriven output, a delay, display-only
   logic, a netlist that differs from its simulation, named in `synthesis_problems`) | `error`, and its figures
   (`synthesis_figures`: cells, flip-flops, area, depth), which the `ppa` stage pays answers against.

Every verdict is stored with the tool versions it was measured under; the whole report is cached by task content,
toolchain and settings, so a second `tasks check` of the same dataset costs nothing.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from rtlreward.health import SCHEMA
from rtlreward.model import Candidate, Reward, Task, hash_json
from rtlreward_hdl.files import SOURCE_EXTS
from rtlreward_hdl.mutate import Mutant, mutants

__all__ = ["CheckSettings", "check_tasks"]

HARNESS_PROFILE = {"extends": "strict", "name": "health-harness"}
EQUIV_PROFILE = {
    "name": "health-equivalence",
    "combiner": "weighted",
    "stages": ["format", "equivalence"],
    "verdict": "equivalence",
    "weights": {"equivalence": 1.0},
}
# The reference through the `synth` stage (plugin rtlreward_synth, where installed): its figures, and whether it
# synthesises cleanly (no latch, loop, multiple driver, undriven output, delay, display-only logic, netlist that
# differs from its simulation). The stage caches the reference's figures per reference and toolchain; the `ppa`
# stage pays answers against them.
SYNTH_PROFILE = {
    "name": "health-synth",
    "combiner": "weighted",
    "stages": ["format", "synth"],
    "verdict": "synth",
    "weights": {"synth": 1.0},
}
STUB_PROFILES = ("shaped", "equiv")
CORRECTNESS_STAGES = ("tests", "equivalence")  # the stages a stub must earn nothing from
VERSION = 3  # bump when the meaning of an entry (or the mutants) changes: old cached entries are then ignored


@attrs.frozen
class CheckSettings:
    seeds: int = 3
    mutants: int = 8
    floor: float = 3.0  # seconds: the least time limit a task gets
    factor: float = 5.0  # x the slowest reference run
    executor: str = "local"
    jobs: int | None = None
    stubs: bool = True  # score do-nothing stubs under STUB_PROFILES


def _seeded(reference: Mapping[str, str], k: int) -> dict[str, str]:
    """The reference with a comment that changes the derived seed (k = 0: unchanged)."""
    if k == 0:
        return dict(reference)
    files = dict(reference)
    target = next((p for p in sorted(files) if p.lower().endswith(SOURCE_EXTS)), None) or sorted(files)[0]
    files[target] = files[target].rstrip("\n") + f"\n// rtlreward tasks check: seed variant {k}\n"
    return files


def _cause(reward: Reward) -> str:
    """The first thing that went wrong, in one line."""
    for r in reward.stages.values():
        if not r.passed and r.status.value != "skipped":
            d = next((d for d in r.diagnostics if d.severity == "error"), None) or (
                r.diagnostics[0] if r.diagnostics else None
            )
            text = d.message if d else (r.feedback or "")
            return f"{r.name} {r.status.value}: {' '.join(text.split())[:240]}"
    return "not passed"


def _stage_times(runs: list[Reward]) -> dict[str, float]:
    """Each stage's median time over the reference runs (the median, not the slowest: one run that paid a cold
    start or a busy moment would otherwise set the limit; the factor k covers the spread)."""
    times: dict[str, list[float]] = {}
    for reward in runs:
        for name, r in reward.stages.items():
            if r.status.value in ("passed", "failed"):
                times.setdefault(name, []).append(r.duration)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _equivalence(reward: Reward) -> str:
    """`refuted`, `proved`, `bounded(N)`, `unknown`, or `error` from an equivalence-stage reward."""
    r = reward.stages.get("equivalence")
    if r is None:
        return "unknown"
    verdict = r.metrics.get("verdict") or r.metrics.get("equivalence") or r.metrics.get("result")
    if isinstance(verdict, str) and verdict:
        return verdict
    if r.status.value == "passed":
        return "proved"
    if r.status.value == "failed":
        return "refuted"
    return "unknown"


def _counterexample(reward: Reward) -> str:
    r = reward.stages.get("equivalence")
    if r is None:
        return ""
    return " ".join((r.feedback or (r.diagnostics[0].message if r.diagnostics else "")).split())[:300]


class _Cache:
    """Per-task entries in one JSON file under the rtlreward cache folder, keyed by content + toolchain + settings."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.data: dict[str, Any] = {}
        if path is not None and path.exists():
            try:
                self.data = json.loads(path.read_text())
            except (OSError, ValueError):
                self.data = {}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.data.get(key)

    def put(self, key: str, entry: dict[str, Any]) -> None:
        self.data[key] = entry

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.data))
        tmp.replace(self.path)


def default_cache_path() -> Path:
    base = os.environ.get("RTLREWARD_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "rtlreward"
    )
    return Path(base) / "health.json"


def toolchain(engines: Iterable[Any]) -> dict[str, Any]:
    """Every tool version the engines' stages report, as one flat mapping (`stage/tool`)."""
    out: dict[str, Any] = {}
    for engine in engines:
        for name, stage in engine.stages.items():
            fn = getattr(stage, "tool_versions", None)
            try:
                versions = dict(fn()) if callable(fn) else {}
            except Exception as exc:  # a stage whose tool is missing still gets a report row
                versions = {"error": repr(exc)}
            for tool, version in versions.items():
                out[f"{name}/{tool}"] = version
    return out


def check_tasks(
    tasks: list[Task],
    settings: CheckSettings = CheckSettings(),
    *,
    registry: Any = None,
    cache_path: Path | None = None,
    use_cache: bool = True,
    progress: Callable[[str, int, int], Any] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Check every task; returns (toolchain, entries in task order). Tasks without a reference or a harness get an
    `unchecked` entry saying why."""
    from rtlreward.engine import Engine

    # The check measures the references itself: no engine calibration (rtlreward.calibration) on top.
    harness = Engine(
        HARNESS_PROFILE, executor=settings.executor, jobs=settings.jobs, registry=registry, calibrate=False
    )
    have_equiv = "equivalence" in harness.registry.stages()
    equiv = (
        Engine(
            EQUIV_PROFILE, executor=settings.executor, jobs=settings.jobs, registry=registry, calibrate=False
        )
        if have_equiv
        else None
    )
    synth = (
        Engine(SYNTH_PROFILE, executor=settings.executor, jobs=settings.jobs, registry=registry, calibrate=False)
        if "synth" in harness.registry.stages()
        else None
    )
    tools = toolchain([e for e in (harness, equiv, synth) if e is not None])
    cache = _Cache(cache_path if use_cache else None)
    settings_key = attrs.asdict(settings, filter=lambda a, _: a.name not in ("executor", "jobs"))
    keys = {
        t.id: hash_json([VERSION, t.fingerprint(), tools, settings_key, settings.executor]) for t in tasks
    }
    entries: dict[str, dict[str, Any]] = {}
    todo: list[Task] = []
    for t in tasks:
        hit = cache.get(keys[t.id])
        if hit is not None:
            entries[t.id] = {**hit, "cached": True}
        elif not t.reference:
            entries[t.id] = {"id": t.id, "status": "unchecked", "cause": "the task has no reference design"}
        elif t.harness is None:
            entries[t.id] = {"id": t.id, "status": "unchecked", "cause": "the task has no harness"}
        else:
            todo.append(t)
    try:
        # 1. The reference, over several seeds: one batch for every task.
        ref_items = [
            (t, Candidate(files=_seeded(t.reference or {}, k), sample=k))
            for t in todo
            for k in range(settings.seeds)
        ]
        ref_rewards = harness.score_batch(ref_items, _progress(progress, "reference runs"))
        runs: dict[str, list[Reward]] = {}
        for (t, _), r in zip(ref_items, ref_rewards, strict=True):
            runs.setdefault(t.id, []).append(r)
        # 2. Mutants of the references that pass: equivalence first, then the harness on the real bugs.
        passing = [t for t in todo if any(r.passed for r in runs[t.id])]
        muts = {t.id: mutants(t.reference or {}, limit=settings.mutants) for t in passing}
        mut_items = [
            (t, Candidate(files=m.files, sample=i)) for t in passing for i, m in enumerate(muts[t.id])
        ]
        verdicts: list[Reward | None] = [None] * len(mut_items)
        if equiv is not None and mut_items:
            verdicts = list(equiv.score_batch(mut_items, _progress(progress, "equivalence")))
        real = [i for i, v in enumerate(verdicts) if v is None or _equivalence(v) in ("refuted",)]
        harness_rewards = harness.score_batch(
            [mut_items[i] for i in real], _progress(progress, "mutant runs")
        )
        by_index = dict(zip(real, harness_rewards, strict=True))
        # 4. The reference against itself through the equivalence stage.
        selves: dict[str, Reward] = {}
        if equiv is not None and passing:
            self_items = [(t, Candidate(files=dict(t.reference or {}), sample=0)) for t in passing]
            for (t, _), r in zip(self_items, equiv.score_batch(self_items), strict=True):
                selves[t.id] = r
        # 5. Stubs under the profiles a trainer uses.
        stubs = _stub_rewards(passing, settings, registry, have_equiv) if settings.stubs else {}
        # 6. The reference's synthesis: figures, and whether it synthesises cleanly.
        synths: dict[str, dict[str, Any]] = {}
        if synth is not None and todo:
            synth_items = [(t, Candidate(files=dict(t.reference or {}), sample=0)) for t in todo]
            for (t, _), r in zip(synth_items, synth.score_batch(synth_items), strict=True):
                synths[t.id] = _synth_entry(r)
        for t in todo:
            entries[t.id] = _entry(
                t, runs[t.id], muts.get(t.id, []), mut_items, verdicts, by_index, settings, have_equiv
            )
            if t.id in selves:
                entries[t.id].update(_self_entry(selves[t.id]))
            if t.id in stubs:
                entries[t.id].update(stubs[t.id])
            if t.id in synths:
                entries[t.id].update(synths[t.id])
            entries[t.id]["tools"] = tools
            cache.put(keys[t.id], entries[t.id])
    finally:
        cache.save()
        harness.close()
        if equiv is not None:
            equiv.close()
        if synth is not None:
            synth.close()
    return tools, [entries[t.id] for t in tasks]


def _synth_entry(reward: Reward) -> dict[str, Any]:
    """`synthesis`: `clean` (the reference passes the `synth` stage), `not clean` (it does not: a benchmark bug,
    each problem named in `synthesis_problems`) or `error` (the stage could not run); `synthesis_figures`: cells,
    flip-flops, area, logic depth."""
    r = reward.stages.get("synth")
    if r is None:
        return {}
    if r.status.value in ("error", "timeout", "skipped"):
        cause = next((d.message for d in r.diagnostics), r.status.value)
        return {"synthesis": "error", "synthesis_problems": [cause]}
    figures = {k: r.metrics[k] for k in ("cells", "flip_flops", "area", "depth") if k in r.metrics}
    problems = [d.message for d in r.diagnostics if d.severity == "error"]
    return {
        "synthesis": "clean" if r.status.value == "passed" else "not clean",
        "synthesis_problems": problems,
        "synthesis_figures": figures,
    }


def _self_entry(reward: Reward) -> dict[str, Any]:
    """`formal`: `proves` when the reference is proved against itself, `simulation-only` when the proof does not
    close in budget (or Yosys cannot read it), `error` when the stage could not run."""
    r = reward.stages.get("equivalence")
    if r is None:
        return {}
    verdict = _equivalence(reward)
    if r.status.value == "error":
        formal = "error"
    elif verdict == "proved" and r.metrics.get("formal") == "proved":
        formal = "proves"
    else:
        formal = "simulation-only"
    return {"formal": formal, "reference_equivalence": verdict}


def _stub_rewards(
    tasks: list[Task], settings: CheckSettings, registry: Any, have_equiv: bool
) -> dict[str, dict[str, Any]]:
    """Per task: each stub's total under each of STUB_PROFILES, and where a stub earned correctness credit."""
    from rtlreward.engine import Engine
    from rtlreward_hdl.stubs import stub_designs

    out: dict[str, dict[str, Any]] = {}
    designs = {t.id: stub_designs(t) for t in tasks}
    items = [
        (t, Candidate(files=files, sample=k)) for t in tasks for k, files in enumerate(designs[t.id].values())
    ]
    if not items:
        return out
    for profile in STUB_PROFILES:
        if profile == "equiv" and not have_equiv:
            continue
        with Engine(
            profile,
            executor=settings.executor,
            jobs=settings.jobs,
            registry=registry,
            cache=False,
            calibrate=False,
        ) as eng:
            mine = [(t, c) for t, c in items if profile != "equiv" or t.reference]
            rewards = eng.score_batch(mine)
        for (t, c), r in zip(mine, rewards, strict=True):
            kind = list(designs[t.id])[c.sample]
            entry = out.setdefault(t.id, {"stub_rewards": {}, "stub_credit": []})
            entry["stub_rewards"].setdefault(profile, {})[kind] = round(r.total, 4)
            for name in CORRECTNESS_STAGES:
                st = r.stages.get(name)
                if st is not None and st.status.value in ("passed", "failed") and st.score > 0:
                    what = "passes" if st.status.value == "passed" else f"earns {st.score:.2f} of"
                    entry["stub_credit"].append(f"{profile}: the {kind} stub {what} {name}")
    return out


def _progress(progress: Callable[[str, int, int], Any] | None, what: str) -> Callable[[int, int], Any] | None:
    if progress is None:
        return None
    return lambda done, total: progress(what, done, total)


def _entry(
    task: Task,
    runs: list[Reward],
    task_mutants: list[Mutant],
    mut_items: list[tuple[Task, Candidate]],
    verdicts: list[Reward | None],
    harness_runs: Mapping[int, Reward],
    settings: CheckSettings,
    have_equiv: bool,
) -> dict[str, Any]:
    passes = sum(r.passed for r in runs)
    times = _stage_times(runs)
    limits = {name: round(max(settings.floor, settings.factor * s), 2) for name, s in times.items()}
    entry: dict[str, Any] = {
        "id": task.id,
        "dataset": task.dataset,
        "reference_passes": f"{passes}/{len(runs)}",
        "reference_seconds": round(sum(times.values()), 3) if times else None,
        "stage_seconds": {name: round(s, 3) for name, s in times.items()},
        # Calibrated per-command limits, only from a reference that passed every time.
        "time_limits": limits if passes == len(runs) else {},
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if passes == 0:
        return {**entry, "status": "broken", "cause": _cause(runs[0])}
    if passes < len(runs):
        failed = next(r for r in runs if not r.passed)
        return {
            **entry,
            "status": "flaky",
            "cause": f"the reference failed {len(runs) - passes} of {len(runs)} seeds: {_cause(failed)}",
        }
    mine = [i for i, (t, _) in enumerate(mut_items) if t.id == task.id]
    tried = refuted = killed = equivalent = stillborn = 0
    survivors: list[dict[str, Any]] = []
    for i in mine:
        m = task_mutants[mut_items[i][1].sample]
        tried += 1
        v = verdicts[i]
        eq = _equivalence(v) if v is not None else "unknown"
        if v is not None and eq != "refuted":
            if eq.startswith(("proved", "bounded")):
                equivalent += 1
            continue
        run = harness_runs.get(i)
        if run is None:
            continue
        compiled = all(r.passed for n, r in run.stages.items() if n in ("format", "safety", "compile"))
        if not compiled:
            stillborn += 1
            continue
        refuted += 1
        if run.passed:
            survivors.append(
                {
                    "mutant": m.describe(),
                    "counterexample": _counterexample(v) if v is not None else "",
                    "equivalence": eq,
                }
            )
        else:
            killed += 1
    entry.update(
        {
            "mutants_tried": tried,
            "mutants_not_equivalent": refuted,
            "mutants_killed": killed,
            "mutants_equivalent": equivalent,
            "mutants_not_building": stillborn,
            "harness_strength": round(killed / refuted, 3) if refuted else None,
            "surviving_mutants": survivors,
        }
    )
    if survivors:
        what = "refuted by equivalence" if have_equiv else "equivalence not checked (no equivalence stage)"
        status = "weak" if have_equiv else "unchecked"
        return {
            **entry,
            "status": status,
            "cause": f"the harness passes a mutant ({what}): {survivors[0]['mutant']}",
        }
    if not refuted:
        return {
            **entry,
            "status": "ok",
            "cause": "no mutant that differs from the reference could be built to grade the harness",
        }
    return {**entry, "status": "ok", "cause": ""}


def report(dataset: str, tools: Mapping[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema": SCHEMA, "dataset": dataset, "toolchain": dict(tools), "tasks": entries}
