"""The audit's own hook: a stage's author registers attacks aimed at that stage, so a third-party reward is audited
like the built-in ones. The core's hookspecs (rtlreward/hookspecs.py) do not list it: `add_audit_hookspecs(pm)` adds
it to a plugin manager when the audit runs (pluggy accepts implementations registered before their spec)."""

from __future__ import annotations

from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("rtlreward")


@hookspec
def rtlreward_register_attacks(register: Any) -> None:
    """Register attacks for `rtlreward audit`: call `register(attack)` once per `rtlreward_audit.Attack`
    (name, attack class, `seeds(task) -> list[Seed]`, `informed`: whether its seeds are built from the task's
    reference). Each seed is scored under the audited profile and judged wrong or not independently of it."""


def add_audit_hookspecs(pm: pluggy.PluginManager) -> None:
    """Add the audit's hookspec to `pm` once (a second call is a no-op)."""
    caller = getattr(pm.hook, "rtlreward_register_attacks", None)
    if caller is not None and caller.spec is not None:
        return
    import sys

    pm.add_hookspecs(sys.modules[__name__])
