"""The report as Markdown: the same sections as the HTML page, as tables (no plots).

Text from a results file is escaped for Markdown and for the HTML a Markdown renderer lets through: `<`, `>` and
`&` become entities, and the characters that make links, images, emphasis, code or table cells (`[ ] ( ) * _ `
| \\`) are backslash-escaped, so a hostile task id cannot become a link or break a table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from rtlreward.version import __version__
from rtlreward_report.analysis import (
    FUNNEL_COLUMNS,
    FUNNEL_NUMERIC,
    Report,
    ResultsView,
    Series,
    consequences_note,
    no_groups_note,
    split_causes,
)
from rtlreward_report.html import MAX_TEXT, SECTIONS, _bins, num, pct, sections_for
from rtlreward_report.interface import PortInfo

__all__ = ["md", "render_markdown"]

_SPECIAL = re.compile(r"([\\`*_\[\]()|#!~{}])")


def md(value: Any, limit: int = 300) -> str:
    """One table cell or line of text: single line, escaped, cut."""
    text = " ".join(("" if value is None else str(value)).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(r"\\\1", text)


def table(head: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """Cells are escaped already (by the caller); the header is escaped here."""
    rows = list(rows)
    if not rows:
        return ""
    h = "| " + " | ".join(md(x) for x in head) + " |"
    sep = "|" + "|".join("---:" if i in numeric else "---" for i in range(len(head))) + "|"
    return "\n".join([h, sep, *("| " + " | ".join(r) + " |" for r in rows)]) + "\n"


def anchor(run: int, index: int) -> str:
    return f"r{run}-s{index}"


def _port(p: PortInfo | None) -> str:
    if p is None:
        return "-"
    d = f"{md(p.direction)} " if p.direction and p.direction != "unknown" else ""
    w = f"\\[{p.width}\\]" if p.width is not None else ""
    return f"{d}{md(p.name)}{w}"


def _multi(views: Sequence[ResultsView], v: ResultsView) -> str:
    return f"### {md(v.run.label)}\n\n" if len(views) > 1 else ""


def _overview(r: Report) -> str:
    out = []
    for v in r.results:
        o = v.overview
        out.append(_multi(r.results, v))
        p1 = v.passk.get("unbiased", {}).get(1, (None, 0))[0]
        top = f" of {num(o['max_total'], 2)}" if o["max_total"] else ""
        out.append(
            table(
                ["measure", "value"],
                [
                    ["pass@1", pct(p1)],
                    ["replies passed", f"{pct(o['pass_rate'])} ({o['passed']}/{o['samples']})"],
                    ["tasks solved by any sample", f"{o['tasks_solved']}/{o['tasks']}"],
                    ["mean reward", num(o["mean_reward"]) + top],
                    ["mean reward / max", pct(o["mean_normalized"])],
                ],
            )
        )
        rows = []
        for k, (val, n) in v.passk.get("unbiased", {}).items():
            b = v.passk.get("benchmark", {}).get(k, (None, 0))[0]
            rows.append([str(k), pct(val) if val is not None else md("n/a (n<k)"), str(n), pct(b)])
        out.append(
            "\n"
            + table(["k", "pass@k unbiased", "tasks with n>=k", "benchmark 1-(1-c/n)^k"], rows, (0, 1, 2, 3))
        )
        out += [f"\n_{md(n)}_\n" for n in v.notes]
    for t in r.training:
        out.append(f"\nTraining run {md(t.run.label)}: {len(t.run.steps)} logged steps.\n")
    return "\n".join(x for x in out if x)


def _funnel(r: Report) -> str:
    out = [
        "How many replies passed each stage, in the order the engine runs them; *passed all so far* counts "
        "replies that passed that stage and every stage before it. *p50 s* / *p95 s*: the stage's wall time per "
        "reply that ran it (results from the cache left out); *time*: its share of all stages' time.\n"
    ]
    for v in r.results:
        out.append(_multi(r.results, v))
        rows = [
            [
                md(f.stage),
                str(f.ran),
                str(f.passed),
                pct(f.passed / f.ran if f.ran else None),
                str(f.through),
                md(", ".join(f"{k} {n}" for k, n in sorted(f.status.items()) if k != "passed") or "-"),
                num(f.mean_score),
                _secs(f.p50_s),
                _secs(f.p95_s),
                pct(f.share),
            ]
            for f in v.funnel
        ]
        out.append(
            table(
                list(FUNNEL_COLUMNS),
                rows,
                FUNNEL_NUMERIC,
            )
        )
    return "\n".join(x for x in out if x)


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _rewards(r: Report) -> str:
    top = max((v.overview["max_total"] or 0 for v in r.results), default=0) or None
    out = []
    for v in r.results:
        out.append(_multi(r.results, v))
        out.append(
            table(
                ["reward", "replies"],
                [[md(b), str(n)] for b, n in _bins([s.reward for s in v.samples], top)],
                (1,),
            )
        )
    return "\n".join(x for x in out if x)


def _groups(r: Report, attr: str, what: str) -> str:
    out = []
    for v in r.results:
        gs = getattr(v, attr)
        out.append(_multi(r.results, v))
        if not gs:
            out.append(md(no_groups_note(r, what)) + "\n")
            continue
        out.append(
            table(
                [what, "tasks", "samples", "passed", "pass rate", "pass@1", "mean reward", "reward / max"],
                [
                    [
                        md(g.name),
                        str(g.tasks),
                        str(g.samples),
                        str(g.passed),
                        pct(g.pass_rate),
                        pct(g.pass_at_1),
                        num(g.mean_reward),
                        pct(g.mean_normalized),
                    ]
                    for g in gs
                ],
                (1, 2, 3, 4, 5, 6, 7),
            )
        )
    return "\n".join(x for x in out if x)


def _failures(r: Report) -> str:
    out = [
        "Failing replies grouped by diagnostic code, and for interface problems by port; *first failure* counts "
        "the replies where this is the earliest failing stage.\n"
    ]
    for ri, v in enumerate(r.results):
        out.append(_multi(r.results, v))
        if not v.causes:
            out.append("No failing replies.\n")
            continue
        by = {s.index: s for s in v.samples}
        causes, consequences = split_causes(v.causes)
        rows = []
        for i, c in enumerate(causes[:30], 1):
            label = md(c.label) + (" (from the replies)" if c.derived else "")
            if not c.subjects and not c.code.startswith("status:") and c.example and c.example != c.label:
                label += f" (e.g. {md(c.example, 120)})"
            ex = ", ".join(
                f"[{md(by[j].task_id, 60)} \\#{by[j].sample}](#{anchor(ri, j)})" for j in c.samples[:3]
            )
            rows.append(
                [
                    str(i),
                    label,
                    md(c.stage),
                    md(c.code) or "-",
                    str(c.first),
                    str(len(c.samples)),
                    str(c.tasks),
                    ex,
                ]
            )
        out.append(
            table(
                ["#", "cause", "stage", "code", "first failure", "replies", "tasks", "examples"],
                rows,
                (0, 4, 5, 6),
            )
        )
        if consequences:
            out.append(md(consequences_note(consequences)) + "\n")
    return "\n".join(x for x in out if x)


def _interfaces(r: Report) -> str:
    out = []
    for ri, v in enumerate(r.results):
        out.append(_multi(r.results, v))
        if not v.interfaces:
            out.append(
                "No interface information for the failing tasks (pass `--dataset` and `--completions`, or "
                "results rows with interface diagnostics).\n"
                if v.failing_tasks
                else "No failing tasks.\n"
            )
            continue
        for iv in v.interfaces:
            src = f"expected from {iv.expected_from or '?'}, generated from {iv.generated_from or '?'}"
            if iv.partial:
                src += "; only the ports the diagnostics name"
            out.append(
                f"#### {md(iv.task_id)} ([sample](#{anchor(ri, iv.sample_index)}); module "
                f"{md(iv.module or '?')})\n\n{md(src)}" + (f"; {md(iv.note)}" if iv.note else "") + "\n"
            )
            out.append(
                table(
                    ["expected", "generated", "status", "detail"],
                    [[_port(x.expected), _port(x.generated), md(x.status), md(x.detail)] for x in iv.rows],
                )
            )
    return "\n".join(x for x in out if x)


def _every(series: Sequence[Series], limit: int = 50) -> list[list[str]]:
    steps = sorted({p[0] for s in series for p in s.points})
    if len(steps) > limit:
        stride = (len(steps) - 1) / (limit - 1)
        steps = sorted({steps[round(i * stride)] for i in range(limit)})
    by = [{x: y for x, y in s.points} for s in series]
    return [[f"{st:g}", *(f"{b[st]:.4g}" if st in b else "-" for b in by)] for st in steps]


def _training(r: Report) -> str:
    out = []
    for t in r.training:
        out.append(f"### {md(t.run.label)}\n")
        if not t.groups:
            out.append("No known metric in this metrics.jsonl.\n")
            continue
        rows = []
        for title, series in t.groups.items():
            for s in series:
                vals = s.values
                rows.append(
                    [
                        md(title),
                        md(s.key),
                        str(len(vals)),
                        f"{vals[0]:.4g}",
                        f"{vals[-1]:.4g}",
                        f"{min(vals):.4g}",
                        f"{max(vals):.4g}",
                    ]
                )
        out.append(table(["group", "metric", "steps", "first", "last", "min", "max"], rows, (2, 3, 4, 5, 6)))
        for title, series in t.groups.items():
            out.append(f"#### {md(title)} per step\n")
            out.append(
                table(["step", *(s.key for s in series)], _every(series), tuple(range(len(series) + 1)))
            )
    return "\n".join(x for x in out if x)


def _compare(r: Report) -> str:
    assert r.compare is not None and r.compare_labels is not None
    a, b = r.compare_labels
    out = [f"Per task, {md(b)} against {md(a)}: pass rate first, mean reward when the pass rate is equal.\n"]
    for kind, title in (
        ("worse", "Worse"),
        ("better", "Better"),
        ("only-a", f"Only in {a}"),
        ("only-b", f"Only in {b}"),
    ):
        ds = [d for d in r.compare if d.change == kind]
        if not ds:
            continue
        out.append(f"### {md(title)} ({len(ds)})\n")
        rows = [
            [
                md(d.task_id),
                f"{d.a[1]}/{d.a[0]}" if d.a else "-",
                f"{d.b[1]}/{d.b[0]}" if d.b else "-",
                f"{d.a[2]:.3f}" if d.a else "-",
                f"{d.b[2]:.3f}" if d.b else "-",
            ]
            for d in ds[:100]
        ]
        out.append(
            table(
                ["task", f"passed ({a})", f"passed ({b})", f"mean reward ({a})", f"mean reward ({b})"],
                rows,
                (1, 2, 3, 4),
            )
        )
    same = sum(d.change == "same" for d in r.compare)
    out.append(f"{same} task(s) unchanged.\n")
    return "\n".join(out)


def _samples(r: Report) -> str:
    out = []
    for ri, v in enumerate(r.results):
        out.append(_multi(r.results, v))
        detailed = set(v.detailed)
        for s in v.samples:
            if s.index not in detailed:
                continue
            out.append(
                f'<a id="{anchor(ri, s.index)}"></a>\n\n#### {md(s.task_id)} \\#{s.sample}: '
                f"{'passed' if s.passed else 'failed'}, reward {num(s.reward)}\n"
            )
            rows = []
            for name, st in s.stages.items():
                diags = "; ".join(
                    (f"{md(f.code)}: " if f.code else "")
                    + md(f.message, 200)
                    + (" (from reply)" if f.derived else "")
                    for f in st.diagnostics[:6]
                )
                rows.append([md(name), md(st.status), num(st.score, 2), diags])
            out.append(table(["stage", "status", "score", "diagnostics"], rows, (2,)))
    return "\n".join(x for x in out if x)


def _settings(r: Report) -> str:
    rows = [
        [md(v.run.label), "results", md(v.run.path), md(v.run.producer or "-"), str(len(v.samples))]
        for v in r.results
    ]
    rows += [[md(t.run.label), "training", md(t.run.path), "-", str(len(t.run.steps))] for t in r.training]
    out = [table(["run", "kind", "file", "model and sampler", "rows"], rows, (4,))]
    for v in r.results:
        if v.run.settings:
            out.append(f"### {md(v.run.label)}: settings recorded in the rows\n")
            out.append(
                table(
                    ["setting", "value"],
                    [
                        [
                            md(k),
                            md(
                                val
                                if isinstance(val, str)
                                else json.dumps(val, ensure_ascii=False, default=str),
                                MAX_TEXT // 4,
                            ),
                        ]
                        for k, val in v.run.settings.items()
                    ],
                )
            )
    return "\n".join(out)


def render_markdown(report: Report) -> str:
    titles = dict(SECTIONS)
    parts = [f"# {md(report.title)}\n"]
    runs = [
        f"{md(v.run.label)} ({len(v.samples)} results{'; ' + md(v.run.producer) if v.run.producer else ''})"
        for v in report.results
    ]
    runs += [f"{md(t.run.label)} (training, {len(t.run.steps)} steps)" for t in report.training]
    parts.append("Runs: " + ", ".join(runs) + "\n")
    for sid, _ in sections_for(report):
        if sid == "categories":
            content = _groups(report, "categories", "category")
        elif sid == "difficulties":
            content = _groups(report, "difficulties", "difficulty")
        else:
            content = globals()[f"_{sid}"](report)
        parts.append(f"## {titles[sid]}\n\n{content.strip()}\n")
    parts.append(f"_rtlreward {md(__version__)}_\n")
    return "\n".join(parts)
