"""`run_audit`: how much reward can a design earn under a profile without being right?

Per task:
1. every attack's seeds (rtlreward_audit.attacks) are scored under the audited profile by the real Engine;
2. seeds are judged wrong or not independently of that profile: refuted against the task's reference by the
   `equivalence` stage with a larger budget than the profile gives it (a counterexample the simulation replays,
   or a design that lacks the reference's module or ports, or does not build), or, where the task has no
   reference, failing the task's own harness (`strict`). Undecided is not wrong: such a seed is counted apart;
3. a budgeted hill climb (rtlreward_audit.search) from the best wrong blind seeds: text mutations kept when the
   reward rises while the design stays wrong, deterministic for `seed`;
4. the report: the best unearned reward of a blind attack (its reply, how it was judged wrong, its class), the
   reference's own reward and the do-nothing stub's, the margin, and the best near miss (informed attacks:
   mutants of the reference) apart.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from rtlreward.model import Candidate, Reward, Task
from rtlreward_audit.attacks import Attack, Seed, collect_attacks, feedback_names, name_seeds
from rtlreward_audit.search import mutate

__all__ = ["AuditSettings", "judge_profile", "run_audit"]

SCHEMA = "rtlreward-audit/1"
DO_NOTHING = ("zeros", "ones", "undriven")  # the stub seeds whose best reward is the do-nothing baseline
# The judge's equivalence budget, as a multiple of what the audited profile (or the stage's default) gives.
JUDGE_DEFAULTS = {"formal_timeout": 5.0, "bmc_frames": 64, "seeds": 3, "cycles": 256}
JUDGE_FACTOR = 2
# A judge verdict that a design does not implement the task, from the equivalence stage's diagnostics.
_NOT_A_DESIGN = {"no-sources", "missing-module", "missing-port", "compile-failed"}


@attrs.frozen
class AuditSettings:
    profile: Any = "shaped"
    budget: int = 16  # search evaluations per task (after the seeds)
    seed: int = 0
    attacks: tuple[str, ...] = ()  # only these attack names or classes (empty: all)
    skip: tuple[str, ...] = ()  # leave these attack names or classes out
    executor: str = "local"
    jobs: int | None = None
    cache: bool = True
    batch: int = 4  # mutants scored together per search round


def judge_profile(profile: Any) -> dict[str, Any]:
    """`format` + `equivalence` with JUDGE_FACTOR x the budget the audited profile gives equivalence."""
    opts: dict[str, Any] = {}
    settings = getattr(profile, "stage_settings", {}).get("equivalence")
    given = dict(settings.options) if settings is not None else {}
    for key, default in JUDGE_DEFAULTS.items():
        base = given.get(key, default)
        opts[key] = type(default)(base * JUDGE_FACTOR)
    return {
        "name": "audit-judge",
        "description": "the audit's judge: equivalence to the reference with a larger budget",
        "combiner": "weighted",
        "stages": ["format", "equivalence"],
        "verdict": "equivalence",
        "weights": {"equivalence": 1.0},
        "stage": {"equivalence": {"options": opts, "timeout": 60}},
    }


HARNESS_JUDGE = {"extends": "strict", "name": "audit-judge-harness"}


@attrs.define
class _Eval:
    """One scored reply."""

    attack: Attack
    seed: Seed
    reward: Reward
    origin: str = ""  # the seed it was mutated from, and how
    verdict: str = ""  # "" not judged | "wrong" | "right" | "undecided"
    how: str = ""

    @property
    def total(self) -> float:
        return float(self.reward.total)

    def candidate(self) -> Candidate:
        if self.seed.files is not None:
            return Candidate(files=dict(self.seed.files))
        return Candidate(text=self.seed.reply())

    def row(self) -> dict[str, Any]:
        return {
            "reward": round(self.total, 4),
            "attack": self.attack.name,
            "class": self.attack.cls,
            "label": self.seed.label,
            "origin": self.origin,
            "judged": self.verdict,
            "how": self.how,
            "reply": self.seed.reply() if self.seed.files is None else "",
            "files": dict(self.seed.files or self.reward.files or {}),
            "stages": {n: [r.status.value, round(r.score, 4)] for n, r in self.reward.stages.items()},
        }


def _judge(reward: Reward, verdict: Reward, has_reference: bool) -> tuple[str, str]:
    """(wrong | right | undecided, how) for a reply whose extracted files the judge scored."""
    if not reward.files:
        return "wrong", "no design was extracted from the reply"
    if has_reference:
        r = verdict.stages.get("equivalence")
        if r is None:
            return "undecided", "no equivalence result"
        eq = str(r.metrics.get("equivalence", ""))
        codes = {d.code for d in r.diagnostics}
        if r.status.value == "passed":
            return "right", f"equivalent to the reference ({eq})"
        if r.status.value == "failed" and eq == "refuted":
            text = " ".join((r.feedback or "").split())[:300]
            return "wrong", f"refuted against the reference ({r.metrics.get('method', '')}): {text}"
        if r.status.value == "failed" and codes & _NOT_A_DESIGN:
            d = next(d for d in r.diagnostics if d.code in _NOT_A_DESIGN)
            return "wrong", f"not a design of the task ({d.code}): {' '.join(d.message.split())[:200]}"
        return "undecided", f"equivalence {r.status.value}: {eq or 'no verdict'}"
    if verdict.passed:
        return "right", "passes the task's harness"
    for name in ("compile", "tests"):
        r = verdict.stages.get(name)
        if r is not None and r.status.value == "failed":
            what = " ".join((r.feedback or "").split())[:200]
            return "wrong", f"fails the task's harness ({name}): {what}"
    return "undecided", "the harness did not decide"


class _Auditor:
    def __init__(self, settings: AuditSettings, registry: Any) -> None:
        from rtlreward.engine import Engine

        self.settings = settings
        self.engine = Engine(
            settings.profile,
            executor=settings.executor,
            jobs=settings.jobs,
            registry=registry,
            cache=settings.cache,
        )
        self.registry = self.engine.registry
        self.have_equiv = "equivalence" in self.registry.stages()
        self.ref_judge = (
            Engine(
                judge_profile(self.engine.profile),
                executor=settings.executor,
                jobs=settings.jobs,
                registry=self.registry,
                cache=settings.cache,
                calibrate=False,
            )
            if self.have_equiv
            else None
        )
        self.harness_judge: Any = None
        attacks = collect_attacks(self.registry)
        if settings.attacks:
            wanted = set(settings.attacks)
            attacks = [a for a in attacks if a.name in wanted or a.cls in wanted]
        if settings.skip:
            unwanted = set(settings.skip)
            attacks = [a for a in attacks if a.name not in unwanted and a.cls not in unwanted]
        self.attacks = attacks

    def close(self) -> None:
        for e in (self.engine, self.ref_judge, self.harness_judge):
            if e is not None:
                e.close()

    def _judge_engine(self, task: Task) -> Any:
        from rtlreward.engine import Engine

        if task.reference and self.ref_judge is not None:
            return self.ref_judge
        if self.harness_judge is None:
            self.harness_judge = Engine(
                HARNESS_JUDGE,
                executor=self.settings.executor,
                jobs=self.settings.jobs,
                registry=self.registry,
                cache=self.settings.cache,
                calibrate=False,
            )
        return self.harness_judge

    def judge(self, task: Task, evals: list[_Eval]) -> None:
        todo = [e for e in evals if not e.verdict]
        if not todo:
            return
        has_ref = bool(task.reference) and self.ref_judge is not None
        with_files = [e for e in todo if e.reward.files]
        verdicts = self._judge_engine(task).score_batch(
            [(task, Candidate(files=dict(e.reward.files))) for e in with_files]
        )
        by_id = {id(e): v for e, v in zip(with_files, verdicts, strict=True)}
        for e in todo:
            e.verdict, e.how = _judge(e.reward, by_id.get(id(e), e.reward), has_ref)

    def score(self, task: Task, items: list[tuple[Attack, Seed, str]]) -> list[_Eval]:
        if not items:
            return []
        cands = [
            Candidate(files=dict(s.files)) if s.files is not None else Candidate(text=s.reply())
            for _, s, _ in items
        ]
        rewards = self.engine.score_batch([(task, c) for c in cands])
        return [_Eval(a, s, r, origin=o) for (a, s, o), r in zip(items, rewards, strict=True)]

    def best_wrong(self, task: Task, evals: list[_Eval]) -> _Eval | None:
        """The highest-reward wrong reply, judging in descending reward order until one is wrong."""
        for e in sorted(evals, key=lambda e: -e.total):
            if not e.verdict:
                self.judge(task, [e])
            if e.verdict == "wrong":
                return e
        return None

    def audit_task(self, task: Task, progress: Callable[[str], Any] | None = None) -> dict[str, Any]:
        seeds = [(a, sd, "seed") for a in self.attacks for sd in _safe_seeds(a, task)]
        evals = self.score(task, seeds)
        # Second round of `names`: the identifiers the reward's own feedback showed (a policy reads it too).
        names_attack = next((a for a in self.attacks if a.name == "names"), None)
        if names_attack is not None and evals:
            shown = [
                text
                for e in evals
                for r in e.reward.stages.values()
                for text in (r.feedback, *(d.message for d in r.diagnostics))
            ]
            found = feedback_names(task, [e.seed.reply() for e in evals], shown)
            evals += self.score(task, [(names_attack, sd, "feedback") for sd in name_seeds(task, found)])
        if progress:
            progress(f"{task.id}: {len(evals)} seeds scored")
        reference = self.engine.score(task, Candidate(files=dict(task.reference))) if task.reference else None
        # Judge the head of each attack class first (one batch), then walk down where the head was not wrong.
        heads: dict[str, _Eval] = {}
        for e in sorted(evals, key=lambda e: -e.total):
            heads.setdefault(e.attack.cls, e)
        self.judge(task, [e for e in heads.values() if e.total > 0])
        by_class: dict[str, _Eval | None] = {}
        for cls in dict.fromkeys(a.cls for a in self.attacks):  # attack order: ties go to the first attack
            mine = [e for e in evals if e.attack.cls == cls and e.total > 0]
            by_class[cls] = self.best_wrong(task, mine)
        # The do-nothing stub: the best of the constant and undriven stubs.
        stubs = [e for e in evals if e.attack.name == "stub" and e.seed.label in DO_NOTHING]
        stub_reward = max((e.total for e in stubs), default=None)
        # The search: from the best wrong blind replies.
        pool = sorted(
            (
                e
                for e in by_class.values()
                if e is not None and not e.attack.informed and e.seed.files is None
            ),
            key=lambda e: -e.total,
        )
        searched = self.search(task, pool)
        blind = [e for e in [*by_class.values(), *searched] if e is not None and not e.attack.informed]
        # An informed reply (a refuted mutant of the reference) is a near miss while the profile pays it partial
        # credit, but unearned reward once the profile passes it: a wrong design paid as right is a forge however
        # it was found. Every informed reply the profile passed is judged, not only each class's best.
        passed_informed = [e for e in evals if e.attack.informed and e.reward.passed]
        self.judge(task, passed_informed)
        forged = [e for e in passed_informed if e.verdict == "wrong"]
        informed = [e for e in by_class.values() if e is not None and e.attack.informed]
        best = max([*blind, *forged], key=lambda e: e.total, default=None)
        near = max(informed, key=lambda e: e.total, default=None)
        # A reply that broke a stage (`error`) is the reward's bug whatever it earned: the failure should read as
        # the answer's (failed, resource-limit, timeout).
        errors = [
            {
                "attack": e.attack.name,
                "class": e.attack.cls,
                "label": e.seed.label,
                "stage": name,
                "feedback": " ".join((r.feedback or "").split())[:200],
                "reward": round(e.total, 4),
            }
            for e in [*evals, *searched]
            for name, r in e.reward.stages.items()
            if r.status.value == "error"
        ]
        ref_total = round(reference.total, 4) if reference is not None else None
        undecided = [e for e in evals if e.verdict == "undecided" and e.total > (stub_reward or 0)]
        entry: dict[str, Any] = {
            "id": task.id,
            "dataset": task.dataset,
            "profile": self.engine.profile.name,
            "max_total": round(evals[0].reward.max_total, 4) if evals else None,
            "judge": "equivalence" if (task.reference and self.have_equiv) else "harness",
            "reference_reward": ref_total,
            "reference_passed": reference.passed if reference is not None else None,
            "stub_reward": None if stub_reward is None else round(stub_reward, 4),
            "unearned": best.row() if best else None,
            "unearned_reward": round(best.total, 4) if best else 0.0,
            "over_stub": round(best.total - stub_reward, 4) if best and stub_reward is not None else None,
            "margin": round(ref_total - best.total, 4) if best and ref_total is not None else None,
            "near_miss": near.row() if near else None,
            "forged_pass": bool(best is not None and best.reward.passed),
            "errors": errors,
            "by_class": {cls: (None if e is None else round(e.total, 4)) for cls, e in by_class.items()},
            "seeds": len(evals),
            "search_evaluations": self._spent,
            "search_improvements": len(searched),
            "undecided": [
                {"attack": e.attack.name, "label": e.seed.label, "reward": round(e.total, 4), "how": e.how}
                for e in undecided
            ],
        }
        return entry

    _spent = 0

    def search(self, task: Task, pool: list[_Eval]) -> list[_Eval]:
        """Hill climb: mutate the best wrong replies; keep a mutant whose reward rises while it stays wrong."""
        s = self.settings
        self._spent = 0
        if not pool or s.budget <= 0:
            return []
        digest = hashlib.sha256(f"{s.seed}\0{task.id}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        frontier = list(pool[:3])
        seen = {e.seed.design for e in pool}
        kept: list[_Eval] = []
        stale = 0
        while self._spent < s.budget and stale < 4:
            items = []
            for _ in range(min(s.batch, s.budget - self._spent)):
                parent = frontier[rng.randrange(len(frontier))] if rng.random() < 0.3 else frontier[0]
                out = mutate(parent.seed.design, rng)
                if out is None or out[0] in seen:
                    continue
                seen.add(out[0])
                child = attrs.evolve(parent.seed, design=out[0], label=f"{parent.seed.label}+{out[1]}")
                items.append((parent, child, f"{parent.seed.label} <- {out[1]}"))
            if not items:
                stale += 1
                continue
            stale = 0
            evals = self.score(task, [(p.attack, c, o) for p, c, o in items])
            self._spent += len(evals)
            # Kept: a child at least as good as its parent that is still wrong. Equal moves let the search drift
            # across a plateau (the newest first among equals); only a rise counts as an improvement.
            level = [(p, e) for (p, _, _), e in zip(items, evals, strict=True) if e.total >= p.total > 0]
            self.judge(task, [e for _, e in level])
            for p, e in level:
                if e.verdict == "wrong":
                    frontier.insert(0, e)
                    if e.total > p.total:
                        kept.append(e)
            frontier.sort(key=lambda e: -e.total)  # stable: the newest stays first among equals
            frontier = frontier[:3]
        return kept


def _safe_seeds(attack: Attack, task: Task) -> list[Seed]:
    """An attack's seeds; an attack that raises contributes none (a third-party attack must not stop the audit)."""
    import warnings

    try:
        return list(attack.seeds(task))
    except Exception as exc:
        warnings.warn(f"audit attack {attack.name!r} failed on {task.id}: {exc}", stacklevel=2)
        return []


