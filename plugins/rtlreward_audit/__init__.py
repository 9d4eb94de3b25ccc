"""`rtlreward audit DATASET --profile P`: search a reward for hacks before a policy does.

For each task, seed replies built from the task's interface (stubs, names a design should not know, text only one
tool reads, extra ports, simulation control, printed pass lines, format tricks; single-site mutants of the
reference as near misses) are scored under the profile, judged wrong or not independently (equivalence to the
reference with a larger budget, or the task's harness), and searched on with text mutations kept when the reward
rises while the design stays wrong. The report: per task, the best unearned reward, its reply, how it was judged
wrong, its attack class, the reference's and the do-nothing stub's reward, the margin. docs/audit.md.

Other plugins add attacks aimed at their own stages through the `rtlreward_register_attacks(register)` hook
(rtlreward_audit.hookspecs), calling `register(Attack(...))`.
"""

from __future__ import annotations

from rtlreward import hookimpl
from rtlreward_audit.attacks import BUILTIN_ATTACKS, Attack, Seed
from rtlreward_audit.audit import AuditSettings, run_audit

__all__ = ["Attack", "AuditSettings", "Seed", "run_audit"]
__version__ = "0.1"


@hookimpl
def rtlreward_register_commands(app):
    from rtlreward_audit.cli import add_commands

    add_commands(app)


@hookimpl
def rtlreward_register_attacks(register):
    for attack in BUILTIN_ATTACKS:
        register(attack)


@hookimpl
def rtlreward_audit_tasks(tasks, profile, budget, attacks, executor, jobs, progress):
    settings = AuditSettings(
        profile=profile, budget=max(0, int(budget)), attacks=tuple(attacks), executor=executor, jobs=jobs
    )
    return run_audit(list(tasks), settings, progress=progress)
