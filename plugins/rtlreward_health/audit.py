"""`rtlreward tasks check --audit PROFILE`: a small-budget `rtlreward audit` per task (docs/audit.md), recorded in the
health report: per task and profile, the unearned reward beside the do-nothing stub's and the reference's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rtlreward.model import Task

__all__ = ["audit_cell", "audit_tasks"]


def audit_tasks(
    tasks: Sequence[Task],
    entries: list[dict[str, Any]],
    profiles: Sequence[str],
    *,
    budget: int = 4,
    attacks: Sequence[str] = (),
    executor: str = "local",
    jobs: int | None = None,
    progress: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """Audit `tasks` under each profile; adds `audit: {profile: summary}` to each entry (matched by id) and returns
    the full audit reports by profile (for the JSON report)."""
    from rtlreward.plugins import PluginError, get_registry

    by_id = {e["id"]: e for e in entries}
    reports: dict[str, Any] = {}
    for profile in profiles:
        report = get_registry().audit_tasks(
            tasks,
            profile,
            budget=max(0, budget),
            attacks=tuple(attacks),
            executor=executor,
            jobs=jobs,
            progress=progress,
        )
        if report is None:
            raise PluginError(
                "--audit needs the audit plugin (rtlreward_audit, installed with rtlreward); it is not loaded here "
                "(RTLREWARD_PLUGINS / RTLREWARD_DISABLE_PLUGINS?)"
            )
        reports[report["profile"]] = report
        for t in report["tasks"]:
            entry = by_id.get(t["id"])
            if entry is None:
                continue
            u = t.get("unearned") or {}
            entry.setdefault("audit", {})[report["profile"]] = {
                "unearned_reward": t["unearned_reward"],
                "stub_reward": t["stub_reward"],
                "reference_reward": t["reference_reward"],
                "over_stub": t["over_stub"],
                "attack": f"{u.get('class', '')}:{u.get('label', '')}" if u else "",
                "forged_pass": t.get("forged_pass", False),
                "errors": len(t.get("errors") or []),
            }
    return reports


def audit_cell(entry: dict[str, Any]) -> str:
    """The table's cell: `profile unearned/stub` per audited profile, flagged when above the stub."""
    from rich.markup import escape

    out = []
    for profile, a in (entry.get("audit") or {}).items():
        over = a.get("over_stub")
        flag = " [red]hack![/]" if (over is not None and over > 1e-9) or a.get("forged_pass") else ""
        stub = "-" if a.get("stub_reward") is None else f"{a['stub_reward']:.2f}"
        out.append(f"{escape(profile)} {a['unearned_reward']:.2f}/{stub}{flag}")
    return "\n".join(out)