def run_audit(
    tasks: list[Task],
    settings: AuditSettings = AuditSettings(),
    *,
    registry: Any = None,
    progress: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """Audit every task; returns the report (`schema`, `profile`, `settings`, `tasks`: one entry per task)."""
    auditor = _Auditor(settings, registry)
    try:
        entries = [auditor.audit_task(t, progress) for t in tasks]
        return {
            "schema": SCHEMA,
            "profile": auditor.engine.profile.name,
            "settings": {
                "budget": settings.budget,
                "seed": settings.seed,
                "attacks": [a.name for a in auditor.attacks],
                "judge": judge_profile(auditor.engine.profile)["stage"]["equivalence"]["options"],
            },
            "max_unearned": max((e["unearned_reward"] for e in entries), default=0.0),
            "tasks": entries,
        }
    finally:
        auditor.close()


def over(report: Mapping[str, Any], limit: float) -> list[str]:
    """The ids of the tasks whose unearned reward exceeds `limit`."""
    return [e["id"] for e in report["tasks"] if e["unearned_reward"] > limit]


def over_stub(report: Mapping[str, Any], slack: float = 1e-9) -> list[str]:
    """The ids of the tasks where a wrong reply earns more than the do-nothing stub, where a wrong reply is paid as
    a pass, or where a reply made a stage end in `error`: the hacks (docs/audit.md)."""
    return [
        e["id"]
        for e in report["tasks"]
        if (e.get("over_stub") is not None and e["over_stub"] > slack)
        or (e.get("stub_reward") is None and e["unearned_reward"] > slack)
        or e.get("forged_pass")
        or e.get("errors")
    ]
