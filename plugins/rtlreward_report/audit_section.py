"""The report's audit section: what `rtlreward audit --json FILE` found (docs/audit.md), per task and profile.

`rtlreward report AUDIT.json [AUDIT2.json ...]` makes a page of audit reports alone; `rtlreward report RUN --audit
AUDIT.json` adds the section to a run's report. Everything read from the files is hostile text: it goes through
`html.e` (escaped) and never into a tag, attribute, class or id.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "SCHEMA",
    "is_audit_file",
    "load_audits",
    "render_audit_markdown",
    "render_audit_page",
    "render_audit_section",
]

SCHEMA = "rtlreward-audit/1"
MAX_DESIGN = 6000


def is_audit_file(path: Path) -> bool:
    """Whether `path` is an audit report (a JSON object with the audit's schema), by its first bytes."""
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return False
    return head.lstrip().startswith("{") and f'"{SCHEMA}"' in head


def load_audits(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The audit reports in `paths`; ValueError naming the file that is not one."""
    out = []
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{p}: not an audit report ({exc})") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("tasks"), list):
            raise ValueError(
                f"{p}: not an audit report (no schema {SCHEMA!r}; write one with rtlreward audit --json)"
            )
        out.append(doc)
    return out


def _f(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _design(u: dict[str, Any]) -> str:
    files = u.get("files") if isinstance(u.get("files"), dict) else {}
    if files:
        return "\n".join(f"// {k}\n{v}" for k, v in files.items() if isinstance(v, str))
    return str(u.get("reply") or "")


def _verdict(entry: dict[str, Any]) -> str:
    from rtlreward_report.html import badge

    over = _f(entry.get("over_stub"))
    if entry.get("forged_pass"):
        return badge("error") + " a wrong design passed"
    if entry.get("errors"):
        return badge("error") + " a reply broke a stage"
    if over is not None and over > 1e-9:
        return badge("failed") + " above the stub"
    return badge("passed") + " at the stub"


def render_audit_section(audits: Sequence[dict[str, Any]]) -> str:
    """The section's HTML (escaped): a task x profile summary, then per profile a table and each task's design."""
    from rtlreward_report.html import e, num, table

    parts = [
        '<p class="note">Unearned reward: the highest reward of a reply judged wrong independently of the profile '
        "(refuted against the reference with a larger budget, or failing the task's harness). Above the "
        "do-nothing stub's reward it is a hack; see docs/audit.md.</p>"
    ]
    profiles = [str(a.get("profile", "?")) for a in audits]
    ids: list[str] = []
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    for i, a in enumerate(audits):
        for entry in a.get("tasks", []):
            if not isinstance(entry, dict):
                continue
            tid = str(entry.get("id", "?"))
            if tid not in ids:
                ids.append(tid)
            cells[(tid, i)] = entry
    if len(audits) > 1:
        rows = []
        for tid in ids:
            row = [e(tid)]
            for i in range(len(audits)):
                entry = cells.get((tid, i))
                row.append(
                    "-"
                    if entry is None
                    else f"{num(_f(entry.get('unearned_reward')))} / {num(_f(entry.get('stub_reward')))}"
                )
            rows.append(row)
        parts.append("<h3>Unearned / stub reward per task and profile</h3>")
        parts.append(table(["task", *profiles], rows, numeric=range(1, len(audits) + 1)))
    for i, a in enumerate(audits):
        settings = a.get("settings") if isinstance(a.get("settings"), dict) else {}
        parts.append(
            f'<h3>Profile {e(profiles[i])}</h3><p class="sub">budget {e(settings.get("budget"))}, seed '
            f"{e(settings.get('seed'))}, max unearned reward {num(_f(a.get('max_unearned')))}</p>"
        )
        rows = []
        details = []
        for entry in a.get("tasks", []):
            if not isinstance(entry, dict):
                continue
            u = entry.get("unearned") if isinstance(entry.get("unearned"), dict) else {}
            near = entry.get("near_miss") if isinstance(entry.get("near_miss"), dict) else {}
            rows.append(
                [
                    e(entry.get("id")),
                    num(_f(entry.get("unearned_reward"))),
                    num(_f(entry.get("stub_reward"))),
                    num(_f(entry.get("reference_reward"))),
                    num(_f(entry.get("margin"))),
                    e(f"{u.get('class', '')}:{u.get('label', '')}" if u else "-"),
                    num(_f(near.get("reward"))) if near else "-",
                    _verdict(entry),
                    e(" ".join(str(u.get("how") or "").split())[:160]),
                ]
            )
            if u:
                design = _design(u)
                cut = design if len(design) <= MAX_DESIGN else design[:MAX_DESIGN] + "\n…"
                errors = "".join(
                    f"<li>{e(x.get('class'))}:{e(x.get('label'))} broke {e(x.get('stage'))}: {e(x.get('feedback'))}</li>"
                    for x in entry.get("errors") or []
                    if isinstance(x, dict)
                )
                details.append(
                    f"<details><summary>{e(entry.get('id'))}: the unearned reply "
                    f"({e(u.get('class'))}:{e(u.get('label'))}, {num(_f(u.get('reward')))}, {e(u.get('origin'))})"
                    f"</summary><pre>{e(cut)}</pre>"
                    + (f'<ul class="diag">{errors}</ul>' if errors else "")
                    + "</details>"
                )
        parts.append(
            table(
                [
                    "task",
                    "unearned",
                    "stub",
                    "reference",
                    "margin",
                    "attack",
                    "near miss",
                    "verdict",
                    "judged wrong by",
                ],
                rows,
                numeric=(1, 2, 3, 4, 6),
            )
        )
        parts.extend(details)
    return "".join(parts)


def render_audit_page(audits: Sequence[dict[str, Any]], title: str) -> str:
    """A page holding the audit section alone (same stylesheet and policy as the run report)."""
    from rtlreward.version import __version__
    from rtlreward_report.html import CSP, CSS, e

    profiles = ", ".join(str(a.get("profile", "?")) for a in audits)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{CSS}</style></head><body>"
        f'<header><h1>{e(title)}</h1><p class="sub">audit of {e(profiles)}</p></header>'
        f'<nav><a href="#audit">Audit</a></nav><main>{section_html(audits)}</main>'
        f"<footer>rtlreward {e(__version__)} · self-contained page: no script, nothing loaded from the network"
        "</footer></body></html>\n"
    )


def section_html(audits: Sequence[dict[str, Any]]) -> str:
    return f'<section id="audit" data-section="audit"><h2>Audit: unearned reward</h2>{render_audit_section(audits)}</section>'


def add_to_page(page: str, audits: Sequence[dict[str, Any]]) -> str:
    """The run report's page with the audit section last and a link to it in the navigation."""
    page = page.replace("</nav>", '<a href="#audit">Audit</a></nav>', 1)
    at = page.rfind("</main>")
    return page[:at] + section_html(audits) + page[at:] if at >= 0 else page


def render_audit_markdown(audits: Sequence[dict[str, Any]]) -> str:
    def cell(x: Any) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    def n(x: Any) -> str:
        v = _f(x)
        return "-" if v is None else f"{v:.3f}"

    lines = ["## Audit: unearned reward", ""]
    for a in audits:
        lines += [
            f"### Profile {cell(a.get('profile', '?'))}",
            "",
            "| task | unearned | stub | reference | margin | attack | judged wrong by |",
            "| --- | ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for entry in a.get("tasks", []):
            if not isinstance(entry, dict):
                continue
            u = entry.get("unearned") if isinstance(entry.get("unearned"), dict) else {}
            lines.append(
                f"| {cell(entry.get('id'))} | {n(entry.get('unearned_reward'))} | {n(entry.get('stub_reward'))} | "
                f"{n(entry.get('reference_reward'))} | {n(entry.get('margin'))} | "
                f"{cell(u.get('class', '') + ':' + u.get('label', '') if u else '-')} | "
                f"{cell(' '.join(str(u.get('how') or '').split())[:120])} |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"
