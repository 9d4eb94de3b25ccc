"""The report as one self-contained HTML page: inline CSS, inline SVG plots, no script, nothing fetched.

Everything that comes from a results file (task ids, categories, replies, diagnostics, settings) is hostile text:
it passes through `e()` (html.escape with quotes) before it reaches the page, never into a tag, an attribute
name, a class or an id (anchors use the sample's position; status classes come from a fixed list). The page
also forbids scripts and remote loads in its Content-Security-Policy, so a mistake here would show as a blocked
action in the console (which the browser test checks) instead of running.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any

from rtlreward.version import __version__
from rtlreward_report.analysis import (
    FUNNEL_COLUMNS,
    FUNNEL_NUMERIC,
    Cause,
    Report,
    ResultsView,
    TaskDelta,
    consequences_note,
    no_groups_note,
    split_causes,
)
from rtlreward_report.interface import InterfaceView, PortInfo
from rtlreward_report.plots import Plotter
from rtlreward_report.runs import Sample

__all__ = ["SECTIONS", "render_html", "sections_for"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
STATUS_CLASSES = {
    "passed",
    "failed",
    "skipped",
    "error",
    "timeout",
    "ok",
    "missing",
    "renamed",
    "mismatch",
    "extra",
    "better",
    "worse",
    "same",
    "only-a",
    "only-b",
}
MAX_REPLY = 20_000
MAX_TEXT = 2_000
SECTIONS = (
    ("overview", "Overview"),
    ("funnel", "Stage funnel"),
    ("rewards", "Rewards"),
    ("categories", "By category"),
    ("difficulties", "By difficulty"),
    ("failures", "Top failure causes"),
    ("interfaces", "Interfaces of failing tasks"),
    ("training", "Training"),
    ("compare", "Run against run"),
    ("samples", "Failing samples"),
    ("settings", "Runs and settings"),
)

CSS = """
:root{--fg:#1d2430;--muted:#5d6b7e;--line:#dfe3ea;--bg:#f6f7f9;--card:#fff;--ok:#2f7d4f;--bad:#b3363f;
--warn:#a86a12;--skip:#7a8594;--accent:#3b6ea8}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
color:var(--fg);background:var(--bg)}
header{background:#1f2a3a;color:#fff;padding:18px 28px 14px}
header h1{margin:0 0 4px;font-size:21px;font-weight:650}
header .sub{color:#c2ccd9;font-size:12.5px;margin:0}
nav{position:sticky;top:0;z-index:2;background:#fff;border-bottom:1px solid var(--line);padding:7px 28px;
font-size:12.5px;white-space:nowrap;overflow-x:auto}
nav a{margin-right:14px;color:var(--accent);text-decoration:none}
main{max-width:1180px;margin:0 auto;padding:12px 28px 40px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;margin:16px 0;padding:14px 18px}
h2{font-size:17px;margin:2px 0 10px}
h3{font-size:14px;margin:16px 0 6px}
p.note,.muted{color:var(--muted);font-size:12.5px}
table{border-collapse:collapse;margin:6px 0 10px;font-size:12.5px}
th,td{border-bottom:1px solid var(--line);padding:4px 10px 4px 0;text-align:left;vertical-align:top}
th{font-weight:600;color:#3a4556;white-space:nowrap}
td.num,th.num{text-align:right;padding-left:10px;font-variant-numeric:tabular-nums}
.kpis{display:flex;flex-wrap:wrap;gap:10px;margin:4px 0 12px}
.kpi{border:1px solid var(--line);border-radius:6px;padding:8px 14px;min-width:130px;background:#fbfcfd}
.kpi b{display:block;font-size:20px;font-weight:650}
.kpi span{color:var(--muted);font-size:11.5px}
svg.plot{width:100%;max-width:760px;height:auto;display:block;margin:6px 0}
.row{display:flex;flex-wrap:wrap;gap:4px 24px;align-items:flex-start}
.row>div{flex:1 1 340px;min-width:0}
.row>div.t{flex:0 1 auto;overflow-x:auto}
.st{display:inline-block;padding:0 6px;border-radius:9px;font-size:11.5px;font-weight:600;background:#eef0f3;
color:var(--skip)}
.st-passed,.st-ok,.st-better{background:#e3f3e8;color:var(--ok)}
.st-failed,.st-missing,.st-worse,.st-error{background:#f8e3e4;color:var(--bad)}
.st-timeout,.st-renamed,.st-mismatch,.st-extra{background:#fbf0dc;color:var(--warn)}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f4f5f7;border:1px solid var(--line);border-radius:5px;padding:8px 10px;overflow-x:auto;
white-space:pre-wrap;word-break:break-word;max-height:420px}
article{border-top:1px solid var(--line);padding:10px 0 4px}
article h3{margin:0 0 6px}
.side{display:grid;grid-template-columns:1fr;gap:6px}
.cause{font-weight:600}
ul.diag{margin:4px 0 8px 18px;padding:0;font-size:12.5px}
details summary{cursor:pointer;color:var(--accent);font-size:12.5px}
.derived{color:var(--warn);font-size:11px;font-weight:600}
footer{color:var(--muted);font-size:11.5px;text-align:center;padding:8px 0 24px}
"""


def e(value: Any) -> str:
    """Every piece of data on the page goes through here."""
    return html.escape("" if value is None else str(value), quote=True)


def _cut(text: str, n: int = MAX_TEXT) -> str:
    return text if len(text) <= n else text[:n] + f"\n… ({len(text) - n} more characters)"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def badge(status: str) -> str:
    cls = status if status in STATUS_CLASSES else "other"
    return f'<span class="st st-{cls}">{e(status)}</span>'


def anchor(run: int, index: int) -> str:
    return f"r{run}-s{index}"


def table(head: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """`rows` cells are HTML already (escaped by the caller); `head` is escaped here."""
    th = "".join(
        f'<th class="num">{e(h)}</th>' if i in numeric else f"<th>{e(h)}</th>" for i, h in enumerate(head)
    )
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def sections_for(report: Report) -> list[tuple[str, str]]:
    """The sections this report has: the results ones when it has a results run, training when it has a
    training run, the comparison when it has two results runs."""
    out = []
    for sid, title in SECTIONS:
        if sid == "training" and not report.training:
            continue
        if sid == "compare" and report.compare is None:
            continue
        if sid not in ("training", "settings") and not report.results and sid != "compare":
            continue
        out.append((sid, title))
    return out


class _Page:
    def __init__(self, report: Report, plots: Plotter | None, plot_note: str) -> None:
        self.r = report
        self.plots = plots
        self.plot_note = plot_note

    def plot(self, fn: str, *args: Any) -> str:
        if self.plots is None:
            return f'<p class="note">{e(self.plot_note)}</p>' if self.plot_note else ""
        return getattr(self.plots, fn)(*args)

    # -- sections -------------------------------------------------------------------------------------------------
    def overview(self) -> str:
        parts = []
        for v in self.r.results:
            o = v.overview
            top = f" of {num(o['max_total'], 2)}" if o["max_total"] else ""
            p1 = v.passk.get("unbiased", {}).get(1, (None, 0))[0]
            parts.append(f"<h3>{e(v.run.label)}</h3>" if len(self.r.results) > 1 else "")
            kpis = [
                (pct(p1), "pass@1"),
                (pct(o["pass_rate"]), f"replies passed ({o['passed']}/{o['samples']})"),
                (f"{o['tasks_solved']}/{o['tasks']}", "tasks solved by any sample"),
                (num(o["mean_reward"]) + top, "mean reward"),
                (pct(o["mean_normalized"]), "mean reward / max"),
            ]
            parts.append(
                '<div class="kpis">'
                + "".join(f'<div class="kpi"><b>{e(a)}</b><span>{e(b)}</span></div>' for a, b in kpis)
                + "</div>"
            )
            rows = []
            for k, (val, n) in v.passk.get("unbiased", {}).items():
                b = v.passk.get("benchmark", {}).get(k, (None, 0))[0]
                rows.append([e(k), e(pct(val) if val is not None else "n/a (n<k)"), e(n), e(pct(b))])
            parts.append(
                table(
                    ["k", "pass@k unbiased 1-C(n-c,k)/C(n,k)", "tasks with n≥k", "benchmark 1-(1-c/n)^k"],
                    rows,
                    (0, 1, 2, 3),
                )
            )
            for note in v.notes:
                parts.append(f'<p class="note">{e(note)}</p>')
        for t in self.r.training:
            parts.append(
                f"<p>Training run <b>{e(t.run.label)}</b>: {len(t.run.steps)} logged steps; see "
                '<a href="#training">Training</a>.</p>'
            )
        return "".join(parts)

    def funnel(self) -> str:
        stages: list[str] = []
        for v in self.r.results:
            stages += [f.stage for f in v.funnel if f.stage not in stages]
        runs = []
        for v in self.r.results:
            by = {f.stage: f for f in v.funnel}
            runs.append(
                (
                    v.run.label,
                    [by[s].through if s in by else 0 for s in stages],
                    [by[s].passed if s in by else 0 for s in stages],
                    v.overview["samples"],
                )
            )
        out = [
            '<p class="note">How many replies passed each stage, in the order the engine runs them; the dark '
            "bar counts replies that passed that stage and every stage before it."
            + (
                " Runs are compared as shares of each run's replies (the count in brackets), so runs of "
                "different sizes compare fairly."
                if len(self.r.results) > 1
                else ""
            )
            + "</p>"
        ]
        out.append('<div class="row">')
        if stages:
            out.append(f"<div>{self.plot('funnel', stages, runs)}</div>")
        out.append('<div class="t">')
        for v in self.r.results:
            if len(self.r.results) > 1:
                out.append(f"<h3>{e(v.run.label)}</h3>")
            rows = [
                [
                    e(f.stage),
                    e(f.ran),
                    e(f.passed),
                    e(pct(f.passed / f.ran if f.ran else None)),
                    e(f.through),
                    e(", ".join(f"{k} {n}" for k, n in sorted(f.status.items()) if k != "passed") or "-"),
                    e(num(f.mean_score)),
                    e("-" if f.p50_s is None else f"{f.p50_s:.3f}"),
                    e("-" if f.p95_s is None else f"{f.p95_s:.3f}"),
                    e(pct(f.share)),
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
        out.append("</div></div>")
        return "".join(out)

    def rewards(self) -> str:
        top = max((v.overview["max_total"] or 0 for v in self.r.results), default=0) or None
        runs = [(v.run.label, [s.reward for s in v.samples]) for v in self.r.results]
        out = ['<div class="row"><div>', self.plot("histogram", runs, top, "reward")]
        stages: list[str] = []
        for v in self.r.results:
            stages += [f.stage for f in v.funnel if f.stage not in stages and f.ran]
        if stages:
            per = [
                (
                    v.run.label,
                    {
                        st: [
                            s.stages[st].score
                            for s in v.samples
                            if st in s.stages and s.stages[st].status != "skipped"
                        ]
                        for st in stages
                    },
                )
                for v in self.r.results
            ]
            out.append("</div><div><h3>Stage scores (replies that ran the stage)</h3>")
            out.append(self.plot("stage_scores", stages, per))
        out.append("</div></div>")
        for v in self.r.results:
            hist = _bins([s.reward for s in v.samples], top)
            label = f"{v.run.label}: reward" if len(self.r.results) > 1 else "reward"
            out.append(f"<details><summary>{e(label)} distribution as a table</summary>")
            out.append(table(["reward", "replies"], [[e(b), e(n)] for b, n in hist], (1,)) + "</details>")
        return "".join(out)

    def groups(self, attr: str, what: str) -> str:
        views = [(v.run.label, getattr(v, attr)) for v in self.r.results]
        names: list[str] = []
        for _, gs in views:
            names += [g.name for g in gs if g.name not in names]
        if not names:
            return f'<p class="note">{e(no_groups_note(self.r, what))}</p>'
        out = [
            '<div class="row"><div>',
            self.plot(
                "bars",
                names,
                [
                    (label, [next((g.pass_rate for g in gs if g.name == n), None) for n in names])
                    for label, gs in views
                ],
                f"replies passed, by {what}",
            ),
            '</div><div class="t">',
        ]
        for label, gs in views:
            if len(views) > 1:
                out.append(f"<h3>{e(label)}</h3>")
            rows = [
                [
                    e(g.name),
                    e(g.tasks),
                    e(g.samples),
                    e(g.passed),
                    e(pct(g.pass_rate)),
                    e(pct(g.pass_at_1)),
                    e(num(g.mean_reward)),
                    e(pct(g.mean_normalized)),
                ]
                for g in gs
            ]
            out.append(
                table(
                    [
                        what,
                        "tasks",
                        "samples",
                        "passed",
                        "pass rate",
                        "pass@1",
                        "mean reward",
                        "reward / max",
                    ],
                    rows,
                    (1, 2, 3, 4, 5, 6, 7),
                )
            )
        out.append("</div></div>")
        return "".join(out)

    def failures(self) -> str:
        out = [
            '<p class="note">Failing replies grouped by what their failing stages report: the diagnostic code, '
            "and for interface problems the port (ports that always fail together are one cause). "
            "“First failure” counts the replies where this is the earliest failing stage; later stages failing "
            "because of it are consequences.</p>"
        ]
        for ri, v in enumerate(self.r.results):
            if len(self.r.results) > 1:
                out.append(f"<h3>{e(v.run.label)}</h3>")
            if not v.causes:
                out.append('<p class="note">No failing replies.</p>')
                continue
            causes, consequences = split_causes(v.causes)
            rows = []
            for i, c in enumerate(causes[:30], 1):
                rows.append(
                    [
                        e(i),
                        _cause_cell(c),
                        e(c.stage),
                        f"<code>{e(c.code)}</code>" if c.code else "-",
                        e(c.first),
                        e(len(c.samples)),
                        e(c.tasks),
                        _examples(ri, v, c),
                    ]
                )
            out.append(
                table(
                    ["#", "cause", "stage", "code", "first failure", "replies", "tasks", "examples"],
                    rows,
                    (0, 4, 5, 6),
                )
            )
            if len(causes) > 30:
                out.append(f'<p class="note">{len(causes) - 30} rarer causes not shown.</p>')
            if consequences:
                out.append(f'<p class="note">{e(consequences_note(consequences))}</p>')
        return "".join(out)

    def interfaces(self) -> str:
        out = []
        for ri, v in enumerate(self.r.results):
            if len(self.r.results) > 1:
                out.append(f"<h3>{e(v.run.label)}</h3>")
            if not v.interfaces:
                out.append(
                    '<p class="note">No interface information for the failing tasks: the rows carry no interface '
                    "diagnostics, and without <code>--dataset</code> and the replies (in the rows or "
                    "<code>--completions</code>) the report cannot read the ports itself.</p>"
                    if v.failing_tasks
                    else '<p class="note">No failing tasks.</p>'
                )
                continue
            for iv in v.interfaces:
                out.append(_interface(ri, iv))
        return "".join(out)

    def training(self) -> str:
        out = []
        for t in self.r.training:
            out.append(f"<h3>{e(t.run.label)}</h3>")
            if not t.groups:
                out.append(
                    '<p class="note">No known metric in this metrics.jsonl (reward, stage rates, KL, entropy, '
                    "tokens, time).</p>"
                )
                continue
            for title, series in t.groups.items():
                out.append(self.plot("lines", title, [(s.key, s.points) for s in series]))
            rows = []
            for title, series in t.groups.items():
                for s in series:
                    vals = s.values
                    rows.append(
                        [
                            e(title),
                            f"<code>{e(s.key)}</code>",
                            e(len(vals)),
                            e(_g(vals[0])),
                            e(_g(vals[-1])),
                            e(_g(min(vals))),
                            e(_g(max(vals))),
                        ]
                    )
            out.append(
                table(["group", "metric", "steps", "first", "last", "min", "max"], rows, (2, 3, 4, 5, 6))
            )
        return "".join(out)

    def compare(self) -> str:
        assert self.r.compare is not None and self.r.compare_labels is not None
        a, b = self.r.compare_labels
        deltas = self.r.compare
        counts = {
            k: sum(d.change == k for d in deltas) for k in ("better", "worse", "same", "only-a", "only-b")
        }
        out = [
            f"<p>Per task, <b>{e(b)}</b> against <b>{e(a)}</b>: pass rate first, mean reward when the pass rate "
            f"is equal. {counts['better']} better, {counts['worse']} worse, {counts['same']} unchanged"
            + (f", {counts['only-a']} only in {e(a)}" if counts["only-a"] else "")
            + (f", {counts['only-b']} only in {e(b)}" if counts["only-b"] else "")
            + ".</p>"
        ]
        both = [d for d in deltas if d.a and d.b]
        if both:
            out.append(
                self.plot(
                    "scatter",
                    [(d.a[1] / d.a[0], d.b[1] / d.b[0]) for d in both],  # type: ignore[index]
                    f"pass rate, {a}",
                    f"pass rate, {b}",
                )
            )
        for kind, title in (
            ("worse", "Worse"),
            ("better", "Better"),
            ("only-a", f"Only in {a}"),
            ("only-b", f"Only in {b}"),
        ):
            ds = [d for d in deltas if d.change == kind]
            if not ds:
                continue
            out.append(f"<h3>{e(title)} ({len(ds)})</h3>")
            out.append(
                table(
                    [
                        "task",
                        f"passed ({a})",
                        f"passed ({b})",
                        f"mean reward ({a})",
                        f"mean reward ({b})",
                        "",
                    ],
                    [_delta_row(d) for d in ds[:100]],
                    (1, 2, 3, 4),
                )
            )
        return "".join(out)

    def samples(self) -> str:
        out = []
        for ri, v in enumerate(self.r.results):
            if len(self.r.results) > 1:
                out.append(f"<h3>{e(v.run.label)}</h3>")
            failing = sum(not s.passed for s in v.samples)
            shown = [s for s in v.samples if s.index in set(v.detailed)]
            out.append(
                f'<p class="note">{len(shown)} of {failing} failing replies shown (every example the other '
                "sections link to is here).</p>"
            )
            out += [_sample(ri, s) for s in shown]
        return "".join(out)

    def settings(self) -> str:
        rows = []
        for v in self.r.results:
            rows.append(
                [
                    e(v.run.label),
                    e("results"),
                    f"<code>{e(v.run.path)}</code>",
                    e(v.run.producer or "-"),
                    e(len(v.samples)),
                ]
            )
        for t in self.r.training:
            rows.append(
                [e(t.run.label), e("training"), f"<code>{e(t.run.path)}</code>", "-", e(len(t.run.steps))]
            )
        out = [table(["run", "kind", "file", "model and sampler", "rows"], rows, (4,))]
        for v in self.r.results:
            if v.run.settings:
                out.append(f"<h3>{e(v.run.label)}: settings recorded in the rows</h3>")
                out.append(
                    table(
                        ["setting", "value"],
                        [
                            [f"<code>{e(k)}</code>", f"<code>{e(_json(val))}</code>"]
                            for k, val in v.run.settings.items()
                        ],
                    )
                )
        return "".join(out)


def _g(x: float) -> str:
    return f"{x:.4g}"


def _json(v: Any) -> str:
    return _cut(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str), 600)


def _bins(values: Sequence[float], top: float | None, n: int = 10) -> list[tuple[str, int]]:
    if not values:
        return []
    hi = max([top or 0.0, *values]) or 1.0
    lo = min([0.0, *values])
    width = (hi - lo) / n
    counts = [0] * n
    for x in values:
        counts[min(n - 1, int((x - lo) / width))] += 1
    return [(f"{lo + i * width:.2f} - {lo + (i + 1) * width:.2f}", c) for i, c in enumerate(counts)]


def _cause_cell(c: Cause) -> str:
    derived = (
        ' <span class="derived" title="computed from the replies">from replies</span>' if c.derived else ""
    )
    ex = (
        ""
        if c.subjects or c.code.startswith("status:") or c.example == c.label
        else (f'<div class="muted">e.g. {e(_cut(c.example, 300))}</div>')
    )
    return f'<span class="cause">{e(c.label)}</span>{derived}{ex}'


def _examples(ri: int, v: ResultsView, c: Cause) -> str:
    by = {s.index: s for s in v.samples}
    links = [f'<a href="#{anchor(ri, i)}">{e(by[i].task_id)} #{e(by[i].sample)}</a>' for i in c.samples[:3]]
    return ", ".join(links)


def _port(p: PortInfo | None) -> str:
    if p is None:
        return '<span class="muted">—</span>'
    bits = []
    if p.direction and p.direction != "unknown":
        bits.append(e(p.direction))
    width = f"[{e(p.width)}]" if p.width is not None else ""
    return " ".join([*bits, f"<code>{e(p.name)}</code>{width}"])


def _interface(ri: int, iv: InterfaceView) -> str:
    head = (
        f'<h3>{e(iv.task_id)} <span class="muted">(<a href="#{anchor(ri, iv.sample_index)}">sample</a>; '
        f"module <code>{e(iv.module or '?')}</code>)</span></h3>"
    )
    src = f"expected from {iv.expected_from or '?'}, generated from {iv.generated_from or '?'}"
    if iv.partial:
        src += "; only the ports the diagnostics name (the others matched)"
    rows = [[_port(r.expected), _port(r.generated), badge(r.status), e(r.detail)] for r in iv.rows]
    note = f'<p class="note">{e(iv.note)}</p>' if iv.note else ""
    body = table(["expected", "generated", "", ""], rows) if rows else ""
    if rows and not iv.problems and not iv.note:  # the interface is right: the failure is elsewhere
        body = (
            f"<details><summary>interface matches ({len(rows)} ports): the failure is elsewhere</summary>"
            f"{body}</details>"
        )
    return head + f'<p class="note">{e(src)}</p>' + note + body


def _delta_row(d: TaskDelta) -> list[str]:
    def cell(x: tuple[int, int, float] | None, which: int) -> str:
        if x is None:
            return "-"
        return f"{x[1]}/{x[0]}" if which == 0 else f"{x[2]:.3f}"

    return [e(d.task_id), e(cell(d.a, 0)), e(cell(d.b, 0)), e(cell(d.a, 1)), e(cell(d.b, 1)), badge(d.change)]


def _sample(ri: int, s: Sample) -> str:
    norm = f" ({pct(s.normalized)} of max)" if s.normalized is not None else ""
    head = (
        f'<article id="{anchor(ri, s.index)}"><h3>{e(s.task_id)} #{e(s.sample)} '
        f"{badge('passed' if s.passed else 'failed')}</h3>"
        f'<p class="muted">reward {e(num(s.reward))}{e(norm)}'
        + (f" · category {e(s.category)}" if s.category else "")
        + (f" · difficulty {e(s.difficulty)}" if s.difficulty else "")
        + (f" · tests {e(s.tests[0])}/{e(s.tests[1])}" if s.tests and len(s.tests) == 2 else "")
        + "</p>"
    )
    rows = []
    for name, st in s.stages.items():
        diags = "".join(
            f"<li>{e(f.severity)}"
            + (f" <code>{e(f.code)}</code>" if f.code else "")
            # file:line, or the file alone (a finding about a missing file has no line: never `file::`)
            + (f" {e(f.file)}" + (f":{e(f.line)}" if f.line else "") if f.file else "")
            + f": {e(_cut(f.message, 600))}"
            + (' <span class="derived">from reply</span>' if f.derived else "")
            + "</li>"
            for f in st.diagnostics[:12]
        )
        more = f"<li>… {len(st.diagnostics) - 12} more</li>" if len(st.diagnostics) > 12 else ""
        rows.append(
            [
                e(name),
                badge(st.status),
                e(num(st.score, 2)),
                f'<ul class="diag">{diags}{more}</ul>' if diags else "",
            ]
        )
    body = table(["stage", "status", "score", "diagnostics"], rows, (2,))
    # The row's own feedback is the whole reward's (every stage's included); older rows have the stages' only.
    feedback = s.feedback or "\n".join(st.feedback for st in s.stages.values() if st.feedback)
    if feedback:
        body += f"<details><summary>feedback</summary><pre>{e(_cut(feedback))}</pre></details>"
    if s.reply is not None:
        body += f"<details><summary>reply ({len(s.reply)} characters)</summary><pre>{e(_cut(s.reply, MAX_REPLY))}</pre></details>"
    elif s.files:
        for path, text in list(s.files.items())[:5]:
            body += f"<details><summary>{e(path)}</summary><pre>{e(_cut(text, MAX_REPLY))}</pre></details>"
    return head + body + "</article>"


def render_html(report: Report, *, plots: bool = True) -> str:
    """The page. `plots=False` (or matplotlib missing) leaves the tables only, with a note where a plot would be."""
    plotter = None
    note = ""
    if plots:
        from rtlreward_report.plots import PlotsUnavailable

        try:
            plotter = Plotter()
        except PlotsUnavailable as exc:
            note = str(exc)
    page = _Page(report, plotter, note)
    secs = sections_for(report)
    body = []
    for sid, title in secs:
        if sid == "categories":
            content = page.groups("categories", "category")
        elif sid == "difficulties":
            content = page.groups("difficulties", "difficulty")
        else:
            content = getattr(page, sid)()
        body.append(f'<section id="{sid}" data-section="{sid}"><h2>{e(title)}</h2>{content}</section>')
    runs = ", ".join(
        f"{v.run.label} ({len(v.samples)} results{'; ' + v.run.producer if v.run.producer else ''})"
        for v in report.results
    ) + "".join(
        f"{', ' if report.results or i else ''}{t.run.label} (training, {len(t.run.steps)} steps)"
        for i, t in enumerate(report.training)
    )
    nav = "".join(f'<a href="#{sid}">{e(title)}</a>' for sid, title in secs)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(report.title)}</title><style>{CSS}</style></head><body>"
        f'<header><h1>{e(report.title)}</h1><p class="sub">{e(runs)}</p></header>'
        f"<nav>{nav}</nav><main>{''.join(body)}</main>"
        f"<footer>rtlreward {e(__version__)} · self-contained page: no script, nothing loaded from the network"
        "</footer></body></html>\n"
    )
