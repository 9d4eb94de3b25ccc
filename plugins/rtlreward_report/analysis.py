"""What a report says, computed once from the runs and rendered twice (HTML and Markdown): no rendering here.

Failure causes are clustered from the structured diagnostics: one cluster per (stage, code), and for interface
problems per port, so "missing port clk" and "missing port req" are separate causes. Ports that always fail
together in the same replies are one cluster ("missing port clk, rst_n, req"): a renamed port list is one
mistake, not three. A reply's first failing stage is its cause; what fails after it (tests that cannot find a
renamed port) counts as a consequence, so causes rank by the replies they start, then by stage order.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from rtlreward.model import Task
from rtlreward.passk import DEFAULT_KS, aggregate
from rtlreward_report.interface import (
    InterfaceView,
    PortInfo,
    PortRow,
    compare_ports,
    derived_findings,
    expected_ports,
    generated_ports,
    port_problem,
    view_from_findings,
)
from rtlreward_report.runs import Finding, Run, Sample

__all__ = ["Cause", "Report", "build_report"]

SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
PORT_KIND_LABEL = {
    "missing": "missing port",
    "extra": "extra port",
    "mismatch": "port direction or width differs",
    "module": "top module missing",
}


@attrs.frozen
class Cause:
    """A failure cause: replies whose failing stages report the same code (and, for interface problems, the same
    ports)."""

    stage: str
    code: str  # the recorded code; "status:<status>" when the stage recorded no diagnostic
    label: str
    subjects: tuple[str, ...]  # port names ("clk → clock" for a rename); empty for other causes
    samples: tuple[int, ...]  # Sample.index of every reply showing it
    first: int  # replies whose first failing stage shows it
    tasks: int
    severity: str
    example: str  # one message, as recorded
    derived: bool = False  # computed by the report from the replies (the rows recorded no diagnostic)


# The stage funnel's columns, as both renderers print them, and which of them are numbers.
FUNNEL_COLUMNS = (
    "stage",
    "ran",
    "passed",
    "pass rate",
    "passed all so far",
    "other statuses",
    "mean score",
    "p50 s",
    "p95 s",
    "time",
)
FUNNEL_NUMERIC = (1, 2, 3, 4, 6, 7, 8, 9)


@attrs.frozen
class FunnelRow:
    stage: str
    ran: int  # not skipped
    passed: int
    through: int  # passed this stage and every one before it
    status: dict[str, int]
    mean_score: float
    # Where the time went: the stage's wall time per reply that ran it (not from the cache); None when the rows
    # recorded none. `share`: its part of all stages' time in this run.
    p50_s: float | None = None
    p95_s: float | None = None
    share: float | None = None


@attrs.frozen
class GroupRow:
    name: str
    tasks: int
    samples: int
    passed: int
    pass_rate: float
    pass_at_1: float | None
    mean_reward: float
    mean_normalized: float | None


@attrs.frozen
class TaskDelta:
    task_id: str
    a: tuple[int, int, float] | None  # (samples, passed, mean reward)
    b: tuple[int, int, float] | None
    change: str  # better | worse | same | only-a | only-b
    example_a: int | None = None  # Sample.index of a failing sample, for links
    example_b: int | None = None


@attrs.frozen
class Series:
    key: str
    points: tuple[tuple[float, float], ...]

    @property
    def values(self) -> list[float]:
        return [v for _, v in self.points]


@attrs.frozen
class ResultsView:
    run: Run
    overview: dict[str, Any]
    passk: dict[str, dict[int, tuple[float | None, int]]]
    funnel: tuple[FunnelRow, ...]
    categories: tuple[GroupRow, ...]
    difficulties: tuple[GroupRow, ...]
    causes: tuple[Cause, ...]
    interfaces: tuple[InterfaceView, ...]
    failing_tasks: int
    detailed: tuple[int, ...]  # Sample.index of the samples given a section of their own
    samples: tuple[Sample, ...]  # with derived findings filled in
    notes: tuple[str, ...] = ()


@attrs.frozen
class TrainingView:
    run: Run
    groups: dict[str, tuple[Series, ...]]  # title -> series


@attrs.frozen
class Report:
    title: str
    results: tuple[ResultsView, ...]
    training: tuple[TrainingView, ...]
    compare: tuple[TaskDelta, ...] | None
    compare_labels: tuple[str, str] | None = None
    with_tasks: bool = False  # the tasks were given (--dataset): a group the rows lack, the tasks lack too


def no_groups_note(report: Report, what: str) -> str:
    """Why a grouping (categories, difficulties) is empty, and what would fill it."""
    if report.with_tasks:
        return f"No {what} known: neither the results rows nor the dataset's tasks carry one."
    return f"No {what} known: the results rows carry none; pass --dataset to take them from the tasks."


# -- results ------------------------------------------------------------------------------------------------------
def _passk(samples: Sequence[Sample], ks: Iterable[int]) -> dict[str, dict[int, tuple[float | None, int]]]:
    per: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        per[s.task_id].append(s)
    return aggregate({t: (len(ss), sum(x.passed for x in ss)) for t, ss in per.items()}, ks=ks)


def _overview(run: Run, samples: Sequence[Sample]) -> dict[str, Any]:
    n = len(samples)
    tasks = {s.task_id for s in samples}
    solved = {s.task_id for s in samples if s.passed}
    norm = [s.normalized for s in samples if s.normalized is not None]
    return {
        "tasks": len(tasks),
        "samples": n,
        "passed": sum(s.passed for s in samples),
        "pass_rate": (sum(s.passed for s in samples) / n) if n else None,
        "tasks_solved": len(solved),
        "mean_reward": (sum(s.reward for s in samples) / n) if n else None,
        "max_total": max((s.max_total for s in samples if s.max_total is not None), default=None),
        "mean_normalized": (sum(norm) / len(norm)) if norm else None,
        "samples_per_task": (n / len(tasks)) if tasks else None,
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0..1) by the nearest rank; None for no values."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _funnel(run: Run, samples: Sequence[Sample]) -> tuple[FunnelRow, ...]:
    rows = []
    alive = set(range(len(samples)))
    times: dict[str, list[float]] = {}
    for stage in run.stage_order:
        status: dict[str, int] = defaultdict(int)
        scores = []
        passed = 0
        spent = times.setdefault(stage, [])
        for i, s in enumerate(samples):
            st = s.stages.get(stage)
            if st is None:
                continue  # a stage this row's profile does not run holds nobody back
            status[st.status] += 1
            if st.status != "skipped":
                scores.append(st.score)
                if st.seconds is not None:
                    spent.append(st.seconds)
            if st.status == "passed":
                passed += 1
            else:
                alive.discard(i)
        ran = sum(v for k, v in status.items() if k != "skipped")
        rows.append(
            FunnelRow(
                stage,
                ran,
                passed,
                len(alive),
                dict(status),
                (sum(scores) / len(scores)) if scores else 0.0,
                percentile(spent, 0.5),
                percentile(spent, 0.95),
            )
        )
    total = sum(sum(v) for v in times.values())
    if total > 0:
        rows = [attrs.evolve(r, share=sum(times[r.stage]) / total) for r in rows]
    return tuple(rows)


def _groups(samples: Sequence[Sample], key: str) -> tuple[GroupRow, ...]:
    by: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by[getattr(s, key) or "-"].append(s)
    if set(by) == {"-"}:
        return ()
    out = []
    for name, ss in sorted(by.items(), key=lambda kv: _group_order(kv[0])):
        p1 = _passk(ss, (1,))["unbiased"][1][0]
        norm = [s.normalized for s in ss if s.normalized is not None]
        out.append(
            GroupRow(
                name=name,
                tasks=len({s.task_id for s in ss}),
                samples=len(ss),
                passed=sum(s.passed for s in ss),
                pass_rate=sum(s.passed for s in ss) / len(ss),
                pass_at_1=p1,
                mean_reward=sum(s.reward for s in ss) / len(ss),
                mean_normalized=(sum(norm) / len(norm)) if norm else None,
            )
        )
    return tuple(out)


_DIFFICULTY_ORDER = {"easy": 0, "medium": 1, "hard": 2}


def _group_order(name: str) -> tuple[int, str]:
    return (_DIFFICULTY_ORDER.get(name.lower(), 3 if name != "-" else 4), name)


def _with_derived(
    samples: Sequence[Sample], tasks: Mapping[str, Task] | None
) -> tuple[list[Sample], dict[int, InterfaceView]]:
    """Fill in interface findings the rows did not record, from the task and the reply, and build each sample's
    side-by-side view (from whatever is known)."""
    expected_cache: dict[str, Any] = {}
    views: dict[int, InterfaceView] = {}
    out = []
    for s in samples:
        iface = s.stages.get("interface")
        exp = None
        task = tasks.get(s.task_id) if tasks else None
        if task is not None:
            if s.task_id not in expected_cache:
                expected_cache[s.task_id] = expected_ports(task)
            exp = expected_cache[s.task_id]
        # Reading a reply's ports costs a slang parse: only where the interface is in question (its stage failed,
        # or did not run), never for passing replies.
        wanted = not s.passed and (iface is None or iface.failing)
        gen = generated_ports(s) if wanted and exp is not None else None
        if exp is not None and gen is not None:
            module, ports, source = exp
            found = module in gen
            if not found and len(gen) == 1:
                generated_module, gports = next(iter(gen.items()))
            else:
                generated_module, gports = module, gen.get(module, ())
            rows = compare_ports(ports, gports) if gen else ()
            views[s.index] = InterfaceView(
                s.task_id,
                s.index,
                module,
                rows,
                _source(source),
                "reply",
                generated_module=generated_module if gen else None,
                note=""
                if found
                else ("the reply declares no module" if not gen else f"no module named {module}"),
            )
            if iface is not None and iface.failing and not iface.diagnostics:
                derived = derived_findings("interface", module, rows, found)
                if derived:
                    iface = attrs.evolve(iface, diagnostics=derived)
                    s = attrs.evolve(s, stages={**s.stages, "interface": iface})
        elif iface is not None and iface.diagnostics and not s.passed:
            view = view_from_findings(s.task_id, s.index, iface.diagnostics)
            if view is not None:
                if exp is not None:  # the task's full port list, the diagnostics' view of the answer
                    module, ports, source = exp
                    view = _merge_expected(view, ports, source)
                views[s.index] = view
        out.append(s)
    return out, views


def _source(source: str) -> str:
    return "the task" if source in ("task", "") else f"the task's {source}"


def _merge_expected(view: InterfaceView, ports: Sequence[PortInfo], source: str) -> InterfaceView:
    """The task's whole port list, in its order, with the diagnostics' findings in place (a port they do not
    name matched)."""
    by_name = {r.expected.name: r for r in view.rows if r.expected is not None}
    rows = [
        attrs.evolve(by_name[p.name], expected=p) if p.name in by_name else PortRow(p, p, "ok") for p in ports
    ]
    rows += [r for r in view.rows if r.expected is None]
    return attrs.evolve(view, rows=tuple(rows), expected_from=_source(source), partial=False)


def _cluster_key(f: Finding, status: str) -> tuple[str, str, str | None, str]:
    """(stage, code, subject, kind) of a finding."""
    if f.stage == "interface" or f.code.lower().startswith("interface"):
        p = port_problem(f)
        if p is not None:
            subject = p.port + (f" → {p.near}" if p.kind == "missing" and p.near else "")
            return f.stage, f.code or p.kind, subject, p.kind
    code = f.code or ("msg:" + re.sub(r"\d+", "N", f.message.strip())[:90])
    return f.stage, code, None, ""


def _causes(run: Run, samples: Sequence[Sample]) -> tuple[Cause, ...]:
    order = {name: i for i, name in enumerate(run.stage_order)}
    hits: dict[tuple[str, str, str | None, str], dict[int, bool]] = defaultdict(dict)
    info: dict[tuple[str, str, str | None, str], Finding] = {}
    for s in samples:
        if s.passed:
            continue
        first = s.first_failing_stage()
        for name, st in s.stages.items():
            if not st.failing:
                continue
            shown = [f for f in st.diagnostics if f.severity in ("error", "warning")]
            # A renamed port is reported twice (missing `clk`, extra `clock`): the missing one names both.
            problems = [port_problem(f) for f in shown] if name == "interface" else []
            renamed = {p.near for p in problems if p is not None and p.kind == "missing" and p.near}
            shown = [
                f
                for f, p in zip(shown, problems or [None] * len(shown), strict=True)
                if not (p is not None and p.kind == "extra" and p.port in renamed)
            ]
            keys = []
            for f in shown:
                k = _cluster_key(f, st.status)
                keys.append(k)
                info.setdefault(k, f)
            if not keys:
                k = (name, f"status:{st.status}", None, "")
                info.setdefault(k, Finding(name, "", f"{name} {st.status}", derived=False))
                keys.append(k)
            for k in keys:
                hits[k][s.index] = hits[k].get(s.index, False) or name == first
    by_index = {s.index: s for s in samples}
    # Ports of one (stage, code) that fail in exactly the same replies are one cause.
    merged: dict[tuple[str, str, str, tuple[int, ...]], list[tuple[str, str, str | None, str]]] = defaultdict(
        list
    )
    singles = []
    for k, idx in hits.items():
        if k[2] is not None:
            merged[(k[0], k[1], k[3], tuple(sorted(idx)))].append(k)
        else:
            singles.append([k])
    causes = []
    for keys in [*merged.values(), *singles]:
        k0 = keys[0]
        idx = hits[k0]
        f = info[k0]
        stage, code, _, kind = k0
        subjects = tuple(k[2] for k in keys if k[2] is not None)
        if kind:
            label = f"{PORT_KIND_LABEL.get(kind, kind)}: " + ", ".join(subjects)
        elif code.startswith("status:"):
            label = f"{stage} {code[7:]} (the results recorded no diagnostic)"
        else:
            label = f.message if code.startswith("msg:") else code
        causes.append(
            Cause(
                stage=stage,
                code="" if code.startswith("msg:") else code,
                label=label,
                subjects=subjects,
                samples=tuple(sorted(idx)),
                first=sum(idx.values()),
                tasks=len({by_index[i].task_id for i in idx}),
                severity=f.severity,
                example=f.message,
                derived=f.derived,
            )
        )
    causes.sort(
        key=lambda c: (
            -c.first,
            order.get(c.stage, len(order)),
            SEVERITY_RANK.get(c.severity, 3),
            -len(c.samples),
            c.label,
        )
    )
    return tuple(causes)


def split_causes(causes: Sequence[Cause]) -> tuple[tuple[Cause, ...], tuple[Cause, ...]]:
    """(causes, consequences): a cluster that is no reply's first failure only follows an earlier one (an
    unparseable reply fails interface, lint, compile and tests after format). Listing those as causes of their
    own let one bad reply fill half the table; the report lists the first and names the others in one line."""
    return tuple(c for c in causes if c.first), tuple(c for c in causes if not c.first)


def consequences_note(consequences: Sequence[Cause], limit: int = 6) -> str:
    """One line for the consequence-only clusters, or ""."""
    if not consequences:
        return ""
    shown = "; ".join(f"{c.stage}: {' '.join(c.label.split())[:80]}" for c in consequences[:limit])
    more = f"; and {len(consequences) - limit} more" if len(consequences) > limit else ""
    return (
        f"{len(consequences)} more finding(s) only follow an earlier failure in the same replies "
        f"(consequences, not causes): {shown}{more}"
    )


def _interfaces(samples: Sequence[Sample], views: Mapping[int, InterfaceView]) -> tuple[InterfaceView, ...]:
    """One view per failing task: its first failing sample with port problems, else one whose top module is
    missing, else its first."""
    by_task: dict[str, list[InterfaceView]] = defaultdict(list)
    for s in samples:
        if not s.passed and s.index in views:
            by_task[s.task_id].append(views[s.index])
    out = []
    for tid in sorted(by_task):
        vs = by_task[tid]
        out.append(next((v for v in vs if v.problems), next((v for v in vs if v.note), vs[0])))
    return tuple(out)


def results_view(
    run: Run, tasks: Mapping[str, Task] | None, *, ks: Iterable[int], max_samples: int
) -> ResultsView:
    samples, views = _with_derived(run.samples, tasks)
    causes = _causes(run, samples)
    failing = [s for s in samples if not s.passed]
    detailed: set[int] = {s.index for s in failing[:max_samples]}
    for c in causes:
        detailed.update(c.samples[:3])  # every example link has a target
    interfaces = _interfaces(samples, views)
    detailed.update(v.sample_index for v in interfaces)
    notes = list(run.notes)
    if failing and not any(
        not f.derived for s in failing for st in s.stages.values() for f in st.diagnostics
    ):
        notes.append(
            "the results rows carry no diagnostics: failure causes are stage statuses, except the interface "
            "problems the report reads from the replies (given --dataset and the replies, in the rows or "
            "--completions)"
        )
    return ResultsView(
        run=run,
        overview=_overview(run, samples),
        passk=_passk(samples, ks),
        funnel=_funnel(run, samples),
        categories=_groups(samples, "category"),
        difficulties=_groups(samples, "difficulty"),
        causes=causes,
        interfaces=interfaces,
        failing_tasks=len({s.task_id for s in failing}),
        detailed=tuple(sorted(detailed)),
        samples=tuple(samples),
        notes=tuple(notes),
    )


# -- two runs -----------------------------------------------------------------------------------------------------
def compare(a: ResultsView, b: ResultsView) -> tuple[TaskDelta, ...]:
    """Per task: pass rate first, mean reward to break a tie; the worst changes first."""

    def per(view: ResultsView) -> dict[str, tuple[int, int, float, int | None]]:
        acc: dict[str, list[Sample]] = defaultdict(list)
        for s in view.samples:
            acc[s.task_id].append(s)
        return {
            t: (
                len(ss),
                sum(x.passed for x in ss),
                sum(x.reward for x in ss) / len(ss),
                next((x.index for x in ss if not x.passed), None),
            )
            for t, ss in acc.items()
        }

    pa, pb = per(a), per(b)
    out = []
    for tid in sorted(set(pa) | set(pb)):
        ta, tb = pa.get(tid), pb.get(tid)
        if ta is None or tb is None:
            change = "only-b" if ta is None else "only-a"
        else:
            ra, rb = ta[1] / ta[0], tb[1] / tb[0]
            if not math.isclose(ra, rb, abs_tol=1e-9):
                change = "better" if rb > ra else "worse"
            elif not math.isclose(ta[2], tb[2], abs_tol=1e-6):
                change = "better" if tb[2] > ta[2] else "worse"
            else:
                change = "same"
        out.append(
            TaskDelta(
                tid,
                ta[:3] if ta else None,
                tb[:3] if tb else None,
                change,
                ta[3] if ta else None,
                tb[3] if tb else None,
            )
        )

    def size(d: TaskDelta) -> tuple[int, float, float, str]:
        rank = {"worse": 0, "better": 1, "only-a": 2, "only-b": 3, "same": 4}[d.change]
        if d.a and d.b:
            return rank, -abs(d.b[1] / d.b[0] - d.a[1] / d.a[0]), -abs(d.b[2] - d.a[2]), d.task_id
        return rank, 0.0, 0.0, d.task_id

    return tuple(sorted(out, key=size))


# -- training runs ------------------------------------------------------------------------------------------------
def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


_ENV = ("env/all/", "test/env/all/")  # training batches, and the test split when `--eval-every` ran it


def _stage_rate(k: str, keys: Sequence[str]) -> bool:
    """Per-stage pass rates (`stage/<name>/passed`; the score where a run logs no pass rate) and the verdict."""
    if not k.startswith(_ENV):
        return False
    if k.endswith(("/all/passed", "/syntax_valid")):
        return True
    if "/stage/" in k and k.endswith("/passed"):
        return True
    return "/stage/" in k and k.endswith("/score") and k[: -len("score")] + "passed" not in keys


TRAINING_GROUPS: tuple[tuple[str, Any], ...] = (
    ("reward", lambda k, keys: k.startswith(_ENV) and k.endswith(("/reward/total", "/reward/max_total"))),
    ("stage rates", _stage_rate),
    ("KL", lambda k, keys: k.startswith("teacher_kl") or k.startswith("optim/kl") or "kl_policy" in k),
    ("entropy", lambda k, keys: k.endswith("entropy")),
    ("tokens", lambda k, keys: k.startswith(_ENV) and k.endswith(("tokens_per_turn", "total_ac_tokens"))),
    ("time per step", lambda k, keys: k == "time/total"),
)


def training_view(run: Run) -> TrainingView:
    """Metric series over steps. A row's step is its `step` (or `progress/batch`), else its position; rows without
    a batch index (0.6.1's final token count) are left out when the others have one."""
    rows = list(run.steps)
    if any("progress/batch" in r or "step" in r for r in rows):
        rows = [r for r in rows if "progress/batch" in r or "step" in r]
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    groups: dict[str, tuple[Series, ...]] = {}
    for title, pred in TRAINING_GROUPS:
        series = []
        for k in keys:
            if not pred(k, keys):
                continue
            pts = []
            for i, r in enumerate(rows):
                v = _num(r.get(k))
                step = _num(r.get("step", r.get("progress/batch", i)))
                if v is not None:
                    pts.append((step if step is not None else float(i), v))
            if pts:
                series.append(Series(k, tuple(pts)))
        if title == "time per step" and not series:  # no total: the largest few timers
            timers = [
                k for k in keys if k.startswith("time/") and not k.endswith((":count", ":mean", ":max"))
            ]
            for k in timers[:5]:
                pts = [
                    (float(_num(r.get("step", i)) or i), v)
                    for i, r in enumerate(rows)
                    if (v := _num(r.get(k))) is not None
                ]
                if pts:
                    series.append(Series(k, tuple(pts)))
        if series:
            groups[title] = tuple(series)
    return TrainingView(run=run, groups=groups)


def build_report(
    runs: Sequence[Run],
    tasks: Mapping[str, Task] | None = None,
    *,
    title: str = "rtlreward report",
    ks: Iterable[int] = DEFAULT_KS,
    max_samples: int = 200,
) -> Report:
    results = tuple(
        results_view(r, tasks, ks=ks, max_samples=max_samples) for r in runs if r.kind == "results"
    )
    training = tuple(training_view(r) for r in runs if r.kind == "training")
    deltas = labels = None
    if len(results) == 2:
        deltas = compare(results[0], results[1])
        labels = (results[0].run.label, results[1].run.label)
    return Report(
        title=title,
        results=results,
        training=training,
        compare=deltas,
        compare_labels=labels,
        with_tasks=tasks is not None,
    )
