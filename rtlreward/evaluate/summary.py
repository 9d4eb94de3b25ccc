"""What a bulk evaluation amounts to: the Summary of a results file (pass rates, pass@k, per category and per
stage), and its rendering as rich tables."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from rtlreward.model import Task
from rtlreward.passk import DEFAULT_KS, aggregate


@attrs.frozen
class Summary:
    """What a run (including earlier runs into the same file) amounts to."""

    tasks: int  # tasks in the dataset selection
    results: int  # result rows for these tasks (this run + resumed)
    scored: int  # scored by this run
    resumed: int  # already in the results file, not scored again
    unknown_ids: int  # completions whose id is outside the selection (not in the dataset, or filtered out)
    bad_lines: int  # completions lines that could not be used
    duplicates: int  # (id, sample) given twice in the completions
    errors: int  # completions the engine failed on (not written: a rerun retries them)
    tasks_without_results: int
    mean_reward: float | None
    pass_rate: float | None  # passed samples / samples
    categories: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    passk: dict[str, dict[int, tuple[float | None, int]]] = attrs.field(factory=dict)
    stages: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    duration: float = 0.0
    out_path: str | None = None
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["passk"] = {
            kind: {str(k): {"value": v, "problems": n} for k, (v, n) in ks.items()}
            for kind, ks in self.passk.items()
        }
        return d


def summarize(
    tasks: Sequence[Task] | Mapping[str, Task],
    rows: Iterable[Mapping[str, Any]],
    ks: Iterable[int] = DEFAULT_KS,
    **counts: Any,
) -> Summary:
    """Fold result rows into a Summary (rows for ids outside `tasks` are ignored)."""
    by_id = tasks if isinstance(tasks, Mapping) else {t.id: t for t in tasks}
    seen: dict[tuple[str, int], Mapping[str, Any]] = {}
    for r in rows:
        if r.get("id") in by_id:
            seen[(r["id"], int(r["sample"]))] = r  # a repeated pair counts once (the latest)
    per_task: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for (tid, _), r in seen.items():
        per_task[tid].append(r)
    rows_ = list(seen.values())
    cats: dict[str, dict[str, Any]] = {}
    by_cat: dict[str, list[str]] = defaultdict(list)
    for tid in per_task:
        by_cat[by_id[tid].category or "-"].append(tid)
    for cat, tids in sorted(by_cat.items()):
        rs = [r for t in tids for r in per_task[t]]
        pk = aggregate(
            {t: (len(per_task[t]), sum(bool(r["passed"]) for r in per_task[t])) for t in tids}, ks=(1,)
        )
        cats[cat] = {
            "tasks": len(tids),
            "samples": len(rs),
            "passed": sum(bool(r["passed"]) for r in rs),
            "pass_rate": sum(bool(r["passed"]) for r in rs) / len(rs),
            "pass@1": pk["unbiased"][1][0],
            "tasks_solved": sum(any(bool(r["passed"]) for r in per_task[t]) for t in tids),
            "mean_reward": sum(float(r.get("reward", 0.0)) for r in rs) / len(rs),
        }
    stages: dict[str, dict[str, Any]] = {}
    for r in rows_:
        for name, st in (r.get("stages") or {}).items():
            s = stages.setdefault(
                name, {"count": 0, "passed": 0, "skipped": 0, "timeout": 0, "error": 0, "score_sum": 0.0}
            )
            s["count"] += 1
            s["passed"] += st.get("status") == "passed"
            s["skipped"] += st.get("status") == "skipped"
            s["timeout"] += st.get("status") == "timeout"
            s["error"] += st.get("status") == "error"
            if st.get("status") != "skipped":
                s["score_sum"] += float(st.get("score") or 0.0)
    for s in stages.values():
        # `ran`, the pass rate and the mean score count the replies the stage ran on, not the ones it skipped
        # (a failed format skips safety): the same figures as the report's stage funnel. `count`: every row.
        s["ran"] = s["count"] - s["skipped"]
        s["pass_rate"] = s["passed"] / s["ran"] if s["ran"] else 0.0
        s["mean_score"] = s.pop("score_sum") / s["ran"] if s["ran"] else 0.0
    passk = aggregate({t: (len(rs), sum(bool(r["passed"]) for r in rs)) for t, rs in per_task.items()}, ks=ks)
    n = len(rows_)
    return Summary(
        tasks=len(by_id),
        results=n,
        tasks_without_results=len(by_id) - len(per_task),
        mean_reward=(sum(float(r.get("reward", 0.0)) for r in rows_) / n) if n else None,
        pass_rate=(sum(bool(r["passed"]) for r in rows_) / n) if n else None,
        categories=cats,
        passk=passk,
        stages=stages,
        scored=counts.pop("scored", 0),
        resumed=counts.pop("resumed", 0),
        unknown_ids=counts.pop("unknown_ids", 0),
        bad_lines=counts.pop("bad_lines", 0),
        duplicates=counts.pop("duplicates", 0),
        errors=counts.pop("errors", 0),
        **counts,
    )


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def render_summary(summary: Summary, console: Any = None) -> None:
    """Rich tables: per category, pass@k (both kinds), per stage, and the bookkeeping line."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title="Results by category", title_justify="left")
    for col in ("category", "tasks", "samples", "passed", "pass rate", "pass@1", "solved", "mean reward"):
        t.add_column(col, justify="left" if col == "category" else "right")
    for cat, c in summary.categories.items():
        t.add_row(
            cat,
            str(c["tasks"]),
            str(c["samples"]),
            str(c["passed"]),
            _pct(c["pass_rate"]),
            _pct(c["pass@1"]),
            f"{c['tasks_solved']}/{c['tasks']}",
            f"{c['mean_reward']:.3f}",
        )
    if summary.categories:
        total_passed = sum(c["passed"] for c in summary.categories.values())
        solved = sum(c["tasks_solved"] for c in summary.categories.values())
        ntasks = sum(c["tasks"] for c in summary.categories.values())
        p1 = summary.passk.get("unbiased", {}).get(1, (None, 0))[0]
        t.add_row(
            "all",
            str(ntasks),
            str(summary.results),
            str(total_passed),
            _pct(summary.pass_rate),
            _pct(p1),
            f"{solved}/{ntasks}",
            "-" if summary.mean_reward is None else f"{summary.mean_reward:.3f}",
            style="bold",
        )
    console.print(t)

    pk = Table(title="pass@k", title_justify="left")
    pk.add_column("k", justify="right")
    pk.add_column("unbiased 1-C(n-c,k)/C(n,k)", justify="right")
    pk.add_column("problems (n>=k)", justify="right")
    pk.add_column("benchmark 1-(1-c/n)^k", justify="right")
    for k, (v, n) in summary.passk.get("unbiased", {}).items():
        b = summary.passk.get("benchmark", {}).get(k, (None, 0))[0]
        pk.add_row(str(k), _pct(v) if v is not None else "n/a (n<k)", str(n), _pct(b))
    console.print(pk)

    if summary.stages:
        st = Table(title="Stages", title_justify="left")
        for col in ("stage", "ran", "passed", "pass rate", "skipped", "timeout", "error", "mean score"):
            st.add_column(col, justify="left" if col == "stage" else "right")
        for name, s in summary.stages.items():
            st.add_row(
                name,
                str(s["ran"]),
                str(s["passed"]),
                _pct(s["pass_rate"]),
                str(s["skipped"]),
                str(s["timeout"]),
                str(s["error"]),
                f"{s['mean_score']:.3f}",
            )
        console.print(st)
    bits = [
        f"{summary.results} results for {summary.tasks} tasks",
        f"{summary.scored} scored now",
        f"{summary.resumed} already done (resumed)",
    ]
    for label, n in (
        ("ids outside the selection skipped", summary.unknown_ids),
        ("bad lines skipped", summary.bad_lines),
        ("duplicates skipped", summary.duplicates),
        ("engine errors (rerun to retry)", summary.errors),
        ("tasks with no result", summary.tasks_without_results),
    ):
        if n:
            bits.append(f"{n} {label}")
    bits.append(f"{summary.duration:.1f} s")
    console.print("; ".join(bits) + (f"\nresults: {summary.out_path}" if summary.out_path else ""))
