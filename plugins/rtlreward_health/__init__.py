"""`rtlreward tasks check DATASET`: task health, computed once per dataset and toolchain and cached.

A verdict is only as good as its harness. This plugin measures, per task: does the reference pass its own harness
here (over several seeds: deterministic or flaky; if never: broken, with the cause), how long it takes (a calibrated
time limit for training), and how strong the harness is (the share of non-equivalent mutants of the reference it
fails; a harness that passes one is weak, and the report shows that mutant). `eval --health` and `train --health`
read the report to skip broken tasks and shorten time limits (rtlreward.health).
"""

from __future__ import annotations

from rtlreward import hookimpl

__version__ = "1.0"


@hookimpl
def rtlreward_register_commands(app):
    from rtlreward_health.cli import add_commands

    add_commands(app)
